"""The cluster model: DecodeTopK's algorithm (SPEC.md part 2) simulated CTA by CTA.

`simulate` runs, for each row, what the kernel's cluster does: the chunks of the valid
length (2.2), the path choice (2.3), the sampled path with its 2048 samples, cutoff, CTA
queues, per-thread counts, CTA scans, 64-bit reservations and survivor slots (2.4), the
fallback rules, the direct path's two whole-row histogram passes with 8 copies (2.5, 2.8),
the radix selections (2.6) and every write (1.4, 2.9). It returns the output and the trace
of SPEC.md 2.11, so a kernel's trace can be compared with it field by field.

Choices the spec leaves free, made here as the kernel (kernel/decode_topk_cute.py) makes
them, so that the model's output is what the kernel writes when its CTAs reserve in rank
order: the CTA queue holds thread 0's queued vectors (slot order), then thread 1's, ...;
CTAs reserve in rank order 0 .. C-1 (on the GPU the order of the atomics is free); CTA 0
hands the survivor list (slots [0, G) then [8192 - min(E, k), 8192)) to its threads round
robin. Output slots the algorithm never writes hold UNWRITTEN (-2), which no valid answer
contains; survivor slots never written hold key 0 and element UNWRITTEN.

Mutants. The per-row code takes an integer `mutant`; 0 is the algorithm, any other value
one planted bug of `MUTANTS` (name -> (id, description)), used by the mutation campaign
(`python -m decode_topk.conformance.mutation`) to show that the conformance suite observes a bug in
each step. A write that would leave a buffer (the output row or the 8192 survivor slots),
or a second write to one survivor slot (a race between CTAs, which racecheck reports), is
not performed; the row's error count records it and `simulate` raises RuntimeError, as a
sanitizer would stop the kernel.
"""

import numpy as np
from numba import njit

from decode_topk.kernel import policy
from decode_topk.kernel.policy import KEY_NEG_INF, KEY_POS_INF, TRACE_FIELDS, Build

from .mutants import Mutants
from .topk import validate_inputs

SAMPLES = policy.SAMPLES  # 2048
SURVIVOR_AIM = policy.SURVIVOR_AIM  # q aims at k + 2560 survivors
CAPACITY = policy.SURVIVOR_CAPACITY  # 8192
UNWRITTEN = -2
PATH_SHORT, PATH_SAMPLED, PATH_DIRECT = 0, 1, 2
REASON_NONE, REASON_OVERFLOW, REASON_UNDERFLOW = 0, 1, 2
COPIES = 8  # histogram copies of the direct passes (2.8)

# ---------------------------------------------------------------------------------------
# Mutants: planted bugs, one integer each (0 = none). Module-level ints, so numba compiles
# them as constants in the comparisons `mutant == NAME`.
# ---------------------------------------------------------------------------------------
MUTANTS = Mutants("")
_mutant = MUTANTS.add


