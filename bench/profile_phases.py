"""Where the time goes: CTA 0's %clock at each PROFILE_STAMPS point (the profile build).

    source .dsl/b/install.sh && python bench/profile_phases.py

Prints, per configuration, the median over rows of the cycles since kernel entry at each
stamp (bench/NOTES.md keeps the history).
"""
import os, sys
import numpy as np
import torch
sys.path.insert(0, os.getcwd())
import kernel.decode_topk_cute as m
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack
import cuda.bindings.driver as cuda
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jit_targets import indexer  # noqa: E402

configs = [(1, 131072, 2048, False, (8, 8)), (8, 131072, 2048, False, (8, 8)), (32, 32768, 2048, False, (4, 8)),
           (64, 8192, 512, False, (4, 8)), (1, 131072, 512, True, (8, 8)), (1, 1048576, 512, False, (16, 16))]
names = m.PROFILE_STAMPS
for rows, width, k, block, (C, V) in configs:
    t = m.DecodeTopK(k, C, V, block, profile=True)
    comp = cute.compile(t, *m.fake_arguments(k, t.trace_width))
    x = indexer(rows, width)
    lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
    out = torch.empty((rows, k), dtype=torch.int32, device="cuda")
    tr = torch.zeros((rows, t.trace_width), dtype=torch.int32, device="cuda")
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    args = (from_dlpack(x, assumed_align=16).mark_layout_dynamic(leading_dim=1), from_dlpack(lengths, assumed_align=4),
            from_dlpack(out, assumed_align=16), from_dlpack(tr, assumed_align=16), stream)
    for _ in range(3):
        tr.zero_(); comp(*args); torch.cuda.synchronize()
    a = tr.cpu().numpy().astype(np.int64)
    st = a[:, 8:]
    base = st[:, 0:1]
    rel = np.where(st != 0, (st - base) & 0xFFFFFFFF, -1)
    med = np.median(rel, axis=0)
    print(f"== rows {rows} width {width} k {k} {'block' if block else 'token'} build {C}x{V} path {np.bincount(a[:,0])} ")
    print("   " + "  ".join(f"{n}={int(v)}" for n, v in zip(names, med) if v >= 0))
