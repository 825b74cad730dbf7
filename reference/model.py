"""The cluster model: DecodeTopK's algorithm (SPEC.md part 2) simulated CTA by CTA.

`simulate` runs, for each row, what the kernel's cluster does: the chunks of the valid
length (2.2), the path choice (2.3), the sampled path with its 2048 samples and cutoff
(2.4), the selection every CTA runs on its own chunk (2.5): its index-ordered queue, two
histogram passes with 4 copies (2.8), the exchange that gives every CTA the cluster's
histogram and the prefix of the CTAs below it, and the ranked write of its own selected
keys at their canonical positions (1.4, 2.7); the selection of the cutoff (2.6)
and the underflow fallback; and on the streamed builds (1x512x4, 2x512x4: 2.12) each
CTA's stream of its chunk of a long token row in tiles into its queue of the vectors that
can hold a selected key, the selection over those queues, and the direct path from global
memory after an overflow or underflow; and on the register build (1x512x2, 2.13) its one
CTA's window from the row's largest key, or its pass of key >> 4 into 4096 bins and its
pass of the low 4 bits of K's bin's keys, and its ranked write over every vector in
thread order. It returns the output and the trace of
SPEC.md 2.11, so a kernel's trace can be compared with it field by field.

Nothing is left to the order of atomics: every position is a prefix count over CTA rank
and (round, thread) order, which is index order, so the model's output is *the*
canonical answer, and so is the kernel's. Output slots the algorithm never writes hold
UNWRITTEN (-2), which no valid answer contains.

Mutants. The per-row code takes an integer `mutant`; 0 is the algorithm, any other value
one planted bug of `MUTANTS` (name -> (id, description)), used by the mutation campaign
(`python -m decode_topk.conformance.mutation`) to show that the conformance suite observes a bug in
each step. A write that would leave the output row or a streamed queue, or a second write
to one slot (a race between CTAs or threads, which no sanitizer sees in global memory: the
model does), is not performed, and a read of a queue entry never written is not either;
the row's error count records it and `simulate` raises RuntimeError, as a sanitizer would
stop the kernel.
"""

import numpy as np
from numba import njit

from decode_topk.kernel import policy
from decode_topk.kernel.policy import KEY_BLOCKS, KEY_NEG_INF, KEY_POS_INF, TRACE_FIELDS, Build

from .mutants import Mutants
from .topk import validate_inputs

SAMPLES = policy.SAMPLES  # 2048
SAMPLE_BANK_LOGITS = policy.SAMPLE_BANK_LOGITS  # a sample's logit: 2j mod 64 (2.4)
SURVIVOR_AIM = policy.SURVIVOR_AIM  # q aims at k + 2560 keys at or above the cutoff
Q_DEVIATIONS = policy.Q_DEVIATIONS  # and is at most m + ceil(sqrt(25 m)), m = ceil(2048 k / length)
UNWRITTEN = -2
PATH_SHORT, PATH_SAMPLED, PATH_DIRECT = 0, 1, 2
# overflow: a streamed queue's (2.12), or a staged attempt's K at NARROW_SPAN or more above
# the cutoff (2.5)
REASON_NONE, REASON_OVERFLOW, REASON_UNDERFLOW = 0, 1, 2
NARROW_SPAN = policy.NARROW_SPAN  # the sampled attempt's one pass: bins cutoff + 0 .. 254, then the rest
TOP_SPAN = policy.TOP_SPAN  # the direct path's window from the top: bins M - 510 .. M, then the rest
BINS = TOP_SPAN + 1  # the widest pass's bins (the window from the top); the others use 256
COPIES = 4  # histogram copies of the selection's passes (2.8)
WRITE_QUEUE_VECTORS = policy.WRITE_QUEUE_VECTORS  # the direct write queues past 2 vectors a thread (2.7)
# the staged sampled write queues its vectors of top >= K at 1 and 2 CTAs a row (2.7)
SAMPLED_WRITE_QUEUE_CLUSTER = policy.SAMPLED_WRITE_QUEUE_CLUSTER
REG_FINE_SHIFT = policy.REG_FINE_SHIFT  # the register build (2.13): key >> 4 into 4096 bins, then key & 15
REG_BINS = policy.REG_BINS
REG_FINE_MASK = policy.REG_FINE_MASK
REGISTER_VECTORS = policy.REGISTER_VECTORS  # its vectors a thread: a warp holds 32 of them a lane

# ---------------------------------------------------------------------------------------
# Mutants: planted bugs, one integer each (0 = none). Module-level ints, so numba compiles
# them as constants in the comparisons `mutant == NAME`.
# ---------------------------------------------------------------------------------------
MUTANTS = Mutants("")
_mutant = MUTANTS.add


Q_FLOOR = _mutant("q_floor", "q = floor(2048 (k + 2560) / length): rounded down instead of up")
Q_MIN_ONE = _mutant("q_min_one", "q clamped to [1, 2048] (no least rank Q_MIN[k]): the widest rows underflow")
Q_AIM_ONLY = _mutant("q_aim_only", "q from the aim alone, no Q_DEVIATIONS bound (session 23's rule)")
Q_BOUND_ONLY = _mutant("q_bound_only", "q from the Q_DEVIATIONS bound alone, the aim dropped")
Q_M_FLOOR = _mutant("q_m_floor", "m = floor(2048 k / length): the bound's mean rounded down")
Q_SPREAD_FLOOR = _mutant("q_spread_floor", "the bound's spread floor(sqrt(25 m)), not its ceiling")
# (q_clamp_cta, q clamped to [1, 2048 / C], is retired: since SPEC 2.3's d of session 7 a
# sampled row is longer than D, so q <= ceil(2048 (2048 + 2560) / (D + 1)): 576 on the
# streamed 1x512x4 (D = 16,384), 288 on the other builds of C <= 2, 144 at 4 and 8, 72 at
# 16, always below 2048 / C, and that clamp changes nothing.)
CUTOFF_PLUS = _mutant("cutoff_plus_one", "sampled cutoff one key above the q-th largest sample")
CUTOFF_MINUS = _mutant("cutoff_minus_one", "sampled cutoff one key below the q-th largest sample")
SAMPLE_SHIFT = _mutant("sample_shift", "sample positions shifted one logit right")
SAMPLE_MIDDLE = _mutant("sample_bank_middle", "samples at the middles of their parts, not moved down to 2j's bank")
SAMPLE_DROP = _mutant("sample_drop_last", "each CTA's last sample never stored (slot keeps key 0)")
SAMPLE_SPAN = _mutant("sample_span_vectors", "m_c = 8 (end_c - start_c): the partial last vector counted whole")
CHUNK_GAP = _mutant("chunk_gap", "end_c = start_(c+1) - 1: each CTA but the last drops its chunk's last vector")
CHUNK_CEIL = _mutant("chunk_ceil", "start_c = ceil(c nv / C) instead of floor")
TOP_FIRST_LANE = _mutant("top_first_lane", "vector top = its first lane's key, not the largest")
TOP_STRICT = _mutant("top_strict", "a vector is queued only if top > cutoff (not >=)")
QUEUE_DROP = _mutant("queue_drop_last", "the CTA queue loses its last entry")
GT_RANK_COLLIDE = _mutant("gt_rank_collision", "a thread's gt keys all take its first rank")
SCAN_INCLUSIVE = _mutant("scan_inclusive", "gt prefix of the round scan inclusive instead of exclusive")
UNDERFLOW_DROPPED = _mutant("underflow_dropped", "underflow rule dropped")
UNDERFLOW_LE = _mutant("underflow_at_k", "underflow when G + E <= k")
UNDERFLOW_INVERTED = _mutant("underflow_inverted", "underflow rule inverted: fall back when G + E >= k")
DIRECT_EQ_UNLIMITED = _mutant("direct_eq_unlimited", "the ranked write: eq keys not limited to k - A")
DIRECT_A1_ONLY = _mutant("direct_above_pass1", "the selection's A = A1 (pass 2's above dropped)")
DIRECT_PASS2_RANK = _mutant("direct_pass2_rank_k", "the selection's pass 2 selects rank k instead of k - A1")
DIRECT_PASS2_ALL = _mutant("direct_pass2_unfiltered", "the selection's pass 2 counts every key, ignoring the pass-1 bin")
RADIX_PASS2_ALL = _mutant("radix_pass2_unfiltered", "radix_select pass 2 counts every key, ignoring the pass-1 bin")
SAMPLE_TOP_OFF = _mutant("sample_top_off_by_one",
                         "the cutoff's window from the largest sample places it one step high (Ms - 254 + b)")
SAMPLE_TOP_BIN0 = _mutant("sample_top_bin0_resolved",
                          "the cutoff's window takes its bin 0 (cutoff = Ms - 255), not the two passes")
SAMPLE_TOP_HALF = _mutant("sample_top_half",
                          "the largest sample taken over the first 1024 samples (any above it in bin 255)")
