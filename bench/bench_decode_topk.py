"""DecodeTopK (AOT library) beside torch.topk on the GPU: the first timing table (issue 4).

    python bench/bench_decode_topk.py [--out DIR_OR_JSON] [--rows 1 8 64]
        [--widths 32768 131072 262144] [--ks 512 2048] [--modes token block] [--no-graph]

Data: indexer-like logits at rho = 0.9 (conformance.cases.indexer_keys/indexer_logits,
32 heads, D = 64; the rows of a width share the keys), every row at full length.
Every configuration is first checked with conformance.check (the contract) on its output;
an invalid one is reported and not timed.

Times are medians in microseconds from triton.testing.do_bench (it clears L2 between
repetitions; CUDA events around each call), after its warm-up:
- `dtk`: the library launched directly through ctypes with prepared arguments (what a
  caller holding a launcher pays);
- `dtk_api`: kernel.aot_loader.decode_topk_aot (validation, build choice, launch);
- `dtk_graph`: the direct launch replayed from a CUDA graph (host overhead removed), when
  capture works (--no-graph skips it);
- `torch`: torch.topk(logits, k) on the same tensor (block mode: the 8-logit block maxima
  by amax, then topk, since torch has no block top-k).
Without triton, CUDA events around 50 calls after 10 warm-up calls, median of 5.

Writes JSON (to DIR/bench_decode_topk.json, $OUT, or build/) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from conformance.cases import indexer_keys, indexer_logits  # noqa: E402
from conformance.checker import check  # noqa: E402
from kernel import aot_loader  # noqa: E402
from reference import policy  # noqa: E402

try:
    from triton.testing import do_bench
except Exception:  # noqa: BLE001
    do_bench = None


def bench_ms(fn):
    if do_bench is not None:
        return do_bench(fn, warmup=25, rep=100, return_mode="median")
    for _ in range(10):
        fn()
    samples = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(50):
            fn()
        b.record()
        torch.cuda.synchronize()
        samples.append(a.elapsed_time(b) / 50)
    return statistics.median(samples)


def graph_ms(fn):
    """Median ms of fn replayed from a CUDA graph (10 calls a graph), or None."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(10):
                fn()
        torch.cuda.synchronize()
        return bench_ms(g.replay) / 10
    except Exception as e:  # noqa: BLE001
        print(f"  (CUDA graph capture failed: {type(e).__name__}: {e})", flush=True)
        return None


def make_rows(rows, width, seed):
    rng = np.random.default_rng(seed)
    keys = indexer_keys(rng, width, 0.9, 64)
    bits = np.stack([indexer_logits(rng, keys, 32) for _ in range(rows)])
    return bits, np.full(rows, width, dtype=np.int32)


