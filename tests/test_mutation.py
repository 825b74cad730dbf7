"""The mutation campaigns (conformance/mutation.py) work: planted bugs in several steps of
the model, and in the checker, are caught; a bug nothing shows is reported as a survivor
and fails the campaign. The whole campaigns (`python -m decode_topk.conformance.mutation
--target all`, every mutant) run in CI's script."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from decode_topk.conformance import contract, mutation
from decode_topk.conformance.mutation import run_campaign, run_checker_campaign
from decode_topk.kernel import policy
from decode_topk.kernel.policy import BUILDS
from decode_topk.reference.model import MUTANTS, simulate

ROOT = Path(__file__).resolve().parents[1]

# One mutant a step: cutoff, the tie rule, fallback boundary, histogram copies, -1
# writes, pinned block, signed zero, short rows, a prefix in arrival order, samples, a
# streamed queue's order and the streamed builds' threshold. (The queues' overflow
# boundary is shown only by the ci's widest streamed rows, so by the whole campaign.)
SUBSET = ("cutoff_plus_one", "eq_highest_index", "underflow_at_k", "hist_copy_by_warp",
          "neginf_block_index", "pin_none", "signed_zero_equal", "short_padding_zero",
          "arrival_cta_order", "sample_drop_last", "tile_thread_major", "stream_at_stage")


def test_subset_is_killed():
    outcomes = run_campaign(SUBSET, level="ci", stream=None)
    assert [o.name for o in outcomes] == list(SUBSET)
    survivors = [o.name for o in outcomes if not o.killed]
    assert survivors == [], survivors
    assert all(o.where and o.why for o in outcomes)


def test_a_mutant_without_its_case_survives():
    # 'one-value' rows are at most 20,480 logits: never sampled on the builds whose direct
    # path takes rows of 32,768 or more (SPEC 2.3; not 1x512x4, which streams past 16,384),
    # so a bug in q is invisible there.
    direct_builds = [b for b in BUILDS if policy.direct_max_length(b.cluster, b.vectors) >= 20480]
    (outcome,) = run_campaign(["q_floor"], level="ci", case_filter="one-value", builds=direct_builds,
                              stream=None)
    assert not outcome.killed


def test_unknown_mutant_is_an_error():
    with pytest.raises(ValueError, match=r"unknown model mutant 'q_flor' \(did you mean 'q_floor'\?\).*q_floor"):
        run_campaign(["q_flor"], stream=None)
    with pytest.raises(ValueError, match=r"unknown checker mutant 'q_floor' \(a model mutant: --target model\)"):
        run_checker_campaign(["q_floor"], stream=None)
    with pytest.raises(ValueError, match=r"unknown mutant 'nope'; valid names include q_floor, "):
        simulate(np.zeros((1, 8), np.uint16), np.array([8]), 512, mutant="nope")


def test_mutant_names_are_unique_across_targets():
    names = [n for t in mutation.TARGETS for n in mutation.mutants_of(t)]
    assert len(names) == len(set(names))
    assert len(contract.MUTANTS) >= 15


# The campaign's -1 clamp mutant (issue 14) and its one killer, and the same mutant
# against the contract's table tests only, which cannot see a checker decision.
CLAMP = "checker_missed_minus_one_clamped"
CLAMP_KILLER = "test_checker_meta.py::test_neg_inf_k_th_block_owes_one_minus_one"


def test_checker_mutant_is_killed():
    (outcome,) = run_checker_campaign([CLAMP], stream=None, tests=[CLAMP_KILLER])
    assert outcome.killed and outcome.where.endswith(CLAMP_KILLER.split("::")[1]), outcome
    assert not contract.fault(contract.MUTANTS[CLAMP][0])  # unplanted afterwards


def test_checker_mutant_without_its_test_fails_the_campaign(monkeypatch, capsys):
    (outcome,) = run_checker_campaign([CLAMP], stream=None, tests=["test_contract.py"])
    assert not outcome.killed
    monkeypatch.setattr(mutation, "META_TESTS", ("test_contract.py",))
    assert mutation.main(["--target", "checker", "--mutant", CLAMP]) == 1
    out = capsys.readouterr().out
    assert "SURVIVED" in out and "mutation score (checker): 0/1 killed" in out


def test_checker_campaign_refuses_a_failing_baseline(monkeypatch):
    """Under a checker that already fails its meta-tests every mutant would look killed."""
    monkeypatch.setattr(contract, "_active", contract.MUTANTS["checker_wrong_tie_at_k"][0])
    with pytest.raises(RuntimeError, match="unmutated checker fails"):
        run_checker_campaign([CLAMP], stream=None, tests=["test_checker_meta.py::test_reference_output_is_clean"])


def test_cli_lists_mutants():
    for target, count in (("model", len(MUTANTS)), ("checker", len(contract.MUTANTS))):
        result = subprocess.run([sys.executable, "-m", "decode_topk.conformance.mutation", "--target", target,
                                 "--list"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0
        assert len(result.stdout.splitlines()) == count, target
    assert len(MUTANTS) >= 40


def test_cli_help_is_whole():
    result = subprocess.run([sys.executable, "-m", "decode_topk.conformance.mutation", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for target in ("model", "checker", "policy", "all"):
        assert f"{target} " in text
    assert "exit status: 0 when every mutant is killed" in text.lower() and "2 on a usage error" in text


def test_cli_usage_errors_exit_two():
    for args in (["--mutant", "nope"], ["--target", "checker", "--level", "ci"]):
        result = subprocess.run([sys.executable, "-m", "decode_topk.conformance.mutation", *args], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and result.stderr.startswith("error: "), args


def test_cli_exits_one_on_a_survivor():
    result = subprocess.run([sys.executable, "-m", "decode_topk.conformance.mutation", "--mutant", "q_floor",
                             "--case", "one-value", "--build", "8x512x8"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "SURVIVED" in result.stdout and "0/1 killed" in result.stdout
    assert "[1/1] SURVIVED q_floor" in result.stdout  # a progress line a mutant
