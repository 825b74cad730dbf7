"""The benchmark grid on the GPU: DecodeTopK beside torch.topk and the speed-of-light kernel.

    python bench/grid.py run [--out DIR] [--rows 1 8 32 64 128] [--lengths 8192 ... 1048576]
        [--ks 512 2048] [--data rho0.9 rho0.999 gaussian] [--ragged] [--next-n N]
        [--targets] [--budget SECONDS]
    python bench/grid.py report GRID.json [EXTRA.json ...] [--targets TARGETS.json]
        [--png bench/results/grid.png] [--results bench/RESULTS.md] [--data rho0.9]
        [--peer-time topk_us us e2e_us]

`run` (on the H200, no DSL needed: the AOT libraries kernel/aot and .aot_sol are carried) times
every point of rows x valid length x k in token mode, plus block mode (top-2048 blocks)
at 1,048,576, for each data kind, and writes DIR/grid.json and DIR/grid.md. `report` (any
machine; it needs matplotlib) turns the JSON into the PNG and writes bench/RESULTS.md
whole (how to read it, targets, summary, every table), so no table there is kept by hand;
EXTRA files (the --ragged and --next-n runs) add their tables. The PNG has a column of
panels a k and a panel a row count: time against valid length on log axes, DecodeTopK,
the fastest valid peer (marked by which) and the floor on one data kind (--data), DecodeTopK
on the others as thin lines, block mode as stars, issue 6's targets and quoted peer times.
Peers: torch.topk (valid where every row is at the full width in token mode) and any
named peers a point carries (`peers`: {name: record}, e.g. from `run --peers`), each timed
by the first of --peer-time's keys its record has and excluded when its `valid` flag is
false, unsupported or failed; RESULTS.md gives each named peer a column.

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

from decode_topk.conformance.gpu_impl import POISON

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
    build = policy.build_for(rows, width, resident)
    slices = aot.launch_slices(rows, width, k, block_mode, next_n)
    rec.update(build=build.name, launches=len(slices))
    out = torch.full((rows, k), POISON, dtype=torch.int32, device="cuda")

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
    rec["floor_us"] = ctx["timer"].us(lambda: sol(logits, lengths, floor_out, k, build))
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
    """floor(logits, lengths, out, k, build): the speed-of-light kernel from
    .aot_sol (built by kernel/aot.py from bench/speed_of_light.py, hash-checked)."""
    import ctypes

    lib = aot.load_library_at(REPO / ".aot_sol", REPO / "bench" / "speed_of_light.py")

    def launch(logits, lengths, out, k, build):
        rows, width = logits.shape
        err = lib.dtk_launch(k, build.cluster, build.vectors, 0, 0, ctypes.c_void_p(logits.data_ptr()), rows, width,
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
    from decode_topk.kernel import policy

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
TORCH = "torch.topk"
# TARGETS' second number: issue 6 quotes it as another project's CuTe DSL cluster radix
# top-k, timed on the same H200 with the same data; this script never runs it.
ISSUE6_PEER = "issue 6 peer"
# A named peer's time (`run --peers` records): the first of these keys the record has.
# topk_us: the peer's kernels on input already in its own dtype (FP32 for vLLM and
# SGLang, BF16 for FlashInfer); e2e_us: BF16 in, the upcast included.
PEER_TIME_KEYS = ("topk_us", "us", "e2e_us")


def _label(p):
    extra = (" ragged" if p.get("ragged") else "") + (f" next_n={p['next_n']}" if p.get("next_n", 1) > 1 else "")
    return f"{p['data']} {p['mode']}{extra}"


def _full_rows(p):
    """Token mode with every row at the full width: there torch.topk(logits, k) is an answer
    the contract allows (it ignores lengths, and in block mode the pinned newest block)."""
    return (p.get("mode") == "token" and not p.get("ragged") and p.get("next_n", 1) == 1
            and p.get("width", p["length"]) == p["length"])


def named_peers(p):
    """{name: record} of the peers a point carries: `peers` as a dict name -> record, or a
    list of records each with a `name` (or `peer`) key. Any name is taken as it is."""
    peers = p.get("peers") or {}
    if isinstance(peers, list):
        peers = {r.get("name") or r.get("peer"): r for r in peers if isinstance(r, dict)}
    return {str(n): r for n, r in peers.items() if isinstance(r, dict)}


def _peer_us(rec, time_keys):
    for key in time_keys:
        if isinstance(rec.get(key), (int, float)):
            return rec[key]
    return None


def _peer_status(rec, us):
    """valid (flag true), unchecked (no flag), invalid (flag false), n/a (unsupported), failed."""
    if rec.get("unsupported"):
        return "n/a"
    if rec.get("error") or us is None:
        return "failed"
    return {True: "valid", False: "invalid"}.get(rec.get("valid"), "unchecked")


def candidates(p, time_keys=PEER_TIME_KEYS):
    """[(name, us, status)] of every peer of a point: the named peers, then torch.topk, which
    counts as valid only where its answer is the contract's (_full_rows)."""
    out = []
    for name, rec in sorted(named_peers(p).items()):
        us = _peer_us(rec, time_keys)
        out.append((name, us, _peer_status(rec, us)))
    if isinstance(p.get("torch_us"), (int, float)):
        out.append((TORCH, p["torch_us"], "valid" if _full_rows(p) else "not the contract"))
    return out


