"""bench/spread_probe.cu on the GPU: checked bit for bit against DecodeTopK, then timed beside
it and the physical floor with bench/grid.py's timer (bench/NOTES.md session 38).

    nvcc -O3 -arch=sm_90a -shared -Xcompiler -fPIC -o build/spread_probe.so bench/spread_probe.cu
    python bench/spread_probe.py [--lib build/spread_probe.so] [--out probe.json]

For each point (rows x width x k, rows at the full width, data as grid.py's) and for the
edge rows below, the probe's output is compared with DecodeTopK's (the canonical answer,
SPEC 1.4) after a poisoned launch and after the timed replays; the probe's last-CTA modes
(A: the keys above the cutoff selected; B: K is the cutoff; fallbacks) are counted over
the checked launches. `--profile` instead stamps each phase of every CTA (thread 0's
%globaltimer) at PROFILE_POINTS and times the probe without its last CTA's work and with
one release a CTA (bench/NOTES.md session 39: the design was measured slower and
dropped). Needs a GPU, main's AOT library and .aot_floor.
"""

import argparse
import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grid  # noqa: E402
from spread_model import MODES  # noqa: E402

POINTS = [(1, 1048576, 512), (1, 1048576, 2048), (8, 524288, 512), (8, 524288, 2048),
          (1, 524288, 512), (1, 131072, 2048), (1, 131072, 512), (8, 131072, 2048),
          (32, 32768, 2048), (1, 262144, 512), (4, 1048576, 512), (64, 131072, 2048)]
DATA = ("rho0.9", "rho0.999", "gaussian")
SLOTS = 264  # two 512-thread CTAs an SM on 132 SMs


