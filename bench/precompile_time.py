"""How long `precompile` takes on this machine, and that decode calls afterwards compile
nothing (issue 5). Needs a GPU and the DSL (the JIT path).

    python bench/precompile_time.py [--max-width 1048576]
"""

import argparse
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-width", type=int, default=1048576)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    import torch

    from decode_topk.kernel import decode_topk_cute as dtk
    t1 = time.perf_counter()
    done = dtk.precompile(args.max_width)
    t2 = time.perf_counter()
    print(f"import {t1 - t0:.1f} s; precompile({args.max_width}): {len(done)} variants in {t2 - t1:.1f} s "
          f"({(t2 - t1) / len(done):.1f} s each, occupancy queries included)")
    compiled = len(dtk._compiled)
    calls = 0
    for k in dtk.KS:
        for block_mode in (False, True):
            for build in dtk.BUILDS:
                width = min(args.max_width, build.capacity_in(block_mode))
                for rows in (1, 64 if width <= dtk.Build.of(8, 16).capacity else 14):
                    logits = torch.zeros((rows, width), dtype=torch.bfloat16, device="cuda")
                    lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
                    dtk.decode_topk(logits, lengths, k, block_mode=block_mode)
                    calls += 1
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    print(f"then {calls} decode_topk calls over every k x mode x build x (1 row, many rows) in {t3 - t2:.1f} s: "
          f"{len(dtk._compiled) - compiled} compiled")
    return 1 if len(dtk._compiled) != compiled else 0


if __name__ == "__main__":
    sys.exit(main())
