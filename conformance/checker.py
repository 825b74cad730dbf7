"""The contract checker (SPEC.md 1.4): accepts every output the contract allows, nothing else.

It never compares against one reference answer, because the contract leaves the tie
choice and the slot order free; it checks the defining properties of a row instead:
- short rows (n <= k) must equal the fixed answer;
- other rows: every slot is a valid element index or a permitted -1, the indices are
  distinct, none has a key below K (the k-th largest key), every index with a key above K
  is present, and -1 stands exactly for the -inf blocks (block mode, K = -inf only).
Those properties together force exactly k - |{key > K}| indices of key K.

Reason codes (`Violation.reason`):
  bad-output     out is not int32 [rows, k]      out-of-range  index < -1 or beyond the width
  past-length    index in [n, width)             duplicate     an index written twice
  wrong-tie      an index whose key < K          missed-greater an index with key > K absent
  not-minus-one  a -inf block written as its index (block mode, K = -inf)
  bad-minus-one  a -1 where a valid index belongs
  short-row      an n <= k row differs from the fixed answer
"""

from dataclasses import dataclass, field

import numpy as np

from decode_topk.reference.bits import KEY_NEG_INF
from decode_topk.reference.topk import element_count, element_keys, short_row_answer, validate_inputs


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


def check(logits_bits, lengths, k, block_mode, out):
    """All contract violations of `out` for these inputs (an empty list means it conforms).

    Raises ValueError on invalid inputs (SPEC.md 1.5), including an `out` of the wrong
    dtype or shape.
    """
    lengths = validate_inputs(logits_bits, lengths, k)
    k = int(k)
    validate_out(out, logits_bits.shape[0], k)
    width = logits_bits.shape[1]
    limit = element_count(width, block_mode)
    violations = []
    for r, length in enumerate(lengths):
        keys = element_keys(logits_bits[r], length, block_mode)
        base = {"row": r, "length": int(length), "k": k, "block_mode": bool(block_mode)}
        if keys.size <= k:
            violations += _check_short_row(keys, k, block_mode, out[r], base)
        else:
            violations += _check_long_row(keys, k, block_mode, out[r], limit, base)
    return violations


def _violation(base, reason, detail, **where):
    return Violation(base["row"], reason, detail, {**base, **where})


def _check_short_row(keys, k, block_mode, row_out, base):
    expected = short_row_answer(keys, k, block_mode)
    wrong = np.flatnonzero(row_out != expected)
    if wrong.size == 0:
        return []
    j = int(wrong[0])
    return [_violation(base, "short-row",
                       f"{wrong.size} slots differ from the fixed short-row answer; first: "
                       f"out[{j}] = {int(row_out[j])}, expected {int(expected[j])}",
                       position=j, index=int(row_out[j]), expected=int(expected[j]))]


def _kth_key(keys, k):
    """K, the k-th largest key (np.partition: no full sort of a 1M-element row)."""
    return int(np.partition(keys, keys.size - k)[keys.size - k])


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

    report("out-of-range", (row_out < -1) | (row_out >= limit), f"index outside [-1, {limit})")
    report("past-length", (row_out >= n) & (row_out < limit), f"index at or past n = {n}")
    valid = (row_out >= 0) & (row_out < n)
    safe = np.where(valid, row_out, 0)
    picked = np.where(valid, keys[safe].astype(np.int32), -1)
    minus_one_allowed = block_mode and kth == KEY_NEG_INF
    report("bad-minus-one", (row_out == -1) & (not minus_one_allowed),
           "-1 where a valid index belongs" + (" (K is not -inf)" if block_mode else " (token mode)"))
    report("wrong-tie", valid & (picked < kth), f"key below K = {kth:#06x}")
    if minus_one_allowed:
        report("not-minus-one", valid & (picked == KEY_NEG_INF), "a -inf block written as its index")
    report("duplicate", valid & _repeated(safe, valid, n), "index written more than once")
    found += _missed_greater(keys, kth, safe[valid], base)
    return found


def _repeated(indices, valid, n):
    """True at each valid slot whose index an earlier valid slot already holds."""
    seen_first = np.full(n, -1, dtype=np.int64)
    positions = np.flatnonzero(valid)
    # Writing positions in reverse leaves each index's first position in place.
    seen_first[indices[positions[::-1]]] = positions[::-1]
    repeated = np.zeros(indices.size, dtype=bool)
    repeated[positions] = seen_first[indices[positions]] != positions
    return repeated


def _missed_greater(keys, kth, written, base):
    present = np.zeros(keys.size, dtype=bool)
    present[written] = True
    missed = np.flatnonzero((keys > kth) & ~present)
    if missed.size == 0:
        return []
    i = int(missed[0])
    return [_violation(base, "missed-greater",
                       f"{missed.size} indices with a key above K = {kth:#06x} are absent; "
                       f"first: index {i} (key {int(keys[i]):#06x})",
                       index=i, key=int(keys[i]))]