Q_FLOOR = _mutant("q_floor", "q = floor(2048 (k + 2560) / length): rounded down instead of up")
Q_CLAMP_CTA = _mutant("q_clamp_cta", "q clamped to [1, 2048 / C] (a CTA's samples) instead of [1, 2048]")
CUTOFF_PLUS = _mutant("cutoff_plus_one", "sampled cutoff one key above the q-th largest sample")
CUTOFF_MINUS = _mutant("cutoff_minus_one", "sampled cutoff one key below the q-th largest sample")
SAMPLE_SHIFT = _mutant("sample_shift", "sample positions shifted one logit right")
SAMPLE_DROP = _mutant("sample_drop_last", "each CTA's last sample never stored (slot keeps key 0)")
SAMPLE_SPAN = _mutant("sample_span_vectors", "m_c = 8 (end_c - start_c): the partial last vector counted whole")
CHUNK_GAP = _mutant("chunk_gap", "end_c = start_(c+1) - 1: each CTA but the last drops its chunk's last vector")
CHUNK_CEIL = _mutant("chunk_ceil", "start_c = ceil(c nv / C) instead of floor")
TOP_FIRST_LANE = _mutant("top_first_lane", "vector top = its first lane's key, not the largest")
TOP_STRICT = _mutant("top_strict", "a vector is queued only if top > cutoff (not >=)")
QUEUE_DROP = _mutant("queue_drop_last", "the CTA queue loses its last entry")
UNPACK_STRIDE = _mutant("unpack_stride_half", "thread t unpacks entries t, t + T/2, ... (stride T/2)")
GT_RANK_COLLIDE = _mutant("gt_rank_collision", "a thread's gt keys all take its first rank")
SCAN_INCLUSIVE = _mutant("scan_inclusive", "gt prefix of scan2 inclusive instead of exclusive")
EQ_CAP_PLUS = _mutant("eq_cap_plus_one", "per-CTA eq cap min(EQ_c, k + 1)")
EQ_CAP_MINUS = _mutant("eq_cap_minus_one", "per-CTA eq cap min(EQ_c, k - 1)")
EQ_UNCAPPED = _mutant("eq_uncapped", "per-CTA eq survivors not capped at k")
CAPACITY_PLUS = _mutant("capacity_plus_one", "survivor capacity 8193 (decision, guards, slots)")
CAPACITY_MINUS = _mutant("capacity_minus_one", "survivor capacity 8191 (decision, guards, slots)")
FIT_DROPPED = _mutant("fit_dropped", "a CTA writes its survivors even when its reservation ends past 8192")
FIT_UNCAPPED = _mutant("fit_uncapped", "the fit rule counts the CTA's whole eq range, not the cluster's first k")
EQ_CLUSTER_UNCAPPED = _mutant("eq_cluster_uncapped", "eq survivors kept up to the per-CTA cap only, not be + r < k")
OVERFLOW_UNCAPPED = _mutant("overflow_uncapped", "overflow decided on G + E > 8192, not G + min(E, k) > 8192")
EQ_SLOT_OFF = _mutant("eq_slot_off_by_one", "eq survivor slot 8192 - (be + r) instead of 8191 - (be + r)")
OVERFLOW_INVERTED = _mutant("overflow_inverted", "overflow rule inverted: fall back when G + min(E, k) <= 8192")
OVERFLOW_DROPPED = _mutant("overflow_dropped", "overflow rule dropped")
UNDERFLOW_DROPPED = _mutant("underflow_dropped", "underflow rule dropped")
OVERFLOW_GE = _mutant("overflow_at_capacity", "overflow when G + min(E, k) >= 8192")
UNDERFLOW_LE = _mutant("underflow_at_k", "underflow when G + E <= k")
UNDERFLOW_INVERTED = _mutant("underflow_inverted", "underflow rule inverted: fall back when G + E >= k")
EMIT_EQ_UNLIMITED = _mutant("emit_eq_unlimited", "emit writes every survivor == K, not the first k - A")
EMIT_GT_ONLY = _mutant("emit_gt_only", "emit selects K among the gt survivors only")
DIRECT_EQ_UNLIMITED = _mutant("direct_eq_unlimited", "direct write: eq slots not limited to k - A")
DIRECT_A1_ONLY = _mutant("direct_above_pass1", "direct path A = A1 (pass 2's above dropped)")
DIRECT_PASS2_RANK = _mutant("direct_pass2_rank_k", "direct pass 2 selects rank k instead of k - A1")
DIRECT_PASS2_ALL = _mutant("direct_pass2_unfiltered", "direct pass 2 counts every key, ignoring the pass-1 bin")
RADIX_PASS2_ALL = _mutant("radix_pass2_unfiltered", "radix_select pass 2 counts every key, ignoring the pass-1 bin")
SELECT_BIN_STRICT = _mutant("select_bin_strict", "select_bin takes the first bin with sum(hist[b:]) > q (off by one)")
SELECT_BIN_ABOVE = _mutant("select_bin_above_inclusive", "select_bin's above includes the bin itself")
HIST_COPY_DROP = _mutant("hist_copy_dropped", "direct histograms sum copies 0..6, dropping copy 7")
HIST_COPY_WARP = _mutant("hist_copy_by_warp", "histogram copy = warp index instead of lane mod 8 (copies >= 8 lost)")
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
SAMPLED_GE = _mutant("sampled_at_one_vector", "sampled path for nv >= C T (one vector a thread too)")
LAST_LANE_EXTRA = _mutant("last_lane_extra", "the masked last vector reads one lane too many")
LAST_LANE_MISSING = _mutant("last_lane_missing", "the masked last vector reads one lane too few")
DIRECT_PAIR_SHARED = _mutant("direct_pair_shared", "direct reservations continue the sampled pair (no separate pair)")
RESERVE_NEW = _mutant("reserve_returns_new", "the reservation atomic's result taken as the new value, not the old")
RESERVE_SWAPPED = _mutant("reserve_swapped", "the 64-bit reservation packs gt high and eq low (halves swapped)")

MUTANT_NAMES = {v[0]: k for k, v in MUTANTS.items()}


