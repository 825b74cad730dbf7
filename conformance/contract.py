"""The contract's element rules as the checker states them (SPEC.md 1.2-1.4), apart from reference/.

The checker judges the reference, the model and the kernel alike. If it keyed elements
with the reference's own helpers (reference/bits.py, reference/topk.py), one bug there
would make the reference's answer and the checker's judgement wrong together, and the
reference run would pass. So this module states the rules a second time, another way:
- the order key (1.2) is the rank of a pattern in the order 1.2 describes, read from a
  65,536-entry table built by sorting every BF16 pattern by its float value (NumPy's
  float comparisons), with NaNs and the zeros placed by explicit rules; the reference
  flips bits instead;
- a block's value (1.3) is a case table over float comparisons (any NaN; else the float
  maximum; a zero maximum is +0 exactly when some logit is +0); the reference takes the
  argmax of keys;
- the element count, the pinned newest block, the -inf key and the short-row answer
  (1.3, 1.4) are written out here from the spec's sentences.
tests/test_contract.py checks every rule against the reference on every BF16 pattern and
on crafted and random blocks, and against the spec's literal tables.

Shared with the reference on purpose: `validate_inputs` (SPEC.md 1.5), because the spec
makes the reference and the checker reject the same inputs with the same messages, and a
bug there decides which inputs are refused, not what an answer is. The checker does not
use the lengths it returns: `row_lengths` converts them again and `element_keys` refuses a
length outside its row, so a validator that let one through cannot shorten a row unseen.

Planted faults. The checker is a target of the mutation campaign
(`python -m decode_topk.conformance.mutation --target checker`): `MUTANTS` (name -> (id,
description)) lists bugs planted in this module and in checker.py, each behind a test
`fault(ID)`, in the style of reference/model.py's MUTANTS. Only `planted(name)` switches
one on, for the duration of a `with` block (the campaign runs the meta-tests inside it);
outside one, `fault` is always False, so the checker is the unmutated one.
"""

import contextlib
import functools

import numpy as np

from decode_topk.reference.topk import validate_inputs  # noqa: F401 - shared on purpose (module docstring)
from decode_topk.reference.mutants import Mutants  # the registry only: no element rule

LOGITS_PER_BLOCK = 8
POS_INF_BITS = 0x7F80
NEG_INF_BITS = 0xFF80
CANONICAL_NAN_BITS = 0x7FFF  # PTX max.NaN.bf16x2's answer for any NaN operand (SPEC.md 1.3)
PLUS_ZERO_BITS = 0x0000
MINUS_ZERO_BITS = 0x8000

# ---------------------------------------------------------------------------------------
# Planted faults (the checker's mutants)
# ---------------------------------------------------------------------------------------
MUTANTS = Mutants("checker")
_mutant = MUTANTS.add
_active = 0


