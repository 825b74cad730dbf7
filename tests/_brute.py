"""An independent, pure-Python statement of the contract for small rows (test helper)."""

import math


def key_of(b):
    return (~b & 0xFFFF) if b & 0x8000 else (b | 0x8000)


def is_nan(b):
    return (b & 0x7FFF) > 0x7F80


def block_value(block):
    """max.NaN.bf16x2 over a block, folded pairwise as the hardware would."""
    value = block[0]
    for b in block[1:]:
        if is_nan(value) or is_nan(b):
            value = 0x7FFF
        elif key_of(b) > key_of(value):
            value = b
    return value


def elements(row, length, block_mode):
    """The row's element keys as a Python list."""
    row = [int(b) for b in row[:length]]
    if not block_mode:
        return [key_of(b) for b in row]
    n = math.ceil(length / 8)
    keys = [key_of(block_value(row[8 * j:8 * j + 8])) for j in range(n - 1)]
    return keys + [0xFF80] if n else []


def reference_row(row, length, k, block_mode):
    """The reference's documented answer: lowest indices among ties, sorted by
    descending key then ascending index; short rows fixed; -inf blocks as -1."""
    keys = elements(row, length, block_mode)
    n = len(keys)
    chosen = list(range(n)) if n <= k else sorted(range(n), key=lambda i: (-keys[i], i))[:k]
    out = [-1 if block_mode and keys[i] == 0x007F else i for i in chosen]
    return out + [-1] * (k - len(out))
