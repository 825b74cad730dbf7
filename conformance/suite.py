"""Run an implementation over the case catalogue and check every output.

Shared by the CLI (`python -m decode_topk.conformance`) and the tests, so that both run exactly the
same cases the same way.

Two modes of judgement (SPEC.md 1.4): *contract* (checker.check: any tie choice, any
order) and *strict* (checker.check(..., strict=True): also the canonical answer slot for
slot, reason 'not-canonical'). An implementation is judged strictly when its record
claims 'canonical' (registry.py: the model, 'aot', 'jit', 'reference-canonical'), else by
the contract; `run_suite(strict=...)` (the CLI's --strict / --no-strict) overrides that.
The summary says which mode the run was judged in.
"""

import difflib
import sys
import time
from dataclasses import dataclass, field

from decode_topk.kernel.policy import Build

from . import coverage as slot_coverage
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
    slots: dict = field(default_factory=dict)  # slot_coverage.run_combinations of its trace


@dataclass
class SuiteResult:
    impl: str
    level: str
    runs: list = field(default_factory=list)
    strict: bool = False  # judged in strict mode (the canonical answer), else by the contract
    claims: str = ""  # the record's claim ("": not from a record, e.g. `ver`)
    seconds: float = 0.0
    skipped: int = 0  # (case, k, mode, build) runs whose width exceeds the build's capacity in that mode
    slot_problems: list = field(default_factory=list)  # slot_coverage.suite_problems, [] if unchecked

    @property
    def violation_count(self):
        return sum(len(run.violations) for run in self.runs)

    @property
    def ok(self):
        return bool(self.runs) and self.violation_count == 0 and not self.slot_problems

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


def select_cases(level="ci", case_filter=None):
    """The cases of `level` whose name contains `case_filter` (None: all). Raises
    ValueError naming the level and the filter when none matches, with the closest names,
    because a typo should not look like an empty pass."""
    available = catalogue(level)
    selected = [c for c in available if case_filter is None or case_filter in c.name]
    if not selected:
        close = difflib.get_close_matches(case_filter, [c.name for c in available], n=3, cutoff=0.4)
        hint = f"; closest: {', '.join(close)}" if close else f"; cases: {', '.join(c.name for c in available)}"
        raise ValueError(f"no case of level {level!r} matches --case {case_filter!r}{hint}")
    return selected


def case_runs(case):
    """The (k, block_mode) runs of a case, in the suite's order."""
    return [(k, block_mode) for k in case.ks for block_mode in case.modes]


def compare_traces(record, case, k, block_mode, logits_bits, lengths, trace, build=None):
    """Violations of an implementation's trace (int32 [rows, 8], SPEC.md 2.11).

    Every trace must pass `trace.trace_invariants` (kth and above against the row, -1 fields
    consistent with the path, q, gt, the fallback reasons; with a known build every field
    against `trace.expected_trace`): reason 'trace-invariant'. With the record's
    trace_oracle 'model' (every implementation but the model itself) and a known build,
    the trace is also compared field by field with the model's on the same input and
    build: reason 'trace-mismatch'. Rows of a case with an intent (`case.intent`) must take
    the path and fallback it intends: reason 'trace-intent'.
    """
    repro = {"k": k, "block_mode": block_mode}
    if build is not None:
        repro["build"] = build.name
    violations = [Violation(row, "trace-invariant", message, repro)
                  for row, message in trace_problems(logits_bits, lengths, k, block_mode, trace, build)]
    if build is not None:
        violations += [Violation(-1, "trace-intent", f"case {case.name}: {message}", repro)
                       for message in intent_problems(case.intent, build, k, block_mode, trace)]
    if record.trace_oracle == "model" and build is not None:
        from decode_topk.reference.model import simulate

        _, expected = simulate(logits_bits, lengths, k, block_mode, build=build)
        violations += [Violation(row, "trace-mismatch", f"{message} (model vs {record.name})", repro)
                       for row, message in trace_mismatches(expected, trace)]
    return violations


def _error(reason, exc, k, block_mode):
    detail = f"{type(exc).__name__}: {exc}"
    return [Violation(-1, reason, detail, {"k": k, "block_mode": block_mode})]


def judge(case_name, seed, logits_bits, lengths, k, block_mode, out, seconds=0.0, build="", strict=False):
    """The RunResult of one output against the contract (checker.check; an output that is
    not int32 [rows, k] is one 'bad-output' violation), and with `strict` against the
    canonical answer too (reason 'not-canonical'): the suite's and `ver`'s one judgement,
    so both give the same reasons and repros."""
    rows, width = logits_bits.shape
    try:
        violations = check(logits_bits, lengths, k, block_mode, out, strict=bool(strict))
    except ValueError as exc:
        violations = _error("bad-output", exc, k, block_mode)
    return RunResult(case_name, seed, rows, width, k, block_mode, seconds, violations, build)


def _ran_build(record, impl, forced):
    """The Build the implementation ran: the one forced on it, else the one it reports
    (its record's reports_build), else None (unknown)."""
    if forced is not None:
        return forced
    if record.reports_build == "last_build":
        return Build.parse(impl.last_build)
    return None