# in this module: the element rules
KEY_NAN_LOW = _mutant("checker_key_nan_low", "order key: every NaN below -inf (positive NaNs keyed as negative)")
KEY_ZERO_SIGN = _mutant("checker_key_zero_unsigned", "order key: -0 and +0 not told apart (+0 sorts below -0)")
KEY_NAN_PAYLOAD = _mutant("checker_key_neg_nan_payload", "order key: negative NaNs ordered by payload upwards")
BLOCK_NAN_IGNORED = _mutant("checker_block_nan_ignored", "block value ignores NaN logits (max without .NaN)")
BLOCK_NEG_NAN = _mutant("checker_block_neg_nan_ignored", "block value: only NaNs without the sign bit propagate")
BLOCK_NAN_KEPT = _mutant("checker_block_nan_kept", "block value: a NaN block keeps its first NaN's bits, not 0x7FFF")
BLOCK_ZERO_PLUS = _mutant("checker_block_zero_plus", "block value: a zero maximum is always +0 (max(-0, -0) = +0)")
PIN_FORGOTTEN = _mutant("checker_pin_forgotten", "the newest block keyed from its valid logits, not pinned at +inf")
PIN_PARTIAL_ONLY = _mutant("checker_pin_partial_only", "the newest block pinned only when partial (length % 8 != 0)")
COUNT_FLOOR = _mutant("checker_count_floor", "block count floor(length / 8): a partial newest block dropped")
SHORT_NEG_INF_INDEX = _mutant("checker_short_neginf_index", "short-row answer keeps a -inf block's index, not -1")
# in checker.py: the decisions
SHORT_BELOW_K = _mutant("checker_short_below_k", "short rule n < k: the exact-k row judged as a long row")
SHORT_K_PLUS_ONE = _mutant("checker_short_k_plus_one", "short rule n <= k + 1: a k+1-element row judged as short")
SHORT_PREFIX = _mutant("checker_short_prefix_only", "short rows compared on slots [0, n) only (padding unchecked)")
SHORT_AS_SET = _mutant("checker_short_as_set", "short rows compared as a multiset of slots (any order accepted)")
LAST_ROW_SKIPPED = _mutant("checker_last_row_skipped", "the row loop stops one row early")
KTH_RANK = _mutant("checker_kth_rank_plus_one", "K taken as the (k+1)-th largest key")
WRONG_TIE_LE = _mutant("checker_wrong_tie_at_k", "wrong-tie flags keys <= K (a tie rejected), not < K")
WRONG_TIE_OFF = _mutant("checker_wrong_tie_unchecked", "keys below K not checked")
MINUS_ONE_BLOCK = _mutant("checker_minus_one_any_block", "-1 accepted anywhere in block mode, whatever K")
MINUS_ONE_TOKEN = _mutant("checker_minus_one_token_neginf", "-1 accepted in token mode too when K is the -inf key")
NOT_MINUS_ONE_OFF = _mutant("checker_not_minus_one_unchecked", "a -inf block written as its index accepted (K = -inf)")
DUP_OFF = _mutant("checker_duplicates_unchecked", "duplicate indices not checked")
DUP_ADJACENT = _mutant("checker_duplicates_adjacent", "duplicates looked for in neighbouring slots only")
RANGE_AT_LIMIT = _mutant("checker_range_at_limit", "out-of-range is index > limit: the index at the limit accepted")
RANGE_NO_LOW = _mutant("checker_range_no_low_bound", "indices below -1 (poison such as -2) not checked")
BLOCK_LIMIT_WIDTH = _mutant("checker_block_limit_width", "block mode's index limit is the width, not ceil(width / 8)")
PAST_N = _mutant("checker_past_length_at_n", "past-length is index > n: an index at exactly n accepted")
MISSED_CLAMPED = _mutant("checker_missed_minus_one_clamped", "missed-greater reads -1 slots as index 0 (clamped first)")
MISSED_GE = _mutant("checker_missed_ties_demanded", "missed-greater demands every key >= K, not > K")
MISSED_OFF = _mutant("checker_missed_unchecked", "indices with a key above K may be absent")
MISSED_BY_COUNT = _mutant("checker_missed_by_count",
                          "missed-greater counts slots above K (a duplicate above K hides a miss)")
STRICT_ANY_ORDER = _mutant("checker_strict_any_order", "strict mode compares the sets, not the slots")
STRICT_HIGH_TIES = _mutant("checker_strict_high_ties", "the canonical answer takes the highest-index ties")


def fault(mutant_id):
    """True when the planted fault `mutant_id` is switched on (`planted`); always False
    otherwise."""
    return _active == mutant_id


@contextlib.contextmanager
def planted(name):
    """Switch the checker mutant `name` on for the `with` block (the mutation campaign)."""
    global _active
    previous, _active = _active, MUTANTS.id_of(name)
    try:
        yield
    finally:
        _active = previous


