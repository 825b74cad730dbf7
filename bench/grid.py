"""The benchmark grid on the GPU: DecodeTopK beside torch.topk and the speed-of-light kernel.

    python bench/grid.py run [--out DIR] [--rows 1 8 32 64 128] [--lengths 8192 ... 1048576]
        [--ks 512 2048] [--data rho0.9 rho0.999 gaussian] [--ragged] [--next-n N]
        [--targets] [--budget SECONDS]
    python bench/grid.py report GRID.json [EXTRA.json ...] [--targets TARGETS.json]
        [--png bench/results/grid.png] [--results bench/RESULTS.md]

`run` (on the H200, no DSL needed: the AOT libraries .aot and .aot_sol are carried) times
every point of rows x valid length x k in token mode, plus block mode (top-2048 blocks)
at 1,048,576, for each data kind, and writes DIR/grid.json and DIR/grid.md. `report` (here:
it needs matplotlib) turns the JSON into the PNG (time against length, one line per row
count, a panel per k and data kind, torch.topk and the floor beside) and writes
bench/RESULTS.md whole (targets, summary, every table), so no table there is kept by
hand; EXTRA files (the --ragged and --next-n runs) add their tables.

Data (made on the GPU): indexer-like logits sum_h w_h relu(q_h . k_s) / sqrt(64), 32 heads,
keys sqrt(rho) kbar + sqrt(1 - rho) eps (conformance.cases.indexer_logits, in torch) at
rho 0.9 and 0.999, and Gaussian logits. Every row is at its nominal length, or with
--ragged at a length drawn from 0.7 .. 1.3 x nominal (capped at the width, which is the
nominal length rounded up to 1.3x); with --next-n N the rows are requests of N rows as
vLLM builds them (decode_topk_seq_lens: row r of a request of seq_len tokens sees
seq_len - N + 1 + r % N).

Checked before timed: every configuration's output goes through the GPU contract checker
(conformance.gpu_check.check, shown to agree with conformance.check); an invalid point is
reported and not timed.

Timing: each call replayed from a CUDA graph (so host overhead is not measured), CUDA
events around it, and before every timed call a 256 MiB write evicts L2 (60 MB), so no
input is served from L2; median of --reps after --warmup calls. Times in microseconds:
- dtk: DecodeTopK (the policy's build; rows beyond the 16-CTA build's two waves run as
  several launches of at most that many rows, noted in `launches`);
- floor: bench/speed_of_light.py on the same build (load the row, write k indices);
- torch: torch.topk(logits, k) over the full width (block mode: amax over 8-blocks, then
  topk), which ignores per-row lengths.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ROWS = (1, 8, 32, 64, 128)
LENGTHS = (8192, 32768, 131072, 262144, 524288, 1048576)
KS = (512, 2048)
DATA = ("rho0.9", "rho0.999", "gaussian")
FLUSH_BYTES = 256 << 20
# Issue 6's targets: (rows, length, k) -> microseconds at rho 0.9, and the peer's and
# torch.topk's times measured on this H200 with the same data (issue 6).
TARGETS = {(1, 131072, 2048): (7, 15.6, 48.7), (8, 131072, 2048): (9, 19.4, 58.8),
           (64, 131072, 2048): (20, 46.4, 124.8), (32, 32768, 2048): (8, 35.4, 58.3),
           (64, 8192, 512): (6, 42.9, 63.6), (1, 1048576, 512): (20, 62.8, 79.2),
           (8, 524288, 512): (15, 31.6, 84.0), (64, 262144, 512): (35, 115.3, 176.0),
           (128, 65536, 512): (15, 29.0, 124.9)}


# ---------------------------------------------------------------------------------------
# run (GPU)
# ---------------------------------------------------------------------------------------
def make_logits(torch, kind, rows, width, seed, heads=32, dim=64):
    """BF16 [rows, width] on the GPU: indexer-like at rho (kind 'rho0.9' ...) or Gaussian."""
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    if kind == "gaussian":
        return torch.randn(rows, width, generator=g, device="cuda").to(torch.bfloat16)
    rho = float(kind[3:])
    keys = (math.sqrt(rho) * torch.randn(dim, generator=g, device="cuda")
            + math.sqrt(1 - rho) * torch.randn(width, dim, generator=g, device="cuda"))
    out = torch.empty(rows, width, dtype=torch.bfloat16, device="cuda")
    for r in range(rows):  # one row at a time: [heads, width] float32 scores
        q = torch.randn(heads, dim, generator=g, device="cuda")
        w = (1 + 0.5 * torch.randn(heads, generator=g, device="cuda")) / math.sqrt(heads)
        out[r] = ((w @ torch.relu(q @ keys.T)) / math.sqrt(dim)).to(torch.bfloat16)
    return out


class Timer:
    """Median microseconds of a CUDA graph replay, L2 evicted before each."""

    def __init__(self, torch, warmup, reps):
        self.torch, self.warmup, self.reps = torch, warmup, reps
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def graph(self, fn):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # warm: lazy loads, allocator
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph

    def us(self, fn):
        torch = self.torch
        graph = self.graph(fn)
        for _ in range(self.warmup):
            graph.replay()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.reps)]
        for start, end in events:
            self.flush.zero_()
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        return round(statistics.median(s.elapsed_time(e) for s, e in events) * 1e3, 2)


def point(ctx, kind, rows, length, k, block_mode, ragged, next_n, seed):
    """One grid point: check, then time dtk, floor and torch."""
    torch, aot, gpu_check, policy, sol = ctx["torch"], ctx["aot"], ctx["check"], ctx["policy"], ctx["sol"]
    width = length if not ragged else min(policy.MAX_WIDTH, -(-int(length * 1.3) // 8) * 8)
    rec = {"data": kind, "rows": rows, "length": length, "width": width, "k": k,
           "mode": "block" if block_mode else "token", "ragged": ragged, "next_n": next_n}
    logits = ctx["logits"](kind, rows, width, seed)
    g = torch.Generator(device="cuda")
    g.manual_seed(seed + 1)
    requests = rows // next_n
    if ragged:
        seq = (length * (0.7 + 0.6 * torch.rand(requests, generator=g, device="cuda"))).to(torch.int32)
        seq = seq.clamp(max=width)
    else:
        seq = torch.full((requests,), length, dtype=torch.int32, device="cuda")
    lengths = gpu_check.seq_lens_lengths(seq, next_n, width)
    resident = aot.resident_for(k, block_mode)
    cluster, threads, vectors = policy.build_for(rows, width, resident)
    slices = aot.launch_slices(rows, width, k, block_mode, next_n)
    rec.update(build=f"{cluster}x{threads}x{vectors}", launches=len(slices))
    out = torch.full((rows, k), aot.POISON, dtype=torch.int32, device="cuda")

    def dtk():
        for s in slices:
            aot.decode_topk_aot(logits[s], seq[s.start // next_n:s.stop // next_n] if next_n > 1 else lengths[s],
                                k, out=out[s], block_mode=block_mode, next_n=next_n)

    dtk()
    torch.cuda.synchronize()
    counts, first = gpu_check.check(logits, lengths, k, block_mode, out)
    rec["violations"] = int(sum(counts.values()))
    if rec["violations"]:
        rec["first_rows"] = first
        return rec
    rec["dtk_us"] = ctx["timer"].us(dtk)
    floor_out = torch.empty_like(out)
    rec["floor_us"] = ctx["timer"].us(lambda: sol(logits, lengths, floor_out, k, (cluster, vectors)))
    if block_mode:
        rec["torch_us"] = ctx["timer"].us(lambda: torch.topk(logits.view(rows, width // 8, 8).amax(dim=2), k, dim=1))
    else:
        rec["torch_us"] = ctx["timer"].us(lambda: torch.topk(logits, k, dim=1))
    rec["vs_floor"] = round(rec["dtk_us"] / rec["floor_us"], 2)
    rec["vs_torch"] = round(rec["dtk_us"] / rec["torch_us"], 3)
    read_bytes = int(lengths.to(torch.int64).sum()) * 2
    rec["dtk_tb_s"] = round(read_bytes / rec["dtk_us"] / 1e6, 3)
    rec["floor_tb_s"] = round(read_bytes / rec["floor_us"] / 1e6, 3)
    return rec


def sol_launcher(aot, torch):
    """floor(logits, lengths, out, k, (cluster, vectors)): the speed-of-light kernel from
    .aot_sol (built by kernel/aot.py from bench/speed_of_light.py, hash-checked)."""
    import ctypes

    lib = aot.load_library_at(REPO / ".aot_sol", REPO / "bench" / "speed_of_light.py")

    def launch(logits, lengths, out, k, build):
        rows, width = logits.shape
        err = lib.dtk_launch(k, build[0], build[1], 0, 0, ctypes.c_void_p(logits.data_ptr()), rows, width,
                             logits.stride(0), ctypes.c_void_p(lengths.data_ptr()), 1,
                             ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(0),
                             ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if err:
            raise RuntimeError(f"speed-of-light launch: {lib.dtk_error_name(err).decode()} ({err})")
    return launch


def run(args):
    import torch

    from decode_topk.conformance import gpu_check
    from decode_topk.kernel import aot_loader
    from decode_topk.reference import policy

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = {}

    def logits(kind, rows, width, seed):
        # one tensor a (kind, width): every row count takes a prefix of the widest
        key = (kind, width)
        if key not in cache:
            cache.clear()
            torch.cuda.empty_cache()
            cache[key] = make_logits(torch, kind, max(args.rows), width, seed)
        return cache[key][:rows]

    ctx = {"torch": torch, "aot": aot_loader, "check": gpu_check, "policy": policy, "logits": logits,
           "sol": sol_launcher(aot_loader, torch), "timer": Timer(torch, args.warmup, args.reps)}
    info = aot_loader.library_info()
    results = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
               "torch": torch.__version__, "kernel_source_sha256": info["kernel_source_sha256"],
               "timing": f"CUDA graph replay, L2 evicted, median of {args.reps} after {args.warmup}",
               "points": []}
    plan = []
    if args.targets:
        plan += [(kind, r, n, k, False) for (r, n, k) in TARGETS for kind in args.data]
    else:
        for kind in args.data:
            for n in args.lengths:
                for r in args.rows:
                    plan += [(kind, r, n, k, False) for k in args.ks]
                    if n == policy.MAX_WIDTH and not args.ragged:
                        plan.append((kind, r, n, 2048, True))
    t0 = time.perf_counter()
    for i, (kind, rows, length, k, block_mode) in enumerate(plan):
        if time.perf_counter() - t0 > args.budget:
            results["stopped"] = f"budget {args.budget} s reached after {i} of {len(plan)} points"
            break
        if rows % args.next_n:
            continue
        try:
            rec = point(ctx, kind, rows, length, k, block_mode, args.ragged, args.next_n, args.seed + length)
        except Exception as e:  # noqa: BLE001
            rec = {"data": kind, "rows": rows, "length": length, "k": k, "block": block_mode,
                   "error": f"{type(e).__name__}: {e}"}
        results["points"].append(rec)
        print(json.dumps(rec), flush=True)
    path = out_dir / f"grid{args.tag}.json"
    path.write_text(json.dumps(results, indent=1))
    (out_dir / f"grid{args.tag}.md").write_text(table(results))
    print(short_table(results))
    bad = [p for p in results["points"] if p.get("violations") or "error" in p]
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------
# tables and plot (anywhere)
# ---------------------------------------------------------------------------------------
def _label(p):
    extra = (" ragged" if p.get("ragged") else "") + (f" next_n={p['next_n']}" if p.get("next_n", 1) > 1 else "")
    return f"{p['data']} {p['mode']}{extra}"


def table(results):
    head = ("| data | mode | rows | length | k | build | launches | dtk us | floor us | torch us | dtk/floor "
            "| dtk/torch | dtk TB/s | floor TB/s | target us | peer us |")
    lines = [f"{results['gpu']}, {results['date']}, torch {results['torch']}, kernel "
             f"{results['kernel_source_sha256'][:12]}; {results['timing']}.", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for p in results["points"]:
        if "error" in p or p.get("violations"):
            lines.append(f"| {p['data']} | {p.get('mode', '')} | {p['rows']} | {p['length']} | {p['k']} | "
                         f"{p.get('build', '')} | | **{p.get('error') or str(p['violations']) + ' violations'}** "
                         f"| | | | | | | | |")
            continue
        target, peer, _ = TARGETS.get((p["rows"], p["length"], p["k"]), (None, None, None))
        if p["mode"] == "block" or p["data"] != "rho0.9" or p.get("ragged") or p.get("next_n", 1) > 1:
            target = peer = None
        lines.append(f"| {_label(p).split(' ', 1)[0]} | {_label(p).split(' ', 1)[1]} | {p['rows']} | "
                     f"{p['length']} | {p['k']} | {p['build']} | {p['launches']} | {p['dtk_us']} | "
                     f"{p['floor_us']} | {p['torch_us']} | {p['vs_floor']} | {p['vs_torch']} | {p['dtk_tb_s']} | "
                     f"{p['floor_tb_s']} | {target or ''} | {peer or ''} |")
    return "\n".join(lines) + "\n"


def short_table(results):
    ok = [p for p in results["points"] if "dtk_us" in p]
    bad = len(results["points"]) - len(ok)
    within = sum(p["vs_floor"] <= 1.5 for p in ok)
    fifth = sum(p["vs_torch"] <= 0.2 for p in ok)
    lines = [f"{len(ok)} points timed, {bad} invalid or failed; within 1.5x of the floor: {within}; "
             f"at most 1/5 of torch.topk: {fifth}", "| rows | length | k | dtk us | target |"]
    for (r, n, k), (target, _, _) in TARGETS.items():
        for p in ok:
            if (p["rows"], p["length"], p["k"], p["data"], p["mode"]) == (r, n, k, "rho0.9", "token") \
                    and not p.get("ragged") and p.get("next_n", 1) == 1:
                lines.append(f"| {r} | {n} | {k} | {p['dtk_us']} | {target} |")
    return "\n".join(lines)


def plot(results, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in results["points"] if "dtk_us" in p and p["mode"] == "token"
              and not p.get("ragged") and p.get("next_n", 1) == 1]
    kinds = sorted({p["data"] for p in points})
    ks = sorted({p["k"] for p in points})
    fig, axes = plt.subplots(len(ks), len(kinds), figsize=(5.5 * len(kinds), 4.5 * len(ks)), squeeze=False,
                             sharex=True)
    rows_all = sorted({p["rows"] for p in points})
    colors = {r: plt.cm.viridis(i / max(1, len(rows_all) - 1)) for i, r in enumerate(rows_all)}
    for i, k in enumerate(ks):
        for j, kind in enumerate(kinds):
            ax = axes[i][j]
            for r in rows_all:
                sel = sorted((p for p in points if p["k"] == k and p["data"] == kind and p["rows"] == r),
                             key=lambda p: p["length"])
                if not sel:
                    continue
                x = [p["length"] for p in sel]
                ax.plot(x, [p["dtk_us"] for p in sel], "-o", color=colors[r], label=f"DecodeTopK {r} rows")
                ax.plot(x, [p["floor_us"] for p in sel], ":", color=colors[r], label=f"floor {r} rows")
                ax.plot(x, [p["torch_us"] for p in sel], "--", color=colors[r], alpha=0.5,
                        label=f"torch.topk {r} rows")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{kind}, k={k} (token)")
            ax.set_xlabel("valid length (logits a row)")
            ax.set_ylabel("median us")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=6, ncol=3, loc="upper left")
    fig.suptitle(f"DecodeTopK vs torch.topk vs speed-of-light, {results['gpu']}, {results['date']} "
                 f"(solid: DecodeTopK, dotted: floor, dashed: torch.topk)")
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def _ratio_summary(points):
    ok = [p for p in points if "dtk_us" in p]
    if not ok:
        return "no timed points"
    floor = sorted(p["vs_floor"] for p in ok)
    torch_ = sorted(p["vs_torch"] for p in ok)
    return (f"{len(ok)} points; DecodeTopK / floor: median {statistics.median(floor):.2f}, best {floor[0]:.2f}, "
            f"worst {floor[-1]:.2f}, within 1.5x at {sum(f <= 1.5 for f in floor)}; DecodeTopK / torch.topk: "
            f"median {statistics.median(torch_):.2f}, best {torch_[0]:.2f}, worst {torch_[-1]:.2f}, "
            f"at most 1/5 at {sum(t <= 0.2 for t in torch_)}")


def results_md(results, extras, png, targets=None):
    """bench/RESULTS.md, whole: the targets (from the grid, else from the --targets run),
    a summary and every table of the runs."""
    points = results["points"]
    target_points = points + (targets["points"] if targets else [])
    lines = ["# DecodeTopK benchmark results", "",
             "Generated by `python bench/grid.py report` from the JSON of `python bench/grid.py run` on the H200 "
             "(do not edit by hand; bench/NOTES.md has the analysis).", "",
             f"{results['gpu']}, {results['date']}, torch {results['torch']}, kernel source "
             f"`{results['kernel_source_sha256'][:12]}`. Timing: {results['timing']}. Every point's output "
             "passed the contract check before it was timed.", "",
             "## Issue 6 targets (rho 0.9, token mode)", "",
             "| rows | length | k | target us | DecodeTopK us | met | floor us | torch.topk us | peer us | "
             "DecodeTopK / floor | DecodeTopK / torch |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (r, n, k), (target, peer, _) in TARGETS.items():
        for p in target_points:
            if (p["rows"], p["length"], p["k"], p["data"], p["mode"]) == (r, n, k, "rho0.9", "token") \
                    and "dtk_us" in p and not p.get("ragged") and p.get("next_n", 1) == 1:
                source = "" if p in points else f" (`run --targets`, kernel {targets['kernel_source_sha256'][:12]})"
                met = "yes" if p["dtk_us"] <= target else f"no ({p['dtk_us'] / target:.1f}x)"
                lines.append(f"| {r} | {n} | {k} | {target} | {p['dtk_us']}{source} | {met} | {p['floor_us']} | "
                             f"{p['torch_us']} | {peer} | {p['vs_floor']} | {p['vs_torch']} |")
                break
    lines += ["", "Targets also ask every point within 1.5x of the floor and at most 1/5 of torch.topk. "
              "Over the grid: " + _ratio_summary(points) + ".", "",
              f"![time against length]({Path(png).resolve().relative_to(REPO / 'bench')})",
              "", "## The grid", "", table(results).split("\n", 2)[2]]
    for extra in extras:
        kind = "ragged lengths (0.7-1.3 x nominal)" if any(p.get("ragged") for p in extra["points"]) else \
            f"next_n = {extra['points'][0].get('next_n')} (decode_topk_seq_lens)"
        sha = extra["kernel_source_sha256"][:12]
        if sha != results["kernel_source_sha256"][:12]:
            kind += f" (kernel source `{sha}`, {extra['date']})"
        lines += [f"## {kind}", "", _ratio_summary(extra["points"]) + ".", "", table(extra).split("\n", 2)[2]]
    return "\n".join(lines)


def report(args):
    results = json.loads(Path(args.json).read_text())
    extras = [json.loads(Path(e).read_text()) for e in args.extra]
    targets = json.loads(Path(args.targets).read_text()) if args.targets else None
    plot(results, args.png)
    print(f"wrote {args.png}")
    Path(args.results).write_text(results_md(results, extras, args.png, targets))
    print(f"wrote {args.results}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build"))
    r.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    r.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    r.add_argument("--ks", type=int, nargs="+", default=list(KS))
    r.add_argument("--data", nargs="+", default=list(DATA), choices=DATA)
    r.add_argument("--ragged", action="store_true")
    r.add_argument("--next-n", type=int, default=1)
    r.add_argument("--targets", action="store_true", help="only issue 6's nine target points")
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--seed", type=int, default=6)
    r.add_argument("--budget", type=float, default=1e9, help="stop starting points after this many seconds")
    r.add_argument("--tag", default="", help="suffix of grid<tag>.json / .md")
    p = sub.add_parser("report")
    p.add_argument("json")
    p.add_argument("extra", nargs="*", help="more grid JSON files (--ragged, --next-n runs)")
    p.add_argument("--png", default=str(REPO / "bench" / "results" / "grid.png"))
    p.add_argument("--results", default=str(REPO / "bench" / "RESULTS.md"))
    p.add_argument("--targets", default=None, help="a `run --targets` JSON, for target points not in the grid")
    args = ap.parse_args(argv)
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
