"""The driver that compute-sanitizer runs (docs/sanitizers.md): a few launches of the AOT
library that reach every path, fallback and build, each output checked (strict: the canonical answer) afterwards.

    compute-sanitizer --tool memcheck python -m decode_topk.conformance.sanitize [--builds all] [--ks 512 2048]
        [--cases sampled-crowded ...] [--trace]

For each catalogue case (default: one for each path and fallback, below), each k, each
mode the case has and each build (forced; 'policy' for the policy's), one launch of the
plain (production) variant, or of the traced one with --trace, with the output poisoned
first and checked with conformance.check(strict=True) after the launch. The paths each launch takes
come from the model (reference.model.simulate on the same build), so the log says what
the tool saw. Exit 1 on any violation; the tool's own findings are in its summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter


# cases chosen for the paths they reach: (name, what it reaches)
CASES = (
    ("sampled-lengths", "sampled path (token rows longer than direct_max_length)"),
    ("sampled-crowded", "sampled path with thousands of survivors a CTA (the retired overflow)"),
    ("ties-across-ctas", "K tied at almost every index: the lowest-index ties across the CTAs"),
    ("sampled-underflow", "the fallback: fewer than k at or above the cutoff -> direct path"),
    ("sampled-narrow-overflow", "the staged attempt's one pass: K 254 steps above the cutoff, and its overflow "
                                "-> direct path"),
    ("sampled-eq-capped", "more than k keys equal to the cutoff in a CTA"),
    ("lengths", "short rows (n <= k), the direct path, lengths 0, 1, k +- 1, partial vectors"),
    ("direct-top-span", "the direct path's window from the top (the row's largest key over DSMEM): K placed by "
                        "it in either half of its 512 bins, and past it -> the two passes"),
    ("mostly-neg-inf", "block mode: -inf blocks written as -1, the pinned newest block"),
    ("key-stage-131072", "block mode's stage of keys (SPEC 2.2) past V slots a thread: 1x512x4's top key "
                         "slot, specials, ties, -inf blocks in every lane of a key vector"),
    # the 1-CTA builds' own rows (the cases above are wider than 65,536 or shorter than 4,096)
    ("plateau", "1x512x16's sampled path (rows of 65,536 logits)"),
    ("one-cta-underflow-wide", "1x512x16's underflow -> direct path"),
    ("one-cta-direct", "1x512x8's direct path over 1-7 vectors a thread"),
    # 16x512x16 samples only past 131,072 logits (SPEC 2.3), wider than the cases above
    ("sampled-fallbacks-524288", "16x512x16's (and 8x512x16's) sampled path, crowded survivors and underflow"),
    ("copies-fallbacks-1048576", "16x512x16's rows staged by copies (2 rows a launch): crowded, and underflow "
                                 "past a partial last vector"),
    ("monotone-262144", "ascending and descending rows: K 294-624 key steps above the cutoff on the full rows, "
                        "past the staged attempt's one pass -> direct path, on every staged build that holds them, "
                        "16x512x16 included (sampled-narrow-overflow's rows, 131,072 logits, are direct there)"),
    # the streamed builds (SPEC 2.12): 1x512x4's stage in both modes, their streamed queues
    # and both fallbacks
    ("stage-16384", "1x512x4's staged rows (both modes): short and direct in its four slots"),
    ("streamed-queue", "the streamed path: queues at their capacity, overflow and underflow -> direct "
                       "from global memory"),
    ("streamed-queue-3", "3x512x4's streamed path (chunks past its queue): a queue at its capacity, one CTA's "
                         "overflow, underflow -> direct from global memory"),
    ("streamed-queue-4", "4x512x4's streamed path (chunks past its queue): a queue at its capacity, one CTA's "
                         "overflow, underflow -> direct from global memory"),
    ("streamed-queue-8", "8x512x4's streamed path (chunks past its queue): a queue at its capacity, one CTA's "
                         "overflow, underflow -> direct from global memory"),
    # the register build (SPEC 2.13): rows of at most 8,192 logits (every case above is wider)
    ("register-boundaries", "1x512x2's short and direct rows: lengths 0, 1, k +- 1, partial last vectors, 8,192"),
    ("register-top-span", "1x512x2's window from the top: K placed by it, and past it -> the two passes"),
)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=[name for name, _ in CASES])
    ap.add_argument("--builds", default="all", help="'all' (each build forced), 'policy', or CxTxV ...")
    ap.add_argument("--ks", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--trace", action="store_true", help="the traced variants instead of the plain ones")
    args = ap.parse_args(argv)

    from decode_topk.kernel import aot_loader, policy
    from decode_topk.reference.model import simulate

    from . import gpu_impl
    from .cases import CASES as CATALOGUE
    from .checker import check

    catalogue = {c.name: c for c in CATALOGUE}
    builds = list(policy.BUILDS) if args.builds == "all" else (
        [None] if args.builds == "policy" else [policy.Build.parse(b) for b in args.builds.split(",")])
    launches, violations, paths = 0, 0, Counter()
    t0 = time.perf_counter()
    unknown = [name for name in args.cases if name not in catalogue]
    if unknown:
        print(f"error: no case named {', '.join(unknown)}; the catalogue has {', '.join(catalogue)}", file=sys.stderr)
        return 2
    for name in args.cases:
        case = catalogue[name]
        bits, lengths = case.generate()
        for block_mode in case.modes:
            for k in (k for k in args.ks if k in case.ks):
                for build in builds:
                    if build is not None and bits.shape[1] > build.capacity_in(block_mode):
                        continue
                    out, _, used = gpu_impl.run_numpy(aot_loader.AOT, bits, lengths, k, block_mode, build, trace=args.trace)
                    launches += 1
                    bad = check(bits, lengths, k, block_mode, out, strict=True)
                    violations += len(bad)
                    _, m_trace = simulate(bits, lengths, k, block_mode, build=used)
                    reached = Counter(("short", "sampled", "direct")[p] + ("", "+overflow", "+underflow")[r]
                                      for p, r in m_trace[:, :2])
                    paths.update(reached)
                    print(f"{name:18} {'block' if block_mode else 'token'} k={k:4} {used.name:10} "
                          f"rows={len(lengths):3} {dict(reached)} violations={len(bad)}", flush=True)
    print(f"\n{launches} launches in {time.perf_counter() - t0:.1f} s, {violations} contract violations; "
          f"rows by path: {dict(paths)}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
