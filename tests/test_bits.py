"""The order key, the block maximum and the BF16 conversions against bit-pattern tables."""

import numpy as np
import pytest

from decode_topk.reference.bits import (
    KEY_NEG_INF,
    KEY_POS_INF,
    bf16_bits_from_float32,
    bf16_bits_from_torch,
    bits_from_key,
    block_key,
    block_max_bits,
    float32_from_bf16_bits,
    order_key,
)

from _spec_tables import ALL_PATTERNS, BLOCK_TABLE, KEY_TABLE, orders_numbers

@pytest.mark.parametrize("bits,key,what", KEY_TABLE)
def test_order_key_table(bits, key, what):
    assert order_key(bits) == key, what
    assert order_key(np.array([bits], np.uint16))[0] == key, what
    assert bits_from_key(key) == bits, what


def test_key_constants():
    assert order_key(0x7F80) == KEY_POS_INF == 0xFF80
    assert order_key(0xFF80) == KEY_NEG_INF == 0x007F


def test_order_key_is_a_bijection_that_orders_numbers():
    keys = order_key(ALL_PATTERNS)
    assert keys.dtype == np.uint16
    assert np.array_equal(bits_from_key(keys), ALL_PATTERNS)
    assert orders_numbers(keys)


@pytest.mark.parametrize("block,value,what", BLOCK_TABLE)
def test_block_max_table(block, value, what):
    assert block_max_bits(block) == value, what
    assert block_key(block[None, :])[0] == order_key(value), what


def test_block_max_vectorized_and_position_free():
    rng = np.random.default_rng(7)
    blocks = rng.integers(0, 1 << 16, size=(5000, 8), dtype=np.uint16)
    values = block_max_bits(blocks)
    shuffled = block_max_bits(rng.permuted(blocks, axis=1))
    assert np.array_equal(values, shuffled)
    for block, value in zip(blocks[:300], values[:300]):
        nan = (block & 0x7FFF) > 0x7F80
        expected = 0x7FFF if nan.any() else block[np.argmax(order_key(block))]
        assert value == expected


def test_block_max_rejects_wrong_shape():
    with pytest.raises(ValueError, match="last axis of 8"):
        block_max_bits(np.zeros((3, 7), np.uint16))


def _f32(bits):
    return np.array([bits], np.uint32).view(np.float32)


# (float32 bits, bf16 bits, what): round to nearest, ties to even.
ROUND_TABLE = [
    (0x3F800000, 0x3F80, "1.0 exact"),
    (0x3F807FFF, 0x3F80, "below half an ulp: down"),
    (0x3F808000, 0x3F80, "tie, even kept bit: down"),
    (0x3F818000, 0x3F82, "tie, odd kept bit: up to even"),
    (0x3F808001, 0x3F81, "above half an ulp: up"),
    (0x7F7FFFFF, 0x7F80, "largest float32 overflows to +inf"),
    (0x7F7F7FFF, 0x7F7F, "largest finite BF16 stays"),
    (0x7F7F8000, 0x7F80, "tie at the top, odd kept bit: +inf"),
    (0xFF7FFFFF, 0xFF80, "overflows to -inf"),
    (0x7F800000, 0x7F80, "+inf"),
    (0xFF800000, 0xFF80, "-inf"),
    (0x80000000, 0x8000, "-0 keeps its sign"),
    (0x00008000, 0x0000, "tiny subnormal tie: to even zero"),
    (0x00018000, 0x0002, "subnormal tie, odd kept bit: up"),
    (0x7FC00000, 0x7FC0, "quiet NaN"),
    (0xFFC00000, 0xFFC0, "negative NaN keeps its sign"),
    (0x7F800001, 0x7FC0, "signalling NaN with a low payload: quiet NaN, not inf"),
    (0xFFFFFFFF, 0xFFC0, "all ones: negative quiet NaN"),
]


@pytest.mark.parametrize("f32,bf16,what", ROUND_TABLE)
def test_rounding_table(f32, bf16, what):
    assert bf16_bits_from_float32(_f32(f32))[0] == bf16, what


def test_float32_round_trip():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = float32_from_bf16_bits(bits)
    assert values.dtype == np.float32
    back = bf16_bits_from_float32(values)
    nan = np.isnan(values)
    assert np.array_equal(back[~nan], bits[~nan])
    assert np.all((back[nan] & 0x7FFF) == 0x7FC0)


def test_torch_conversion_agrees():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a = np.concatenate([
        rng.standard_normal(20000).astype(np.float32) * 1e3,
        rng.integers(0, 1 << 32, size=20000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, -3.4e38], np.float32),
    ])
    ours = bf16_bits_from_float32(a)
    theirs = bf16_bits_from_torch(torch.from_numpy(a).to(torch.bfloat16))
    assert theirs.dtype == np.uint16
    nan = np.isnan(a)
    # torch's CPU conversion gives NaNs its own bits (0xFFFF); only NaN-ness must agree.
    assert np.array_equal(ours[~nan], theirs[~nan])
    assert np.all((theirs[nan] & 0x7FFF) > 0x7F80)


def test_torch_conversion_rejects_other_dtypes():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="bfloat16"):
        bf16_bits_from_torch(torch.zeros(3))
