"""The mutation campaign (conformance/mutation.py) works: planted bugs in several steps of
the model are caught, and a bug no case can show is reported as a survivor. The whole
campaign (`python -m decode_topk.conformance.mutation`, every mutant) runs in CI's script."""

import subprocess
import sys
from pathlib import Path

import pytest

from decode_topk.conformance.mutation import run_campaign
from decode_topk.reference.model import MUTANTS

ROOT = Path(__file__).resolve().parents[1]

# One mutant a step: cutoff, per-CTA eq cap, fallback boundary, histogram copies, -1
# writes, pinned block, signed zero, short rows, survivor capacity.
SUBSET = ("cutoff_plus_one", "eq_cap_minus_one", "underflow_at_k", "hist_copy_by_warp",
          "neginf_block_index", "pin_none", "signed_zero_equal", "short_padding_zero",
          "capacity_minus_one", "sample_drop_last")


def test_subset_is_killed():
    outcomes = run_campaign(SUBSET, level="ci", stream=None)
    assert [o.name for o in outcomes] == list(SUBSET)
    survivors = [o.name for o in outcomes if not o.killed]
    assert survivors == [], survivors
    assert all(o.where and o.why for o in outcomes)


def test_a_mutant_without_its_case_survives():
    # 'one-value' rows are at most 20,480 logits: never sampled, so a bug in q is invisible.
    (outcome,) = run_campaign(["q_floor"], level="ci", case_filter="one-value", stream=None)
    assert not outcome.killed


def test_unknown_mutant_is_an_error():
    with pytest.raises(ValueError, match="unknown mutants"):
        run_campaign(["no-such-mutant"], stream=None)


def test_cli_lists_mutants():
    result = subprocess.run([sys.executable, "-m", "decode_topk.conformance.mutation", "--list"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == len(MUTANTS) >= 40


def test_cli_exits_one_on_a_survivor():
    result = subprocess.run([sys.executable, "-m", "decode_topk.conformance.mutation", "--mutant", "q_floor",
                             "--case", "one-value", "--build", "8x512x8"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "SURVIVED" in result.stdout and "0/1 killed" in result.stdout
