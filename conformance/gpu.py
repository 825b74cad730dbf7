"""GPU conformance of the AOT library in one device call (no DSL on the runner).

    python -m decode_topk.conformance.gpu [--out DIR] [--rows 100000] [--width 73728]
                                    [--level full] [--budget 540] [--skip-batch] [--skip-suite]

1. Library and device facts: arch, kernel hash, variants, resident clusters per build.
2. The big batch: `--rows` rows x `--width` logits made on the GPU (conformance/gpu_check.py:
   random bits, indexer-like rho 0.9, few values, plateaus, mostly -inf, monotone,
   specials, needles; lengths at the boundaries, uniform and full; garbage and NaN past
   every length), every k x mode, on the policy's build and on every build forced; out
   poisoned before each launch; checked on the GPU against the contract (0 violations).
   Then the traced variant on the first `--trace-rows` rows on the policy's build: its
   trace against the model's (reference.model.simulate, same build) field by field, and
   its output through the NumPy checker.
3. The conformance suite: `python -m decode_topk.conformance --impl aot --level LEVEL --build all`
   (trace equality with the model), in a subprocess with the time left of `--budget`.

Full results go to DIR (default $OUT, else build/gpu): gpu_conformance.json,
conformance_<level>.txt; the short table is printed last. Exit status 1 on any violation
or error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from . import gpu_check as tc
from decode_topk.kernel import aot_loader
from decode_topk.kernel import policy

from . import gpu_impl


POISON = gpu_impl.POISON
DEVICE = "cuda"  # tests run this tool on "cpu" with a stand-in for the library


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


class Timer:
    """Milliseconds between start() and stop() (CUDA events on the GPU)."""

    def start(self):
        if DEVICE == "cuda":
            self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t = time.perf_counter()

    def stop(self):
        if DEVICE == "cuda":
            self.b.record()
            torch.cuda.synchronize()
            return self.a.elapsed_time(self.b)
        return (time.perf_counter() - self.t) * 1e3


def facts():
    info = aot_loader.library_info()
    dev = torch.cuda.get_device_properties(0) if DEVICE == "cuda" else None
    resident = {}
    for k in policy.KS:
        for block_mode in (False, True):
            for build in policy.BUILDS:
                n = aot_loader.max_active_clusters(k, build.cluster, build.vectors, block_mode, False)
                resident[f"k{k}_{'block' if block_mode else 'token'}_{build.name}"] = n
    return {"gpu": dev.name if dev else DEVICE, "sms": dev.multi_processor_count if dev else None,
            "torch": torch.__version__,
            "arch": info["arch"], "kernel_source_sha256": info["kernel_source_sha256"],
            "variants": len(info["variants"]), "resident": resident}


def build_label(build):
    return "policy" if build is None else build.name


def big_batch(rows, width, seed, trace_rows, results):
    t0 = time.perf_counter()
    logits, lengths, kind = tc.make_batch(rows, width, seed=seed, device=DEVICE)
    sync()
    results["batch"] = {"rows": rows, "width": width, "seed": seed, "generate_s": round(time.perf_counter() - t0, 2),
                        "kinds": {name: int((kind == i).sum()) for i, name in enumerate(tc.KINDS)},
                        "runs": []}
    print(f"batch: {rows} x {width} generated in {results['batch']['generate_s']} s", flush=True)
    for block_mode in (False, True):
        stats = tc.row_stats(logits, lengths, policy.KS, block_mode)
        n = tc.element_count(lengths, block_mode)
        for k in policy.KS:
            long_rows = int((n > k).sum())
            for build in [None] + [b for b in policy.BUILDS if logits.shape[1] <= b.capacity_in(block_mode)]:
                rec = {"mode": "block" if block_mode else "token", "k": k, "build": build_label(build),
                       "rows": rows, "long_rows": long_rows}
                try:
                    out = torch.full((rows, k), POISON, dtype=torch.int32, device=DEVICE)
                    timer = Timer()
                    if build is None:
                        res = aot_loader.resident_for(k, block_mode, False)
                        rec["build"] = f"policy={policy.build_for(rows, width, res, block_mode, k).name}"
                    timer.start()
                    aot_loader.decode_topk_aot(logits, lengths, k, out=out, block_mode=block_mode, build=build)
                    rec["kernel_ms"] = round(timer.stop(), 3)
                    counts, offenders = tc.check(logits, lengths, k, block_mode, out, stats)
                    rec["violations"] = {r: c for r, c in counts.items() if c}
                    rec["violating_rows"] = int(sum(counts.values()))
                    rec["first_rows"] = offenders
                    rec["first_rows_detail"] = [
                        {"row": r, "length": int(lengths[r]), "kind": tc.KINDS[int(kind[r])]} for r in offenders]
                except Exception as e:  # noqa: BLE001
                    rec["error"] = f"{type(e).__name__}: {e}"
                    rec["traceback"] = traceback.format_exc()
                results["batch"]["runs"].append(rec)
                print(f"  {rec['mode']:5} k={k:4} {rec['build']:>22}: "
                      f"{rec.get('error') or str(rec['violating_rows']) + ' violating rows'} "
                      f"({rec.get('kernel_ms', '-')} ms)", flush=True)
    # traced variant on a slice vs the model (numba) and the NumPy checker
    if trace_rows:
        from .checker import check as np_check
        from decode_topk.reference.model import simulate
        sl = slice(0, min(trace_rows, rows))
        bits = logits[sl].contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
        lens = lengths[sl].cpu().numpy()
        results["batch"]["trace"] = []
        for block_mode in (False, True):
            for k in policy.KS:
                rec = {"mode": "block" if block_mode else "token", "k": k, "rows": bits.shape[0]}
                try:
                    out, trace, build = gpu_impl.run_numpy(aot_loader.AOT, bits, lens, k, block_mode, None, trace=True)
                    rec["build"] = build.name
                    t0 = time.perf_counter()
                    m_out, m_trace = simulate(bits, lens, k, block_mode, build=build)
                    rec["model_s"] = round(time.perf_counter() - t0, 2)
                    diff = np.argwhere(m_trace != trace)
                    rec["trace_mismatch_rows"] = int(np.unique(diff[:, 0]).size) if diff.size else 0
                    rec["trace_first"] = [
                        {"row": int(r), "field": policy.TRACE_FIELDS[f], "model": int(m_trace[r, f]),
                         "kernel": int(trace[r, f])} for r, f in diff[:5]]
                    rec["checker_violations"] = len(np_check(bits, lens, k, block_mode, out, strict=True))
                    rec["paths"] = {p: int((trace[:, 0] == i).sum()) for i, p in enumerate(("short", "sampled",
                                                                                              "direct"))}
                    rec["fallbacks"] = {"overflow": int((trace[:, 1] == 1).sum()),
                                        "underflow": int((trace[:, 1] == 2).sum())}
                except Exception as e:  # noqa: BLE001
                    rec["error"] = f"{type(e).__name__}: {e}"
                    rec["traceback"] = traceback.format_exc()
                results["batch"]["trace"].append(rec)
                print(f"  trace {rec['mode']:5} k={k:4} {rec.get('build', '')}: "
                      f"{rec.get('error') or str(rec['trace_mismatch_rows']) + ' trace rows differ, ' + str(rec['checker_violations']) + ' checker violations'}",
                      flush=True)
    del logits, lengths
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def suite(level, out_dir, timeout, results):
    path = out_dir / f"conformance_{level}.txt"
    cmd = [sys.executable, "-m", "decode_topk.conformance", "--impl", "aot", "--level", level, "--build", "all"]
    rec = {"command": " ".join(cmd[1:]), "output": str(path)}
    t0 = time.perf_counter()
    try:
        with open(path, "w") as f:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
        rec["rc"] = p.returncode
    except subprocess.TimeoutExpired:
        rec["rc"] = None
        rec["error"] = f"timed out after {timeout:.0f} s (partial output in {path.name})"
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    text = path.read_text(errors="replace")
    rec["totals"] = [line for line in text.splitlines() if line.startswith("total:")]
    rec["tail"] = text.splitlines()[-15:]
    results["suite"] = rec


def table(results):
    lines = ["| part | mode | k | build | rows | result | kernel ms |", "|---|---|---|---|---|---|---|"]
    for r in results.get("batch", {}).get("runs", []):
        res = r.get("error") or (f"{r['violating_rows']} violating rows" +
                                 (f" {r['violations']}" if r["violations"] else ""))
        lines.append(f"| batch | {r['mode']} | {r['k']} | {r['build']} | {r['rows']} | {res} | "
                     f"{r.get('kernel_ms', '-')} |")
    for r in results.get("batch", {}).get("trace", []):
        res = r.get("error") or (f"trace rows differing {r['trace_mismatch_rows']}, checker "
                                 f"{r['checker_violations']}, paths {r['paths']}, fallbacks {r['fallbacks']}")
        lines.append(f"| trace | {r['mode']} | {r['k']} | {r.get('build', '')} | {r['rows']} | {res} | |")
    s = results.get("suite")
    if s:
        lines.append(f"| suite | {s['command']} | | | | rc={s['rc']} {s.get('error', '')} "
                     f"{'; '.join(s['totals'])} | {s['seconds']} s |")
    return "\n".join(lines)


def failed(results):
    bad = False
    for r in results.get("batch", {}).get("runs", []):
        bad |= bool(r.get("error")) or r.get("violating_rows", 1) != 0
    for r in results.get("batch", {}).get("trace", []):
        bad |= bool(r.get("error")) or r.get("trace_mismatch_rows", 1) != 0 or r.get("checker_violations", 1) != 0
    s = results.get("suite")
    if s:
        bad |= s.get("rc") != 0
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path.cwd() / "build" / "gpu"),
                    help="results folder (default $OUT, else ./build/gpu)")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--width", type=int, default=73_728)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--trace-rows", type=int, default=2048)
    ap.add_argument("--level", default="full")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run (suite gets the rest)")
    ap.add_argument("--skip-batch", action="store_true")
    ap.add_argument("--skip-suite", action="store_true")
    args = ap.parse_args(argv)
    no_device = aot_loader.no_cuda_device_reason() if DEVICE == "cuda" else None  # "cpu": the tests' stand-in
    if no_device:  # one line and exit 2, not a traceback from deep inside torch
        print(f"decode_topk.conformance.gpu runs on a CUDA GPU: {no_device}", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {"args": vars(args)}
    try:
        results["facts"] = facts()
        print(json.dumps(results["facts"], indent=1), flush=True)
        if not args.skip_batch:
            big_batch(args.rows, args.width, args.seed, args.trace_rows, results)
        if not args.skip_suite:
            left = args.budget - (time.perf_counter() - t_start)
            suite(args.level, out_dir, max(30.0, left), results)
    except Exception as e:  # noqa: BLE001
        results["error"] = f"{type(e).__name__}: {e}"
        results["traceback"] = traceback.format_exc()
        print(results["traceback"], flush=True)
    results["seconds"] = round(time.perf_counter() - t_start, 1)
    (out_dir / "gpu_conformance.json").write_text(json.dumps(results, indent=1))
    if "suite" in results:
        print("\n".join(results["suite"]["tail"]))
    print("\n" + table(results))
    bad = failed(results) or "error" in results
    print(f"\n{'FAIL' if bad else 'PASS'} in {results['seconds']} s; details in {out_dir}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
