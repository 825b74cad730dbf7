"""BF16 bit patterns: the order key, the block maximum and conversions (SPEC.md 1.2, 1.3).

Everything here works on `np.uint16` bit patterns rather than floats, because bit
patterns keep NaN payloads and the sign of zero, which the contract distinguishes.
"""

import numpy as np

SIGN_BIT = 0x8000
ABS_MASK = 0x7FFF
POS_INF_BITS = 0x7F80
NEG_INF_BITS = 0xFF80
CANONICAL_NAN_BITS = 0x7FFF  # what PTX max.NaN.bf16x2 returns for any NaN operand
QUIET_NAN_BITS = 0x7FC0  # what a float32 NaN rounds to (its sign is kept)

KEY_POS_INF = 0xFF80  # order_key(POS_INF_BITS)
KEY_NEG_INF = 0x007F  # order_key(NEG_INF_BITS)

LOGITS_PER_BLOCK = 8


def order_key(bits):
    """The 16-bit order key of BF16 bit patterns (an int, or an array of any int dtype).

    Negative values (sign bit set) are flipped whole, because a larger magnitude means a
    smaller number and flipping reverses their order and puts them below 0x8000;
    non-negative values just gain the sign bit, which puts them above every negative one.
    So integer comparison of keys is numeric comparison of the values, with -0 < +0 and
    NaNs outside the infinities, ordered by payload.
    """
    if isinstance(bits, (int, np.integer)):
        b = int(bits) & 0xFFFF
        return (~b & 0xFFFF) if b & SIGN_BIT else (b | SIGN_BIT)
    b = np.asarray(bits).astype(np.uint16)
    return np.where(b & SIGN_BIT, ~b, b | np.uint16(SIGN_BIT)).astype(np.uint16)


def bits_from_key(key):
    """The inverse of `order_key`."""
    if isinstance(key, (int, np.integer)):
        k = int(key) & 0xFFFF
        return (k & ABS_MASK) if k & SIGN_BIT else (~k & 0xFFFF)
    k = np.asarray(key).astype(np.uint16)
    return np.where(k & SIGN_BIT, k & np.uint16(ABS_MASK), ~k).astype(np.uint16)


def is_nan_bits(bits):
    """True where the pattern is a NaN: exponent all ones and a non-zero mantissa, i.e.
    magnitude bits above those of infinity."""
    return (np.asarray(bits).astype(np.uint16) & np.uint16(ABS_MASK)) > POS_INF_BITS


def block_max_bits(blocks):
    """The block value: the maximum over the last axis (8 logits) as PTX max.NaN.bf16x2
    computes it.

    Any NaN operand, of either sign, gives the canonical NaN 0x7FFF; otherwise the largest
    value with +0 > -0, which is exactly the largest order key among the (non-NaN) logits.
    """
    b = np.asarray(blocks).astype(np.uint16)
    if b.ndim == 0 or b.shape[-1] != LOGITS_PER_BLOCK:
        raise ValueError(f"blocks must have a last axis of {LOGITS_PER_BLOCK}, got shape {b.shape}")
    keys = order_key(b)
    largest = np.take_along_axis(b, np.argmax(keys, axis=-1)[..., None], axis=-1)[..., 0]
    return np.where(is_nan_bits(b).any(axis=-1), np.uint16(CANONICAL_NAN_BITS), largest).astype(np.uint16)


def block_key(blocks):
    """The order key of each block's value (`block_max_bits`)."""
    return order_key(block_max_bits(blocks))


def bf16_bits_from_float32(a):
    """Round float32 values to BF16 bit patterns, to nearest even, as hardware does.

    Adding 0x7FFF plus the lowest kept bit to the 32-bit pattern carries into the kept
    16 bits exactly when the dropped half is above one half, or equal to it with an odd
    kept bit (ties to even); a finite value that rounds past the largest finite BF16
    carries into the exponent and becomes infinity, as it should. NaNs are handled apart,
    because the carry could turn a NaN into infinity: they become the quiet NaN 0x7FC0
    with their sign.
    """
    u = np.ascontiguousarray(np.asarray(a, dtype=np.float32)).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    quiet = (np.uint16(QUIET_NAN_BITS) | ((u >> 16).astype(np.uint16) & np.uint16(SIGN_BIT)))
    return np.where(nan, quiet, rounded).astype(np.uint16)


def float32_from_bf16_bits(bits):
    """The float32 values of BF16 bit patterns (exact: BF16 is float32's upper half)."""
    b = np.asarray(bits).astype(np.uint32)
    return (b << 16).view(np.float32)


def bf16_bits_from_torch(t):
    """The bit patterns of a torch.bfloat16 tensor as np.uint16 (copied to the CPU).

    torch is imported here, not at module level, because importing `reference` must stay
    free of torch.
    """
    import torch

    if not isinstance(t, torch.Tensor) or t.dtype != torch.bfloat16:
        raise ValueError(f"expected a torch.bfloat16 tensor, got {type(t).__name__} "
                         f"{getattr(t, 'dtype', '')}")
    return t.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16)
