"""How often the sampled path falls back, on the model (reference/model.py), by width and k.

    python bench/fallback_rates.py [--rows 64] [--rho 0.9 0.999 gaussian]

A fallback (underflow) row runs the direct path over the whole row after its sampled
attempt, so a batch pays for its one unlucky row (bench/NOTES.md). Rows: indexer-like
(conformance.cases.indexer_rows, 32 heads, D 64) or Gaussian, every row full length and
nothing but logits (no garbage past a length: it would be valid data here), on the build
the policy picks for 8 rows with the H200's resident clusters (aot_loader's table).
Prints the underflow share a point, the median count of keys at or above the cutoff
(G + E: the keys the sampled selection histograms), the share of rows whose staged
attempt's one pass overflows (K at NARROW_SPAN = 255 or more key steps above the cutoff,
SPEC.md 2.5), the largest K - cutoff of the rows that did not underflow, the median count
of vectors whose top is at or above the cutoff (about what the attempt queues, SPEC.md
2.7 and 2.12) and the keys at or above the cutoff a vector of them: the passes over a
queue visit its vectors' 8 keys, of which that many count.
"""

import argparse
import sys

import numpy as np

from decode_topk.conformance.cases import indexer_rows, normal_bits
from decode_topk.conformance.trace import q_for
from decode_topk.kernel import policy
from decode_topk.kernel.aot_loader import CONSERVATIVE_RESIDENT
from decode_topk.reference.bits import order_key
from decode_topk.reference.model import simulate


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--widths", type=int, nargs="+", default=[65536, 131072, 262144, 524288, 1048576])
    ap.add_argument("--data", nargs="+", default=["rho0.9", "gaussian"], help="rho<R> (indexer-like) or gaussian")
    args = ap.parse_args(argv)
    print("| data | width | k | q | underflow | median G + E | narrow overflow | max K - cutoff "
          "| median vectors of top >= cutoff | keys >= cutoff a vector of them |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in args.data:
        for width in args.widths:
            rng = np.random.default_rng(width)
            if kind == "gaussian":
                bits = normal_bits(rng, (args.rows, width))
            else:
                bits = indexer_rows(rng, args.rows, width, float(kind[3:]), 32, 64)
            lengths = np.full(args.rows, width, np.int32)
            tops = order_key(bits).reshape(args.rows, width // 8, 8).max(axis=2).astype(np.int32)
            build = policy.build_for(8, width, lambda b: CONSERVATIVE_RESIDENT.get(b, 1))
            for k in policy.KS:
                _, trace = simulate(bits, lengths, k, False, build=build)
                attempted = trace[:, 3] >= 0  # (a row as short as D takes the direct path at once)
                if not attempted.any():
                    print(f"| {kind} | {width} | {k} | - | direct at {build} | | | | | |", flush=True)
                    continue
                under = (trace[:, 1] == 2).mean()
                placed = attempted & (trace[:, 1] != 2)
                span = int((trace[placed, 6] - trace[placed, 3]).max()) if placed.any() else "-"
                ge = trace[attempted, 4] + trace[attempted, 5]
                vectors = (tops[attempted] >= trace[attempted, 3][:, None]).sum(axis=1)
                print(f"| {kind} | {width} | {k} | {q_for(width, k)} | {under:.1%} | "
                      f"{int(np.median(trace[:, 4] + trace[:, 5]))} | {(trace[:, 1] == 1).mean():.1%} | {span} | "
                      f"{int(np.median(vectors))} | {np.median(ge / vectors):.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
