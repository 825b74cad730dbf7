"""Run an implementation over the case catalogue and check every output.

Shared by the CLI (`python -m decode_topk.conformance`) and the tests, so that both run exactly the
same cases the same way.
"""

import inspect
import sys
import time
from dataclasses import dataclass, field

from . import registry
from .algorithm_cases import intent_problems
from .cases import cases as catalogue
from .checker import Violation, check
from .trace import PATH_NAMES, REASON_NAMES, coverage, trace_mismatches, trace_problems

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
    build: str = ""  # the build that ran, CxTxV ("": the implementation's own, not known)
    coverage: dict = field(default_factory=dict)  # trace.coverage of its trace, {} without one


@dataclass
class SuiteResult:
    impl: str
    level: str
    runs: list = field(default_factory=list)
    seconds: float = 0.0
    skipped: int = 0  # (case, build) pairs whose width exceeds the build's capacity

    @property
    def violation_count(self):
        return sum(len(run.violations) for run in self.runs)

    @property
    def ok(self):
        return bool(self.runs) and self.violation_count == 0

    def coverage(self):
        """{build: {'path:short': rows, ..., 'reason:underflow': rows}} over the runs with
        a trace."""
        result = {}
        for run in self.runs:
            if run.coverage:
                total = result.setdefault(run.build, {})
                for key, rows in run.coverage.items():
                    total[key] = total.get(key, 0) + rows
        return result


def compare_traces(impl_name, case, k, block_mode, logits_bits, lengths, out, trace, build=None):
    """Violations of an implementation's trace (int32 [rows, 8], SPEC.md 2.11).

    Every trace must pass `trace.trace_invariants` (kth and above against the row, -1 fields
    consistent with the path, q, gt, the fallback reasons; with a known build every field
    against `trace.expected_trace`): reason 'trace-invariant'. The trace of any other
    implementation than the model is also compared field by field with the model's on the
    same input and build, when the build is known: reason 'trace-mismatch'. Rows of the
    algorithm cases must take the path and fallback their generator intends
    (`algorithm_cases.INTENTS`): reason 'trace-intent'.
    """
    repro = {"k": k, "block_mode": block_mode}
    if build is not None:
        repro["build"] = "x".join(str(v) for v in build)
    violations = [Violation(row, "trace-invariant", message, repro)
                  for row, message in trace_problems(logits_bits, lengths, k, block_mode, trace, build)]
    if build is not None:
        violations += [Violation(-1, "trace-intent", f"case {case.name}: {message}", repro)
                       for message in intent_problems(case.name, build, k, block_mode, trace)]
    if impl_name != "model" and build is not None:
        from decode_topk.reference.model import simulate

        _, expected = simulate(logits_bits, lengths, k, block_mode,
                               cluster=build[0], threads=build[1], vectors=build[2])
        violations += [Violation(row, "trace-mismatch", f"{message} (model vs {impl_name})", repro)
                       for row, message in trace_mismatches(expected, trace)]
    return violations


def takes_build(impl):
    """Whether the implementation takes a `build=(cluster, threads, vectors)` keyword."""
    try:
        return "build" in inspect.signature(impl).parameters
    except (TypeError, ValueError):
        return False


def _call(impl, logits_bits, lengths, k, block_mode, build=None):
    """The implementation's (out, trace), trace None when it returns only out."""
    if build is None:
        result = impl(logits_bits, lengths, k, block_mode)
    else:
        result = impl(logits_bits, lengths, k, block_mode, build=build)
    if isinstance(result, tuple):
        if len(result) != 2:
            raise ValueError(f"implementation returned a tuple of {len(result)}, expected (out, trace)")
        return result
    return result, None


def _error(reason, exc, k, block_mode):
    detail = f"{type(exc).__name__}: {exc}"
    return [Violation(-1, reason, detail, {"k": k, "block_mode": block_mode})]


