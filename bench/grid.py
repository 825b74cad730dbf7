"""The benchmark grid on the GPU: DecodeTopK beside the peers, torch.topk and the speed-of-light kernel.

    python bench/grid.py run [--out DIR] [--rows 1 8 32 64 128] [--lengths 8192 ... 1048576]
        [--ks 512 2048] [--data rho0.9 rho0.999 gaussian] [--ragged] [--next-n N]
        [--targets] [--budget SECONDS] [--peers .peers [--peer-names NAME ...]
        [--peer-timeout SECONDS]] [--no-l2] [--passes N] [--head-start] [--builds] [--block]
    python bench/grid.py report GRID.json [EXTRA.json ...] [--targets TARGETS.json]
        [--png bench/results/grid.png] [--results bench/RESULTS.md] [--data rho0.9]
        [--peer-time topk_us us e2e_us]

`run` (on the H200, no DSL needed: the AOT libraries kernel/aot, .aot_sol and .aot_floor are carried) times
every point of rows x valid length x k in token mode, plus block mode (top-2048 blocks)
at 1,048,576, for each data kind, and writes DIR/grid.json (rewritten after every point, so
a stopped run keeps what it did) and DIR/grid.md. `report` (any machine; it needs
matplotlib) turns the JSON into the PNG and writes bench/RESULTS.md whole (how to read it,
targets, summary, every table), so no table there is kept by hand; EXTRA files (the
--ragged and --next-n runs) add their tables. The PNG has a column of panels a k and a
panel a row count: time against valid length on log axes, DecodeTopK (evicted, and
L2-resident dash-dotted), each peer as a line where its output was valid (x where it was
not; without named peers: the fastest valid peer, marked by which) and the floor on one
data kind (--data), DecodeTopK on the others as thin lines, block mode as stars, issue 15's
targets and quoted peer times.

Peers (`run --peers PATH`): PATH is a folder with peers.py (the prebuilt H200 builds of
SGLang v2, vLLM cooperative / persistent / auto and FlashInfer top_k, ../shared/peers/; on
the GPU runner copied into the repository as `.peers` and carried). Every peer peers.py
offers (or those of --peer-names) runs at every token-mode point in the same process, on
the same logits and lengths tensors as DecodeTopK and with this script's Timer. Its eager
output is checked by the same GPU contract checker as DecodeTopK's, and again after the
timed replays (output poisoned first); an invalid peer is still timed, with `valid` false
and why (`violations`, `first_rows`, peers.py's `violation` text). A peer's record
(`peers`: {name: record} in each point): `topk_us` (its kernels on input already in its
dtype: FP32 for vLLM and SGLang, BF16 for FlashInfer), `e2e_us` (BF16 in, the upcast
included), `l2_us` / `l2_e2e_us` (the same, L2-resident), `plan_us` (SGLang's plan, once a
batch upstream), `path` / `graph_path` (the kernel path of the eager / captured call),
`valid`; or `unsupported` (a shape, k or row lengths it does not take; block mode), `error`
(an exception, not loaded, a timeout) or `skipped` (the budget). A peer that raises is
recorded and the run goes on; one that takes more than --peer-timeout at a point keeps that
point's numbers and is not run again; one that hangs the GPU for twice that ends the run
with everything so far written. `report` takes the first of --peer-time's keys a record
has as the peer's time and excludes it where its `valid` flag is false, unsupported or
failed; torch.topk counts as a peer where its answer is the contract's (token mode, every
row at the full width). RESULTS.md gives each named peer a column, the fastest valid peer
of each point and DecodeTopK / it, evicted and L2-resident, and a summary.

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
input is served from L2; median of --reps after --warmup calls (taken again while far
above the fastest replay, settled_median; with --passes N the lowest of N passes'
medians, lower_of_passes: both for the GPU's slow windows). The L2-resident times
(`*_l2_us`, peers' `l2_us`; --no-l2 skips them) replay the same graph with no eviction, so
the logits are in L2 as far as they fit, as they are after the MQA logits kernel has just
written them; a GPU sleep (L2_SLEEP_CYCLES, no memory traffic) before each keeps the GPU
busy while the host enqueues the replay, as the eviction does for the evicted times, so
neither measures the host's launch latency. Times in microseconds:
- dtk: DecodeTopK (the policy's build, in `launches` launches: one since session 45, when
  max_rows stopped limiting a batch); dtk_l2 L2-resident;
- floor: bench/speed_of_light.py on the same build (load the row, write k indices);
- phys_floor: bench/physical_floor.py, the GPU's floor (one wave of two 512-thread CTAs an
  SM over every SM, every valid vector loaded once, k indices written; from .aot_floor,
  left out with a line saying so where that library is missing);
- torch: torch.topk(logits, k) over the full width (block mode: amax over 8-blocks, then
  topk), which ignores per-row lengths.

--budget bounds the whole run: no point starts that the previous point's duration says
would end past it, no peer starts past it (recorded as skipped), and a run still going
30 s past it writes what it has and exits (status 3).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from decode_topk.conformance.gpu_impl import POISON

REPO = Path(__file__).resolve().parent.parent

ROWS = (1, 8, 32, 64, 128)
LENGTHS = (8192, 32768, 131072, 262144, 524288, 1048576)
KS = (512, 2048)
DATA = ("rho0.9", "rho0.999", "gaussian")
FLUSH_BYTES = 256 << 20
# ~50 us of %clock spin before each L2-resident replay (torch.cuda._sleep): longer than a
# graph replay takes the host to enqueue. Without it (runs before session 11) a replay could
# start only when the host got there: session 11's first grid measured the L2-resident floor
# at 19.6 us where the evicted one took 4.5 (bench/NOTES.md session 11).
L2_SLEEP_CYCLES = 100_000
WARM_GPU_S = 1.0  # seconds of GPU work before the first timed point (Timer.warm_gpu)
# A measurement whose median is more than RETIME_RATIO times its fastest replay is taken
# again, up to RETIMES more times, and the lowest median kept (Timer.us), alike for every
# implementation timed. Why: on the H100s of sessions 36-37 a point's replays now and then
# ran 3-27x slower for milliseconds, the GPU's and not the build's (64 x 8192 k2048:
# DecodeTopK 170.8 us and its floor 50.1, where the neighbours took 7-9 and its L2-resident
# replays 6.4; bench/NOTES.md session 37). In session 37's next grid 31 of 195 points
# retook one or more of their ~20 measurements; a slow window longer than the retakes is
# left to `run --passes` (lower_of_passes).
RETIME_RATIO = 1.25
RETIMES = 2
# `run --head-start` (not yet the default: to be measured against the timer without it on
# one machine): a GPU sleep of HEAD_START_REPLAYS x L2_SLEEP_CYCLES before each take's
# replays, so the host enqueues all of them while the GPU is busy. Why: session 37's probe
# (bench/NOTES.md) had the host take 38-42 us (median) to enqueue a replay where the GPU
# spends ~85 us on the eviction and 50 us on the L2-resident sleep before it; a host
# slower by ~10 us a replay would time its own enqueue as the kernel's.
HEAD_START_REPLAYS = 60
# The keys every timed point has (dtk_l2_us and peers are optional: --no-l2, --peers).
TIMED_KEYS = ("dtk_us", "floor_us", "torch_us", "vs_floor", "vs_torch", "dtk_tb_s", "floor_tb_s")
# Issue 15's targets: (rows, length, k) -> (target microseconds at rho 0.9: 0.6x of the
# fastest valid peer, that peer's time as issue 15 quotes it, None) (the third field,
# torch.topk's time as issue 6 quoted it, is no longer kept: the grid times torch itself).
TARGETS = {(1, 131072, 2048): (7.5, 12.5, None), (8, 131072, 2048): (11.6, 19.4, None),
           (64, 131072, 2048): (25.6, 42.6, None), (32, 32768, 2048): (11.0, 18.3, None),
           (64, 8192, 512): (6.1, 10.2, None), (1, 1048576, 512): (12.6, 21.0, None),
           (8, 524288, 512): (14.3, 23.9, None), (64, 262144, 512): (47.3, 78.8, None),
           (128, 65536, 512): (17.2, 28.7, None), (128, 8192, 2048): (7.0, 11.7, None),
           (1, 8192, 512): (5.8, 9.7, None), (32, 1048576, 2048): (101.4, 169.0, None)}


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
    """Median microseconds of a CUDA graph replay, L2 evicted before each (evict=False:
    replayed after a GPU sleep, with no eviction, so the input is L2-resident as far as it
    fits). Either way the GPU is busy when the host enqueues the timed replay."""

    def __init__(self, torch, warmup, reps, head_start=False):
        self.torch, self.warmup, self.reps, self.head_start = torch, warmup, reps, head_start
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.retimed = 0  # measurements taken again (settled_median), over the run

    def warm_gpu(self, seconds=WARM_GPU_S):
        """Keep the GPU busy (the eviction's writes) for `seconds` before the first point,
        so that it is not timed on a GPU just out of idle: session 12's first grid timed
        its first point, 1 x 8192, at 47.0 us, where every later run of it took 9.5-9.7
        (bench/NOTES.md; likely clocks still rising), and a point's replays last only a few
        milliseconds."""
        torch = self.torch
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(20):
                self.flush.zero_()
            torch.cuda.synchronize()

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

    def us(self, fn, evict=True):
        graph = self.graph(fn)
        for _ in range(self.warmup):
            graph.replay()
        median, retimed = settled_median(lambda: self.replays(graph, evict))
        self.retimed += retimed
        return round(median * 1e3, 2)

    def replays(self, graph, evict):
        """Milliseconds of each of `reps` replays of `graph`."""
        torch = self.torch
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.reps)]
        if self.head_start:
            torch.cuda._sleep(HEAD_START_REPLAYS * L2_SLEEP_CYCLES)
        for start, end in events:
            if evict:
                self.flush.zero_()
            else:
                torch.cuda._sleep(L2_SLEEP_CYCLES)
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in events]


def settled_median(take, ratio=RETIME_RATIO, retimes=RETIMES):
    """(median, retakes): the median of take()'s samples; while it exceeds `ratio` times
    their fastest, take() again, at most `retimes` more times, and keep the lowest median
    (RETIME_RATIO says why)."""
    best = None
    for retakes in range(retimes + 1):
        samples = take()
        median = statistics.median(samples)
        best = median if best is None else min(best, median)
        if median <= ratio * min(samples):
            break
    return best, retakes


def point(ctx, kind, rows, length, k, block_mode, ragged, next_n, seed):
    """One grid point: check, then time dtk, floor and torch (evicted, then L2-resident),
    then the peers (run_peers)."""
    torch, aot, gpu_check, policy, sol = ctx["torch"], ctx["aot"], ctx["check"], ctx["policy"], ctx["sol"]
    timer = ctx["timer"]
    width = length if not ragged else min(policy.MAX_WIDTH, -(-int(length * 1.3) // 8) * 8)
    rec = {"data": kind, "rows": rows, "length": length, "width": width, "k": k,
           "mode": "block" if block_mode else "token", "ragged": ragged, "next_n": next_n}
    ctx["live"]["rec"] = rec
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
    build = policy.build_for(rows, width, resident, block_mode, k)
    slices = aot.launch_slices(rows, width, k, block_mode, next_n)
    rec.update(build=build.name, launches=len(slices))
    out = torch.full((rows, k), POISON, dtype=torch.int32, device="cuda")

    def dtk():
        for s in slices:
            aot.decode_topk_aot(logits[s], seq[s.start // next_n:s.stop // next_n] if next_n > 1 else lengths[s],
                                k, out=out[s], block_mode=block_mode, next_n=next_n)

    dtk()
    torch.cuda.synchronize()
    stats = gpu_check.row_stats(logits, lengths, (k,), block_mode)  # the peers' checks reuse it
    counts, first = gpu_check.check(logits, lengths, k, block_mode, out, stats=stats)
    rec["violations"] = int(sum(counts.values()))
    if rec["violations"]:
        rec["first_rows"] = first
        return rec
    rec["dtk_us"] = timer.us(dtk)
    floor_out = torch.empty_like(out)

    def floor():
        sol(logits, lengths, floor_out, k, build)

    if block_mode:
        def torch_topk():
            torch.topk(logits.view(rows, width // 8, 8).amax(dim=2), k, dim=1)
    else:
        def torch_topk():
            torch.topk(logits, k, dim=1)
    rec["floor_us"] = timer.us(floor)
    rec["torch_us"] = timer.us(torch_topk)
    if ctx.get("phys") is not None:  # the GPU's floor (bench/physical_floor.py), one wave over every SM
        rec["phys_floor_us"] = timer.us(lambda: ctx["phys"](logits, lengths, floor_out, k))
    rec["read_bytes"] = int(lengths.to(torch.int64).sum()) * 2
    derive(rec)
    if ctx["l2"]:
        rec["dtk_l2_us"] = timer.us(dtk, evict=False)
        rec["floor_l2_us"] = timer.us(floor, evict=False)
        rec["torch_l2_us"] = timer.us(torch_topk, evict=False)
    if ctx["builds"] and len(slices) == 1:
        rec["builds_us"] = time_builds(ctx, logits, lengths, seq, k, block_mode, next_n, build, stats)
    if ctx["peer_names"]:
        run_peers(ctx, rec, logits, lengths, k, block_mode, stats)
    return rec


def derive(rec):
    """A point's ratios and bandwidths from its times (point, lower_of_passes)."""
    rec["vs_floor"] = round(rec["dtk_us"] / rec["floor_us"], 2)
    if "phys_floor_us" in rec:
        rec["vs_phys_floor"] = round(rec["dtk_us"] / rec["phys_floor_us"], 2)
    rec["vs_torch"] = round(rec["dtk_us"] / rec["torch_us"], 3)
    rec["dtk_tb_s"] = round(rec["read_bytes"] / rec["dtk_us"] / 1e6, 3)
    rec["floor_tb_s"] = round(rec["read_bytes"] / rec["floor_us"] / 1e6, 3)


# The times of a point that run --passes takes the lower of (lower_of_passes): DecodeTopK's,
# the floors', torch.topk's, each forced build's and each peer's.
POINT_TIMES = ("dtk_us", "floor_us", "torch_us", "phys_floor_us", "dtk_l2_us", "floor_l2_us", "torch_l2_us")
PEER_TIMES = ("topk_us", "e2e_us", "l2_us", "l2_e2e_us", "plan_us")


def lower_of_passes(first, second):
    """One point's record from two passes over the plan (`run --passes`): each time the
    lower of the two medians, the ratios made again from them; a point that failed or
    violated the contract in either pass is that pass's record, and a peer is valid only
    if it was valid in both. Why: on the H100s of sessions 36-37 some points' replays all
    ran 3-27x slower for longer than settled_median's retakes (8 x 524288 k512: DecodeTopK
    108.1 us and its floor 107.6, where the session's next grid took 17.1 and 9.8;
    bench/NOTES.md session 37): minutes apart, two passes are seldom both caught."""
    for rec in (first, second):
        if "error" in rec or rec.get("violations") or "dtk_us" not in rec:
            return rec
    rec = dict(first, passes=first.get("passes", 1) + 1)
    _lower(rec, second, POINT_TIMES)
    if "builds_us" in first:
        rec["builds_us"] = dict(first["builds_us"])
        _lower(rec["builds_us"], second.get("builds_us", {}), list(first["builds_us"]))
    if "peers" in first:
        rec["peers"] = {}
        for name, mine in first["peers"].items():
            other = second.get("peers", {}).get(name)
            if not (isinstance(mine, dict) and isinstance(other, dict) and "valid" in mine and "valid" in other):
                rec["peers"][name] = mine
                continue
            # the record of a pass where it was not valid (its flag, violations and checks), if any
            peer = dict(other if mine["valid"] is True and other["valid"] is not True else mine)
            _lower(peer, other, PEER_TIMES)
            _lower(peer, mine, PEER_TIMES)
            rec["peers"][name] = peer
    retimed = first.get("retimed", 0) + second.get("retimed", 0)
    if retimed:
        rec["retimed"] = retimed
    derive(rec)
    return rec


def _lower(rec, other, keys):
    """rec[key] = the lower of rec's and other's, for each key both hold as a number."""
    for key in keys:
        if _num(rec.get(key)) is not None and _num(other.get(key)) is not None:
            rec[key] = min(rec[key], other[key])


def time_builds(ctx, logits, lengths, seq, k, block_mode, next_n, chosen, stats):
    """`run --builds`: {build name: us (L2 evicted), or 'invalid: ...'} of every other
    build that holds the width in this mode (1x512x4: token rows of any width), forced (the
    measurements behind SPEC 2.1's thresholds), 16x512x16 only where the rows' clusters of
    it are resident at once (one wave: its 16 SMs a row, a choice for few rows alone);
    each output is checked exactly first, the output poisoned before."""
    torch, aot, gpu_check, policy, timer = ctx["torch"], ctx["aot"], ctx["check"], ctx["policy"], ctx["timer"]
    rows, width = logits.shape
    resident = aot.resident_for(k, block_mode)
    times = {}
    for build in policy.BUILDS:
        if build == chosen or build.capacity_in(block_mode) < width or \
                (build.cluster == 16 and rows > resident(build)):
            continue
        out = torch.full((rows, k), POISON, dtype=torch.int32, device=logits.device)

        def forced():
            aot.decode_topk_aot(logits, seq if next_n > 1 else lengths, k, out=out, block_mode=block_mode,
                                build=build, next_n=next_n)

        forced()
        torch.cuda.synchronize()
        counts, _ = gpu_check.check(logits, lengths, k, block_mode, out, stats=stats)
        bad = int(sum(counts.values()))
        times[build.name] = f"invalid: {bad} violations" if bad else timer.us(forced)
    return times


# ---------------------------------------------------------------------------------------
# peers (run --peers PATH: ../shared/peers/peers.py, on the GPU runner .peers/)
# ---------------------------------------------------------------------------------------
class PeersError(ValueError):
    """A --peers / --peer-names argument that cannot work (a one-line message)."""


def _one_line(e, limit=400):
    text = " ".join(f"{type(e).__name__}: {e}".split()) if isinstance(e, BaseException) else " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def peers_module(path):
    """The module peers.py of the folder `path`, imported as it is (it imports torch only when
    a peer loads, so this needs no GPU). PeersError if there is none or it does not import."""
    folder = Path(path)
    if not folder.is_dir():
        raise PeersError(f"--peers {path}: no such folder (copy ../shared/peers/. into .peers and carry it)")
    source = folder / "peers.py"
    if not source.is_file():
        raise PeersError(f"--peers {path}: no peers.py in that folder")
    spec = importlib.util.spec_from_file_location("dtk_grid_peers", source)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001
        raise PeersError(f"--peers {path}: peers.py does not import ({_one_line(e)})") from None
    missing = [a for a in ("PEERS", "load", "check", "violation_text") if not hasattr(mod, a)]
    if missing:
        raise PeersError(f"--peers {path}: peers.py has no {', '.join(missing)}")
    return mod


def peer_selection(mod, names=None):
    """The peers to run: `names` (each one peers.py offers), else every peer it offers."""
    if not names:
        return list(getattr(mod, "DEFAULT_PEERS", None) or mod.PEERS)
    unknown = [n for n in names if n not in mod.PEERS]
    if unknown:
        raise PeersError(f"--peer-names: unknown {', '.join(unknown)}; peers.py offers {', '.join(mod.PEERS)}")
    return list(dict.fromkeys(names))


def load_peers(mod, names):
    """({name: callable peer}, {name: why it did not load}, {name: what loaded and what it is})."""
    fns, errors, info = {}, {}, {}
    for name in names:
        meta = {key: mod.PEERS[name][key] for key in ("project", "api", "input", "source", "license", "limits")
                if key in mod.PEERS[name]}
        try:
            fns[name] = mod.load([name])[name]
            meta["loaded"] = fns[name].loaded()
        except Exception as e:  # noqa: BLE001 - PeerUnavailable or anything else: recorded
            errors[name] = f"not loaded: {_one_line(e)}"
            meta["load_error"] = errors[name]
        info[name] = meta
    return fns, errors, info


def _lengths_ignored(mod, name):
    """A peer that reads every row at its full width (flashinfer_topk: FlashInfer's top_k)."""
    return "lengths ignored" in str(mod.PEERS.get(name, {}).get("limits", ""))


def _where(rec):
    return f"{rec['data']} {rec['rows']}x{rec.get('width', rec['length'])} k{rec['k']}"


def _sticky(torch):
    """None, or the error a synchronize raises (a sticky CUDA error: this process is done)."""
    try:
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001
        return _one_line(e)


def _checksum(torch, logits):
    return int(torch.sum(logits.view(torch.int16), dtype=torch.int64))


def time_peer(ctx, fn, full_width_only, logits, lengths, k, stats):
    """One peer at one token-mode point, as peers.py's bench does it but on the grid's tensors,
    timer and contract checker: the eager call checked; topk_us (FP32 peers: the kernels on a
    pre-upcast FP32 copy) and e2e_us (BF16 in), each followed by a check of what the last
    replay left (output poisoned first); l2_us / l2_e2e_us; plan_us (SGLang, where it plans)."""
    torch, gpu_check, timer, mod = ctx["torch"], ctx["check"], ctx["timer"], ctx["peers"]
    rows, width = logits.shape
    why = fn.supports(rows, width, k)
    if why:
        return {"unsupported": why}
    if full_width_only and bool((lengths != width).any()):
        return {"unsupported": "reads every row at its full width (lengths ignored); rows here are shorter"}
    rec = {"valid": None, "input": fn.input_dtype}
    checks = {}
    kw = fn.prepare(lengths)
    torch.cuda.synchronize()
    out = torch.full((rows, k), POISON, dtype=torch.int32, device=logits.device)

    def verify(stage):
        counts, first = gpu_check.check(logits, lengths, k, False, out, stats=stats)
        bad = {reason: n for reason, n in counts.items() if n}
        checks[stage] = int(sum(bad.values()))
        if bad and "violations" not in rec:
            rec.update(violations=bad, first_rows=first, first_bad=stage)
            try:
                rec["violation"] = mod.violation_text(mod.check(torch, logits, lengths, k, out))
            except Exception as e:  # noqa: BLE001
                rec["violation"] = f"(peers.check failed: {_one_line(e)})"

    fn(logits, lengths, k, out, **kw)
    torch.cuda.synchronize()
    rec["path"] = fn.last_path
    verify("eager")
    x = fn.to_input(logits).clone() if fn.input_dtype == "float32" else None  # apart from the peer's buffer

    def topk():
        fn.topk(x, lengths, k, out, **kw)

    def e2e():
        fn(logits, lengths, k, out, **kw)

    if x is not None:
        out.fill_(POISON)
        rec["topk_us"] = timer.us(topk)
        verify("after topk replays")
    out.fill_(POISON)
    rec["e2e_us"] = timer.us(e2e)
    graph_path = fn.last_path  # the dispatch of the captured call
    verify("after e2e replays")
    if x is None:
        rec["topk_us"] = rec["e2e_us"]  # BF16 read natively: nothing to leave out
    if graph_path != rec["path"]:
        rec["graph_path"] = graph_path
    if ctx["l2"]:
        if x is not None:
            rec["l2_us"] = timer.us(topk, evict=False)
        rec["l2_e2e_us"] = timer.us(e2e, evict=False)
        if x is None:
            rec["l2_us"] = rec["l2_e2e_us"]
    plan_needed = getattr(fn, "plan_needed", None)
    if callable(plan_needed) and plan_needed(rows):
        md = torch.zeros(rows + 1, 2, dtype=torch.int32, device=logits.device)
        rec["plan_us"] = timer.us(lambda: fn.plan(lengths, md))  # once a batch upstream, in neither time
    rec["checks"] = checks
    rec["valid"] = not any(checks.values())
    return rec


def run_peers(ctx, rec, logits, lengths, k, block_mode, stats):
    """rec["peers"] = {name: record} for every selected peer; failures are recorded, and a
    sticky CUDA error sets ctx["stop"]."""
    torch, live = ctx["torch"], ctx["live"]
    done = rec["peers"] = {}
    names = ctx["peer_names"]
    before = _checksum(torch, logits)
    for i, name in enumerate(names):
        if name in ctx["peer_off"]:
            done[name] = {"error": ctx["peer_off"][name]}
            continue
        if block_mode:
            done[name] = {"unsupported": "block mode (the top-k of 8-logit blocks) is DecodeTopK's own"}
            continue
        if time.perf_counter() + ctx["peer_last_s"].get(name, 0.0) > ctx["deadline"]:
            done[name] = {"skipped": "budget spent"}
            continue
        t = time.perf_counter()
        live.update(peer=name, since=t)
        try:
            prec = time_peer(ctx, ctx["peer_fns"][name], name in ctx["full_width_only"], logits, lengths, k, stats)
        except Exception as e:  # noqa: BLE001 - any failure of a peer is its record
            prec = {"error": _one_line(e)}
            sticky = _sticky(torch)
            if sticky:
                prec["fatal"] = sticky
                ctx["stop"] = f"sticky CUDA error after {name} at {_where(rec)}: {sticky}"
        finally:
            live["peer"] = None
        elapsed = time.perf_counter() - t
        ctx["peer_last_s"][name] = elapsed
        prec["elapsed_s"] = round(elapsed, 2)
        if elapsed > ctx["peer_timeout"]:
            prec["timeout"] = f"took {elapsed:.0f} s, over --peer-timeout {ctx['peer_timeout']:g} s"
            ctx["peer_off"][name] = f"not run: timed out at {_where(rec)}"
        done[name] = prec
        if ctx.get("stop"):
            for rest in names[i + 1:]:
                done[rest] = {"error": f"not run: {ctx['stop']}"}
            return
        if _checksum(torch, logits) != before:  # the next peer and point must see the grid's data
            prec["error"] = "wrote into the logits"
            rec["logits_changed_by"] = name
            ctx["forget_logits"]()
            for rest in names[i + 1:]:
                done[rest] = {"error": f"not run: {name} wrote into the logits"}
            return


def _compact(rec):
    """A point's record with each peer as its time or status (the per-point progress line)."""
    out = {key: v for key, v in rec.items() if key != "peers"}
    if "peers" in rec:
        out["peers"] = {n: (r.get("topk_us") if r.get("valid") else
                            r.get("unsupported") and "n/a" or r.get("skipped") and "skipped" or
                            r.get("error") or f"INVALID {r.get('topk_us')} us: {r.get('violation', '')}"[:160])
                        for n, r in rec["peers"].items()}
    return out


def start_watchdog(live, save, hang_s, hard_deadline):
    """A thread that, when a peer has held the GPU for hang_s or the run is past hard_deadline,
    writes what the run has (save(why)) and ends the process (status 3): a hung kernel cannot
    be taken back inside this process."""
    def watch():
        while not live.get("done"):
            time.sleep(1.0)
            now = time.perf_counter()
            peer = live.get("peer")
            why = None
            if peer and now - live.get("since", now) > hang_s:
                why = (f"{peer} still running after {now - live['since']:.0f} s at {_where(live['rec'])}: "
                       "the run ends here")
            elif now > hard_deadline:
                why = "still running 30 s past --budget: the run ends here"
            if why:
                print(f"grid.py run: {why}", file=sys.stderr, flush=True)
                try:
                    save(why)
                finally:
                    os._exit(3)

    thread = threading.Thread(target=watch, name="grid-watchdog", daemon=True)
    thread.start()
    return thread


def launch_library(lib, torch, what, logits, lengths, out, k, cluster, vectors, block_mode=False, trace=None):
    """One launch of the (k, cluster, vectors, mode, traced if `trace`) variant of a library
    that kernel/aot.py built (next_n 1), on the current stream; RuntimeError naming `what`
    on an error code."""
    import ctypes

    rows, width = logits.shape
    err = lib.dtk_launch(k, cluster, vectors, int(block_mode), int(trace is not None),
                         ctypes.c_void_p(logits.data_ptr()), rows, width, logits.stride(0),
                         ctypes.c_void_p(lengths.data_ptr()), 1, ctypes.c_void_p(out.data_ptr()),
                         ctypes.c_void_p(0 if trace is None else trace.data_ptr()),
                         ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    if err:
        raise RuntimeError(f"{what} launch: {lib.dtk_error_name(err).decode()} ({err})")


def _module_launcher(aot, torch, folder, source, what):
    """launch(logits, lengths, out, k, cluster, vectors) of the AOT library in `folder` that
    kernel/aot.py built from bench/`source` (its hash checked against that file)."""
    lib = aot.load_library_at(REPO / folder, REPO / "bench" / source)
    return lambda logits, lengths, out, k, cluster, vectors: launch_library(lib, torch, what, logits, lengths, out,
                                                                            k, cluster, vectors)


def sol_launcher(aot, torch):
    """floor(logits, lengths, out, k, build): the speed-of-light kernel from .aot_sol (built
    by kernel/aot.py from bench/speed_of_light.py), in DecodeTopK's build `build`."""
    launch = _module_launcher(aot, torch, ".aot_sol", "speed_of_light.py", "speed-of-light")
    return lambda logits, lengths, out, k, build: launch(logits, lengths, out, k, build.cluster, build.vectors)


def phys_launcher(aot, torch):
    """phys(logits, lengths, out, k): the physical floor from .aot_floor (built by
    kernel/aot.py from bench/physical_floor.py; its one key is 1x512x8), or None (and a
    line saying so) where that library is not there."""
    if not (REPO / ".aot_floor").is_dir():
        print("grid.py run: no .aot_floor (python -m decode_topk.kernel.aot --module bench/physical_floor.py "
              "--out .aot_floor --work build/aot_floor): no physical floor column", flush=True)
        return None
    launch = _module_launcher(aot, torch, ".aot_floor", "physical_floor.py", "physical floor")
    return lambda logits, lengths, out, k: launch(logits, lengths, out, k, 1, 8)


def run(args):
    t0 = time.perf_counter()
    if args.passes < 1:
        print(f"grid.py run: --passes {args.passes}: at least 1", file=sys.stderr)
        return 2
    peers_mod, peer_names = None, []
    try:  # the peers' arguments first, before torch or the GPU: a bad one is one line
        if args.peers:
            peers_mod = peers_module(args.peers)
            peer_names = peer_selection(peers_mod, args.peer_names)
        elif args.peer_names:
            raise PeersError("--peer-names needs --peers PATH (the peers folder, e.g. .peers)")
    except PeersError as e:
        print(f"grid.py run: {e}", file=sys.stderr)
        return 2

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

    live = {"rec": None, "peer": None}
    ctx = {"torch": torch, "aot": aot_loader, "check": gpu_check, "policy": policy, "logits": logits,
           "forget_logits": cache.clear, "sol": sol_launcher(aot_loader, torch),
           "phys": phys_launcher(aot_loader, torch),
           "timer": Timer(torch, args.warmup, args.reps, args.head_start), "l2": not args.no_l2, "live": live,
           "peers": peers_mod, "peer_names": peer_names, "peer_fns": {}, "peer_off": {}, "peer_last_s": {},
           "full_width_only": {n for n in peer_names if _lengths_ignored(peers_mod, n)},
           "peer_timeout": args.peer_timeout, "deadline": t0 + args.budget, "builds": args.builds}
    info = aot_loader.library_info()
    timing = (f"CUDA graph replay, L2 evicted, median of {args.reps} after {args.warmup} (taken again, up to "
              f"{RETIMES} times, while above {RETIME_RATIO}x the fastest replay; the lowest kept)")
    if args.passes > 1:
        timing += f"; each time the lowest of {args.passes} passes over the points (lower_of_passes)"
    if args.head_start:
        timing += f"; a GPU sleep of {HEAD_START_REPLAYS} x {L2_SLEEP_CYCLES} cycles before each take (--head-start)"
    if ctx["l2"]:
        timing += ("; L2-resident (dtk_l2_us, floor_l2_us, torch_l2_us, peers' l2_us): the same without eviction, "
                   "a GPU sleep before each")
    results = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
               "torch": torch.__version__, "kernel_source_sha256": info["kernel_source_sha256"],
               "timing": timing, "points": []}
    if peer_names:
        ctx["peer_fns"], ctx["peer_off"], loaded = load_peers(peers_mod, peer_names)
        results["peer_libraries"] = {
            "path": str(args.peers),
            "peers_py_sha256": hashlib.sha256(Path(peers_mod.__file__).read_bytes()).hexdigest(),
            "names": peer_names, "peers": loaded,
            "times": "topk_us: the peer's kernels on input in its dtype (FP32 peers: pre-upcast); e2e_us: BF16 in, "
                     "upcast included; l2_us, l2_e2e_us: the same, L2-resident; plan_us: SGLang's plan, once a batch"}
        for name, meta in loaded.items():
            print(f"peer {name}: {meta.get('loaded') or meta.get('load_error')}", flush=True)
    plan = []
    if args.targets:
        plan += [(kind, r, n, k, False) for (r, n, k) in TARGETS for kind in args.data]
    else:
        for kind in args.data:
            for n in args.lengths:
                for r in args.rows:
                    if not args.block_only:
                        plan += [(kind, r, n, k, False) for k in args.ks]
                    if (n == policy.MAX_WIDTH or args.block or args.block_only) and not args.ragged:
                        plan.append((kind, r, n, 2048, True))
    path = out_dir / f"grid{args.tag}.json"
    ctx["timer"].warm_gpu()

    def save(stopped=None):
        for _ in range(3):  # the watchdog's call can race the main thread's updates
            try:
                res = dict(results, points=list(results["points"]))
                current = live.get("rec")
                if stopped:
                    res["stopped"] = stopped
                    if current is not None and not live.get("later_pass") and \
                            not any(p is current for p in res["points"]):
                        current = json.loads(json.dumps(current))
                        if live.get("peer"):
                            current.setdefault("peers", {})[live["peer"]] = {"error": f"timeout: {stopped}"}
                        if "error" not in current and not current.get("violations") and \
                                not all(key in current for key in TIMED_KEYS):
                            current["error"] = f"stopped: {stopped}"
                        res["points"].append(current)
                path.write_text(json.dumps(res, indent=1))
                (out_dir / f"grid{args.tag}.md").write_text(table(res))
                return
            except RuntimeError:
                time.sleep(0.1)

    start_watchdog(live, save, 2 * args.peer_timeout, t0 + args.budget + 30)
    last = 0.0
    slots = {}  # plan index -> its point in results["points"] (the first pass's)
    for n, (i, (kind, rows, length, k, block_mode)) in enumerate(
            (i, item) for _ in range(args.passes) for i, item in enumerate(plan)):
        started = time.perf_counter()
        if started - t0 + last > args.budget:
            results["stopped"] = (f"budget {args.budget:g} s: stopped after {n} of {args.passes} x {len(plan)} "
                                  f"points (the next would end past it)")
            break
        if rows % args.next_n or (n >= len(plan) and i not in slots):
            continue
        live["later_pass"] = n >= len(plan)  # a point cut off then keeps its earlier passes' record (save)
        retimed = ctx["timer"].retimed
        try:
            rec = point(ctx, kind, rows, length, k, block_mode, args.ragged, args.next_n, args.seed + length)
            if ctx["timer"].retimed > retimed:
                rec["retimed"] = ctx["timer"].retimed - retimed  # settled_median's retakes in this point
        except Exception as e:  # noqa: BLE001
            rec = {"data": kind, "rows": rows, "length": length, "k": k, "block": block_mode,
                   "mode": "block" if block_mode else "token", "error": _one_line(e, 2000)}
            sticky = _sticky(torch)
            if sticky:
                ctx["stop"] = f"sticky CUDA error at {_where(rec)}: {sticky}"
        last = time.perf_counter() - started
        if i in slots:
            results["points"][slots[i]] = rec = lower_of_passes(results["points"][slots[i]], rec)
        else:
            slots[i] = len(results["points"])
            results["points"].append(rec)
        live["rec"] = None
        save()
        print(json.dumps(_compact(rec)), flush=True)
        if ctx.get("stop"):
            results["stopped"] = ctx["stop"]
            break
    live["done"] = True
    save()
    print(short_table(results))
    if results.get("stopped"):
        print(f"stopped: {results['stopped']}")
    bad = [p for p in results["points"] if p.get("violations") or "error" in p]
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------
# tables and plot (anywhere)
# ---------------------------------------------------------------------------------------
TORCH = "torch.topk"
# TARGETS' second number: issue 15 quotes it as the fastest valid peer at that point,
# measured on the same H200 with the same data (2026-12-01); `run --peers` times them anew.
ISSUE6_PEER = "issue 15 best peer"
# The GPU of issue 15's quoted times, and its rule: DecodeTopK at most this share of the
# fastest valid peer's time at each target point.
TARGET_GPU = "H200"
TARGET_RATIO = 0.6
# A named peer's time (`run --peers` records): the first of these keys the record has.
# topk_us: the peer's kernels on input already in its own dtype (FP32 for vLLM and
# SGLang, BF16 for FlashInfer); e2e_us: BF16 in, the upcast included.
PEER_TIME_KEYS = ("topk_us", "us", "e2e_us")
# The L2-resident counterpart of each time key (`run` without --no-l2); any other key K: l2_K.
L2_KEYS = {"topk_us": "l2_us", "us": "l2_us", "e2e_us": "l2_e2e_us"}


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


def _peer_us(rec, time_keys, l2=False):
    """The first of time_keys the record has (l2: that key's L2-resident counterpart, or None)."""
    for key in time_keys:
        if isinstance(rec.get(key), (int, float)):
            if not l2:
                return rec[key]
            us = rec.get(L2_KEYS.get(key, f"l2_{key}"))
            return us if isinstance(us, (int, float)) else None
    return None


def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _peer_status(rec, us):
    """valid (flag true), unchecked (no flag), invalid (flag false), n/a (unsupported),
    skipped (the budget), failed."""
    if rec.get("unsupported"):
        return "n/a"
    if rec.get("skipped"):
        return "skipped"
    if rec.get("error") or us is None:
        return "failed"
    return {True: "valid", False: "invalid"}.get(rec.get("valid"), "unchecked")


def candidates(p, time_keys=PEER_TIME_KEYS, l2=False):
    """[(name, us, status)] of every peer of a point: the named peers, then torch.topk, which
    counts as valid only where its answer is the contract's (_full_rows). l2: the
    L2-resident times (None where a record has none); the status is the evicted time's."""
    out = []
    for name, rec in sorted(named_peers(p).items()):
        us = _peer_us(rec, time_keys)
        out.append((name, _peer_us(rec, time_keys, l2) if l2 else us, _peer_status(rec, us)))
    if _num(p.get("torch_us")) is not None:
        out.append((TORCH, _num(p.get("torch_l2_us")) if l2 else p["torch_us"],
                    "valid" if _full_rows(p) else "not the contract"))
    return out


def fastest_valid(p, time_keys=PEER_TIME_KEYS, l2=False):
    """(us, name) of the fastest peer not shown invalid (a validity flag, where the record
    has one, must be true), else (None, None). l2: by the L2-resident times."""
    ok = [(us, name) for name, us, status in candidates(p, time_keys, l2)
          if status in ("valid", "unchecked") and us is not None]
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
    if status in ("n/a", "failed", "skipped"):
        return status
    us = round(us, 2)
    return f"{us}" if status == "valid" else f"{us} ({status})"


def _fastest_cell(p, time_keys, l2=False):
    us, name = fastest_valid(p, time_keys, l2)
    return "" if us is None else f"{round(us, 2)} ({name})"


def _ratio_cell(dtk, best):
    return "" if _num(dtk) is None or not best else f"{dtk / best:.2f}"


def has_l2(*runs):
    """Whether any point of these runs carries DecodeTopK's L2-resident time."""
    return any(_num(p.get("dtk_l2_us")) is not None for res in runs if res for p in res["points"])


def peer_columns(names, l2):
    """The headers of the peer columns: a column a named peer, the fastest valid peer and
    DecodeTopK / it (with named peers), the L2-resident trio (with L2 times)."""
    cols = [f"{n} us" for n in names]
    if names:
        cols += ["fastest valid peer us", "DecodeTopK / fastest valid peer"]
    if l2:
        cols += ["DecodeTopK L2 us", "fastest valid peer L2 us", "DecodeTopK / fastest valid peer, L2"]
    return cols


def peer_cells(p, names, time_keys, l2):
    """The cells of peer_columns for point p."""
    cells = [_peer_cell(p, n, time_keys) for n in names]
    if names:
        cells += [_fastest_cell(p, time_keys), _ratio_cell(p.get("dtk_us"), fastest_valid(p, time_keys)[0])]
    if l2:
        dtk = _num(p.get("dtk_l2_us"))
        cells += ["" if dtk is None else dtk, _fastest_cell(p, time_keys, True),
                  _ratio_cell(dtk, fastest_valid(p, time_keys, True)[0])]
    return cells


def _point_label(p):
    return f"{_label(p)} {p['rows']} x {p['length']} k{p['k']}"


def peer_summary(points, time_keys=PEER_TIME_KEYS, l2=False):
    """DecodeTopK against the fastest valid peer over the timed points that have one (l2: by
    the L2-resident times): {timed, compared, faster, median, worst, worst_at, worst_peer,
    best, floor_median}; ratios DecodeTopK / fastest valid peer (None where nothing compares)."""
    ok = [p for p in points if _num(p.get("dtk_us")) is not None]
    pairs = []
    for p in ok:
        dtk = _num(p.get("dtk_l2_us")) if l2 else p["dtk_us"]
        us, name = fastest_valid(p, time_keys, l2)
        if dtk is not None and us:
            pairs.append((dtk / us, p, name))
    floors = [p["vs_floor"] for p in ok if _num(p.get("vs_floor")) is not None]
    phys = [p["vs_phys_floor"] for p in ok if _num(p.get("vs_phys_floor")) is not None]
    out = {"timed": len(ok), "compared": len(pairs), "faster": sum(r < 1 for r, _, _ in pairs),
           "median": None, "worst": None, "worst_at": None, "worst_peer": None, "best": None,
           "floor_median": statistics.median(floors) if floors else None,
           "phys_floor_median": statistics.median(phys) if phys else None}
    if pairs:
        ratios = sorted(r for r, _, _ in pairs)
        worst = max(pairs, key=lambda t: t[0])
        out.update(median=statistics.median(ratios), worst=worst[0], worst_at=_point_label(worst[1]),
                   worst_peer=worst[2], best=ratios[0])
    return out


def crowded_summary(points, crowded=("rho0.9", "rho0.999"), limit=1.3):
    """Crowded rows against Gaussian ones (issue 15: within 1.3x at every point): over the
    token-mode points timed at both a crowded kind and Gaussian with the same rows, length
    and k (and the same ragged and next_n), DecodeTopK's crowded time / its Gaussian time.
    {compared, within, worst, worst_at} (worst None where nothing compares)."""
    def key(p):
        return p["rows"], p["length"], p["k"], bool(p.get("ragged")), p.get("next_n", 1)
    timed = [p for p in points if p.get("mode") == "token" and _num(p.get("dtk_us")) is not None]
    gaussian = {key(p): p["dtk_us"] for p in timed if p["data"] == "gaussian"}
    pairs = [(p["dtk_us"] / gaussian[key(p)], p) for p in timed
             if p["data"] in crowded and gaussian.get(key(p))]
    out = {"compared": len(pairs), "within": sum(r <= limit for r, _ in pairs), "worst": None, "worst_at": None}
    if pairs:
        worst = max(pairs, key=lambda t: t[0])
        out.update(worst=worst[0], worst_at=_point_label(worst[1]))
    return out


def _summary_text(s, what):
    if not s["compared"]:
        return f"{what}: no point has a valid peer with a time"
    return (f"{what}: DecodeTopK is faster than the fastest valid peer at {s['faster']} of {s['compared']} points; "
            f"DecodeTopK / fastest valid peer: median {s['median']:.2f}, worst {s['worst']:.2f} ({s['worst_at']}, "
            f"against {s['worst_peer']}), best {s['best']:.2f}")


def peer_breakdown(points, names, time_keys=PEER_TIME_KEYS, l2=False):
    """A markdown table: a row a named peer, with its points by status, where it is the
    fastest valid peer, DecodeTopK / it at its valid points, and where it was invalid."""
    lines = ["| peer | valid | invalid | n/a | failed | skipped | fastest valid peer at | DecodeTopK / peer, median "
             + ("| DecodeTopK / peer L2, median " if l2 else "") + "| invalid at |",
             "|" + "---|" * (9 + bool(l2))]
    ok = [p for p in points if _num(p.get("dtk_us")) is not None]
    for n in names:
        status, ratios, ratios_l2, bad, wins = {}, [], [], [], 0
        for p in ok:
            rec = named_peers(p).get(n)
            if rec is None:
                continue
            us = _peer_us(rec, time_keys)
            st = _peer_status(rec, us)
            status[st] = status.get(st, 0) + 1
            if st in ("valid", "unchecked"):
                ratios.append(p["dtk_us"] / us)
                us2, dtk2 = _peer_us(rec, time_keys, True), _num(p.get("dtk_l2_us"))
                if us2 and dtk2 is not None:
                    ratios_l2.append(dtk2 / us2)
            elif st == "invalid":
                bad.append(f"{p['data']} {p['rows']}x{p['length']} k{p['k']}")
            wins += fastest_valid(p, time_keys)[1] == n
        cells = [n, status.get("valid", 0) + status.get("unchecked", 0), status.get("invalid", 0),
                 status.get("n/a", 0), status.get("failed", 0), status.get("skipped", 0), wins,
                 f"{statistics.median(ratios):.2f}" if ratios else ""]
        if l2:
            cells.append(f"{statistics.median(ratios_l2):.2f}" if ratios_l2 else "")
        cells.append(", ".join(bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else ""))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _issue6(p):
    """(target us, issue 15 best peer us) where the point is one of issue 15's (rho 0.9, token, full rows)."""
    target, peer, _ = TARGETS.get((p["rows"], p["length"], p["k"]), (None, None, None))
    if p.get("data") != "rho0.9" or not _full_rows(p):
        return None, None
    return target, peer


def table(results, names=None, time_keys=PEER_TIME_KEYS):
    """The run's points as a markdown table, a line of provenance first. `names`: the named
    peers to give a column each (default: those in the run); with any, a column names the
    fastest valid peer of each point."""
    names = peer_names(results) if names is None else names
    l2 = has_l2(results)
    cols = ["data", "mode", "rows", "length", "k", "build", "launches", "DecodeTopK us", "floor us",
            "torch.topk us", "DecodeTopK / floor", "DecodeTopK / torch.topk", "DecodeTopK TB/s", "floor TB/s"]
    phys = any("phys_floor_us" in p for p in results["points"])
    if phys:
        cols += ["physical floor us", "DecodeTopK / physical floor"]
    cols += peer_columns(names, l2)
    cols += ["issue 15 target us", f"{ISSUE6_PEER} us"]
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
        if phys:
            cells += [p.get("phys_floor_us", ""), p.get("vs_phys_floor", "")]
        cells += peer_cells(p, names, time_keys, l2)
        cells += [target or "", peer or ""]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def short_table(results):
    ok = [p for p in results["points"] if "dtk_us" in p]
    bad = len(results["points"]) - len(ok)
    within = sum(p["vs_floor"] <= 1.5 for p in ok)
    fifth = sum(p["vs_torch"] <= 0.2 for p in ok)
    lines = [f"{len(ok)} points timed, {bad} invalid or failed; within 1.5x of the floor: {within}; "
             f"at most 1/5 of torch.topk: {fifth}"]
    if peer_names(results):
        lines.append(_summary_text(peer_summary(ok), "peers"))
    if has_l2(results):
        lines.append(_summary_text(peer_summary(ok, l2=True), "L2-resident"))
    lines.append("| rows | length | k | dtk us | target |")
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
# A line a peer where the run has named peers (distinct from DecodeTopK's blues and greens).
PEER_COLORS = ("#E69F00", "#7B3294", "#8C510A", "#B2182B", "#777777", "#808000", "#01665E", "#F781BF")


def _length_label(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10}K" if n % 1024 == 0 else str(n)


def plot(results, png, data=None, time_keys=PEER_TIME_KEYS):
    """The PNG: a column a k, a row of panels a row count; time against valid length on log
    axes. In each panel: DecodeTopK (and, where the run has them, its L2-resident times
    dash-dotted), the peers and the speed-of-light floor on the main data kind (`data`,
    default rho0.9), DecodeTopK on the other data kinds as thin lines, block mode as stars
    at its length, issue 15's targets and quoted peer times where the panel has one. The
    peers: with named peers in the run, a line each (torch.topk too) through its valid
    points, an x where its output was invalid; without, the fastest valid peer as a dashed
    line, its marker saying which."""
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
    line_peers = peer_names(results)
    line_peers = line_peers + [TORCH] if line_peers else []
    style = {n: (PEER_COLORS[i % len(PEER_COLORS)], PEER_MARKERS[i % len(PEER_MARKERS)])
             for i, n in enumerate(line_peers)}
    l2 = any(_num(p.get("dtk_l2_us")) is not None for p in points if p["data"] == main)
    nan = float("nan")
    invalid_seen = False

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
                for n in line_peers:
                    good, bad = [], []
                    for p in s:
                        us, status = next(((u, st) for m, u, st in candidates(p, time_keys) if m == n), (None, None))
                        good.append(us if us is not None and status in ("valid", "unchecked") else nan)
                        if us is not None and status == "invalid":
                            bad.append((p["length"], us))
                    c, m = style[n]
                    ax.plot(x, good, "-", marker=m, color=c, lw=1.2, ms=3.5, alpha=0.9)
                    if bad:
                        invalid_seen = True
                        ax.plot([b[0] for b in bad], [b[1] for b in bad], "x", color=c, ms=7, mew=1.6, ls="none")
                best = [(p["length"],) + fastest_valid(p, time_keys) for p in s]
                best = [b for b in best if b[1] is not None]
                if best and not line_peers:
                    ax.plot([b[0] for b in best], [b[1] for b in best], "--", color=C_PEER, lw=2)
                    for n in winners:
                        w = [b for b in best if b[2] == n]
                        if w:
                            ax.plot([b[0] for b in w], [b[1] for b in w], marker[n], color=C_PEER, ms=6,
                                    mec="black", mew=0.6, ls="none")
                if l2:
                    ax.plot(x, [_num(p.get("dtk_l2_us")) or nan for p in s], "-.", color=C_DTK, lw=1.4)
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
    handles = [Line2D([], [], color=C_DTK, lw=2.2, marker="o", ms=4.5, label=f"DecodeTopK ({main})")]
    if l2:
        handles.append(Line2D([], [], color=C_DTK, lw=1.4, ls="-.", label=f"DecodeTopK ({main}), L2-resident"))
    if line_peers:
        handles += [Line2D([], [], color=style[n][0], marker=style[n][1], lw=1.2, ms=3.5,
                           label=n + (" (full-length rows)" if n == TORCH else "") + ", where valid")
                    for n in line_peers]
        if invalid_seen:
            handles.append(Line2D([], [], color="0.3", marker="x", ms=7, mew=1.6, ls="none",
                                  label="a peer's invalid output (timed, not counted)"))
        handles.append(Line2D([], [], color=C_FLOOR, lw=1.8, ls=":", label="floor: speed-of-light kernel, same launch"))
    else:
        handles += [Line2D([], [], color=C_PEER, lw=2, ls="--", label="fastest valid peer (marker: which)"),
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
        handles += [Line2D([], [], color=C_TARGET, marker="_", ms=16, mew=2.5, ls="none", label="issue 15 target"),
                    Line2D([], [], color="none", marker="d", mec=C_TARGET, ms=7, mew=1.4, ls="none",
                           label="issue 15 best valid peer (quoted)")]
    top = max(1.4, 0.4 + 0.25 * math.ceil(len(handles) / 3))  # inches above the panels: title and legend
    fig.set_figheight(fig.get_figheight() + top - 1.4)
    fig.legend(handles=handles, loc="upper center", ncol=3, fontsize=10, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.5 / fig.get_figheight()))
    fig.suptitle(f"DecodeTopK, {results['gpu']}, {results['date']}, kernel source "
                 f"{results['kernel_source_sha256'][:12]}: token mode on {main} data unless marked",
                 fontsize=13, y=1 - 0.12 / fig.get_figheight())
    fig.tight_layout(rect=(0, 0, 1, 1 - top / fig.get_figheight()))
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
    below = [p for p in ok if p["vs_floor"] < 1]
    if below:
        # The floor loads what DecodeTopK's launch loads and selects nothing, so DecodeTopK
        # cannot beat it: until session 51 the multi-CTA streamed builds' floor read each
        # row once a CTA and sat above DecodeTopK at 8 x 1M (bench/NOTES.md session 51).
        text += (f" (**DecodeTopK faster than its launch's floor at {len(below)} of {len(ok)} points**, e.g. "
                 f"{_point_label(below[0])}: the floor loads more than DecodeTopK, so bench/speed_of_light.py "
                 "is wrong for that build)")
    phys = sorted(p["vs_phys_floor"] for p in ok if _num(p.get("vs_phys_floor")) is not None)
    if phys:
        text += (f"; DecodeTopK / physical floor: median {statistics.median(phys):.2f}, best {phys[0]:.2f}, "
                 f"worst {phys[-1]:.2f}")
    if any(named_peers(p) for p in ok):
        vs = sorted(p["dtk_us"] / us for p in ok for us, _ in [fastest_valid(p, time_keys)] if us)
        if vs:
            text += (f"; DecodeTopK / fastest valid peer (torch.topk included where valid): median "
                     f"{statistics.median(vs):.2f}, best {vs[0]:.2f}, worst {vs[-1]:.2f}, faster at "
                     f"{sum(v < 1 for v in vs)} of {len(vs)}")
    s = peer_summary(ok, time_keys, l2=True)
    if s["compared"]:
        text += (f"; L2-resident, DecodeTopK / fastest valid peer: median {s['median']:.2f}, best {s['best']:.2f}, "
                 f"worst {s['worst']:.2f}, faster at {s['faster']} of {s['compared']}")
    return text


def _rel(path, start):
    return os.path.relpath(Path(path).resolve(), Path(start).resolve())


def l2_caveat(points):
    """A sentence where a run's L2-resident times are not kernel times, else "": the floor
    loads the same bytes either way, and from L2 it cannot be much slower than from HBM,
    so an L2-resident floor over 1.5x the evicted one at most points means that those
    replays waited on the host (a run before L2_SLEEP_CYCLES)."""
    pairs = [(p["floor_l2_us"], p["floor_us"]) for p in points
             if isinstance(p.get("floor_l2_us"), (int, float)) and isinstance(p.get("floor_us"), (int, float))]
    slow = sum(l2 > 1.5 * us for l2, us in pairs)
    if not pairs or 2 * slow <= len(pairs):
        return ""
    return (f" **This run's L2-resident times are not kernel times**: its L2-resident floor took over 1.5x "
            f"the evicted floor at {slow} of {len(pairs)} points, because those replays waited on the host "
            "(the run predates grid.py's GPU sleep before each, L2_SLEEP_CYCLES); read the evicted columns.")


def targets_apply(gpu):
    """Whether issue 15's quoted target times (H200 times) apply to a run on this GPU."""
    return TARGET_GPU in gpu


def target_met(p, target, gpu, time_keys=PEER_TIME_KEYS):
    """The targets table's "met" cell. Issue 15's target times are 0.6x the fastest valid peer
    it quotes for the H200, so only a run on an H200 is judged by them; on another GPU (an
    H100, where HBM is ~30% slower) the rule itself is applied to this run's own peers: met
    when DecodeTopK takes at most 0.6x the fastest valid peer's time at that point."""
    if targets_apply(gpu):
        return "yes" if p["dtk_us"] <= target else f"no ({p['dtk_us'] / target:.1f}x)"
    best, _ = fastest_valid(p, time_keys)
    if best is None:
        return f"n/a ({TARGET_GPU} target; no valid peer timed)"
    ratio = p["dtk_us"] / best
    return f"{'yes' if ratio <= TARGET_RATIO else 'no'} ({ratio:.2f}x this run's fastest valid peer; {gpu})"


def same_gpu(results, *others):
    """Refuse to merge runs of different GPUs into one report: the targets table and the
    summaries would compare an H100's times with an H200's."""
    for other in others:
        if other and other.get("gpu") != results.get("gpu"):
            raise ValueError(f"grid runs from different GPUs: {results.get('gpu')!r} and {other.get('gpu')!r} "
                             f"(kernel source {other.get('kernel_source_sha256', '?')[:12]}, {other.get('date')}); "
                             "report each GPU's runs on their own")


def results_md(results, extras, png, targets=None, time_keys=PEER_TIME_KEYS, command=None, md_path=None):
    """bench/RESULTS.md, whole: how to read it, the targets (from the grid, else from the
    --targets run), a summary, the plot and every table of the runs."""
    same_gpu(results, targets, *extras)
    md_dir = Path(md_path).parent if md_path else REPO / "bench"
    points = results["points"]
    target_points = points + (targets["points"] if targets else [])
    names = peer_names(results, targets, *extras)
    l2 = has_l2(results, targets)
    peer_note = (f"Named peers in these runs: {', '.join(names)}; each one's time is the first of "
                 f"`{'`, `'.join(time_keys)}` its record has, and a peer counts as valid unless its validity "
                 "flag says otherwise ('(invalid)' marks one that does, '(unchecked)' one without a flag). "
                 "`run --peers` checks each peer's output with DecodeTopK's contract checker before timing "
                 "and after the timed replays, on the same logits; an invalid peer is timed and not counted. "
                 "n/a: a shape, k or row lengths the peer does not take (block mode: none does); failed: an "
                 "exception, a peer that did not load, or one that timed out; skipped: the run's budget. "
                 "**DecodeTopK / fastest valid peer** < 1 where DecodeTopK is faster."
                 if names else
                 "No run here carries named peers yet (`run --peers` adds them), so the fastest valid peer is "
                 "torch.topk wherever it is valid, and none elsewhere (block mode, ragged and next_n rows).")
    lines = ["# DecodeTopK benchmark results", "",
             "Generated by `" + (command or "python bench/grid.py report") + "` from the JSON that "
             "`python bench/grid.py run` wrote on the GPU. Do not edit it by hand; bench/NOTES.md has the "
             "analysis.", "",
             f"{results['gpu']}, {results['date']}, torch {results['torch']}, kernel source "
             f"`{results['kernel_source_sha256'][:12]}`. Timing: {results['timing']}. Every point's DecodeTopK "
             "output passed the contract check before it was timed." + l2_caveat(target_points), "",
             "What the columns are:", "",
             "- **DecodeTopK**: this kernel, on the launch policy's build (`build`); `launches` > 1 where the "
             "policy's `launch_slices` split the rows (none has since session 45).",
             "- **floor**: bench/speed_of_light.py. It has DecodeTopK's launch (clusters, threads, shared "
             "memory) and loads, writes k indices and selects nothing: the floor of this launch shape, not "
             "of the GPU.",
             "- **physical floor**: bench/physical_floor.py, the GPU's floor: one wave of two 512-thread CTAs "
             "an SM over every SM, every row's valid vectors loaded once (16-byte loads, spread evenly over "
             "the whole GPU), k indices written a row, nothing selected (issue 15, item 5).",
             "- **torch.topk**: `torch.topk(logits, k, dim=1)` over the full width (block mode: the amax "
             "over 8-logit blocks, then topk). It ignores per-row lengths and the pinned newest block, so "
             "its answer is the contract's only in token mode with every row at the full width. The grid "
             "does not check its output.",
             f"- **issue 15 target** and **{ISSUE6_PEER}**: the target time (0.6x the fastest valid peer), "
             "and the fastest valid peer's time issue 15 quotes for the same H200 and data, at its twelve "
             "points. These are quoted; the peer columns are this run's. They are H200 times: on another GPU "
             f"**met** applies issue 15's rule to the run itself (DecodeTopK at most {TARGET_RATIO}x the fastest "
             "valid peer at that point). **target / floor**: the target over the floor of DecodeTopK's launch, "
             "what it leaves for the selection (DecodeTopK / floor beside it).",
             "- **fastest valid peer**: the fastest of torch.topk (where its answer is the contract's) and "
             "the named peers a run carries. " + peer_note]
    if l2:
        lines.append("- **L2** columns: the same calls replayed with no L2 eviction before each, so the logits are "
                     "in L2 as far as they fit (as just after the MQA logits kernel wrote them); a peer's L2 time "
                     "is that of its time key (`l2_us` for `topk_us` and `us`, `l2_e2e_us` for `e2e_us`), and the "
                     "fastest valid peer there is the fastest by those times.")
    lines += ["", "## Issue 15 targets (rho 0.9, token mode)", ""]
    cols = ["rows", "length", "k", "target us", "DecodeTopK us", "met", "floor us", "torch.topk us",
            f"{ISSUE6_PEER} us"] + peer_columns(names, l2) + ["DecodeTopK / floor", "target / floor",
                                                              "DecodeTopK / torch.topk"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for (r, n, k), (target, peer, _) in TARGETS.items():
        for p in target_points:
            if (p["rows"], p["length"], p["k"], p["data"], p.get("mode")) == (r, n, k, "rho0.9", "token") \
                    and "dtk_us" in p and not p.get("ragged") and p.get("next_n", 1) == 1:
                source = "" if p in points else f" (`run --targets`, kernel {targets['kernel_source_sha256'][:12]})"
                met = target_met(p, target, results["gpu"], time_keys)
                cells = [r, n, k, target, f"{p['dtk_us']}{source}", met, p["floor_us"], p["torch_us"], peer]
                cells += peer_cells(p, names, time_keys, l2)
                # what the target leaves above the load-only kernel of the same launch (an
                # H200 time, so only against an H200's floor)
                allowed = f"{target / p['floor_us']:.2f}" if targets_apply(results["gpu"]) else "n/a"
                cells += [p["vs_floor"], allowed, p["vs_torch"]]
                lines.append("| " + " | ".join(str(c) for c in cells) + " |")
                break
    lines += ["", "The targets also ask for every point within 1.5x of the floor and at most 1/5 of torch.topk. "
              "Over the grid: " + _ratio_summary(points, time_keys) + ".", ""]
    crowded = crowded_summary(points)
    if crowded["compared"]:
        lines += [f"Crowded rows against Gaussian ones (issue 15: within 1.3x at every point): DecodeTopK's time on "
                  f"rho 0.9 and rho 0.999 rows / its time on Gaussian rows of the same rows, length and k is within "
                  f"1.3x at {crowded['within']} of {crowded['compared']} points, worst {crowded['worst']:.2f} "
                  f"({crowded['worst_at']}).", ""]
    main_names, main_l2 = peer_names(results), has_l2(results)
    if main_names or main_l2:
        evicted = peer_summary(points, time_keys)
        lines += ["## DecodeTopK against the fastest valid peer", "",
                  f"Over the {evicted['timed']} timed points of the grid (torch.topk counts where its answer is the "
                  "contract's):", "",
                  "- " + _summary_text(evicted, "L2 evicted (the grid's timing)") + "."]
        if main_l2:
            lines.append("- " + _summary_text(peer_summary(points, time_keys, l2=True), "L2-resident") + ".")
        if evicted["floor_median"] is not None:
            lines.append(f"- DecodeTopK / floor: median {evicted['floor_median']:.2f} over the grid.")
        if evicted["phys_floor_median"] is not None:
            lines.append(f"- DecodeTopK / physical floor: median {evicted['phys_floor_median']:.2f} over the grid "
                         "(issue 15 aims at 1.5 or less).")
        if main_names:
            lines += ["", peer_breakdown(points, main_names, time_keys, main_l2)]
        lines.append("")
    lines += [f"![DecodeTopK, the fastest valid peer and the floor against the valid length]({_rel(png, md_dir)})",
              "", "## The grid", "", table(results, names, time_keys).split("\n", 2)[2]]
    for extra in extras:
        if any(p.get("ragged") for p in extra["points"]):
            kind = "ragged lengths (0.7-1.3 x nominal)"
        elif extra["points"][0].get("next_n", 1) > 1:
            kind = f"next_n = {extra['points'][0].get('next_n')} (decode_topk_seq_lens)"
        else:
            pts = extra["points"]
            kind = (f"more points: rows {sorted({p['rows'] for p in pts})} x lengths "
                    f"{sorted({p['length'] for p in pts})} x k {sorted({p['k'] for p in pts})}, "
                    f"{', '.join(sorted({p['data'] for p in pts}))}")
        sha = extra["kernel_source_sha256"][:12]
        if sha != results["kernel_source_sha256"][:12]:
            kind += f" (kernel source `{sha}`, {extra['date']})"
        lines += [f"## {kind}", "", _ratio_summary(extra["points"], time_keys) + ".", "",
                  table(extra, names, time_keys).split("\n", 2)[2]]
    forced = builds_table([p for res in (results, targets, *extras) if res for p in res["points"]])
    if forced:
        lines += ["", "## Every build forced (`run --builds`)", "",
                  "The same points with every other build that holds the width forced (16x512x16 only where "
                  "the rows' clusters of it are resident at once, and never in runs before 2026-12-05), "
                  "each output checked first: the measurements behind SPEC.md 2.1's rules. The policy's "
                  "build is in bold.", "", forced]
    return "\n".join(lines)


def builds_table(points):
    """The markdown table of `run --builds` (None if no point has it): per point the
    policy's build and every other build forced (us, L2 evicted), the fastest, and the
    policy's time over the fastest (1.00: the policy chose the fastest build)."""
    from decode_topk.kernel.policy import BUILDS

    rows = [p for p in points if isinstance(p.get("builds_us"), dict) and _num(p.get("dtk_us")) is not None]
    if not rows:
        return None
    present = {p["build"] for p in rows} | {name for p in rows for name in p["builds_us"]}
    names = [b.name for b in BUILDS if b.name in present]
    cols = ["data", "rows", "length", "k", "policy's build"] + [f"{n} us" for n in names] + \
        ["fastest build", "policy / fastest"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for p in rows:
        times = {n: us for n, us in p["builds_us"].items() if _num(us) is not None}
        times[p["build"]] = p["dtk_us"]
        best = min(times, key=times.get)
        cells = [p["data"], p["rows"], p.get("width", p["length"]), p["k"], p["build"]]
        cells += [(f"**{p['dtk_us']}**" if n == p["build"] else str(p["builds_us"].get(n, "-"))) for n in names]
        cells += [best, f"{p['dtk_us'] / times[best]:.2f}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
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
    r = sub.add_parser("run", help="time the grid on the GPU (the H200), with the peers if --peers")
    r.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build"))
    r.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    r.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    r.add_argument("--ks", type=int, nargs="+", default=list(KS))
    r.add_argument("--data", nargs="+", default=list(DATA), choices=DATA)
    r.add_argument("--ragged", action="store_true")
    r.add_argument("--next-n", type=int, default=1)
    r.add_argument("--targets", action="store_true", help="only issue 15's twelve target points")
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--passes", type=int, default=1,
                   help="time every point this many times, minutes apart, keeping each time's lowest median "
                        "(lower_of_passes: the GPU's slow windows)")
    r.add_argument("--reps", type=int, default=30)
    r.add_argument("--head-start", action="store_true",
                   help="a GPU sleep before each take's replays, so the host enqueues them all while the GPU is "
                        "busy (HEAD_START_REPLAYS; to be compared with the timer without it)")
    r.add_argument("--seed", type=int, default=6)
    r.add_argument("--budget", type=float, default=1e9,
                   help="seconds for the whole run: no point or peer starts that would end past it, and a run "
                        "30 s past it writes what it has and exits 3")
    r.add_argument("--tag", default="", help="suffix of grid<tag>.json / .md")
    r.add_argument("--peers", default=None, metavar="PATH",
                   help="the peers folder (peers.py and its lib/: ../shared/peers, on the GPU runner .peers): "
                        "check and time each peer at each point beside DecodeTopK")
    r.add_argument("--peer-names", nargs="+", default=None, metavar="NAME",
                   help="the peers to run (default: every peer peers.py offers)")
    r.add_argument("--peer-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="a peer taking longer at one point is not run again; one holding the GPU twice as long "
                        "ends the run, with what it has written (default 60)")
    r.add_argument("--no-l2", action="store_true", help="skip the L2-resident times (no eviction before replays)")
    r.add_argument("--builds", action="store_true",
                   help="also time every other build that holds the width in one launch, forced (builds_us)")
    r.add_argument("--block", action="store_true",
                   help="a block-mode point (k 2048) at every length, not only at 1,048,576")
    r.add_argument("--block-only", action="store_true",
                   help="only the block-mode points (k 2048), at every length")
    p = sub.add_parser("report", help="the PNG and RESULTS.md from run's JSON (any machine; needs matplotlib)")
    add_report_arguments(p)
    args = ap.parse_args(argv)
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
