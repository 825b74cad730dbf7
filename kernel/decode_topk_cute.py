"""Decode top-k of the dense indexers straight from their BF16 logits, in CuTe DSL.

The problem. In a decode step each dense indexer layer scores every compressed token of a
row (SM100's paged MQA logits are BF16) and keeps the k largest: the token top-512, and in
the candidate source also the top-2048 of the rows' 8-token block maxima. cooperative_topk
reads FP32, so the logits used to be upcast first, and it builds a radix histogram of
every value with shared-memory atomics. Real indexer logits crowd a few histogram bins (a
row of 150K logits holds about 200 distinct BF16 values), where those atomics serialize.

What this module computes. DecodeTopK writes, for each row, the indices of its k largest
elements in any order (exact: every index whose value exceeds the k-th largest, then
enough of those equal to it), or 0 .. n-1 and -1 padding when the row has at most k
elements. An element is one BF16 logit (token mode), or the NaN-propagating maximum of an
aligned group of 8 logits (block mode, the candidate blocks), with the row's newest block
pinned at +inf and blocks scoring -inf written as -1. Values are compared through an
order-preserving 16-bit key of their BF16 bits, so ties are exact.

How. One thread block cluster of C CTAs per row: 8 CTAs of 512 threads while every row's
cluster can be resident at once, else 4 of 1024 (a second wave of clusters would nearly
double the time). Each CTA copies one contiguous chunk of the row into shared memory, as
16-byte vectors (8 logits, or one block); the chunks split the row's valid length, not its
width. A thread stages 8 vectors and keeps them in registers too, so a cluster holds
262,144 logits. Wider rows need more: at a 1M context the ratio-2 layers' logits are
524,288 wide, and a second build stages 16 vectors a thread at 8 CTAs, the other 8 in
shared memory only. The candidate source layer scores every token (ratio 1), 1,048,576 at
a 1M context, so a third build runs 16 CTAs a row (a non-portable cluster size, which CuTe
DSL allows on every kernel) with 16 vectors a thread. Rows of the wide builds run in waves
when they outnumber the resident clusters; the 16-CTA build takes at most two waves
(supports_decode_topk). Two ways to the answer:

Sampled (token rows longer than one vector a thread)::

    sample the row ──► every CTA: the same cutoff (the q-th largest of the row's
    2048 samples, q aiming at k + 2560 survivors)
        └► keep keys > cutoff and up to k keys == cutoff, push both to CTA 0
        └► CTA 0: exact k-th largest among <= 8192 survivors (two 8-bit radix
           passes), write k indices

Direct (block mode, short token rows, and a sample that misjudged the row: more than 8192
survivors, or fewer than k at or above the cutoff): the exact k-th largest key from two
cluster-wide 8-bit radix histograms, then every CTA writes its own selected indices
straight to the output.

Both filter the same way: a thread tests each of its vectors' maximum against the cutoff,
the vectors that can hold selected keys go to a CTA queue, and the CTA's threads unpack
the queued vectors evenly; a CTA scan gives each thread its output slots and one cluster
atomic reserves the CTA's range, so no key costs an atomic. Whole-row histograms spread
each warp's atomics over 8 copies (lane l counts into copy l mod 8), since a crowded bin
serializes the atomics on its word; the radix selects over the few thousand samples or
survivors count into one histogram, where the copies' zeroing and summing cost more than
they save.

Synchronization. Cluster barriers separate the phases: every CTA has started and zeroed
its counters before any distributed shared memory access; samples are complete before the
cutoff; survivors are complete before CTA 0 reads them; histogram contributions are
complete before they are read; and CTA 0 waits until every peer is done with its shared
memory before it exits. The kernel waits on its predecessor grid before reading inputs and
lets its dependents launch once its chunk is in shared memory (programmatic dependent
launch).

SPEC.md (part 2) fixes every constant of the algorithm; reference/model.py simulates it
CTA by CTA, and the trace variant of this kernel (trace=True) reports per row what the
model reports, field by field.
"""

import functools
import threading

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32, Uint64, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

# vendor: policy
# The constants, builds, launch policy, input checks and host front end live DSL-free in
# policy.py, so the model, the suite and the AOT loader share them; `python -m
# decode_topk.kernel.vendor` writes this module as one file with policy.py's body in place
# of this comment and the import below.
from .policy import (
    BUILDS,
    KEY_NEG_INF,
    KEY_POS_INF,
    KS,
    LOGITS_PER_VECTOR,
    MAX_WIDTH,
    PROFILE_STAMPS,
    SAMPLES,
    SURVIVOR_AIM,
    SURVIVOR_CAPACITY,
    TRACE_FIELDS,
    WAVES_16,
    Build,
    Variant,
    build_for,
    check_inputs,
    check_lengths,
    check_logits,
    check_width,
    cluster_for,
    launch,
    launch_slices,
    max_rows,
    new_output,
    precompile_builds,
    threads_for,
    variants,
    vector_choices,
    vectors_for,
)

__all__ = [
    # the launch policy's public names (policy.py): this module's API since the first version
    "BUILDS", "KS", "LOGITS_PER_VECTOR", "MAX_WIDTH", "TRACE_FIELDS", "WAVES_16", "Build", "Variant", "build_for",
    "check_inputs", "check_lengths", "check_logits", "check_width", "cluster_for", "launch_slices", "max_rows",
    "new_output", "threads_for", "variants", "vector_choices", "vectors_for",
    # this module's own
    "DecodeTopK", "compile_decode_topk", "cute_arguments", "decode_topk", "decode_topk_seq_lens",
    "fake_arguments", "precompile", "resident_clusters", "resident_for", "supports_decode_topk",
]

SELECT_BATCH = 4  # radix selects: keys a thread loads before it counts any
HIST_COPIES = 8  # whole-row histograms: lane l counts into copy l mod 8


