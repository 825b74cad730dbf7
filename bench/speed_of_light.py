"""The speed-of-light kernel: DecodeTopK's launch and data movement with no selection.

For each grid point of bench/grid.py its time is the floor of this design: the same
cluster launch (cluster x threads a row, the same dynamic shared memory, so the same
occupancy and waves), the same loads (each CTA stages its chunk of the row's valid
vectors into shared memory with kernel.decode_topk_cute.load_u32x4, 16-byte loads, a
row's last partial vector lane by lane), and k indices written a row, but no samples,
no barriers, no histograms and no selection: the k indices are simply 0 .. k-1.

It has the module API kernel/aot.py builds from (fake_arguments, variants,
compile_decode_topk), so the AOT library is built like DecodeTopK's:

    python -m decode_topk.kernel.aot --module bench/speed_of_light.py --out .aot_sol --work build/aot_sol

and bench/grid.py loads .aot_sol/libdecode_topk.so (its hash checked against this file).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr

from decode_topk.kernel import decode_topk_cute as dtk

KS = (512, 2048)  # the grid's k


class SpeedOfLight:
    """Stage every valid vector of the row into shared memory and write out[r] = 0 .. k-1,
    with DecodeTopK's launch shape (k, cluster, vector_count as DecodeTopK's)."""

    def __init__(self, k: int, cluster: int, vector_count: int, block_mode: bool = False):
        shape = dtk.make_decode_topk(k, cluster, vector_count, block_mode)
        self.k, self.cluster, self.vectors = k, cluster, vector_count
        self.threads = shape.threads
        # the register build (1x512x2) loads its two vectors a thread at once
        self.load_batch = getattr(shape, "load_batch", vector_count)
        self.smem_bytes = shape.smem_bytes  # the same occupancy as DecodeTopK's build

    @cute.jit
    def __call__(self, logits: cute.Tensor, lengths: cute.Tensor, out: cute.Tensor, trace: cute.Tensor,
                 stream: cuda.CUstream):
        self.kernel(logits, lengths, out).launch(
            grid=[logits.shape[0] * self.cluster, 1, 1], block=[self.threads, 1, 1],
            cluster=[self.cluster, 1, 1], stream=stream, min_blocks_per_mp=1)

    @cute.kernel
    def kernel(self, logits: cute.Tensor, lengths: cute.Tensor, out: cute.Tensor):
        C, nt, V, k = self.cluster, self.threads, self.vectors, self.k
        tid = cute.arch.thread_idx()[0]
        rank = cute.arch.block_idx_in_cluster()
        row = cute.arch.block_idx()[0] // C
        allocator = cutlass.memory.SmemAllocator()
        stage = allocator.allocate_array(cutlass.Uint8, self.smem_bytes, byte_alignment=16).toint()
        width = logits.shape[1]
        length = cutlass.min(cutlass.max(Int32(lengths[row]), Int32(0)), width)
        nv = (length + 7) >> 3
        start = (rank * nv) // C
        count = ((rank + 1) * nv) // C - start
        row_logits = logits.iterator.toint() + Int64(row) * Int64(logits.layout.stride[0]) * 2
        # In rounds of a stage: one for a staged token row, up to KEY_BLOCKS for a block row,
        # whose chunk of blocks DecodeTopK stages as keys (SPEC.md 2.2), and as many as its
        # chunk needs on a streamed build, which streams its chunk a stage's worth at a time
        # (SPEC.md 2.12; until session 51 a streamed form of its own read the whole row in
        # every CTA, C times the bytes).
        for first in cutlass.range(0, count, nt * V, unroll=1):
            for batch in cutlass.range_constexpr(0, V, self.load_batch):
                staged = []
                for s in cutlass.range_constexpr(batch, batch + self.load_batch):
                    i = first + s * nt + tid
                    g = start + i
                    valid = dtk._pick(i < count, cutlass.min(length - g * 8, Int32(8)), 0)
                    staged.append((i - first, i, dtk.load_u32x4(row_logits + Int64(g) * 16, valid)))
                for slot, i, words in staged:
                    if i < count:
                        dtk.shared_store_u32x4(stage + slot * 16, words)
        # The k indices, spread over the cluster's threads.
        out_row = out.iterator.toint() + Int64(row) * (k * 4)
        for j in cutlass.range_constexpr((k + C * nt - 1) // (C * nt)):
            index = (j * C + rank) * nt + tid
            dtk.store_s32(out_row + Int64(index) * 4, index, dtk._pick(index < k, 1, 0))


def fake_arguments(k: int, trace_width: int = len(dtk.TRACE_FIELDS)):
    return dtk.fake_arguments(k, trace_width)


def variants(traces=(False,)):
    """The Variants kernel/aot.py builds: token mode only (block mode loads the same)."""
    return [dtk.Variant(k, build, False, trace) for k in KS for build in dtk.BUILDS for trace in traces]


_compiled = {}


def compile_decode_topk(k, cluster, vector_count, block_mode, trace=False, arch=None, options=None):
    """The kernel/aot.py entry point (trace is ignored: the floor writes none)."""
    key = (k, cluster, vector_count, arch, options)
    if key not in _compiled:
        flags = " ".join(f for f in (None if arch is None else f"--gpu-arch {arch}", options) if f)
        extra = {"options": flags} if flags else {}
        _compiled[key] = cute.compile(SpeedOfLight(k, cluster, vector_count, block_mode),
                                      *fake_arguments(k), **extra)
    return _compiled[key]