SELECT_BIN_STRICT = _mutant("select_bin_strict", "select_bin takes the first bin with sum(hist[b:]) > q (off by one)")
SELECT_BIN_ABOVE = _mutant("select_bin_above_inclusive", "select_bin's above includes the bin itself")
HIST_COPY_DROP = _mutant("hist_copy_dropped", "the selection's histograms sum copies 0..6, dropping copy 7")
HIST_COPY_WARP = _mutant("hist_copy_by_warp", "histogram copy = warp index instead of lane mod 4 (copies >= 4 lost)")
HIST_CTA_DROP = _mutant("hist_cta_dropped", "the last CTA's histogram never reaches the cluster histogram")
NAN_AS_NEG = _mutant("nan_as_negative", "NaN keyed as if its sign bit were set")
SIGNED_ZERO = _mutant("signed_zero_equal", "-0 keyed as +0")
PIN_NONE = _mutant("pin_none", "the newest block is not pinned: keyed from its valid logits")
PIN_WRONG = _mutant("pin_wrong_block", "block n - 2 pinned instead of n - 1 (n - 1 keyed from its valid logits)")
BLOCK_NAN_IGNORED = _mutant("block_nan_ignored", "block maximum ignores NaN logits (max.bf16x2 without .NaN)")
NEGINF_BLOCK_INDEX = _mutant("neginf_block_index", "a selected -inf block written as its index, not -1")
NEGINF_TOKEN_MINUS1 = _mutant("neginf_token_minus1", "a selected -inf token written as -1")
NEGINF_SHORT_INDEX = _mutant("neginf_short_index", "short rows write a -inf block's index, not -1")
SHORT_PAD_ZERO = _mutant("short_padding_zero", "short rows padded with 0 instead of -1")
SHORT_REVERSED = _mutant("short_reversed", "short rows written n-1 .. 0 instead of positionally")
SHORT_LT = _mutant("short_below_k", "short path only for n < k (n == k takes the long paths)")
SAMPLED_GE = _mutant("sampled_at_direct_max", "sampled path at nv = direct_max_length / 8 too (the direct path's last length)")
ONE_CTA_D1 = _mutant("one_cta_samples_past_one_vector", "one CTA a row samples past one vector a thread (d = 1, not 8)")
LAST_LANE_EXTRA = _mutant("last_lane_extra", "the masked last vector reads one lane too many")
LAST_LANE_MISSING = _mutant("last_lane_missing", "the masked last vector reads one lane too few")

# The selection spread over the CTAs and its canonical positions (SPEC.md 1.4, 2.5, 2.7).
QUEUE_THREAD_MAJOR = _mutant("queue_thread_major", "the CTA queue in thread-major (t, s) order, not index order")
PASS_CUTOFF_IGNORED = _mutant("pass_cutoff_ignored", "the sampled passes also count keys below the cutoff")
RANK_PREFIX_INCLUSIVE = _mutant("rank_prefix_inclusive", "a CTA's prefix includes its own histogram")
RANK_PREFIX_UPPER = _mutant("rank_prefix_upper", "a CTA's prefix sums the higher ranks, not the lower")
ARRIVAL_CTA_ORDER = _mutant("arrival_cta_order", "CTA prefixes in an arrival order rotated by the row's batch slot")
PREFIX_PASS1_ONLY = _mutant("prefix_pass1_only", "gt base from pass 1's bins above b1 only (pass 2's dropped)")
ROUND_BASE_DROPPED = _mutant("round_base_dropped", "each round of the ranked write restarts at the CTA's base")
POS_GT_FIRST = _mutant("pos_gt_first", "gt keys to out[gtb], eq keys to out[A + eqb] (the old order)")
POS_NO_MIN = _mutant("pos_no_min", "gt slot gtb + eqb, not gtb + min(eqb, k - A)")
EQ_NEED_INCLUSIVE = _mutant("eq_need_inclusive", "eq key kept while eqb <= k - A (one too many)")
EQ_HIGHEST_INDEX = _mutant("eq_highest_index", "the highest-index keys == K kept, not the lowest")
UNDERFLOW_GT_ONLY = _mutant("underflow_gt_only", "underflow when G < k (keys equal to the cutoff ignored)")

# The streamed path of the streamed builds (1x512x4 to 8x512x4, SPEC.md 2.12): each CTA's stream of its chunk in
# tiles into its queue of vectors, the queue's overflow, the keys == cutoff it leaves out,
# and the direct path from global memory after an overflow or underflow.
STREAM_AT_STAGE = _mutant("stream_at_stage",
                          "the streamed builds stream a row of exactly their stage too (length >= D)")
QUEUE_EQ_K1 = _mutant("queue_eq_budget_k_minus_1",
                      "a CTA's queue takes k - 1 vectors of top == cutoff, not k (slot gvb + min(evb, k - 1))")
QUEUE_EQ_UNLIMITED = _mutant("queue_eq_unlimited", "a CTA's queue takes every vector of top == cutoff: Q = GV + EV")
QUEUE_GT_ONLY = _mutant("queue_gt_only", "a CTA's queue takes only the vectors of top > cutoff: Q = GV")
QUEUE_EQ_ROW = _mutant("queue_eq_budget_row",
                       "a CTA's evb counts the row's vectors of top == cutoff before it, the lower CTAs' too")
QUEUE_STORE_PAST = _mutant("queue_store_past_capacity",
                           "queue slot STREAM_QUEUE stored too (one past the queue)")
OVERFLOW_AT_CAP = _mutant("overflow_at_capacity",
                          "overflow when a CTA's Q >= STREAM_QUEUE (a full queue falls back)")
OVERFLOW_EV_IGNORED = _mutant("overflow_ev_ignored",
                              "overflow when a CTA's GV > STREAM_QUEUE (its vectors of top == cutoff ignored)")
OVERFLOW_UNCAPPED = _mutant("overflow_ev_uncapped",
                            "overflow when a CTA's GV + EV > STREAM_QUEUE (EV not capped at k: A.4's old rule)")
OVERFLOW_ROW = _mutant("overflow_over_row", "overflow when the CTAs' Q sum past STREAM_QUEUE (not some CTA's Q)")
OVERFLOW_LAST_LOST = _mutant("overflow_last_cta_lost", "the last CTA's overflow never reaches the cluster")
OVERFLOW_DROPPED = _mutant("overflow_dropped",
                           "no overflow rule: the selection reads the first STREAM_QUEUE entries of a longer queue")
DROPPED_COUNTS_QUEUED = _mutant("dropped_counts_queued",
                                "D counts the keys == cutoff of every vector of top == cutoff, the queued ones too")
TILE_BASE_DROPPED = _mutant("tile_base_dropped",
                            "each tile's queue slots restart at 0 (the tiles before it not counted)")
TILE_THREAD_MAJOR = _mutant("tile_thread_major",
                            "a tile's vectors queued thread-major (t, s), not in index order (s, t)")
TILE_SCAN_INCLUSIVE = _mutant("tile_scan_inclusive", "a tile's gvb includes the vector's own top > cutoff")
TRACE_COUNTS_QUEUE = _mutant("trace_counts_queue",
                             "a streamed row's trace E counts its queues' keys == cutoff only (not the row's)")
STREAM_NARROW_TO_DIRECT = _mutant("stream_narrow_to_direct",
                                  "a streamed row whose one pass cannot place K takes the direct path from global "
                                  "memory, not the two passes over its queues")
FALLBACK_FROM_QUEUE = _mutant("fallback_from_queue",
                              "the direct path after a streamed attempt selects over the queues, not every key")
FALLBACK_NEED_K = _mutant("fallback_need_k", "the direct path from global memory writes with need k, not k - A")
FALLBACK_TILE_BASE = _mutant("fallback_tile_base_dropped",
                             "the direct path from global memory: each tile's slots restart at the CTA's base")
FALLBACK_THREAD_MAJOR = _mutant("fallback_tile_thread_major",
                                "the direct path from global memory places a tile's keys thread-major (t, s)")
# the sampled attempt's one narrow pass (2.5)
NARROW_UNCLAMPED = _mutant("narrow_unclamped", "the narrow pass drops the keys NARROW_SPAN or more above the cutoff "
                           "(no last bin holding them)")
NARROW_LAST_RESOLVED = _mutant("narrow_last_bin_resolved", "the narrow pass's last bin taken as K's (K = cutoff + 255)")
NARROW_GT_INCLUSIVE = _mutant("narrow_gt_base_inclusive", "the narrow pass's gt base counts K's bin too")
NARROW_EQ_NEXT = _mutant("narrow_eq_base_next_bin", "the narrow pass's eq base read from the bin above K's")
NARROW_SPAN_SHORT = _mutant("narrow_span_254", "the narrow pass overflows from bin 254 (K >= cutoff + 254)")
NARROW_BIN_SHIFT = _mutant("narrow_bin_off_by_one", "the narrow pass bins key - cutoff + 1 (K one above)")
# the direct path's narrow pass from the row's largest key (2.5, token mode)
TOP_BIN0_RESOLVED = _mutant("top_bin0_resolved", "the window from the top takes K from its bin 0 (K = M - 511)")
TOP_OFF_BY_ONE = _mutant("top_off_by_one", "the window from the top places K one step high (M - 510 + b)")
TOP_MAX_PARTIAL = _mutant("top_max_partial", "the row's largest key M taken without each chunk's last vector")
TOP_MAX_LOCAL = _mutant("top_max_local", "the row's largest key M taken from CTA 0's chunk alone")
TOP_PREFIX_NONE = _mutant("top_prefix_none", "the window from the top writes without the lower ranks' prefixes")
TOP_SELECT_LOW_HALF = _mutant("top_select_low_half",
                              "the window from the top selects over its bins 0-255 alone (256 bins, not 512)")
