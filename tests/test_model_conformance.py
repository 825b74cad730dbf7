"""The model through the conformance suite: every build, every path and fallback reached,
the trace checks wired in (a wrong trace fails the suite)."""

import dataclasses
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from decode_topk.conformance import registry, run_suite
from decode_topk.conformance.cases import cases
from decode_topk.reference.topk import KS
from decode_topk.reference.model import simulate
from decode_topk.kernel import policy
from decode_topk.kernel.policy import BUILDS, Build

ROOT = Path(__file__).resolve().parents[1]
# every path and fallback: an overflow is a streamed queue's (SPEC 2.12) or a staged
# attempt's narrow pass's (SPEC 2.5)
REQUIRED = ("path:short", "path:sampled", "path:direct", "reason:underflow", "reason:overflow")


def test_model_passes_ci_on_every_build(model_ci):
    result, text = model_ci
    assert result.ok, text[-3000:]
    assert text.splitlines()[0].split()[-2:] == ["seconds", "build"]  # the build column's header
    assert {run.build for run in result.runs} == {b.name for b in list(BUILDS)}


def test_ci_reaches_every_path_and_reason_on_every_build(model_ci):
    result, text = model_ci
    coverage = result.coverage()
    for build in list(BUILDS):
        cov = coverage[build.name]
        # 1x512x8 has no sampled path (SPEC 2.3: its capacity is its direct_max_length)
        if policy.direct_max_length(build.cluster, build.vectors) == build.capacity:
            required = ("path:short", "path:direct")
        else:
            required = REQUIRED
        missing = [key for key in required if cov.get(key, 0) == 0]
        assert missing == [], (build.name, cov)
        absent = [key for key in REQUIRED if key not in required and cov.get(key, 0)]
        assert absent == [], (build.name, cov)
    assert "trace coverage (rows):" in text and "fallback overflow=" in text and " underflow=" in text


@pytest.fixture
def traced_impl():
    """Registers an implementation with a build keyword: the model, with one trace field
    (or one output slot) spoiled."""
    def register(name, spoil):
        def impl(logits_bits, lengths, k, block_mode, build=None):
            out, trace = simulate(logits_bits, lengths, k, block_mode,
                                  build=build)
            spoil(out, trace)
            return out, trace
        registry.register(name, lambda: impl, returns_trace=True, takes_build=True)
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
    result = run_suite(name, "ci", case_filter="sampled-underflow", stream=None, builds=[(4, 1024, 8)])
    assert "trace-intent" in {v.reason for run in result.runs for v in run.violations}


def test_build_needs_an_implementation_that_takes_it():
    with pytest.raises(ValueError, match="takes no build"):
        run_suite("reference", "ci", case_filter="one-value", stream=None, builds=[(8, 512, 8)])


def test_cli_model_one_build():
    result = subprocess.run([sys.executable, "-m", "decode_topk.conformance", "--impl", "model", "--level", "ci",
                             "--case", "sampled-under", "--build", "8x512x16"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # the coverage line follows the case's intent, one row a spec and k
    case = next(c for c in cases("ci") if c.name == "sampled-underflow")
    intents = [row for k in KS for row in case.intent(Build.parse("8x512x16"), k)]
    sampled = sum(path == 1 for path, _ in intents)
    underflow = sum(reason == 2 for _, reason in intents)
    assert underflow and sampled, intents
    assert (f"8x512x16   path short=0 sampled={sampled} direct={len(intents) - sampled} | "
            f"fallback overflow=0 underflow={underflow}") in result.stdout
    bad = subprocess.run([sys.executable, "-m", "decode_topk.conformance", "--impl", "model", "--build", "3x512x8"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "3x512x8" in bad.stderr


def test_the_intent_is_read_from_the_case():
    """compare_traces takes the intent from the case it is given, not from its name."""
    from decode_topk.conformance.suite import compare_traces

    case = next(c for c in cases("ci") if c.name == "sampled-underflow")
    logits, lengths = case.generate()
    build = Build.parse("8x512x8")
    _, trace = simulate(logits, lengths, 512, False, build=build)
    model = registry.record("model")
    assert compare_traces(model, case, 512, False, logits, lengths, trace, build) == []
    wrong = dataclasses.replace(case, intent=lambda b, k: [(0, 0)] * len(lengths))
    assert {v.reason for v in compare_traces(model, wrong, 512, False, logits, lengths, trace, build)} == {
        "trace-intent"}
    renamed = dataclasses.replace(case, name="renamed-for-test")
    no_fallback = trace.copy()
    no_fallback[:, 1] = 0
    found = compare_traces(model, renamed, 512, False, logits, lengths, no_fallback, build)
    assert "trace-intent" in {v.reason for v in found}
