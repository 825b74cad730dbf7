"""The reference against the checker and against an independent brute-force definition."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _brute import reference_row
from decode_topk.conformance.checker import check
from decode_topk.reference import decode_topk_reference, element_keys, validate_inputs

SPECIALS = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0x3F80], np.uint16)


@st.composite
def rows(draw, max_width=8 * 700):
    """Small batches whose values come from a pool of `pool` patterns (few: heavy ties),
    with specials mixed in; lengths anywhere in [0, width]."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_rows = draw(st.integers(1, 3))
    width = draw(st.integers(1, max_width))
    pool = rng.integers(0, 1 << 16, size=draw(st.integers(1, 300)), dtype=np.uint16)
    if draw(st.booleans()):
        pool = np.concatenate([pool, SPECIALS])
    logits = rng.choice(pool, size=(n_rows, width))
    lengths = np.array([draw(st.integers(0, width)) for _ in range(n_rows)], np.int32)
    return logits, lengths


@settings(max_examples=60, deadline=None)
@given(rows(), st.booleans())
def test_reference_passes_checker(batch, block_mode):
    logits, lengths = batch
    out = decode_topk_reference(logits, lengths, 512, block_mode)
    assert out.dtype == np.int32 and out.shape == (logits.shape[0], 512)
    assert check(logits, lengths, 512, block_mode, out) == []


@settings(max_examples=40, deadline=None)
@given(rows(), st.booleans())
def test_reference_matches_brute_force(batch, block_mode):
    logits, lengths = batch
    out = decode_topk_reference(logits, lengths, 512, block_mode)
    for r in range(logits.shape[0]):
        assert out[r].tolist() == reference_row(logits[r], int(lengths[r]), 512, block_mode)


@pytest.mark.parametrize("k", [512, 1024, 2048])
@pytest.mark.parametrize("block_mode", [False, True])
def test_short_rows_fixed(k, block_mode):
    rng = np.random.default_rng(k)
    width = 8 * k + 64
    lengths = np.array([0, 1, 7, 8, 9, k - 1, k, 8 * k - 1 if block_mode else k], np.int32)
    logits = rng.integers(0, 1 << 16, size=(lengths.size, width), dtype=np.uint16)
    logits[:, ::3] = 0xFF80  # -inf blocks appear in block mode
    out = decode_topk_reference(logits, lengths, k, block_mode)
    for r, length in enumerate(lengths):
        keys = element_keys(logits[r], length, block_mode)
        n = keys.size
        assert n <= k
        expected = np.where(block_mode & (keys == 0x007F), -1, np.arange(n))
        assert np.array_equal(out[r, :n], expected)
        assert np.all(out[r, n:] == -1)


def test_garbage_past_length_never_matters():
    rng = np.random.default_rng(5)
    logits = rng.integers(0, 1 << 16, size=(4, 8192), dtype=np.uint16)
    lengths = np.array([8192, 5000, 4097, 1030], np.int32)
    other = logits.copy()
    for r, length in enumerate(lengths):
        other[r, length:] = 0x7FC0 if r % 2 else rng.integers(0, 1 << 16, 8192 - length, dtype=np.uint16)
    for block_mode in (False, True):
        assert np.array_equal(decode_topk_reference(logits, lengths, 512, block_mode),
                              decode_topk_reference(other, lengths, 512, block_mode))


def test_newest_block_pinned_and_unread():
    logits = np.full((1, 8 * 600), 0x3F80, np.uint16)
    logits[0, 8 * 599:] = 0xFF80  # newest block all -inf: still pinned at +inf
    keys = element_keys(logits[0], 8 * 599 + 3, True)
    assert keys.size == 600 and keys[-1] == 0xFF80
    out = decode_topk_reference(logits, np.array([8 * 599 + 3]), 512, True)
    assert out[0, 0] == 599


def test_token_mode_neg_inf_is_ordinary():
    logits = np.full((1, 1024), 0xFF80, np.uint16)
    out = decode_topk_reference(logits, np.array([1024]), 512, False)
    assert np.array_equal(out[0], np.arange(512))


