"""The reference DecodeTopK (SPEC.md part 1): simple and obviously correct, not fast.

Tie choice of this reference (one of many the contract allows; nothing may rely on it):
among the elements whose key equals the k-th largest key K it takes the lowest indices,
and it writes its k slots sorted by descending key, then ascending index. That is just a
stable argsort of the keys in descending order, truncated to k.
"""

import numbers

import numpy as np

from decode_topk.kernel.policy import KS, check_flag, check_width

from .bits import KEY_NEG_INF, KEY_POS_INF, LOGITS_PER_BLOCK, block_key, order_key



def validate_inputs(logits_bits, lengths, k):
    """Check the contract's inputs (SPEC.md 1.5); return `lengths` as an int64 array.

    Shared by the reference, the checker and other CPU implementations, so that every one
    rejects the same inputs with the same messages.
    """
    if not isinstance(logits_bits, np.ndarray) or logits_bits.dtype != np.uint16:
        raise ValueError(f"logits_bits must be a np.uint16 array of BF16 bit patterns, got "
                         f"{type(logits_bits).__name__} of dtype {getattr(logits_bits, 'dtype', None)}")
    if logits_bits.ndim != 2:
        raise ValueError(f"logits_bits must be 2-D [rows, width], got shape {logits_bits.shape}")
    rows, width = logits_bits.shape
    # The kernel's own width check (SPEC.md 1.5), so the reference refuses exactly the
    # widths the model and the kernel refuse, with the same message.
    check_width(width)
    given = np.asarray(lengths)
    if given.dtype.kind not in "iu":
        raise ValueError(f"lengths must be an integer array, got dtype {given.dtype}")
    if given.shape != (rows,):
        raise ValueError(f"lengths must be 1-D with {rows} entries (one a row), got shape {given.shape}")
    # Compared in the given dtype and reported as given: converting first would wrap a
    # uint64 above 2**63 to a negative int64 and report a value the caller never passed.
    bad = np.flatnonzero((given < 0) | (given > width))
    if bad.size:
        row = int(bad[0])
        raise ValueError(f"lengths[{row}] = {int(given[row])} is outside [0, width={width}]")
    lengths = given.astype(np.int64)  # safe now: every entry lies in [0, width]
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or int(k) not in KS:
        raise ValueError(f"k = {k!r} is not one of {KS}")
    return lengths


def element_count(length, block_mode):
    """n: the row's element count, `length` tokens or `ceil(length / 8)` blocks."""
    return -(-int(length) // LOGITS_PER_BLOCK) if block_mode else int(length)


def element_keys(logits_bits, length, block_mode):
    """The order keys (uint16) of one row's elements (`logits_bits` is that row, 1-D).

    Block mode: every block but the newest is whole and keyed by its NaN-propagating
    maximum; the newest block (n - 1) is pinned at +inf and its logits are not read.
    """
    length = int(length)
    if not block_mode:
        return order_key(logits_bits[:length])
    n = element_count(length, True)
    if n == 0:
        return np.zeros(0, dtype=np.uint16)
    whole = logits_bits[: LOGITS_PER_BLOCK * (n - 1)].reshape(n - 1, LOGITS_PER_BLOCK)
    return np.append(block_key(whole), np.uint16(KEY_POS_INF)).astype(np.uint16)


def short_row_answer(keys, k, block_mode):
    """The fixed answer of a row with n <= k: j for j < n (-1 for a -inf block), then -1."""
    n = keys.size
    out = np.full(k, -1, dtype=np.int32)
    out[:n] = np.arange(n, dtype=np.int32)
    if block_mode:
        out[:n][keys == KEY_NEG_INF] = -1
    return out


def _row_topk(keys, k, block_mode, canonical=False):
    if keys.size <= k:
        return short_row_answer(keys, k, block_mode)
    # Negating as int32 turns the ascending stable sort into a descending one that keeps
    # equal keys in ascending index order, so the first k are the canonical set (ties by
    # lowest index); sorted, they are the canonical answer (SPEC.md 1.4).
    chosen = np.argsort(-keys.astype(np.int32), kind="stable")[:k].astype(np.int32)
    if canonical:
        chosen.sort()
    if block_mode:
        chosen[keys[chosen] == KEY_NEG_INF] = -1
    return chosen


def decode_topk_reference(logits_bits, lengths, k, block_mode=False, canonical=False):
    """int32 [rows, k]: each row's top-k element indices under the contract (SPEC.md 1.4):
    ties by lowest index, sorted by descending key, then ascending index; canonical=True
    returns the canonical answer instead (the same set in ascending index order)."""
    lengths = validate_inputs(logits_bits, lengths, k)
    block_mode = check_flag("block_mode", block_mode)  # a truthy string is no mode
    k = int(k)
    out = np.empty((logits_bits.shape[0], k), dtype=np.int32)
    for r, length in enumerate(lengths):
        out[r] = _row_topk(element_keys(logits_bits[r], length, block_mode), k, block_mode, bool(canonical))
    return out


def seq_lens_lengths(seq_lens, next_n, width):
    """The row lengths of the engine's call convention (decode_topk_seq_lens, SPEC.md 1.1):
    row r of request i = r // next_n has clamp(seq_lens[i] - next_n + 1 + r % next_n, 0,
    width) valid logits. int64 arithmetic, so nothing wraps."""
    if isinstance(next_n, bool) or not isinstance(next_n, numbers.Integral) or next_n < 1:
        raise ValueError(f"next_n={next_n!r} must be an int >= 1")
    seq = np.asarray(seq_lens)
    if seq.dtype.kind == "u":
        # Every seq_len from width + next_n up gives every draft the whole width; capping in
        # the given dtype keeps a uint64 above 2**63 from wrapping negative (an empty row).
        seq = np.minimum(seq, width + next_n)
    seq = np.repeat(seq.astype(np.int64), next_n)
    draft = np.arange(seq.size, dtype=np.int64) % next_n
    return np.clip(seq - next_n + 1 + draft, 0, width).astype(np.int32)