def fastest_valid(p, time_keys=PEER_TIME_KEYS):
    """(us, name) of the fastest peer not shown invalid (a validity flag, where the record
    has one, must be true), else (None, None)."""
    ok = [(us, name) for name, us, status in candidates(p, time_keys) if status in ("valid", "unchecked")]
    return min(ok) if ok else (None, None)


def peer_names(*runs):
    """The named peers present in any point of these runs, sorted."""
    return sorted({n for res in runs if res for p in res["points"] for n in named_peers(p)})


def _peer_cell(p, name, time_keys):
    rec = named_peers(p).get(name)
    if rec is None:
        return ""
    us = _peer_us(rec, time_keys)
    status = _peer_status(rec, us)
    if status == "valid":
        return f"{us}"
    if status in ("n/a", "failed"):
        return status
    return f"{us} ({status})"


def _fastest_cell(p, time_keys):
    us, name = fastest_valid(p, time_keys)
    return "" if us is None else f"{us} ({name})"


def _issue6(p):
    """(target us, issue 6 peer us) where the point is one of issue 6's (rho 0.9, token, full rows)."""
    target, peer, _ = TARGETS.get((p["rows"], p["length"], p["k"]), (None, None, None))
    if p.get("data") != "rho0.9" or not _full_rows(p):
        return None, None
    return target, peer


