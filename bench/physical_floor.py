"""The physical floor: the GPU's own floor for a grid point, in the best one-wave launch shape.

bench/speed_of_light.py is the floor of DecodeTopK's *launch shape* (its clusters, threads
and shared memory, so its waves). This kernel is the floor of the *GPU* (issue 15, item
5): one wave of two 512-thread CTAs an SM over every SM (no cluster, no shared memory),
grid-striding over every row's valid 16-byte vectors (tiles of 512 vectors, a vector a
thread; rows of any count and width spread evenly over the whole GPU), then the k indices
of every row written (0 .. k-1), and nothing selected. "x of the physical floor" in
bench/RESULTS.md is DecodeTopK's time over this one's, at the same point, same timer.

Why a thread loads UNROLL tiles before it uses any, and then folds them into one word it
stores only if it equals POISON: ptxas deletes a load whose result nothing uses (the first
version of this kernel, measured at 4-5 us for any size), and a load used right away
makes the warp wait for it, one memory latency a tile. The loads are inline PTX
(kernel.decode_topk_cute's load_u32x4, which also reads a row's last partial vector lane
by lane, never past the row's length).

It has the module API kernel/aot.py builds from (fake_arguments, variants,
compile_decode_topk); its one build key is 1x512x8 (the launch ignores it):

    python -m decode_topk.kernel.aot --module bench/physical_floor.py --out .aot_floor --work build/aot_floor

and bench/grid.py loads .aot_floor/libdecode_topk.so (its hash checked against this file).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32

from decode_topk.kernel import decode_topk_cute as dtk

KS = (512, 2048)  # the grid's k
THREADS = 512
SMS = 132  # the H200's SMs (a GPU with fewer runs the grid in more than one wave)
CTAS = 2 * SMS  # two CTAs an SM: 1024 threads, the most an SM keeps with 64 registers a thread
UNROLL = 4  # tiles a thread loads before it uses any (four 16-byte loads in flight a thread)
POISON = 0x7EADBEEF  # the folded word is stored (into out[0, 0]) only if it equals this


class PhysicalFloor:
    """Load every valid vector of every row once, spread over the whole GPU, and write
    out[r] = 0 .. k-1 (k as DecodeTopK's; cluster and vector_count ignored)."""

    def __init__(self, k: int, cluster: int = 1, vector_count: int = 8, block_mode: bool = False):
        self.k = k

    @cute.jit
    def __call__(self, logits: cute.Tensor, lengths: cute.Tensor, out: cute.Tensor, trace: cute.Tensor,
                 stream: cuda.CUstream):
        # (No min_blocks_per_mp: above 1 the DSL asks a device for its shared memory; the
        # kernel needs few registers, so two CTAs an SM fit anyway: the AOT report shows it.)
        self.kernel(logits, lengths, out).launch(grid=[CTAS, 1, 1], block=[THREADS, 1, 1], cluster=[1, 1, 1],
                                                 stream=stream)

    @cute.kernel
    def kernel(self, logits: cute.Tensor, lengths: cute.Tensor, out: cute.Tensor):
        tid = cute.arch.thread_idx()[0]
        cta = cute.arch.block_idx()[0]
        rows = logits.shape[0]
        width = logits.shape[1]
        tiles_per_row = (((width + 7) >> 3) + THREADS - 1) // THREADS
        base = logits.iterator.toint()
        stride = Int64(logits.layout.stride[0]) * 2
        tiles = rows * tiles_per_row
        folded = Uint32(0)
        for first in cutlass.range(cta, tiles, CTAS * UNROLL):
            loaded = []
            for u in cutlass.range_constexpr(UNROLL):
                tile = first + u * CTAS
                row = cutlass.min(tile, tiles - 1) // tiles_per_row
                vector = (tile - row * tiles_per_row) * THREADS + tid
                length = cutlass.min(cutlass.max(Int32(lengths[row]), Int32(0)), width)
                valid = dtk._pick(tile < tiles, cutlass.min(cutlass.max(length - vector * 8, Int32(0)), Int32(8)), 0)
                loaded.append(dtk.load_u32x4(base + Int64(row) * stride + Int64(vector) * 16, valid))
            for words in loaded:
                folded = folded ^ words[0] ^ words[1] ^ words[2] ^ words[3]
        out_base = out.iterator.toint()
        for j in cutlass.range(cta * THREADS + tid, rows * self.k, CTAS * THREADS):
            dtk.store_s32(out_base + Int64(j) * 4, j & (self.k - 1), Int32(1))
        dtk.store_s32(out_base, Int32(folded), dtk._pick(folded == Uint32(POISON), 1, 0))


def fake_arguments(k: int, trace_width: int = len(dtk.TRACE_FIELDS)):
    return dtk.fake_arguments(k, trace_width)


def variants(traces=(False,)):
    """The Variants kernel/aot.py builds: one a k, keyed 1x512x8 token (the key only)."""
    return [dtk.Variant(k, dtk.Build.of(1, 8), False, trace) for k in KS for trace in traces]


_compiled = {}


def compile_decode_topk(k, cluster, vector_count, block_mode, trace=False, arch=None, options=None):
    """The kernel/aot.py entry point (trace is ignored: the floor writes none)."""
    key = (k, arch, options)
    if key not in _compiled:
        flags = " ".join(f for f in (None if arch is None else f"--gpu-arch {arch}", options) if f)
        extra = {"options": flags} if flags else {}
        _compiled[key] = cute.compile(PhysicalFloor(k), *fake_arguments(k), **extra)
    return _compiled[key]
