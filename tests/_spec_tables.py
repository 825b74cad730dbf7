"""SPEC.md 1.2 and 1.3 as literal tables, shared by the tests of the reference's bit
helpers (test_bits.py) and of the checker's own statement of the contract
(test_contract.py): one table, two independent implementations judged by it."""

import numpy as np

ALL_PATTERNS = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)

# SPEC.md 1.2: (bits, key, what); key = ~b & 0xFFFF with the sign bit set, else b | 0x8000.
KEY_TABLE = [
    (0x0000, 0x8000, "+0"),
    (0x8000, 0x7FFF, "-0: just below +0"),
    (0x0001, 0x8001, "smallest positive subnormal"),
    (0x8001, 0x7FFE, "smallest negative subnormal"),
    (0x3F80, 0xBF80, "1.0"),
    (0xBF80, 0x407F, "-1.0"),
    (0x7F7F, 0xFF7F, "largest finite"),
    (0xFF7F, 0x0080, "most negative finite"),
    (0x7F80, 0xFF80, "+inf"),
    (0xFF80, 0x007F, "-inf"),
    (0x7F81, 0xFF81, "positive NaN, payload 1: just above +inf"),
    (0x7FC0, 0xFFC0, "quiet NaN"),
    (0x7FFF, 0xFFFF, "canonical NaN of max.NaN: the largest key"),
    (0xFF81, 0x007E, "negative NaN, payload 1: just below -inf"),
    (0xFFC0, 0x003F, "negative quiet NaN"),
    (0xFFFF, 0x0000, "all ones: the smallest key"),
]


def block(*bits, fill=0xC000):
    """Eight logits: bits, then fill (-2.0)."""
    return np.array(bits + (fill,) * (8 - len(bits)), np.uint16)


# SPEC.md 1.3: (eight logits, block value bits, what), PTX max.NaN.bf16x2 semantics.
BLOCK_TABLE = [
    (block(0x3F80, 0x4000), 0x4000, "max(1, 2) = 2"),
    (block(0x8000, 0x0000), 0x0000, "max(-0, +0) = +0"),
    (block(0x0000, 0x8000), 0x0000, "max(+0, -0) = +0, either order"),
    (np.full(8, 0x8000, np.uint16), 0x8000, "max(-0, -0) = -0"),
    (block(0x8000, 0x8001), 0x8000, "-0 above a negative subnormal"),
    (block(0x8001, 0x8000), 0x8000, "max(-subnormal, -0) = -0, either order"),
    (np.full(8, 0x0000, np.uint16), 0x0000, "all +0"),
    (np.full(8, 0xFF80, np.uint16), 0xFF80, "all -inf: -inf"),
    (block(0xFF80, 0x7F80), 0x7F80, "+inf wins"),
    (block(0x7FC0), 0x7FFF, "a NaN gives the canonical NaN"),
    (block(0xFFC0, 0x7F80), 0x7FFF, "a negative NaN too, even beside +inf"),
    (block(0xFFFF), 0x7FFF, "the all-ones negative NaN too"),
    (block(0x7F81), 0x7FFF, "a signalling NaN too"),
    (np.full(8, 0xFF81, np.uint16), 0x7FFF, "all negative NaNs"),
    (np.full(8, 0xBF80, np.uint16), 0xBF80, "all -1: -1"),
]


def orders_numbers(keys):
    """Whether keys (uint16, one per pattern of ALL_PATTERNS) are a bijection onto
    0..0xFFFF that orders every non-NaN value as a number."""
    values = (ALL_PATTERNS.astype(np.uint32) << 16).view(np.float32)
    number = ~np.isnan(values)
    by_key = values[number][np.argsort(keys[number])]
    return (np.unique(keys).size == 1 << 16 and int(keys.min()) == 0 and int(keys.max()) == 0xFFFF
            and bool(np.all(np.diff(by_key) >= 0)))
