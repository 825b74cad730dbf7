"""Meta-tests of the checker: every planted fault is caught with its reason code (the exact
set of codes, so a fault caught for the wrong reason fails too), every decision is tried
on both sides of its boundary, and every output the contract allows (other tie choices,
any order) is accepted.

These are what the checker's mutation campaign runs (`python -m
decode_topk.conformance.mutation --target checker`, with tests/test_contract.py): each
bug of conformance/contract.py's MUTANTS must make one of them fail."""

import numpy as np
import pytest

from decode_topk.conformance import cases, check
from decode_topk.reference import decode_topk_reference, element_keys

K = 512  # k of every test here


def _reasons(logits, lengths, block_mode, out):
    return {v.reason for v in check(logits, lengths, K, block_mode, out)}


def _plateau_row(width=4096, above=100):
    """`above` distinct large values, then a plateau of 1.0 holding K, then smaller."""
    row = np.full(width, 0x3F00, np.uint16)  # 0.5, below K
    row[:above] = 0x4000 + np.arange(above)
    row[above:above + 2000] = 0x3F80  # 1.0 = K for k = 512
    return row


@pytest.fixture
def token_case():
    logits = np.stack([_plateau_row(), _plateau_row()[::-1].copy()])
    lengths = np.array([4096, 4000], np.int32)
    return logits, lengths, decode_topk_reference(logits, lengths, K, False)


@pytest.fixture
def neg_inf_block_case():
    """Block mode, K = -inf: 9 finite blocks + the pinned newest one; the rest -inf."""
    logits = np.full((1, 8 * 1000), 0xFF80, np.uint16)
    logits[0, 8 * np.arange(0, 900, 100)] = 0x3F80
    lengths = np.array([8 * 1000], np.int32)
    return logits, lengths, decode_topk_reference(logits, lengths, K, True)


def test_reference_output_is_clean(token_case, neg_inf_block_case):
    for (logits, lengths, out), mode in ((token_case, False), (neg_inf_block_case, True)):
        assert check(logits, lengths, K, mode, out) == []


def test_duplicate_index(token_case):
    logits, lengths, out = token_case
    out[0, 300] = out[0, 301]
    assert "duplicate" in _reasons(logits, lengths, False, out)


def test_out_of_range_index(token_case):
    logits, lengths, out = token_case
    out[0, 7] = logits.shape[1]
    out[1, 7] = -2
    violations = check(logits, lengths, K, False, out)
    assert {v.row for v in violations if v.reason == "out-of-range"} == {0, 1}


def test_index_past_length(token_case):
    logits, lengths, out = token_case
    out[1, 400] = 4000  # row 1 has length 4000 < width 4096
    assert "past-length" in _reasons(logits, lengths, False, out)


def test_larger_key_missed(token_case):
    logits, lengths, out = token_case
    unchosen_tie = next(i for i in range(100, 2100) if i not in set(out[0].tolist()))
    out[0, 0] = unchosen_tie  # slot 0 held the largest key
    assert _reasons(logits, lengths, False, out) == {"missed-greater"}


def test_smaller_key_chosen(token_case):
    logits, lengths, out = token_case
    out[0, K - 1] = 3000  # a tie slot now holds a 0.5, below K
    assert _reasons(logits, lengths, False, out) == {"wrong-tie"}


def test_minus_one_in_token_mode(token_case):
    logits, lengths, out = token_case
    out[0, K - 1] = -1
    assert _reasons(logits, lengths, False, out) == {"bad-minus-one"}


def test_minus_one_when_k_is_finite():
    rng = np.random.default_rng(0)
    logits = rng.integers(0, 0x7F00, size=(1, 8 * 1000), dtype=np.uint16)
    lengths = np.array([8000], np.int32)
    out = decode_topk_reference(logits, lengths, K, True)
    out[0, K - 1] = -1
    assert _reasons(logits, lengths, True, out) == {"bad-minus-one"}


def test_neg_inf_block_not_written_minus_one(neg_inf_block_case):
    logits, lengths, out = neg_inf_block_case
    out[0, K - 1] = 555  # block 555 is -inf: must be written -1
    assert _reasons(logits, lengths, True, out) == {"not-minus-one"}


