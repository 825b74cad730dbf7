"""The registry's implementation records, and `--impl pkg.module:attr`: the suite runs and
judges an implementation by its record, and any callable can be named on the command line."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from decode_topk.conformance import __main__ as cli
from decode_topk.conformance import registry, run_suite
from decode_topk.kernel.policy import Build
from decode_topk.reference import decode_topk_reference
from decode_topk.reference.model import simulate

ROOT = Path(__file__).resolve().parents[1]



def test_builtin_records():
    fields = ("returns_trace", "takes_build", "reports_build", "trace_oracle", "claims")
    got = {name: tuple(getattr(registry.record(name), f) for f in fields) for name in registry.names()}
    assert got == {
        "reference": (False, False, None, "model", "contract"),
        "reference-canonical": (False, False, None, "model", "canonical"),
        "model": (True, True, "last_build", "invariants", "canonical"),
        "aot": (True, True, "last_build", "model", "canonical"),
        "jit": (True, True, "last_build", "model", "canonical"),
    }


@pytest.mark.parametrize("field, value", [("returns_trace", "yes"), ("reports_build", "build_of"),
                                          ("trace_oracle", "peer"), ("claims", "exact"),
                                          ("sweep_builds", True)])
def test_a_bad_record_field_is_a_value_error_naming_it(scratch, field, value):
    with pytest.raises(ValueError, match=f"{field} = {value!r}"):
        registry.register("bad-record-for-test", lambda: decode_topk_reference, **{field: value})
    assert "bad-record-for-test" not in registry.names()


def test_an_unknown_record_field_is_a_value_error():
    with pytest.raises(ValueError, match=r"unknown record fields \['takes_builds'\]"):
        registry.register("typo-for-test", lambda: decode_topk_reference, takes_builds=True)


def test_the_record_not_the_result_says_whether_a_trace_comes(scratch):
    """An implementation that returns (out, trace) without declaring a trace is a bad
    output, not silently unpacked; one declaring a trace must return the pair."""
    def traced(logits_bits, lengths, k, block_mode):
        return simulate(logits_bits, lengths, k, block_mode)

    registry.register("undeclared-trace-for-test", lambda: traced)
    registry.register("declared-trace-for-test", lambda: decode_topk_reference, returns_trace=True)
    scratch += ["undeclared-trace-for-test", "declared-trace-for-test"]
    for name, detail in (("undeclared-trace-for-test", "np.int32 array, got tuple"),
                         ("declared-trace-for-test", "(out, trace) is due, got ndarray")):
        result = run_suite(name, "ci", case_filter="one-value", stream=None)
        violations = [v for run in result.runs for v in run.violations]
        assert len(violations) == len(result.runs) == 6, name
        assert {v.reason for v in violations} == {"bad-output"} and detail in violations[0].detail, name


class _ReportsBuild:
    """The model on its own choice of build, the build left in last_build (as 'aot' and
    'jit' do), with the cutoff of every sampled row spoiled."""

    returns_trace = True
    takes_build = True

    def __init__(self):
        self.last_build = None

    def __call__(self, logits_bits, lengths, k, block_mode, build=None):
        self.last_build = Build.parse(build or "4x1024x8")
        out, trace = simulate(logits_bits, lengths, k, block_mode, build=self.last_build)
        trace[:, 3] = np.where(trace[:, 3] >= 0, trace[:, 3] + 1, trace[:, 3])
        return out, trace


@pytest.mark.parametrize("reports_build", [None, "last_build"])
def test_the_build_that_ran_comes_from_the_record(scratch, reports_build):
    registry.register("reports-for-test", _ReportsBuild, returns_trace=True, takes_build=True,
                      reports_build=reports_build)
    scratch.append("reports-for-test")
    result = run_suite("reports-for-test", "ci", case_filter="sampled-underflow", stream=None)
    reasons = {v.reason for run in result.runs for v in run.violations}
    if reports_build is None:  # unknown build: the whole-row invariants only
        assert {run.build for run in result.runs} == {""} and reasons == {"trace-invariant"}
    else:  # compared with the model on the build it reported
        assert {run.build for run in result.runs} == {"4x1024x8"}
        assert {"trace-invariant", "trace-mismatch"} <= reasons
        mismatch = next(v for run in result.runs for v in run.violations if v.reason == "trace-mismatch")
        assert mismatch.repro["build"] == "4x1024x8" and "model vs reports-for-test" in mismatch.detail


@pytest.mark.parametrize("oracle, model_runs", [("model", 3), ("invariants", 0)])
def test_the_trace_oracle_comes_from_the_record(scratch, monkeypatch, oracle, model_runs):
    """'model': compare_traces runs the model on the same input; 'invariants' (the model
    itself): it does not, whatever the implementation's name."""
    calls = []

    def impl(logits_bits, lengths, k, block_mode, build=None):
        return simulate(logits_bits, lengths, k, block_mode, build=build)

    def counting(*args, **kwargs):
        calls.append(1)
        return simulate(*args, **kwargs)

    registry.register("oracle-for-test", lambda: impl, returns_trace=True, takes_build=True, trace_oracle=oracle)
    scratch.append("oracle-for-test")
    monkeypatch.setattr("decode_topk.reference.model.simulate", counting)
    result = run_suite("oracle-for-test", "ci", case_filter="sampled-hits-top", stream=None, builds=["8x512x8"])
    assert result.ok and len(result.runs) == 3 and len(calls) == model_runs