def test_block_mode_neg_inf_written_minus_one():
    logits = np.full((1, 8 * 1000), 0xFF80, np.uint16)
    logits[0, 8 * 10] = 0x3F80  # block 10 finite; block 999 pinned
    out = decode_topk_reference(logits, np.array([8 * 1000]), 512, True)
    assert out[0, :2].tolist() == [999, 10]
    assert np.all(out[0, 2:] == -1)


INVALID = [
    (np.zeros((2, 8), np.float32), [8, 8], 512, "uint16"),
    (np.zeros(8, np.uint16), [8], 512, "2-D"),
    (np.zeros((2, 8), np.uint16), [8.0, 8.0], 512, "integer"),
    (np.zeros((2, 8), np.uint16), [8], 512, "2 entries"),
    (np.zeros((2, 8), np.uint16), [[8, 8]], 512, "2 entries"),
    (np.zeros((3, 8), np.uint16), [8, -1, 9], 512, r"lengths\[1\] = -1"),
    (np.zeros((3, 8), np.uint16), [8, 8, 9], 512, r"lengths\[2\] = 9"),
    (np.zeros((2, 8), np.uint16), [8, 8], 256, "k = 256"),
    (np.zeros((2, 8), np.uint16), [8, 8], True, "k = True"),
    (np.zeros((2, 8), np.uint16), [8, 8], 512.0, "k = 512.0"),
    # lengths reported as given, whatever their dtype (no wrap through int64)
    (np.zeros((1, 8), np.uint16), np.array([2**63 + 5], np.uint64), 512, r"lengths\[0\] = 9223372036854775813 "),
    (np.zeros((1, 8), np.uint16), np.array([2**64 - 1], np.uint64), 512, r"lengths\[0\] = 18446744073709551615 "),
    (np.zeros((1, 8), np.uint16), np.array([200], np.uint8), 512, r"lengths\[0\] = 200 "),
    (np.zeros((1, 8), np.uint16), np.array([-56], np.int8), 512, r"lengths\[0\] = -56 "),
    # the widths the model and the kernel refuse (SPEC.md 1.5)
    (np.zeros((1, 1048577), np.uint16), [8], 512, "width 1048577"),
]


@pytest.mark.parametrize("logits,lengths,k,message", INVALID)
def test_invalid_input_raises(logits, lengths, k, message):
    with pytest.raises(ValueError, match=message):
        validate_inputs(logits, np.asarray(lengths), k)
    with pytest.raises(ValueError, match=message):
        decode_topk_reference(logits, np.asarray(lengths), k)


def test_widest_row_is_accepted():
    logits = np.zeros((1, 1048576), np.uint16)
    assert validate_inputs(logits, np.array([1048576], np.uint64), 512).tolist() == [1048576]


def test_seq_lens_lengths_is_the_engine_convention():
    from decode_topk.reference.topk import seq_lens_lengths

    # request 0: 10 tokens, its 3 drafts see 8, 9, 10 (one capped at the width 9);
    # request 1: 0 tokens, all clamp to 0; request 2: 1 token, the first drafts clamp to 0
    assert seq_lens_lengths([10, 0, 1], 3, 9).tolist() == [8, 9, 9, 0, 0, 0, 0, 0, 1]
    assert seq_lens_lengths([5, -3, 7], 1, 6).tolist() == [5, 0, 6]  # next_n 1: the lengths, clamped
    # no wrap-around at the int32 edges
    assert seq_lens_lengths([2**31 - 1, -2**31], 2, 100).tolist() == [100, 100, 0, 0]
    # nor at uint64's: a huge seq_len is the whole width, not a wrapped negative
    assert seq_lens_lengths(np.array([2**63 + 5, 2**64 - 1, 3], np.uint64), 1, 100).tolist() == [100, 100, 3]
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="next_n"):
            seq_lens_lengths([4], bad, 8)