def test_too_few_minus_ones(neg_inf_block_case):
    logits, lengths, out = neg_inf_block_case
    out[0, K - 1] = out[0, 0]
    assert "duplicate" in _reasons(logits, lengths, True, out)


def test_wrong_padding_of_short_row():
    logits = np.full((1, 1024), 0x3F80, np.uint16)
    lengths = np.array([300], np.int32)
    out = decode_topk_reference(logits, lengths, K, False)
    assert check(logits, lengths, K, False, out) == []
    out[0, 400] = 0
    assert _reasons(logits, lengths, False, out) == {"short-row"}


def test_short_row_permuted():
    logits = np.full((1, 1024), 0x3F80, np.uint16)
    lengths = np.array([300], np.int32)
    out = decode_topk_reference(logits, lengths, K, False)
    assert check(logits, lengths, K, False, out) == []
    out[0, [0, 1]] = out[0, [1, 0]]
    assert _reasons(logits, lengths, False, out) == {"short-row"}


def test_short_row_neg_inf_block_as_index():
    logits = np.full((1, 1024), 0xFF80, np.uint16)
    lengths = np.array([1024], np.int32)  # 128 blocks <= k
    out = decode_topk_reference(logits, lengths, K, True)
    assert out[0, 0] == -1 and out[0, 127] == 127
    assert check(logits, lengths, K, True, out) == []
    out[0, 0] = 0
    assert _reasons(logits, lengths, True, out) == {"short-row"}


def test_violation_carries_repro(token_case):
    logits, lengths, out = token_case
    out[1, 3] = out[1, 4]
    violation = next(v for v in check(logits, lengths, K, False, out) if v.reason == "duplicate")
    assert violation.row == 1
    assert {"row", "length", "k", "block_mode", "position", "index", "K"} <= set(violation.repro)
    assert violation.repro["length"] == 4000 and violation.repro["position"] == 4


@pytest.mark.parametrize("bad", [np.zeros((2, K), np.int64), np.zeros((2, K - 1), np.int32),
                                 np.zeros((3, K), np.int32), [[0] * K] * 2])
def test_bad_out_raises(token_case, bad):
    logits, lengths, _ = token_case
    with pytest.raises(ValueError, match="out must"):
        check(logits, lengths, K, False, bad)


# ----- every decision from both sides of its boundary ------------------------------------
#
# Rows of distinct keys make the long-row answer one set, so replacing one slot changes
# exactly the rule under test: the last slot (k - 1; K = k = 512 in this file) of the
# reference's key-sorted answer holds the k-th largest element, the only one with the k-th
# key, owed but not "above" it; the slots before it hold the keys above. Block rows put each block's value in one lane and -2.0 in the others,
# and NaN in the newest block's logits and past the length (never counted, SPEC.md 1.1).

FILLER = 0xC000  # -2.0: below every value used
GARBAGE = 0x7FC0  # NaN past the length and in the pinned block: never counted
POISON = (-2, 0x7EADBEEF, np.iinfo(np.int32).min, np.iinfo(np.int32).max)


def _values(n, rng):
    """n distinct finite positive BF16 values in random order (1.0 .. above)."""
    return (0x3F80 + rng.permutation(n)).astype(np.uint16)


def _row_of(values, block_mode, extra=24):
    """(logits [1, width], lengths [1]): a row whose elements have `values` (BF16 bits);
    block mode: the last element is the pinned newest block (its value is ignored) and
    the newest block is partial (5 of 8 logits)."""
    n = values.size
    if not block_mode:
        logits = np.full((1, n + extra), GARBAGE, np.uint16)
        logits[0, :n] = values
        return logits, np.array([n], np.int32)
    length = 8 * (n - 1) + 5
    logits = np.full((1, length + extra), GARBAGE, np.uint16)
    logits[0, :8 * (n - 1)] = FILLER
    logits[0, 8 * np.arange(n - 1) + 3] = values[:n - 1]
    return logits, np.array([length], np.int32)


