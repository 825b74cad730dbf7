"""Decode top-k of the dense indexers straight from their BF16 logits, in CuTe DSL.

The problem. In a decode step each dense indexer layer scores every compressed token of a
row (SM100's paged MQA logits are BF16) and keeps the k largest: the token top-512, and in
the candidate source also the top-2048 of the rows' 8-token block maxima. cooperative_topk
reads FP32, so the logits used to be upcast first, and it builds a radix histogram of
every value with shared-memory atomics. Real indexer logits crowd a few histogram bins (a
row of 150K logits holds about 200 distinct BF16 values), where those atomics serialize.

What this module computes. DecodeTopK writes, for each row, the indices of its k largest
elements, exactly and canonically (SPEC.md 1.4): every index whose value exceeds the k-th
largest, then the lowest indices of those equal to it, in ascending index order; or
0 .. n-1 and -1 padding when the row has at most k elements. An element is one BF16 logit
(token mode), or the NaN-propagating maximum of an aligned group of 8 logits (block mode,
the candidate blocks), with the row's newest block pinned at +inf and blocks scoring -inf
written as -1. Values are compared through an order-preserving 16-bit key of their BF16
bits, so ties are exact, and the answer is a pure function of the row: not of the batch,
the build or the run.

How. One thread block cluster of C CTAs per row (C = 1: one CTA, no cluster), the build
(C CTAs of T threads staging V 16-byte vectors a thread, spelled CxTxV) chosen from the
rows, the width and the mode by the launch policy (policy.build_for, SPEC.md 2.1) so that
the batch runs in one wave wherever the GPU can hold it. A staged build (1, 2, 4 of 1024
threads, 8 or 16 CTAs) has each CTA copy one contiguous chunk of the row into shared
memory, as 16-byte vectors of 8 logits (block mode: one 2-byte key a block, 8 to a 16-byte
key vector, so a stage holds 8 times the blocks); the chunks split the row's valid length,
not its width. A thread stages 8 or 16 vectors and keeps their tops (largest keys) in
registers. Many long token rows instead stream (SPEC.md 2.12) on the streamed builds of
1, 2, 3, 4 or 8 CTAs of 512 threads: each CTA reads its chunk from global memory once and
keeps in shared memory only the vectors that can hold a selected key. Rows run in waves
where they outnumber the build's resident clusters.

Every CTA selects over its own chunk, with no CTA funnelling the row (SPEC.md 2.5): it
queues the vectors that can hold a key >= lo, histograms their keys' high bytes, and adds
its histogram into every CTA's cluster total and into the prefix of every CTA after it
(DSMEM reductions); after a cluster barrier every CTA reads the same total, so the same
high byte of the k-th largest key; a second pass does the low byte. Then every CTA writes
its own selected keys: a key's slot is the count of selected keys at lower indices, from
the prefix over the CTAs before it and a scan over its own queue in index order. No atomic
decides which equal key is kept or where an index goes. Two values of lo:

Sampled (token rows longer than D = direct_max_length(C): 32,768 logits at 1 and 2 CTAs,
65,536 at 4 and 8, 131,072 at 16; the streamed builds' stage)::

    the row's 2048 samples, each CTA's from its own stage (at 16 CTAs: read from
    global memory while its chunk is copied into its stage asynchronously, the cutoff
    selected while the chunk lands), exchanged after the first cluster barrier (the
    streamed builds: all 2048 read from global memory by every CTA)
        ──► the same cutoff in every CTA (the q-th largest sample, q aiming at
            k + 2560 keys at or above it, at most Q_DEVIATIONS deviations above the
            samples expected above the k-th largest key, and at least Q_MIN[k])
        └► the selection among the keys >= cutoff: one pass of key - cutoff (K lies a
           few key steps above the cutoff; one cluster barrier)
        └► fewer than k of them (underflow), or on the staged builds K at 255 or more
           steps above the cutoff (the one pass's overflow): the direct path; on the
           streamed builds that overflow takes the two passes over the queues

Direct (block mode, short token rows, and a sampled row that fell back): the selection
among every key (lo = 0); in token mode first one 512-bin pass from the row's largest key
M, which places K wherever it lies less than 511 key steps below M (one cluster barrier),
else the two passes.

Whole-chunk histograms spread each warp's atomics over 4 copies (lane l counts into copy
l mod 4), since a crowded bin serializes the atomics on its word; the radix select over
the 2048 samples counts into one histogram.

Synchronization. The first cluster barrier is split: a thread arrives once it has zeroed
its share of the counters (in token mode: once its warp has stored its largest key, which
the peers read, and on a staged build's sampled row once it has stored its own samples,
which the peers gather) and waits after staging (a sampled row staged asynchronously:
right after its copies are issued), before any DSMEM access, so no CTA reduces into a peer
that has not zeroed. Each histogram exchange ends with a cluster barrier before any total
is read. There is no closing barrier: after its last barrier no CTA touches a peer's
shared memory. The kernel waits on its predecessor grid before reading inputs and lets
its dependents launch once its chunk is in shared memory (programmatic dependent launch).

Token rows of at most 8,192 logits, at any row count, take
the register build instead (DecodeTopKRegister, SPEC.md 2.13): one CTA of 512 threads a
row, two vectors a thread kept in registers, one pass of a window from the row's largest
key (else a pass of key >> 4 into 4096 bins and one of the low 4 bits of K's bin's keys),
then the same index-ordered ranked write; four CTA barriers (seven).

SPEC.md (part 2) fixes every constant of the algorithm; reference/model.py simulates it
CTA by CTA, and the trace variant of this kernel (trace=True) reports per row what the
model reports, field by field.
"""

import functools
import threading

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

# vendor: policy
# The constants, builds, launch policy, input checks and host front end live DSL-free in
# policy.py, so the model, the suite and the AOT loader share them; `python -m
# decode_topk.kernel.vendor` writes this module as one file with policy.py's body in place
# of this comment and the import below.
from .policy import (
    BUILDS,
    EXCHANGE_SPLIT_CLUSTER,
    KEY_BLOCKS,
    KEY_NEG_INF,
    KEY_POS_INF,
    KS,
    LOGITS_PER_VECTOR,
    MAX_WIDTH,
    NARROW_SPAN,
    PROFILE_STAMPS,
    Q_DEVIATIONS,
    REG_BINS,
    REG_FINE_MASK,
    REG_FINE_SHIFT,
    REGISTER,
    Q_MIN,
    SAMPLED_ASYNC_CLUSTER,
    SAMPLED_ASYNC_MIN_LENGTH,
    SAMPLED_ASYNC_ROWS,
    SAMPLED_FIRST_SLOTS,
    SAMPLED_WRITE_QUEUE_CLUSTER,
    SAMPLE_BANK_LOGITS,
    SAMPLES,
    sample_chunks,
    STAGE_PREFETCH,
    STREAM_DEPTH,
    STREAM_PREFETCH,
    STREAM_QUEUE,
    STREAM_TILE,
    SURVIVOR_AIM,
    TOP_SPAN,
    TRACE_FIELDS,
    WAVES_16,
    WRITE_QUEUE_VECTORS,
    Build,
    Variant,
    build_for,
    check_inputs,
    check_lengths,
    check_logits,
    check_width,
    cluster_for,
    direct_max_length,
    launch,
    launch_slices,
    max_rows,
    maxima_reads,
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
    "DecodeTopK", "DecodeTopKRegister", "compile_decode_topk", "cute_arguments", "decode_topk", "decode_topk_seq_lens",
    "fake_arguments", "precompile", "resident_clusters", "resident_for", "supports_decode_topk",
]

SELECT_BATCH = 4  # radix selects: keys a thread loads before it counts any
SELECT_HIGH, SELECT_LOW, SELECT_WINDOW = 0, 1, 2  # count_keys' bins (2.6)
HIST_COPIES = 4  # the selection's histograms: lane l counts into copy l mod 4
BINS = 256  # a pass's bins; the direct path's window from the top has TOP_BINS
TOP_BINS = TOP_SPAN + 1
# What a histogram pass counts (count_vector): the high byte of each key >= lo; the low byte
# of each key >= lo whose high byte is `high`; key - lo, at most NARROW_SPAN (the sampled
# attempt's one pass, 2.5); window_bin(lo, key, TOP_SPAN), lo the row's largest key (the
# direct path's window from the top, token mode, 2.5), into TOP_BINS bins.
PASS_HIGH, PASS_LOW, PASS_NARROW, PASS_TOP = 0, 1, 2, 3
# Histogram exchanges a row can need, in 256-bin buffers (2048 bytes: a total and a prefix):
# 2 (sampled or direct), 3 (a fallback, then direct; a streamed row whose one pass cannot
# place K, then the two passes over its queues), 5 in token mode (a fallback, then the
# direct path's window from the top, two buffers wide, and its two passes).
EXCHANGES = 3
# Words of the "misc" region (byte offsets): the trace's cluster-wide gt and eq counters
# (CTA 0's), the trash word the histograms' uncounted keys add into (read by nothing), a
# streamed row's count of keys == cutoff in the vectors its queues left out and of the
# CTAs whose queue overflowed (2.12), and the four words (16 bytes, one store) by which
# warp 0 hands a selection's results to the CTA (DecodeTopK.select, SPEC.md 2.10).
MISC_TRACE, MISC_TRASH, MISC_DROPPED, MISC_OVERFLOW, MISC_RESULT = 0, 8, 12, 16, 32
MISC_BYTES = 48


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
def load_u32x4(address: Int64, valid: Int32, fill: int = 0, *, loc=None, ip=None):
    """Four 32-bit words at a 16-byte aligned global address: one 16-byte load when all 8
    lanes are valid; else only lanes < valid, one 16-bit load each, `fill` (BF16 bits)
    elsewhere, so a row's last partial vector never reads at or past the row's length
    (valid 0: nothing)."""
    text = ("{\n.reg .pred pf, pp, p;\n.reg .b16 h<8>;\n"
            "mov.b32 $0, 0;\nmov.b32 $1, 0;\nmov.b32 $2, 0;\nmov.b32 $3, 0;\n"
            "setp.eq.s32 pf, $5, 8;\nsetp.lt.s32 pp, $5, 8;\n"
            "@pf ld.global.nc.v4.u32 {$0, $1, $2, $3}, [$4];\n"
            + "".join(f"mov.b16 h{e}, {int(fill)};\n" for e in range(8))
            + "setp.gt.and.s32 p, $5, 0, pp;\n@p ld.global.nc.u16 h0, [$4];\n"
            + _partial_lanes()
            + "\n@pp mov.b32 $0, {h0, h1};\n@pp mov.b32 $1, {h2, h3};\n"
            "@pp mov.b32 $2, {h4, h5};\n@pp mov.b32 $3, {h6, h7};\n}")
    return _words(_asm(_u32x4(), [Int64(address), Int32(valid)], text,
                       "=r,=r,=r,=r,l,r,~{memory}", loc, ip), loc, ip)