def run_case(impl_name, impl, case, logits_bits, lengths, k, block_mode, build=None):
    """Run and check one (case, k, mode[, build]); implementation errors become violations.

    build: (cluster, threads, vectors) forced on the implementation, or None for its own
    choice (then the implementation's `last_build` after the call, or its
    `build_for(rows, width)`, tells the trace checks which build ran)."""
    rows, width = logits_bits.shape
    label = "x".join(str(v) for v in build) if build is not None else ""
    start = time.perf_counter()
    try:
        out, trace = _call(impl, logits_bits.copy(), lengths.copy(), k, block_mode, build)
    except Exception as exc:  # a crashing implementation fails the case, not the suite
        return RunResult(case.name, case.seed, rows, width, k, block_mode,
                         time.perf_counter() - start, _error("impl-error", exc, k, block_mode), label)
    seconds = time.perf_counter() - start
    try:
        violations = check(logits_bits, lengths, k, block_mode, out)
    except ValueError as exc:
        violations = _error("bad-output", exc, k, block_mode)
    cov = {}
    if trace is not None:
        ran = build
        if ran is None and getattr(impl, "last_build", None) is not None:
            ran = tuple(impl.last_build)
        elif ran is None and callable(getattr(impl, "build_for", None)):
            ran = tuple(impl.build_for(rows, width))
        if ran is not None and len(ran) == 2:  # (cluster, vectors)
            from decode_topk.reference.policy import threads_for

            ran = (ran[0], threads_for(ran[0]), ran[1])
        if ran is None:
            violations += compare_traces(impl_name, case, k, block_mode, logits_bits, lengths, out, trace)
        else:
            label = "x".join(str(v) for v in ran)
            violations += compare_traces(impl_name, case, k, block_mode, logits_bits, lengths, out, trace,
                                         build=ran)
        try:
            cov = coverage(trace)
        except (IndexError, ValueError):  # a malformed trace is already a violation
            cov = {}
    return RunResult(case.name, case.seed, rows, width, k, block_mode, seconds, violations, label, cov)


def _mode_name(block_mode):
    return "block" if block_mode else "token"


_HEADER = f"{'case':<26} {'rows':>5} {'width':>8} {'k':>5} {'mode':<6} {'violations':>10} {'seconds':>8}"


def _row_line(run):
    return (f"{run.case:<26} {run.rows:>5} {run.width:>8} {run.k:>5} {_mode_name(run.block_mode):<6} "
            f"{len(run.violations):>10} {run.seconds:>8.3f}" + (f"  {run.build}" if run.build else ""))


def format_violation(run, violation):
    """A violation with what reproduces it: case name, seed, row and the checker's repro."""
    repro = ", ".join(f"{key}={value}" for key, value in violation.repro.items())
    build = f" build={run.build}" if run.build else ""
    return (f"case={run.case} seed={run.seed} k={run.k} mode={_mode_name(run.block_mode)}{build} "
            f"row={violation.row} [{violation.reason}] {violation.detail}\n    repro: {repro}")


def _print_coverage(result, stream):
    """Rows a path and a fallback reason, per build, over the runs that returned a trace."""
    by_build = result.coverage()
    if not by_build:
        return
    print("trace coverage (rows):", file=stream)
    for build, cov in by_build.items():
        paths = " ".join(f"{name}={cov.get('path:' + name, 0)}" for name in PATH_NAMES.values())
        reasons = " ".join(f"{name}={cov.get('reason:' + name, 0)}" for c, name in REASON_NAMES.items() if c)
        print(f"  {build or 'own build':<10} path {paths} | fallback {reasons}", file=stream)


def _print_summary(result, stream, shown):
    failed = [run for run in result.runs if run.violations]
    _print_coverage(result, stream)
    if result.skipped:
        print(f"skipped: {result.skipped} (case, build) pairs wider than the build's capacity", file=stream)
    print(f"total: {len(result.runs)} runs, {len(failed)} failing, {result.violation_count} violations, "
          f"{result.seconds:.1f} s ({result.impl}, level {result.level})", file=stream)
    listed = [(run, v) for run in failed for v in run.violations][:shown]
    if listed:
        print(f"first {len(listed)} violations:", file=stream)
        for run, violation in listed:
            print("  " + format_violation(run, violation), file=stream)


def run_suite(impl_name="reference", level="ci", case_filter=None, stream=sys.stdout,
              shown=SHOWN_VIOLATIONS, builds=None):
    """Run implementation `impl_name` over every case x k x mode of `level` whose name
    contains `case_filter`; print a table and a summary to `stream` (None: silent).

    builds: None (the implementation chooses), or a list of (cluster, threads, vectors)
    forced on it in turn (it must take a `build` keyword); a case wider than a build's
    capacity is skipped on that build."""
    stream = stream if stream is not None else _Silent()
    impl = registry.get(impl_name)
    if builds is not None and not takes_build(impl):
        raise ValueError(f"implementation {impl_name!r} takes no build (no `build` keyword)")
    selected = [c for c in catalogue(level) if case_filter is None or case_filter in c.name]
    if not selected:
        raise ValueError(f"no case of level {level!r} matches {case_filter!r}")
    result = SuiteResult(impl_name, level)
    start = time.perf_counter()
    print(_HEADER, file=stream)
    for case in selected:
        logits_bits, lengths = case.generate()
        for build in builds if builds is not None else [None]:
            if build is not None and logits_bits.shape[1] > build[0] * build[1] * build[2] * 8:
                result.skipped += 1
                continue
            for k in case.ks:
                for block_mode in case.modes:
                    run = run_case(impl_name, impl, case, logits_bits, lengths, k, block_mode, build)
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