def _distinct_case(n, block_mode, seed=0, extra=24):
    logits, lengths = _row_of(_values(n, np.random.default_rng(seed)), block_mode, extra)
    return logits, lengths, decode_topk_reference(logits, lengths, K, block_mode)


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
@pytest.mark.parametrize("n", [K - 1, K, K + 1], ids=["k-1", "k", "k+1"])
def test_element_count_boundary(n, block_mode):
    """n <= k is short (fixed positions, exactly k included), n = k + 1 is long (any order):
    two slots swapped are rejected up to n = k and accepted at k + 1."""
    logits, lengths, out = _distinct_case(n, block_mode)
    assert check(logits, lengths, K, block_mode, out) == []
    swapped = out.copy()
    swapped[0, [0, 1]] = swapped[0, [1, 0]]
    assert _reasons(logits, lengths, block_mode, swapped) == (set() if n > K else {"short-row"})
    if n <= K:
        assert out[0, :n].tolist() == list(range(n))


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
def test_exact_k_row_from_both_sides(block_mode):
    """The exact-k row is short: its fixed answer reversed is a valid long answer (all k
    elements) yet must be rejected; at k + 1 elements the reversed answer is accepted."""
    for n, expected in ((K, {"short-row"}), (K + 1, set())):
        logits, lengths, out = _distinct_case(n, block_mode, seed=n)
        assert _reasons(logits, lengths, block_mode, out[:, ::-1].copy()) == expected, n


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
@pytest.mark.parametrize("n", [K - 1, K])
@pytest.mark.parametrize("where", ["first", "last-element"])
def test_short_row_minus_one_where_an_index_is_owed(n, block_mode, where):
    logits, lengths, out = _distinct_case(n, block_mode)
    out[0, 0 if where == "first" else n - 1] = -1
    assert _reasons(logits, lengths, block_mode, out) == {"short-row"}