# ---------------------------------------------------------------------------------------
# Per-element pieces
# ---------------------------------------------------------------------------------------
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
    for b in range(255, -1, -1):
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
# Filtering (2.7): queue, per-thread counts, scan2, and the ranked visit
# ---------------------------------------------------------------------------------------
@njit(cache=True)
def _queue(top, start, nl, T, V, cutoff, mutant, queue):
    """The CTA queue: thread t's queued vectors (slots s = 0 .. V-1) after those of the
    threads below it, as the kernel's scan places them."""
    qlen = 0
    for t in range(T):
        for s in range(V):
            i = s * T + t
            if i >= nl:
                break
            tp = top[start + i]
            if tp > cutoff or (tp == cutoff and mutant != TOP_STRICT):
                queue[qlen] = i
                qlen += 1
    if mutant == QUEUE_DROP and qlen > 0:
        qlen -= 1
    return qlen


@njit(cache=True)
def _stride(T, mutant):
    return T // 2 if mutant == UNPACK_STRIDE else T


@njit(cache=True)
def _count(ekey, ecnt, W, start, queue, qlen, T, cutoff, mutant, tgt, teq):
    """Each thread's keys > cutoff and == cutoff over its queue entries t, t+T, ..."""
    stride = _stride(T, mutant)
    for t in range(T):
        gt = 0
        eq = 0
        x = t
        while x < qlen:
            g = start + queue[x]
            for e in range(ecnt[g]):
                kk = ekey[g * W + e]
                if kk > cutoff:
                    gt += 1
                elif kk == cutoff:
                    eq += 1
            x += stride
        tgt[t] = gt
        teq[t] = eq


@njit(cache=True)
def _scan2(tgt, teq, T, gbase, ebase, mutant):
    """Exclusive CTA prefixes of both counts, and the CTA totals."""
    sg = 0
    se = 0
    for t in range(T):
        gbase[t] = sg + tgt[t] if mutant == SCAN_INCLUSIVE else sg
        ebase[t] = se
        sg += tgt[t]
        se += teq[t]
    return sg, se


@njit(cache=True)
def _reserve(pair_gt, pair_eq, gtc, eqc, mutant):
    """One 64-bit cluster atomic add of (eqc << 32) | gtc on CTA 0's pair: returns the old
    pair (this CTA's bases) and the new one."""
    if mutant == RESERVE_SWAPPED:
        base_gt, base_eq = pair_eq, pair_gt
        pair_eq += gtc
        pair_gt += eqc
    else:
        base_gt, base_eq = pair_gt, pair_eq
        pair_gt += gtc
        pair_eq += eqc
    if mutant == RESERVE_NEW:
        base_gt, base_eq = pair_gt, pair_eq
    return base_gt, base_eq, pair_gt, pair_eq


@njit(cache=True)
def _write_cta(ekey, ecnt, W, start, queue, qlen, T, cutoff, mutant, gbase, ebase,
               bg, be, eq_limit, to_out, out, A, k, skey, sidx, cap, block):
    """Visit the CTA's queued keys in each thread's order with their ranks; write them.

    to_out False (sampled): gt rank r -> survivor slot bg + r, eq rank r < eq_limit with
    be + r < k (the cluster's first k) -> slot cap - 1 - (be + r). to_out True (direct):
    gt rank r -> out[bg + r], eq rank r -> out[A + be + r] if be + r < k - A. Returns wild
    writes."""
    stride = _stride(T, mutant)
    wild = 0
    for t in range(T):
        rg = gbase[t]
        re = ebase[t]
        x = t
        while x < qlen:
            g = start + queue[x]
            for e in range(ecnt[g]):
                kk = ekey[g * W + e]
                if kk > cutoff:
                    r = rg
                    if mutant != GT_RANK_COLLIDE:
                        rg += 1
                    if to_out:
                        pos = bg + r
                        if pos < 0 or pos >= k:
                            wild += 1
                        else:
                            out[pos] = _element(g, e, kk, block, mutant)
                    else:
                        off = bg + r
                        if off < 0 or off >= CAPACITY or sidx[off] != UNWRITTEN:
                            wild += 1  # outside the buffer, or a slot written twice (a race)
                        else:
                            skey[off] = kk
                            sidx[off] = _element(g, e, kk, block, mutant)
                elif kk == cutoff:
                    r = re
                    re += 1
                    if to_out:
                        if be + r < k - A or mutant == DIRECT_EQ_UNLIMITED:
                            pos = A + be + r
                            if pos < 0 or pos >= k:
                                wild += 1
                            else:
                                out[pos] = _element(g, e, kk, block, mutant)
                    elif r < eq_limit and (be + r < k or mutant == EQ_CLUSTER_UNCAPPED):
                        slot = cap - 1 - (be + r)
                        if mutant == EQ_SLOT_OFF:
                            slot += 1
                        if slot < 0 or slot >= CAPACITY or sidx[slot] != UNWRITTEN:
                            wild += 1  # outside the buffer, or a slot written twice (a race)
                        else:
                            skey[slot] = kk
                            sidx[slot] = _element(g, e, kk, block, mutant)
            x += stride
    return wild