def table(results, names=None, time_keys=PEER_TIME_KEYS):
    """The run's points as a markdown table, a line of provenance first. `names`: the named
    peers to give a column each (default: those in the run); with any, a column names the
    fastest valid peer of each point."""
    names = peer_names(results) if names is None else names
    cols = ["data", "mode", "rows", "length", "k", "build", "launches", "DecodeTopK us", "floor us",
            "torch.topk us", "DecodeTopK / floor", "DecodeTopK / torch.topk", "DecodeTopK TB/s", "floor TB/s"]
    cols += [f"{n} us" for n in names] + (["fastest valid peer us"] if names else [])
    cols += ["issue 6 target us", f"{ISSUE6_PEER} us"]
    lines = [f"{results['gpu']}, {results['date']}, torch {results['torch']}, kernel "
             f"{results['kernel_source_sha256'][:12]}; {results['timing']}.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for p in results["points"]:
        if "error" in p or p.get("violations"):
            what = p.get("error") or f"{p['violations']} violations"
            cells = [p["data"], p.get("mode", ""), p["rows"], p["length"], p["k"], p.get("build", ""), "",
                     f"**{what}**"]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |" + " |" * (len(cols) - len(cells)))
            continue
        data, mode = _label(p).split(" ", 1)
        target, peer = _issue6(p)
        cells = [data, mode, p["rows"], p["length"], p["k"], p["build"], p["launches"], p["dtk_us"], p["floor_us"],
                 p["torch_us"], p["vs_floor"], p["vs_torch"], p["dtk_tb_s"], p["floor_tb_s"]]
        cells += [_peer_cell(p, n, time_keys) for n in names] + ([_fastest_cell(p, time_keys)] if names else [])
        cells += [target or "", peer or ""]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
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


# One colour a series (distinct under the common colour-vision deficiencies: Okabe-Ito).
C_DTK, C_PEER, C_FLOOR, C_TARGET = "#0072B2", "#E69F00", "#000000", "#D55E00"
C_OTHER = ("#009E73", "#CC79A7", "#56B4E9", "#F0E442")
PEER_MARKERS = ("s", "D", "^", "v", "P", "X", "h", "<", ">", "p")


def _length_label(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10}K" if n % 1024 == 0 else str(n)


def plot(results, png, data=None, time_keys=PEER_TIME_KEYS):
    """The PNG: a column a k, a row of panels a row count; time against valid length on log
    axes. In each panel: DecodeTopK, the fastest valid peer (its marker says which peer)
    and the speed-of-light floor on the main data kind (`data`, default rho0.9), DecodeTopK
    on the other data kinds as thin lines, block mode as stars at its length, issue 6's
    targets and quoted peer times where the panel has one."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    points = [p for p in results["points"] if "dtk_us" in p and not p.get("ragged") and p.get("next_n", 1) == 1]
    kinds = sorted({p["data"] for p in points})
    main = data or ("rho0.9" if "rho0.9" in kinds else kinds[0])
    others = [d for d in kinds if d != main]
    token = [p for p in points if p["mode"] == "token"]
    ks = sorted({p["k"] for p in token} | {p["k"] for p in points if p["mode"] == "block"})
    rows_all = sorted({p["rows"] for p in points})
    lengths = sorted({p["length"] for p in points})
    winners = sorted({fastest_valid(p, time_keys)[1] for p in points if p["data"] == main} - {None},
                     key=lambda n: (n != TORCH, n))
    marker = {n: PEER_MARKERS[i % len(PEER_MARKERS)] for i, n in enumerate(winners)}

    fig, axes = plt.subplots(len(rows_all), len(ks), figsize=(6.4 * len(ks), 2.9 * len(rows_all) + 1.9),
                             squeeze=False, sharex=True)
    for i, r in enumerate(rows_all):
        for j, k in enumerate(ks):
            ax = axes[i][j]

            def sel(kind, mode):
                return sorted((p for p in points if (p["data"], p["mode"], p["rows"], p["k"]) == (kind, mode, r, k)),
                              key=lambda p: p["length"])

            for c, kind in zip(C_OTHER, others):
                s = sel(kind, "token")
                if s:
                    ax.plot([p["length"] for p in s], [p["dtk_us"] for p in s], "-", color=c, lw=1.1, alpha=0.9)
            s = sel(main, "token")
            if s:
                x = [p["length"] for p in s]
                ax.plot(x, [p["floor_us"] for p in s], ":", color=C_FLOOR, lw=1.8)
                best = [(p["length"],) + fastest_valid(p, time_keys) for p in s]
                best = [b for b in best if b[1] is not None]
                if best:
                    ax.plot([b[0] for b in best], [b[1] for b in best], "--", color=C_PEER, lw=2)
                    for n in winners:
                        w = [b for b in best if b[2] == n]
                        if w:
                            ax.plot([b[0] for b in w], [b[1] for b in w], marker[n], color=C_PEER, ms=6,
                                    mec="black", mew=0.6, ls="none")
                ax.plot(x, [p["dtk_us"] for p in s], "-o", color=C_DTK, lw=2.2, ms=4.5)
                ratios = [p["dtk_us"] / b[1] for p, b in zip(s, [(p["length"],) + fastest_valid(p, time_keys)
                                                                for p in s]) if b[1]]
                if ratios:
                    ax.text(0.02, 0.96, f"DecodeTopK / fastest valid peer: {min(ratios):.2f} to {max(ratios):.2f}",
                            transform=ax.transAxes, va="top", fontsize=8.5,
                            bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="0.8", alpha=0.9))
            for p in sel(main, "block"):
                ax.plot([p["length"]], [p["dtk_us"]], "*", color=C_DTK, ms=15, mec="black", mew=0.7)
                ax.plot([p["length"]], [p["floor_us"]], "*", color="white", ms=13, mec=C_FLOOR, mew=1.2)
                us, _ = fastest_valid(p, time_keys)
                if us is not None:
                    ax.plot([p["length"]], [us], "*", color=C_PEER, ms=13, mec="black", mew=0.7)
            if main == "rho0.9":
                for (tr, tn, tk), (target, peer, _) in TARGETS.items():
                    if (tr, tk) == (r, k) and tn in lengths:
                        ax.plot([tn], [target], "_", color=C_TARGET, ms=18, mew=2.5)
                        ax.plot([tn], [peer], "d", color="none", mec=C_TARGET, ms=7, mew=1.4)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(lengths)
            ax.set_xticklabels([_length_label(n) for n in lengths])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="major", alpha=0.35)
            ax.set_title(f"k = {k}, {r} row{'s' if r > 1 else ''}", fontsize=11)
            if j == 0:
                ax.set_ylabel("median us")
            if i == len(rows_all) - 1:
                ax.set_xlabel("valid length (logits a row)")
    handles = [Line2D([], [], color=C_DTK, lw=2.2, marker="o", ms=4.5, label=f"DecodeTopK ({main})"),
               Line2D([], [], color=C_PEER, lw=2, ls="--", label="fastest valid peer (marker: which)"),
               Line2D([], [], color=C_FLOOR, lw=1.8, ls=":", label="floor: speed-of-light kernel, same launch")]
    handles += [Line2D([], [], color=C_PEER, marker=marker[n], ls="none", mec="black", mew=0.6, ms=6,
                       label=f"fastest: {n}" + (" (full-length rows)" if n == TORCH else "")) for n in winners]
    handles += [Line2D([], [], color=c, lw=1.1, label=f"DecodeTopK ({kind})") for c, kind in zip(C_OTHER, others)]
    if any(p["mode"] == "block" for p in points):
        handles += [Line2D([], [], color=C_DTK, marker="*", ms=13, mec="black", ls="none",
                           label="block mode (top-k of 8-logit blocks): DecodeTopK"),
                    Line2D([], [], color="white", marker="*", ms=12, mec=C_FLOOR, mew=1.2, ls="none",
                           label="block mode: floor")]
        block_main = [p for p in points if p["mode"] == "block" and p["data"] == main]
        if any(fastest_valid(p, time_keys)[0] is not None for p in block_main):
            handles.append(Line2D([], [], color=C_PEER, marker="*", ms=12, mec="black", ls="none",
                                  label="block mode: fastest valid peer"))
    if main == "rho0.9":
        handles += [Line2D([], [], color=C_TARGET, marker="_", ms=16, mew=2.5, ls="none", label="issue 6 target"),
                    Line2D([], [], color="none", marker="d", mec=C_TARGET, ms=7, mew=1.4, ls="none",
                           label="issue 6 peer (quoted, not run here)")]
    fig.legend(handles=handles, loc="upper center", ncol=3, fontsize=10, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.5 / fig.get_figheight()))
    fig.suptitle(f"DecodeTopK, {results['gpu']}, {results['date']}, kernel source "
                 f"{results['kernel_source_sha256'][:12]}: token mode on {main} data unless marked",
                 fontsize=13, y=1 - 0.12 / fig.get_figheight())
    fig.tight_layout(rect=(0, 0, 1, 1 - 1.4 / fig.get_figheight()))
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)


def _ratio_summary(points, time_keys=PEER_TIME_KEYS):
    ok = [p for p in points if "dtk_us" in p]
    if not ok:
        return "no timed points"
    floor = sorted(p["vs_floor"] for p in ok)
    torch_ = sorted(p["vs_torch"] for p in ok)
    text = (f"{len(ok)} points; DecodeTopK / floor: median {statistics.median(floor):.2f}, best {floor[0]:.2f}, "
            f"worst {floor[-1]:.2f}, within 1.5x at {sum(f <= 1.5 for f in floor)}; DecodeTopK / torch.topk: "
            f"median {statistics.median(torch_):.2f}, best {torch_[0]:.2f}, worst {torch_[-1]:.2f}, "
            f"at most 1/5 at {sum(t <= 0.2 for t in torch_)}")
    if any(named_peers(p) for p in ok):
        vs = sorted(p["dtk_us"] / us for p in ok for us, _ in [fastest_valid(p, time_keys)] if us)
        if vs:
            text += (f"; DecodeTopK / fastest valid peer (torch.topk included where valid): median "
                     f"{statistics.median(vs):.2f}, best {vs[0]:.2f}, worst {vs[-1]:.2f}, faster at "
                     f"{sum(v < 1 for v in vs)} of {len(vs)}")
    return text


def _rel(path, start):
    return os.path.relpath(Path(path).resolve(), Path(start).resolve())


def results_md(results, extras, png, targets=None, time_keys=PEER_TIME_KEYS, command=None, md_path=None):
    """bench/RESULTS.md, whole: how to read it, the targets (from the grid, else from the
    --targets run), a summary, the plot and every table of the runs."""
    md_dir = Path(md_path).parent if md_path else REPO / "bench"
    points = results["points"]
    target_points = points + (targets["points"] if targets else [])
    names = peer_names(results, targets, *extras)
    peer_note = (f"Named peers in these runs: {', '.join(names)}; each one's time is the first of "
                 f"`{'`, `'.join(time_keys)}` its record has, and a peer counts as valid unless its validity "
                 "flag says otherwise ('(invalid)' marks one that does, '(unchecked)' one without a flag)."
                 if names else
                 "No run here carries named peers yet (`run --peers` adds them), so the fastest valid peer is "
                 "torch.topk wherever it is valid, and none elsewhere (block mode, ragged and next_n rows).")
    lines = ["# DecodeTopK benchmark results", "",
             "Generated by `" + (command or "python bench/grid.py report") + "` from the JSON that "
             "`python bench/grid.py run` wrote on the GPU. Do not edit it by hand; bench/NOTES.md has the "
             "analysis.", "",
             f"{results['gpu']}, {results['date']}, torch {results['torch']}, kernel source "
             f"`{results['kernel_source_sha256'][:12]}`. Timing: {results['timing']}. Every point's DecodeTopK "
             "output passed the contract check before it was timed.", "",
             "What the columns are:", "",
             "- **DecodeTopK**: this kernel, on the launch policy's build (`build`); `launches` > 1 where the "
             "rows exceed the 16-CTA build's two waves.",
             "- **floor**: bench/speed_of_light.py. It has DecodeTopK's launch (clusters, threads, shared "
             "memory) and loads, writes k indices and selects nothing: the floor of this launch shape, not "
             "of the GPU.",
             "- **torch.topk**: `torch.topk(logits, k, dim=1)` over the full width (block mode: the amax "
             "over 8-logit blocks, then topk). It ignores per-row lengths and the pinned newest block, so "
             "its answer is the contract's only in token mode with every row at the full width. The grid "
             "does not check its output.",
             f"- **issue 6 target** and **{ISSUE6_PEER}**: the target time, and the time issue 6 quotes "
             "for another project's CuTe DSL cluster radix top-k on the same H200 and data, at issue 6's "
             "nine points. These are quoted, not run by this script.",
             "- **fastest valid peer**: the fastest of torch.topk (where its answer is the contract's) and "
             "the named peers a run carries. " + peer_note, "",
             "## Issue 6 targets (rho 0.9, token mode)", ""]
    cols = ["rows", "length", "k", "target us", "DecodeTopK us", "met", "floor us", "torch.topk us",
            f"{ISSUE6_PEER} us"] + [f"{n} us" for n in names] + (["fastest valid peer us"] if names else []) + \
           ["DecodeTopK / floor", "DecodeTopK / torch.topk"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for (r, n, k), (target, peer, _) in TARGETS.items():
        for p in target_points:
            if (p["rows"], p["length"], p["k"], p["data"], p["mode"]) == (r, n, k, "rho0.9", "token") \
                    and "dtk_us" in p and not p.get("ragged") and p.get("next_n", 1) == 1:
                source = "" if p in points else f" (`run --targets`, kernel {targets['kernel_source_sha256'][:12]})"
                met = "yes" if p["dtk_us"] <= target else f"no ({p['dtk_us'] / target:.1f}x)"
                cells = [r, n, k, target, f"{p['dtk_us']}{source}", met, p["floor_us"], p["torch_us"], peer]
                cells += [_peer_cell(p, m, time_keys) for m in names] + \
                    ([_fastest_cell(p, time_keys)] if names else [])
                cells += [p["vs_floor"], p["vs_torch"]]
                lines.append("| " + " | ".join(str(c) for c in cells) + " |")
                break
    lines += ["", "The targets also ask for every point within 1.5x of the floor and at most 1/5 of torch.topk. "
              "Over the grid: " + _ratio_summary(points, time_keys) + ".", "",
              f"![DecodeTopK, the fastest valid peer and the floor against the valid length]({_rel(png, md_dir)})",
              "", "## The grid", "", table(results, names, time_keys).split("\n", 2)[2]]
    for extra in extras:
        kind = "ragged lengths (0.7-1.3 x nominal)" if any(p.get("ragged") for p in extra["points"]) else \
            f"next_n = {extra['points'][0].get('next_n')} (decode_topk_seq_lens)"
        sha = extra["kernel_source_sha256"][:12]
        if sha != results["kernel_source_sha256"][:12]:
            kind += f" (kernel source `{sha}`, {extra['date']})"
        lines += [f"## {kind}", "", _ratio_summary(extra["points"], time_keys) + ".", "",
                  table(extra, names, time_keys).split("\n", 2)[2]]
    return "\n".join(lines)


def report(args):
    results = json.loads(Path(args.json).read_text())
    extras = [json.loads(Path(e).read_text()) for e in args.extra]
    targets = json.loads(Path(args.targets).read_text()) if args.targets else None
    time_keys = tuple(args.peer_time)
    plot(results, args.png, data=args.data, time_keys=time_keys)
    print(f"wrote {args.png}")
    command = " ".join(["python bench/grid.py report", _rel(args.json, REPO), *(_rel(e, REPO) for e in args.extra)]
                       + ([f"--targets {_rel(args.targets, REPO)}"] if args.targets else [])
                       + [f"--png {_rel(args.png, REPO)}"]
                       + ([f"--data {args.data}"] if args.data else [])
                       + ([f"--peer-time {' '.join(time_keys)}"] if time_keys != PEER_TIME_KEYS else []))
    Path(args.results).write_text(results_md(results, extras, args.png, targets, time_keys, command, args.results))
    print(f"wrote {args.results}")
    return 0


def add_report_arguments(p):
    p.add_argument("json", help="the grid JSON of `run` (its points make the plot and the main table)")
    p.add_argument("extra", nargs="*", help="more grid JSON files (--ragged, --next-n runs): a table each")
    p.add_argument("--png", default=str(REPO / "bench" / "results" / "grid.png"), help="where the plot goes")
    p.add_argument("--results", default=str(REPO / "bench" / "RESULTS.md"), help="where RESULTS.md goes")
    p.add_argument("--targets", default=None, help="a `run --targets` JSON, for target points not in the grid")
    p.add_argument("--data", default=None, help="the data kind the plot draws peers and floor for (default rho0.9)")
    p.add_argument("--peer-time", nargs="+", default=list(PEER_TIME_KEYS), metavar="KEY",
                   help="the keys of a named peer's record to take its time from, first present wins "
                        f"(default: {' '.join(PEER_TIME_KEYS)})")


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
    p = sub.add_parser("report", help="the PNG and RESULTS.md from run's JSON (any machine; needs matplotlib)")
    add_report_arguments(p)
    args = ap.parse_args(argv)
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
