"""Time the cluster model (reference/model.py) on indexer-like token rows.

Prints the time `simulate` takes on 64 rows x 262,144 BF16 logits, token mode, k = 512
(after a warm-up call that JIT-compiles or loads the numba cache), on the policy's build
(every row resident: 8x512x8 below STREAM_ROWS token rows, the streamed 1x512x4 from them
on) and on each build that holds the width forced. Indexer-like rows: the
catalogue's generator (conformance.cases.indexer_logits, rho 0.9: ~150 distinct values a
row), or with --data quantized a normal distribution in steps of 1/16 (faster to make).

    python bench/model_speed.py [--rows 64] [--width 262144] [--k 512] [--block]
                                [--data indexer|quantized]
"""

import argparse
import time

import numpy as np

from decode_topk.kernel.policy import BUILDS
from decode_topk.reference.bits import bf16_bits_from_float32
from decode_topk.reference.model import resolve_build, simulate


def quantized(rows, width, seed=0):
    rng = np.random.default_rng(seed)
    values = np.round(rng.standard_normal((rows, width), dtype=np.float32) * 16) / 16
    return bf16_bits_from_float32(values)


def indexer(rows, width, seed=0):
    from decode_topk.conformance.cases import indexer_keys, indexer_logits

    rng = np.random.default_rng(seed)
    keys = indexer_keys(rng, width, 0.9, 64)
    return np.stack([indexer_logits(rng, keys, 32) for _ in range(rows)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--width", type=int, default=262144)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--block", action="store_true")
    ap.add_argument("--data", choices=("indexer", "quantized"), default="indexer")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    logits = (indexer if args.data == "indexer" else quantized)(args.rows, args.width)
    made = time.perf_counter() - t0
    lengths = np.full(args.rows, args.width, dtype=np.int32)
    t0 = time.perf_counter()
    simulate(logits[:1], lengths[:1], args.k, args.block)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, trace = simulate(logits, lengths, args.k, args.block)
    took = time.perf_counter() - t0
    paths = np.bincount(trace[:, 0], minlength=3)
    build = resolve_build(args.rows, args.width, block_mode=args.block, k=args.k).name
    distinct = len(np.unique(logits[0]))
    print(f"data: {args.data}, {distinct} distinct values in row 0, made in {made:.1f} s; "
          f"warm-up (JIT or cache load): {warm:.2f} s")
    print(f"model: {args.rows} rows x {args.width} logits, k={args.k}, "
          f"{'block' if args.block else 'token'} mode, build {build}: {took:.3f} s "
          f"({took / args.rows * 1e3:.1f} ms a row; paths short/sampled/direct = {paths.tolist()}, "
          f"fallbacks = {int(np.count_nonzero(trace[:, 1]))})")
    for build in BUILDS:
        if args.width > build.capacity_in(args.block):
            continue
        t0 = time.perf_counter()
        _, trace = simulate(logits, lengths, args.k, args.block, build=build)
        took = time.perf_counter() - t0
        print(f"  build {build.name} forced: {took:.3f} s (fallbacks = {int(np.count_nonzero(trace[:, 1]))})")


if __name__ == "__main__":
    main()
