"""The soak: a million rows and more through the AOT library on the GPU, every build and k.

    python -m decode_topk.conformance.soak [--out DIR] [--budget 540] [--plan 73728:100000x4 ...]

Each batch (`--plan WIDTH:ROWSxBATCHES`, default below: 1,054,000 rows from 4,096 to
1,048,576 logits wide) is made on the GPU by conformance/gpu_check.make_batch with its own
seed: random bits, indexer-like, few values, plateaus, mostly -inf, monotone ramps,
specials and needles; lengths at every boundary (0, 1, k-1, k, k+1, ... width), uniform
and full; garbage and NaN past each length. Every batch runs in token and block mode,
every k, on the policy's build and on every build that holds the width (forced), out
poisoned before every launch, each output checked on the GPU against the contract
(gpu_check.check, which tests/test_gpu_tools_cpu.py shows agrees with conformance.check).
Rows beyond the 16-CTA build's two waves run as several launches.

Writes DIR/soak.json; prints one line a batch and the totals last. Exit 1 on any
violation or error. Stops starting batches when --budget seconds have passed.
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

from . import gpu_check
from decode_topk.kernel import aot_loader
from decode_topk.kernel import policy

from .gpu_impl import POISON

DEFAULT_PLAN = ("73728:100000x4", "16384:300000x1", "4096:300000x1", "262144:30000x1", "524288:16000x1",
                "1048576:8000x1")


def parse_plan(items):
    plan = []
    for item in items:
        width, rest = item.split(":")
        rows, _, batches = rest.partition("x")
        plan += [(int(width), int(rows))] * int(batches or 1)
    return plan


def launch_all(logits, lengths, k, out, block_mode, build):
    """decode_topk_aot over all rows, in slices of at most the policy's row limit."""
    rows, width = logits.shape
    slices = aot_loader.launch_slices(rows, width, k, block_mode) if build is None else [slice(0, rows)]
    for s in slices:
        aot_loader.decode_topk_aot(logits[s], lengths[s], k, out=out[s], block_mode=block_mode, build=build)


def soak_batch(width, rows, seed):
    """{mode/k/build: violating rows} and the row-runs of one batch."""
    chunk = max(16, (1 << 26) // width)
    logits, lengths, _ = gpu_check.make_batch(rows, width, seed=seed, chunk=chunk)
    builds = [None] + [b for b in policy.BUILDS if width <= b.capacity]
    runs = {}
    for block_mode in (False, True):
        stats = gpu_check.row_stats(logits, lengths, policy.KS, block_mode, chunk=max(16, (1 << 28) // width // 4))
        for k in policy.KS:
            out = torch.empty((rows, k), dtype=torch.int32, device="cuda")
            for build in builds:
                out.fill_(POISON)
                launch_all(logits, lengths, k, out, block_mode, build)
                counts, first = gpu_check.check(logits, lengths, k, block_mode, out, stats,
                                                chunk=max(16, (1 << 28) // width // 8))
                label = f"{'block' if block_mode else 'token'} k={k} " + (
                    "policy" if build is None else build.name)
                runs[label] = {"violating_rows": int(sum(counts.values())), "first_rows": first,
                               "counts": {r: c for r, c in counts.items() if c}}
    del logits, lengths
    torch.cuda.empty_cache()
    return runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path.cwd() / "build" / "soak"),
                    help="results folder (default $OUT, else ./build/soak)")
    ap.add_argument("--plan", nargs="+", default=list(DEFAULT_PLAN))
    ap.add_argument("--seed", type=int, default=7000)
    ap.add_argument("--budget", type=float, default=540.0)
    args = ap.parse_args(argv)
    no_device = aot_loader.no_cuda_device_reason()
    if no_device:  # one line and exit 2, not a traceback from deep inside torch
        print(f"decode_topk.conformance.soak runs on a CUDA GPU: {no_device}", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = {"gpu": torch.cuda.get_device_name(), "kernel_source_sha256":
               aot_loader.library_info()["kernel_source_sha256"], "plan": args.plan, "batches": []}
    for i, (width, rows) in enumerate(parse_plan(args.plan)):
        if time.perf_counter() - t0 > args.budget:
            results["stopped"] = f"budget of {args.budget} s reached before batch {i}"
            break
        rec = {"width": width, "rows": rows, "seed": args.seed + i}
        try:
            rec["runs"] = soak_batch(width, rows, args.seed + i)
            rec["violating_rows"] = sum(r["violating_rows"] for r in rec["runs"].values())
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()
        rec["seconds"] = round(time.perf_counter() - t0, 1)
        results["batches"].append(rec)
        print(f"batch {i}: {rows} x {width}: {len(rec.get('runs', {}))} runs, "
              f"{rec.get('error') or str(rec['violating_rows']) + ' violating rows'} ({rec['seconds']} s)", flush=True)
    done = [b for b in results["batches"] if "runs" in b]
    results["rows"] = sum(b["rows"] for b in done)
    results["row_runs"] = sum(b["rows"] * len(b["runs"]) for b in done)
    results["violating_rows"] = sum(b["violating_rows"] for b in done)
    results["errors"] = sum("error" in b for b in results["batches"])
    results["seconds"] = round(time.perf_counter() - t0, 1)
    (out_dir / "soak.json").write_text(json.dumps(results, indent=1))
    print(f"soak: {results['rows']} rows, {results['row_runs']} row-runs (every k x mode x build), "
          f"{results['violating_rows']} violating, {results['errors']} errors, {results['seconds']} s")
    return 1 if results["violating_rows"] or results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