# ---------------------------------------------------------------------------------------
# One row
# ---------------------------------------------------------------------------------------
@njit(cache=True)
def _row(bits, length, k, block, C, T, V, mutant, out, tr,
         ekey, ecnt, top, queue, tgt, teq, gbase, ebase, copies, samples, skey, sidx, tmp):
    width = bits.shape[0]
    nv = (length + 7) // 8
    n = nv if block else length
    W = 1 if block else 8
    for f in range(8):
        tr[f] = -1
    tr[1] = REASON_NONE
    out[:] = UNWRITTEN
    wild = 0

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
        return wild

    sampled = (not block) and nv > C * T
    if mutant == SAMPLED_GE:
        sampled = (not block) and nv >= C * T
    cap = CAPACITY
    if mutant == CAPACITY_PLUS:
        cap = CAPACITY + 1
    elif mutant == CAPACITY_MINUS:
        cap = CAPACITY - 1
    pg = 0  # CTA 0's sampled pair (gt, eq)
    pe = 0
    if sampled:
        # Samples (2.4): CTA c's S_c samples from its own chunk, at index c S_c + j.
        S = SAMPLES // C
        for c in range(C):
            start, end = _chunk(c, nv, C, mutant)
            m = min(8 * end, length) - 8 * start
            if mutant == SAMPLE_SPAN:
                m = 8 * (end - start)
            for j in range(S):
                if mutant == SAMPLE_DROP and j == S - 1:
                    samples[c * S + j] = 0
                    continue
                off = ((2 * j + 1) * m) // (2 * S)
                if mutant == SAMPLE_SHIFT:
                    off += 1
                p = min(8 * start + off, width - 1)
                samples[c * S + j] = _okey(bits[p], mutant)
        if mutant == Q_FLOOR:
            q = (SAMPLES * (k + SURVIVOR_AIM)) // length
        else:
            q = (SAMPLES * (k + SURVIVOR_AIM) + length - 1) // length
        hi = S if mutant == Q_CLAMP_CTA else SAMPLES
        q = min(hi, max(1, q))
        cutoff, _ = _radix_select(samples, SAMPLES, q, mutant)
        if mutant == CUTOFF_PLUS:
            cutoff += 1
        elif mutant == CUTOFF_MINUS:
            cutoff -= 1
        tr[2] = q
        tr[3] = cutoff

        # Survivors: filter, scan, reserve on CTA 0's sampled pair, write the slots.
        skey[:] = 0
        sidx[:] = UNWRITTEN
        for c in range(C):
            start, end = _chunk(c, nv, C, mutant)
            qlen = _queue(top, start, end - start, T, V, cutoff, mutant, queue)
            _count(ekey, ecnt, W, start, queue, qlen, T, cutoff, mutant, tgt, teq)
            gtc, eqc = _scan2(tgt, teq, T, gbase, ebase, mutant)
            if mutant == EQ_CAP_PLUS:
                eqc = min(eqc, k + 1)
            elif mutant == EQ_CAP_MINUS:
                eqc = min(eqc, k - 1)
            elif mutant != EQ_UNCAPPED:
                eqc = min(eqc, k)
            bg, be, pg, pe = _reserve(pg, pe, gtc, eqc, mutant)
            # A CTA writes only if what it keeps fits: its gt range and the cluster's first k
            # eq slots up to its own; then no two writes share a slot, and one that does not
            # fit belongs to an overflowing row (never read).
            kept_eq = min(be + eqc, k)
            if mutant == FIT_UNCAPPED:
                kept_eq = be + eqc
            if bg + gtc + kept_eq <= cap or mutant == FIT_DROPPED:
                wild += _write_cta(ekey, ecnt, W, start, queue, qlen, T, cutoff, mutant, gbase, ebase,
                                   bg, be, eqc, False, out, 0, k, skey, sidx, cap, block)

        # Decision (after the cluster barrier every CTA reads the pair).
        G = pg
        E = pe
        tr[4] = G
        tr[5] = E
        if mutant != OVERFLOW_UNCAPPED:
            E = min(E, k)  # the eq survivors kept: the cluster's first k
        overflow = G + E > cap
        if mutant == OVERFLOW_GE:
            overflow = G + E >= cap
        elif mutant == OVERFLOW_INVERTED:
            overflow = G + E <= cap
        elif mutant == OVERFLOW_DROPPED:
            overflow = False
        underflow = G + E < k
        if mutant == UNDERFLOW_LE:
            underflow = G + E <= k
        elif mutant == UNDERFLOW_INVERTED:
            underflow = G + E >= k
        elif mutant == UNDERFLOW_DROPPED:
            underflow = False
        if overflow:
            tr[1] = REASON_OVERFLOW
        elif underflow:
            tr[1] = REASON_UNDERFLOW
        else:
            # Emit: CTA 0 selects among slots [0, G) and [cap - E, cap) (E is min(E, k) here).
            tr[0] = PATH_SAMPLED
            count = G + E
            if mutant == EMIT_GT_ONLY:
                count = G
            # queue[x]: the slot of list entry x; tmp[x]: its key.
            for x in range(count):
                s = x if x < G else cap - E + (x - G)
                if s < 0 or s >= CAPACITY:
                    return wild + 1  # a read outside the survivor buffer
                queue[x] = s
                tmp[x] = skey[s]
            K, A = _radix_select(tmp, count, k, mutant)
            tr[6] = K
            tr[7] = A
            # Thread t of CTA 0 takes list entries t, t + T, ...; count, scan, write.
            for t in range(T):
                gt = 0
                eq = 0
                x = t
                while x < count:
                    if tmp[x] > K:
                        gt += 1
                    elif tmp[x] == K:
                        eq += 1
                    x += T
                tgt[t] = gt
                teq[t] = eq
            _scan2(tgt, teq, T, gbase, ebase, mutant)
            for t in range(T):
                rg = gbase[t]
                re = ebase[t]
                x = t
                while x < count:
                    kk = tmp[x]
                    pos = -1
                    if kk > K:
                        pos = rg
                        if mutant != GT_RANK_COLLIDE:
                            rg += 1
                    elif kk == K:
                        if re < k - A or mutant == EMIT_EQ_UNLIMITED:
                            pos = A + re
                        re += 1
                    if pos != -1:
                        if pos < 0 or pos >= k:
                            wild += 1
                        else:
                            out[pos] = sidx[queue[x]]
                    x += T
            return wild
        tr[0] = PATH_DIRECT

    # Direct path (2.5): two whole-row histogram passes with 8 copies, then the writes.
    tr[0] = PATH_DIRECT
    hist = np.zeros(256, np.int64)
    b1 = 0
    A1 = 0
    b2 = 0
    A2 = 0
    for p in range(2):
        hist[:] = 0
        for c in range(C):
            if mutant == HIST_CTA_DROP and c == C - 1:
                continue
            start, end = _chunk(c, nv, C, mutant)
            nl = end - start
            copies[:, :] = 0
            for t in range(T):
                cp = (t % 32) % COPIES
                if mutant == HIST_COPY_WARP:
                    cp = t // 32
                for s in range(V):
                    i = s * T + t
                    if i >= nl:
                        break
                    g = start + i
                    for e in range(ecnt[g]):
                        kk = ekey[g * W + e]
                        if p == 0:
                            copies[cp, kk >> 8] += 1
                        elif (kk >> 8) == b1 or mutant == DIRECT_PASS2_ALL:
                            copies[cp, kk & 0xFF] += 1
            used = COPIES - 1 if mutant == HIST_COPY_DROP else COPIES
            for b in range(256):
                sm = 0
                for cpy in range(used):
                    sm += copies[cpy, b]
                hist[b] += sm
        if p == 0:
            b1, A1 = _select_bin(hist, k, mutant)
        else:
            rank = k if mutant == DIRECT_PASS2_RANK else k - A1
            b2, A2 = _select_bin(hist, rank, mutant)
    K = (b1 << 8) | b2
    A = A1 if mutant == DIRECT_A1_ONLY else A1 + A2
    tr[6] = K
    tr[7] = A
    dg = 0  # CTA 0's direct pair
    de = 0
    if mutant == DIRECT_PAIR_SHARED:
        dg = pg
        de = pe
    for c in range(C):
        start, end = _chunk(c, nv, C, mutant)
        qlen = _queue(top, start, end - start, T, V, K, mutant, queue)
        _count(ekey, ecnt, W, start, queue, qlen, T, K, mutant, tgt, teq)
        gtc, eqc = _scan2(tgt, teq, T, gbase, ebase, mutant)
        bg, be, dg, de = _reserve(dg, de, gtc, eqc, mutant)
        wild += _write_cta(ekey, ecnt, W, start, queue, qlen, T, K, mutant, gbase, ebase,
                           bg, be, 0, True, out, A, k, skey, sidx, cap, block)
    return wild