def direct_launcher(logits, lengths, out, k, block_mode, build):
    """A zero-validation launch of the library (arguments prepared once)."""
    lib = aot_loader.load_library()
    cluster, vectors = build
    rows, width = logits.shape
    args = (k, cluster, vectors, int(block_mode), 0, ctypes.c_void_p(logits.data_ptr()), rows, width,
            logits.stride(0) if rows > 1 else width + (-width) % 8, ctypes.c_void_p(lengths.data_ptr()),
            ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(0))
    launch = lib.dtk_launch

    def fn():
        err = launch(*args, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if err:
            raise RuntimeError(f"dtk_launch: {aot_loader.error_name(err)}")
    return fn


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build"))
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--widths", type=int, nargs="+", default=[32768, 131072, 262144])
    ap.add_argument("--ks", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--modes", nargs="+", default=["token", "block"])
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--no-graph", action="store_true")
    args = ap.parse_args(argv)
    out_path = Path(args.out)
    if out_path.suffix != ".json":
        out_path.mkdir(parents=True, exist_ok=True)
        out_path = out_path / "bench_decode_topk.json"
    dev = torch.cuda.get_device_properties(0)
    info = aot_loader.library_info()
    results = {"gpu": dev.name, "torch": torch.__version__, "arch": info["arch"],
               "kernel_source_sha256": info["kernel_source_sha256"], "timer": "triton.do_bench median"
               if do_bench else "cuda events median", "rows": []}
    print(f"{dev.name}, library {info['arch']} {info['kernel_source_sha256'][:12]}, timer: {results['timer']}",
          flush=True)
    for width in args.widths:
        t0 = time.perf_counter()
        all_bits, _ = make_rows(max(args.rows), width, args.seed + width)
        print(f"width {width}: data in {time.perf_counter() - t0:.1f} s", flush=True)
        for rows in args.rows:
            bits = all_bits[:rows]
            lengths_np = np.full(rows, width, dtype=np.int32)
            logits = aot_loader.to_device_bf16(bits)
            lengths = torch.from_numpy(lengths_np).cuda()
            for mode in args.modes:
                block_mode = mode == "block"
                for k in args.ks:
                    rec = {"rows": rows, "width": width, "k": k, "mode": mode}
                    try:
                        resident = aot_loader.resident_for(k, block_mode, False)
                        c, t, v = policy.build_for(rows, width, resident)
                        rec["build"] = f"{c}x{t}x{v}"
                        out = torch.full((rows, k), aot_loader.POISON, dtype=torch.int32, device="cuda")
                        aot_loader.decode_topk_aot(logits, lengths, k, out=out, block_mode=block_mode)
                        torch.cuda.synchronize()
                        violations = check(bits, lengths_np, k, block_mode, out.cpu().numpy())
                        rec["violations"] = len(violations)
                        if violations:
                            rec["first_violation"] = f"row {violations[0].row} {violations[0].reason}: " \
                                                     f"{violations[0].detail}"
                        else:
                            fn = direct_launcher(logits, lengths, out, k, block_mode, (c, v))
                            rec["dtk_us"] = round(bench_ms(fn) * 1e3, 2)
                            rec["dtk_api_us"] = round(bench_ms(lambda: aot_loader.decode_topk_aot(
                                logits, lengths, k, out=out, block_mode=block_mode)) * 1e3, 2)
                            if not args.no_graph:
                                g = graph_ms(fn)
                                rec["dtk_graph_us"] = round(g * 1e3, 2) if g is not None else None
                        if block_mode:
                            def torch_fn():
                                return torch.topk(logits.view(rows, width // 8, 8).amax(dim=2), k, dim=1)
                        else:
                            def torch_fn():
                                return torch.topk(logits, k, dim=1)
                        rec["torch_us"] = round(bench_ms(torch_fn) * 1e3, 2)
                        if rec.get("dtk_us"):
                            rec["speedup"] = round(rec["torch_us"] / rec["dtk_us"], 2)
                    except Exception as e:  # noqa: BLE001
                        rec["error"] = f"{type(e).__name__}: {e}"
                    results["rows"].append(rec)
                    print("  " + json.dumps(rec), flush=True)

    out_path.write_text(json.dumps(results, indent=1))
    head = "| rows | width | k | mode | build | ok | dtk us | dtk api us | dtk graph us | torch.topk us | speedup |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results["rows"]:
        ok = "ERROR " + r["error"][:60] if "error" in r else ("yes" if r["violations"] == 0 else
                                                              f"NO ({r['violations']})")
        lines.append(f"| {r['rows']} | {r['width']} | {r['k']} | {r['mode']} | {r.get('build', '')} | {ok} | "
                     f"{r.get('dtk_us', '-')} | {r.get('dtk_api_us', '-')} | {r.get('dtk_graph_us', '-')} | "
                     f"{r.get('torch_us', '-')} | {r.get('speedup', '-')} |")
    print(f"\nresults: {out_path}\n")
    print("\n".join(lines))
    return 0 if all(r.get("violations") == 0 and "error" not in r for r in results["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