# ---------------------------------------------------------------------------------------
# PTX helpers. Every shared, cluster and global access goes through inline PTX on raw
# 32-bit shared / 64-bit global addresses: one instruction each, no pointer types to lose
# their alignment or signedness (cutedsl-notes, pitfalls 1, 3, 4), and the "memory"
# clobber keeps the compiler from moving them across barriers.
# ---------------------------------------------------------------------------------------
def _asm(result, operands, text, constraints, loc, ip):
    return llvm.inline_asm(result, [o.ir_value(loc=loc, ip=ip) for o in operands], text,
                           constraints, has_side_effects=True, is_align_stack=False,
                           asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


def _words(result, loc, ip):
    return tuple(Uint32(llvm.extractvalue(T.i32(), result, [i], loc=loc, ip=ip)) for i in range(4))


def _u32x4():
    return llvm.StructType.get_literal([T.i32(), T.i32(), T.i32(), T.i32()])


def _partial_lanes():
    # Lane e (1..7) of a partial vector: loaded alone, only if valid > e.
    lines = []
    for e in range(1, 8):
        lines.append(f"setp.gt.and.s32 p, $5, {e}, pp;\n@p ld.global.nc.u16 h{e}, [$4+{2 * e}];")
    return "\n".join(lines)


@dsl_user_op
def load_u32x4(address: Int64, valid: Int32, *, loc=None, ip=None):
    """Four 32-bit words at a 16-byte aligned global address: one 16-byte load when all 8
    lanes are valid; else only lanes < valid, one 16-bit load each, zeros elsewhere, so a
    row's last partial vector never reads at or past the row's length (valid 0: nothing)."""
    text = ("{\n.reg .pred pf, pp, p;\n.reg .b16 h<8>;\n"
            "mov.b32 $0, 0;\nmov.b32 $1, 0;\nmov.b32 $2, 0;\nmov.b32 $3, 0;\n"
            "setp.eq.s32 pf, $5, 8;\nsetp.lt.s32 pp, $5, 8;\n"
            "@pf ld.global.nc.v4.u32 {$0, $1, $2, $3}, [$4];\n"
            + "".join(f"mov.b16 h{e}, 0;\n" for e in range(8))
            + "setp.gt.and.s32 p, $5, 0, pp;\n@p ld.global.nc.u16 h0, [$4];\n"
            + _partial_lanes()
            + "\n@pp mov.b32 $0, {h0, h1};\n@pp mov.b32 $1, {h2, h3};\n"
            "@pp mov.b32 $2, {h4, h5};\n@pp mov.b32 $3, {h6, h7};\n}")
    return _words(_asm(_u32x4(), [Int64(address), Int32(valid)], text,
                       "=r,=r,=r,=r,l,r,~{memory}", loc, ip), loc, ip)


@dsl_user_op
def shared_store_u32x4(address: Int32, words, *, loc=None, ip=None):
    """Store four 32-bit words at a 16-byte aligned shared address of this CTA."""
    _asm(None, [Int32(address)] + [Uint32(w) for w in words],
         "st.shared.v4.u32 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}", loc, ip)


@dsl_user_op
def shared_load_u32x4(address: Int32, *, loc=None, ip=None):
    """Four 32-bit words at a 16-byte aligned shared address of this CTA."""
    return _words(_asm(_u32x4(), [Int32(address)], "ld.shared.v4.u32 {$0, $1, $2, $3}, [$4];",
                       "=r,=r,=r,=r,r,~{memory}", loc, ip), loc, ip)


@dsl_user_op
def shared_load_u32(address: Int32, *, loc=None, ip=None) -> Int32:
    """A 32-bit word at a shared address of this CTA."""
    return Int32(_asm(T.i32(), [Int32(address)], "ld.shared.u32 $0, [$1];", "=r,r,~{memory}", loc, ip))


@dsl_user_op
def shared_load_u16(address: Int32, *, loc=None, ip=None) -> Int32:
    """A 16-bit half word at a shared address of this CTA, zero-extended."""
    return Int32(_asm(T.i32(), [Int32(address)],
                      "{\n.reg .b16 t;\nld.shared.u16 t, [$1];\ncvt.u32.u16 $0, t;\n}",
                      "=r,r,~{memory}", loc, ip))


@dsl_user_op
def shared_store_u32(address: Int32, value: Int32, *, loc=None, ip=None):
    """Store a 32-bit word at a shared address of this CTA."""
    _asm(None, [Int32(address), Int32(value)], "st.shared.u32 [$0], $1;", "r,r,~{memory}", loc, ip)


@dsl_user_op
def shared_store_u16(address: Int32, value: Int32, predicate: Int32, *, loc=None, ip=None):
    """Store the low half of value at a shared address of this CTA if predicate != 0."""
    _asm(None, [Int32(address), Int32(value), Int32(predicate)],
         "{\n.reg .pred p;\n.reg .b16 t;\nsetp.ne.s32 p, $2, 0;\ncvt.u16.u32 t, $1;\n"
         "@p st.shared.u16 [$0], t;\n}", "r,r,r,~{memory}", loc, ip)


@dsl_user_op
def shared_red(address: Int32, value: Int32, predicate: Int32, *, loc=None, ip=None):
    """Atomic add to a shared word of this CTA if predicate != 0 (no return value)."""
    _asm(None, [Int32(address), Int32(value), Int32(predicate)],
         "{\n.reg .pred p;\nsetp.ne.s32 p, $2, 0;\n@p red.shared.add.u32 [$0], $1;\n}",
         "r,r,r,~{memory}", loc, ip)


@dsl_user_op
def peer_address(address: Int32, rank: Int32, *, loc=None, ip=None) -> Int32:
    """The cluster address of this CTA's shared address in CTA rank."""
    return Int32(_asm(T.i32(), [Int32(address), Int32(rank)], "mapa.shared::cluster.u32 $0, $1, $2;",
                      "=r,r,r", loc, ip))


@dsl_user_op
def cluster_store_u16(address: Int32, value: Int32, predicate: Int32, *, loc=None, ip=None):
    """Store the low half of a word to cluster shared memory if predicate != 0."""
    _asm(None, [Int32(address), Int32(value), Int32(predicate)],
         "{\n.reg .pred p;\n.reg .b16 t;\nsetp.ne.s32 p, $2, 0;\ncvt.u16.u32 t, $1;\n"
         "@p st.shared::cluster.u16 [$0], t;\n}", "r,r,r,~{memory}", loc, ip)


@dsl_user_op
def cluster_store_u32(address: Int32, value: Int32, predicate: Int32, *, loc=None, ip=None):
    """Store a 32-bit word to cluster shared memory if predicate != 0."""
    _asm(None, [Int32(address), Int32(value), Int32(predicate)],
         "{\n.reg .pred p;\nsetp.ne.s32 p, $2, 0;\n@p st.shared::cluster.u32 [$0], $1;\n}",
         "r,r,r,~{memory}", loc, ip)


@dsl_user_op
def cluster_store_u32x2(address: Int32, first: Int32, second: Int32, predicate: Int32, *, loc=None, ip=None):
    """Store two 32-bit words to an 8-byte aligned cluster shared address if predicate != 0
    (one DSMEM store for a survivor's index and key, not two)."""
    _asm(None, [Int32(address), Int32(first), Int32(second), Int32(predicate)],
         "{\n.reg .pred p;\nsetp.ne.s32 p, $3, 0;\n@p st.shared::cluster.v2.u32 [$0], {$1, $2};\n}",
         "r,r,r,r,~{memory}", loc, ip)


@dsl_user_op
def cluster_load(address: Int32, *, loc=None, ip=None) -> Int32:
    """Load a cluster shared word."""
    return Int32(_asm(T.i32(), [Int32(address)], "ld.shared::cluster.u32 $0, [$1];",
                      "=r,r,~{memory}", loc, ip))


@dsl_user_op
def cluster_red(address: Int32, value: Int32, predicate: Int32, *, loc=None, ip=None):
    """Atomic add to a cluster shared word if predicate != 0 (no return value)."""
    _asm(None, [Int32(address), Int32(value), Int32(predicate)],
         "{\n.reg .pred p;\nsetp.ne.s32 p, $2, 0;\n"
         "@p red.relaxed.cluster.shared::cluster.add.u32 [$0], $1;\n}", "r,r,r,~{memory}", loc, ip)


@dsl_user_op
def cluster_add_u64(address: Int32, value: Uint64, *, loc=None, ip=None) -> Uint64:
    """Atomic add to an 8-byte aligned cluster shared word pair; returns the old pair.
    (One atomic reserves two ranges: the low word counts gt keys, the high word eq keys.)"""
    return Uint64(_asm(T.i64(), [Int32(address), Uint64(value)],
                       "atom.relaxed.cluster.shared::cluster.add.u64 $0, [$1], $2;",
                       "=l,r,l,~{memory}", loc, ip))


@dsl_user_op
def store_s32(address: Int64, value: Int32, predicate: Int32, *, loc=None, ip=None):
    """Store a 32-bit word to global memory if predicate != 0."""
    _asm(None, [Int64(address), Int32(value), Int32(predicate)],
         "{\n.reg .pred p;\nsetp.ne.s32 p, $2, 0;\n@p st.global.s32 [$0], $1;\n}",
         "l,r,r,~{memory}", loc, ip)


@dsl_user_op
def max_nan_bf16x2(a: Uint32, b: Uint32, *, loc=None, ip=None) -> Uint32:
    """Lane-wise maximum of two BF16 pairs, NaN if either is NaN (canonical 0x7FFF)."""
    return Uint32(llvm.inline_asm(T.i32(), [Uint32(a).ir_value(loc=loc, ip=ip), Uint32(b).ir_value(loc=loc, ip=ip)],
                                  "max.NaN.bf16x2 $0, $1, $2;", "=r,r,r", has_side_effects=False,
                                  is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


@dsl_user_op
def warp_uniform_bin(bin_: Int32, valid: Int32, *, loc=None, ip=None):
    """(lane 0's bin, 1 if every valid lane of the warp holds it and lane 0 is valid else 0,
    the warp's valid lanes): shfl.sync + vote.sync, all lanes of the warp must execute it."""
    result = _asm(llvm.StructType.get_literal([T.i32(), T.i32(), T.i32()]), [Int32(bin_), Int32(valid)],
                  "{\n.reg .pred v, same, all;\n.reg .b32 b0, v0;\n"
                  "setp.ne.s32 v, $4, 0;\n"
                  "shfl.sync.idx.b32 b0, $3, 0, 0x1f, 0xffffffff;\n"
                  "shfl.sync.idx.b32 v0, $4, 0, 0x1f, 0xffffffff;\n"
                  "setp.eq.or.s32 same, $3, b0, !v;\n"
                  "vote.sync.all.pred all, same, 0xffffffff;\n"
                  "setp.ne.and.s32 all, v0, 0, all;\n"
                  "selp.s32 $1, 1, 0, all;\n"
                  "vote.sync.ballot.b32 $2, v, 0xffffffff;\n"
                  "mov.b32 $0, b0;\n}",
                  "=r,=r,=r,r,r", loc, ip)
    return tuple(Int32(llvm.extractvalue(T.i32(), result, [i], loc=loc, ip=ip)) for i in range(3))


@dsl_user_op
def popc(value: Int32, *, loc=None, ip=None) -> Int32:
    """Set bits of a word."""
    return Int32(llvm.inline_asm(T.i32(), [Int32(value).ir_value(loc=loc, ip=ip)], "popc.b32 $0, $1;", "=r,r",
                                 has_side_effects=False, is_align_stack=False,
                                 asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


@dsl_user_op
def read_clock(*, loc=None, ip=None) -> Int32:
    """This SM's cycle counter (low 32 bits), for the profile build's phase stamps."""
    return Int32(llvm.inline_asm(T.i32(), [], "mov.u32 $0, %clock;", "=r", has_side_effects=True,
                                 is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


@dsl_user_op
def max_u16x2(a: Uint32, b: Uint32, *, loc=None, ip=None) -> Uint32:
    """Lane-wise unsigned maximum of two pairs of 16-bit keys."""
    return Uint32(llvm.inline_asm(T.i32(), [Uint32(a).ir_value(loc=loc, ip=ip), Uint32(b).ir_value(loc=loc, ip=ip)],
                                  "max.u16x2 $0, $1, $2;", "=r,r,r", has_side_effects=False,
                                  is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


def shfl_up(value, delta):
    """value of the lane delta below (own value in the lowest lanes)."""
    return cute.arch.shuffle_sync_up(value, delta)


def cluster_sync():
    """A full cluster barrier (arrive has release, wait acquire semantics)."""
    cute.arch.cluster_arrive()
    cute.arch.cluster_wait()


# ---------------------------------------------------------------------------------------
# Keys (SPEC.md 1.2, 1.3).
# ---------------------------------------------------------------------------------------
def order_key(bits):
    """The order-preserving key of the BF16 value in the low half of bits: bits ^ 0x8000
    for a clear sign bit, ~bits for a set one. Why the multiply: the sign bit moved to
    bit 0 times 0x7FFF is the extra mask a negative value needs, with no branch."""
    b = Uint32(bits) & Uint32(0xFFFF)
    return Int32((b ^ Uint32(0x8000) ^ ((b >> 15) * Uint32(0x7FFF))) & Uint32(0xFFFF))


def key_word(word):
    """The keys of both BF16 values of a word, in place (order_key on each half at once:
    the sign bits moved to bit 0 of each half, times 0x7FFF, never carry across halves)."""
    w = Uint32(word)
    return w ^ Uint32(0x80008000) ^ (((w >> 15) & Uint32(0x00010001)) * Uint32(0x7FFF))


def word_key(keys, e):
    """The key of element e of a vector, from its key words (key_word of each word):
    element e is the low half of word e // 2 when e is even (the first logit sits at the
    lowest address)."""
    return Int32((keys[e // 2] >> (16 * (e % 2))) & Uint32(0xFFFF))


def block_key(words):
    """The key of the NaN-propagating maximum of eight BF16 values (max.NaN.bf16x2: any
    NaN gives 0x7FFF; max(-0, +0) = +0). The last step folds the high pair into the low."""
    m = max_nan_bf16x2(max_nan_bf16x2(words[0], words[1]), max_nan_bf16x2(words[2], words[3]))
    return order_key(max_nan_bf16x2(m, m >> 16))


def hist_add(hist, bin_, valid, lane, copies):
    """Count each valid lane's bin_. Why the uniform test: real indexer rows crowd a few
    bins, and 32 lanes adding 1 to one word serialize, so a warp whose valid lanes share
    one bin makes one add of their count (lane 0); any other warp adds lane by lane, into
    copy lane mod copies (8 for whole-row histograms, bin-major so that a bin's copies sit
    in 8 banks; 1 for the radix selects). Every lane of the warp must call it."""
    first_bin, uniform, lanes = warp_uniform_bin(bin_, valid)
    shared_red(hist + first_bin * copies * 4, popc(lanes), uniform & _pick(lane == 0, 1, 0))
    if const_expr(copies == 1):
        shared_red(hist + bin_ * 4, Int32(1), valid & (1 - uniform))
    else:
        shared_red(hist + (bin_ * copies + (lane & (copies - 1))) * 4, Int32(1), valid & (1 - uniform))


def _pick(condition, a, b):
    """a where condition (a Boolean, or an Int32 0/1 predicate) holds, else b, as Int32."""
    if isinstance(condition, Int32):
        condition = condition != 0
    return Int32(cutlass.select_(condition, Int32(a), Int32(b)))


@cute.jit
def select_bin(hist: Int32, q: Int32, result: Int32, lane: Int32):
    """Warp 0: the bin b of a 256-bin histogram holding the q-th largest key (counting from
    the top bin) and the count above it, stored at result[0], result[1]. Lane l sums the 8
    bins 255 - 8l .. 248 - 8l, an inclusive shuffle scan over lanes gives the counts from the
    top, and the one lane whose range holds q walks its bins."""
    top = 255 - 8 * lane
    counts = [shared_load_u32(hist + (top - j) * 4) for j in range(8)]
    total = Int32(0)
    for j in cutlass.range_constexpr(8):
        total = total + counts[j]
    inclusive = total
    for i in cutlass.range_constexpr(5):
        other = shfl_up(inclusive, 1 << i)
        inclusive = _pick(lane >= (1 << i), inclusive + other, inclusive)
    above = inclusive - total
    if (above < q) & (q <= inclusive):
        found = Int32(-1)
        found_above = Int32(0)
        acc = above
        for j in cutlass.range_constexpr(8):
            hit = (found < 0) & (acc + counts[j] >= q)
            found_above = _pick(hit, acc, found_above)
            found = _pick(hit, top - j, found)
            acc = acc + counts[j]
        shared_store_u32(result, found)
        shared_store_u32(result + 4, found_above)


# ---------------------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------------------
class DecodeTopK:
    """The decode top-k (module docstring) of rows of BF16 logits.

    k: 512, 1024 or 2048; cluster: 4, 8 or 16 CTAs a row (4: 1024 threads, else 512);
    vector_count: 16-byte vectors a thread stages (8, or 16 at 8 or 16 CTAs), so a row holds
    at most cluster * threads * vector_count vectors; block_mode: elements are 8-logit
    block maxima; trace: also write the per-row trace of SPEC.md 2.11.

    Registers keep each staged vector's top (its largest key), the test every filter makes;
    the words themselves are re-read from shared memory by the few passes that need them.
    """

    def __init__(self, k: int, cluster: int, vector_count: int, block_mode: bool, trace: bool = False,
                 profile: bool = False):
        if k not in KS:
            raise ValueError(f"k={k} is not one of {KS}")
        if Build.of(cluster, vector_count) not in BUILDS:
            raise ValueError(f"no build of cluster={cluster}, vector_count={vector_count}; builds: "
                             f"{', '.join(b.name for b in BUILDS)}")
        self.k = k
        self.cluster = cluster
        self.threads = threads_for(cluster)
        self.vectors = vector_count
        self.block_mode = bool(block_mode)
        self.trace = bool(trace) or bool(profile)
        self.profile = bool(profile)
        self.trace_width = len(TRACE_FIELDS) + (len(PROFILE_STAMPS) if profile else 0)
        self.samples_per_cta = SAMPLES // cluster
        # Vectors a thread loads before it stores any (4 registers each), as many as fit
        # beside the tops it keeps: 1024 threads have 64 registers a thread (4 spilled there),
        # 16 tops crowd 512 threads' 128 (8 spilled there).
        self.load_batch = 2 if self.threads == 1024 else (4 if vector_count == 16 else 8)
        slots = self.threads * vector_count
        # Shared memory, byte offsets; every size is a multiple of 16, so each region keeps
        # the stage's 16-byte alignment (the pairs need 8). "copies" .. "misc" are zeroed at
        # the start, before the first cluster barrier.
        regions = (("stage", slots * 16), ("copies", 256 * HIST_COPIES * 4), ("hist1", 1024),
                   ("hist2", 1024), ("select", 1024), ("pairs", 16), ("scan", 2 * 32 * 4), ("misc", 64),
                   ("survivors", SURVIVOR_CAPACITY * 8),
                   ("samples", SAMPLES * 2), ("queue", slots * 2))
        self.offsets = {}
        offset = 0
        for name, size in regions:
            self.offsets[name] = offset
            offset += size
        self.smem_bytes = offset
        self.zero_words = (self.offsets["survivors"] - self.offsets["copies"]) // 4

    # -- host call ---------------------------------------------------------------------
    @cute.jit
    def __call__(self, logits: cute.Tensor, lengths: cute.Tensor, out: cute.Tensor, trace: cute.Tensor,
                 stream: cuda.CUstream):
        """logits: BF16 rows row_bytes apart (16-byte aligned), each holding its row's valid
        logits first; lengths: int32 valid logits a row, or one a request of next_n rows
        (next_n = rows / len(lengths), module function decode_topk_seq_lens); out: int32
        [rows, k]; trace: int32 [rows, 8], written only by a trace build."""
        self.kernel(logits, lengths, out, trace).launch(
            grid=[logits.shape[0] * self.cluster, 1, 1], block=[self.threads, 1, 1],
            cluster=[self.cluster, 1, 1], stream=stream, use_pdl=True,
            # Shared memory allows one CTA an SM anyway; this keeps ptxas from capping
            # registers for a second one (it spilled at 64 on sm_90a without it).
            min_blocks_per_mp=1)

    # -- the kernel --------------------------------------------------------------------
    @cute.kernel
    def kernel(self, logits: cute.Tensor, lengths: cute.Tensor, out: cute.Tensor, trace: cute.Tensor):
        """One cluster a row (module docstring)."""
        C, nt, V, k = self.cluster, self.threads, self.vectors, self.k
        tid = cute.arch.thread_idx()[0]
        rank = cute.arch.block_idx_in_cluster()
        row = cute.arch.block_idx()[0] // C
        lane = tid & 31
        allocator = cutlass.memory.SmemAllocator()
        base = allocator.allocate_array(cutlass.Uint8, self.smem_bytes, byte_alignment=16).toint()
        sm = {name: base + offset for name, offset in self.offsets.items()}
        trace_row = trace.iterator.toint() + Int64(row) * (self.trace_width * 4)
        self.stamp(trace_row, rank, tid, "start")

        for w in cutlass.range_constexpr((self.zero_words + nt - 1) // nt):
            word = w * nt + tid
            if word < self.zero_words:
                shared_store_u32(sm["copies"] + word * 4, Int32(0))

        cute.arch.griddepcontrol_wait()
        width = logits.shape[1]
        # One length a request, next_n rows a request (speculative decode): row r is draft
        # r % next_n of request r // next_n and sees seq_len - (next_n - 1 - r % next_n)
        # tokens. decode_topk passes one length a row (next_n = 1). The seq_len is clamped
        # at 0 first, so the subtraction cannot wrap; then the length to [0, width], so no
        # read leaves the row.
        next_n = logits.shape[0] // lengths.shape[0]
        request = row // next_n
        seq_len = cutlass.max(Int32(lengths[request]), Int32(0))
        length = cutlass.min(cutlass.max(seq_len - (next_n - 1 - (row - request * next_n)), Int32(0)), width)
        nv = (length + 7) >> 3
        n = nv if const_expr(self.block_mode) else length
        start = (rank * nv) // C
        count = ((rank + 1) * nv) // C - start
        row_logits = logits.iterator.toint() + Int64(row) * Int64(logits.layout.stride[0]) * 2
        out_row = out.iterator.toint() + Int64(row) * (k * 4)
        self.stamp(trace_row, rank, tid, "inputs")

        # Issue a batch of loads before the first store: the asm statements keep their
        # order, so a store right after its load would make every load wait for the last.
        tops = []
        for batch in cutlass.range_constexpr(0, V, self.load_batch):
            staged = []
            for s in cutlass.range_constexpr(batch, batch + self.load_batch):
                i = s * nt + tid
                g = start + i
                valid = self.lanes_valid(i < count, g, length, nv)
                staged.append((i, g, valid, load_u32x4(row_logits + Int64(g) * 16, valid)))
            for i, g, valid, words in staged:
                top = Int32(-1)
                if i < count:
                    shared_store_u32x4(sm["stage"] + i * 16, words)
                    top = self.vector_top(words, valid, i < count, g, nv)
                tops.append(top)
        cute.arch.sync_threads()
        self.stamp(trace_row, rank, tid, "staged")
        cute.arch.griddepcontrol_launch_dependents()
        cluster_sync()  # every CTA has started and zeroed its counters
        self.stamp(trace_row, rank, tid, "started")

        # The trace (trace builds): CTA 0's thread 0 writes the short row's fields now and
        # overwrites each field once it is known, so no field stays live in a register.
        for f in cutlass.range_constexpr(len(TRACE_FIELDS)):
            self.record(trace_row, rank, tid, TRACE_FIELDS[f], Int32(0) if f < 2 else Int32(-1))
        if n <= k:
            self.short(sm, tid, rank, tops, start, count, length, n, out_row)
        else:
            direct = Int32(1)
            sampled = False if const_expr(self.block_mode) else nv > C * nt
            if sampled:
                aim = SAMPLES * (k + SURVIVOR_AIM)
                q = cutlass.min(Int32(SAMPLES), cutlass.max(Int32(1), (aim + length - 1) // length))
                self.push_samples(sm, tid, rank, start, count, length)
                cluster_sync()  # samples complete before the cutoff
                self.stamp(trace_row, rank, tid, "samples")
                cutoff, unused = self.radix_select(sm, tid, sm["samples"], 2, Int32(SAMPLES), Int32(SAMPLES),
                                                   Int32(0), q)
                self.record(trace_row, rank, tid, "q", q)
                self.record(trace_row, rank, tid, "cutoff", cutoff)
                self.stamp(trace_row, rank, tid, "cutoff")
                self.gather(sm, tid, tops, cutoff, start, length, nv, Int32(0), Int32(0), Int64(0), True,
                            trace_row, rank)
                cluster_sync()  # survivors complete before CTA 0 reads them
                self.stamp(trace_row, rank, tid, "survivors")
                pair = peer_address(sm["pairs"], Int32(0))
                gt = cluster_load(pair)
                eq = cluster_load(pair + 4)
                # CTA 0 holds the cluster's first k eq survivors only (SPEC.md 2.4): a
                # cutoff value repeated across the CTAs no longer overflows the buffer.
                kept = gt + cutlass.min(eq, Int32(k))
                reason = _pick(kept > SURVIVOR_CAPACITY, 1, _pick(gt + eq < k, 2, 0))
                self.record(trace_row, rank, tid, "gt", gt)
                self.record(trace_row, rank, tid, "eq", eq)
                self.record(trace_row, rank, tid, "reason", reason)
                if reason == 0:
                    direct = Int32(0)
                    if rank == 0:
                        kth, above = self.radix_select(sm, tid, sm["survivors"] + 4, 8, kept, gt,
                                                       SURVIVOR_CAPACITY - kept, Int32(k))
                        self.stamp(trace_row, rank, tid, "survivor_kth")
                        self.emit(sm, tid, gt, kept - gt, kth, above, out_row)
                        self.stamp(trace_row, rank, tid, "emitted")
                        self.record(trace_row, rank, tid, "path", Int32(1))
                        self.record(trace_row, rank, tid, "kth", kth)
                        self.record(trace_row, rank, tid, "above", above)
            if direct == 1:
                kth, above = self.direct(sm, tid, lane, rank, tops, start, count, length, nv, out_row, trace_row)
                self.record(trace_row, rank, tid, "path", Int32(2))
                self.record(trace_row, rank, tid, "kth", kth)
                self.record(trace_row, rank, tid, "above", above)
        cluster_sync()  # no CTA exits while a peer may still touch its shared memory
        self.stamp(trace_row, rank, tid, "end")

    def record(self, trace_row, rank, tid, field, value):
        """Trace builds only: CTA 0's thread 0 writes one TRACE_FIELDS field of the row."""
        if const_expr(self.trace):
            store_s32(trace_row + TRACE_FIELDS.index(field) * 4, value, _pick((rank == 0) & (tid == 0), 1, 0))

    @cute.jit
    def stamp(self, trace_row, rank, tid, point: cutlass.Constexpr):
        """Profile build only: CTA 0's thread 0 records %clock at a PROFILE_STAMPS point."""
        if const_expr(self.profile):
            if (rank == 0) & (tid == 0):
                slot = len(TRACE_FIELDS) + PROFILE_STAMPS.index(point)
                store_s32(trace_row + slot * 4, read_clock(), Int32(1))

    # -- staging -----------------------------------------------------------------------
    def lanes_valid(self, exists, g, length, nv):
        """Lanes of global vector g to load: token mode, those before the row's length;
        block mode, all 8, or none for the pinned newest block."""
        if const_expr(self.block_mode):
            return _pick(exists & (g != nv - 1), 8, 0)
        return _pick(exists, cutlass.min(length - g * 8, Int32(8)), 0)

    def vector_top(self, words, valid, exists, g, nv):
        """The largest key of a staged vector whose first element is at g (token: over its
        valid lanes; block: the block's key, +inf for the newest), -1 if it holds none.
        Token mode: the keys of invalid lanes are set to 0, the smallest key, which cannot
        raise the maximum of a vector with a valid lane."""
        if const_expr(self.block_mode):
            return _pick(exists, _pick(g == nv - 1, KEY_POS_INF, block_key(words)), -1)
        keys = []
        for j in range(4):
            mask = Uint32(cutlass.select_(2 * j + 1 < valid, Uint32(0xFFFFFFFF),
                                          cutlass.select_(2 * j < valid, Uint32(0xFFFF), Uint32(0))))
            keys.append(key_word(words[j]) & mask)
        pair = max_u16x2(max_u16x2(keys[0], keys[1]), max_u16x2(keys[2], keys[3]))
        top = cutlass.max(Int32(pair & Uint32(0xFFFF)), Int32(pair >> 16))
        return _pick(valid > 0, top, -1)

    def elements(self, words, g, length, nv):
        """(key, valid, index) of each element of vector g's words."""
        if const_expr(self.block_mode):
            return [(_pick(g == nv - 1, KEY_POS_INF, block_key(words)), Int32(1), g)]
        valid = length - g * 8
        keys = [key_word(w) for w in words]
        return [(word_key(keys, e), _pick(e < valid, 1, 0), g * 8 + e) for e in range(8)]

    def vector_words(self, sm, i):
        """The four words of the chunk's vector i in shared memory."""
        return shared_load_u32x4(sm["stage"] + i * 16)

    # -- short rows --------------------------------------------------------------------
    @cute.jit
    def short(self, sm, tid, rank, tops, start, count, length, n, out_row):
        """n <= k: out[j] = j (-1 for a -inf block) for the chunk's elements; the cluster
        writes the padding j in [n, k) with -1."""
        for s in cutlass.range_constexpr(self.vectors):
            i = s * self.threads + tid
            g = start + i
            exists = _pick(i < count, 1, 0)
            if const_expr(self.block_mode):
                store_s32(out_row + Int64(g) * 4, _pick(tops[s] == KEY_NEG_INF, -1, g), exists)
            else:
                valid = length - g * 8
                for e in cutlass.range_constexpr(8):
                    store_s32(out_row + Int64(g * 8 + e) * 4, g * 8 + e, exists & _pick(e < valid, 1, 0))
        stride = self.cluster * self.threads
        for j in cutlass.range(n + rank * self.threads + tid, self.k, stride):
            store_s32(out_row + Int64(j) * 4, Int32(-1), Int32(1))

    # -- sampling ----------------------------------------------------------------------
    @cute.jit
    def push_samples(self, sm, tid, rank, start, count, length):
        """Sample j of this CTA is the logit at chunk offset ((2j + 1) m) // (2 S) of its m
        valid logits; its key goes to slot rank * S + j of every CTA's samples."""
        per = self.samples_per_cta
        if tid < per:
            m = cutlass.min((start + count) * 8, length) - start * 8
            p = ((2 * tid + 1) * m) // (2 * per)
            key = order_key(shared_load_u16(sm["stage"] + (p >> 3) * 16 + (p & 7) * 2))
            slot = sm["samples"] + (rank * per + tid) * 2
            for c in cutlass.range_constexpr(self.cluster):
                cluster_store_u16(peer_address(slot, Int32(c)), key, Int32(1))

    # -- CTA-wide building blocks ------------------------------------------------------
    @cute.jit
    def scan2(self, sm, tid, a, b):
        """Exclusive CTA prefix sums of a and b over the threads, and their totals:
        (prefix_a, prefix_b, total_a, total_b). Warp shuffles, then every thread adds the
        warp sums below its own; the closing barrier frees the scratch for the next scan."""
        lane = tid & 31
        warp = tid >> 5
        ia = a
        ib = b
        for i in cutlass.range_constexpr(5):
            oa = shfl_up(ia, 1 << i)
            ob = shfl_up(ib, 1 << i)
            ia = _pick(lane >= (1 << i), ia + oa, ia)
            ib = _pick(lane >= (1 << i), ib + ob, ib)
        if lane == 31:
            shared_store_u32(sm["scan"] + warp * 4, ia)
            shared_store_u32(sm["scan"] + (32 + warp) * 4, ib)
        cute.arch.sync_threads()
        pa = ia - a
        pb = ib - b
        ta = Int32(0)
        tb = Int32(0)
        for w in cutlass.range_constexpr(self.threads // 32):
            sa = shared_load_u32(sm["scan"] + w * 4)
            sb = shared_load_u32(sm["scan"] + (32 + w) * 4)
            pa = _pick(w < warp, pa + sa, pa)
            pb = _pick(w < warp, pb + sb, pb)
            ta = ta + sa
            tb = tb + sb
        cute.arch.sync_threads()
        return pa, pb, ta, tb

    @cute.jit
    def select(self, sm, tid, hist, q):
        """(bin, count above) of the q-th largest in a 256-bin histogram, for every thread."""
        if tid < 32:
            select_bin(hist, q, sm["misc"] + 4, tid)
        cute.arch.sync_threads()
        return shared_load_u32(sm["misc"] + 4), shared_load_u32(sm["misc"] + 8)

    @cute.jit
    def radix_select(self, sm, tid, keys, stride, count, gap_at, gap, q):
        """The q-th largest of count keys (shared Uint16 stride bytes apart; 1 <= q <= count;
        entries at or past gap_at sit gap slots further on) and the count of keys above it:
        two 8-bit passes over one histogram."""
        hist = sm["select"]
        lane = tid & 31
        if tid < 256:
            shared_store_u32(hist + tid * 4, Int32(0))
        cute.arch.sync_threads()
        high = Int32(-1)
        above_high = Int32(0)
        per_trip = SELECT_BATCH * self.threads
        for second in cutlass.range_constexpr(2):
            # Every warp runs the same trips (hist_add needs all 32 lanes): lanes past count
            # read the last key and count nothing. A trip loads SELECT_BATCH keys before it
            # counts any, so the loads overlap.
            for first in cutlass.range(0, count, per_trip):
                batch = []
                for b in cutlass.range_constexpr(SELECT_BATCH):
                    j = first + b * self.threads + tid
                    clamped = cutlass.min(j, count - 1)
                    address = keys + (clamped + _pick(clamped >= gap_at, gap, 0)) * stride
                    batch.append((shared_load_u16(address), _pick(j < count, 1, 0)))
                for key, valid in batch:
                    if const_expr(second == 0):
                        hist_add(hist, key >> 8, valid, lane, 1)
                    else:
                        hist_add(hist, key & 255, valid & _pick((key >> 8) == high, 1, 0), lane, 1)
            cute.arch.sync_threads()
            if const_expr(second == 0):
                high, above_high = self.select(sm, tid, hist, q)
                if tid < 256:
                    shared_store_u32(hist + tid * 4, Int32(0))
                cute.arch.sync_threads()
        low, above_low = self.select(sm, tid, hist, q - above_high)
        return (high << 8) | low, above_high + above_low

    # -- the direct path ---------------------------------------------------------------
    @cute.jit
    def count_vector(self, sm, tid, lane, tops, start, count, length, nv, high, second: cutlass.Constexpr):
        """Count the chunk's keys into the 8-copy histogram: the first pass by high byte,
        the second by low byte of the keys whose high byte is high."""
        for s in cutlass.range_constexpr(self.vectors):
            i = s * self.threads + tid
            # Skip slots whose warp holds no vector; the test is the warp's first lane's,
            # so whole warps skip (hist_add needs every lane of a warp).
            if s * self.threads + (tid - lane) < count:
                exists = _pick(i < count, 1, 0)
                if const_expr(self.block_mode):
                    elements = [(tops[s], exists)]
                else:
                    words = self.vector_words(sm, i)
                    elements = [(key, exists & ok) for key, ok, unused in
                                self.elements(words, start + i, length, nv)]
                for e in cutlass.range_constexpr(len(elements)):
                    key, ok = elements[e]
                    if const_expr(not second):
                        hist_add(sm["copies"], key >> 8, ok, lane, HIST_COPIES)
                    else:
                        hist_add(sm["copies"], key & 255, ok & _pick((key >> 8) == high, 1, 0), lane,
                                 HIST_COPIES)

    @cute.jit
    def push_histogram(self, sm, tid, target):
        """Sum the 8 copies of each bin (zeroing them for the next pass) and add the non-zero
        bins into target of every CTA."""
        if tid < 256:
            total = Int32(0)
            for c in cutlass.range_constexpr(HIST_COPIES):
                address = sm["copies"] + (tid * HIST_COPIES + c) * 4
                total = total + shared_load_u32(address)
                shared_store_u32(address, Int32(0))
            for p in cutlass.range_constexpr(self.cluster):
                cluster_red(peer_address(target + tid * 4, Int32(p)), total, _pick(total > 0, 1, 0))

    @cute.jit
    def direct(self, sm, tid, lane, rank, tops, start, count, length, nv, out_row, trace_row):
        """Direct path: the exact cutoff, then every CTA writes its keys above it and its
        share of the keys equal to it straight to the output. Returns (k-th key, above)."""
        kth, above = self.exact_cutoff(sm, tid, lane, tops, start, count, length, nv, trace_row, rank)
        self.gather(sm, tid, tops, kth, start, length, nv, self.k - above, above, out_row, False, trace_row, rank)
        return kth, above

    @cute.jit
    def exact_cutoff(self, sm, tid, lane, tops, start, count, length, nv, trace_row, rank):
        """The row's exact k-th largest key and how many keys exceed it, from two
        cluster-wide 8-bit radix histograms."""
        self.count_vector(sm, tid, lane, tops, start, count, length, nv, Int32(-1), False)
        cute.arch.sync_threads()
        self.push_histogram(sm, tid, sm["hist1"])
        cluster_sync()  # histogram contributions complete before they are read
        high, above_high = self.select(sm, tid, sm["hist1"], Int32(self.k))
        self.stamp(trace_row, rank, tid, "pass1")
        self.count_vector(sm, tid, lane, tops, start, count, length, nv, high, True)
        cute.arch.sync_threads()
        self.push_histogram(sm, tid, sm["hist2"])
        cluster_sync()
        low, above_low = self.select(sm, tid, sm["hist2"], self.k - above_high)
        self.stamp(trace_row, rank, tid, "pass2")
        return (high << 8) | low, above_high + above_low

    # -- filtering (both paths) --------------------------------------------------------
    @cute.jit
    def queue_vectors(self, sm, tid, tops, cutoff):
        """Queue this CTA's vectors that can hold a key >= cutoff (by top); returns the
        queue's length. A scan, not atomics, gives each thread its queue slots."""
        mine = Int32(0)
        for s in cutlass.range_constexpr(self.vectors):
            mine = mine + _pick(tops[s] >= cutoff, 1, 0)
        first, unused_b, queued, unused_tb = self.scan2(sm, tid, mine, Int32(0))
        slot = first
        for s in cutlass.range_constexpr(self.vectors):
            hit = _pick(tops[s] >= cutoff, 1, 0)
            shared_store_u16(sm["queue"] + slot * 2, s * self.threads + tid, hit)
            slot = slot + hit
        cute.arch.sync_threads()
        return queued

    @cute.jit
    def count_queued(self, sm, tid, queued, cutoff, start, length, nv):
        """This thread's keys above and equal to cutoff in its share of the queue (entries
        tid, tid + threads, ...)."""
        gt = Int32(0)
        eq = Int32(0)
        for entry in cutlass.range(tid, queued, self.threads):
            i = shared_load_u16(sm["queue"] + entry * 2)
            for key, ok, unused in self.elements(self.vector_words(sm, i), start + i, length, nv):
                gt = gt + (ok & _pick(key > cutoff, 1, 0))
                eq = eq + (ok & _pick(key == cutoff, 1, 0))
        return gt, eq

    @cute.jit
    def reserve(self, sm, tid, pair, gt_total, eq_total):
        """One cluster atomic on CTA 0's pair reserves this CTA's gt and eq ranges; returns
        their bases for every thread."""
        if tid == 0:
            old = cluster_add_u64(peer_address(pair, Int32(0)), (Uint64(eq_total) << 32) | Uint64(gt_total))
            shared_store_u32(sm["misc"] + 12, Int32(old & Uint64(0xFFFFFFFF)))
            shared_store_u32(sm["misc"] + 16, Int32(old >> 32))
        cute.arch.sync_threads()
        return shared_load_u32(sm["misc"] + 12), shared_load_u32(sm["misc"] + 16)

    @cute.jit
    def gather(self, sm, tid, tops, cutoff, start, length, nv, need, above, out_row, sampled: cutlass.Constexpr,
               trace_row, rank):
        """Filter with cutoff and place the selected keys. Sampled path: push this CTA's
        keys above cutoff and up to k keys equal to it to CTA 0's survivors. Direct path:
        write keys above cutoff to out[0:above] and the first need keys equal to it (over
        the cluster) to out[above:k]."""
        queued = self.queue_vectors(sm, tid, tops, cutoff)
        self.stamp(trace_row, rank, tid, "queued")
        gt, eq = self.count_queued(sm, tid, queued, cutoff, start, length, nv)
        prefix_gt, prefix_eq, gt_total, eq_total = self.scan2(sm, tid, gt, eq)
        self.stamp(trace_row, rank, tid, "counted")
        if const_expr(sampled):
            eq_total = cutlass.min(eq_total, Int32(self.k))
            base_gt, base_eq = self.reserve(sm, tid, sm["pairs"], gt_total, eq_total)
        else:
            base_gt, base_eq = self.reserve(sm, tid, sm["pairs"] + 8, gt_total, eq_total)
        self.stamp(trace_row, rank, tid, "reserved")
        rank_gt = base_gt + prefix_gt
        rank_eq = prefix_eq
        survivors = peer_address(sm["survivors"], Int32(0))
        # Sampled path: the cluster keeps its first k eq survivors (slot offsets below k), and
        # a CTA writes only if what it keeps fits (SPEC.md 2.4): its gt range and the eq
        # offsets up to min(base_eq + eq_total, k). Then no two writes ever share a slot; a
        # CTA that does not fit belongs to an overflowing row, whose survivors nobody reads.
        fits = _pick(base_gt + gt_total + cutlass.min(base_eq + eq_total, Int32(self.k)) <= SURVIVOR_CAPACITY,
                     1, 0)
        for entry in cutlass.range(tid, queued, self.threads):
            i = shared_load_u16(sm["queue"] + entry * 2)
            for key, ok, index in self.elements(self.vector_words(sm, i), start + i, length, nv):
                is_gt = ok & _pick(key > cutoff, 1, 0)
                is_eq = ok & _pick(key == cutoff, 1, 0)
                slot_eq = base_eq + rank_eq
                if const_expr(sampled):
                    keep_gt = is_gt & fits
                    keep_eq = is_eq & fits & _pick(slot_eq < self.k, 1, 0)
                    slot = _pick(is_gt, rank_gt, SURVIVOR_CAPACITY - 1 - slot_eq)
                    # a guard, not a case: with fits every kept slot is in [0, 8192)
                    slot = cutlass.min(cutlass.max(slot, Int32(0)), Int32(SURVIVOR_CAPACITY - 1))
                    cluster_store_u32x2(survivors + slot * 8, index, key, keep_gt | keep_eq)
                else:
                    value = index
                    if const_expr(self.block_mode):
                        value = _pick(key == KEY_NEG_INF, -1, index)
                    store_s32(out_row + Int64(rank_gt) * 4, value, is_gt)
                    keep_eq = is_eq & _pick(slot_eq < need, 1, 0)
                    store_s32(out_row + Int64(above + slot_eq) * 4, value, keep_eq)
                rank_gt = rank_gt + is_gt
                rank_eq = rank_eq + is_eq
        if const_expr(self.profile):
            cute.arch.sync_threads()  # "placed" means the whole CTA has placed its keys
        self.stamp(trace_row, rank, tid, "placed")

    @cute.jit
    def emit(self, sm, tid, gt, eq, kth, above, out_row):
        """CTA 0, sampled path: write the row's k indices from the gathered survivors
        (slots [0, gt) and [capacity - eq, capacity)): keys above kth to out[0:above], the
        first k - above keys equal to it after them."""
        count = gt + eq
        gap = SURVIVOR_CAPACITY - count
        mine_gt = Int32(0)
        mine_eq = Int32(0)
        for j in cutlass.range(tid, count, self.threads):
            key = shared_load_u32(sm["survivors"] + (j + _pick(j >= gt, gap, 0)) * 8 + 4)
            mine_gt = mine_gt + _pick(key > kth, 1, 0)
            mine_eq = mine_eq + _pick(key == kth, 1, 0)
        rank_gt, rank_eq, unused_a, unused_b = self.scan2(sm, tid, mine_gt, mine_eq)
        for j in cutlass.range(tid, count, self.threads):
            slot = j + _pick(j >= gt, gap, 0)
            key = shared_load_u32(sm["survivors"] + slot * 8 + 4)
            index = shared_load_u32(sm["survivors"] + slot * 8)
            is_gt = _pick(key > kth, 1, 0)
            is_eq = _pick(key == kth, 1, 0)
            store_s32(out_row + Int64(rank_gt) * 4, index, is_gt)
            store_s32(out_row + Int64(above + rank_eq) * 4, index, is_eq & _pick(rank_eq < self.k - above, 1, 0))
            rank_gt = rank_gt + is_gt
            rank_eq = rank_eq + is_eq


# ---------------------------------------------------------------------------------------
# Cached compile.
# ---------------------------------------------------------------------------------------
def fake_arguments(k: int, trace_width: int = len(TRACE_FIELDS)):
    """The fake (logits, lengths, out, trace, stream) every variant is compiled with: rows
    and width dynamic, the row stride a dynamic multiple of 8 elements (16-byte rows)."""
    make = cute.runtime.make_fake_tensor
    logits = make(cutlass.BFloat16, (cute.sym_int32(), cute.sym_int32()),
                  (cute.sym_int64(divisibility=8), 1), assumed_align=16)
    lengths = make(Int32, (cute.sym_int32(),), (1,), assumed_align=4)
    out = make(Int32, (cute.sym_int32(), k), (k, 1), assumed_align=16)
    trace = make(Int32, (cute.sym_int32(), trace_width), (trace_width, 1), assumed_align=16)
    return logits, lengths, out, trace, cute.runtime.make_fake_stream()


_compiled = {}
_compile_lock = threading.Lock()


def compile_decode_topk(k, cluster, vector_count, block_mode, trace=False, arch=None, options=None):
    """Compile one variant (cached: cute.compile itself never caches). arch, e.g.
    "sm_100a", compiles for that target instead of the current device (the DSL reads
    CUTE_DSL_ARCH once per process, so the target travels as --gpu-arch); options: more
    compiler options, e.g. "remarks{ptx}" for the ptxas resource report."""
    key = (k, cluster, vector_count, bool(block_mode), bool(trace), arch, options)
    with _compile_lock:
        if key not in _compiled:
            topk = DecodeTopK(k, cluster, vector_count, block_mode, trace)
            flags = " ".join(flag for flag in (None if arch is None else f"--gpu-arch {arch}", options) if flag)
            extra = {"options": flags} if flags else {}
            _compiled[key] = cute.compile(topk, *fake_arguments(k), **extra)
        return _compiled[key]


def _require_cuda(what):
    """RuntimeError in one line unless torch sees a CUDA device (before any compile)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} needs a CUDA GPU, and torch sees none (torch {torch.__version__}, "
                           f"CUDA build {torch.version.cuda or 'none'})")


@functools.lru_cache(maxsize=None)
def _resident(device: int, k: int, cluster: int, vectors: int, block_mode: bool) -> int:
    import cuda.bindings.runtime as cudart

    # The driver calls below need a current context: make the device's primary one current.
    (err,) = cudart.cudaSetDevice(device)
    _cuda_check(err, "cudaSetDevice")
    (err,) = cudart.cudaFree(0)
    _cuda_check(err, "cudaFree(0)")
    topk = DecodeTopK(k, cluster, vectors, block_mode)
    compiled = compile_decode_topk(k, cluster, vectors, block_mode)
    name = next(iter(compiled.kernel_info))
    err, kernel = cudart.cudaLibraryGetKernel(compiled.library, name.encode())
    _cuda_check(err, "cudaLibraryGetKernel")
    err, function = cuda.cuKernelGetFunction(cuda.CUkernel(int(kernel)))
    _cuda_check(err, "cuKernelGetFunction")
    for attribute, value in ((cuda.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                             (cuda.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              topk.smem_bytes)):
        (err,) = cuda.cuFuncSetAttribute(function, attribute, value)
        _cuda_check(err, "cuFuncSetAttribute")
    config = cuda.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = cluster, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = topk.threads, 1, 1
    config.sharedMemBytes = topk.smem_bytes
    attribute = cuda.CUlaunchAttribute()
    attribute.id = cuda.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster, 1, 1
    config.attrs = [attribute]
    config.numAttrs = 1
    err, clusters = cuda.cuOccupancyMaxActiveClusters(function, config)
    _cuda_check(err, "cuOccupancyMaxActiveClusters")
    return int(clusters)


def _cuda_check(err, what):
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")


def resident_clusters(cluster: int, vectors: int, k: int = 2048, block_mode: bool = False) -> int:
    """Clusters of this build the current device keeps resident at once: the driver's
    cuOccupancyMaxActiveClusters on the compiled kernel (its registers and shared memory,
    the device's GPC geometry), cached per device and variant."""
    import torch

    return _resident(torch.cuda.current_device(), k, cluster, vectors, bool(block_mode))


class JitLauncher:
    """The DSL's launcher for `launch` (the host front end): compiles each variant once
    (cached) and launches it through cute."""

    def resident(self, variant, device=None):
        import torch

        index = device.index if getattr(device, "index", None) is not None else torch.cuda.current_device()
        build = variant.build
        # The trace build's occupancy is the plain build's: the trace adds no shared memory.
        return _resident(index, variant.k, build.cluster, build.vectors, bool(variant.block_mode))

    def enqueue(self, variant, logits, lengths, out, trace, row_stride, next_n):
        rows, width = logits.shape
        if logits.stride() != (row_stride, 1):  # one row or width <= 1: strides torch never uses
            logits = logits.as_strided((rows, width), (row_stride, 1))
        build = variant.build
        compiled = compile_decode_topk(variant.k, build.cluster, build.vectors, variant.block_mode, variant.trace)
        # The plain build never touches its trace argument, but every variant has one: a view
        # of out's memory in the trace's shape ([rows, 8] <= [rows, k] words), so a launch
        # allocates nothing (CUDA graphs, the custom op).
        if trace is None:
            trace = out.as_strided((rows, len(TRACE_FIELDS)), (len(TRACE_FIELDS), 1))
        compiled(*cute_arguments(logits, lengths, out, trace))


JIT = JitLauncher()


def resident_for(k, block_mode=False):
    """resident(build) of the launch policy on the current device (the DSL's occupancy)."""
    return lambda build: JIT.resident(Variant(k, build, bool(block_mode)))


def supports_decode_topk(logits, k: int, block_mode: bool = False) -> bool:
    """Whether decode_topk takes these BF16 logits with this k: a CUDA tensor, unit inner
    stride, 16-byte aligned rows, a width some build holds, rows within the 16-CTA
    build's two waves (check_logits, which raises the ValueError decode_topk would)."""
    try:
        check_logits(logits, k, resident_for(k, block_mode))
    except ValueError:
        return False
    return True


def cute_arguments(logits, lengths, out, trace, stream=None):
    """The compiled kernel's arguments (logits, lengths, out, trace, stream) for checked
    torch tensors, on stream (default: the current one). The layouts the kernel reads
    travel as dynamic: the row stride, and the lengths' extent (next_n = rows / that
    extent); an argument of static layout would leave them unset (the kernel then read
    lengths out of bounds; tests/test_launch_arguments.py)."""
    from cutlass.cute.runtime import from_dlpack

    if stream is None:
        import torch

        stream = cuda.CUstream(torch.cuda.current_stream(logits.device).cuda_stream)
    return (from_dlpack(logits, assumed_align=16).mark_layout_dynamic(leading_dim=1),
            from_dlpack(lengths, assumed_align=4).mark_layout_dynamic(), from_dlpack(out, assumed_align=16),
            from_dlpack(trace, assumed_align=16), stream)


def decode_topk(logits, lengths, k: int, out=None, block_mode: bool = False, trace=None, build=None,
                check_lengths: bool = False):
    """Launch DecodeTopK on the current stream: out[r] = the indices of the k largest
    elements of logits[r, :lengths[r]] (SPEC.md). logits: CUDA bfloat16 [rows, width]
    (16-byte aligned rows, unit inner stride; a row view of a wider buffer is fine);
    lengths: int32 [rows], clamped to [0, width] by the kernel; out: int32 [rows, k]
    (allocated if None); trace: int32 [rows, 8] to get the per-row trace; build: a Build,
    'CxTxV' or (cluster, vectors) to override the launch policy; check_lengths: first
    raise a ValueError naming the first length outside [0, width] (synchronizes).
    Returns out. Once precompile has run, a call compiles nothing and allocates nothing
    (given out)."""
    return launch(JIT, logits, lengths, k, out, block_mode, trace, build, 1, check_lengths)


def decode_topk_seq_lens(logits, seq_lens, next_n: int, k: int, out=None, block_mode: bool = False,
                         check_lengths: bool = False):
    """decode_topk with the engine's call convention: rows of next_n speculative tokens a
    request. Row r belongs to request r // next_n and has length
    clamp(seq_lens[r // next_n] - next_n + 1 + r % next_n, 0, width): a request of seq_len
    tokens, of which its last next_n are being decoded, and row r may look at every token
    up to its own. A negative value clamps to 0 (an empty row: out[r] is all -1).
    seq_lens: int32 [rows // next_n] on the logits' device (computed in the kernel: no
    extra launch); check_lengths: raise a ValueError naming the first seq_len outside
    [0, width] (synchronizes)."""
    return launch(JIT, logits, seq_lens, k, out, block_mode, None, None, next_n, check_lengths)


def precompile(max_width: int, k_values=KS, block_modes=(False, True), trace: bool = False, arch=None,
               progress=False):
    """Compile the DecodeTopK variants decode_topk launches on rows of up to max_width
    logits and (arch None: for this device, which must be a CUDA GPU) ask each one's
    occupancy, so the first decode call compiles nothing and queries nothing (about 2 s a
    variant; 24 at max_width 1048576). progress: print a line a variant to stderr.
    Returns the Variants compiled."""
    builds = precompile_builds(max_width)
    if arch is None:
        _require_cuda("precompile() for this device (pass arch='sm_90a' or 'sm_100a' to compile without one)")
    done = []
    for k in k_values:
        for build in builds:
            for block_mode in block_modes:
                variant = Variant(k, build, bool(block_mode), bool(trace))
                if progress:
                    import sys

                    print(f"precompile: {variant.name} ({len(done) + 1} of "
                          f"{len(k_values) * len(builds) * len(block_modes)})", file=sys.stderr, flush=True)
                compile_decode_topk(k, build.cluster, build.vectors, block_mode, trace, arch)
                if arch is None and not trace:  # the policy's occupancy query, cached too
                    resident_clusters(build.cluster, build.vectors, k, block_mode)
                done.append(variant)
    return done
