"""How often the sampled path falls back, on the model (reference/model.py), by width and k.

    python bench/fallback_rates.py [--rows 64] [--rho 0.9 0.999 gaussian]

A fallback row runs the direct path over the whole row (two cluster histogram passes): at
524,288 logits with rho 0.9 that is ~70-100 us against ~19 us for a sampled row on the
H200 (bench/NOTES.md), so a batch pays for its one unlucky row. Rows: indexer-like
(conformance.cases.indexer_rows, 32 heads, D 64) or Gaussian, every row full length and
nothing but logits (no garbage past a length: it would be valid data here), on the build
the policy picks for 8 rows. Prints the overflow / underflow share a
point, and the overflow share the first rule (`G + E > 8192`, E summing the per-CTA caps)
would have given on the same traces.
"""

import argparse
import sys

import numpy as np

from decode_topk.conformance.cases import indexer_rows, normal_bits
from decode_topk.conformance.trace import q_for
from decode_topk.kernel import policy
from decode_topk.reference.model import simulate


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--widths", type=int, nargs="+", default=[65536, 131072, 262144, 524288, 1048576])
    ap.add_argument("--data", nargs="+", default=["rho0.9", "gaussian"], help="rho<R> (indexer-like) or gaussian")
    args = ap.parse_args(argv)
    print("| data | width | k | q | overflow | underflow | overflow, first rule | median G + min(E, k) |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in args.data:
        for width in args.widths:
            rng = np.random.default_rng(width)
            if kind == "gaussian":
                bits = normal_bits(rng, (args.rows, width))
            else:
                bits = indexer_rows(rng, args.rows, width, float(kind[3:]), 32, 64)
            lengths = np.full(args.rows, width, np.int32)
            build = policy.build_for(8, width, lambda b: 15)
            for k in policy.KS:
                _, trace = simulate(bits, lengths, k, False, build=build)
                over, under = (trace[:, 1] == 1).mean(), (trace[:, 1] == 2).mean()
                first = (trace[:, 4] + trace[:, 5] > policy.SURVIVOR_CAPACITY).mean()
                print(f"| {kind} | {width} | {k} | {q_for(width, k)} | {over:.1%} | {under:.1%} | {first:.1%} | "
                      f"{int(np.median(trace[:, 4] + np.minimum(trace[:, 5], k)))} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