@njit(cache=True)
def _simulate_rows(logits, lengths, k, block, C, T, V, mutant, out, trace, wild):
    rows, width = logits.shape
    nvmax = (width + 7) // 8 + 1
    ekey = np.full(nvmax * 8, -1, np.int64)
    ecnt = np.zeros(nvmax, np.int64)
    top = np.zeros(nvmax, np.int64)
    queue = np.zeros(max(T * V, 2 * CAPACITY) + 64, np.int64)
    tgt = np.zeros(T, np.int64)
    teq = np.zeros(T, np.int64)
    gbase = np.zeros(T, np.int64)
    ebase = np.zeros(T, np.int64)
    copies = np.zeros((32, 256), np.int64)
    samples = np.zeros(SAMPLES, np.int64)
    skey = np.zeros(CAPACITY, np.int64)
    sidx = np.zeros(CAPACITY, np.int64)
    tmp = np.zeros(2 * CAPACITY + 64, np.int64)
    for r in range(rows):
        wild[r] = _row(logits[r], lengths[r], k, block, C, T, V, mutant, out[r], trace[r],
                       ekey, ecnt, top, queue, tgt, teq, gbase, ebase, copies, samples,
                       skey, sidx, tmp)


def resolve_build(rows, width, build=None, resident=None):
    """The Build to simulate: `build` (anything Build.parse takes), checked to hold the
    width, or the policy's choice for rows x width with resident(build) clusters
    resident (default: every row's cluster at once)."""
    if build is None:
        if resident is None:
            def resident(b):  # every row's cluster resident at once
                return rows
        chosen = policy.build_for(rows, width, resident)
        limit = policy.max_rows(width, resident)
        if limit is not None and rows > limit:
            raise ValueError(f"rows = {rows} exceeds the {limit} rows the 16-CTA build takes at width {width}")
        return chosen
    chosen = Build.parse(build)
    if width > chosen.capacity:
        raise ValueError(f"width = {width} exceeds the capacity {chosen.capacity} of build {chosen.name}")
    return chosen


def simulate(logits_bits, lengths, k, block_mode=False, *, build=None, resident=None, mutant=0):
    """(out int32 [rows, k], trace int32 [rows, 8]) of DecodeTopK's algorithm.

    On `build` (anything Build.parse takes: a Build, 'CxTxV', (cluster, vectors)),
    checked to hold the width, else on policy.build_for(rows, width, resident) with
    resident defaulting to "every row's cluster resident". `mutant` (0: none) plants one
    bug of MUTANTS (by id or name)."""
    lengths = validate_inputs(logits_bits, lengths, k)
    block_mode = policy.check_flag("block_mode", block_mode)
    k = int(k)
    rows, width = logits_bits.shape
    C, T, V = resolve_build(rows, width, build, resident)
    if isinstance(mutant, str):
        mutant = MUTANTS.id_of(mutant)
    out = np.full((rows, k), UNWRITTEN, dtype=np.int32)
    trace = np.full((rows, len(TRACE_FIELDS)), -1, dtype=np.int32)
    if rows == 0:
        return out, trace
    wild = np.zeros(rows, dtype=np.int64)
    _simulate_rows(np.ascontiguousarray(logits_bits), lengths, k, bool(block_mode),
                   C, T, V, int(mutant), out, trace, wild)
    bad = np.flatnonzero(wild)
    if bad.size:
        r = int(bad[0])
        raise RuntimeError(f"row {r}: {int(wild[r])} write(s) outside the output row or the "
                           f"survivor buffer, or to a survivor slot already written (build {Build(C, T, V).name})")
    return out, trace


def decode_topk_model(logits_bits, lengths, k, block_mode=False, build=None):
    """The model as a conformance implementation: (out, trace) on `build`, or on the
    policy's build for this batch when build is None."""
    return simulate(logits_bits, lengths, k, block_mode, build=build)