# ---------------------------------------------------------------------------------------
# --impl pkg.module:attr
# ---------------------------------------------------------------------------------------
MODULE = '''
import numpy as np
from decode_topk.reference import decode_topk_reference


def good(logits_bits, lengths, k, block_mode):
    return decode_topk_reference(logits_bits, lengths, k, block_mode)


def drops_last(logits_bits, lengths, k, block_mode):
    out = decode_topk_reference(logits_bits, lengths, k, block_mode)
    out[:, -1] = -1  # the last index dropped
    return out


class Traced:
    """A class: instantiated once, with no arguments; its attributes declare the record."""
    returns_trace = True
    takes_build = True
    reports_build = "last_build"
    made = 0

    def __init__(self):
        from decode_topk.reference.model import simulate
        Traced.made += 1
        self.simulate = simulate
        self.last_build = None

    def __call__(self, logits_bits, lengths, k, block_mode, build=None):
        self.last_build = build or (8, 16)
        return self.simulate(logits_bits, lengths, k, block_mode, build=self.last_build)


def misdeclared(logits_bits, lengths, k, block_mode):
    return good(logits_bits, lengths, k, block_mode)


misdeclared.returns_trace = "yes"
not_callable = 3
'''


@pytest.fixture
def vendored(tmp_path, monkeypatch):
    """A module `vendored_impls` on sys.path (in-process and for subprocesses)."""
    (tmp_path / "vendored_impls.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    yield "vendored_impls"
    sys.modules.pop("vendored_impls", None)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "decode_topk.conformance", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_correct_callable_passes(vendored):
    result = _cli("--impl", f"{vendored}:good", "--case", "needles")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "0 violations" in result.stdout and f"({vendored}:good, level ci)" in result.stdout


def test_a_planted_fault_is_reported_with_reason_and_repro(vendored):
    result = _cli("--impl", f"{vendored}:drops_last", "--case", "needles")
    assert result.returncode == 1
    assert "case=needles seed=110 k=512 mode=token row=0 [bad-minus-one]" in result.stdout
    assert "repro: row=0, length=32768, k=512, block_mode=False" in result.stdout


def test_a_class_is_a_factory_and_declares_its_record(scratch, vendored):
    name = f"{vendored}:Traced"
    record = registry.record(name)
    assert (record.returns_trace, record.takes_build, record.reports_build) == (True, True, "last_build")
    result = run_suite(name, "ci", case_filter="sampled-hits-top", stream=None)
    assert result.ok and {run.build for run in result.runs} == {"8x512x16"}
    assert sys.modules[vendored].Traced.made == 1
    forced = run_suite(name, "ci", case_filter="sampled-hits-top", stream=None, builds=["4x1024x8"])
    assert forced.ok and {run.build for run in forced.runs} == {"4x1024x8"}


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_for_test:fn", "cannot import module 'no_such_module_for_test': ModuleNotFoundError"),
    ("{mod}:missing", "'{mod}' has no attribute 'missing'"),
    ("{mod}:not_callable", "'{mod}:not_callable' is not callable (a int)"),
    ("{mod}:misdeclared", "returns_trace = 'yes' is not a bool"),
    ("{mod}:", "'{mod}:' is not pkg.module:attr"),
    ("no-such-impl", "unknown implementation 'no-such-impl'; registered: reference, reference-canonical, model, "
                     "aot, jit, or pkg.module:attr"),
])
def test_a_bad_spec_is_one_line_and_exit_2(scratch, vendored, capsys, spec, message):
    spec, message = spec.format(mod=vendored), message.format(mod=vendored)
    assert cli.main(["--impl", spec]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and message in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and captured.out == ""


def test_a_bad_spec_from_the_shell_has_no_traceback(vendored):
    result = _cli("--impl", f"{vendored}:missing")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"error: implementation '{vendored}:missing': '{vendored}' has no attribute 'missing'"
