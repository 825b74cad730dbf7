"""Meta-tests of the checker: every planted fault is caught with its reason code, and
every output the contract allows (other tie choices, any order) is accepted."""

import numpy as np
import pytest

from decode_topk.conformance import cases, check
from decode_topk.reference import decode_topk_reference, element_keys

K = 512


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
    out[0, 400] = 0
    assert _reasons(logits, lengths, False, out) == {"short-row"}


def test_short_row_permuted():
    logits = np.full((1, 1024), 0x3F80, np.uint16)
    lengths = np.array([300], np.int32)
    out = decode_topk_reference(logits, lengths, K, False)
    out[0, [0, 1]] = out[0, [1, 0]]
    assert _reasons(logits, lengths, False, out) == {"short-row"}


def test_short_row_neg_inf_block_as_index():
    logits = np.full((1, 1024), 0xFF80, np.uint16)
    lengths = np.array([1024], np.int32)  # 128 blocks <= k
    out = decode_topk_reference(logits, lengths, K, True)
    assert out[0, 0] == -1 and out[0, 127] == 127
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