def vectors_for(rows, width):
    """The fewest vectors a thread whose rows x slices fit one wave (V 4: one CTA an SM)."""
    for v, room in ((1, SLOTS), (2, SLOTS), (4, SLOTS // 2)):
        if rows * -(-width // (4096 * v)) <= room:
            return v
    return 4


class Probe:
    def __init__(self, torch, path):
        self.torch = torch
        self.lib = ctypes.CDLL(str(path))
        self.lib.spread_workspace_words.restype = ctypes.c_longlong
        self.lib.spread_workspace_words.argtypes = [ctypes.c_int] * 3
        self.lib.spread_topk_launch.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                                ctypes.c_void_p]
        self.stats = torch.zeros(4, dtype=torch.int32, device="cuda")

    def workspace(self, rows, width, v):
        words = self.lib.spread_workspace_words(rows, width, v)
        return self.torch.zeros(words, dtype=self.torch.int32, device="cuda")

    def __call__(self, logits, lengths, k, out, v, ws, stats=False, stamps=None, variant=0):
        rows, width = logits.shape
        err = self.lib.spread_topk_launch(logits.data_ptr(), logits.stride(0), lengths.data_ptr(), out.data_ptr(),
                                          rows, width, k, v, ws.data_ptr(), self.stats.data_ptr() if stats else None,
                                          None if stamps is None else stamps.data_ptr(), variant,
                                          self.torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"spread_topk_launch: {err}")


def edge_cases(torch, width, seed=3):
    """(name, logits, lengths): rows that break top-k kernels, 8 rows of `width`."""
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    rows = 8
    base = torch.randn(rows, width, generator=g, device="cuda").to(torch.bfloat16)
    full = torch.full((rows,), width, dtype=torch.int32, device="cuda")
    one = torch.full((rows, width), 1.5, dtype=torch.bfloat16, device="cuda")
    few = (torch.randint(0, 3, (rows, width), generator=g, device="cuda").float()).to(torch.bfloat16)
    asc = torch.arange(width, device="cuda").float().div(width).to(torch.bfloat16).expand(rows, width).contiguous()
    nan = base.clone()
    nan.view(torch.int16)[:, ::97] = 0x7FC1
    nan.view(torch.int16)[:, 5::89] = -1  # 0xFFFF: a negative NaN
    inf = base.clone()
    inf[:, ::3] = float("-inf")
    inf[:, 7::1001] = float("inf")
    lengths = torch.tensor([width, width - 1, 513, 512, 2049, 4097, width // 3, 0], dtype=torch.int32, device="cuda")
    garbage = base.clone()
    for r in range(rows):
        garbage[r, int(lengths[r]):] = float("nan")
    return [("one-value", one, full), ("three-values", few, full), ("ascending", asc, full), ("nan", nan, full),
            ("inf", inf, full), ("lengths+nan-past", garbage, lengths)]


PROFILE_POINTS = [(1, 131072, 512), (1, 131072, 2048), (1, 1048576, 512), (8, 524288, 512), (32, 32768, 2048)]
STAMPS = ("start", "samples counted", "cutoff", "slice counted", "written", "ticket", "gathered (last)",
          "end (last)")
VARIANTS = {1: "thread 0's release only", 2: "no last-CTA work", 3: "both"}


def profile(torch, probe, timer, vectors):
    """Each CTA's stamps (thread 0's %globaltimer) after an L2 eviction, as microseconds from
    the first CTA's start (median and largest over the CTAs; the last CTAs' own for its
    last two), and the variants' times (bench/NOTES.md session 39)."""
    lines = []
    for rows, width, k in PROFILE_POINTS:
        logits = grid.make_logits(torch, "rho0.9", rows, width, 7)
        lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
        out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
        for v in dict.fromkeys([vectors_for(rows, width), *vectors]):
            slices = -(-width // (4096 * v))
            if slices > 512:  # the last CTA scans one slice a thread
                continue
            ctas = rows * slices
            ws = probe.workspace(rows, width, v)
            stamps = torch.zeros(ctas, 8, dtype=torch.int64, device="cuda")
            best = None
            for _ in range(5):  # the run with the earliest last end, of five
                stamps.zero_()
                timer.flush.zero_()
                probe(logits, lengths, k, out, v, ws, stamps=stamps)
                torch.cuda.synchronize()
                st = stamps.cpu().numpy().astype("int64")
                span = int(st[:, 7].max() - st[:, 0].min())
                if best is None or span < best[0]:
                    best = (span, st)
            st = best[1]
            t0 = st[:, 0].min()
            rel = (st - t0) / 1e3
            last = st[:, 7] > 0
            cells = []
            for i, name in enumerate(STAMPS):
                col = rel[last, i] if i >= 6 else rel[:, i]
                cells.append(f"{name} {float(sorted(col)[len(col) // 2]):.2f}/{float(col.max()):.2f}")
            times = {0: timer.us(lambda: probe(logits, lengths, k, out, v, ws))}
            for var in VARIANTS:
                times[var] = timer.us(lambda: probe(logits, lengths, k, out, v, ws, variant=var))
            line = (f"{rows} x {width} k{k} V{v} ({ctas} CTAs): " + "; ".join(cells) + " | us: " +
                    ", ".join(f"{VARIANTS.get(var, 'as is')} {t}" for var, t in times.items()))
            print(line, flush=True)
            lines.append({"rows": rows, "width": width, "k": k, "v": v, "stamps_us": rel.round(3).tolist(),
                          "times": {VARIANTS.get(var, "as is"): t for var, t in times.items()}})
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default="build/spread_probe.so")
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--also-vectors", type=int, nargs="*", default=[], choices=(1, 2, 4),
                    help="also check and time these V at every point (beside vectors_for's)")
    ap.add_argument("--profile", action="store_true",
                    help="only the stamps and the variants' times at PROFILE_POINTS (rho 0.9)")
    args = ap.parse_args(argv)

    import torch

    from decode_topk.kernel import aot_loader

    probe = Probe(torch, Path(args.lib).resolve())
    timer = grid.Timer(torch, 5, args.reps)
    phys = grid.phys_launcher(aot_loader, torch)
    poison = grid.POISON
    results = {"gpu": torch.cuda.get_device_name(), "points": [], "edges": []}

    def check(logits, lengths, k, v, ws):
        want = aot_loader.decode_topk_aot(logits, lengths, k)
        out = torch.full_like(want, poison)
        probe(logits, lengths, k, out, v, ws, stats=True)
        torch.cuda.synchronize()
        bad = (out != want).any(dim=1)
        return int(bad.sum()), out, want

    timer.warm_gpu()
    if args.profile:
        results["profile"] = profile(torch, probe, timer, args.also_vectors)
        if args.out:
            Path(args.out).write_text(json.dumps(results))
        return 0
    for k in (512, 2048):
        for width in (131072, 1048576):
            for name, logits, lengths in edge_cases(torch, width):
                v = vectors_for(logits.shape[0], width)
                ws = probe.workspace(logits.shape[0], width, v)
                probe.stats.zero_()
                bad, _, _ = check(logits, lengths, k, v, ws)
                modes = dict(zip(MODES, probe.stats.tolist()))
                results["edges"].append({"case": name, "width": width, "k": k, "v": v, "bad_rows": bad, "modes": modes})
                print(f"edge {name:18s} {width:8d} k{k:<5d} v{v} bad rows {bad} modes {modes}", flush=True)
    for kind in DATA:
        for rows, width, k in POINTS:
            logits = grid.make_logits(torch, kind, rows, width, 7)
            lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
            dtk_us = phys_us = None
            for v in dict.fromkeys([vectors_for(rows, width), *args.also_vectors]):
                if -(-width // (4096 * v)) > 512:
                    continue
                ws = probe.workspace(rows, width, v)
                probe.stats.zero_()
                bad, out, want = check(logits, lengths, k, v, ws)
                rec = {"data": kind, "rows": rows, "width": width, "k": k, "v": v, "bad_rows": bad}
                if not args.no_time and not bad:
                    out.fill_(poison)
                    rec["probe_us"] = timer.us(lambda: probe(logits, lengths, k, out, v, ws))
                    rec["bad_after_replays"] = int((out != want).any(dim=1).sum())
                    dtk_out = torch.empty_like(want)
                    if dtk_us is None:
                        dtk_us = timer.us(lambda: aot_loader.decode_topk_aot(logits, lengths, k, out=dtk_out))
                        phys_us = timer.us(lambda: phys(logits, lengths, dtk_out, k)) if phys else None
                    rec.update(dtk_us=dtk_us, phys_us=phys_us, **{"probe/dtk": round(rec["probe_us"] / dtk_us, 3)})
                rec["modes"] = dict(zip(MODES, probe.stats.tolist()))
                results["points"].append(rec)
                print(json.dumps(rec), flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(results, indent=1))
    print()
    print("| data | rows | width | k | V | probe us | DecodeTopK us | probe / DecodeTopK | physical floor us | modes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results["points"]:
        modes = " ".join(f"{m}:{n}" for m, n in r["modes"].items() if n)
        print(f"| {r['data']} | {r['rows']} | {r['width']} | {r['k']} | {r['v']} | {r.get('probe_us', 'bad')} | "
              f"{r.get('dtk_us', '')} | {r.get('probe/dtk', '')} | {r.get('phys_us', '')} | {modes} |")
    bad_edges = [e for e in results["edges"] if e["bad_rows"]]
    print(f"edges: {len(results['edges'])} cases, {len(bad_edges)} with bad rows")
    return 1 if bad_edges or any(r["bad_rows"] or r.get("bad_after_replays") for r in results["points"]) else 0


if __name__ == "__main__":
    sys.exit(main())