@dsl_user_op
def load_full_u32x4(address: Int64, predicate: Int32, *, loc=None, ip=None):
    """Four 32-bit words at a 16-byte aligned global address if predicate != 0, else
    zeros: one 16-byte load, for vectors known to be whole."""
    text = ("{\n.reg .pred p;\nmov.b32 $0, 0;\nmov.b32 $1, 0;\nmov.b32 $2, 0;\nmov.b32 $3, 0;\n"
            "setp.ne.s32 p, $5, 0;\n@p ld.global.nc.v4.u32 {$0, $1, $2, $3}, [$4];\n}")
    return _words(_asm(_u32x4(), [Int64(address), Int32(predicate)], text,
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
def shared_store_u32x2(address: Int32, a: Int32, b: Int32, *, loc=None, ip=None):
    """Store two 32-bit words at an 8-byte aligned shared address of this CTA."""
    _asm(None, [Int32(address), Int32(a), Int32(b)], "st.shared.v2.u32 [$0], {$1, $2};", "r,r,r,~{memory}",
         loc, ip)


@dsl_user_op
def shared_load_u32x2(address: Int32, *, loc=None, ip=None):
    """Two 32-bit words at an 8-byte aligned shared address of this CTA."""
    result = _asm(llvm.StructType.get_literal([T.i32(), T.i32()]), [Int32(address)],
                  "ld.shared.v2.u32 {$0, $1}, [$2];", "=r,=r,r,~{memory}", loc, ip)
    return tuple(Int32(llvm.extractvalue(T.i32(), result, [i], loc=loc, ip=ip)) for i in range(2))


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
def shared_add(address: Int32, value: Int32, *, loc=None, ip=None):
    """Atomic add to a shared word of this CTA, unpredicated (no return value)."""
    _asm(None, [Int32(address), Int32(value)], "red.shared.add.u32 [$0], $1;", "r,r,~{memory}", loc, ip)


@dsl_user_op
def prefetch_l2(address: Int64, bytes_: Int32, predicate: Int32, *, loc=None, ip=None):
    """If predicate != 0: ask the bulk copy engine to bring `bytes_` bytes (a multiple of 16,
    the address 16-byte aligned) of global memory into L2; nothing waits for it."""
    _asm(None, [Int64(address), Int32(bytes_), Int32(predicate)],
         "{\n.reg .pred p;\nsetp.ne.s32 p, $2, 0;\n@p cp.async.bulk.prefetch.L2.global [$0], $1;\n}",
         "l,r,r,~{memory}", loc, ip)


@dsl_user_op
def copy_async_u32x4(shared: Int32, address: Int64, bytes_: Int32, *, loc=None, ip=None):
    """If bytes_ > 0: the 16 bytes at a 16-byte aligned shared address of this CTA become
    the first `bytes_` (1 to 16) bytes at a 16-byte aligned global address, zeros past them,
    copied without registers (cp.async.cg, through L2); nothing past `bytes_` is read. Then
    the thread's copies so far close a group (commit_group, also where bytes_ is 0). The
    copy is visible to the thread after a copy_async_wait that covers its group, to the
    CTA after a barrier that follows that wait."""
    _asm(None, [Int32(shared), Int64(address), Int32(bytes_)],
         "{\n.reg .pred p;\nsetp.gt.s32 p, $2, 0;\n@p cp.async.cg.shared.global [$0], [$1], 16, $2;\n"
         "cp.async.commit_group;\n}",
         "r,l,r,~{memory}", loc, ip)


@dsl_user_op
def copy_async_wait(pending: int, *, loc=None, ip=None):
    """Wait until at most `pending` (a constant) of this thread's latest copy groups have not
    landed: every older group has."""
    _asm(None, [], f"cp.async.wait_group {int(pending)};", "~{memory}", loc, ip)


@dsl_user_op
def peer_address(address: Int32, rank: Int32, *, loc=None, ip=None) -> Int32:
    """The cluster address of this CTA's shared address in CTA rank."""
    return Int32(_asm(T.i32(), [Int32(address), Int32(rank)], "mapa.shared::cluster.u32 $0, $1, $2;",
                      "=r,r,r", loc, ip))


@dsl_user_op
def cluster_load_u32(address: Int32, *, loc=None, ip=None) -> Int32:
    """A 32-bit word at a cluster shared address (mapa: this CTA's or a peer's)."""
    return Int32(_asm(T.i32(), [Int32(address)], "ld.shared::cluster.u32 $0, [$1];", "=r,r,~{memory}", loc, ip))


@dsl_user_op
def cluster_load_u32x4(address: Int32, *, loc=None, ip=None):
    """Four 32-bit words at a 16-byte aligned cluster shared address."""
    return _words(_asm(_u32x4(), [Int32(address)], "ld.shared::cluster.v4.u32 {$0, $1, $2, $3}, [$4];",
                       "=r,=r,=r,=r,r,~{memory}", loc, ip), loc, ip)


@dsl_user_op
def cluster_red(address: Int32, value: Int32, predicate: Int32, *, loc=None, ip=None):
    """Atomic add to a cluster shared word if predicate != 0 (no return value)."""
    _asm(None, [Int32(address), Int32(value), Int32(predicate)],
         "{\n.reg .pred p;\nsetp.ne.s32 p, $2, 0;\n"
         "@p red.relaxed.cluster.shared::cluster.add.u32 [$0], $1;\n}", "r,r,r,~{memory}", loc, ip)


@dsl_user_op
def load_u16(address: Int64, predicate: Int32, ordered: bool = False, *, loc=None, ip=None) -> Int32:
    """A 16-bit global half word, zero-extended, if predicate != 0, else 0: through the
    read-only path (`ld.global.nc`), or if ordered a plain `ld.global`, which ptxas keeps on
    its side of a warp barrier (it moved an `ld.global.nc`, memory it takes as constant,
    past one)."""
    load = "ld.global.u16" if ordered else "ld.global.nc.u16"
    return Int32(_asm(T.i32(), [Int64(address), Int32(predicate)],
                      "{\n.reg .pred p;\n.reg .b16 t;\nmov.b16 t, 0;\nsetp.ne.s32 p, $2, 0;\n"
                      f"@p {load} t, [$1];\ncvt.u32.u16 $0, t;\n}}", "=r,l,r,~{memory}", loc, ip))


@dsl_user_op
def ballot(predicate: Int32, *, loc=None, ip=None) -> Int32:
    """The warp's lanes whose predicate != 0, one bit a lane (every lane must execute it)."""
    return Int32(_asm(T.i32(), [Int32(predicate)],
                      "{\n.reg .pred p;\nsetp.ne.s32 p, $1, 0;\nvote.sync.ballot.b32 $0, p, 0xffffffff;\n}",
                      "=r,r", loc, ip))


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
def popc(value: Int32, *, loc=None, ip=None) -> Int32:
    """Set bits of a word."""
    return Int32(llvm.inline_asm(T.i32(), [Int32(value).ir_value(loc=loc, ip=ip)], "popc.b32 $0, $1;", "=r,r",
                                 has_side_effects=False, is_align_stack=False,
                                 asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


def lowest_set_bit(bits):
    """(the lowest set bit of `bits`, its index): bits & -bits isolates it (two's
    complement), and popc(lowest - 1) counts the bits below it (lowest 0 and index 32 when
    no bit is set)."""
    lowest = bits & (0 - bits)
    return lowest, popc(lowest - 1)


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


def warp_inclusive_sum(value, lane):
    """The sum of value over lanes 0 .. lane (Hillis-Steele: five shuffles up, each lane
    adding the value 1, 2, 4, 8, 16 lanes below while there is one). A plain function, so
    its loop is Python's, unrolled as it is traced (range_constexpr is for @cute.jit bodies)."""
    inclusive = value
    for i in range(5):
        other = cute.arch.shuffle_sync_up(inclusive, 1 << i)
        inclusive = _pick(lane >= (1 << i), inclusive + other, inclusive)
    return inclusive


@cute.jit
def cluster_arrive_published(tid):
    """A cluster arrive after which the peers may read what every thread of this CTA wrote
    before it, with one release a CTA: the CTA's barrier orders every warp's writes before
    warp 0's arrive, whose release (cumulative) covers them; the other warps arrive relaxed.
    Why: a release arrive compiles to `MEMBAR.ALL.GPU` before `UCGABAR_ARV` (a relaxed one
    to `UCGABAR_ARV` alone): 16 warps' membars took B0's arrive ~1.1k cycles, one a CTA
    200-400 fewer (bench/NOTES.md sessions 54-55), and the other warps go on (SPEC 2.10)."""
    cute.arch.sync_threads()
    if tid < 32:
        cute.arch.cluster_arrive()
    else:
        cute.arch.cluster_arrive_relaxed()


@cute.jit
def cluster_sync(tid):
    """A full cluster barrier (one release a CTA, cluster_arrive_published; wait acquire)."""
    cluster_arrive_published(tid)
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


@dsl_user_op
def sign_halves(word: Uint32, *, loc=None, ip=None) -> Uint32:
    """0xFFFF in each 16-bit half of word whose sign bit is set, else 0. Why prmt: its
    selector 0x9 copies the top bit of byte 1 (bit 15, the low half's sign) over a whole
    byte and 0xB that of byte 3 (bit 31), so 0xBB99 is both halves' masks in one
    instruction (the shift, mask and multiply of order_key take three)."""
    return Uint32(llvm.inline_asm(T.i32(), [Uint32(word).ir_value(loc=loc, ip=ip)],
                                  "prmt.b32 $0, $1, 0, 0xBB99;", "=r,r", has_side_effects=False,
                                  is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


def key_word(word):
    """The keys of both BF16 values of a word, in place (order_key on each half at once):
    a clear sign bit's half ^ 0x8000, a set one's ^ 0xFFFF, i.e. word ^ (its sign masks |
    0x80008000), one lop3 after the prmt."""
    w = Uint32(word)
    return w ^ (sign_halves(w) | Uint32(0x80008000))


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


def hist_add(hist, bin_, valid):
    """Count each valid lane's bin_ into a one-copy histogram (the radix selects'): one add
    of 1 a valid lane, with no warp-uniform test, as the passes' adds (SPEC.md 2.8: ptxas's
    `ATOMS.POPC.INC` adds the lanes that meet at one word in one turn)."""
    shared_red(hist + bin_ * 4, Int32(1), valid)


def clamp(x, n):
    """x clamped to [0, n]: e.g. the valid lanes of a vector (n = 8) or keys of a warp."""
    return cutlass.max(cutlass.min(x, Int32(n)), Int32(0))


def ceil_sqrt(x):
    """The least s >= 0 with s * s >= x, for 0 <= x < 127 ** 2 (a sampled row's spread,
    Q_DEVIATIONS ** 2 m <= 25 * 256: 2.4): a binary search for the largest s with s * s <
    x, integers only, so the model's and the trace oracle's square roots agree with it
    exactly (no float rounding to argue about)."""
    s = Int32(0)
    for step in (64, 32, 16, 8, 4, 2, 1):
        s = _pick((s + step) * (s + step) < x, s + step, s)
    return _pick(x > 0, s + 1, 0)


def smem_layout(regions):
    """({name: byte offset}, total bytes) of (name, bytes) regions laid out in order (each
    size a multiple of 16 keeps the next region 16-byte aligned)."""
    offsets = {}
    offset = 0
    for name, size in regions:
        offsets[name] = offset
        offset += size
    return offsets, offset


@cute.jit
def row_length(logits, lengths, row):
    """Row `row`'s length: one length a request, next_n = rows / len(lengths) rows a request
    (speculative decode): row r is draft r % next_n of request r // next_n and sees seq_len -
    (next_n - 1 - r % next_n) tokens (decode_topk passes one length a row, next_n = 1). The
    seq_len is clamped at 0 first, so the subtraction cannot wrap; then the length to [0,
    width], so no read leaves the row. With one length a row the two divisions are skipped
    (a branch the whole grid takes alike): each is about 35 SASS instructions a thread,
    issued before the length's load can start."""
    next_n = Int32(1)
    request = row
    if lengths.shape[0] != logits.shape[0]:
        next_n = logits.shape[0] // lengths.shape[0]
        request = row // next_n
    seq_len = cutlass.max(Int32(lengths[request]), Int32(0))
    return cutlass.min(cutlass.max(seq_len - (next_n - 1 - (row - request * next_n)), Int32(0)), logits.shape[1])


def _pick(condition, a, b):
    """a where condition (a Boolean, or an Int32 0/1 predicate) holds, else b, as Int32."""
    if isinstance(condition, Int32):
        condition = condition != 0
    return Int32(cutlass.select_(condition, Int32(a), Int32(b)))


def window_bin(top, key, span):
    """A key's bin in a window of span + 1 bins from `top` (a key no larger) down: top in
    bin span, the keys top - span + 1 .. top a bin each, every key from top - span down in
    bin 0 (the cutoff's window, 2.6, and the direct path's window from the top, 2.5)."""
    return Int32(span) - cutlass.min(top - key, Int32(span))


@cute.jit
def chosen_lanes(gt, eq, rank_gt, rank_eq, need):
    """(chosen, slot): the lanes of one thread's keys that the ranked write places (1.4,
    2.7) and the slot of the first. gt / eq: bit e set where lane e's key is > K / == K;
    rank_gt / rank_eq: the row's keys > K / == K at lower indices; need = k - A. Every key >
    K is chosen, and a key == K while its rank among the row's is below need, the lowest
    first. Chosen keys take consecutive slots in index order (a key's slot is gtb +
    min(eqb, need), and a key skipped between two chosen ones is < K, which moves neither
    term, or == K with eqb >= need, which leaves min(eqb, need) at need), so the thread's
    go to slot, slot + 1, ... lowest lane first."""
    kept = eq
    ties = popc(eq)
    # The ties past need, highest first: none in most threads (a loop of no trip, where an
    # unrolled bit-by-bit mask would cost every thread ~35 instructions).
    for _ in cutlass.range(ties - cutlass.min(cutlass.max(need - rank_eq, Int32(0)), ties), unroll=1):
        kept = kept ^ (Int32(1) << Int32(cute.arch.bfind(Uint32(kept))))
    return gt | kept, rank_gt + cutlass.min(rank_eq, need)


def warp_select(hist, q, lane, bins=BINS):
    """Every lane of the calling warp: (b, above, total) of the histogram of `bins` bins
    (256 or 512) at shared address hist: the bin b holding the q-th largest key (counting
    from the top bin) and the count of keys above it, meaningful only when q <= total, and
    the histogram's total. Lane l sums the bins/32 bins below top = bins - 1 - l bins/32
    (16-byte loads), an inclusive shuffle scan over the lanes gives the counts from the
    top, every lane walks its own bins, and the one lane whose range holds q hands its bin
    and count to every lane (two warp reductions, in which every other lane adds nothing).
    Every lane of the warp must call it; DecodeTopK.select calls it in warp 0 only."""
    per = bins // 32
    top = bins - 1 - per * lane
    counts = []  # bin top - j
    for v in range(per // 4):
        words = shared_load_u32x4(hist + (top - 4 * v - 3) * 4)  # bins top - 4v - 3 .. top - 4v
        counts += [Int32(words[3 - j]) for j in range(4)]
    total = counts[0]
    for j in range(1, per):
        total = total + counts[j]
    inclusive = warp_inclusive_sum(total, lane)
    first = inclusive - total  # the keys in the bins above this lane's
    found = Int32(-1)
    found_above = Int32(0)
    acc = first
    for j in range(per):
        hit = (found < 0) & (acc + counts[j] >= q)
        found_above = _pick(hit, acc, found_above)
        found = _pick(hit, top - j, found)
        acc = acc + counts[j]
    mine = (first < q) & (q <= inclusive)
    return (cute.arch.warp_redux_sync(_pick(mine, found, -1), "max"),
            cute.arch.warp_redux_sync(_pick(mine, found_above, 0), "add"),
            cute.arch.warp_redux_sync(total, "add"))


# ---------------------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------------------
class DecodeTopK:
    """The decode top-k (module docstring) of rows of BF16 logits.

    k: 512, 1024 or 2048; cluster: 1, 2, 3, 4, 8 or 16 CTAs a row (4: 1024 threads, else 512;
    3: the streamed 3x512x4, token rows only);
    vector_count: 16-byte vectors a thread stages (4, 8, or 16 at 512 threads), so a token
    row holds at most cluster * threads * vector_count vectors; block_mode: elements are
    8-logit block maxima, staged as 2-byte keys, KEY_BLOCKS to a vector (so a block row
    holds KEY_BLOCKS times as many blocks); trace: also write the per-row trace of SPEC.md
    2.11.

    In token mode registers keep each staged vector's top (its largest key), the test every
    filter makes; the words themselves are re-read from shared memory by the few passes
    that need them.
    """

    def __init__(self, k: int, cluster: int, vector_count: int, block_mode: bool, trace: bool = False,
                 profile: bool = False):
        if k not in KS:
            raise ValueError(f"k={k} is not one of {KS}")
        build = Build.of(cluster, vector_count)
        if build not in BUILDS or build.registers:
            raise ValueError(f"no staged build of cluster={cluster}, vector_count={vector_count}; builds: "
                             f"{', '.join(b.name for b in BUILDS)} (the register build: DecodeTopKRegister)")
        if bool(block_mode) not in build.modes:
            raise ValueError(f"build {build.name} takes token rows only, not block_mode={block_mode}")
        self.k = k
        self.cluster = cluster
        self.threads = threads_for(cluster, vector_count)
        self.vectors = vector_count
        self.block_mode = bool(block_mode)
        self.trace = bool(trace) or bool(profile)
        self.profile = bool(profile)
        self.profile_rank = 0  # the CTA whose stamps the profile build records (stamp)
        self.trace_width = len(TRACE_FIELDS) + (len(PROFILE_STAMPS) if profile else 0)
        # The samples' chunks (2.4): the CTAs' (S_c = 2048 / C a CTA), or at three CTAs the
        # whole row (1x512x4's 2048).
        self.sample_chunks = sample_chunks(cluster)
        self.samples_per_cta = SAMPLES // self.sample_chunks
        # Longer token rows stream (2.12); block rows never do, so their variants carry
        # no streaming code and no index region beside the queue.
        self.streams = build.streams and not self.block_mode
        # A sampled row's samples (2.4): a staged build reads them from its stages, a
        # streamed build (whose sampled rows stage nothing) from global memory.
        self.samples_staged = not self.streams and not self.block_mode
        if self.samples_staged and self.sample_chunks != cluster:  # each CTA's from its own stage
            raise ValueError(f"a staged sampled row takes its samples from each CTA's chunk, not at {cluster} CTAs")
        # On clusters of SAMPLED_ASYNC_CLUSTER CTAs a staged sampled row of at least
        # SAMPLED_ASYNC_MIN_LENGTH logits in a launch of at most SAMPLED_ASYNC_ROWS rows
        # instead reads its own S_c samples from global memory while its chunk is copied
        # asynchronously, and selects its cutoff while the chunk lands (sampled_stage;
        # 2.2). copies_before_b0: the slots a thread copies before B0's arrive, whose
        # release may wait for copies in flight (at one CTA, no arrive: all).
        self.sampled_async = self.samples_staged and cluster >= SAMPLED_ASYNC_CLUSTER
        self.copies_before_b0 = min(SAMPLED_FIRST_SLOTS, vector_count) if cluster > 1 else vector_count
        self.direct_max = direct_max_length(cluster, vector_count)  # longer token rows: sampled (2.3, 2.12)
        self.q_min = Q_MIN[k]  # the least sample rank (2.4)
        # The slots a direct row can fill (d of 2.3; every slot in block mode, where every
        # row is direct), and whether a chunk of them can hold more than WRITE_QUEUE_VECTORS
        # vectors a thread, so that its ranked write runs over a queue (2.7). A sampled
        # attempt's underflow takes the direct path with its whole chunk, which may fill
        # more slots than these: its write visits every vector.
        self.direct_slots = vector_count if self.block_mode else min(
            vector_count, direct_max_length(cluster, vector_count) // (LOGITS_PER_VECTOR * cluster * self.threads))
        # Block mode stages one 2-byte key a block (2.2: the NaN-propagating maximum's key,
        # +inf for the pinned newest), KEY_BLOCKS to a 16-byte key vector, so a chunk holds
        # up to KEY_BLOCKS x T V blocks; the passes and the ranked write read key vectors
        # as token mode reads vectors (element e of key vector i: block start + 8 i + e),
        # and the write visits every key vector (no queue: no tops are kept, 2.7).
        self.write_queue = self.direct_slots > WRITE_QUEUE_VECTORS and not self.block_mode
        # Token mode: the direct path over the stage first tries one pass from the row's
        # largest key M (2.5): each warp's largest top in staging, stored in "maxima" before
        # the first cluster barrier's arrive (which on these builds follows staging), and
        # the row's M read over the cluster after its wait (a row staged by copies arrives
        # before that store: its M is read only in a fallback, after its attempt's first
        # exchange, whose barrier follows the store). (A block row's largest key is its
        # pinned newest block's +inf.)
        self.narrow_top = not self.block_mode
        # Vectors a thread loads before it stores any (4 registers each), as many as fit
        # beside the tops it keeps: 1024 threads have 64 registers a thread (4 spilled there),
        # 16 tops crowd 512 threads' 128 (8 spilled there).
        self.load_batch = min(vector_count, 2 if self.threads == 1024 else (4 if vector_count == 16 else 8))
        if self.block_mode:  # no tops kept: 8 loads in flight (4 at 1024 threads' 64 registers)
            self.load_batch = 4 if self.threads == 1024 else 8
        # On STAGE_PREFETCH's builds (8x512x16: 4 batches of 4 slots) the chunk is first
        # prefetched into L2 whole (2.2), so that the later batches find it there.
        self.stage_prefetch = build in STAGE_PREFETCH
        self.stream_prefetch = STREAM_PREFETCH  # (2.12)
        slots = self.threads * vector_count
        # The streamed build (2.12): its queue of STREAM_QUEUE vectors in the stage's place
        # (a streamed row stages nothing) and their global indices. A tile's (slot, warp)
        # counts are scanned in one warp: at most 32. The ranked write's grid holds a
        # (round, warp) count for every round of the queue.
        stage_bytes = slots * 16
        index_regions = ()
        self.grid_rounds = vector_count
        self.tile_words = STREAM_TILE * self.threads * 16  # the fallback's tile queue in the stage: words, indices
        if self.streams:
            stage_bytes = max(stage_bytes, STREAM_QUEUE * 16)
            index_regions = (("index", STREAM_QUEUE * 4),)
            self.grid_rounds = max(vector_count, STREAM_QUEUE // self.threads)
            if STREAM_TILE * self.threads // 32 > 64:
                raise ValueError(f"a tile of {STREAM_TILE} x {self.threads} vectors has more than 64 "
                                 "(slot, warp) counts")
        # Shared memory, byte offsets; every size is a multiple of 16, so each region keeps
        # the stage's 16-byte alignment. "copies" .. "select" are zeroed at the start, before
        # the cluster barrier's arrive, 16 bytes a store. "copies": HIST_COPIES copies of the
        # widest pass's bins. "exchange" holds three histogram exchanges (2.5: a row's first
        # selection uses 0 and 1, or 0 alone for the sampled attempt's one pass; the direct
        # path after a fallback, whose attempt used only 0, uses 1 and 2, as do a streamed
        # row's two passes after its one pass), each a 256-bin total and a 256-bin prefix of
        # the lower ranks; five where the direct path first makes its window from the top
        # (token mode: a 512-bin total and prefix in two buffers, then the two passes).
        # "maxima": each warp's largest top (the window from the top), written in staging
        # and never again, so a peer may read it at any time after the first cluster
        # barrier (token mode only; a row staged by copies: after the next one, whose
        # arrive follows the store). "select": the three one-copy histograms of the
        # cutoff's selection (its window, then radix_select's two passes, 2.6);
        # "sample_maxima": each warp's largest sample.
        exchanges = EXCHANGES + (2 if self.narrow_top else 0)
        # The sampled write's queue (2.7) on the staged token builds of one or two CTAs a
        # row: "write_queue", each queue entry's top, then the entries of top >= K;
        # "masks", its (round, warp) ballots.
        self.sampled_write_queue = self.samples_staged and cluster <= SAMPLED_WRITE_QUEUE_CLUSTER
        regions = (("stage", stage_bytes), ("copies", TOP_BINS * HIST_COPIES * 4),
                   ("exchange", exchanges * BINS * 8),
                   ("misc", MISC_BYTES), ("select", 3072), ("grid", 1024), ("sample_maxima", 128)) + (
                   (("maxima", 128),) if self.narrow_top else ()) + (
                   ("samples", SAMPLES * 2), ("queue", slots * 2)) + index_regions + (
                   (("write_queue", slots * 2), ("masks", 1024)) if self.sampled_write_queue else ())
        self.offsets, self.smem_bytes = smem_layout(regions)
        self.zero_vectors = (self.offsets["grid"] - self.offsets["copies"]) // 16
        # Every warp scans the (row, warp) counts of "grid" itself (grid_bases): a lane sums
        # `per` consecutive counts, so `per` must divide the warps (a warp's count then sits
        # at the same place in a lane's words in every row) and the counts fill the lanes.
        for rows in {vector_count, self.grid_rounds, self.direct_slots}:
            pairs = rows * self.threads // 32
            if pairs % 32 or pairs > 256 or (self.threads // 32) % (pairs // 32):
                raise ValueError(f"{rows} x {self.threads // 32} (row, warp) counts do not fit grid_bases")

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
        C, nt, k = self.cluster, self.threads, self.k
        tid = cute.arch.thread_idx()[0]
        rank = cute.arch.block_idx_in_cluster()
        row = cute.arch.block_idx()[0] // C
        lane = tid & 31
        allocator = cutlass.memory.SmemAllocator()
        base = allocator.allocate_array(cutlass.Uint8, self.smem_bytes, byte_alignment=16).toint()
        sm = {name: base + offset for name, offset in self.offsets.items()}
        trace_row = trace.iterator.toint() + Int64(row) * (self.trace_width * 4)
        self.stamp(trace_row, rank, tid, "start")

        for w in cutlass.range_constexpr((self.zero_vectors + nt - 1) // nt):
            vector = w * nt + tid
            if vector < self.zero_vectors:
                shared_store_u32x4(sm["copies"] + vector * 16, [Int32(0)] * 4)
        # The first cluster barrier, split: this thread has zeroed its words (arrive has
        # release semantics); the wait, after staging, comes before any DSMEM access. In
        # token mode (narrow_top), where a row may read the peers' maxima, the arrive
        # follows their store in staging instead, and a staged build's sampled row's
        # follows the store of its own samples, which the peers gather (2.10).
        if const_expr(self.cluster > 1 and not self.narrow_top):
            cluster_arrive_published(tid)

        cute.arch.griddepcontrol_wait()
        length = row_length(logits, lengths, row)
        nv = (length + 7) >> 3
        n = nv if const_expr(self.block_mode) else length
        start = (rank * nv) // C
        count = ((rank + 1) * nv) // C - start
        row_logits = logits.iterator.toint() + Int64(row) * Int64(logits.layout.stride[0]) * 2
        out_row = out.iterator.toint() + Int64(row) * (k * 4)
        sampled = Int32(0)
        if const_expr(not self.block_mode):
            sampled = _pick((n > k) & (length > self.direct_max), 1, 0)
        chunk = count
        if const_expr(self.streams):
            count = _pick(sampled == 1, 0, count)  # a streamed row stages nothing (2.12)
        self.stamp(trace_row, rank, tid, "inputs")

        # A streamed row's 2048 samples, read by every CTA from global memory (2.4): their
        # loads are in flight with staging's, their stores follow them. (A staged row's
        # come from the stages, own_samples and gather_samples, or with sampled_stage.)
        samples = []
        if const_expr(self.streams):
            samples = self.load_samples(tid, row_logits, nv, length, sampled)
        q = Int32(0)
        cutoff = Int32(0)
        own = sampled  # a sampled row whose samples come from its own stage (own_samples)
        copies = Int32(0)
        if const_expr(self.sampled_async):
            # 2.2, Copies: a nearly full chunk's sampled row in a launch of few rows stages
            # asynchronously and selects its cutoff meanwhile (sampled_stage).
            copies = _pick((sampled == 1) & (length >= SAMPLED_ASYNC_MIN_LENGTH)
                           & (logits.shape[0] <= SAMPLED_ASYNC_ROWS), 1, 0)
            own = sampled - copies
            tops = [Int32(-1)] * self.vectors  # defined on both branches of the dynamic if
            if copies == 1:
                tops, q, cutoff = self.sampled_stage(sm, tid, lane, rank, row_logits, start, count, length, nv,
                                                     trace_row)
            else:
                tops = self.stage(sm, tid, row_logits, start, count, length, nv)
        else:
            tops = self.stage(sm, tid, row_logits, start, count, length, nv)
        if const_expr(self.streams):
            self.store_samples(sm, tid, lane, samples, sampled)
        if const_expr(self.narrow_top):
            # The row's largest key M for the direct path's window from the top (2.5):
            # each warp's largest top in its own word of "maxima", read by row_max after
            # the CTA's barrier (and on a cluster, after a cluster barrier whose arrive
            # follows this store: release, then acquire in every peer: B0 on a direct row).
            mine = tops[0]
            for s in cutlass.range_constexpr(1, len(tops)):
                mine = cutlass.max(mine, tops[s])
            self.store_warp_max(sm["maxima"], tid, lane, mine)
            if const_expr(self.cluster > 1 and self.samples_staged):
                if sampled == 0:
                    cute.arch.cluster_arrive()
            elif const_expr(self.cluster > 1):
                cute.arch.cluster_arrive()
        cute.arch.sync_threads()
        self.stamp(trace_row, rank, tid, "staged")
        if const_expr(self.samples_staged):
            if own == 1:
                # A staged row's samples (2.4): this CTA's from its own stage, now staged;
                # then B0's arrive, after which the peers gather them (gather_samples).
                self.own_samples(sm, tid, rank, nv, length)
                if const_expr(self.cluster > 1):
                    cluster_arrive_published(tid)
        # Dependents may start once the inputs are read (2.10): for a staged row that is
        # now; a streamed row reads its row until its last write, so the streamed builds
        # leave the trigger to their CTAs' exit.
        if const_expr(not self.streams):
            cute.arch.griddepcontrol_launch_dependents()
        # B0's wait: every CTA has zeroed its counters (a direct row: and staged). An
        # asynchronously staged sampled row passed it in sampled_stage.
        if const_expr(self.cluster > 1 and self.sampled_async):
            if copies == 0:
                cute.arch.cluster_wait()
        elif const_expr(self.cluster > 1):
            cute.arch.cluster_wait()
        self.stamp(trace_row, rank, tid, "started")

        # The trace (trace builds): CTA 0's thread 0 writes the short row's fields now and
        # overwrites each field once it is known, so no field stays live in a register.
        for f in cutlass.range_constexpr(len(TRACE_FIELDS)):
            self.record(trace_row, rank, tid, TRACE_FIELDS[f], Int32(0) if f < 2 else Int32(-1))
        if n <= k:
            self.short(sm, tid, rank, tops, start, count, length, n, out_row)
        else:
            direct = Int32(1)
            if sampled == 1:
                if const_expr(self.streams):
                    q = self.sample_rank(length)
                    cutoff = self.sample_cutoff(sm, tid, lane, q)
                elif const_expr(self.sampled_async):
                    if own == 1:  # else sampled_stage selected it
                        q, cutoff = self.staged_cutoff(sm, tid, lane, rank, length)
                        self.stamp(trace_row, rank, tid, "cutoff")
                else:
                    q, cutoff = self.staged_cutoff(sm, tid, lane, rank, length)
                self.record(trace_row, rank, tid, "q", q)
                self.record(trace_row, rank, tid, "cutoff", cutoff)
                if const_expr(not self.sampled_async):
                    self.stamp(trace_row, rank, tid, "cutoff")
                if const_expr(self.streams):
                    reason, kth, above = self.stream_attempt(sm, tid, lane, rank, tops, row_logits, cutoff, length,
                                                             nv, start, chunk, out_row, trace_row)
                else:
                    status, kth, above = self.select_write(sm, tid, lane, rank, tops, cutoff, sm["exchange"],
                                                           start, count, length, nv, out_row, trace_row, True)
                    reason = _pick(status == 1, 2, _pick(status == 2, 1, 0))
                self.record(trace_row, rank, tid, "reason", reason)
                if reason == 0:
                    direct = Int32(0)
                    self.record(trace_row, rank, tid, "path", Int32(1))
                    self.record(trace_row, rank, tid, "kth", kth)
                    self.record(trace_row, rank, tid, "above", above)
            if direct == 1:
                kth = Int32(-1)
                above = Int32(-1)
                if const_expr(self.streams):
                    # A streamed row that fell back reads the row again (2.12, step 5);
                    # a staged row selects over its stage.
                    if sampled == 1:
                        kth, above = self.global_direct(sm, tid, lane, rank, row_logits, length, nv, start, chunk,
                                                        out_row, trace_row)
                    else:
                        unused_under, kth, above = self.select_write(sm, tid, lane, rank, tops, Int32(0),
                                                                     sm["exchange"], start, count, length, nv,
                                                                     out_row, trace_row, False, False,
                                                                     self.row_max(sm, lane) if self.narrow_top
                                                                     else None)
                else:
                    # The window from the top in exchanges 0 and 1 (its 512 bins), then the
                    # two passes in 2 and 3; each one buffer later after the attempt (whose
                    # one pass used 0).
                    entries = count
                    end = length
                    if const_expr(self.block_mode):  # its key vectors, and the chunk's end (elements)
                        entries = (count + KEY_BLOCKS - 1) // KEY_BLOCKS
                        end = start + count
                    unused_under, kth, above = self.select_write(sm, tid, lane, rank, tops, Int32(0),
                                                                 sm["exchange"] + sampled * 2048, start, entries,
                                                                 end, nv, out_row, trace_row, False, False,
                                                                 self.row_max(sm, lane) if self.narrow_top else None)
                self.record(trace_row, rank, tid, "path", Int32(2))
                self.record(trace_row, rank, tid, "kth", kth)
                self.record(trace_row, rank, tid, "above", above)
        # No closing barrier: a CTA's last DSMEM access precedes the last cluster barrier
        # it passes, every CTA passes the same ones (each decision is made from the same
        # cluster totals), and after it no CTA touches a peer's shared memory.
        self.stamp(trace_row, rank, tid, "end")

    def barrier(self, tid):
        """The exchange's barrier: a cluster barrier, or at one CTA a row (no peers, no
        DSMEM) the CTA's own bar.sync."""
        if const_expr(self.cluster > 1):
            cluster_sync(tid)
        else:
            cute.arch.sync_threads()

    @cute.jit
    def row_max(self, sm, lane):
        """The row's largest key M, in every thread: the C x T/32 words of "maxima" (each
        warp's largest top, every CTA's), read by one warp as policy.maxima_reads plans
        (a lane `per` consecutive words of one CTA, through DSMEM on a cluster, a word or
        16 bytes a load), and one warp reduction."""
        warps = self.threads // 32
        per, width = maxima_reads(self.cluster, self.threads)
        mine = Int32(-1)
        if lane < (self.cluster * warps) // per:
            for h in cutlass.range_constexpr(per // width):
                first = lane * per + h * width  # the load's first word: CTA first // warps
                address = sm["maxima"] + (first % warps) * 4
                if const_expr(width == 4):
                    for w in cluster_load_u32x4(peer_address(address, first // warps)):
                        mine = cutlass.max(mine, Int32(w))
                elif const_expr(self.cluster > 1):
                    mine = cutlass.max(mine, cluster_load_u32(peer_address(address, first // warps)))
                else:
                    mine = cutlass.max(mine, shared_load_u32(address))
        return cute.arch.warp_redux_sync(mine, "max")

    def record(self, trace_row, rank, tid, field, value):
        """Trace builds only: CTA 0's thread 0 writes one TRACE_FIELDS field of the row."""
        if const_expr(self.trace):
            store_s32(trace_row + TRACE_FIELDS.index(field) * 4, value, _pick((rank == 0) & (tid == 0), 1, 0))

    @cute.jit
    def stamp(self, trace_row, rank, tid, point: cutlass.Constexpr):
        """Profile build only: thread 0 of CTA `profile_rank` (0 unless bench/profile_phases.py
        overrides it) records %clock at a PROFILE_STAMPS point."""
        if const_expr(self.profile):
            if (rank == self.profile_rank) & (tid == 0):
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
        """The largest key of a staged token vector whose first element is at g, over its
        valid lanes, -1 if it holds none. The keys of invalid lanes are set to 0, the
        smallest key, which cannot raise the maximum of a vector with a valid lane. (Block
        mode keeps no tops: its stage holds the keys, 2.2.)"""
        keys = []
        for j in range(4):
            mask = Uint32(cutlass.select_(2 * j + 1 < valid, Uint32(0xFFFFFFFF),
                                          cutlass.select_(2 * j < valid, Uint32(0xFFFF), Uint32(0))))
            keys.append(key_word(words[j]) & mask)
        pair = max_u16x2(max_u16x2(keys[0], keys[1]), max_u16x2(keys[2], keys[3]))
        top = cutlass.max(Int32(pair & Uint32(0xFFFF)), Int32(pair >> 16))
        return _pick(valid > 0, top, -1)

    def elements(self, words, g, length, nv):
        """(key, valid, index) of each element of vector g's words. Block mode: the words
        are a key vector (2.2), g its first block and `length` the chunk's end block (a
        chunk's last key vector may hold fewer than 8 of its blocks)."""
        if const_expr(self.block_mode):
            keys = [Uint32(w) for w in words]
            return [(word_key(keys, e), _pick(g + e < length, 1, 0), g + e) for e in range(KEY_BLOCKS)]
        valid = length - g * 8
        keys = [key_word(w) for w in words]
        return [(word_key(keys, e), _pick(e < valid, 1, 0), g * 8 + e) for e in range(8)]

    @cute.jit
    def stage(self, sm, tid, row_logits, start, count, length, nv):
        """Stage the chunk (2.2) with 16-byte loads; returns the tops of this thread's slots
        (block mode: the keys, a slot's in the stage, and no tops). Issue a batch of loads
        before the first store: the asm statements keep their order, so a store right after
        its load would make every load wait for the last.
        Each slot issues one predicated 16-byte load; the row's one partial vector is
        loaded lane by lane afterwards, in a branch only its thread takes. Why not
        load_u32x4 a slot: its lane-by-lane path is eight predicated loads and their
        moves in every slot of every thread (~50 instructions a slot, issued before the
        batch's last load: bench/NOTES.md session 11)."""
        nt, V = self.threads, self.vectors
        if const_expr(self.stage_prefetch):
            self.prefetch_vectors(tid, row_logits, start, start + count, length, nv)
        if const_expr(self.block_mode):
            # One key a block, block i's at byte 2 i: a batch of 16-byte loads (adjacent
            # threads, adjacent blocks), then their keys' stores; as many batches as the
            # chunk needs (up to KEY_BLOCKS V slots a thread), and no tops.
            B = self.load_batch
            for b in cutlass.range((count + nt * B - 1) // (nt * B), unroll=1):
                staged = []
                for j in cutlass.range_constexpr(B):
                    i = (b * B + j) * nt + tid
                    g = start + i
                    valid = self.lanes_valid(i < count, g, length, nv)
                    staged.append((i, g, load_full_u32x4(row_logits + Int64(g) * 16, _pick(valid == 8, 1, 0))))
                for i, g, words in staged:
                    shared_store_u16(sm["stage"] + i * 2, _pick(g == nv - 1, KEY_POS_INF, block_key(words)),
                                     _pick(i < count, 1, 0))
            return [Int32(-1)] * V
        tops = []
        for batch in cutlass.range_constexpr(0, V, self.load_batch):
            staged = []
            for s in cutlass.range_constexpr(batch, batch + self.load_batch):
                i = s * nt + tid
                g = start + i
                valid = self.lanes_valid(i < count, g, length, nv)
                staged.append((i, g, valid, load_full_u32x4(row_logits + Int64(g) * 16, _pick(valid == 8, 1, 0))))
            staged = [(i, g, valid, self.partial_vector(row_logits + Int64(g) * 16, valid, words))
                      for i, g, valid, words in staged]
            for i, g, valid, words in staged:
                top = Int32(-1)
                if i < count:
                    shared_store_u32x4(sm["stage"] + i * 16, words)
                    top = self.vector_top(words, valid, i < count, g, nv)
                tops.append(top)
        return tops

    @cute.jit
    def prefetch_vectors(self, tid, row_logits, first, end, length, nv):
        """Thread 0 prefetches the row's whole vectors in [first, end) into L2: none past
        the row's last whole vector (token mode: `length >> 3`; block mode: before the
        pinned newest block), so no byte at or past the length is asked for."""
        if tid == 0:
            whole = nv - 1 if const_expr(self.block_mode) else length >> 3
            last = cutlass.min(end, whole)
            prefetch_l2(row_logits + Int64(first) * 16, (last - first) * 16, _pick(last > first, 1, 0))

    @cute.jit
    def partial_vector(self, address, lanes, words):
        """A staged vector's words: `words` (its 16-byte load, or zeros), except for a
        partial vector (1 to 7 valid lanes), whose lanes are loaded one by one (load_u32x4,
        zeros past them), so no read reaches the row's length."""
        if (lanes > 0) & (lanes < 8):
            words = load_u32x4(address, lanes)
        return words

    def vector_words(self, sm, i):
        """The four words of the chunk's vector i in shared memory."""
        return shared_load_u32x4(sm["stage"] + i * 16)

    # -- short rows --------------------------------------------------------------------
    @cute.jit
    def short(self, sm, tid, rank, tops, start, count, length, n, out_row):
        """n <= k: out[j] = j (-1 for a -inf block) for the chunk's elements; the cluster
        writes the padding j in [n, k) with -1."""
        if const_expr(self.block_mode):  # the keys in the stage (2.2)
            for i in cutlass.range(tid, count, self.threads):
                g = start + i
                store_s32(out_row + Int64(g) * 4,
                          _pick(shared_load_u16(sm["stage"] + i * 2) == KEY_NEG_INF, -1, g), Int32(1))
        for s in cutlass.range_constexpr(0 if self.block_mode else self.vectors):
            i = s * self.threads + tid
            g = start + i
            exists = _pick(i < count, 1, 0)
            valid = length - g * 8
            for e in cutlass.range_constexpr(8):
                store_s32(out_row + Int64(g * 8 + e) * 4, g * 8 + e, exists & _pick(e < valid, 1, 0))
        stride = self.cluster * self.threads
        for j in cutlass.range(n + rank * self.threads + tid, self.k, stride):
            store_s32(out_row + Int64(j) * 4, Int32(-1), Int32(1))

    # -- sampling ----------------------------------------------------------------------
    def sample_offset(self, c, j, nv, length):
        """Sample j of CTA c's chunk (2.4): (start_c, p), the logit at offset p of the chunk,
        whose m_c valid logits start at logit 8 start_c (S = 2048 / C, C the samples'
        chunks: sample_chunks): the middle o = ((2j + 1) m_c) // (2 S) of part j, moved down
        to the nearest offset = 2j mod 64 (not below 0), so that the stage's 32 samples a
        warp (own_samples) lie in 32 banks."""
        per, C = self.samples_per_cta, self.sample_chunks
        first = (c * nv) // C
        m = cutlass.min((((c + 1) * nv) // C) * 8, length) - first * 8
        # In 64 bits: (2j + 1) m reaches 4095 x 1,048,576 at one CTA a row (1x512x4).
        middle = Int32((Int64(2 * j + 1) * Int64(m)) // Int64(2 * per))
        # (middle - 2j) & 63 is its distance above the offset below it in 2j's bank, also
        # where middle < 2j (two's complement); the max keeps such an offset in the chunk.
        return first, cutlass.max(middle - ((middle - 2 * j) & (SAMPLE_BANK_LOGITS - 1)), Int32(0))

    def load_samples(self, tid, row_logits, nv, length, sampled):
        """Issue this thread's loads of the row's samples from global memory (if sampled),
        the same 2048 in every CTA (the streamed builds, whose sampled rows stage nothing):
        sample x = c S_c + j, thread tid taking x = r T + tid (c of the samples' chunks:
        at three CTAs one, the row). Returns [(r, key)] for store_samples."""
        per = self.samples_per_cta
        loaded = []
        for r in range(SAMPLES // self.threads):
            x = r * self.threads + tid
            first, offset = self.sample_offset(x // per, x % per, nv, length)
            loaded.append((r, load_u16(row_logits + Int64(first * 8 + offset) * 2, sampled)))
        return [(r, order_key(bits)) for r, bits in loaded]

    def sample_rank(self, length):
        """q, the sampled cutoff's rank among the 2048 samples (2.4): the aim, at most
        Q_DEVIATIONS deviations above m, at least Q_MIN[k]."""
        k = self.k
        aim = (SAMPLES * (k + SURVIVOR_AIM) + length - 1) // length
        m = (SAMPLES * k + length - 1) // length
        q = cutlass.min(aim, m + ceil_sqrt(Q_DEVIATIONS * Q_DEVIATIONS * m))
        return cutlass.min(Int32(SAMPLES), cutlass.max(Int32(self.q_min), q))

    def staged_cutoff(self, sm, tid, lane, rank, length):
        """A staged build's sampled row, after B0 (at one CTA: once this CTA's samples are
        stored): (q, cutoff), every CTA's samples gathered (2.4)."""
        q = self.sample_rank(length)
        if const_expr(self.cluster == 1):
            cute.arch.sync_threads()  # own_samples' (or sampled_stage's) stores
        self.gather_samples(sm, tid, lane, rank)
        cute.arch.sync_threads()
        return q, self.sample_cutoff(sm, tid, lane, q)

    @cute.jit
    def own_samples(self, sm, tid, rank, nv, length):
        """A staged row's samples of this CTA's chunk (2.4), read from its own stage and
        stored as keys at their places c S + j of "samples", where the peers gather them
        after B0 (gather_samples)."""
        per = self.samples_per_cta
        for r in cutlass.range_constexpr((per + self.threads - 1) // self.threads):
            j = r * self.threads + tid
            if j < per:
                unused_first, offset = self.sample_offset(rank, j, nv, length)
                shared_store_u16(sm["samples"] + (rank * per + j) * 2,
                                 order_key(shared_load_u16(sm["stage"] + offset * 2)), Int32(1))

    def load_own_samples(self, tid, rank, row_logits, nv, length):
        """Issue this thread's loads of this CTA's samples (2.4: sample j of chunk c at its
        place in the chunk), the logits the stage will hold, read from global memory so
        that they need not wait for it. Returns [(j, bits)] for store_own_samples."""
        per = self.samples_per_cta
        loaded = []
        for r in range((per + self.threads - 1) // self.threads):
            j = r * self.threads + tid
            first, offset = self.sample_offset(rank, j, nv, length)
            loaded.append((j, load_u16(row_logits + Int64(first * 8 + offset) * 2, _pick(j < per, 1, 0), True)))
        return loaded

    def store_own_samples(self, sm, rank, loaded):
        """This CTA's samples as keys at their places c S + j of "samples", where the peers
        gather them after B0 (gather_samples)."""
        per = self.samples_per_cta
        for j, bits in loaded:
            shared_store_u16(sm["samples"] + (rank * per + j) * 2, order_key(bits), _pick(j < per, 1, 0))

    @cute.jit
    def sampled_stage(self, sm, tid, lane, rank, row_logits, start, count, length, nv, trace_row):
        """A staged sampled row on SAMPLED_ASYNC_CLUSTER CTAs, long, in a launch of few rows
        (2.2, 2.4, 2.10): (tops, q, cutoff). This CTA's samples' loads and its first
        SAMPLED_FIRST_SLOTS slots' asynchronous copies into the stage; the samples stored,
        B0's arrive, the other slots' copies (no registers held: the thread goes on); B0's
        wait, the gather and the cutoff while the chunk lands (the profile's `cutoff`
        stamp, before `staged`); then each slot's top from the stage once its own copy has
        landed (the thread reads only its own copies, so no barrier: the caller's next one
        shows the stage to the CTA). Why: the cutoff's chain (B0, the gather, the window,
        the selection: ~3.7k cycles at 16 CTAs) no longer follows the row's staging (~7k)
        but runs beside it (where the chain is shorter, the chunk less full or the GPU
        busier the copies cost more than the overlap gives: policy's SAMPLED_ASYNC_*). Why
        the arrive before most copies: its release is a `MEMBAR.ALL.GPU` (SASS), which may
        wait for the thread's copies in flight; the first slots' are in flight no longer
        than the samples (at one CTA, no arrive: every copy first)."""
        loaded = self.load_own_samples(tid, rank, row_logits, nv, length)
        # The samples' loads issue before any copy, not behind up to 128 KB of them in the
        # SM's queue: plain loads (load_u16's `ordered`) and a warp barrier (a NOP in SASS)
        # that ptxas moves neither they nor a copy (a shared write) across. With either
        # alone ptxas issued them after all 16 copies a thread (session 32, 1x512x16's SASS).
        cute.arch.sync_warp()
        first = self.copies_before_b0
        for s in cutlass.range_constexpr(first):
            self.copy_slot(sm, tid, row_logits, s, start, count, length, nv)
        self.store_own_samples(sm, rank, loaded)
        if const_expr(self.cluster > 1):
            cute.arch.cluster_arrive()  # B0: this CTA's samples stored (release), counters zeroed
        for s in cutlass.range_constexpr(first, self.vectors):
            self.copy_slot(sm, tid, row_logits, s, start, count, length, nv)
        if const_expr(self.cluster > 1):
            cute.arch.cluster_wait()
        q, cutoff = self.staged_cutoff(sm, tid, lane, rank, length)
        self.stamp(trace_row, rank, tid, "cutoff")
        tops = []
        for s in cutlass.range_constexpr(self.vectors):
            i = s * self.threads + tid
            g = start + i
            # Slot s's copy is group s of V: the later ones may still be in flight while
            # this top is made. A slot past the chunk was not copied: its words are
            # stale, its top -1.
            copy_async_wait(self.vectors - 1 - s)
            tops.append(self.vector_top(self.vector_words(sm, i), self.lanes_valid(i < count, g, length, nv),
                                        i < count, g, nv))
        return tops, q, cutoff

    def copy_slot(self, sm, tid, row_logits, s, start, count, length, nv):
        """Slot s's vector of this thread copied asynchronously into the stage: its valid
        lanes' bytes, zeros past them (the partial vector), nothing past the chunk."""
        i = s * self.threads + tid
        g = start + i
        copy_async_u32x4(sm["stage"] + i * 16, row_logits + Int64(g) * 16,
                         self.lanes_valid(i < count, g, length, nv) * 2)

    @cute.jit
    def gather_samples(self, sm, tid, lane, rank):
        """Every CTA's samples into this CTA's "samples" (after B0; at one CTA after its
        barrier): 16 bytes (8 samples) a thread from the CTA that took them, through DSMEM,
        and each warp's largest sample in its own word of "sample_maxima" (the cutoff's
        window, 2.6). Why 16 bytes from the owner, not each sample from where it lies in a
        peer's stage: 2048 two-byte DSMEM reads a CTA took ~8k cycles (bench/NOTES.md
        session 22)."""
        chunks = SAMPLES * 2 // 16
        mine = Int32(0)
        if tid < chunks:
            c = tid // (chunks // self.cluster)
            address = sm["samples"] + tid * 16
            if const_expr(self.cluster > 1):
                words = cluster_load_u32x4(peer_address(address, c))
                if c != rank:
                    shared_store_u32x4(address, words)
            else:
                words = shared_load_u32x4(address)
            pair = max_u16x2(max_u16x2(words[0], words[1]), max_u16x2(words[2], words[3]))
            mine = cutlass.max(Int32(pair & Uint32(0xFFFF)), Int32(pair >> 16))
        self.store_warp_max(sm["sample_maxima"], tid, lane, mine)

    @cute.jit
    def store_samples(self, sm, tid, lane, samples, sampled):
        """Store this thread's samples in "samples" and its warp's largest in its own word of
        "sample_maxima" (the cutoff's window, 2.6), both read by sample_cutoff after the
        CTA's next barrier."""
        for r, key in samples:
            shared_store_u16(sm["samples"] + (r * self.threads + tid) * 2, key, sampled)
        if sampled == 1:
            mine = samples[0][1]
            for r in cutlass.range_constexpr(1, len(samples)):
                mine = cutlass.max(mine, samples[r][1])
            self.store_warp_max(sm["sample_maxima"], tid, lane, mine)

    @cute.jit
    def store_warp_max(self, words, tid, lane, mine):
        """The largest `mine` of the warp into the warp's own word of `words` (an array of
        a word a warp, read after the CTA's next barrier by a max over the warps)."""
        mine = cute.arch.warp_redux_sync(mine, "max")
        if lane == 0:
            shared_store_u32(words + (tid >> 5) * 4, mine)

    # -- CTA-wide building blocks ------------------------------------------------------
    @cute.jit
    def select(self, sm, tid, hist, q, prefix_of=None, bins: cutlass.Constexpr = BINS):
        """(bin, count above, total) of the q-th largest in a histogram of `bins` bins, in
        every thread; bin and above are meaningful only when q <= total. prefix_of = (buffer,
        high): the row's last selection, whose bin is K's low byte; then (bin, above, keys
        > K before this CTA, keys == K before it), the last two from prefix. Warp 0
        selects, its lane 0 stores the answer (one 16-byte store), a CTA barrier, and every
        thread loads it. Why not every warp selecting for itself (session 12's form): 16
        warps issuing the same ~100 instructions on an SM's four schedulers took longer
        than one warp's answer and a barrier (100-900 cycles a row: SPEC.md 2.10,
        bench/NOTES.md session 13). Every thread of the CTA must call it. The answer's
        words are rewritten only by the next selection, after a barrier that follows every
        thread's load (each caller passes one between two selections)."""
        result = sm["misc"] + MISC_RESULT
        if tid < 32:
            lane = tid & 31
            found, above, total = warp_select(hist, q, lane, bins)
            last = Int32(0)
            if const_expr(prefix_of is not None):
                total, last = self.prefix(lane, prefix_of[0], prefix_of[1], found, bins)
            if lane == 0:
                shared_store_u32x4(result, [found, above, total, last])
        cute.arch.sync_threads()
        words = [Int32(w) for w in shared_load_u32x4(result)]
        return tuple(words) if const_expr(prefix_of is not None) else tuple(words[:3])

    @cute.jit
    def sample_max(self, sm, lane):
        """The largest of the row's 2048 samples, in every thread: each warp's largest, in
        the T/32 words of "sample_maxima" (stored in staging, before the CTA's barrier), a
        lane reading one, and one warp reduction."""
        mine = Int32(0)
        if lane < self.threads // 32:
            mine = shared_load_u32(sm["sample_maxima"] + lane * 4)
        return cute.arch.warp_redux_sync(mine, "max")

    @cute.jit
    def sample_cutoff(self, sm, tid, lane, q):
        """The sampled cutoff, the q-th largest of the row's 2048 samples (2.4, 2.6): one
        histogram pass of 255 - min(Ms - key, 255) from the largest sample Ms into the
        "select" region's third histogram places it where it lies less than NARROW_SPAN
        steps below Ms (bin b >= 1: cutoff = Ms - NARROW_SPAN + b); else radix_select's two
        passes in the first two. Why: on the grid's rows the q-th largest sample lies a few
        dozen key steps below the largest (its rank q is at most 576, 2.4), so one pass,
        one selection and their two barriers are spared (bench/NOTES.md session 17)."""
        top = self.sample_max(sm, lane)
        window = sm["select"] + 2048
        self.count_keys(window, sm["samples"], 2, Int32(SAMPLES), tid, SELECT_WINDOW, top)
        cute.arch.sync_threads()
        b, unused_above, unused_total = self.select(sm, tid, window, q)
        cutoff = top - NARROW_SPAN + b
        if b < 1:
            cutoff = self.radix_select(sm, tid, sm["samples"], 2, Int32(SAMPLES), q)[0]
        return cutoff

    @cute.jit
    def count_keys(self, hist, keys, stride, count, tid, kind: cutlass.Constexpr, value):
        """Count keys[0:count] (shared Uint16, stride bytes apart) into the one-copy
        histogram at hist, by kind: SELECT_HIGH each key's high byte; SELECT_LOW the low
        byte of the keys whose high byte is `value`; SELECT_WINDOW window_bin(value, key,
        NARROW_SPAN), `value` the largest key. Lanes past count read the last key and
        count nothing. A trip loads SELECT_BATCH keys before it counts any, so the loads
        overlap."""
        per_trip = SELECT_BATCH * self.threads
        for first in cutlass.range(0, count, per_trip):
            batch = []
            for b in cutlass.range_constexpr(SELECT_BATCH):
                j = first + b * self.threads + tid
                batch.append((shared_load_u16(keys + cutlass.min(j, count - 1) * stride), _pick(j < count, 1, 0)))
            for key, valid in batch:
                if const_expr(kind == SELECT_HIGH):
                    hist_add(hist, key >> 8, valid)
                elif const_expr(kind == SELECT_LOW):
                    hist_add(hist, key & 255, valid & _pick((key >> 8) == value, 1, 0))
                else:
                    hist_add(hist, window_bin(value, key, NARROW_SPAN), valid)

    @cute.jit
    def radix_select(self, sm, tid, keys, stride, count, q):
        """The q-th largest of count keys (shared Uint16 stride bytes apart; 1 <= q <=
        count) and the count of keys above it: two 8-bit passes, the first into the
        "select" region's first histogram, the second into its second, both zeroed at entry,
        so that the passes need one barrier each and no zeroing between them."""
        self.count_keys(sm["select"], keys, stride, count, tid, SELECT_HIGH, Int32(0))
        cute.arch.sync_threads()
        high, above_high, unused = self.select(sm, tid, sm["select"], q)
        self.count_keys(sm["select"] + 1024, keys, stride, count, tid, SELECT_LOW, high)
        cute.arch.sync_threads()
        low, above_low, unused = self.select(sm, tid, sm["select"] + 1024, q - above_high)
        return (high << 8) | low, above_high + above_low

    # -- the selection (both paths) ----------------------------------------------------
    def grid_bases(self, sm, lane, warp, rows, masks: cutlass.Constexpr = False):
        """Every warp's scan of the rows x T/32 counts in "grid", in (row, warp) order, which
        is index order (a row: a slot of the queue's vote, a round of the ranked write): lane
        l sums the `per` counts l per .. l per + per - 1 (16 or 8 bytes a load), one
        inclusive shuffle scan over the lanes, and each lane adds the counts of its words
        before this warp's place among them (per divides the warps, so the count of (row,
        warp) sits at place warp mod per of lane (row T/32 + warp) / per, whatever the row:
        __init__). Returns (before, total): row r's exclusive base of this warp is
        shuffle(before, self.grid_lane(r, warp, rows)), total the sum of every count. (Each
        warp scans for itself, with no barrier after it; whether warp 0 scanning with a
        barrier after it would be faster, as it is for the selections, is not measured
        apart: SPEC.md 2.10.) Every lane of the warp must call it; counts past the last row
        in use are summed after every count in use, so they change no base that is read.
        masks: "grid" holds ballots, each counting its set bits."""
        per = self.grid_per(rows)
        at = sm["grid"] + lane * per * 4
        if per == 2:
            words = list(shared_load_u32x2(at))
        else:
            words = [Int32(w) for h in range(per // 4) for w in shared_load_u32x4(at + h * 16)]
        if const_expr(masks):
            words = [popc(w) for w in words]
        mine = words[0]
        for i in range(1, per):
            mine = mine + words[i]
        inclusive = warp_inclusive_sum(mine, lane)
        before = inclusive - mine
        place = warp % per
        for i in range(per - 1):
            before = before + _pick(place > i, words[i], 0)
        return before, cute.arch.shuffle_sync(inclusive, 31)

    def grid_per(self, rows):
        """grid_bases' counts a lane: the rows x T/32 (row, warp) counts over 32 lanes."""
        return rows * (self.threads // 32) // 32

    def grid_lane(self, r, warp, rows):
        """The lane of grid_bases whose `before` holds row r's base of this warp."""
        per = self.grid_per(rows)
        return r * ((self.threads // 32) // per) + warp // per

    @cute.jit
    def queue_vectors(self, sm, tid, lane, tops, cutoff, keep_tops: cutlass.Constexpr = False,
                      sparse: cutlass.Constexpr = False):
        """Queue this CTA's vectors that can hold a key >= cutoff (by top), in ascending
        local index i = s T + 32 w + l: a ballot a warp and slot, a scan of their counts in
        (slot, warp) order (every warp its own, grid_bases), and each lane's place among its
        warp's hits. Returns the queue's length. Why not a per-thread scan: that orders the
        queue by thread, then slot, which is not index order, and the ranked write needs
        index order (SPEC.md 2.7). sparse (the sampled attempt's queue on 4 or more CTAs a
        row, where ~2-4% of vectors hit): a lane places only its own hits, its next hit
        slot each round, rounds as many as the warp's busiest lane has hits (its slot's
        base by a shuffle from the lane grid_bases left it in, the slot's ballot from
        "grid"), where the loop over every slot takes a ballot, a shuffle and a store a
        slot. The dense queues keep that loop: the direct write's (up to ~40% of vectors
        reach K) and the sampled write's (keep_tops: it stores each entry's top, and a top
        of a slot chosen at run time would be an indexed register), where the busiest lane
        has hits in most slots and the rounds measured slower (bench/NOTES.md session 41)."""
        warps = self.threads // 32
        warp = tid >> 5
        slots = len(tops)  # the staged slots; the direct write's queue: the slots a direct row fills
        mine = Int32(0)  # bit s: slot s's vector is queued (sparse)
        for s in cutlass.range_constexpr(slots):
            hit = _pick(tops[s] >= cutoff, 1, 0)
            hits = ballot(hit)
            if const_expr(sparse):
                mine = mine | (hit << s)
            if lane == 0:
                shared_store_u32(sm["grid"] + (s * warps + warp) * 4, hits if sparse else popc(hits))
        cute.arch.sync_threads()
        before, queued = self.grid_bases(sm, lane, warp, slots, sparse)
        below = (Int32(1) << lane) - 1  # the lanes below this one
        if const_expr(sparse):
            for unused in cutlass.range(cute.arch.warp_redux_sync(popc(mine), "max")):
                lowest, s = lowest_set_bit(mine)  # the next hit slot (none left: lowest 0, s 32)
                s = cutlass.min(s, Int32(slots - 1))  # (none left: clamped, and no store)
                base = cute.arch.shuffle_sync(before, self.grid_lane(s, warp, slots))
                hits = shared_load_u32(sm["grid"] + (s * warps + warp) * 4)
                shared_store_u16(sm["queue"] + (base + popc(hits & below)) * 2, s * self.threads + tid,
                                 _pick(lowest != 0, 1, 0))
                mine = mine ^ lowest
        else:
            for s in cutlass.range_constexpr(slots):
                hit = _pick(tops[s] >= cutoff, 1, 0)
                hits = ballot(hit)
                slot = cute.arch.shuffle_sync(before, self.grid_lane(s, warp, slots)) + popc(hits & below)
                shared_store_u16(sm["queue"] + slot * 2, s * self.threads + tid, hit)
                if const_expr(keep_tops):  # the entry's top, for the sampled write's queue (2.7)
                    shared_store_u16(sm["write_queue"] + slot * 2, tops[s], hit)
        cute.arch.sync_threads()
        return queued

    @cute.jit
    def tally(self, sm, tid, queued, lo, start, length, nv):
        """Trace builds: this thread's keys > lo and == lo over the queue (the trace's gt and
        eq), in a loop of its own so that the passes keep their registers."""
        gt = Int32(0)
        eq = Int32(0)
        for entry in cutlass.range(tid, queued, self.threads):
            i = shared_load_u16(sm["queue"] + entry * 2)
            for key, ok, unused in self.elements(self.vector_words(sm, i), self.entry_vector(sm, i, start, False),
                                                 length, nv):
                gt = gt + (ok & _pick(key > lo, 1, 0))
                eq = eq + (ok & _pick(key == lo, 1, 0))
        return gt, eq

    @cute.jit
    def count_queued(self, sm, tid, lane, queued, lo, high, start, length, nv, kind: cutlass.Constexpr,
                     everything: cutlass.Constexpr, streamed: cutlass.Constexpr = False):
        """A histogram pass over the queue into the histogram copies: round r hands entry
        r T + t to thread t. Keys below lo are not counted; `kind` PASS_HIGH counts high
        bytes, PASS_LOW the low bytes of the keys whose high byte is high, PASS_NARROW key -
        lo, PASS_TOP the window from the top (2.5). everything: the direct path's queue,
        every vector of the chunk (entry e is vector e; no queue)."""
        for first in cutlass.range(0, queued, self.threads):
            entry = first + tid
            i = self.queue_entry(sm, entry, queued, everything or streamed)
            self.count_vector(sm, lane, self.vector_words(sm, i), self.entry_vector(sm, i, start, streamed),
                              _pick(entry < queued, 1, 0), lo, high, length, nv, kind, everything)

    def count_vector(self, sm, lane, words, g, present, lo, high, length, nv, kind, everything):
        """Count one vector a lane (global vector g, its words; present 0: nothing) into the
        histogram copies, as count_queued's passes do."""
        bins = []
        oks = []
        for key, ok, unused in self.elements(words, g, length, nv):
            ok = ok & present
            if const_expr(not everything):  # the direct path's lo is 0, below no key
                ok = ok & _pick(key >= lo, 1, 0)
            if const_expr(kind == PASS_TOP):
                # (lo >= every valid key. A lane not counted may have any bin: its add goes
                # to the trash word)
                bins.append(window_bin(lo, key, TOP_SPAN))
                oks.append(ok)
            elif const_expr(kind == PASS_NARROW):
                # (a key below lo, not counted, may give a negative bin: its add goes to
                # the trash word, so the address is never used)
                bins.append(cutlass.min(key - lo, Int32(NARROW_SPAN)))
                oks.append(ok)
            elif const_expr(kind == PASS_LOW):
                bins.append(key & 255)
                oks.append(ok & _pick((key >> 8) == high, 1, 0))
            else:
                bins.append(key >> 8)
                oks.append(ok)
        self.hist_add_vector(sm["copies"], bins, oks, lane, sm["misc"] + MISC_TRASH)

    def hist_add_vector(self, hist, bins, oks, lane, trash):
        """Count the valid bins of one vector a lane into the HIST_COPIES-copy histogram
        (bin-major: a bin's copies are adjacent words): each key adds 1, lane l into copy l
        mod HIST_COPIES, with no test. Why no warp-uniform test (SPEC.md 2.8): ptxas makes
        `red.shared.add` of 1 an `ATOMS.POPC.INC`, which adds the lanes of a warp that meet
        at one word in one turn, so a crowded bin costs no more than a spread one, and the
        test's two redux.sync and ~7 instructions a key were what the passes paid: without
        it 165 points of the grid's sampled and direct rows took 0.826-1.033 of the time,
        median 0.967 (bench/NOTES.md session 25). Why 4 copies, not 8: the adds took as long
        on crowded rows and the exchange's sums 100-350 cycles less (bench/NOTES.md session
        18), and 512 bins of the window from the top fit in the same words. Why the trash
        word: a key that is not counted adds its 1 there instead of skipping its add, so the
        8 adds carry no predicate; ptxas turns each predicated add into a branch and a
        reconvergence, and the unpredicated adds of 1 measured 1.7-8.4% faster to the end of
        the row (bench/NOTES.md session 8)."""
        for e in range(len(bins)):
            counted = hist + (bins[e] * HIST_COPIES + (lane & (HIST_COPIES - 1))) * 4
            shared_add(_pick(oks[e] != 0, counted, trash), Int32(1))

    def entry_vector(self, sm, i, start, streamed):
        """The global vector of stage slot i: start + i, or (a streamed row's queue, 2.12)
        the index stored beside it."""
        if const_expr(streamed):
            return shared_load_u32(sm["index"] + i * 4)
        if const_expr(self.block_mode):  # key vector i's first block
            return start + KEY_BLOCKS * i
        return start + i

    def queue_entry(self, sm, entry, queued, everything):
        """The local vector of queue entry `entry` (clamped to the last one, so that the
        lanes past the queue's end read a staged vector and count nothing)."""
        last = cutlass.min(entry, queued - 1)
        if const_expr(everything):
            return last
        return shared_load_u16(sm["queue"] + last * 2)

    def write_entry(self, sm, entry, queued, everything, queue_first, requeued=False):
        """queue_entry of the ranked write: with queue_first (a CTA-uniform Int32, the
        direct path's write queue, 2.7) the queue's entry where it is 1, else the vector;
        requeued: the entry of the sampled write's queue (requeue)."""
        if const_expr(requeued):
            return shared_load_u16(sm["write_queue"] + cutlass.min(entry, queued - 1) * 2)
        i = self.queue_entry(sm, entry, queued, everything)
        if queue_first is not None:
            i = _pick(queue_first != 0, self.queue_entry(sm, entry, queued, False), i)
        return i

    @cute.jit
    def exchange(self, sm, tid, rank, buffer, bins: cutlass.Constexpr = BINS):
        """Sum the copies of each of the pass's `bins` bins (zeroing them for the next
        pass) and add each non-zero bin into the total of every CTA (buffer's first `bins`
        words) and into the prefix of every higher rank (its next `bins`; DSMEM
        reductions): after the next cluster barrier every CTA holds the cluster's histogram
        and the histogram of the CTAs before it. A reduction sums counts and decides
        nothing, so its order cannot change the answer. On clusters of EXCHANGE_SPLIT_CLUSTER
        CTAs or more the T / bins threads of a bin (two at 256 bins and 512 threads) each
        sum its copies and make the reductions into every (T / bins)-th peer: one thread
        issues its reductions one after the other (~53 cycles each at 16 CTAs), and a bin's
        2C - 1 - rank of them on one thread were most of the exchange (bench/NOTES.md
        sessions 27, 28). A CTA barrier parts them: every part has summed the copies before
        part 0 zeroes them."""
        parts = self.threads // bins if self.cluster >= EXCHANGE_SPLIT_CLUSTER else 1
        if const_expr(parts == 1):
            if tid < bins:
                total = self.bin_copies(sm, tid, True, True)
                nonzero = _pick(total > 0, 1, 0)
                if const_expr(self.cluster == 1):  # no peers: the total is this CTA's own histogram
                    shared_red(buffer + tid * 4, total, nonzero)
                for p in cutlass.range_constexpr(self.cluster if self.cluster > 1 else 0):
                    self.reduce_into(p, rank, buffer, tid, bins, total, nonzero)
        else:
            b = tid % bins
            total = self.bin_copies(sm, b, True, False)
            cute.arch.sync_threads()
            if tid < bins:
                self.bin_copies(sm, b, False, True)
            nonzero = _pick(total > 0, 1, 0)
            for p in cutlass.range_constexpr(self.cluster):
                if tid // bins == p % parts:  # this part's peers only (warp-uniform)
                    self.reduce_into(p, rank, buffer, b, bins, total, nonzero)

    @cute.jit
    def bin_copies(self, sm, b, read: cutlass.Constexpr, zero: cutlass.Constexpr):
        """Bin b's HIST_COPIES copies, adjacent words read 16 bytes a load: their sum if
        read (else 0), and each 16 bytes zeroed after its load if zero."""
        total = Int32(0)
        for h in cutlass.range_constexpr(HIST_COPIES // 4):
            address = sm["copies"] + b * HIST_COPIES * 4 + h * 16
            if const_expr(read):
                for word in shared_load_u32x4(address):
                    total = total + Int32(word)
            if const_expr(zero):
                shared_store_u32x4(address, [Int32(0)] * 4)
        return total

    def reduce_into(self, p, rank, buffer, b, bins, total, nonzero):
        """Bin b's total into peer p's total, and into its prefix where p is a higher rank."""
        cluster_red(peer_address(buffer + b * 4, Int32(p)), total, nonzero)
        if const_expr(p > 0):
            cluster_red(peer_address(buffer + (bins + b) * 4, Int32(p)), total,
                        nonzero & _pick(rank < p, 1, 0))

    def prefix(self, lane, buffer, high, low, bins):
        """(keys > K, keys == K) of the CTAs before this one, K = (high << 8) | low: the
        prefix bins above high of the first pass, above low of the second, and low's, in
        the calling warp (lane l sums bins 8l .. 8l + 7 of both, one warp reduction; select
        calls it in warp 0). high None: a one-pass selection of `bins` bins (2.5: the
        sampled attempt's narrow pass, the window from the top), K's bin low, the bins
        above it (bins/32 a lane) and its own. At one CTA a row there are none: (0, 0)."""
        gt_base = Int32(0)
        eq_base = Int32(0)
        if const_expr(self.cluster > 1 and high is None):
            per = bins // 32
            prefix = buffer + bins * 4
            first = []
            for v in range(per // 4):
                first += shared_load_u32x4(prefix + (lane * per + 4 * v) * 4)
            acc = Int32(0)
            for j in range(per):
                acc = acc + _pick(lane * per + j > low, Int32(first[j]), 0)
            gt_base = cute.arch.warp_redux_sync(acc, "add")
            # (no bin, low = -1: an underflow, whose bases nothing reads)
            eq_base = shared_load_u32(prefix + cutlass.max(low, Int32(0)) * 4)
        elif const_expr(self.cluster > 1):
            first = shared_load_u32x4(buffer + 1024 + lane * 32) + shared_load_u32x4(buffer + 1024 + lane * 32 + 16)
            second = (shared_load_u32x4(buffer + 2048 + 1024 + lane * 32)
                      + shared_load_u32x4(buffer + 2048 + 1024 + lane * 32 + 16))
            acc = Int32(0)
            for j in range(8):
                b = lane * 8 + j
                acc = acc + _pick(b > high, Int32(first[j]), 0) + _pick(b > low, Int32(second[j]), 0)
            gt_base = cute.arch.warp_redux_sync(acc, "add")
            eq_base = shared_load_u32(buffer + 2048 + 1024 + low * 4)
        return gt_base, eq_base

    @cute.jit
    def store_chosen(self, out_row, chosen, slot, g, neg_inf):
        """Store the chosen lanes of global vector g (chosen_lanes) at slot, slot + 1, ...,
        lowest lane first: one store a chosen key, not a predicated store for each of the
        8 lanes. Why: the ranked write is bound by the instructions it issues; over 120
        points (1-128 rows x 32,768-262,144 logits, three kinds of data) the row took 0.942
        to 1.021 of the time, median 0.976 (bench/NOTES.md session 25). The value: token
        mode, the logit's index g * 8 + lane; block mode (g: the key vector's first block),
        the block's index g + lane, or -1 where bit lane of neg_inf is set (its key is
        -inf, 1.4)."""
        for _ in cutlass.range(popc(chosen), unroll=1):
            lowest, e = lowest_set_bit(chosen)  # the lowest chosen lane e
            value = g * 8 + e
            if const_expr(self.block_mode):
                value = _pick(((neg_inf >> e) & 1) != 0, -1, g + e)
            store_s32(out_row + Int64(slot) * 4, value, Int32(1))
            chosen = chosen ^ lowest
            slot = slot + 1

    @cute.jit
    def write_ranked(self, sm, tid, lane, queued, kth, above, gt_base, eq_base, start, length, nv, out_row,
                     trace_row, rank, everything: cutlass.Constexpr, streamed: cutlass.Constexpr = False,
                     queue_first=None, requeued: cutlass.Constexpr = False):
        """Write this CTA's selected keys at their canonical slots (SPEC.md 1.4, 2.7): a key
        > K goes to out[gtb + min(eqb, k - A)], a key == K with eqb < k - A to out[gtb +
        eqb], gtb / eqb the row's keys > K / == K at lower indices. Round r of the queue
        hands entry r T + t to thread t (index order). A first sweep counts each entry's
        keys > K and == K, packed gt | eq << 12 (a CTA holds fewer than k <= 2048 keys > K,
        and at most 8 T V <= 65,536 equal to K, so neither field carries); a warp scan gives
        each lane its warp's count below it, lane 31 stores the warp's total at (round,
        warp) of "grid", and the entry's flags (bit e: lane e > K, bit 8 + e: == K; block
        mode, bit 16 + e: lane e's block is -inf) with its warp prefix overwrite the first 8
        bytes of its own (key) vector in the stage, which nothing reads after the write. After one barrier
        every warp scans the grid in (round, warp) order, which is index order (grid_bases),
        for its own (round, warp) bases; a second sweep places the flagged keys. Why one
        scan: it is simpler than a CTA scan a round and measured as fast (3% faster to 1.8%
        slower, bench/NOTES.md session 7). Every slot of [0, k) is written once, by its
        owner. queue_first (the direct path, `everything`): where it is 1, the entries are
        the queue's (queue_vectors of the vectors of top >= K, 2.7), not every vector."""
        need = self.k - above
        warps = self.threads // 32
        warp = tid >> 5
        for first in cutlass.range(0, queued, self.threads):
            entry = first + tid
            i = self.write_entry(sm, entry, queued, everything or streamed, queue_first, requeued)
            flags = Int32(0)
            counts = Int32(0)
            if entry < queued:
                elements = self.elements(self.vector_words(sm, i), self.entry_vector(sm, i, start, streamed), length,
                                         nv)
                for e in cutlass.range_constexpr(len(elements)):
                    key, ok, unused = elements[e]
                    is_gt = ok & _pick(key > kth, 1, 0)
                    is_eq = ok & _pick(key == kth, 1, 0)
                    flags = flags | (is_gt << e) | (is_eq << (8 + e))
                    if const_expr(self.block_mode):  # the -inf bit only for a block it places
                        flags = flags | ((is_gt | is_eq) & _pick(key == KEY_NEG_INF, 1, 0)) << (16 + e)
                    counts = counts + is_gt + (is_eq << 12)
            inclusive = warp_inclusive_sum(counts, lane)
            if lane == 31:
                shared_store_u32(sm["grid"] + ((first // self.threads) * warps + warp) * 4, inclusive)
            if entry < queued:
                shared_store_u32x2(sm["stage"] + i * 16, flags, inclusive - counts)
        cute.arch.sync_threads()
        self.stamp(trace_row, rank, tid, "swept")
        before, unused = self.grid_bases(sm, lane, warp, self.grid_rounds)
        for first in cutlass.range(0, queued, self.threads):
            entry = first + tid
            base = cute.arch.shuffle_sync(before, self.grid_lane(first // self.threads, warp, self.grid_rounds))
            if entry < queued:
                i = self.write_entry(sm, entry, queued, everything or streamed, queue_first, requeued)
                flags, below = shared_load_u32x2(sm["stage"] + i * 16)
                if flags != 0:
                    below = below + base
                    chosen, slot = chosen_lanes(flags & 0xFF, (flags >> 8) & 0xFF, gt_base + (below & 0xFFF),
                                                eq_base + (below >> 12), need)
                    self.store_chosen(out_row, chosen, slot, self.entry_vector(sm, i, start, streamed),
                                      (flags >> 16) & 0xFF)

    @cute.jit
    def narrow_write(self, sm, tid, lane, rank, queued, lo, buffer, start, length, nv, out_row, trace_row,
                     streamed: cutlass.Constexpr):
        """The sampled attempt after its one pass of key - lo (2.5), exchanged in `buffer`:
        K's bin b with the prefixes of that pass (one selection, one barrier); b < 255:
        K = lo + b exactly and each CTA writes its keys; b = 255 (K >= lo + NARROW_SPAN):
        the narrow pass's overflow; no bin (fewer than k keys >= lo): underflow. Returns
        (status, K, A): status 0, 1 on underflow, 2 on the overflow (nothing written), as
        select_write's; streamed (2.12): status 2 when a CTA's queue overflowed, 3 on the
        narrow pass's overflow. (A streamed row's keys == lo that no queue holds need no
        place in the underflow test: a CTA leaves one out only after queueing k vectors of
        top == lo, so its queue alone holds k keys >= lo.)"""
        b, above, gt_base, eq_base = self.select(sm, tid, buffer, Int32(self.k), (buffer, None))
        status = _pick(b < 0, 1, _pick(b >= NARROW_SPAN, 3 if streamed else 2, 0))
        if const_expr(streamed):
            status = _pick(shared_load_u32(sm["misc"] + MISC_OVERFLOW) != 0, 2, status)
        kth = Int32(-1)
        if status == 0:
            kth = lo + b
            self.final_write(sm, tid, lane, queued, kth, above, gt_base, eq_base, start, length, nv, out_row,
                             trace_row, rank, False, streamed)
        else:
            above = Int32(-1)
        return status, kth, above

    @cute.jit
    def select_write(self, sm, tid, lane, rank, tops, lo, buffer, start, count, length, nv, out_row, trace_row,
                     attempt: cutlass.Constexpr, streamed: cutlass.Constexpr = False, top_key=None):
        """The selection among the keys >= lo (SPEC.md 2.5): queue, pass 1, exchange,
        barrier, K's high byte from the cluster's total; pass 2, exchange, barrier, its low
        byte; every CTA writes its own keys. Returns (status, K, A): status 1 (nothing
        written) when fewer than k keys are >= lo, which every CTA sees alike; 2 when a
        streamed queue overflowed or the staged attempt's one pass could not place K.
        attempt: the sampled attempt (lo its cutoff), else the direct path (lo = 0: every
        vector, and no queue before the write; the write's queue of 2.7 reads the tops of
        the slots a direct row fills). The sampled attempt makes one pass of key - lo
        instead of the two (narrow_write); where it cannot place K, a staged row takes the
        direct path and a streamed row the two passes over its queues. top_key (the direct
        path over the stage, token mode): the row's largest key M, from which one pass of
        TOP_BINS bins first tries to place K in `buffer` (2.5, two buffers wide), and the two
        passes in the two after it where K lies TOP_SPAN or more steps below M.
        streamed: a streamed row's queue of `count` vectors in the stage (2.12), whose keys
        == lo left out of it (MISC_DROPPED) count towards the two passes' underflow test
        (the narrow pass needs none of them: narrow_write), and whose trace counts the
        stream made."""
        everything = not attempt
        narrow = attempt  # the sampled attempt: one pass (2.5, 2.12)
        queued = count
        if const_expr(attempt and not streamed):
            queued = self.queue_vectors(sm, tid, lane, tops, lo, self.sampled_write_queue,
                                        not self.sampled_write_queue)
            self.stamp(trace_row, rank, tid, "queued")
        status = Int32(0)
        if const_expr(top_key is not None):
            self.stamp(trace_row, rank, tid, "top")  # M read (on a cluster after B0's wait, or an attempt's X1)
            self.first_pass(sm, tid, lane, rank, queued, top_key, buffer, start, length, nv, trace_row, PASS_TOP,
                            attempt, streamed)
            b, above, gt_base, eq_base = self.select(sm, tid, buffer, Int32(self.k), (buffer, None), TOP_BINS)
            kth = top_key - TOP_SPAN + b
            if b >= 1:
                self.final_write(sm, tid, lane, queued, kth, above, gt_base, eq_base, start, length, nv, out_row,
                                 trace_row, rank, everything, streamed, tops, count)
            else:
                passes = buffer + TOP_BINS * 8
                self.first_pass(sm, tid, lane, rank, queued, lo, passes, start, length, nv, trace_row, PASS_HIGH,
                                attempt, streamed)
                status, kth, above = self.passes_write(sm, tid, lane, rank, tops, queued, lo, passes, start, count,
                                                       length, nv, out_row, trace_row, everything, streamed)
        else:
            first_kind = PASS_HIGH
            if const_expr(narrow):
                first_kind = PASS_NARROW
            self.first_pass(sm, tid, lane, rank, queued, lo, buffer, start, length, nv, trace_row, first_kind,
                            attempt, streamed)
            if const_expr(narrow):
                status, kth, above = self.narrow_write(sm, tid, lane, rank, queued, lo, buffer, start, length, nv,
                                                       out_row, trace_row, streamed)
                if const_expr(streamed):
                    if status == 3:
                        # The streamed queues stay in shared memory: where the narrow pass
                        # cannot place K, the two passes over them in the next two buffers.
                        self.first_pass(sm, tid, lane, rank, queued, lo, buffer + 2048, start, length, nv, trace_row,
                                        PASS_HIGH, attempt, streamed)
                        status, kth, above = self.passes_write(sm, tid, lane, rank, tops, queued, lo, buffer + 2048,
                                                               start, count, length, nv, out_row, trace_row,
                                                               everything, streamed)
            else:
                status, kth, above = self.passes_write(sm, tid, lane, rank, tops, queued, lo, buffer, start, count,
                                                       length, nv, out_row, trace_row, everything, streamed)
        return status, kth, above

    @cute.jit
    def first_pass(self, sm, tid, lane, rank, queued, lo, buffer, start, length, nv, trace_row,
                   kind: cutlass.Constexpr, attempt: cutlass.Constexpr, streamed: cutlass.Constexpr):
        """select_write's first histogram pass of `kind` over the queue (every vector on
        the direct path), the attempt's trace counts, the exchange into `buffer` and its
        barrier."""
        everything = not attempt
        self.count_queued(sm, tid, lane, queued, lo, Int32(-1), start, length, nv, kind, everything, streamed)
        if const_expr(attempt and self.trace and not streamed):
            # The trace's gt and eq: warp sums into CTA 0's counters, read after the barrier.
            gt, eq = self.tally(sm, tid, queued, lo, start, length, nv)
            gt = cute.arch.warp_redux_sync(gt, "add")
            eq = cute.arch.warp_redux_sync(eq, "add")
            first = _pick(lane == 0, 1, 0)
            if const_expr(self.cluster == 1):
                shared_red(sm["misc"] + MISC_TRACE, gt, first)
                shared_red(sm["misc"] + MISC_TRACE + 4, eq, first)
            else:
                cluster_red(peer_address(sm["misc"] + MISC_TRACE, Int32(0)), gt, first)
                cluster_red(peer_address(sm["misc"] + MISC_TRACE + 4, Int32(0)), eq, first)
        cute.arch.sync_threads()
        self.stamp(trace_row, rank, tid, "pass1")
        self.exchange(sm, tid, rank, buffer, TOP_BINS if kind == PASS_TOP else BINS)
        self.barrier(tid)  # every CTA's pass-1 reductions complete before any total is read
        self.stamp(trace_row, rank, tid, "exchange1")
        if const_expr(attempt and self.trace):
            self.record(trace_row, rank, tid, "gt", shared_load_u32(sm["misc"] + MISC_TRACE))
            self.record(trace_row, rank, tid, "eq", shared_load_u32(sm["misc"] + MISC_TRACE + 4))

    @cute.jit
    def passes_write(self, sm, tid, lane, rank, tops, queued, lo, buffer, start, count, length, nv, out_row,
                     trace_row, everything: cutlass.Constexpr, streamed: cutlass.Constexpr):
        """select_write after pass 1 of the high bytes (exchanged in `buffer`): K's high
        byte, pass 2 of the low bytes, exchange, barrier, K's low byte with the prefixes,
        and each CTA's write. Returns select_write's (status, K, A)."""
        high, above_high, total = self.select(sm, tid, buffer, Int32(self.k))
        underflow = _pick(total < self.k, 1, 0)
        if const_expr(streamed):  # status 2: a queue overflowed (its passes counted a part)
            underflow = _pick(shared_load_u32(sm["misc"] + MISC_OVERFLOW) != 0, 2,
                              _pick(total + shared_load_u32(sm["misc"] + MISC_DROPPED) < self.k, 1, 0))
        kth = Int32(-1)
        above = Int32(-1)
        if underflow == 0:
            self.count_queued(sm, tid, lane, queued, lo, high, start, length, nv, PASS_LOW, everything, streamed)
            cute.arch.sync_threads()
            self.stamp(trace_row, rank, tid, "pass2")
            self.exchange(sm, tid, rank, buffer + 2048)
            self.barrier(tid)  # the same for pass 2; the last cluster barrier of the row
            self.stamp(trace_row, rank, tid, "exchange2")
            low, above_low, gt_base, eq_base = self.select(sm, tid, buffer + 2048, self.k - above_high,
                                                           (buffer, high))
            kth = (high << 8) | low
            above = above_high + above_low
            self.final_write(sm, tid, lane, queued, kth, above, gt_base, eq_base, start, length, nv, out_row,
                             trace_row, rank, everything, streamed, tops, count)
        return underflow, kth, above

    @cute.jit
    def requeue(self, sm, tid, lane, queued, kth):
        """The sampled write's queue (SPEC.md 2.7): the entries of the sampled attempt's
        queue whose top (queue_vectors kept it in "write_queue") is >= K, in queue order,
        which is index order; every key >= K lies in such a vector. Round r hands entry
        r T + t to thread t: a ballot a warp, its count in "grid" and its mask in "masks"
        at (round, warp); after one barrier every warp scans the counts (grid_bases) and
        each hit stores its vector's local index at its place in "write_queue", whose tops
        nothing reads any more. The rounds past the queue count 0, so that the scan's total
        is the new queue's length: returned."""
        warps = self.threads // 32
        warp = tid >> 5
        below = (Int32(1) << lane) - 1
        rounds = (queued + self.threads - 1) // self.threads
        if (tid >= rounds * warps) & (tid < self.grid_rounds * warps):
            shared_store_u32(sm["grid"] + tid * 4, Int32(0))
        for first in cutlass.range(0, queued, self.threads):
            entry = first + tid
            top = shared_load_u16(sm["write_queue"] + cutlass.min(entry, queued - 1) * 2)
            hits = ballot(_pick(entry < queued, 1, 0) & _pick(top >= kth, 1, 0))
            if lane == 0:
                at = ((first // self.threads) * warps + warp) * 4
                shared_store_u32(sm["grid"] + at, popc(hits))
                shared_store_u32(sm["masks"] + at, hits)
        cute.arch.sync_threads()
        before, total = self.grid_bases(sm, lane, warp, self.grid_rounds)
        for first in cutlass.range(0, queued, self.threads):
            entry = first + tid
            r = first // self.threads
            base = cute.arch.shuffle_sync(before, self.grid_lane(r, warp, self.grid_rounds))
            hits = shared_load_u32(sm["masks"] + (r * warps + warp) * 4)
            if ((hits >> lane) & 1) != 0:
                i = self.queue_entry(sm, entry, queued, False)
                shared_store_u16(sm["write_queue"] + (base + popc(hits & below)) * 2, i, Int32(1))
        cute.arch.sync_threads()
        return total

    @cute.jit
    def final_write(self, sm, tid, lane, queued, kth, above, gt_base, eq_base, start, length, nv, out_row,
                    trace_row, rank, everything: cutlass.Constexpr, streamed: cutlass.Constexpr, tops=None,
                    count=None):
        """The CTA's ranked write once K and A are known (2.7), and the "selected" and
        "placed" stamps; tops and count (the chunk's vectors) serve the direct path's write
        queue."""
        self.stamp(trace_row, rank, tid, "selected")
        if const_expr(everything and not streamed and self.write_queue):
            # The direct path's write over the vectors that can hold a key >= K, where
            # the chunk holds more than WRITE_QUEUE_VECTORS vectors a thread and no more
            # than the direct_slots the queue reads the tops of (2.7): CTA-uniform, as
            # count is. (A longer chunk is an underflowed sampled attempt's.)
            queue_first = _pick(count > WRITE_QUEUE_VECTORS * self.threads, 1, 0)
            if const_expr(self.direct_slots < self.vectors):
                queue_first = queue_first & _pick(count <= self.direct_slots * self.threads, 1, 0)
            if queue_first == 1:
                queued = self.queue_vectors(sm, tid, lane, tops[:self.direct_slots], kth)
            self.write_ranked(sm, tid, lane, queued, kth, above, gt_base, eq_base, start, length, nv, out_row,
                              trace_row, rank, everything, streamed, queue_first)
        elif const_expr(not everything and not streamed and self.sampled_write_queue):
            queued = self.requeue(sm, tid, lane, queued, kth)
            self.write_ranked(sm, tid, lane, queued, kth, above, gt_base, eq_base, start, length, nv, out_row,
                              trace_row, rank, everything, streamed, None, True)
        else:
            self.write_ranked(sm, tid, lane, queued, kth, above, gt_base, eq_base, start, length, nv, out_row,
                              trace_row, rank, everything, streamed)
        if const_expr(self.profile):
            cute.arch.sync_threads()  # "placed" means the whole CTA has placed its keys
        self.stamp(trace_row, rank, tid, "placed")


    # -- the streamed path (build 1x512x4, SPEC.md 2.12) ------------------------------------
    def stream_load(self, tid, row_logits, tile, length, start, end):
        """This thread's words of tile `tile` (slot s: global vector tile T U + s T + tid),
        STREAM_TILE x 4 of them: a vector's invalid lanes are not loaded (load_u32x4), and a
        vector past the row loads nothing (zeros)."""
        words = []
        for s in range(STREAM_TILE):
            g = start + tile * (STREAM_TILE * self.threads) + s * self.threads + tid
            lanes = _pick(g < end, clamp(length - g * 8, 8), 0)
            words += list(self.stream_vector(row_logits + Int64(_pick(lanes > 0, g, 0)) * 16, lanes))
        return words

    def prefetch_tiles(self, tid, row_logits, tile, start, end, length, nv):
        """The L2 prefetch of the STREAM_DEPTH - 1 tiles from tile `tile` of the chunk on
        (2.12), none past the chunk's end."""
        first = start + tile * (STREAM_TILE * self.threads)
        self.prefetch_vectors(tid, row_logits, first,
                              cutlass.min(first + (STREAM_DEPTH - 1) * STREAM_TILE * self.threads, end), length, nv)

    @cute.jit
    def stream_vector(self, address, lanes):
        """One vector of the stream: a whole one in a single load; the row's partial last
        one (one thread's, once a row) lane by lane, its invalid lanes filled with 0xFFFF
        (key 0, the least key, so its top is its valid lanes' largest); past the row,
        zeros (queue_tile takes no top from them)."""
        words = load_full_u32x4(address, _pick(lanes == 8, 1, 0))
        if (lanes > 0) & (lanes < 8):
            words = load_u32x4(address, lanes, 0xFFFF)
        return words

    @cute.jit
    def stream(self, sm, tid, lane, row_logits, nv, length, start, chunk, lo, need, high, out_row, base_gt, base_eq,
               mode: cutlass.Constexpr):
        """Read the row once from global memory, tile by tile (2.12): each thread loads its
        own words STREAM_DEPTH - 1 tiles ahead into registers (the loads are issued before
        the tile in hand is processed, and nothing waits on them until it is theirs), so no
        shared memory holds the row. mode "queue": the vectors whose top is > lo, and the
        first `need` whose top is == lo, into the queue (queue_tile); "out": each key > lo
        and the first `need` keys == lo written to the output row (the fallback's write, lo
        = K, need = k - A); "hist1" / "hist2": pass 1 / 2 of the selection over every key
        (high: pass 1's bin). The CTA's chunk [start, start + chunk) of the row; "out"
        counts from base_gt, base_eq (the keys of the CTAs before it). Returns five counts
        (the modes' own; zeros for the passes)."""
        per_tile = STREAM_TILE * self.threads
        tiles = (chunk + per_tile - 1) // per_tile
        end = start + chunk
        ahead = STREAM_DEPTH - 1
        # Why a loop unrolled `ahead` times over fixed buffers: a list rotated each tile
        # compiles to register moves, and a move waits for its register's load, so every
        # tile would wait for the load of the tile before it (measured: ~1.2 us a tile).
        if const_expr(self.stream_prefetch):
            self.prefetch_tiles(tid, row_logits, ahead, start, end, length, nv)
        bufs = [self.stream_load(tid, row_logits, Int32(j), length, start, end) for j in range(ahead)]
        c0 = base_gt
        c1 = base_eq
        c2 = Int32(0)
        c3 = Int32(0)
        c4 = Int32(0)
        for first in cutlass.range(0, tiles, ahead):
            if const_expr(self.stream_prefetch):
                # The tiles whose loads the next step issues (2.12): one prefetch a step.
                self.prefetch_tiles(tid, row_logits, first + 2 * ahead, start, end, length, nv)
            for j in cutlass.range_constexpr(ahead):
                tile = first + j
                words = bufs[j]
                vectors = []
                for s in cutlass.range_constexpr(STREAM_TILE):
                    # A vector past the chunk (another CTA's, loaded as zeros) is given
                    # the index nv, so that it holds no valid lane.
                    g = start + tile * per_tile + s * self.threads + tid
                    vectors.append((_pick(g < end, g, nv), tuple(words[4 * s:4 * s + 4])))
                if tile < tiles:  # the row's last unrolled step may run past it (uniform)
                    if const_expr(mode == "hist1" or mode == "hist2"):
                        for s in cutlass.range_constexpr(STREAM_TILE):
                            self.count_vector(sm, lane, vectors[s][1], vectors[s][0], Int32(1), Int32(0), high,
                                              length, nv, PASS_LOW if mode == "hist2" else PASS_HIGH, True)
                    elif const_expr(mode == "queue"):
                        c0, c1, c2, c3, c4 = self.queue_tile(sm, tid, lane, tile & 1, vectors, lo, need, length,
                                                             c0, c1, c2, c3, c4)
                    else:
                        c0, c1 = self.compact_tile(sm, tid, lane, vectors, lo, need, length, c0, c1, out_row)
                # The whole list is rebound (a loop-carried name), each buffer in its place.
                bufs = bufs[:j] + [self.stream_load(tid, row_logits, tile + ahead, length, start, end)] + bufs[j + 1:]
        return c0, c1, c2, c3, c4

    def pair_scan(self, grid, lane, warp, slots):
        """Every warp's exclusive scan of a tile's (slot, warp) counts in shared words grid[0
        .. slots T/32), which is index order: this warp's base a slot, and the tile's total.
        A lane sums one or two consecutive words (at most 64: __init__); every lane takes
        part in every shuffle."""
        warps = self.threads // 32
        pairs = slots * warps
        per = (pairs + 31) // 32
        words = [_pick(lane * per + i < pairs,
                       shared_load_u32(grid + cutlass.min(lane * per + i, Int32(pairs - 1)) * 4), 0)
                 for i in range(per)]
        mine = words[0] if per == 1 else words[0] + words[1]
        inclusive = warp_inclusive_sum(mine, lane)
        before = inclusive - mine
        bases = []
        for s in range(slots):
            j = s * warps + warp
            base = cute.arch.shuffle_sync(before, j // per)
            if per == 2:  # the lane's first word, when j is its second
                base = base + _pick((j & 1) == 1, cute.arch.shuffle_sync(words[0], j >> 1), 0)
            bases.append(base)
        return bases, cute.arch.shuffle_sync(inclusive, 31)

    @cute.jit
    def queue_tile(self, sm, tid, lane, parity, vectors, lo, need, length, run_gv, run_ev, dropped, gt, eq):
        """One tile of the streamed row's queue (2.12 step 2): a vector whose top is > lo
        goes to queue slot gvb + min(evb, need), one whose top is == lo with evb < need to
        gvb + evb (gvb / evb: the row's vectors of top > lo / == lo at lower indices: the
        counts before the tile, the tile's (slot, warp) scan of ballot counts, the lanes
        below), its words to the stage and its index beside them, if below STREAM_QUEUE.
        Counts what the queue cannot show: `dropped`, the keys == lo of the vectors of top
        == lo it leaves out, and in trace builds the row's keys > lo and == lo (gt, eq).
        One barrier a tile: the (slot, warp) counts sit in grid half `parity`, so the next
        tile, which stores into the other half, cannot overwrite what a slow warp still
        reads, and the tile after it stores only after the next barrier."""
        warps = self.threads // 32
        warp = tid >> 5
        below = (Int32(1) << lane) - 1
        grid = sm["grid"] + parity * 256
        tested = []
        for s in cutlass.range_constexpr(len(vectors)):
            g, words = vectors[s]
            valid = cutlass.min(cutlass.max(length - g * 8, Int32(0)), Int32(8))
            keys = [key_word(w) for w in words]  # a partial vector's invalid lanes: key 0 (stream_vector)
            pair = max_u16x2(max_u16x2(keys[0], keys[1]), max_u16x2(keys[2], keys[3]))
            top = _pick(valid > 0, cutlass.max(Int32(pair & Uint32(0xFFFF)), Int32(pair >> 16)), -1)
            above = _pick(top > lo, 1, 0)
            equal = _pick(top == lo, 1, 0)
            above_lanes = ballot(above)
            equal_lanes = ballot(equal)
            if lane == 0:
                shared_store_u32(grid + (s * warps + warp) * 4, popc(above_lanes) | (popc(equal_lanes) << 16))
            tested.append((above, equal, valid, popc(above_lanes & below), popc(equal_lanes & below)))
        cute.arch.sync_threads()
        bases, total = self.pair_scan(grid, lane, warp, len(vectors))
        for s in cutlass.range_constexpr(len(vectors)):
            g, words = vectors[s]
            above, equal, valid, above_rank, equal_rank = tested[s]
            base = bases[s]
            gvb = run_gv + (base & 0xFFFF) + above_rank
            evb = run_ev + (base >> 16) + equal_rank
            slot = gvb + _pick(above, cutlass.min(evb, need), evb)
            take = above | (equal & _pick(evb < need, 1, 0))
            if (take != 0) & (slot < STREAM_QUEUE):
                shared_store_u32x4(sm["stage"] + slot * 16, words)
                shared_store_u32(sm["index"] + slot * 4, g)
            counted = equal & (1 - take)
            if const_expr(self.trace):
                counted = above | equal
            if counted != 0:
                keys = [key_word(w) for w in words]
                for e in cutlass.range_constexpr(8):
                    key = word_key(keys, e)
                    ok = _pick(e < valid, 1, 0)
                    dropped = dropped + (equal & (1 - take) & ok & _pick(key == lo, 1, 0))
                    if const_expr(self.trace):
                        gt = gt + (ok & _pick(key > lo, 1, 0))
                        eq = eq + (ok & _pick(key == lo, 1, 0))
        return run_gv + (total & 0xFFFF), run_ev + (total >> 16), dropped, gt, eq

    @cute.jit
    def compact_tile(self, sm, tid, lane, vectors, lo, need, length, run_gt, run_eq, out_row):
        """One tile of the fallback's write (2.12 step 5): each key > lo goes to out[gtb +
        min(eqb, need)], each key == lo with eqb < need to out[gtb + eqb] (gtb / eqb: the
        row's keys > lo / == lo at lower indices). Returns run_gt, run_eq after the tile. In
        two steps, because a row's vectors rarely hold a key >= lo (4% at 1M logits) yet
        most warps hold one such vector, and the key-by-key test would cost every such warp
        its whole issue: (1) every lane tests its vectors' tops (over all 8 lanes: a
        zero-filled lane past the length, +0, can only make it pass, and the exact test
        masks it) and the hits move, in index order (ballot ranks in the warp, a scan over
        the (slot, warp) counts), into the tile's queue in the stage;
        (2) the queue's entries, a thread each, are tested key by key and placed (the
        ranked write's scan over them). Two barriers a tile, and tile_scan's one a round of
        its queue."""
        warps = self.threads // 32
        warp = tid >> 5
        below = (Int32(1) << lane) - 1
        ranks = []
        for s in cutlass.range_constexpr(len(vectors)):
            g, words = vectors[s]
            keys = [key_word(w) for w in words]
            pair = max_u16x2(max_u16x2(keys[0], keys[1]), max_u16x2(keys[2], keys[3]))
            top = cutlass.max(Int32(pair & Uint32(0xFFFF)), Int32(pair >> 16))
            hit = _pick(top >= lo, 1, 0)
            hits = ballot(hit)
            if lane == 0:
                shared_store_u32(sm["grid"] + (s * warps + warp) * 4, popc(hits))
            ranks.append((hit, popc(hits & below)))
        cute.arch.sync_threads()
        slot_bases, queued = self.pair_scan(sm["grid"], lane, warp, len(vectors))
        for s in cutlass.range_constexpr(len(vectors)):
            g, words = vectors[s]
            hit, rank_in_warp = ranks[s]
            slot = slot_bases[s] + rank_in_warp
            if hit != 0:
                shared_store_u32x4(sm["stage"] + slot * 16, words)
                shared_store_u32(sm["stage"] + self.tile_words + slot * 4, g)
        cute.arch.sync_threads()
        for first in cutlass.range(0, queued, self.threads):
            entry = first + tid
            present = _pick(entry < queued, 1, 0)
            at = cutlass.min(entry, queued - 1)
            words = shared_load_u32x4(sm["stage"] + at * 16)
            g = shared_load_u32(sm["stage"] + self.tile_words + at * 4)
            keys = [key_word(w) for w in words]
            valid = _pick(present != 0, length - g * 8, 0)
            gt_bits = Int32(0)
            eq_bits = Int32(0)
            for e in cutlass.range_constexpr(8):
                key = word_key(keys, e)
                ok = _pick(e < valid, 1, 0)
                gt_bits = gt_bits | ((ok & _pick(key > lo, 1, 0)) << e)
                eq_bits = eq_bits | ((ok & _pick(key == lo, 1, 0)) << e)
            count = popc(gt_bits) | (popc(eq_bits) << 16)
            bases, total = self.tile_scan(sm, tid, lane, (first // self.threads) & 1, [count],
                                          [warp_inclusive_sum(count, lane)])
            if (gt_bits | eq_bits) != 0:
                chosen, slot = chosen_lanes(gt_bits, eq_bits, run_gt + (bases[0] & 0xFFFF),
                                            run_eq + (bases[0] >> 16), need)
                self.store_chosen(out_row, chosen, slot, g, Int32(0))
            run_gt = run_gt + (total & 0xFFFF)
            run_eq = run_eq + (total >> 16)
        return run_gt, run_eq

    @cute.jit
    def tile_scan(self, sm, tid, lane, parity, counts, inclusives):
        """The scan of one tile (or list round) in (slot, warp, lane) order, which is index
        order: counts holds this lane's packed count (gt | eq << 16; a tile has at most
        8 T U < 65,536 keys, so no field carries) a slot and inclusives its warp's
        inclusive sum up to this lane. Returns each slot's exclusive base for this lane
        within the tile and the tile's total. One barrier: the (slot, warp) totals sit in
        grid half `parity`, so the next tile, which stores into the other half, cannot
        overwrite what a slow warp still reads, and the tile after it stores only after
        the next barrier, which every warp passes after its reads."""
        warps = self.threads // 32
        warp = tid >> 5
        grid = sm["grid"] + 256 + parity * 128  # past compact_tile's (slot, warp) counts
        for s in cutlass.range_constexpr(len(counts)):
            if lane == 31:
                shared_store_u32(grid + (s * warps + warp) * 4, inclusives[s])
        cute.arch.sync_threads()
        pairs = len(counts) * warps  # at most 32 (__init__): one a lane
        mine = _pick(lane < pairs, shared_load_u32(grid + cutlass.min(lane, Int32(pairs - 1)) * 4), 0)
        inclusive = warp_inclusive_sum(mine, lane)
        before = inclusive - mine
        bases = [inclusives[s] - counts[s] + cute.arch.shuffle_sync(before, s * warps + warp)
                 for s in range(len(counts))]
        return bases, cute.arch.shuffle_sync(inclusive, 31)

    def cluster_add(self, sm, word, value, predicate, to_all):
        """Add value into misc word `word` of every CTA of the row (to_all) or of CTA 0,
        if predicate != 0: DSMEM reductions, or at one CTA a row its own shared memory."""
        if const_expr(self.cluster == 1):
            shared_red(sm["misc"] + word, value, predicate)
        else:
            for p in range(self.cluster if to_all else 1):
                cluster_red(peer_address(sm["misc"] + word, Int32(p)), value, predicate)

    @cute.jit
    def stream_attempt(self, sm, tid, lane, rank, tops, row_logits, cutoff, length, nv, start, chunk, out_row,
                       trace_row):
        """The streamed row (2.12 steps 2-4): each CTA streams its chunk into its queue;
        then the selection of 2.5 over the queues. What the queues cannot show is summed
        over the cluster before the selection's first exchange barrier: the keys == cutoff
        they left out, the CTAs whose queue overflowed, and (trace builds) the row's keys
        > cutoff and == cutoff. Returns (reason, K, A): reason 2 (underflow) or 1
        (overflow) with nothing written, else 0."""
        gv, ev, dropped, gt, eq = self.stream(sm, tid, lane, row_logits, nv, length, start, chunk, cutoff,
                                              Int32(self.k), Int32(-1), out_row, Int32(0), Int32(0), "queue")
        queued = gv + cutlass.min(ev, Int32(self.k))
        # The last tile's entries are stored by the threads that met them, and pass 1 reads
        # each entry in another thread (racecheck saw it: bench/NOTES.md session 10).
        cute.arch.sync_threads()
        first = _pick(lane == 0, 1, 0)
        self.cluster_add(sm, MISC_DROPPED, cute.arch.warp_redux_sync(dropped, "add"), first, True)
        self.cluster_add(sm, MISC_OVERFLOW, Int32(1), _pick((tid == 0) & (queued > STREAM_QUEUE), 1, 0), True)
        if const_expr(self.trace):
            self.cluster_add(sm, MISC_TRACE, cute.arch.warp_redux_sync(gt, "add"), first, False)
            self.cluster_add(sm, MISC_TRACE + 4, cute.arch.warp_redux_sync(eq, "add"), first, False)
        self.stamp(trace_row, rank, tid, "queued")
        status, kth, above = self.select_write(sm, tid, lane, rank, tops, cutoff, sm["exchange"], Int32(0),
                                               cutlass.min(queued, Int32(STREAM_QUEUE)), length, nv, out_row,
                                               trace_row, True, True)
        # (select_write's status 3, the one pass's overflow, never leaves it: the two passes
        # over the queues follow, which place K: their total is the one pass's, >= k.)
        return _pick(status == 1, 2, _pick(status == 2, 1, 0)), kth, above

    @cute.jit
    def global_direct(self, sm, tid, lane, rank, row_logits, length, nv, start, chunk, out_row, trace_row):
        """The direct path from global memory (2.12 step 5): passes 1 and 2 over every key
        of each CTA's chunk, streamed, into the histogram copies and exchange buffers 1 and
        2 (the attempt used at most 0), then each CTA's compaction with K and k - A into
        the output row, counted from the keys > K and == K of the CTAs before it (the
        exchanges' prefixes). Returns (K, A)."""
        buffer = sm["exchange"] + 2048
        self.stream(sm, tid, lane, row_logits, nv, length, start, chunk, Int32(0), Int32(0), Int32(-1), out_row,
                    Int32(0), Int32(0), "hist1")
        cute.arch.sync_threads()
        self.stamp(trace_row, rank, tid, "pass1")
        self.exchange(sm, tid, rank, buffer)
        self.barrier(tid)
        high, above_high, unused = self.select(sm, tid, buffer, Int32(self.k))
        self.stream(sm, tid, lane, row_logits, nv, length, start, chunk, Int32(0), Int32(0), high, out_row,
                    Int32(0), Int32(0), "hist2")
        cute.arch.sync_threads()
        self.stamp(trace_row, rank, tid, "pass2")
        self.exchange(sm, tid, rank, buffer + 2048)
        self.barrier(tid)
        low, above_low, gt_base, eq_base = self.select(sm, tid, buffer + 2048, self.k - above_high, (buffer, high))
        kth = (high << 8) | low
        above = above_high + above_low
        self.stream(sm, tid, lane, row_logits, nv, length, start, chunk, kth, self.k - above, Int32(-1), out_row,
                    gt_base, eq_base, "out")
        self.stamp(trace_row, rank, tid, "placed")
        return kth, above


# ---------------------------------------------------------------------------------------
# The register build (SPEC.md 2.13): one CTA of 512 threads a row of at most 8,192 logits,
# two vectors a thread kept in registers.
# ---------------------------------------------------------------------------------------
# The register build stages its write a warp at a time from this k on (write_chosen).
STAGED_WRITE_K = 2048


class DecodeTopKRegister:
    """The decode top-k of token rows of at most 512 x 2 x 8 = 8,192 logits, the register
    build 1x512x2 (SPEC.md 2.13): one CTA of T = 512 threads a row, thread t holding vectors
    Vt .. Vt + V - 1 (V = 2: logits 16t .. 16t + 15) in registers from its loads to its last
    write. K is placed by
    one pass of the window from the row's largest key M (TOP_BINS bins, as the staged
    builds' direct path), or where it lies TOP_SPAN or more steps below M by a pass of
    `key >> REG_FINE_SHIFT` into REG_BINS bins and a pass of the low REG_FINE_SHIFT bits of
    the keys of K's bin into 16; the write is one CTA scan of each thread's (gt, eq) counts
    in thread order, which is index order. No cluster, no DSMEM, no second read of the row,
    four `bar.sync` (seven where the window cannot place K). Why a class of its own:
    DecodeTopK's code at 1024 threads a CTA measured slower, not faster (bench/NOTES.md
    sessions 6, 12, 17). Why 512 threads of two vectors, not 1024 of one (sessions 20-29):
    the build is bound by what its warps issue, and half the warps issue its fixed steps
    (M, the selections' broadcasts, the scans, the write's setup) half as often.

    k: 512, 1024 or 2048; trace / profile: as DecodeTopK's. Token mode only: block rows
    keep the staged builds."""

    def __init__(self, k: int, trace: bool = False, profile: bool = False):
        if k not in KS:
            raise ValueError(f"k={k} is not one of {KS}")
        self.k = k
        self.cluster = 1
        self.threads = REGISTER.threads
        self.vectors = REGISTER.vectors  # V: 16-byte vectors a thread, in registers
        self.block_mode = False
        self.streams = False
        self.trace = bool(trace) or bool(profile)
        self.profile = bool(profile)
        self.profile_rank = 0  # the CTA whose stamps the profile build records (stamp)
        self.trace_width = len(TRACE_FIELDS) + (len(PROFILE_STAMPS) if profile else 0)
        # Shared memory, byte offsets: "trash" a word a lane for the passes' uncounted keys
        # (right below "hist": a stray key's pass-1 bin -(lane + 1) is its lane's word),
        # "hist" the first pass's REG_BINS bins (zeroed at entry, V 16-byte stores a
        # thread), "fine" the second pass's 16 bins, "totals" the warps' sums of the first
        # selection and "scan" those of the write (a word a warp), "misc" the first pass's
        # answer (bin, count above: words 0, 1) and the window's (DecodeTopK.select's, at
        # MISC_RESULT), "window" the window from the top's
        # TOP_BINS bins (zeroed at entry), "maxima" each warp's largest key.
        regions = (("trash", 128), ("hist", REG_BINS * 4), ("fine", 64), ("totals", 128), ("scan", 128),
                   ("misc", MISC_BYTES), ("window", TOP_BINS * 4), ("maxima", 128))
        self.offsets, self.smem_bytes = smem_layout(regions)
        if self.offsets["hist"] - self.offsets["trash"] != 32 * 4:
            raise ValueError("a stray key's pass-1 bin -(lane + 1) must be its lane's trash word")
        if REG_BINS != 4 * self.vectors * self.threads:
            raise ValueError("the first pass's bins are zeroed and selected 4 V a thread")

    @cute.jit
    def __call__(self, logits: cute.Tensor, lengths: cute.Tensor, out: cute.Tensor, trace: cute.Tensor,
                 stream: cuda.CUstream):
        """As DecodeTopK.__call__: one CTA a row."""
        self.kernel(logits, lengths, out, trace).launch(
            grid=[logits.shape[0], 1, 1], block=[self.threads, 1, 1], cluster=[1, 1, 1], stream=stream,
            use_pdl=True, min_blocks_per_mp=1)

    @cute.kernel
    def kernel(self, logits: cute.Tensor, lengths: cute.Tensor, out: cute.Tensor, trace: cute.Tensor):
        """One CTA a row (the class docstring)."""
        nt, k = self.threads, self.k
        tid = cute.arch.thread_idx()[0]
        row = cute.arch.block_idx()[0]
        rank = Int32(0)  # one CTA a row (the trace's and the stamps' CTA 0)
        lane = tid & 31
        warp = tid >> 5
        allocator = cutlass.memory.SmemAllocator()
        base = allocator.allocate_array(cutlass.Uint8, self.smem_bytes, byte_alignment=16).toint()
        sm = {name: base + offset for name, offset in self.offsets.items()}
        trace_row = trace.iterator.toint() + Int64(row) * (self.trace_width * 4)
        self.stamp(trace_row, rank, tid, "start")
        for v in cutlass.range_constexpr(self.vectors):
            shared_store_u32x4(sm["hist"] + (tid * self.vectors + v) * 16, [Int32(0)] * 4)
        if tid < 4:
            shared_store_u32x4(sm["fine"] + tid * 16, [Int32(0)] * 4)
        if tid < TOP_BINS // 4:
            shared_store_u32x4(sm["window"] + tid * 16, [Int32(0)] * 4)

        cute.arch.griddepcontrol_wait()
        # Thread t's vectors Vt .. Vt + V - 1, loaded before the length is known, so that the
        # row's load and the length's overlap (about 1,000 cycles each from HBM): every lane
        # inside the row's width (1.1: nothing past the width is read; lanes at or past the
        # length are read and never counted), one 16-byte load a whole vector, the width's
        # one partial vector lane by lane.
        row_logits = logits.iterator.toint() + Int64(row) * Int64(logits.layout.stride[0]) * 2
        words = []
        for v in cutlass.range_constexpr(self.vectors):
            g = tid * self.vectors + v
            reach = clamp(logits.shape[1] - g * 8, 8)
            address = row_logits + Int64(g) * 16
            vector = load_full_u32x4(address, _pick(reach == 8, 1, 0))
            if (reach > 0) & (reach < 8):
                vector = load_u32x4(address, reach)
            words += list(vector)
        length = row_length(logits, lengths, row)
        out_row = out.iterator.toint() + Int64(row) * (k * 4)
        self.stamp(trace_row, rank, tid, "inputs")
        for f in cutlass.range_constexpr(len(TRACE_FIELDS)):
            self.record(trace_row, rank, tid, TRACE_FIELDS[f], Int32(0) if f < 2 else Int32(-1))
        if length <= k:
            # Short rows (1.4): out[j] = j below the length, -1 from it; no logit counted.
            cute.arch.griddepcontrol_launch_dependents()
            for j in cutlass.range(tid, k, nt):
                store_s32(out_row + Int64(j) * 4, _pick(j < length, j, -1), Int32(1))
        else:
            # A key at or past the length becomes its lane's stray key -16 (lane + 1): below
            # every real key (0 .. 0xFFFF), so no selection counts it and no write takes it,
            # and its pass-1 bin -(lane + 1) is the lane's own word of "trash", which sits
            # just below "hist" (no validity flag a key, and no two lanes at one address).
            ne = 8 * self.vectors  # logits a thread
            lanes = clamp(length - tid * ne, ne)
            kw = [key_word(w) for w in words]
            stray = Int32(-16) - lane * 16
            keys = [_pick(e < lanes, word_key(kw, e), stray) for e in range(ne)]
            # Each warp's largest key (a stray key is below every real one), for the row's M.
            mine = keys[0]
            for e in cutlass.range_constexpr(1, ne):
                mine = cutlass.max(mine, keys[e])
            self.store_warp_max(sm["maxima"], tid, lane, mine)
            # Every thread has zeroed its bins before any thread adds into them (the
            # loads are in flight meanwhile). Without this barrier a warp that runs ahead
            # adds into bins not yet zeroed: wrong answers under compute-sanitizer's
            # racecheck (26 contract violations at k = 2048, session 20's gate), where warps
            # are serialized; no hazard was reported, because red.shared is an atomic.
            cute.arch.sync_threads()
            self.stamp(trace_row, rank, tid, "staged")

            # The window from the top: the row's largest key M (each warp's, stored before the
            # barrier above), then every key's window_bin(M, key, TOP_SPAN) into TOP_BINS bins,
            # a stray key's 1 into its lane's trash word (near a small M its bin could be a
            # real key's). Why: where K lies within TOP_SPAN steps of M (every row of the
            # grid but Gaussian 4,096 at k = 2048) one pass and warp 0's selection place it,
            # two `bar.sync` and the second pass fewer than the two passes: 0.92-0.98 of the
            # time at 8,192 logits (SPEC.md 2.13, bench/NOTES.md session 29).
            # Lane l reads warp l mod 16's word: a repeat moves no maximum, and no lane reads
            # a word no warp wrote.
            top = cute.arch.warp_redux_sync(shared_load_u32(sm["maxima"] + (lane % (nt // 32)) * 4), "max")
            for key in keys:
                shared_add(_pick(key >= 0, sm["window"] + window_bin(top, key, TOP_SPAN) * 4, sm["trash"] + lane * 4),
                           Int32(1))
            cute.arch.sync_threads()
            # Every thread's vectors are in its registers and counted: the row is read (2.10).
            cute.arch.griddepcontrol_launch_dependents()
            self.stamp(trace_row, rank, tid, "pass1")
            b, above, unused_total = self.select(sm, tid, sm["window"], Int32(k), None, TOP_BINS)
            kth = top - TOP_SPAN + b
            self.stamp(trace_row, rank, tid, "exchange1")
            if b < 1:
                # K lies TOP_SPAN or more steps below M: the two passes.
                kth, above = self.two_passes(sm, tid, lane, warp, keys)
            need = k - above
            self.stamp(trace_row, rank, tid, "selected")

            # The ranked write: thread t's keys > K (bits gt) and == K (bits eq), their counts
            # packed gt | eq << 16 (at most 8,192 each), one CTA scan in thread order.
            gt = Int32(0)
            eq = Int32(0)
            for e in cutlass.range_constexpr(ne):
                gt = gt | (_pick(keys[e] > kth, 1, 0) << e)
                eq = eq | (_pick(keys[e] == kth, 1, 0) << e)
            ties = popc(eq)
            below = self.cta_exclusive_sum(sm["scan"], popc(gt) + (ties << 16), lane, warp)
            self.stamp(trace_row, rank, tid, "swept")
            self.write_chosen(out_row, sm["hist"], tid, lane, gt, eq, below & 0xFFFF, below >> 16, need)
            self.stamp(trace_row, rank, tid, "placed")
            self.record(trace_row, rank, tid, "path", Int32(2))
            self.record(trace_row, rank, tid, "kth", kth)
            self.record(trace_row, rank, tid, "above", above)
        self.stamp(trace_row, rank, tid, "end")

    @cute.jit
    def two_passes(self, sm, tid, lane, warp, keys):
        """(K, A) by the two passes (2.13), where the window from the top cannot place K:
        pass 1 of key >> REG_FINE_SHIFT into REG_BINS bins and its selection, pass 2 of the
        low bits of the keys of K's bin into 16 bins and its selection."""
        k = self.k
        self.count_high(sm["hist"], keys)
        cute.arch.sync_threads()
        high, above1 = self.select_high(sm, tid, lane, warp, Int32(k))
        # Few keys count here, so no uniform-warp test: each key adds 1, an uncounted one
        # into the lane's own trash word, so the adds neither branch (as predicated adds
        # do) nor meet at one address (bench/NOTES.md session 20).
        for key in keys:
            shared_add(_pick((key >> REG_FINE_SHIFT) == high, sm["fine"] + (key & REG_FINE_MASK) * 4,
                             sm["trash"] + lane * 4), Int32(1))
        cute.arch.sync_threads()
        low, above2 = self.select_low(sm, lane, k - above1)
        return (high << REG_FINE_SHIFT) | low, above1 + above2

    def count_high(self, hist, keys):
        """Pass 1: each key's bin key >> REG_FINE_SHIFT into "hist", one add of 1 a key with
        no warp-uniform test (SPEC.md 2.8, 2.13), a stray key's (its bin -(lane + 1)) into its
        lane's trash word below "hist"."""
        for key in keys:
            shared_add(hist + (key >> REG_FINE_SHIFT) * 4, Int32(1))

    @cute.jit
    def write_chosen(self, out_row, staging, tid, lane, gt, eq, rank_gt, rank_eq, need):
        """The ranked write of one thread (1.4, 2.13): its keys > K (bits gt) all, its keys == K
        (bits eq) while their rank among the row's is below need, the lowest first, at
        consecutive slots from the first's (chosen_lanes); a loop over the chosen bits (lowest
        first) stores only those (at k = 512 most threads choose none). At k = 2048
        (STAGED_WRITE_K) the loop puts them in `staging` (k words of shared memory, the first
        pass's bins, unread since its selection) instead: a warp's slots are one run, from its
        lane 0's first to its lane 31's last, so after a __syncwarp the warp copies its run out,
        lane l taking every 32nd word from the l-th, consecutive words a store, where the chosen
        keys' own stores scatter over the run (about 8 sectors a store). Measured in session 21:
        196-241 fewer cycles at k = 2048, 212-274 more at k = 512, where few keys are chosen."""
        chosen, slot = chosen_lanes(gt, eq, rank_gt, rank_eq, need)
        staged = self.k >= STAGED_WRITE_K
        if const_expr(staged):
            first = cute.arch.shuffle_sync(slot, 0)
            end = cute.arch.shuffle_sync(slot + popc(chosen), 31)
        for _ in cutlass.range(popc(chosen)):
            lowest = chosen & (0 - chosen)
            index = tid * (8 * self.vectors) + popc(lowest - 1)
            if const_expr(staged):
                shared_store_u32(staging + slot * 4, index)
            else:
                store_s32(out_row + Int64(slot) * 4, index, Int32(1))
            chosen = chosen ^ lowest
            slot = slot + 1
        if const_expr(staged):
            cute.arch.sync_warp()
            for j in cutlass.range(first + lane, end, 32):
                store_s32(out_row + Int64(j) * 4, shared_load_u32(staging + j * 4), Int32(1))

    @cute.jit
    def select_high(self, sm, tid, lane, warp, q):
        """(bin, count above) of the q-th largest key in the REG_BINS bins of "hist", in
        every thread (q <= the row's keys). Thread t sums the 4V bins REG_BINS - 4V - 4Vt ..
        REG_BINS - 1 - 4Vt (V 16-byte loads; thread order is descending bin order), a warp
        scan and one of the warp totals (every warp for itself, after one barrier) give it
        the keys in the bins above its own, and the one thread whose bins hold the q-th
        largest key stores the answer; a second barrier hands it to every thread."""
        nb = 4 * self.vectors
        top = REG_BINS - 1 - nb * tid
        counts = []  # bin top - j
        for v in cutlass.range_constexpr(self.vectors):
            words = shared_load_u32x4(sm["hist"] + (top - 4 * v - 3) * 4)  # bins top - 4v - 3 .. top - 4v
            counts += [Int32(words[3 - j]) for j in range(4)]
        mine = counts[0]
        for j in cutlass.range_constexpr(1, nb):
            mine = mine + counts[j]
        acc = self.cta_exclusive_sum(sm["totals"], mine, lane, warp)  # the keys in the bins above
        if (acc < q) & (q <= acc + mine):
            found = Int32(-1)
            found_above = Int32(0)
            for j in cutlass.range_constexpr(nb):
                hit = (found < 0) & (acc + counts[j] >= q)
                found_above = _pick(hit, acc, found_above)
                found = _pick(hit, top - j, found)
                acc = acc + counts[j]
            shared_store_u32x2(sm["misc"], found, found_above)
        cute.arch.sync_threads()
        return shared_load_u32x2(sm["misc"])

    def select_low(self, sm, lane, q):
        """(bin, count above) of the q-th largest key in the 16 bins of "fine" (q <= their
        total), every warp for itself with no barrier: lane l holds bin 15 - l (lanes 16-31
        none), a warp scan counts from the top, and the lowest lane whose count reaches q
        (a ballot; its lowest set bit, popc((b & -b) - 1)) holds the bin."""
        bins = REG_FINE_MASK + 1
        count = _pick(lane < bins, shared_load_u32(sm["fine"] + ((REG_FINE_MASK - lane) & REG_FINE_MASK) * 4), 0)
        inclusive = warp_inclusive_sum(count, lane)
        hits = ballot(_pick(inclusive >= q, 1, 0))
        first = popc((hits & (0 - hits)) - 1)
        return REG_FINE_MASK - first, cute.arch.shuffle_sync(inclusive - count, first)

    @cute.jit
    def cta_exclusive_sum(self, scan, value, lane, warp):
        """The sum of value over the CTA's threads below this one (thread order): a warp
        scan, the warp totals in `scan` (lane 31's), one barrier, and every warp's own scan
        of them."""
        inclusive = warp_inclusive_sum(value, lane)
        if lane == 31:
            shared_store_u32(scan + warp * 4, inclusive)
        cute.arch.sync_threads()
        warps = self.threads // 32
        # Lane l reads warp l's total, 0 past the last warp (the load's address kept inside
        # the words the warps wrote).
        word = _pick(lane < warps, shared_load_u32(scan + (lane % warps) * 4), 0)
        totals = warp_inclusive_sum(word, lane)
        return inclusive - value + cute.arch.shuffle_sync(totals - word, warp)

    # The trace, the profile stamps, the window's selection (warp 0's, its answer at
    # MISC_RESULT of "misc") and the warps' largest keys: DecodeTopK's, with rank 0 (one
    # CTA a row).
    record = DecodeTopK.record
    stamp = DecodeTopK.stamp
    select = DecodeTopK.select
    store_warp_max = DecodeTopK.store_warp_max


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


def make_decode_topk(k, cluster, vector_count, block_mode, trace=False, profile=False):
    """The kernel object of one variant: DecodeTopKRegister for the register build (token
    mode only: ValueError in block mode), else DecodeTopK."""
    if Build.of(cluster, vector_count).registers:
        if block_mode:
            raise ValueError(f"the register build {REGISTER.name} takes token rows only (block_mode=True)")
        return DecodeTopKRegister(k, trace, profile)
    return DecodeTopK(k, cluster, vector_count, block_mode, trace, profile)


def compile_decode_topk(k, cluster, vector_count, block_mode, trace=False, arch=None, options=None):
    """Compile one variant (cached: cute.compile itself never caches). arch, e.g.
    "sm_100a", compiles for that target instead of the current device (the DSL reads
    CUTE_DSL_ARCH once per process, so the target travels as --gpu-arch); options: more
    compiler options, e.g. "remarks{ptx}" for the ptxas resource report."""
    key = (k, cluster, vector_count, bool(block_mode), bool(trace), arch, options)
    with _compile_lock:
        if key not in _compiled:
            topk = make_decode_topk(k, cluster, vector_count, block_mode, trace)
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
    topk = make_decode_topk(k, cluster, vectors, block_mode)
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
    stride, 16-byte aligned rows, a width some build holds (check_logits, which raises the
    ValueError decode_topk would; no row count is refused)."""
    try:
        check_logits(logits, k, block_mode=block_mode)
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
