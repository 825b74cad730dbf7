"""The suite and its CLI: the reference passes; a broken implementation fails."""

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from decode_topk.conformance import registry, run_suite
from decode_topk.reference import decode_topk_reference

ROOT = Path(__file__).resolve().parents[1]


def test_cli_reference_ci_exits_zero():
    result = subprocess.run([sys.executable, "-m", "decode_topk.conformance", "--impl", "reference", "--level", "ci"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 violations" in result.stdout


def test_cli_unknown_impl_exits_two():
    result = subprocess.run([sys.executable, "-m", "decode_topk.conformance", "--impl", "no-such-impl"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "no-such-impl" in result.stderr


@pytest.fixture
def broken():
    """A registered implementation that repeats one index in the last slot of each row."""
    def impl(logits_bits, lengths, k, block_mode):
        out = decode_topk_reference(logits_bits, lengths, k, block_mode)
        out[:, -1] = out[:, 0]
        return out

    registry.register("broken-for-test", lambda: impl)
    yield "broken-for-test"
    registry.unregister("broken-for-test")


def test_broken_implementation_fails(broken):
    stream = io.StringIO()
    result = run_suite(broken, "ci", case_filter="needles", stream=stream)
    assert not result.ok and result.violation_count > 0
    text = stream.getvalue()
    assert "case=needles seed=110" in text and "duplicate" in text and "repro:" in text


def test_crashing_implementation_fails_without_stopping(broken):
    def crash(logits_bits, lengths, k, block_mode):
        raise RuntimeError("boom")

    registry.register("crash-for-test", lambda: crash)
    try:
        result = run_suite("crash-for-test", "ci", case_filter="one-value", stream=None)
    finally:
        registry.unregister("crash-for-test")
    assert len(result.runs) == 6
    assert all(run.violations[0].reason == "impl-error" for run in result.runs)


def test_trace_results_reach_the_hook(monkeypatch):
    seen = []

    def with_trace(logits_bits, lengths, k, block_mode):
        out = decode_topk_reference(logits_bits, lengths, k, block_mode)
        return out, np.full((out.shape[0], 8), -1, np.int32)

    def hook(record, case, k, block_mode, logits_bits, lengths, trace, build=None):
        seen.append((record.name, case.name, k, block_mode, trace.shape))
        return []

    monkeypatch.setattr("decode_topk.conformance.suite.compare_traces", hook)
    registry.register("traced-for-test", lambda: with_trace, returns_trace=True)
    try:
        result = run_suite("traced-for-test", "ci", case_filter="monotone", stream=None)
    finally:
        registry.unregister("traced-for-test")
    assert result.ok and len(seen) == 6 and seen[0][0] == "traced-for-test"


def test_registry_rules():
    assert "reference" in registry.names()
    assert registry.get("reference") is decode_topk_reference
    with pytest.raises(ValueError, match="already registered"):
        registry.register("reference", lambda: decode_topk_reference)
    with pytest.raises(ValueError, match="unknown implementation"):
        registry.get("nope")


def test_loader_runs_only_on_first_get():
    calls = []
    registry.register("lazy-for-test", lambda: calls.append(1) or decode_topk_reference)
    try:
        assert "lazy-for-test" in registry.names() and calls == []
        registry.get("lazy-for-test")
        registry.get("lazy-for-test")
        assert calls == [1]
    finally:
        registry.unregister("lazy-for-test")


def test_an_implementation_that_cannot_load_exits_2(capsys):
    """A registered implementation whose loader fails (no GPU, a stale library) is
    reported in one line with exit code 2, not a traceback."""
    from decode_topk.conformance import __main__ as cli

    def broken_loader():
        raise RuntimeError("needs a CUDA GPU")

    registry.register("unloadable", broken_loader)
    try:
        assert cli.main(["--impl", "unloadable"]) == 2
        assert "cannot run here: RuntimeError: needs a CUDA GPU" in capsys.readouterr().err
    finally:
        registry.unregister("unloadable")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "decode_topk.conformance", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_help_is_complete():
    """--help carries the whole description (not a line cut mid-sentence), names every
    builtin and the pkg.module:attr form, and lists the subcommands."""
    from decode_topk.conformance import __main__ as cli

    result = _cli("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for sentence in cli.__doc__.split("\n\n")[1:]:
        assert " ".join(sentence.split()) in text
    assert f"implementation: {', '.join(registry.names())}, or pkg.module:attr" in text
    assert all(command in text for command in ("gen ", "out ", "ver "))


def test_a_filter_matching_nothing_exits_2_saying_why():
    result = _cli("--case", "needels")
    assert result.returncode == 2 and result.stdout == ""
    assert "no case of level 'ci' matches --case 'needels'; closest: needles" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_suite_options_before_a_subcommand_are_refused(tmp_path, capsys):
    """`--level full gen ...` once wrote the ci level: the subcommand's own --level
    default overwrote the one given before it."""
    from decode_topk.conformance.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["--level", "full", "gen", "--out", str(tmp_path / "x.npz")])
    assert stop.value.code == 2
    assert "--level before `gen` belong to the suite run" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()
