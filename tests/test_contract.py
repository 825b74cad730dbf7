"""The checker's own statement of the contract (conformance/contract.py) against the spec's
literal tables and against the reference, on every BF16 pattern and on crafted and random
blocks and rows; and the independence itself: the checker and the trace oracle import no
element helper of reference/."""

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest

from decode_topk.conformance import contract
from decode_topk.reference import bits as ref_bits
from decode_topk.reference import topk as ref_topk

from _spec_tables import ALL_PATTERNS, BLOCK_TABLE, KEY_TABLE, block, orders_numbers

ROOT = Path(__file__).resolve().parents[1]
NANS = (0x7F81, 0x7FA5, 0x7FC0, 0x7FFF, 0xFF81, 0xFFA5, 0xFFC0, 0xFFFF)  # both signs, low/mid/quiet/all-ones payloads
SPECIALS = NANS + (0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F)

@pytest.mark.parametrize("bits,key,what", KEY_TABLE)
def test_key_spec_table(bits, key, what):
    assert contract.key(bits) == key, what
    assert contract.key(np.array([bits], np.uint16))[0] == key, what


def test_key_equals_reference_on_every_pattern():
    ours = contract.key(ALL_PATTERNS)
    theirs = ref_bits.order_key(ALL_PATTERNS)
    differ = np.flatnonzero(ours != theirs)
    assert differ.size == 0, [f"{int(b):#06x}: {int(ours[b]):#06x} vs {int(theirs[b]):#06x}" for b in differ[:5]]


def test_key_is_a_bijection_that_orders_numbers():
    assert orders_numbers(contract.key(ALL_PATTERNS))
    assert contract.KEY_POS_INF == 0xFF80 and contract.KEY_NEG_INF == 0x007F


@pytest.mark.parametrize("block,value,what", BLOCK_TABLE)
def test_block_spec_table(block, value, what):
    assert contract.block_value_bits(block) == value, what
    assert ref_bits.block_max_bits(block) == value, what


def _crafted_blocks():
    """Every NaN kind in every lane over several fillers; every +-0 / +-inf / finite
    arrangement of a few lanes; mixed specials."""
    blocks = []
    for nan, lane, fill in itertools.product(NANS, range(8), (0xC000, 0x8000, 0x0000, 0xFF80, 0x7F80, 0x3F80)):
        b = np.full(8, fill, np.uint16)
        b[lane] = nan
        blocks.append(b)
    few = (0x0000, 0x8000, 0x7F80, 0xFF80, 0x8001, 0x0001, 0xBF80)
    for combo in itertools.product(few, repeat=3):
        for fill in (0x8000, 0xFF80):
            blocks.append(block(*combo, fill=fill))
    return np.stack(blocks)


def test_block_value_equals_reference_on_crafted_blocks():
    blocks = _crafted_blocks()
    assert np.array_equal(contract.block_value_bits(blocks), ref_bits.block_max_bits(blocks))


def test_block_value_equals_reference_on_random_blocks():
    rng = np.random.default_rng(14)
    uniform = rng.integers(0, 1 << 16, size=(50_000, 8), dtype=np.uint16)
    specials = rng.choice(np.array(SPECIALS, np.uint16), size=(50_000, 8))
    for blocks in (uniform, specials):
        assert np.array_equal(contract.block_value_bits(blocks), ref_bits.block_max_bits(blocks))


def test_block_value_rejects_wrong_shape():
    with pytest.raises(ValueError, match="last axis of 8"):
        contract.block_value_bits(np.zeros((3, 7), np.uint16))


@pytest.mark.parametrize("block_mode", [False, True])
def test_element_rules_equal_reference(block_mode):
    """Element count, keys (pinned newest block, partial or whole) and the short-row answer,
    on rows of specials at every length up to 10 blocks and around a block edge."""
    rng = np.random.default_rng(int(block_mode))
    for length in list(range(0, 81)) + [8 * 63, 8 * 63 + 1, 8 * 64 - 1, 8 * 64]:
        row = rng.choice(np.array(SPECIALS, np.uint16), size=8 * 64 + 8)
        ours = contract.element_keys(row, length, block_mode)
        theirs = ref_topk.element_keys(row, length, block_mode)
        assert contract.element_count(length, block_mode) == ref_topk.element_count(length, block_mode) == ours.size
        assert np.array_equal(ours, theirs), length
        assert np.array_equal(contract.short_row_answer(ours, 512, block_mode),
                              ref_topk.short_row_answer(theirs, 512, block_mode)), length


@pytest.mark.parametrize("length", [8 * 5, 8 * 5 - 3])  # newest block whole, then partial
def test_newest_block_pinned_whatever_its_logits(length):
    row = np.full(64, 0x3F80, np.uint16)
    row[8 * 4:] = 0xFF80  # the newest block (4) all -inf, past the length NaN
    row[length:] = 0x7FC0
    keys = contract.element_keys(row, length, True)
    assert keys.tolist() == [0xBF80] * 4 + [0xFF80]


def test_element_counts():
    assert [contract.element_count(n, True) for n in (0, 1, 7, 8, 9, 16, 17)] == [0, 1, 1, 1, 2, 2, 3]
    assert [contract.element_count(n, False) for n in (0, 1, 9)] == [0, 1, 9]


def test_short_row_answer_literal():
    keys = np.array([0xBF80, 0x007F, 0xFF80, 0x007F])  # block 1 and 3 are -inf
    assert contract.short_row_answer(keys, 512, True)[:6].tolist() == [0, -1, 2, -1, -1, -1]
    assert contract.short_row_answer(keys, 512, False)[:6].tolist() == [0, 1, 2, 3, -1, -1]
    assert contract.short_row_answer(keys, 512, True).dtype == np.int32


def test_length_outside_the_row_is_refused():
    with pytest.raises(ValueError, match="length 9 is outside"):
        contract.element_keys(np.zeros(8, np.uint16), 9, False)


def test_planted_is_scoped_and_names_are_checked():
    # Relative to whatever is planted now: the checker campaign runs this file with a
    # fault planted, and the nested one must give that back.
    before = contract.key(ALL_PATTERNS)
    name = "checker_key_nan_low"
    with contract.planted(name):
        assert contract.fault(contract.MUTANTS[name][0])
        assert contract.key(0x7FC0) < contract.key(0xFF80)  # a positive NaN below -inf
    assert np.array_equal(contract.key(ALL_PATTERNS), before)
    with pytest.raises(ValueError, match="unknown checker mutant 'nope'.*checker_key_nan_low"):
        with contract.planted("nope"):
            pass


def _imports(path):
    """(module, name) of every `from module import name` and `import module` in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = ("." * node.level) + (node.module or "")
            found += [(module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
    return found


@pytest.mark.parametrize("path", ["conformance/checker.py", "conformance/contract.py", "conformance/trace.py"])
def test_no_element_helper_from_the_reference(path):
    """The checker, its contract and the trace oracle take from reference/ only the input
    validator (shared on purpose, contract.py says why) and the mutant registry (no rule)."""
    allowed = {("decode_topk.reference.topk", "validate_inputs"), ("decode_topk.reference.mutants", "Mutants")}
    for module, name in _imports(ROOT / path):
        if "reference" in module or (module.endswith("decode_topk") and name == "reference"):
            assert (module, name) in allowed, f"{path} imports {name} from {module}"
