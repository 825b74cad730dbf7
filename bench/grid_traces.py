"""Which rows of the grid's own data take which path: the traced kernel (AOT library) on
`bench/grid.py`'s logits, one line a point with each row's path, fallback reason, G and E
(SPEC.md 2.11), so a slow grid point can be traced to the rows that fell back.

    python bench/grid_traces.py [--rows 14] [--points rho0.9:1048576:2048 ...]

Run on the H200 with `kernel/aot` carried. A point is DATA:LENGTH:K (token mode, every row at
the full length), the data made exactly as `grid.py run` makes it (same seed), whose
first --rows rows are traced on the policy's build.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grid  # noqa: E402

DEFAULT_POINTS = ("rho0.9:1048576:2048", "rho0.9:1048576:512", "rho0.9:524288:2048", "rho0.999:1048576:2048",
                  "gaussian:1048576:2048", "rho0.9:262144:2048")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=14, help="rows traced a point (one launch: at most 14 at 1M)")
    ap.add_argument("--points", nargs="+", default=list(DEFAULT_POINTS))
    ap.add_argument("--seed", type=int, default=6, help="grid.py run's --seed")
    args = ap.parse_args(argv)
    import torch

    from decode_topk.kernel import aot_loader
    from decode_topk.kernel import policy

    for point in args.points:
        kind, length, k = point.split(":")
        length, k = int(length), int(k)
        if kind not in grid.DATA:
            raise ValueError(f"data {kind!r} is not one of {grid.DATA}")
        # grid.py makes max(rows) = 128 rows a (data, length) and takes prefixes
        logits = grid.make_logits(torch, kind, max(grid.ROWS), length, args.seed + length)[:args.rows].contiguous()
        lengths = torch.full((args.rows,), length, dtype=torch.int32, device="cuda")
        out = torch.empty((args.rows, k), dtype=torch.int32, device="cuda")
        trace = torch.empty((args.rows, len(policy.TRACE_FIELDS)), dtype=torch.int32, device="cuda")
        aot_loader.decode_topk_aot(logits, lengths, k, out=out, trace=trace)
        t = trace.cpu().numpy()
        print(f"{point}: q {t[0, 2]}; path {t[:, 0].tolist()}; reason {t[:, 1].tolist()}; "
              f"G {t[:, 4].tolist()}; E {t[:, 5].tolist()}", flush=True)
        del logits
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
