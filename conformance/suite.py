"""Run an implementation over the case catalogue and check every output.

Shared by the CLI (`python -m conformance`) and the tests, so that both run exactly the
same cases the same way.
"""

import sys
import time
from dataclasses import dataclass, field

from . import registry
from .cases import cases as catalogue
from .checker import Violation, check

SHOWN_VIOLATIONS = 5


@dataclass
class RunResult:
    """One (case, k, mode) run."""

    case: str
    seed: int
    rows: int
    width: int
    k: int
    block_mode: bool
    seconds: float
    violations: list = field(default_factory=list)


@dataclass
class SuiteResult:
    impl: str
    level: str
    runs: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def violation_count(self):
        return sum(len(run.violations) for run in self.runs)

    @property
    def ok(self):
        return bool(self.runs) and self.violation_count == 0


def compare_traces(impl_name, case, k, block_mode, logits_bits, lengths, out, trace):
    """Hook: violations of an implementation's trace (int32 [rows, 8], SPEC.md 2.11).

    Called for every run whose implementation returned (out, trace). The contract layer
    knows nothing of traces yet, so it finds none; the model engineer fills this in
    (e.g. comparing a kernel's trace with the model's field by field, and `kth`/`above`
    with the row's exact k-th key and count above it). Return Violation objects with
    reason codes starting with 'trace-'.
    """
    return []


def _call(impl, logits_bits, lengths, k, block_mode):
    """The implementation's (out, trace), trace None when it returns only out."""
    result = impl(logits_bits, lengths, k, block_mode)
    if isinstance(result, tuple):
        if len(result) != 2:
            raise ValueError(f"implementation returned a tuple of {len(result)}, expected (out, trace)")
        return result
    return result, None


def _error(reason, exc, k, block_mode):
    detail = f"{type(exc).__name__}: {exc}"
    return [Violation(-1, reason, detail, {"k": k, "block_mode": block_mode})]


def run_case(impl_name, impl, case, logits_bits, lengths, k, block_mode):
    """Run and check one (case, k, mode); implementation errors become violations."""
    rows, width = logits_bits.shape
    start = time.perf_counter()
    try:
        out, trace = _call(impl, logits_bits.copy(), lengths.copy(), k, block_mode)
    except Exception as exc:  # a crashing implementation fails the case, not the suite
        return RunResult(case.name, case.seed, rows, width, k, block_mode,
                         time.perf_counter() - start, _error("impl-error", exc, k, block_mode))
    seconds = time.perf_counter() - start
    try:
        violations = check(logits_bits, lengths, k, block_mode, out)
    except ValueError as exc:
        violations = _error("bad-output", exc, k, block_mode)
    if trace is not None:
        violations += compare_traces(impl_name, case, k, block_mode, logits_bits, lengths, out, trace)
    return RunResult(case.name, case.seed, rows, width, k, block_mode, seconds, violations)


def _mode_name(block_mode):
    return "block" if block_mode else "token"


_HEADER = f"{'case':<26} {'rows':>5} {'width':>8} {'k':>5} {'mode':<6} {'violations':>10} {'seconds':>8}"


def _row_line(run):
    return (f"{run.case:<26} {run.rows:>5} {run.width:>8} {run.k:>5} {_mode_name(run.block_mode):<6} "
            f"{len(run.violations):>10} {run.seconds:>8.3f}")


def format_violation(run, violation):
    """A violation with what reproduces it: case name, seed, row and the checker's repro."""
    repro = ", ".join(f"{key}={value}" for key, value in violation.repro.items())
    return (f"case={run.case} seed={run.seed} k={run.k} mode={_mode_name(run.block_mode)} "
            f"row={violation.row} [{violation.reason}] {violation.detail}\n    repro: {repro}")


def _print_summary(result, stream, shown):
    failed = [run for run in result.runs if run.violations]
    print(f"total: {len(result.runs)} runs, {len(failed)} failing, {result.violation_count} violations, "
          f"{result.seconds:.1f} s ({result.impl}, level {result.level})", file=stream)
    listed = [(run, v) for run in failed for v in run.violations][:shown]
    if listed:
        print(f"first {len(listed)} violations:", file=stream)
        for run, violation in listed:
            print("  " + format_violation(run, violation), file=stream)


def run_suite(impl_name="reference", level="ci", case_filter=None, stream=sys.stdout,
              shown=SHOWN_VIOLATIONS):
    """Run implementation `impl_name` over every case x k x mode of `level` whose name
    contains `case_filter`; print a table and a summary to `stream` (None: silent)."""
    stream = stream if stream is not None else _Silent()
    impl = registry.get(impl_name)
    selected = [c for c in catalogue(level) if case_filter is None or case_filter in c.name]
    if not selected:
        raise ValueError(f"no case of level {level!r} matches {case_filter!r}")
    result = SuiteResult(impl_name, level)
    start = time.perf_counter()
    print(_HEADER, file=stream)
    for case in selected:
        logits_bits, lengths = case.generate()
        for k in case.ks:
            for block_mode in case.modes:
                run = run_case(impl_name, impl, case, logits_bits, lengths, k, block_mode)
                result.runs.append(run)
                print(_row_line(run), file=stream, flush=True)
    result.seconds = time.perf_counter() - start
    _print_summary(result, stream, shown)
    return result


class _Silent:
    def write(self, text):
        return len(text)

    def flush(self):
        pass