def run_case(record, impl, case, logits_bits, lengths, k, block_mode, build=None, strict=None):
    """Run and check one (case, k, mode[, build]) of the implementation `impl` registered
    with `record` (registry.Record); implementation errors become violations.

    build: a Build forced on the implementation (its record must take a build), or None
    for its own choice (then its record says how the build that ran is learned, for the
    trace checks). strict: judge in strict mode (the canonical answer); None: as the
    record claims (`record.strict`)."""
    strict = record.strict if strict is None else bool(strict)
    rows, width = logits_bits.shape
    build = Build.parse(build) if build is not None else None
    start = time.perf_counter()
    try:
        if build is None:
            result = impl(logits_bits.copy(), lengths.copy(), k, block_mode)
        else:
            result = impl(logits_bits.copy(), lengths.copy(), k, block_mode, build=build)
        ran = _ran_build(record, impl, build)
    except Exception as exc:  # a crashing implementation fails the case, not the suite
        return RunResult(case.name, case.seed, rows, width, k, block_mode, time.perf_counter() - start,
                         _error("impl-error", exc, k, block_mode), build.name if build is not None else "")
    seconds = time.perf_counter() - start
    label = ran.name if ran is not None else ""
    if not record.returns_trace:
        return judge(case.name, case.seed, logits_bits, lengths, k, block_mode, result, seconds, label, strict)
    if not (isinstance(result, tuple) and len(result) == 2):
        problem = ValueError(f"its record says it returns a trace, so (out, trace) is due, got "
                             f"{type(result).__name__}" + (f" of {len(result)}" if isinstance(result, tuple) else ""))
        return RunResult(case.name, case.seed, rows, width, k, block_mode, seconds,
                         _error("bad-output", problem, k, block_mode), label)
    out, trace = result
    run = judge(case.name, case.seed, logits_bits, lengths, k, block_mode, out, seconds, label, strict)
    run.violations += compare_traces(record, case, k, block_mode, logits_bits, lengths, trace, build=ran)
    try:
        run.coverage = coverage(trace)
        run.slots = slot_coverage.run_combinations(ran, lengths, block_mode, trace)
    except (IndexError, ValueError):  # a malformed trace is already a violation
        run.coverage = {}
    return run


def _mode_name(block_mode):
    return "block" if block_mode else "token"


_HEADER = f"{'case':<26} {'rows':>5} {'width':>8} {'k':>5} {'mode':<6} {'violations':>10} {'seconds':>8}"


def header(builds):
    """The table's header; with a build column when the runs can name their build."""
    return _HEADER + ("  build" if builds else "")


def row_line(run):
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


def judged_line(result):
    """The summary's line saying which mode the runs were judged in, and why."""
    if result.strict:
        mode = "strict (the canonical answer of SPEC.md 1.4 slot for slot: ties by lowest index, ascending order)"
    else:
        mode = "contract (SPEC.md 1.4: any tie choice, any order)"
    if result.claims:
        overridden = result.strict != (result.claims == "canonical")
        why = f"{result.impl} claims {result.claims!r}" + (
            f"; overridden by --{'strict' if result.strict else 'no-strict'}" if overridden else "")
        mode += f"; {why}"
    return f"judged: {mode}"


def print_summary(result, stream, shown=SHOWN_VIOLATIONS):
    failed = [run for run in result.runs if run.violations]
    _print_coverage(result, stream)
    slot_coverage.print_suite_table(result.runs, stream)
    if result.skipped:
        print(f"skipped: {result.skipped} (case, k, mode, build) runs wider than the build's capacity in that mode",
              file=stream)
    print(judged_line(result), file=stream)
    print(f"total: {len(result.runs)} runs, {len(failed)} failing, {result.violation_count} violations, "
          f"{result.seconds:.1f} s ({result.impl}, level {result.level})", file=stream)
    for line in result.slot_problems:
        print(line, file=stream)
    listed = [(run, v) for run in failed for v in run.violations][:shown]
    if listed:
        print(f"first {len(listed)} violations:", file=stream)
        for run, violation in listed:
            print("  " + format_violation(run, violation), file=stream)


STDOUT = "stdout"  # run_suite's default stream: sys.stdout as it is when called (a test's capture too)


def run_suite(impl_name="reference", level="ci", case_filter=None, stream=STDOUT,
              shown=SHOWN_VIOLATIONS, builds=None, strict=None):
    """Run implementation `impl_name` (a registered name or pkg.module:attr) over every
    case x k x mode of `level` whose name contains `case_filter`; print a table and a
    summary to `stream` (None: silent).

    builds: None (the implementation chooses), or a list of builds (anything Build.parse
    takes) forced on it in turn (its record must take a build); a case wider than a
    build's capacity in a mode (Build.capacity_in: 1x512x4 streams token rows only) is
    skipped on that build in that mode.
    strict: True (judge every output against the canonical answer too), False (the
    contract only), None (as its record claims: strict for 'canonical')."""
    stream = sys.stdout if stream is STDOUT else stream if stream is not None else Silent()
    record = registry.record(impl_name)
    strict = record.strict if strict is None else bool(strict)
    if builds is not None:
        record.require_build()
        builds = [Build.parse(b) for b in builds]
    selected = select_cases(level, case_filter)
    impl = registry.get(impl_name)
    result = SuiteResult(impl_name, level, strict=strict, claims=record.claims)
    start = time.perf_counter()
    print(header(builds is not None or record.reports_build is not None), file=stream)
    for case in selected:
        logits_bits, lengths = case.generate()
        for build in builds if builds is not None else [None]:
            for k, block_mode in case_runs(case):
                if build is not None and logits_bits.shape[1] > build.capacity_in(block_mode):
                    result.skipped += 1
                    continue
                run = run_case(record, impl, case, logits_bits, lengths, k, block_mode, build, strict)
                result.runs.append(run)
                print(row_line(run), file=stream, flush=True)
    result.seconds = time.perf_counter() - start
    if builds is not None and case_filter is None and record.returns_trace:  # a whole level, builds forced
        result.slot_problems = slot_coverage.suite_problems(result.runs, builds)
    print_summary(result, stream, shown)
    return result


class Silent:
    """A stream that drops everything (stream=None)."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass
