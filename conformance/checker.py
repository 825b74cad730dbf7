"""The contract checker (SPEC.md 1.4): accepts every output the contract allows, nothing else.

It never compares against one reference answer, because the contract leaves the tie
choice and the slot order free; it checks the defining properties of a row instead:
- short rows (n <= k, exactly k included) must equal the fixed answer;
- other rows: every slot is a valid element index or a permitted -1, the indices are
  distinct, none has a key below K (the k-th largest key), every index with a key above K
  is present, and -1 stands exactly for the -inf blocks (block mode, K = -inf only).
Those properties together force exactly k - |{key > K}| indices of key K.

The element rules (order key, block value, pinned block, element count, short-row answer)
come from conformance/contract.py, the checker's own statement of them, never from the
reference's helpers, so a bug there cannot blind the reference run and its judge together.
Its decisions can be planted with faults (contract.MUTANTS, `fault(...)` below) for the
mutation campaign's checker target; tests/test_checker_meta.py must catch each one.

Reason codes (`Violation.reason`):
  bad-output      out is not int32 [rows, k] (a ValueError here; the suite reports it so)
  out-of-range    an index below -1, or at or past the batch's element count (the width,
                  or ceil(width / 8) blocks)
  past-length     an index in [n, element count): an element past the row's length
  duplicate       an index written twice
  wrong-tie       an index whose key < K
  missed-greater  an index with key > K absent
  not-minus-one   a -inf block written as its index (block mode, K = -inf)
  bad-minus-one   a -1 where a valid index belongs
  short-row       an n <= k row differs from the fixed answer
"""

from dataclasses import dataclass, field

import numpy as np

from . import contract
from .contract import (
    BLOCK_LIMIT_WIDTH,
    DUP_ADJACENT,
    DUP_OFF,
    KEY_NEG_INF,
    KTH_RANK,
    LAST_ROW_SKIPPED,
    MINUS_ONE_BLOCK,
    MINUS_ONE_TOKEN,
    MISSED_BY_COUNT,
    MISSED_CLAMPED,
    MISSED_GE,
    MISSED_OFF,
    STRICT_ANY_ORDER,
    NOT_MINUS_ONE_OFF,
    PAST_N,
    RANGE_AT_LIMIT,
    RANGE_NO_LOW,
    SHORT_AS_SET,
    SHORT_BELOW_K,
    SHORT_K_PLUS_ONE,
    SHORT_PREFIX,
    WRONG_TIE_LE,
    WRONG_TIE_OFF,
    fault,
)


@dataclass(frozen=True)
class Violation:
    """One broken rule of one row: `reason` is a short code (module docstring), `detail` a
    sentence, `repro` what it takes to reproduce it (row, length, k, mode, the offending
    position / index / key and K; the suite adds the case name and seed)."""

    row: int
    reason: str
    detail: str
    repro: dict = field(default_factory=dict, hash=False, compare=False)


def validate_out(out, rows, k):
    """Raise ValueError unless `out` is an int32 [rows, k] array."""
    if not isinstance(out, np.ndarray) or out.dtype != np.int32:
        raise ValueError(f"out must be a np.int32 array, got {type(out).__name__} of dtype "
                         f"{getattr(out, 'dtype', None)}")
    if out.shape != (rows, k):
        raise ValueError(f"out must have shape {(rows, k)}, got {out.shape}")


def check(logits_bits, lengths, k, block_mode, out, strict=False):
    """All contract violations of `out` for these inputs (an empty list means it conforms).

    strict: also require, of every row that meets the contract, the canonical answer slot
    for slot (SPEC.md 1.4: ties by lowest index, ascending order), reason 'not-canonical'
    with the first slot that differs; for implementations that claim it.

    Raises ValueError on invalid inputs (SPEC.md 1.5), including an `out` of the wrong
    dtype or shape.
    """
    contract.validate_inputs(logits_bits, lengths, k)
    block_mode = contract.mode(block_mode)
    lengths = contract.row_lengths(lengths)
    k = int(k)
    validate_out(out, logits_bits.shape[0], k)
    width = logits_bits.shape[1]
    # Indices at or past the row's n but below the batch's element count are "past-length"
    # (a read of garbage); at or past the element count, "out-of-range" (no such element).
    limit = width if fault(BLOCK_LIMIT_WIDTH) else contract.element_count(width, block_mode)
    violations = []
    for r, length in enumerate(lengths[:-1] if fault(LAST_ROW_SKIPPED) else lengths):
        keys = contract.element_keys(logits_bits[r], length, block_mode)
        base = {"row": r, "length": int(length), "k": k, "block_mode": bool(block_mode)}
        if _is_short(keys.size, k):
            found = _check_short_row(keys, k, block_mode, out[r], base)
        else:
            found = _check_long_row(keys, k, block_mode, out[r], limit, base)
        if strict and not found:
            found = _check_canonical(keys, k, block_mode, out[r], base)
        violations += found
    return violations


def _check_canonical(keys, k, block_mode, row_out, base):
    want = contract.canonical_answer(keys, k, block_mode)
    if fault(STRICT_ANY_ORDER):
        same = np.array_equal(np.sort(want), np.sort(row_out))
    else:
        same = np.array_equal(want, row_out)
    if same:
        return []
    slot = int(np.flatnonzero(want != row_out)[0])
    return [_violation(base, "not-canonical", f"slot {slot} holds {int(row_out[slot])}, the canonical answer "
                       f"{int(want[slot])} (ties by lowest index, ascending order)", slot=slot)]