TOP_PREFIX_LOW_HALF = _mutant("top_prefix_low_half",
                              "the window from the top's gt base sums the prefix's bins up to 255 alone")
# the direct path's write queue (2.7)
WRITE_QUEUE_ABOVE = _mutant("write_queue_above", "the direct write queues the vectors of top > K (not >=)")
WRITE_QUEUE_PASS1 = _mutant("write_queue_from_pass1",
                            "the direct write queues the vectors of top > K's high byte's bin (top >> 8 > b1)")
WRITE_QUEUE_SLOTS = _mutant("write_queue_past_direct_slots",
                            "an underflowed attempt's chunk, longer than a direct row's slots, queued over those "
                            "slots alone")
# the sampled write's queue (2.7)
SAMPLED_QUEUE_ABOVE = _mutant("sampled_write_queue_above",
                              "the staged sampled write queues its queue's vectors of top > K (not >=)")
SAMPLED_QUEUE_FIRST_ROUND = _mutant("sampled_write_queue_first_round",
                                    "the staged sampled write's queue keeps the hits of its queue's first round alone")
# the register build (2.13)
REG_FINE_EVERY_KEY = _mutant("register_fine_every_key",
                             "the register build's second pass counts the low bits of every key, not only K's bin's")
REG_FINE_Q_K = _mutant("register_fine_q_k", "the register build's second selection takes the k-th key, not the "
                                            "(k - A1)-th")
REG_FINE_NEXT_BIN = _mutant("register_fine_next_bin",
                            "the register build's second pass counts the keys of the bin below K's high bits")
REG_SELECT_WARP_BASE = _mutant("register_select_warp_base",
                               "the register build's first selection without the warps before (each warp's "
                               "bins counted from their own top)")
REG_WINDOW_BIN0 = _mutant("register_window_bin0_resolved",
                          "the register build's window from the top takes K from its bin 0 (K = M - 511)")
REG_WINDOW_OFF_BY_ONE = _mutant("register_window_off_by_one",
                                "the register build's window from the top places K one step high (M - 510 + b)")
REG_WINDOW_MAX_WARP0 = _mutant("register_window_max_warp0",
                               "the register build's M taken from warp 0's vectors alone")
REG_INDEX_STRIDE = _mutant("register_index_one_vector_stride",
                           "the register build's write indexes thread t's logits from 8t (one vector a thread's "
                           "stride), not from 8 V t")
REG_THREAD_LAST_LANE = _mutant("register_thread_last_lane",
                               "the register build counts the last logit of the thread that holds the length "
                               "when it holds 8 V - 1 valid ones (its stray-key test made only below 8 V - 1)")
REG_SCAN_WARP_BASE = _mutant("register_scan_warp_base",
                             "the register build's ranked write without the warps before (each warp's vectors "
                             "ranked from 0)")

MUTANT_NAMES = {v[0]: k for k, v in MUTANTS.items()}


# ---------------------------------------------------------------------------------------
# Per-element pieces
# ---------------------------------------------------------------------------------------
@njit(cache=True)
def _ceil_sqrt(x):
    """The least s >= 0 with s * s >= x (the sampled rank's spread, 2.4)."""
    s = int(np.sqrt(x))
    while s * s < x:
        s += 1
    while s > 0 and (s - 1) * (s - 1) >= x:
        s -= 1
    return s


@njit(cache=True)
def _okey(b, mutant):
    """The order key of BF16 bits b (SPEC.md 1.2)."""
    b = np.int64(b) & 0xFFFF
    if mutant == NAN_AS_NEG and (b & 0x7FFF) > 0x7F80:
        b |= 0x8000
    if mutant == SIGNED_ZERO and b == 0x8000:
        b = 0
    if b & 0x8000:
        return (~b) & 0xFFFF
    return b | 0x8000


@njit(cache=True)
def _block_key(row, base, lanes, mutant):
    """Key of max.NaN over row[base : base + lanes] (a whole block has 8 lanes)."""
    nan = False
    best = np.int64(-1)
    for e in range(lanes):
        b = np.int64(row[base + e])
        if (b & 0x7FFF) > 0x7F80 and mutant != BLOCK_NAN_IGNORED:
            nan = True
        else:
            kk = _okey(b, mutant)
            if kk > best:
                best = kk
    if nan:
        return _okey(0x7FFF, mutant)
    return best


@njit(cache=True)
def _chunk(c, nv, C, mutant):
    start = (c * nv) // C
    end = ((c + 1) * nv) // C
    if mutant == CHUNK_CEIL:
        start = (c * nv + C - 1) // C
        end = ((c + 1) * nv + C - 1) // C
    if mutant == CHUNK_GAP and c < C - 1 and end > start:
        end -= 1
    return start, end


@njit(cache=True)
def _select_bin(hist, q, mutant):
    """(b, above): sum(hist[b+1:]) < q <= sum(hist[b:]), above = sum(hist[b+1:])."""
    above = np.int64(0)
    for b in range(len(hist) - 1, -1, -1):
        h = hist[b]
        hit = above + h >= q
        if mutant == SELECT_BIN_STRICT:
            hit = above + h > q
        if hit:
            if mutant == SELECT_BIN_ABOVE:
                return b, above + h
            return b, above
        above += h
    return 0, above  # q > sum(hist): only a mutant gets here


@njit(cache=True)
def _radix_select(keys, count, q, mutant):
    """(K, above): the q-th largest of keys[0:count] by two 8-bit passes (2.6)."""
    h = np.zeros(256, np.int64)
    for i in range(count):
        h[keys[i] >> 8] += 1
    b1, a1 = _select_bin(h, q, mutant)
    h[:] = 0
    for i in range(count):
        if (keys[i] >> 8) == b1 or mutant == RADIX_PASS2_ALL:
            h[keys[i] & 0xFF] += 1
    b2, a2 = _select_bin(h, q - a1, mutant)
    return (b1 << 8) | b2, a1 + a2


@njit(cache=True)
def _window_bin(top, key, span):
    """A key's bin in a window of span + 1 bins from top down (the kernel's window_bin):
    top in bin span, every key from top - span down in bin 0; a key above top (only a
    mutant's) in bin span too."""
    return span - min(max(top - key, 0), span)


