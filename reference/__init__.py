"""The DecodeTopK contract in NumPy: BF16 bit helpers and the reference top-k.

Importing this package imports neither torch nor cutlass (tests/test_imports.py), because
the conformance suite and CPU-only users must not need them.
"""

from .bits import (
    KEY_NEG_INF,
    KEY_POS_INF,
    bf16_bits_from_float32,
    bf16_bits_from_torch,
    block_key,
    block_max_bits,
    float32_from_bf16_bits,
    order_key,
)
from .topk import KS, decode_topk_reference, element_count, element_keys, validate_inputs

__all__ = [
    "KEY_NEG_INF",
    "KEY_POS_INF",
    "KS",
    "bf16_bits_from_float32",
    "bf16_bits_from_torch",
    "block_key",
    "block_max_bits",
    "decode_topk_reference",
    "element_count",
    "element_keys",
    "float32_from_bf16_bits",
    "order_key",
    "validate_inputs",
]
