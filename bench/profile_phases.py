"""Where the time goes: CTA 0's %clock at each PROFILE_STAMPS point (the profile build).

    source .dsl/b/install.sh && python bench/profile_phases.py

Needs the DSL on the GPU machine (the profile build is not in the AOT library). Data:
indexer-like rows at rho 0.9 (bench/grid.py make_logits). Prints, per configuration, the
median over rows of the cycles since kernel entry at each stamp and the paths the rows
took (bench/NOTES.md keeps the history).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/grid.py, as `grid`

import cutlass.cute as cute  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from grid import make_logits  # noqa: E402

from decode_topk.kernel import decode_topk_cute as dtk  # noqa: E402

# (rows, width, k, block_mode, (cluster, vectors))
CONFIGS = [(1, 131072, 2048, False, (8, 8)), (8, 131072, 2048, False, (8, 8)), (32, 32768, 2048, False, (4, 8)),
           (64, 8192, 512, False, (4, 8)), (1, 131072, 512, True, (8, 8)), (1, 1048576, 512, False, (16, 16))]


def main():
    for rows, width, k, block_mode, (cluster, vectors) in CONFIGS:
        topk = dtk.DecodeTopK(k, cluster, vectors, block_mode, profile=True)
        compiled = cute.compile(topk, *dtk.fake_arguments(k, topk.trace_width))
        logits = make_logits(torch, "rho0.9", rows, width, seed=rows * 7 + width)
        lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
        out = torch.empty((rows, k), dtype=torch.int32, device="cuda")
        trace = torch.zeros((rows, topk.trace_width), dtype=torch.int32, device="cuda")
        for _ in range(3):
            trace.zero_()
            compiled(*dtk.cute_arguments(logits, lengths, out, trace))
            torch.cuda.synchronize()
        fields = trace.cpu().numpy().astype(np.int64)
        stamps = fields[:, len(dtk.TRACE_FIELDS):]
        since = np.where(stamps != 0, (stamps - stamps[:, :1]) & 0xFFFFFFFF, -1)  # %clock wraps at 2^32
        median = np.median(since, axis=0)
        print(f"== rows {rows} width {width} k {k} {'block' if block_mode else 'token'} build {cluster}x{vectors} "
              f"paths {np.bincount(fields[:, 0], minlength=3).tolist()}")
        print("   " + "  ".join(f"{name}={int(v)}" for name, v in zip(dtk.PROFILE_STAMPS, median) if v >= 0))


if __name__ == "__main__":
    main()