@pytest.mark.parametrize("bad", [0, K - 2, K - 1, *POISON], ids=str)
def test_short_row_padding_owes_minus_one(bad):
    """n = k - 1: the one padding slot holds -1 and nothing else (an index, a duplicate,
    the index n, poison)."""
    logits, lengths, out = _distinct_case(K - 1, False)
    assert out[0, K - 1] == -1
    out[0, K - 1] = bad
    assert _reasons(logits, lengths, False, out) == {"short-row"}


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
@pytest.mark.parametrize("slot,expected", [(0, {"bad-minus-one", "missed-greater"}),
                                           (K // 2, {"bad-minus-one", "missed-greater"}),
                                           (K - 2, {"bad-minus-one", "missed-greater"}),
                                           (K - 1, {"bad-minus-one"})],
                         ids=["largest", "middle", "last-above-K", "the-K-slot"])
def test_long_row_minus_one_where_an_index_is_owed(block_mode, slot, expected):
    """K finite: -1 is never allowed; replacing a key above K also misses it."""
    logits, lengths, out = _distinct_case(K + 40, block_mode)
    out[0, slot] = -1
    assert _reasons(logits, lengths, block_mode, out) == expected


def _neg_inf_blocks_case(finite, n=K + 50):
    """Block mode: `finite` finite blocks of distinct values (block 0 and the pinned newest
    one among them), every other block all -inf."""
    values = np.full(n, 0xFF80, np.uint16)
    rng = np.random.default_rng(finite)
    where = np.concatenate([[0], rng.choice(np.arange(1, n - 1), finite - 2, replace=False)])
    values[where] = _values(finite - 1, rng)
    logits, lengths = _row_of(values, True)
    logits[0, :8 * (n - 1)][np.repeat(values[:n - 1] == 0xFF80, 8)] = 0xFF80  # -inf blocks all -inf
    return logits, lengths, decode_topk_reference(logits, lengths, K, True)


def test_neg_inf_k_th_block_owes_one_minus_one():
    """k - 1 finite blocks: K is -inf and exactly one -1 is owed; a -inf block's index in
    its place, or a second -1 instead of a finite block (block 0 here, the index a clamped
    -1 slot would read), are both wrong."""
    logits, lengths, out = _neg_inf_blocks_case(K - 1)
    assert check(logits, lengths, K, True, out) == []
    assert (out[0] == -1).sum() == 1
    neg_inf_block = int(np.flatnonzero(element_keys(logits[0], lengths[0], True) == 0x007F)[0])
    as_index = out.copy()
    as_index[0, out[0] == -1] = neg_inf_block
    assert _reasons(logits, lengths, True, as_index) == {"not-minus-one"}
    block0 = out.copy()
    block0[0, out[0] == 0] = -1
    assert _reasons(logits, lengths, True, block0) == {"missed-greater"}
    pinned = out.copy()
    pinned[0, out[0] == -(-lengths[0] // 8) - 1] = -1  # the newest block, always above K
    assert _reasons(logits, lengths, True, pinned) == {"missed-greater"}


def test_neg_inf_minus_ones_fill_every_free_slot():
    """Far fewer finite blocks than k: the -1s (several, any positions) are accepted, and
    a -inf index or a duplicate among them is not."""
    logits, lengths, out = _neg_inf_blocks_case(9)
    assert (out[0] == -1).sum() == K - 9
    rng = np.random.default_rng(3)
    assert check(logits, lengths, K, True, rng.permuted(out, axis=1)) == []
    dup = out.copy()
    dup[0, K - 1] = out[0, 1]
    assert _reasons(logits, lengths, True, dup) == {"duplicate"}


def test_k_finite_blocks_owe_no_minus_one():
    """k finite blocks: K is the smallest finite key, so no -1: one at K's slot is wrong
    even though K's block is only a tie."""
    logits, lengths, out = _neg_inf_blocks_case(K)
    assert check(logits, lengths, K, True, out) == [] and not (out[0] == -1).any()
    out[0, K - 1] = -1
    assert _reasons(logits, lengths, True, out) == {"bad-minus-one"}


def test_k_plus_one_finite_blocks_a_neg_inf_block_is_below_k():
    logits, lengths, out = _neg_inf_blocks_case(K + 1)
    neg_inf_block = int(np.flatnonzero(element_keys(logits[0], lengths[0], True) == 0x007F)[0])
    out[0, K - 1] = neg_inf_block
    assert _reasons(logits, lengths, True, out) == {"wrong-tie"}


def test_token_mode_neg_inf_k_th_owes_an_index():
    """Token mode: a -inf k-th token is an ordinary value; -1 for it is wrong."""
    logits = np.full((1, 2 * K), 0xFF80, np.uint16)
    logits[0, :100] = _values(100, np.random.default_rng(4))
    lengths = np.array([2 * K], np.int32)
    out = decode_topk_reference(logits, lengths, K, False)
    assert check(logits, lengths, K, False, out) == []
    out[0, K - 1] = -1
    assert _reasons(logits, lengths, False, out) == {"bad-minus-one"}


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
def test_index_limits(block_mode):
    """At the K slot: n - 1 (the reference's own choice here), n and the last index below
    the batch's element count are past the length; the element count and beyond, and
    anything below -1, are out of range."""
    values = _values(K + 40, np.random.default_rng(5))
    n = values.size
    kth = np.sort(values)[n - K] if not block_mode else np.sort(values[:n - 1])[n - K]
    last = n - 2 if block_mode else n - 1  # the last element with a chosen value
    at = int(np.flatnonzero(values == kth)[0])
    values[[at, last]] = values[[last, at]]  # the k-th largest is now the last such element
    logits, lengths = _row_of(values, block_mode, extra=8 * 7 + 3)
    out = decode_topk_reference(logits, lengths, K, block_mode)
    width = logits.shape[1]
    count = -(-width // 8) if block_mode else width  # the batch's element count
    assert out[0, K - 1] == last and check(logits, lengths, K, block_mode, out) == []
    expected = {n: "past-length", count - 1: "past-length", count: "out-of-range", count + 1: "out-of-range",
                width - 1: "past-length" if not block_mode else "out-of-range", width: "out-of-range"}
    expected.update({p: "out-of-range" for p in POISON})
    for bad, reason in expected.items():
        wrong = out.copy()
        wrong[0, K - 1] = bad
        assert _reasons(logits, lengths, block_mode, wrong) == {reason}, bad


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
@pytest.mark.parametrize("source", [0, K - 2], ids=["far", "adjacent"])
def test_duplicates_anywhere(block_mode, source):
    """The K slot overwritten with another slot's index, next to it or k - 1 slots away:
    only a duplicate (the K element is owed as a tie, not as a key above K)."""
    logits, lengths, out = _distinct_case(K + 40, block_mode)
    out[0, K - 1] = out[0, source]
    assert _reasons(logits, lengths, block_mode, out) == {"duplicate"}


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
def test_duplicate_above_k_hides_no_miss(block_mode):
    """The largest element copied over the second largest: a duplicate, and a key above K
    missing, though as many slots as before hold keys above K."""
    logits, lengths, out = _distinct_case(K + 40, block_mode)
    out[0, 1] = out[0, 0]
    assert _reasons(logits, lengths, block_mode, out) == {"duplicate", "missed-greater"}


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
def test_key_just_below_k(block_mode):
    """The (k+1)-th largest element in the K slot is below K; the k-th largest itself, or
    a tie of K elsewhere, is not."""
    logits, lengths, out = _distinct_case(K + 40, block_mode)
    keys = element_keys(logits[0], lengths[0], block_mode)
    next_below = int(np.argsort(-keys.astype(np.int64), kind="stable")[K])
    out[0, K - 1] = next_below
    assert _reasons(logits, lengths, block_mode, out) == {"wrong-tie"}


@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
def test_key_just_above_k_missed(block_mode):
    """The smallest key above K replaced by the (k+1)-th largest: missed and below K."""
    logits, lengths, out = _distinct_case(K + 40, block_mode)
    keys = element_keys(logits[0], lengths[0], block_mode)
    order = np.argsort(-keys.astype(np.int64), kind="stable")
    out[0, K - 2] = order[K]
    assert _reasons(logits, lengths, block_mode, out) == {"missed-greater", "wrong-tie"}


# ----- accepted alternatives --------------------------------------------------------------

def alternative_topk(logits, lengths, k, block_mode, rng):
    """A conforming implementation unlike the reference: random ties, random order."""
    out = decode_topk_reference(logits, lengths, k, block_mode)
    for r, length in enumerate(lengths):
        keys = element_keys(logits[r], length, block_mode)
        if keys.size <= k:
            continue
        kth = np.partition(keys, keys.size - k)[keys.size - k]
        greater = np.flatnonzero(keys > kth)
        ties = rng.choice(np.flatnonzero(keys == kth), size=k - greater.size, replace=False)
        chosen = rng.permutation(np.concatenate([greater, ties]))
        if block_mode:
            chosen[keys[chosen] == 0x007F] = -1
        out[r] = chosen
    return out


def test_permutations_accepted(token_case):
    logits, lengths, out = token_case
    rng = np.random.default_rng(1)
    assert check(logits, lengths, K, False, rng.permuted(out, axis=1)) == []


def test_highest_index_ties_accepted(token_case):
    logits, lengths, out = token_case
    keys = element_keys(logits[0], lengths[0], False)
    ties = np.flatnonzero(keys == 0xBF80)
    out[0, 100:] = ties[-(K - 100):]
    assert check(logits, lengths, K, False, out) == []


def test_neg_inf_minus_ones_anywhere_accepted(neg_inf_block_case):
    logits, lengths, out = neg_inf_block_case
    rng = np.random.default_rng(2)
    assert check(logits, lengths, K, True, rng.permuted(out, axis=1)) == []


@pytest.mark.parametrize("case", cases("ci"), ids=lambda c: c.name)
def test_alternative_implementation_accepted(case):
    logits, lengths = case.generate()
    rng = np.random.default_rng(case.seed)
    for k in case.ks:
        for block_mode in case.modes:
            out = alternative_topk(logits, lengths, k, block_mode, rng)
            assert check(logits, lengths, k, block_mode, out) == [], (case.name, k, block_mode)


# ---------------------------------------------------------------------------------------
# Strict mode: the canonical answer, slot for slot (SPEC.md 1.4)
# ---------------------------------------------------------------------------------------
def _tied_row(block_mode):
    """One row of 4096 elements (tokens, or blocks of 8 logits): 100 above 1.0, the rest tied
    at 1.0, so the k-th key is tied across thousands of indices."""
    rng = np.random.default_rng(16)
    per = 8 if block_mode else 1
    row = np.full(4096 * per, 0x3F80, np.uint16)  # 1.0
    row[rng.choice(4096, size=100, replace=False) * per] = 0x4000  # 2.0
    return row[None, :], np.array([row.size], np.int32)


@pytest.mark.parametrize("block_mode", [False, True])
def test_strict_accepts_the_canonical_answer_only(block_mode):
    logits, lengths = _tied_row(block_mode)
    canonical = decode_topk_reference(logits, lengths, 512, block_mode, canonical=True)
    keys = element_keys(logits[0], int(lengths[0]), block_mode)
    assert keys.size > 512
    assert check(logits, lengths, 512, block_mode, canonical, strict=True) == []
    reordered = canonical[:, ::-1].copy()  # the right set in another order
    kth = np.sort(keys)[keys.size - 512]
    tied = np.flatnonzero(keys == kth)
    other_tie = canonical.copy()  # the right count of ties, but not the lowest-index ones
    chosen_ties = np.flatnonzero(np.isin(other_tie[0], tied))
    other_tie[0, chosen_ties[-1]] = tied[-1]
    other_tie.sort(axis=1)  # in ascending order, so only the tie choice is wrong
    for planted in (reordered, other_tie):
        assert check(logits, lengths, 512, block_mode, planted) == [], "the contract allows it"
        assert _strict_reasons(logits, lengths, block_mode, planted) == {"not-canonical"}


def _strict_reasons(logits, lengths, block_mode, out):
    return {v.reason for v in check(logits, lengths, 512, block_mode, out, strict=True)}


def test_strict_short_rows_and_neg_inf_blocks():
    # A short row's fixed answer is canonical; a long block row whose k-th key is -inf
    # writes its -inf blocks as -1 in their index's slot, in ascending order.
    logits = np.full((1, 8 * 600), 0xFF80, np.uint16)  # 600 blocks of -inf ...
    logits[0, :8 * 10] = 0x3F80  # ... but the first 10
    lengths = np.array([8 * 600], np.int32)
    canonical = decode_topk_reference(logits, lengths, 512, True, canonical=True)
    assert check(logits, lengths, 512, True, canonical, strict=True) == []
    assert canonical[0, :10].tolist() == list(range(10)) and (canonical[0, 10:-1] == -1).all()
    assert canonical[0, -1] == 599  # the pinned newest block, last in ascending order
    moved = np.r_[canonical[0, -1:], canonical[0, :-1]][None].astype(np.int32)
    assert check(logits, lengths, 512, True, moved) == []
    assert _strict_reasons(logits, lengths, True, moved) == {"not-canonical"}
    short = decode_topk_reference(logits[:, :800], np.array([800], np.int32), 512, True, canonical=True)
    assert check(logits[:, :800], np.array([800], np.int32), 512, True, short, strict=True) == []


@pytest.mark.parametrize("block_mode", [False, True])
def test_reference_canonical_is_the_strict_answer_on_tied_rows(block_mode):
    """Rows of a few distinct values (every k-th key tied), lengths at and around k: the
    reference's canonical answer passes strict mode, and its default (descending key)
    order passes the contract but not strict mode wherever the two differ."""
    rng = np.random.default_rng(61)
    per = 8 if block_mode else 1
    lengths = np.array([0, 1, 511 * per, 512 * per, 513 * per, 3000 * per, 4096 * per], np.int32)
    logits = rng.choice(np.array([0x3F80, 0x4000, 0xBF80, 0xFF80, 0x0000, 0x8000], np.uint16),
                        size=(lengths.size, 4096 * per))
    canonical = decode_topk_reference(logits, lengths, 512, block_mode, canonical=True)
    default = decode_topk_reference(logits, lengths, 512, block_mode)
    assert check(logits, lengths, 512, block_mode, canonical, strict=True) == []
    assert check(logits, lengths, 512, block_mode, default) == []
    differ = {r for r in range(lengths.size) if not np.array_equal(canonical[r], default[r])}
    assert differ, "the tied rows must tell the two orders apart"
    strict_rows = {v.row for v in check(logits, lengths, 512, block_mode, default, strict=True)}
    assert strict_rows == differ