@njit(cache=True)
def _sample_cutoff(samples, q, mutant):
    """The sampled cutoff, the q-th largest of the 2048 samples (2.6): one 256-bin pass of
    NARROW_SPAN - min(Ms - key, NARROW_SPAN) from the largest sample Ms; its bin b >= 1
    places it at Ms - NARROW_SPAN + b, else the two passes of _radix_select."""
    top = 0
    for i in range(SAMPLES // 2 if mutant == SAMPLE_TOP_HALF else SAMPLES):
        top = max(top, samples[i])
    h = np.zeros(256, np.int64)
    for i in range(SAMPLES):
        h[_window_bin(top, samples[i], NARROW_SPAN)] += 1
    b, _ = _select_bin(h, q, mutant)
    if b >= 1 or mutant == SAMPLE_TOP_BIN0:
        return top - NARROW_SPAN + b + (1 if mutant == SAMPLE_TOP_OFF else 0)
    K, _ = _radix_select(samples, SAMPLES, q, mutant)
    return K


@njit(cache=True)
def _element(g, e, key, block, mutant):
    """The value written for element e of vector g (2.9)."""
    if block:
        if key == KEY_NEG_INF and mutant != NEGINF_BLOCK_INDEX:
            return -1
        return g
    if key == KEY_NEG_INF and mutant == NEGINF_TOKEN_MINUS1:
        return -1
    return 8 * g + e


# ---------------------------------------------------------------------------------------
# Selection (2.4, 2.5, 2.7): the index-ordered queue, the histogram passes and their
# exchange, the prefixes over CTA rank, and the ranked write
# ---------------------------------------------------------------------------------------
@njit(cache=True)
def _queue(top, start, nl, T, V, cutoff, mutant, queue):
    """The CTA queue: the chunk's local vectors with top >= cutoff in ascending local index
    i = s T + 32 w + l, the order of the kernel's ballot-grid scan (slot s, warp w, lane l)."""
    qlen = 0
    if mutant == QUEUE_THREAD_MAJOR:  # the old per-thread scan: thread t's slots after thread t-1's
        for t in range(T):
            for s in range(V):
                i = s * T + t
                if i >= nl:
                    break
                tp = top[start + i]
                if tp > cutoff or (tp == cutoff and mutant != TOP_STRICT):
                    queue[qlen] = i
                    qlen += 1
    else:
        for i in range(nl):
            tp = top[start + i]
            if tp > cutoff or (tp == cutoff and mutant != TOP_STRICT):
                queue[qlen] = i
                qlen += 1
    if mutant == QUEUE_DROP and qlen > 0:
        qlen -= 1
    return qlen


@njit(cache=True)
def _pass(ekey, ecnt, W, start, queue, qlen, T, lo, high, mutant, copies, hist):
    """One histogram pass of a CTA over its queue: entry x is unpacked by thread x mod T
    (round x // T), which counts into copy (lane mod COPIES). Keys below lo (the sampled
    cutoff, 0 on the direct path) are not counted, but for high == -3, whose lo is the
    row's largest key; high == -1: the high byte of every key; high == -2 (the sampled
    attempt's narrow pass, 2.5): key - lo, the keys NARROW_SPAN or more above lo all in the
    last bin; high == -3 (the direct path's window from the top, lo the row's largest key
    M): TOP_SPAN - (M - key), the keys TOP_SPAN or more below M all in bin 0; else the low
    byte of the keys whose high byte is high. hist = the sum of the copies (BINS bins, the
    ones a pass does not use 0)."""
    copies[:, :] = 0
    for x in range(qlen):
        t = x % T
        cp = (t % 32) % COPIES
        if mutant == HIST_COPY_WARP:
            cp = t // 32
        g = start + queue[x]
        for e in range(ecnt[g]):
            kk = ekey[g * W + e]
            if kk < lo and high > -3 and mutant != PASS_CUTOFF_IGNORED:  # (-3: keys below lo count)
                continue
            if high == -3:  # the window from the top: lo is M
                copies[cp, _window_bin(lo, kk, TOP_SPAN)] += 1
            elif high == -2:
                d = max(kk - lo, 0)  # (kk < lo: only a mutant counts it)
                if mutant == NARROW_BIN_SHIFT:
                    d += 1
                if d >= NARROW_SPAN:
                    if mutant == NARROW_UNCLAMPED:
                        continue
                    d = NARROW_SPAN
                copies[cp, d] += 1
            elif high < 0:
                copies[cp, kk >> 8] += 1
            elif (kk >> 8) == high or mutant == DIRECT_PASS2_ALL:
                copies[cp, kk & 0xFF] += 1
    used = COPIES - 1 if mutant == HIST_COPY_DROP else COPIES
    for b in range(BINS):
        sm = 0
        for cpy in range(used):
            sm += copies[cpy, b]
        hist[b] = sm


@njit(cache=True)
def _exchange(local, C, slot, mutant, total, prefix):
    """The DSMEM exchange of one pass: CTA c adds its histogram local[c] into the total of
    every CTA and into the prefix of every higher rank. total[b]: the cluster's count;
    prefix[c, b]: the count of the CTAs before c (in rank order, which is index order)."""
    total[:] = 0
    prefix[:, :] = 0
    for c in range(C):
        if mutant == HIST_CTA_DROP and c == C - 1:
            continue  # the last rank's reds lost
        for b in range(BINS):
            total[b] += local[c, b]
        for p in range(C):
            before = c < p
            if mutant == RANK_PREFIX_INCLUSIVE:
                before = c <= p
            elif mutant == RANK_PREFIX_UPPER:
                before = c > p
            elif mutant == ARRIVAL_CTA_ORDER:  # the order of arrival, rotated by the batch slot
                before = (c + slot) % C < (p + slot) % C
            if before:
                for b in range(BINS):
                    prefix[p, b] += local[c, b]


@njit(cache=True)
def _around(ekey, ecnt, W, g, key):
    """(keys > key, keys == key) among vector g's valid elements."""
    above = 0
    equal = 0
    for e in range(ecnt[g]):
        kk = ekey[g * W + e]
        if kk > key:
            above += 1
        elif kk == key:
            equal += 1
    return above, equal


@njit(cache=True)
def _position(kk, K, gtb, eqb, need, A, eq_total, mutant):
    """The slot of a key (1.4) with gtb keys > K and eqb keys == K before it: a key > K
    goes to gtb + min(eqb, need), a key == K with eqb < need to gtb + eqb (need = k - A of
    the ranked writes and of the direct path from global memory);
    -1: not written. eq_total (the keys == K in all) and A serve two mutants only."""
    if kk > K:
        if mutant == POS_GT_FIRST:
            return gtb
        if mutant == POS_NO_MIN:
            return gtb + eqb
        if mutant == EQ_HIGHEST_INDEX:
            return gtb + max(0, eqb - (eq_total - need))
        return gtb + min(eqb, need)  # the keys == K before it that are selected
    if kk == K:
        take = eqb < need
        if mutant == EQ_NEED_INCLUSIVE:
            take = eqb <= need
        elif mutant == DIRECT_EQ_UNLIMITED:
            take = True
        elif mutant == EQ_HIGHEST_INDEX:
            take = eqb >= eq_total - need
        if take:
            if mutant == EQ_HIGHEST_INDEX:
                return gtb + eqb - (eq_total - need)
            if mutant == POS_GT_FIRST:
                return A + eqb
            return gtb + eqb
    return -1


@njit(cache=True)
def _put(dest, pos, value):
    """dest[pos] = value unless pos is outside dest or dest[pos] was written already (a
    race), which is not performed: returns 1 for such a wild write, else 0."""
    if pos < 0 or pos >= dest.shape[0] or dest[pos] != UNWRITTEN:
        return 1
    dest[pos] = value
    return 0


@njit(cache=True)
def _write_cta(ekey, ecnt, W, start, queue, qlen, T, K, A, k, gt_base, eq_base, eq_total, mutant,
               out, cg, ce, block):
    """The ranked write of one CTA (1.4, 2.7): its queue in rounds of T entries, entry
    x = r T + t unpacked by thread t; the (gt, eq) counts of the entries before it (the
    kernel: one CTA scan over every round's counts, in index order); each key at its slot
    of _position, gtb / eqb counting the row's keys > K / == K at lower indices (gt_base /
    eq_base: those of the lower ranks). Returns wild writes: outside the row, or to a slot
    already written."""
    need = k - A
    wild = 0
    run_gt = gt_base
    run_eq = eq_base
    for r0 in range(0, qlen, T):
        rn = min(T, qlen - r0)
        for j in range(rn):
            cg[j], ce[j] = _around(ekey, ecnt, W, start + queue[r0 + j], K)
        sg = 0
        se = 0
        for j in range(rn):
            a = cg[j]
            b = ce[j]
            rg = run_gt + sg + (a if mutant == SCAN_INCLUSIVE else 0)
            re = run_eq + se
            sg += a
            se += b
            g = start + queue[r0 + j]
            for e in range(ecnt[g]):
                kk = ekey[g * W + e]
                pos = _position(kk, K, rg, re, need, A, eq_total, mutant)
                if kk > K and mutant != GT_RANK_COLLIDE:
                    rg += 1
                elif kk == K:
                    re += 1
                if pos != -1:
                    wild += _put(out, pos, _element(g, e, kk, block, mutant))
        if mutant != ROUND_BASE_DROPPED:
            run_gt += sg
            run_eq += se
    return wild


@njit(cache=True)
def _underflows(ge, G, k, mutant):
    """Whether a sampled attempt with ge keys >= cutoff, G of them above it, underflows
    (2.4, 2.12): ge < k."""
    if mutant == UNDERFLOW_LE:
        return ge <= k
    if mutant == UNDERFLOW_INVERTED:
        return ge >= k
    if mutant == UNDERFLOW_DROPPED:
        return False
    if mutant == UNDERFLOW_GT_ONLY:
        return G < k
    return ge < k


@njit(cache=True)
def _pass2_select(b1, A1, hist2, k, mutant):
    """(K, A, b2) from pass 1's bin b1 (A1 keys above it) and pass 2's histogram (2.5)."""
    rank = k if mutant == DIRECT_PASS2_RANK else k - A1
    b2, A2 = _select_bin(hist2, rank, mutant)
    A = A1 if mutant == DIRECT_A1_ONLY else A1 + A2
    return (b1 << 8) | b2, A, b2


@njit(cache=True)
def _bases(prefix1, prefix2, c, b1, b2, mutant):
    """(gt_base, eq_base) of CTA c (2.5 step 6): the keys above K and equal to it in the
    CTAs before c, from the prefixes of both passes."""
    gt_base = 0
    for b in range(b1 + 1, 256):
        gt_base += prefix1[c, b]
    if mutant != PREFIX_PASS1_ONLY:
        for b in range(b2 + 1, 256):
            gt_base += prefix2[c, b]
    return gt_base, prefix2[c, b2]


@njit(cache=True)
def _direct_write(ekey, ecnt, W, top, start, end, T, V, K, A, k, gt_base, eq_base, eq_total, direct, b1, mutant,
                  out, queue, qlen, cg, ce, block):
    """A CTA's ranked write on the direct path over the stage (2.7; `direct`: the slots a
    direct row fills): over its queue of the vectors with top >= K where its chunk holds
    more than WRITE_QUEUE_VECTORS and at most `direct` vectors a thread, else over `queue`
    as it is (qlen entries). b1: K's high byte, for a mutant (-1 where no pass made it)."""
    n = end - start
    if WRITE_QUEUE_VECTORS * T < n and (n <= direct * T or mutant == WRITE_QUEUE_SLOTS):
        cut = K
        if mutant == WRITE_QUEUE_ABOVE:
            cut = K + 1
        elif mutant == WRITE_QUEUE_PASS1 and b1 >= 0:
            cut = (b1 + 1) << 8
        qlen = _queue(top, start, min(n, direct * T), T, V, cut, mutant, queue)
    return _write_cta(ekey, ecnt, W, start, queue, qlen, T, K, A, k, gt_base, eq_base, eq_total, mutant, out, cg,
                      ce, block)


@njit(cache=True)
def _selection(ekey, ecnt, W, top, nv, k, block, C, T, V, U, lo, slot, mutant, out, tr, queue, qlens, every,
               everything, dropped, G, local, total, total2, prefix1, prefix2, copies, cg, ce, direct):
    """The exact selection among the keys >= lo over the C CTAs' queues (2.5 steps 2-7):
    pass 1 over each CTA's queue (queue[c, :qlens[c]]; every: every vector of the chunk,
    `everything`), the exchange, the underflow test over the cluster's total plus `dropped`
    (the keys == lo no queue holds, 2.12; G, the row's keys above lo, serves a mutant),
    pass 2, K and A, and each CTA's write of its own keys at their slots: the ranked write
    over its queue (2.7), or where U > 0 (the direct path from global memory, 2.12 step 5)
    the stream of its chunk in tiles. On the direct path over the stage (`direct` > 0: the
    slots a direct row fills, d of 2.3) a CTA whose chunk holds more than
    WRITE_QUEUE_VECTORS and at most `direct` vectors a thread writes over its queue of the
    vectors with top >= K instead (2.7). Returns (status, wild): status 1 on underflow
    (nothing written)."""
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        _pass(ekey, ecnt, W, start, everything if every else queue[c], qlens[c], T, lo, -1, mutant, copies,
              local[c])
    _exchange(local, C, slot, mutant, total, prefix1)
    ge = dropped
    for b in range(256):
        ge += total[b]
    if U == 0 or not every:  # the direct path from global memory makes no test (2.12 step 5)
        if _underflows(ge, G, k, mutant):
            return 1, 0
    b1, A1 = _select_bin(total, k, mutant)
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        _pass(ekey, ecnt, W, start, everything if every else queue[c], qlens[c], T, lo, b1, mutant, copies,
              local[c])
    _exchange(local, C, slot, mutant, total2, prefix2)
    K, A, b2 = _pass2_select(b1, A1, total2, k, mutant)
    tr[6] = K
    tr[7] = A
    eq_total = total2[b2]
    wild = 0
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        gt_base, eq_base = _bases(prefix1, prefix2, c, b1, b2, mutant)
        if U > 0 and every:
            need = k if mutant == FALLBACK_NEED_K else k - A
            wild += _stream_out(ekey, ecnt, W, start, end - start, T, U, K, need, A, eq_total, gt_base, eq_base,
                                mutant, out)
        elif direct > 0:
            wild += _direct_write(ekey, ecnt, W, top, start, end, T, V, K, A, k, gt_base, eq_base, eq_total, direct,
                                  b1, mutant, out, queue[c], qlens[c], cg, ce, block)
        else:
            wild += _write_cta(ekey, ecnt, W, start, everything if every else queue[c], qlens[c], T, K, A, k,
                               gt_base, eq_base, eq_total, mutant, out, cg, ce, block)
    return 0, wild


@njit(cache=True)
def _narrow_bases(prefix1, c, b, mutant):
    """(gt_base, eq_base) of CTA c after a one-pass selection (2.5: the sampled attempt's
    narrow pass, the window from the top), K in bin b: the keys of the bins above it and of
    its own in the CTAs before c."""
    gt_base = 0
    for j in range(b if mutant == NARROW_GT_INCLUSIVE else b + 1, 256 if mutant == TOP_PREFIX_LOW_HALF else BINS):
        gt_base += prefix1[c, j]
    return gt_base, prefix1[c, min(b + 1, 255) if mutant == NARROW_EQ_NEXT else b]


@njit(cache=True)
def _requeue(top, start, queue, qlen, T, K, mutant):
    """The sampled write's queue (2.7): the queue's entries whose vector's top is >= K, in
    place and in queue order (index order); every key >= K lies in such a vector. Returns
    its length."""
    n = 0
    for x in range(qlen):
        if mutant == SAMPLED_QUEUE_FIRST_ROUND and x >= T:
            break
        tp = top[start + queue[x]]
        if tp > K or (tp == K and mutant != SAMPLED_QUEUE_ABOVE):
            queue[n] = queue[x]
            n += 1
    return n


@njit(cache=True)
def _narrow(ekey, ecnt, W, top, nv, k, block, C, T, lo, slot, mutant, out, tr, queue, qlens, G, dropped, local,
            total, prefix1, copies, cg, ce, requeue):
    """The sampled attempt's selection in one pass (2.5, 2.12): each CTA's histogram of
    key - lo over its queue (the keys NARROW_SPAN or more above lo in the last bin), the
    exchange, the underflow test (with `dropped`, a streamed row's keys == lo no queue
    holds), and K's bin b: below the last, K = lo + b exactly, A the keys of the bins above
    it, and each CTA writes its keys (2.7) from the prefixes of that one pass; the last bin
    (K >= lo + NARROW_SPAN) is an overflow: a staged row takes the direct path, a streamed
    row the two passes over its queues. requeue (a staged row at 1 or 2 CTAs): each CTA
    writes over its queue's vectors of top >= K (_requeue). Returns (status, wild): status
    1 on underflow, 2 on overflow (nothing written)."""
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        _pass(ekey, ecnt, W, start, queue[c], qlens[c], T, lo, -2, mutant, copies, local[c])
    _exchange(local, C, slot, mutant, total, prefix1)
    ge = dropped  # a streamed row's keys == lo that no queue holds (2.12; 0 on a staged row)
    for b in range(256):
        ge += total[b]
    if _underflows(ge, G, k, mutant):
        return 1, 0
    b, A = _select_bin(total, k, mutant)
    last = NARROW_SPAN - 1 if mutant == NARROW_SPAN_SHORT else NARROW_SPAN
    if b >= last and mutant != NARROW_LAST_RESOLVED:
        return 2, 0
    K = lo + b
    tr[6] = K
    tr[7] = A
    wild = 0
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        gt_base, eq_base = _narrow_bases(prefix1, c, b, mutant)
        qlen = qlens[c]
        if requeue:
            qlen = _requeue(top, start, queue[c], qlen, T, K, mutant)
        wild += _write_cta(ekey, ecnt, W, start, queue[c], qlen, T, K, A, k, gt_base, eq_base, total[b], mutant, out,
                           cg, ce, block)
    return 0, wild


@njit(cache=True)
def _narrow_top(ekey, ecnt, W, top, nv, k, block, C, T, V, slot, mutant, out, tr, queue, qlens, local, total,
                prefix1, copies, cg, ce, direct):
    """The direct path's window from the top (2.5): M the row's largest key (the largest top
    of the whole row, every CTA's chunk), each CTA's 512-bin histogram of TOP_SPAN - min(M -
    key, TOP_SPAN) over every key of its chunk (queue[c]), the exchange, K's bin b; b >= 1:
    K = M - TOP_SPAN + b exactly and each CTA writes its keys (2.7, with the direct write's
    queue) from the prefixes of that one pass; b = 0 (K at least TOP_SPAN steps below M):
    nothing written, and the row's two passes follow. Returns (placed, wild)."""
    M = -1
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        if mutant == TOP_MAX_PARTIAL and end - start > 1:
            end -= 1  # each chunk's last vector missed
        if mutant == TOP_MAX_LOCAL and c > 0:
            break  # CTA 0's chunk alone
        for g in range(start, end):
            M = max(M, top[g])
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        _pass(ekey, ecnt, W, start, queue[c], qlens[c], T, M, -3, mutant, copies, local[c])
    _exchange(local, C, slot, mutant, total, prefix1)
    b, A = _select_bin(total[:256] if mutant == TOP_SELECT_LOW_HALF else total, k, mutant)
    if b < 1 and mutant != TOP_BIN0_RESOLVED:
        return False, 0
    K = M - TOP_SPAN + b + (1 if mutant == TOP_OFF_BY_ONE else 0)
    tr[6] = K
    tr[7] = A
    wild = 0
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        gt_base, eq_base = (0, 0) if mutant == TOP_PREFIX_NONE else _narrow_bases(prefix1, c, b, mutant)
        wild += _direct_write(ekey, ecnt, W, top, start, end, T, V, K, A, k, gt_base, eq_base, total[b], direct, -1,
                              mutant, out, queue[c], qlens[c], cg, ce, block)
    return True, wild


@njit(cache=True)
def _select(ekey, ecnt, W, top, nv, k, block, C, T, V, lo, slot, mutant, out, tr,
            queue, qlens, local, total, total2, prefix1, prefix2, copies, cg, ce, everything, direct):
    """The exact selection among the keys >= lo of a staged row, spread over the C CTAs
    (2.5): every CTA queues its own chunk's vectors of top >= lo (2.7), then _selection.
    Returns (status, wild): status 1 when fewer than k keys are >= lo (underflow; nothing
    written)."""
    G = 0
    E = 0
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        qlens[c] = _queue(top, start, end - start, T, V, lo, mutant, queue[c])
        for x in range(qlens[c]):
            above, equal = _around(ekey, ecnt, W, start + queue[c, x], lo)
            G += above
            E += equal
    if tr[0] == PATH_SAMPLED:  # the trace's G and E (sampled attempt), then its one pass
        tr[4] = G
        tr[5] = E
        return _narrow(ekey, ecnt, W, top, nv, k, block, C, T, lo, slot, mutant, out, tr, queue, qlens, G, 0,
                       local, total, prefix1, copies, cg, ce, C <= SAMPLED_WRITE_QUEUE_CLUSTER)
    if direct > 0 and not block:  # token mode, over the stage: the window from the top first
        placed, wild = _narrow_top(ekey, ecnt, W, top, nv, k, block, C, T, V, slot, mutant, out, tr, queue, qlens,
                                   local, total, prefix1, copies, cg, ce, direct)
        if placed:
            return 0, wild
    return _selection(ekey, ecnt, W, top, nv, k, block, C, T, V, 0, lo, slot, mutant, out, tr, queue, qlens,
                      False, everything, 0, G, local, total, total2, prefix1, prefix2, copies, cg, ce, direct)


# ---------------------------------------------------------------------------------------
# The streamed path (2.12): each CTA reads its chunk of a long token row from global
# memory in tiles, into its queue of vectors
# ---------------------------------------------------------------------------------------
@njit(cache=True)
def _tile_order(x, T, U, thread_major):
    """The local vector (within its tile) met x-th in index order: slot s = x div T of
    thread t = x mod T is vector s T + t; thread_major (a mutant): thread x div U's slot
    x mod U instead."""
    if thread_major:
        return (x % U) * T + x // U
    return x


@njit(cache=True)
def _stream_queue(ekey, ecnt, W, top, start, nl, T, U, cutoff, k, ev_before, mutant, queue):
    """CTA's stream of its chunk [start, start + nl) into its queue (2.12 step 2): tile j
    holds the local vectors [j T U, (j + 1) T U), vector j T U + s T + t met by thread t
    in slot s, so (tile, slot, warp, lane) order is index order; gvb / evb, the chunk's
    vectors of top > cutoff / == cutoff before a vector, are the tiles before it (the
    running counts, one CTA barrier a tile) plus the tile's exclusive scan. A vector of top
    > cutoff takes slot gvb + min(evb, k), one of top == cutoff with evb < k slot gvb + evb
    (its local index stored there if the slot is below queue.size, STREAM_QUEUE); the keys
    == cutoff of the vectors of top == cutoff left out are D. ev_before (the lower CTAs'
    EV) serves a mutant. Returns (GV, Q, D, G, E, wild): the chunk's vectors of top >
    cutoff, the queued vectors GV + min(EV, k), D, the chunk's keys > and == cutoff, and
    wild writes."""
    cap = queue.shape[0]
    budget = k
    if mutant == QUEUE_EQ_K1:
        budget = k - 1
    elif mutant == QUEUE_EQ_UNLIMITED:
        budget = nl + ev_before + 1
    elif mutant == QUEUE_GT_ONLY:
        budget = 0
    store = cap + 1 if mutant == QUEUE_STORE_PAST else cap
    run_gv = 0
    run_ev = ev_before if mutant == QUEUE_EQ_ROW else 0
    GV = 0
    EV = 0
    D = 0
    G = 0
    E = 0
    wild = 0
    tile = T * U
    for j0 in range(0, nl, tile):
        sg = 0  # the tile's vectors of top > cutoff / == cutoff met before
        se = 0
        for x in range(tile):
            i = j0 + _tile_order(x, T, U, mutant == TILE_THREAD_MAJOR)
            if i >= nl:
                continue
            g = start + i
            above, equal = _around(ekey, ecnt, W, g, cutoff)
            G += above
            E += equal
            tp = top[g]
            is_gt = tp > cutoff
            is_eq = tp == cutoff
            gvb = run_gv + sg + (1 if mutant == TILE_SCAN_INCLUSIVE and is_gt else 0)
            evb = run_ev + se
            if is_gt:
                sg += 1
            elif is_eq:
                se += 1
            pos = -1
            if is_gt:
                pos = gvb + min(evb, budget)
            elif is_eq:
                if evb < budget:
                    pos = gvb + evb
                    if mutant == DROPPED_COUNTS_QUEUED:
                        D += equal
                else:
                    D += equal
            if pos >= 0 and pos < store:
                wild += _put(queue, pos, i)
        GV += sg
        EV += se
        if mutant != TILE_BASE_DROPPED:
            run_gv += sg
            run_ev += se
    ev = EV + ev_before if mutant == QUEUE_EQ_ROW else EV
    return GV, GV + min(ev, budget), D, G, E, wild


@njit(cache=True)
def _equal_vectors(top, start, nl, cutoff):
    """EV: the vectors of [start, start + nl) whose top is the cutoff."""
    ev = 0
    for i in range(nl):
        if top[start + i] == cutoff:
            ev += 1
    return ev


@njit(cache=True)
def _stream_out(ekey, ecnt, W, start, nl, T, U, K, need, A, eq_total, gt_base, eq_base, mutant, out):
    """The write of the direct path from global memory (2.12 step 5): CTA's chunk met in
    tiles in index order as in _stream_queue, each key > K to gtb + min(eqb, need) and each
    key == K with eqb < need to gtb + eqb (_position), gtb / eqb counted from gt_base /
    eq_base (the CTAs before it) over the tiles before and the tile's scan. Returns wild
    writes."""
    wild = 0
    run_gt = gt_base
    run_eq = eq_base
    tile = T * U
    for j0 in range(0, nl, tile):
        sg = 0
        se = 0
        for x in range(tile):
            i = j0 + _tile_order(x, T, U, mutant == FALLBACK_THREAD_MAJOR)
            if i >= nl:
                continue
            g = start + i
            rg = run_gt + sg
            re = run_eq + se
            above, equal = _around(ekey, ecnt, W, g, K)
            sg += above
            se += equal
            for e in range(ecnt[g]):
                kk = ekey[g * W + e]
                pos = _position(kk, K, rg, re, need, A, eq_total, mutant)
                if kk > K and mutant != GT_RANK_COLLIDE:
                    rg += 1
                elif kk == K:
                    re += 1
                if pos != -1:
                    wild += _put(out, pos, _element(g, e, kk, False, mutant))
        if mutant != FALLBACK_TILE_BASE:
            run_gt += sg
            run_eq += se
    return wild


@njit(cache=True)
def _streamed(ekey, ecnt, W, top, nv, k, C, T, U, cutoff, slot, mutant, out, tr, queue, qlens, local, total,
              total2, prefix1, prefix2, copies, cg, ce, everything):
    """A streamed row after its samples and cutoff (2.12 steps 2-5; tr holds path 1, q and
    the cutoff): every CTA streams its chunk into its queue; overflow if some CTA's queue
    holds more than STREAM_QUEUE vectors, else the selection over the queues in one pass
    of key - cutoff (_narrow; underflow when G + E, their keys >= cutoff and the keys ==
    cutoff they leave out, is below k), and where that pass cannot place K the two passes
    over the same queues; after an overflow or an underflow the direct path from global
    memory. Returns wild writes and reads."""
    cap = queue.shape[1]
    G = 0
    E = 0
    D = 0
    wild = 0
    overflow = False
    queued = 0
    ev_before = 0
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        queue[c, :] = UNWRITTEN
        GV, Q, Dc, Gc, Ec, w = _stream_queue(ekey, ecnt, W, top, start, end - start, T, U, cutoff, k, ev_before,
                                             mutant, queue[c])
        EV = _equal_vectors(top, start, end - start, cutoff)
        ev_before += EV  # the lower CTAs' vectors of top == cutoff (a mutant's evb)
        wild += w
        G += Gc
        E += Ec
        D += Dc
        qlens[c] = Q
        queued += Q
        over = Q > cap
        if mutant == OVERFLOW_AT_CAP:
            over = Q >= cap
        elif mutant == OVERFLOW_EV_IGNORED:
            over = GV > cap
        elif mutant == OVERFLOW_UNCAPPED:
            over = GV + EV > cap
        elif mutant == OVERFLOW_ROW or mutant == OVERFLOW_DROPPED or (mutant == OVERFLOW_LAST_LOST and c == C - 1):
            over = False
        overflow = overflow or over
    if mutant == OVERFLOW_ROW:
        overflow = queued > cap
    tr[4] = G
    tr[5] = E - D if mutant == TRACE_COUNTS_QUEUE else E
    if overflow:
        tr[1] = REASON_OVERFLOW
    else:
        for c in range(C):
            qlens[c] = min(qlens[c], cap)  # the kernel selects over min(Q, STREAM_QUEUE) entries
            for x in range(qlens[c]):
                if queue[c, x] == UNWRITTEN:
                    wild += 1  # an entry read but never written: only a mutant gets here
        if wild:
            return wild
        # The one pass of key - cutoff over the queues (2.5, 2.12); where it cannot place K
        # (K >= cutoff + NARROW_SPAN), the two passes over the same queues.
        status, w = _narrow(ekey, ecnt, W, top, nv, k, False, C, T, cutoff, slot, mutant, out, tr, queue, qlens, G,
                            D, local, total, prefix1, copies, cg, ce, False)
        if status == 2 and mutant != STREAM_NARROW_TO_DIRECT:
            status, w = _selection(ekey, ecnt, W, top, nv, k, False, C, T, 0, U, cutoff, slot, mutant, out, tr,
                                   queue, qlens, False, everything, D, G, local, total, total2, prefix1, prefix2,
                                   copies, cg, ce, 0)
        if status == 0:
            return wild + w
        # status 1: underflow (either selection); 2: the narrow pass's overflow, left
        # standing only by the mutant, which sends the row to the direct path
        tr[1] = REASON_OVERFLOW if status == 2 else REASON_UNDERFLOW
    # The direct path from global memory: the selection over every key (lo = 0), written
    # by a stream of each chunk.
    tr[0] = PATH_DIRECT
    every = mutant != FALLBACK_FROM_QUEUE
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        qlens[c] = end - start if every else min(qlens[c], cap)
    status, w = _selection(ekey, ecnt, W, top, nv, k, False, C, T, 0, U, 0, slot, mutant, out, tr, queue, qlens,
                           every, everything, 0, G, local, total, total2, prefix1, prefix2, copies, cg, ce, 0)
    return wild + w + status  # status 1: fewer than k keys selected from: only a mutant gets here


# ---------------------------------------------------------------------------------------
# One row
# ---------------------------------------------------------------------------------------
@njit(cache=True)
def _register_select(hist, q, mutant):
    """(b, above) of the q-th largest key in the register build's first pass (2.13): thread
    t sums the 4 V bins REG_BINS - 4V - 4Vt .. REG_BINS - 1 - 4Vt, a CTA scan over the
    threads gives the keys above its bins; the mutant drops the warps before it (each warp's 4 V 32
    bins counted from their own top)."""
    if mutant != REG_SELECT_WARP_BASE:
        return _select_bin(hist, q, mutant)
    span = 4 * REGISTER_VECTORS * 32
    for top in range(REG_BINS - 1, -1, -span):
        above = np.int64(0)
        for b in range(top, top - span, -1):
            if above + hist[b] >= q:
                return b, above
            above += hist[b]
    return 0, 0


@njit(cache=True)
def _register(ekey, ecnt, nv, k, T, mutant, out, tr, rhist, fine, order, cg, ce):
    """The register build (2.13): one CTA of T threads, thread t holding vectors Vt .. Vt
    + V - 1 (V = REGISTER_VECTORS). The
    window from the top: M the row's largest key, TOP_BINS bins of TOP_SPAN - min(M - key,
    TOP_SPAN) over every valid key, (b, A) = select_bin(window, k); b >= 1: K = M - TOP_SPAN
    + b exactly. Else (K at least TOP_SPAN steps below M) the two passes: pass 1 counts key
    >> REG_FINE_SHIFT of every valid key into REG_BINS bins, (b1, A1) = select_bin(hist,
    k); pass 2 the low REG_FINE_SHIFT bits of the keys of bin b1 into 16, (b2, A2) =
    select_bin(fine, k - A1); K = b1 << REG_FINE_SHIFT | b2, A = A1 + A2. Then the ranked
    write of the one CTA over every vector in thread order (index order)."""
    M = -1
    warp_vectors = 32 * REGISTER_VECTORS  # a warp's: V a lane
    for g in range(min(nv, warp_vectors) if mutant == REG_WINDOW_MAX_WARP0 else nv):
        for e in range(ecnt[g]):
            M = max(M, ekey[8 * g + e])
    window = np.zeros(TOP_SPAN + 1, np.int64)
    for g in range(nv):
        for e in range(ecnt[g]):
            window[_window_bin(M, ekey[8 * g + e], TOP_SPAN)] += 1
    b, A = _select_bin(window, k, mutant)
    if b >= 1 or mutant == REG_WINDOW_BIN0:
        K = M - TOP_SPAN + b + (1 if mutant == REG_WINDOW_OFF_BY_ONE else 0)
        ties = window[b]
    else:
        K, A, ties = _register_passes(ekey, ecnt, nv, k, mutant, rhist, fine)
    tr[0] = PATH_DIRECT
    tr[6] = K
    tr[7] = A
    # One round of every vector in index order: thread t's V vectors are consecutive, so the
    # kernel's one CTA scan over threads is this scan over vectors.
    if mutant == REG_SCAN_WARP_BASE:  # each warp's vectors ranked as if alone
        wild = 0
        for w in range(0, nv, warp_vectors):
            wild += _write_cta(ekey, ecnt, 8, w, order, min(warp_vectors, nv - w), T * REGISTER_VECTORS, K, A, k,
                               0, 0, ties, mutant, out, cg, ce, False)
        return wild
    wild = _write_cta(ekey, ecnt, 8, 0, order, nv, T * REGISTER_VECTORS, K, A, k, 0, 0, ties, mutant, out, cg, ce,
                      False)
    if mutant == REG_INDEX_STRIDE:  # logit x of thread x // (8 V) written as 8 (x // (8 V)) + x % (8 V)
        per = 8 * REGISTER_VECTORS
        for j in range(k):
            if out[j] >= 0:
                out[j] = 8 * (out[j] // per) + out[j] % per
    return wild


@njit(cache=True)
def _register_passes(ekey, ecnt, nv, k, mutant, rhist, fine):
    """The register build's two passes (2.13), where the window from the top cannot place
    K: (K, A, the count of keys == K)."""
    rhist[:] = 0
    for g in range(nv):
        for e in range(ecnt[g]):
            rhist[ekey[8 * g + e] >> REG_FINE_SHIFT] += 1
    b1, A1 = _register_select(rhist, k, mutant)
    high = b1 - 1 if mutant == REG_FINE_NEXT_BIN else b1
    fine[:] = 0
    for g in range(nv):
        for e in range(ecnt[g]):
            kk = ekey[8 * g + e]
            if (kk >> REG_FINE_SHIFT) == high or mutant == REG_FINE_EVERY_KEY:
                fine[kk & REG_FINE_MASK] += 1
    b2, A2 = _select_bin(fine, k if mutant == REG_FINE_Q_K else k - A1, mutant)
    return (b1 << REG_FINE_SHIFT) | b2, A1 + A2, fine[b2]


@njit(cache=True)
def _row(bits, length, k, block, C, T, V, DM, QM, U, slot, mutant, out, tr,
         ekey, ecnt, top, queue, qlens, local, total, total2, prefix1, prefix2, copies, cg, ce, samples,
         everything, rhist, fine, order):
    width = bits.shape[0]
    nv = (length + 7) // 8
    n = nv if block else length
    W = 1 if block else 8
    for f in range(8):
        tr[f] = -1
    tr[1] = REASON_NONE
    out[:] = UNWRITTEN

    # Stage: every valid vector's element keys, lane counts and top (2.2).
    pinned = n - 1
    if mutant == PIN_NONE:
        pinned = -1
    elif mutant == PIN_WRONG:
        pinned = n - 2
    for g in range(nv):
        if block:
            if g == pinned:
                kk = KEY_POS_INF
            else:
                kk = _block_key(bits, 8 * g, min(8, length - 8 * g), mutant)
            ekey[g] = kk
            ecnt[g] = 1
            top[g] = kk
        else:
            lanes = min(8, length - 8 * g)
            if lanes < 8 and mutant == LAST_LANE_EXTRA:
                lanes = min(lanes + 1, width - 8 * g)
            if (mutant == REG_THREAD_LAST_LANE and V == REGISTER_VECTORS and g == nv - 1
                    and length % (8 * V) == 8 * V - 1):
                lanes = min(lanes + 1, width - 8 * g)  # the boundary thread's last vector, 7 lanes valid
            if lanes < 8 and mutant == LAST_LANE_MISSING:
                lanes -= 1
            best = -1
            for e in range(lanes):
                kk = _okey(bits[8 * g + e], mutant)
                ekey[8 * g + e] = kk
                if kk > best and (e == 0 or mutant != TOP_FIRST_LANE):
                    best = kk
            ecnt[g] = lanes
            top[g] = best

    # 1. Short rows (1.4): fixed positions.
    short = n <= k
    if mutant == SHORT_LT:
        short = n < k
    if short:
        tr[0] = PATH_SHORT
        for j in range(k):
            v = -1
            if j < n:
                v = n - 1 - j if mutant == SHORT_REVERSED else j
                if block and ekey[v] == KEY_NEG_INF and mutant != NEGINF_SHORT_INDEX:
                    v = -1
            elif mutant == SHORT_PAD_ZERO:
                v = 0
            out[j] = v
        return 0
    if V == REGISTER_VECTORS:  # the register build (2.13)
        return _register(ekey, ecnt, nv, k, T, mutant, out, tr, rhist, fine, order, cg, ce)

    # DM: policy.direct_max_length(C, V), the longest row of the direct path (2.3); on the
    # streamed builds (U > 0: their tile's vectors a thread) D is the stage, and longer
    # token rows stream (2.12)
    DS = DM
    if mutant == ONE_CTA_D1 and C == 1:
        DM = 8 * C * T
    sampled = (not block) and length > DM
    if mutant == SAMPLED_GE:
        sampled = (not block) and nv >= DM // 8
    elif mutant == STREAM_AT_STAGE and U > 0:
        sampled = (not block) and length >= DM
    if sampled:
        # Samples (2.4): the S_c = 2048 / C' samples of chunk c of C' at index c S_c + j,
        # C' the CTAs' chunks where C divides 2048, else one, the row (3x512x4: every CTA
        # reads all 2048 from the row in global memory; policy.sample_chunks).
        CS = C if SAMPLES % C == 0 else 1
        S = SAMPLES // CS
        for c in range(CS):
            start, end = _chunk(c, nv, CS, mutant)
            m = min(8 * end, length) - 8 * start
            if mutant == SAMPLE_SPAN:
                m = 8 * (end - start)
            for j in range(S):
                if mutant == SAMPLE_DROP and j == S - 1:
                    samples[c * S + j] = 0
                    continue
                off = ((2 * j + 1) * m) // (2 * S)  # the middle of part j, then down to 2j's bank
                if mutant != SAMPLE_MIDDLE:
                    off = max(off - ((off - 2 * j) & (SAMPLE_BANK_LOGITS - 1)), 0)
                if mutant == SAMPLE_SHIFT:
                    off += 1
                p = min(8 * start + off, width - 1)
                samples[c * S + j] = _okey(bits[p], mutant)
        if mutant == Q_FLOOR:
            q = (SAMPLES * (k + SURVIVOR_AIM)) // length
        else:
            q = (SAMPLES * (k + SURVIVOR_AIM) + length - 1) // length
        # at most Q_DEVIATIONS deviations (sqrt m) above m, the samples expected above the
        # k-th largest key (2.4)
        m = (SAMPLES * k) // length if mutant == Q_M_FLOOR else (SAMPLES * k + length - 1) // length
        spread_sq = Q_DEVIATIONS * Q_DEVIATIONS * m
        spread = _ceil_sqrt(spread_sq)
        if mutant == Q_SPREAD_FLOOR and spread * spread > spread_sq:
            spread -= 1
        if mutant == Q_BOUND_ONLY:
            q = m + spread
        elif mutant != Q_AIM_ONLY:
            q = min(q, m + spread)
        # QM: policy.Q_MIN[k], the least sample rank (2.4)
        q = min(SAMPLES, max(1 if mutant == Q_MIN_ONE else QM, q))
        cutoff = _sample_cutoff(samples, q, mutant)
        if mutant == CUTOFF_PLUS:
            cutoff += 1
        elif mutant == CUTOFF_MINUS:
            cutoff -= 1
        tr[0] = PATH_SAMPLED
        tr[2] = q
        tr[3] = cutoff
        if U > 0:
            return _streamed(ekey, ecnt, W, top, nv, k, C, T, U, cutoff, slot, mutant, out, tr, queue, qlens,
                             local, total, total2, prefix1, prefix2, copies, cg, ce, everything)
        status, wild = _select(ekey, ecnt, W, top, nv, k, block, C, T, V, cutoff, slot, mutant, out, tr,
                               queue, qlens, local, total, total2, prefix1, prefix2, copies, cg, ce, everything,
                               0)
        if status == 0:
            return wild
        tr[1] = REASON_UNDERFLOW if status == 1 else REASON_OVERFLOW

    # Direct path (2.5): the same selection over every key (lo = 0); in token mode its
    # write queue (2.7) reads the tops of the slots a direct row fills (block mode keeps no
    # tops, 2.2: its write visits every key).
    tr[0] = PATH_DIRECT
    slots = 0 if block else min(V, DS // (8 * C * T))
    status, wild = _select(ekey, ecnt, W, top, nv, k, block, C, T, V, 0, slot, mutant, out, tr,
                           queue, qlens, local, total, total2, prefix1, prefix2, copies, cg, ce, everything, slots)
    if status != 0:
        return 1  # fewer than k keys >= 0 in a row of n > k: only a mutant gets here
    return wild


@njit(cache=True)
def _simulate_rows(logits, lengths, k, block, C, T, V, DM, QM, U, QC, mutant, out, trace, wild):
    """Every row of the batch on build (C, T, V); U, QC: the streamed builds' tile (vectors
    a thread) and queue capacity (vectors a CTA, 2.12), 0 on the other builds."""
    rows, width = logits.shape
    nvmax = (width + 7) // 8 + 1
    ekey = np.full(nvmax * 8, -1, np.int64)
    ecnt = np.zeros(nvmax, np.int64)
    top = np.zeros(nvmax, np.int64)
    # a CTA's queue: local vector indices (the streamed builds': exactly STREAM_QUEUE
    # entries, so a store past it is seen; block mode: a chunk's KEY_BLOCKS T V blocks, 2.2)
    queue = np.zeros((C, QC if QC else T * V * (KEY_BLOCKS if block else 1) + 64), np.int64)
    qlens = np.zeros(C, np.int64)
    local = np.zeros((C, BINS), np.int64)
    total = np.zeros(BINS, np.int64)
    total2 = np.zeros(BINS, np.int64)
    prefix1 = np.zeros((C, BINS), np.int64)
    prefix2 = np.zeros((C, BINS), np.int64)
    copies = np.zeros((32, BINS), np.int64)
    cg = np.zeros(T * V, np.int64)  # a write round's entries: T, or the register build's T V vectors
    ce = np.zeros(T * V, np.int64)
    samples = np.zeros(SAMPLES, np.int64)
    everything = np.arange(nvmax if QC else 0, dtype=np.int64)  # the fallback's "queue": every vector
    rhist = np.zeros(REG_BINS if V == REGISTER_VECTORS else 0, np.int64)  # the register build's two passes (2.13)
    fine = np.zeros(REG_FINE_MASK + 1, np.int64)
    order = np.arange(nvmax if V == REGISTER_VECTORS else 0, dtype=np.int64)  # its write's "queue": every vector
    for r in range(rows):
        wild[r] = _row(logits[r], lengths[r], k, block, C, T, V, DM, QM, U, r, mutant, out[r], trace[r],
                       ekey, ecnt, top, queue, qlens, local, total, total2, prefix1, prefix2, copies, cg, ce,
                       samples, everything, rhist, fine, order)


def resolve_build(rows, width, build=None, resident=None, block_mode=False, k=None):
    """The Build to simulate: `build` (anything Build.parse takes), checked to hold the
    width in this mode, or the policy's choice for rows x width in this mode at k with
    resident(build) clusters resident (default: every row's cluster at once)."""
    if build is None:
        if resident is None:
            def resident(b):  # every row's cluster resident at once
                return rows
        return policy.build_for(rows, width, resident, block_mode, k)
    chosen = Build.parse(build)
    capacity = chosen.capacity_in(block_mode)
    if width > capacity:
        raise ValueError(f"width = {width} exceeds the capacity {capacity} of build {chosen.name} in "
                         f"{'block' if block_mode else 'token'} mode")
    return chosen


def simulate(logits_bits, lengths, k, block_mode=False, *, build=None, resident=None, mutant=0):
    """(out int32 [rows, k], trace int32 [rows, 8]) of DecodeTopK's algorithm.

    On `build` (anything Build.parse takes: a Build, 'CxTxV', (cluster, vectors)),
    checked to hold the width, else on policy.build_for(rows, width, resident, block_mode,
    k) with resident defaulting to "every row's cluster resident". `mutant` (0: none)
    plants one bug of MUTANTS (by id or name)."""
    lengths = validate_inputs(logits_bits, lengths, k)
    block_mode = policy.check_flag("block_mode", block_mode)
    k = int(k)
    rows, width = logits_bits.shape
    chosen = resolve_build(rows, width, build, resident, block_mode, k)
    C, T, V = chosen
    # (a streamed build's block rows stage: 2.12 is token mode's)
    U, QC = (policy.STREAM_TILE, policy.STREAM_QUEUE) if chosen.streams and not block_mode else (0, 0)
    if isinstance(mutant, str):
        mutant = MUTANTS.id_of(mutant)
    out = np.full((rows, k), UNWRITTEN, dtype=np.int32)
    trace = np.full((rows, len(TRACE_FIELDS)), -1, dtype=np.int32)
    if rows == 0:
        return out, trace
    wild = np.zeros(rows, dtype=np.int64)
    _simulate_rows(np.ascontiguousarray(logits_bits), lengths, k, bool(block_mode), C, T, V,
                   policy.direct_max_length(C, V), policy.Q_MIN[k], U, QC, int(mutant), out, trace, wild)
    bad = np.flatnonzero(wild)
    if bad.size:
        r = int(bad[0])
        raise RuntimeError(f"row {r}: {int(wild[r])} write(s) outside the output row or a streamed queue or "
                           f"to a slot already written, or read(s) of queue entries never written "
                           f"(build {chosen.name})")
    return out, trace


def decode_topk_model(logits_bits, lengths, k, block_mode=False, build=None):
    """The model as a conformance implementation: (out, trace) on `build`, or on the
    policy's build for this batch when build is None."""
    return simulate(logits_bits, lengths, k, block_mode, build=build)
