"""The soak: a million rows and more through the AOT library on the GPU, every build and k.

    python -m decode_topk.conformance.soak [--out DIR] [--budget 540] [--plan 73728:100000x4 ...]
                                           [--strict|--no-strict]

Each batch (`--plan WIDTH:ROWSxBATCHES`, default below: 1,054,000 rows from 4,096 to
1,048,576 logits wide) is made on the GPU by conformance/gpu_check.make_batch with its own
seed: random bits, indexer-like, few values, plateaus, mostly -inf, monotone ramps,
specials and needles; lengths at every boundary (0, 1, k-1, k, k+1, ... width), uniform
and full; garbage and NaN past each length. Every batch runs in token and block mode,
every k, on the policy's build and on every build that holds the width (forced), out
poisoned before every launch, each output checked on the GPU against the contract
(gpu_check.check, which tests/test_gpu_tools_cpu.py shows agrees with conformance.check).
Rows beyond the 16-CTA build's two waves run as several launches.

Every output is also compared, row by row, with the canonical answer of SPEC.md 1.4 (every
index above the k-th largest key K, then the lowest indices equal to K, in ascending index
order; a -inf block -1 in its slot), computed on the GPU by `canonical_answer`; the rows
that differ are counted ("rows differing from canonical: N"). Strict mode (--strict, the
default because the kernel claims the canonical answer: registry record 'aot') fails the
soak on any such row; --no-strict only reports them.

Writes DIR/soak.json; prints one line a batch and the totals last. Exit 1 on any
violation or error, or in strict mode on any row differing from the canonical answer.
Stops starting batches when --budget seconds have passed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

from . import gpu_check, registry
from decode_topk.kernel import aot_loader
from decode_topk.kernel import policy

from .gpu_impl import POISON

# Widest first after the 73,728 batches: a 196,608 batch gives 16x512x16 rows past its direct
# path's 131,072 logits (SPEC 2.3), i.e. its sampled path, before the gate's 170 s budget
# ends the plan (the wider batches rarely run within it).
DEFAULT_PLAN = ("73728:100000x3", "196608:20000x1", "16384:300000x1", "4096:400000x1", "262144:30000x1",
                "524288:16000x1", "1048576:8000x1")


def parse_plan(items):
    plan = []
    for item in items:
        width, rest = item.split(":")
        rows, _, batches = rest.partition("x")
        plan += [(int(width), int(rows))] * int(batches or 1)
    return plan


def strict_default():
    """Strict unless the kernel's record ('aot', which the soak runs) claims only the
    contract."""
    return registry.record("aot").strict


@torch.no_grad()
def canonical_answer(logits, lengths, k, block_mode, chunk=1024):
    """int32 [R, k]: the canonical answer of SPEC.md 1.4 of each row, on the logits'
    device: a short row's (n <= k) fixed answer; else every index whose key is above the
    k-th largest key K and the lowest indices whose key equals K, k in all, in ascending
    index order; in block mode a -inf block is -1 in its slot. By counting: an element is
    taken when its key is above K, or equal to K with at most k - |{key > K}| keys equal to
    K at or before it; the taken elements in index order fill the slots (a prefix count),
    the rest stay -1."""
    R = logits.shape[0]
    answer = torch.full((R, k), -1, dtype=torch.int32, device=logits.device)
    n_all = gpu_check.element_count(lengths, block_mode)
    for s in range(0, R, chunk):
        keys = gpu_check.row_keys(logits[s:s + chunk], lengths[s:s + chunk], block_mode)  # -1 past n
        rows, N = keys.shape
        n = n_all[s:s + chunk]
        pos = torch.arange(N, device=keys.device)
        short = n <= k
        if N >= k:
            kth = torch.topk(keys.to(torch.float32), k, dim=1).values[:, k - 1].to(keys.dtype)  # as row_stats
        else:  # every row is short
            kth = torch.full((rows,), -1, dtype=keys.dtype, device=keys.device)
        above = keys > kth[:, None]
        equal = keys == kth[:, None]
        owed = k - above.sum(dim=1)
        taken = above | (equal & (equal.cumsum(dim=1) <= owed[:, None]))
        taken = torch.where(short[:, None], pos[None, :] < n[:, None], taken)
        # Slot of a taken element: the taken ones before it; the others go to a spare slot k.
        slot = torch.where(taken, taken.cumsum(dim=1) - 1, k)
        full = torch.full((rows, k + 1), -1, dtype=torch.int64, device=keys.device)
        full.scatter_(1, slot, torch.where(taken, pos[None, :], -1))
        chosen = full[:, :k]
        if block_mode:
            picked = torch.gather(keys, 1, chosen.clamp(min=0))
            chosen = torch.where((chosen >= 0) & (picked == gpu_check.KEY_NEG_INF), -1, chosen)
        answer[s:s + chunk] = chosen.to(torch.int32)
    return answer


@torch.no_grad()
def count_not_canonical(out, want, chunk=65536, first=5):
    """(rows of out differing in any slot from want, the canonical answer of
    canonical_answer; [the first such rows])."""
    count = 0
    offenders = []
    for s in range(0, out.shape[0], chunk):
        differ = (out[s:s + chunk].to(torch.int32) != want[s:s + chunk]).any(dim=1)
        count += int(differ.sum())
        if len(offenders) < first:
            offenders += (torch.nonzero(differ).flatten() + s)[:first - len(offenders)].tolist()
    return count, offenders


def launch_all(logits, lengths, k, out, block_mode, build):
    """decode_topk_aot over all rows, in slices of at most the policy's row limit."""
    rows, width = logits.shape
    slices = aot_loader.launch_slices(rows, width, k, block_mode) if build is None else [slice(0, rows)]
    for s in slices:
        aot_loader.decode_topk_aot(logits[s], lengths[s], k, out=out[s], block_mode=block_mode, build=build)