# ---------------------------------------------------------------------------------------
# The order key (SPEC.md 1.2)
# ---------------------------------------------------------------------------------------
def _float32(bits):
    """The float32 values of BF16 patterns: a BF16 pattern is a float32's upper half."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


@functools.lru_cache(maxsize=None)
def _key_table(mutant):
    """int64 [65536]: the key of each pattern, its rank in SPEC.md 1.2's order.

    The order, lowest first: negative NaNs (a larger payload lower, as if it were a
    magnitude beyond infinity), then every number by value with -0 just below +0, then
    positive NaNs by payload. Cached per planted fault, so a fault changes the table.
    """
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    value = _float32(patterns)
    nan = np.isnan(value)
    negative = np.signbit(value)
    payload = (patterns & 0x7F).astype(np.int64)
    group = np.where(nan & negative, 0, np.where(nan, 2, 1))
    if mutant == KEY_NAN_LOW:
        group = np.where(nan, 0, 1)
    number = np.where(nan, 0.0, value)  # float comparisons order the numbers, not bits
    zero_rank = np.where(negative, 0, 1)  # float comparison calls -0 == +0: the spec says -0 < +0
    if mutant == KEY_ZERO_SIGN:
        zero_rank = np.zeros_like(zero_rank)
    nan_rank = np.where(nan & negative, -payload, np.where(nan, payload, 0))
    if mutant == KEY_NAN_PAYLOAD:
        nan_rank = np.where(nan, payload, 0)
    order = np.lexsort((nan_rank, zero_rank, number, group))  # the last key sorts first
    table = np.empty(1 << 16, dtype=np.int64)
    table[order] = np.arange(1 << 16)
    return table


def key(bits):
    """The order key of BF16 bit patterns: an int for an int, else an int64 array."""
    table = _key_table(_active)
    if isinstance(bits, (int, np.integer)):
        return int(table[int(bits) & 0xFFFF])
    return table[np.asarray(bits, dtype=np.uint16)]


# Derived from the table at import, before any fault is planted (so they stay put under a
# planted key fault, as literal constants would in a buggy implementation).
KEY_POS_INF = key(POS_INF_BITS)  # the pinned newest block's key
KEY_NEG_INF = key(NEG_INF_BITS)  # a block with this key is written -1


# ---------------------------------------------------------------------------------------
# Elements (SPEC.md 1.3)
# ---------------------------------------------------------------------------------------
def block_value_bits(blocks):
    """uint16 [...]: the value of each block of 8 logits (last axis) as max.NaN.bf16x2
    computes it, by cases:
    | the block holds                      | its value                 |
    | a NaN of either sign                 | the canonical NaN 0x7FFF  |
    | no NaN, numeric maximum nonzero      | that maximum              |
    | no NaN, maximum zero, some +0        | +0                        |
    | no NaN, maximum zero, no +0          | -0 (every zero is -0)     |
    """
    bits = np.asarray(blocks, dtype=np.uint16)
    if bits.ndim == 0 or bits.shape[-1] != LOGITS_PER_BLOCK:
        raise ValueError(f"blocks must have a last axis of {LOGITS_PER_BLOCK}, got shape {bits.shape}")
    value = _float32(bits)
    nan = np.isnan(value)
    if fault(BLOCK_NAN_IGNORED):
        nan = np.zeros_like(nan)
    if fault(BLOCK_NEG_NAN):
        nan = nan & ~np.signbit(value)
    top = np.where(np.isnan(value), -np.inf, value).max(axis=-1).astype(np.float32)
    top_bits = (top.view(np.uint32) >> 16).astype(np.uint16)
    some_plus_zero = ((value == 0) & ~np.signbit(value)).any(axis=-1)
    zero = np.where(some_plus_zero, np.uint16(PLUS_ZERO_BITS), np.uint16(MINUS_ZERO_BITS))
    if fault(BLOCK_ZERO_PLUS):
        zero = np.full_like(zero, PLUS_ZERO_BITS)
    nan_value = np.full(top.shape, CANONICAL_NAN_BITS, dtype=np.uint16)
    if fault(BLOCK_NAN_KEPT):
        nan_value = np.take_along_axis(bits, np.argmax(nan, axis=-1)[..., None], axis=-1)[..., 0]
    return np.where(nan.any(axis=-1), nan_value, np.where(top == 0, zero, top_bits)).astype(np.uint16)


def element_count(length, block_mode):
    """n: `length` tokens, or ceil(length / 8) blocks (the newest possibly partial)."""
    length = int(length)
    if not block_mode:
        return length
    if fault(COUNT_FLOOR):
        return length // LOGITS_PER_BLOCK
    return (length + LOGITS_PER_BLOCK - 1) // LOGITS_PER_BLOCK


def element_keys(row, length, block_mode):
    """int64 [n]: the keys of one row's elements (`row`: that row's BF16 bits, 1-D).

    Block mode: block j < n - 1 is keyed by its value; the newest block n - 1 is +inf
    whatever its logits, which are not read.
    """
    length = int(length)
    if not 0 <= length <= row.shape[0]:
        raise ValueError(f"length {length} is outside [0, {row.shape[0]}] (the row's width)")
    if not block_mode:
        return key(row[:length])
    n = element_count(length, True)
    keys = np.empty(n, dtype=np.int64)
    if n == 0:
        return keys
    older = n - 1  # whole blocks before the newest one
    keys[:older] = key(block_value_bits(row[:LOGITS_PER_BLOCK * older].reshape(older, LOGITS_PER_BLOCK)))
    keys[older] = KEY_POS_INF
    unpinned = fault(PIN_FORGOTTEN) or (fault(PIN_PARTIAL_ONLY) and length % LOGITS_PER_BLOCK == 0)
    if unpinned:
        newest = row[LOGITS_PER_BLOCK * older:length]
        padded = np.concatenate([newest, np.full(LOGITS_PER_BLOCK - newest.size, NEG_INF_BITS, np.uint16)])
        keys[older] = key(block_value_bits(padded))
    return keys


def short_row_answer(keys, k, block_mode):
    """int32 [k], the fixed answer of a row with n <= k elements (SPEC.md 1.4): slot j < n
    holds j, or -1 when block j is -inf (block mode); slots n .. k-1 hold -1."""
    n = len(keys)
    slots = np.arange(k)
    owned = slots < n
    answer = np.where(owned, slots, -1)
    if block_mode and not fault(SHORT_NEG_INF_INDEX):
        neg_inf = np.zeros(k, dtype=bool)
        neg_inf[:n] = np.asarray(keys) == KEY_NEG_INF
        answer = np.where(neg_inf, -1, answer)
    return answer.astype(np.int32)


def row_lengths(lengths):
    """The lengths as int64, converted here rather than taken from `validate_inputs`
    (module docstring); call after it has accepted them."""
    return np.asarray(lengths).astype(np.int64)


def mode(block_mode):
    """block_mode as a bool: True/False (or a NumPy bool), else ValueError. The contract's
    own statement of SPEC 1.5's rule, because a truthy string such as 'false' would judge
    the row in the other mode."""
    if isinstance(block_mode, (bool, np.bool_)):
        return bool(block_mode)
    raise ValueError(f"block_mode={block_mode!r} must be a bool")


def canonical_answer(keys, k, block_mode):
    """int32 [k], the canonical answer (SPEC.md 1.4, canonical): a short row's fixed answer;
    else every index whose key is above K and the lowest indices whose key equals K, k in
    all, in ascending index order, a -inf block written -1 where its index stands. Stated
    by counting, not by a sort of the keys: the indices above K, and of the indices equal
    to K (ascending) the first k - |above| ones."""
    keys = np.asarray(keys)
    if keys.size <= k:
        return short_row_answer(keys, k, block_mode)
    kth = int(np.partition(keys.astype(np.int64), keys.size - k)[keys.size - k])
    above = np.flatnonzero(keys > kth)
    tied = np.flatnonzero(keys == kth)
    owed = k - above.size
    ties = tied[tied.size - owed:] if fault(STRICT_HIGH_TIES) else tied[:owed]
    answer = np.sort(np.concatenate([above, ties])).astype(np.int32)
    if block_mode:
        answer[keys[answer] == KEY_NEG_INF] = -1
    return answer
