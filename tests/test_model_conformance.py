"""The model through the conformance suite: every build, every path and fallback reached,
the trace checks wired in (a wrong trace fails the suite)."""

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from decode_topk.conformance import registry, run_suite
from decode_topk.conformance.algorithm_cases import INTENTS
from decode_topk.reference.topk import KS
from decode_topk.reference.model import all_builds, build_name, simulate

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("path:short", "path:sampled", "path:direct", "reason:overflow", "reason:underflow")


@pytest.fixture(scope="module")
def ci_result():
    stream = io.StringIO()
    result = run_suite("model", "ci", stream=stream, builds=all_builds())
    return result, stream.getvalue()


def test_model_passes_ci_on_every_build(ci_result):
    result, text = ci_result
    assert result.ok, text[-3000:]
    assert {run.build for run in result.runs} == {build_name(b) for b in all_builds()}


def test_ci_reaches_every_path_and_reason_on_every_build(ci_result):
    result, text = ci_result
    coverage = result.coverage()
    for build in all_builds():
        cov = coverage[build_name(build)]
        missing = [key for key in REQUIRED if cov.get(key, 0) == 0]
        assert missing == [], (build_name(build), cov)
    assert "trace coverage (rows):" in text and "fallback overflow=" in text


@pytest.fixture
def traced_impl():
    """Registers an implementation with a build keyword: the model, with one trace field
    (or one output slot) spoiled."""
    def register(name, spoil):
        def impl(logits_bits, lengths, k, block_mode, build=None):
            out, trace = simulate(logits_bits, lengths, k, block_mode,
                                  cluster=build[0], threads=build[1], vectors=build[2])
            spoil(out, trace)
            return out, trace
        registry.register(name, lambda: impl)
        names.append(name)
        return name

    names = []
    yield register
    for name in names:
        registry.unregister(name)


def test_a_spoiled_trace_fails(traced_impl):
    def spoil(out, trace):
        trace[:, 3] = np.where(trace[:, 3] >= 0, trace[:, 3] + 1, trace[:, 3])  # cutoff

    name = traced_impl("cutoff-off-for-test", spoil)
    result = run_suite(name, "ci", case_filter="sampled-underflow", stream=None, builds=[(8, 512, 8)])
    reasons = {v.reason for run in result.runs for v in run.violations}
    assert not result.ok and {"trace-invariant", "trace-mismatch"} <= reasons


def test_intended_paths_are_checked(traced_impl):
    def spoil(out, trace):
        trace[:, 1] = 0  # pretend no row fell back

    name = traced_impl("no-fallback-for-test", spoil)
    result = run_suite(name, "ci", case_filter="sampled-overflow", stream=None, builds=[(4, 1024, 8)])
    assert "trace-intent" in {v.reason for run in result.runs for v in run.violations}


def test_build_needs_an_implementation_that_takes_it():
    with pytest.raises(ValueError, match="takes no build"):
        run_suite("reference", "ci", case_filter="one-value", stream=None, builds=[(8, 512, 8)])


def test_cli_model_one_build():
    result = subprocess.run([sys.executable, "-m", "decode_topk.conformance", "--impl", "model", "--level", "ci",
                             "--case", "sampled-over", "--build", "16x512x16"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # the coverage line follows the case's intents (algorithm_cases.INTENTS), one row a spec and k
    intents = [row for k in KS for row in INTENTS["sampled-overflow"]((16, 512, 16), k)]
    sampled = sum(path == 1 for path, _ in intents)
    overflow = sum(reason == 1 for _, reason in intents)
    assert overflow and sampled, intents
    assert (f"16x512x16  path short=0 sampled={sampled} direct={len(intents) - sampled} | "
            f"fallback overflow={overflow} underflow=0") in result.stdout
    bad = subprocess.run([sys.executable, "-m", "decode_topk.conformance", "--impl", "model", "--build", "2x512x8"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "2x512x8" in bad.stderr