def _is_short(n, k):
    """SPEC.md 1.4: a row of n <= k elements has the fixed answer; exactly k is short."""
    if fault(SHORT_BELOW_K):
        return n < k
    if fault(SHORT_K_PLUS_ONE):
        return n <= k + 1
    return n <= k


def _violation(base, reason, detail, **where):
    return Violation(base["row"], reason, detail, {**base, **where})


def _check_short_row(keys, k, block_mode, row_out, base):
    expected = contract.short_row_answer(keys, k, block_mode)
    differs = row_out != expected
    if fault(SHORT_AS_SET):
        differs = np.sort(row_out) != np.sort(expected)
    if fault(SHORT_PREFIX):
        differs[keys.size:] = False
    wrong = np.flatnonzero(differs)
    if wrong.size == 0:
        return []
    j = int(wrong[0])
    return [_violation(base, "short-row",
                       f"{wrong.size} slots differ from the fixed short-row answer; first: "
                       f"out[{j}] = {int(row_out[j])}, expected {int(expected[j])}",
                       position=j, index=int(row_out[j]), expected=int(expected[j]))]


def _kth_key(keys, k):
    """K, the k-th largest key (np.partition: no full sort of a 1M-element row)."""
    rank = k + 1 if fault(KTH_RANK) else k
    return int(np.partition(keys, keys.size - rank)[keys.size - rank])


def _check_long_row(keys, k, block_mode, row_out, limit, base):
    n = keys.size
    kth = _kth_key(keys, k)
    base = {**base, "K": kth}
    found = []

    def report(reason, mask, detail):
        positions = np.flatnonzero(mask)
        if positions.size:
            j = int(positions[0])
            index = int(row_out[j])
            key = int(keys[index]) if 0 <= index < n else None
            found.append(_violation(base, reason, f"{positions.size} slots: {detail}; first: "
                                    f"out[{j}] = {index}" + ("" if key is None else f" (key {key:#06x})"),
                                    position=j, index=index, key=key))

    too_low = np.zeros(row_out.shape, dtype=bool) if fault(RANGE_NO_LOW) else row_out < -1
    too_high = row_out > limit if fault(RANGE_AT_LIMIT) else row_out >= limit
    report("out-of-range", too_low | too_high, f"index outside [-1, {limit})")
    past = row_out > n if fault(PAST_N) else row_out >= n
    report("past-length", past & (row_out < limit), f"index at or past n = {n}")
    valid = (row_out >= 0) & (row_out < n)
    safe = np.where(valid, row_out, 0)
    picked = np.where(valid, keys[safe], -1)
    # -1 stands for a -inf block, which only block mode has and only a row whose k-th key
    # is -inf selects (SPEC.md 1.4).
    minus_one_allowed = (block_mode or fault(MINUS_ONE_TOKEN)) and (kth == KEY_NEG_INF or fault(MINUS_ONE_BLOCK))
    report("bad-minus-one", (row_out == -1) & (not minus_one_allowed),
           "-1 where a valid index belongs" + (" (K is not -inf)" if block_mode else " (token mode)"))
    below = picked <= kth if fault(WRONG_TIE_LE) else picked < kth
    if not fault(WRONG_TIE_OFF):
        report("wrong-tie", valid & below, f"key below K = {kth:#06x}")
    if block_mode and kth == KEY_NEG_INF and not fault(NOT_MINUS_ONE_OFF):
        report("not-minus-one", valid & (picked == KEY_NEG_INF), "a -inf block written as its index")
    if not fault(DUP_OFF):
        report("duplicate", valid & _repeated(safe, valid, n), "index written more than once")
    if fault(MISSED_BY_COUNT):
        above = np.count_nonzero(valid & (picked > kth))
        if above < np.count_nonzero(keys > kth):
            found += _missed_greater(keys, kth, safe[valid], base)
    elif not fault(MISSED_OFF):
        found += _missed_greater(keys, kth, safe if fault(MISSED_CLAMPED) else safe[valid], base)
    return found


def _repeated(indices, valid, n):
    """True at each valid slot whose index an earlier valid slot already holds."""
    if fault(DUP_ADJACENT):
        repeated = np.zeros(indices.size, dtype=bool)
        repeated[1:] = (indices[1:] == indices[:-1]) & valid[:-1]
        return repeated
    seen_first = np.full(n, -1, dtype=np.int64)
    positions = np.flatnonzero(valid)
    # Writing positions in reverse leaves each index's first position in place.
    seen_first[indices[positions[::-1]]] = positions[::-1]
    repeated = np.zeros(indices.size, dtype=bool)
    repeated[positions] = seen_first[indices[positions]] != positions
    return repeated


def _missed_greater(keys, kth, written, base):
    """The indices with a key above K that no slot holds (`written`: the valid indices)."""
    present = np.zeros(keys.size, dtype=bool)
    present[written] = True
    owed = keys >= kth if fault(MISSED_GE) else keys > kth
    missed = np.flatnonzero(owed & ~present)
    if missed.size == 0:
        return []
    i = int(missed[0])
    return [_violation(base, "missed-greater",
                       f"{missed.size} indices with a key above K = {kth:#06x} are absent; "
                       f"first: index {i} (key {int(keys[i]):#06x})",
                       index=i, key=int(keys[i]))]
