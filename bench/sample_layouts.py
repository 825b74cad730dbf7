"""Where a streamed row's samples may lie: SPEC.md 2.4's spread against samples grouped in
sectors, on rows whose neighbouring logits are alike (CPU only).

A streamed CTA reads the row's 2048 samples from global memory, each its own 32-byte
sector, and at 128 rows that wait is ~11.6k of CTA 0's 111.8k cycles (bench/NOTES.md
session 51). Grouping G consecutive samples in one sector (the group at where its first
sample would be, aligned down to 16 logits) asks HBM for 2048 / G sectors instead. On the
grid's rows (independent logits) that was 0.89-0.99 of the time on the streamed builds
(docs/wip/sector-samples.patch). What it costs is how far the cutoff can miss where
neighbours are alike: this counts, per layout, the rows that underflow (fewer than k keys
at or above the cutoff: the fallback's whole direct pass, SPEC.md 2.12) or overflow a
queue, and the keys kept, on BF16 rows of

    gaussian   independent N(0, 1) logits
    ar<phi>    an AR(1) row, x[t] = phi x[t-1] + sqrt(1 - phi^2) e[t]
    hot<W>     gaussian with a window of W logits 3 deviations higher, at a random place

    python bench/sample_layouts.py [--rows 64] [--data gaussian ar0.99 hot4096] [--groups 4 16]
"""

import argparse
import math

import numba
import numpy as np

from decode_topk.conformance import trace
from decode_topk.kernel import policy
from decode_topk.reference.bits import bf16_bits_from_float32, order_key

SECTOR_LOGITS = 16  # 32 bytes of BF16


@numba.njit(cache=True)
def _ar1(e, phi):
    x = np.empty_like(e)
    x[0] = e[0]
    c = math.sqrt(1.0 - phi * phi)
    for t in range(1, e.size):
        x[t] = phi * x[t - 1] + c * e[t]
    return x


def make_row(kind, length, rng):
    """One row's float32 logits of `kind` (see the module doc)."""
    x = rng.standard_normal(length)
    if kind.startswith("ar"):
        x = _ar1(x, float(kind[2:]))
    elif kind.startswith("hot"):
        width = int(kind[3:])
        at = int(rng.integers(0, length - width))
        x[at:at + width] += 3.0
    elif kind != "gaussian":
        raise ValueError(f"data {kind!r}: gaussian, ar<phi> or hot<W>")
    return x.astype(np.float32)


def grouped(positions, length, group):
    """The positions with each run of `group` samples moved into one sector: sample j at
    (positions[j - j % group] aligned down to SECTOR_LOGITS) + j % group, below length."""
    if group == 1:
        return positions
    j = np.arange(positions.size)
    base = positions[j - j % group] // SECTOR_LOGITS * SECTOR_LOGITS
    return np.minimum(base + j % group, length - 1)


def outcome(keys, positions, length, k, cluster):
    """(underflow, overflow, kept) of one row: the cutoff the q-th largest sample key
    (SPEC.md 2.4), kept the keys at or above it."""
    _, cutoff = trace.sampled_cutoff(keys, positions, length, k)
    kept = int(np.count_nonzero(keys >= cutoff))
    queues = trace.queue_lengths(keys, length, k, cutoff, cluster)
    return kept < k, bool(queues.max() > policy.STREAM_QUEUE), kept


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64, help="rows a point (default 64)")
    parser.add_argument("--data", nargs="+", default=["gaussian", "ar0.9", "ar0.99", "hot4096", "hot16384"])
    parser.add_argument("--points", nargs="+", default=["262144:2048:3", "1048576:512:3", "1048576:2048:3"],
                        metavar="LENGTH:K:CLUSTER", help="rows and their streamed build's CTAs")
    parser.add_argument("--groups", type=int, nargs="+", default=[4, 16], help="samples a sector (1: SPEC 2.4's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    groups = [1] + [g for g in args.groups if g != 1]
    print("| data | length | k | CTAs | samples a sector | underflow rows | overflow rows | median kept | most kept |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in args.data:
        for point in args.points:
            length, k, cluster = (int(v) for v in point.split(":"))
            rng = np.random.default_rng(args.seed)
            rows = [order_key(bf16_bits_from_float32(make_row(kind, length, rng))).astype(np.int64)
                    for _ in range(args.rows)]
            spread = trace.sample_positions(length, cluster)
            for group in groups:
                positions = grouped(spread, length, group)
                results = [outcome(keys, positions, length, k, cluster) for keys in rows]
                kept = [r[2] for r in results]
                print(f"| {kind} | {length} | {k} | {cluster} | {group} | {sum(r[0] for r in results)} | "
                      f"{sum(r[1] for r in results)} | {int(np.median(kept))} | {max(kept)} |", flush=True)


if __name__ == "__main__":
    main()