def soak_batch(width, rows, seed, device="cuda", launch=None):
    """{mode/k/build: {violating_rows, first_rows, counts, not_canonical_rows,
    first_not_canonical}}: the row-runs of one batch. launch: launch_all (the AOT library)
    unless given (the CPU tests pass one that runs on the CPU, with device='cpu')."""
    launch = launch_all if launch is None else launch
    chunk = max(16, (1 << 26) // width)
    logits, lengths, _ = gpu_check.make_batch(rows, width, seed=seed, device=device, chunk=chunk)
    check_chunk = max(16, (1 << 28) // width // 8)
    runs = {}
    for block_mode in (False, True):
        stats = gpu_check.row_stats(logits, lengths, policy.KS, block_mode, chunk=max(16, (1 << 28) // width // 4))
        builds = [None] + [b for b in policy.BUILDS if width <= b.capacity_in(block_mode)]
        for k in policy.KS:
            out = torch.empty((rows, k), dtype=torch.int32, device=device)
            want = canonical_answer(logits, lengths, k, block_mode, chunk=check_chunk)  # the same for every build
            for build in builds:
                out.fill_(POISON)
                launch(logits, lengths, k, out, block_mode, build)
                counts, first = gpu_check.check(logits, lengths, k, block_mode, out, stats, chunk=check_chunk)
                differ, first_differ = count_not_canonical(out, want)
                label = f"{'block' if block_mode else 'token'} k={k} " + (
                    "policy" if build is None else build.name)
                runs[label] = {"violating_rows": int(sum(counts.values())), "first_rows": first,
                               "counts": {r: c for r, c in counts.items() if c},
                               "not_canonical_rows": differ, "first_not_canonical": first_differ}
            del want
    del logits, lengths
    if device != "cpu":
        torch.cuda.empty_cache()
    return runs


def parse_args(argv=None):
    """The soak's options (no GPU needed)."""
    ap = argparse.ArgumentParser(prog="python -m decode_topk.conformance.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path.cwd() / "build" / "soak"),
                    help="results folder (default $OUT, else ./build/soak)")
    ap.add_argument("--plan", nargs="+", default=list(DEFAULT_PLAN), help="WIDTH:ROWSxBATCHES ...")
    ap.add_argument("--seed", type=int, default=7000)
    ap.add_argument("--budget", type=float, default=540.0)
    ap.add_argument("--strict", default=None, action=argparse.BooleanOptionalAction,
                    help="fail on any row differing from the canonical answer (SPEC.md 1.4); --no-strict "
                         "only counts them; default: strict, as the kernel claims the canonical answer")
    args = ap.parse_args(argv)
    if args.strict is None:
        args.strict = strict_default()
    try:
        parse_plan(args.plan)
    except ValueError:
        ap.error(f"--plan {' '.join(args.plan)}: each item is WIDTH:ROWS or WIDTH:ROWSxBATCHES")
    return args


def summarize(results, strict):
    """Add the totals to `results` (its batches done); return the exit status: 1 on a
    violation or an error, or (strict) a row differing from the canonical answer."""
    done = [b for b in results["batches"] if "runs" in b]
    results["strict"] = bool(strict)
    results["rows"] = sum(b["rows"] for b in done)
    results["row_runs"] = sum(b["rows"] * len(b["runs"]) for b in done)
    results["violating_rows"] = sum(b["violating_rows"] for b in done)
    results["not_canonical_rows"] = sum(b["not_canonical_rows"] for b in done)
    results["errors"] = sum("error" in b for b in results["batches"])
    failed = results["violating_rows"] or results["errors"] or (strict and results["not_canonical_rows"])
    return 1 if failed else 0


def summary_line(results):
    return (f"soak: {results['rows']} rows, {results['row_runs']} row-runs (every k x mode x build), "
            f"{results['violating_rows']} violating, rows differing from canonical: {results['not_canonical_rows']} "
            f"({'strict' if results['strict'] else 'not strict: reported only'}), {results['errors']} errors, "
            f"{results['seconds']} s")


def main(argv=None):
    args = parse_args(argv)
    no_device = aot_loader.no_cuda_device_reason()
    if no_device:  # one line and exit 2, not a traceback from deep inside torch
        print(f"decode_topk.conformance.soak runs on a CUDA GPU: {no_device}", file=sys.stderr)
        return 2
    try:
        info = aot_loader.library_info()
    except (aot_loader.StaleLibraryError, FileNotFoundError, OSError) as e:  # one line and exit 2
        print(f"decode_topk.conformance.soak needs the AOT library of this kernel source: {e}", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = {"gpu": torch.cuda.get_device_name(), "kernel_source_sha256": info["kernel_source_sha256"],
               "plan": args.plan, "strict": args.strict, "batches": []}
    for i, (width, rows) in enumerate(parse_plan(args.plan)):
        if time.perf_counter() - t0 > args.budget:
            results["stopped"] = f"budget of {args.budget} s reached before batch {i}"
            break
        rec = {"width": width, "rows": rows, "seed": args.seed + i}
        try:
            rec["runs"] = soak_batch(width, rows, args.seed + i)
            rec["violating_rows"] = sum(r["violating_rows"] for r in rec["runs"].values())
            rec["not_canonical_rows"] = sum(r["not_canonical_rows"] for r in rec["runs"].values())
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        results["batches"].append(rec)
        outcome = rec.get("error") or (f"{rec['violating_rows']} violating rows, rows differing from canonical: "
                                       f"{rec['not_canonical_rows']}")
        print(f"batch {i}: {rows} x {width}: {len(rec.get('runs', {}))} runs, {outcome} ({rec['seconds']} s)",
              flush=True)
    status = summarize(results, args.strict)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    (out_dir / "soak.json").write_text(json.dumps(results, indent=1))
    print(summary_line(results))
    return status


if __name__ == "__main__":
    sys.exit(main())
