"""python -m decode_topk.conformance.mutation [--target model|checker|policy|all] [--level ci|full]
    [--build all|CxTxV] [--case SUBSTR] [--mutant NAME ...] [--list]

Mutation campaigns: each plants one named bug at a time and requires the checks that guard
that code to catch it.

targets:
  model    (the default) every bug of reference/model.py's MUTANTS must be caught by the
           conformance suite (the contract checker, or the trace checks of
           conformance/trace.py against the build) on some case of the catalogue (--level)
           in some build (--build). A run of a (case, k, mode, build) whose output and trace
           equal the unmutated model's cannot fail (the model passes the suite), so only
           differing runs are checked; a mutant that raises (a write outside a buffer) is
           killed by that run.
  checker  every bug of conformance/contract.py's MUTANTS (planted in the checker and in
           its statement of the contract) must make the checker's meta-tests fail
           (tests/test_contract.py, tests/test_checker_meta.py, run in this process by
           pytest; needs the repository's tests/ and pytest).
  policy   every bug of conformance/policy_checks.py's POLICY_MUTANTS (the launch policy)
           must be reported by its edge checks.
  all      every target above, in that order (what CI runs).

Prints a line a mutant as it finishes (killed, with where and why, or SURVIVED), then
each target's score. Exit status: 0 when every mutant is killed; 1 when one survives (the
catalogue or the tests lack what shows that bug) or the unmutated code already fails its
checks; 2 on a usage error (an unknown mutant, build or level).
"""

import argparse
import difflib
import io
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from decode_topk.kernel.policy import BUILDS, Build
from decode_topk.reference.model import MUTANTS, simulate

from . import contract
from .cases import LEVELS
from .checker import check
from .suite import case_runs, select_cases
from .trace import trace_invariants

TARGETS = ("model", "checker", "policy")
TESTS = Path(__file__).resolve().parents[1] / "tests"
META_TESTS = ("test_contract.py", "test_checker_meta.py")  # cheap first: most mutants die early
STDOUT = "stdout"  # a run_* function's default stream: sys.stdout as it is when called


@dataclass
class Outcome:
    name: str
    killed: bool
    where: str = ""
    why: str = ""


def _check_names(names, known, target, listed_by=None):
    """ValueError naming each unknown mutant (with a close match, or the other target that
    has it) and a few valid names."""
    unknown = [n for n in names if n not in known]
    if not unknown:
        return
    hints = []
    for n in unknown:
        close = difflib.get_close_matches(n, known, n=1)
        other = [t for t in TARGETS if t != target and n in _registry(t)]
        hints.append(f"{n!r}" + (f" (a {other[0]} mutant: --target {other[0]})" if other else
                                 f" (did you mean {close[0]!r}?)" if close else ""))
    raise ValueError(f"unknown {target} mutant{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; valid names "
                     f"include {', '.join(list(known)[:4])}, ... ({len(known)} in all: "
                     f"--target {listed_by or target} --list)")


def _registry(target):
    """The names of a target's mutants; empty for a target that cannot be loaded here."""
    try:
        return mutants_of(target)
    except ImportError:
        return {}


def _count(names):
    return f"{len(names)} mutant{'s' if len(names) != 1 else ''}"


def _report(stream, index, total, outcome, seconds, doc):
    if stream is None:
        return
    status = "killed  " if outcome.killed else "SURVIVED"
    line = f"[{index:{len(str(total))}d}/{total}] {status} {outcome.name:<34} {seconds:6.2f} s  {doc}"
    if outcome.killed:
        line += f"\n         by {outcome.where}: {' '.join(outcome.why.split())[:160]}"
    print(line, file=stream, flush=True)


# ---------------------------------------------------------------------------------------
# model: the conformance suite against the model's MUTANTS
# ---------------------------------------------------------------------------------------
class Campaign:
    """The runs of a level's cases over builds, with the unmutated model's results cached."""

    def __init__(self, level="ci", builds=None, case_filter=None):
        self.builds = [Build.parse(b) for b in builds] if builds else list(BUILDS)
        # Cheap cases first: most mutants die on the first few runs.
        self.runs = []
        for case in select_cases(level, case_filter):  # the suite's selection and its errors
            logits, lengths = case.generate()
            for build in self.builds:
                self.runs += [(case.name, logits, lengths, k, mode, build) for k, mode in case_runs(case)
                              if logits.shape[1] <= build.capacity_in(mode)]
        self.runs.sort(key=lambda run: run[1].size)
        self._base = {}

    def base(self, i):
        if i not in self._base:
            _, logits, lengths, k, mode, build = self.runs[i]
            out, trace = simulate(logits, lengths, k, mode, build=build)
            problems = check(logits, lengths, k, mode, out, strict=True) + trace_invariants(logits, lengths, k, mode, trace, build)
            if problems:
                raise AssertionError(f"the unmutated model fails run {self.describe(i)}: {problems[:3]}")
            self._base[i] = (out, trace)
        return self._base[i]

    def describe(self, i):
        name, _, _, k, mode, build = self.runs[i]
        return f"{name} k={k} {'block' if mode else 'token'} {build.name}"

    def run_mutant(self, name):
        mutant = MUTANTS[name][0]
        for i, (_, logits, lengths, k, mode, build) in enumerate(self.runs):
            base_out, base_trace = self.base(i)
            try:
                out, trace = simulate(logits, lengths, k, mode, build=build, mutant=mutant)
            except Exception as exc:  # noqa: BLE001 - a crash is a detection
                return Outcome(name, True, self.describe(i), f"{type(exc).__name__}: {exc}")
            problems = []
            if not np.array_equal(out, base_out):
                problems += [f"[{v.reason}] row {v.row}: {v.detail}" for v in check(logits, lengths, k, mode, out, strict=True)]
            if not np.array_equal(trace, base_trace):
                problems += trace_invariants(logits, lengths, k, mode, trace, build)
            if problems:
                return Outcome(name, True, self.describe(i), problems[0])
        return Outcome(name, False)


def run_campaign(names=None, level="ci", builds=None, case_filter=None, stream=STDOUT):
    """Run the model mutants `names` (default: all); return the list of Outcome."""
    stream = sys.stdout if stream is STDOUT else stream
    names = list(names) if names else list(MUTANTS)
    _check_names(names, MUTANTS, "model")
    if stream is not None:
        print(f"model: {_count(names)} over the {level} cases on "
              f"{'every build' if not builds else ', '.join(Build.parse(b).name for b in builds)}; "
              f"generating the cases and running the unmutated model (its first call compiles it)",
              file=stream, flush=True)
    campaign = Campaign(level, builds, case_filter)
    outcomes = []
    for i, name in enumerate(names, 1):
        start = time.perf_counter()
        outcomes.append(campaign.run_mutant(name))
        _report(stream, i, len(names), outcomes[-1], time.perf_counter() - start, MUTANTS[name][1])
    return outcomes


# ---------------------------------------------------------------------------------------
# checker: the meta-tests against the checker's MUTANTS (conformance/contract.py)
# ---------------------------------------------------------------------------------------
class _FirstFailure:
    """A pytest plugin keeping the first failing test and its message."""

    def __init__(self):
        self.where = self.why = None

    def pytest_runtest_logreport(self, report):
        if report.failed and self.where is None:
            self.where = report.nodeid
            crash = getattr(report.longrepr, "reprcrash", None)
            self.why = crash.message if crash is not None else str(report.longrepr).splitlines()[-1]


def _meta_tests(tests):
    """(pytest's exit code, _FirstFailure) of one in-process run of `tests` (pytest
    arguments: files or node ids under tests/) with whatever checker fault is planted now,
    stopping at the first failure; pytest's own output is swallowed."""
    try:
        import pytest
    except ImportError:
        raise ValueError("the checker campaign runs the meta-tests with pytest, which is not installed "
                         "(pip install 'decode-topk[test]')") from None

    files = [TESTS / t.split("::")[0] for t in tests]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"the checker campaign runs the meta-tests {missing}, which only a checkout "
                         f"of the repository has")
    recorder = _FirstFailure()
    args = ["-q", "-x", "-p", "no:cacheprovider", "--rootdir", str(TESTS.parent)]
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        code = pytest.main(args + [str(TESTS / t) for t in tests], plugins=[recorder])
    return int(code), recorder


def run_checker_campaign(names=None, stream=STDOUT, tests=None):
    """Plant each checker mutant `names` (default: all of contract.MUTANTS) and run the
    meta-tests under it (`tests`: files or node ids under tests/, default META_TESTS);
    return the list of Outcome. RuntimeError if the unmutated checker fails them (then
    every mutant would look killed)."""
    stream = sys.stdout if stream is STDOUT else stream
    names = list(names) if names else list(contract.MUTANTS)
    tests = list(tests) if tests else list(META_TESTS)
    _check_names(names, contract.MUTANTS, "checker")
    if stream is not None:
        print(f"checker: {_count(names)} against {', '.join('tests/' + t for t in tests)}; "
              f"first the unmutated checker", file=stream, flush=True)
    code, first = _meta_tests(tests)
    if code != 0:
        raise RuntimeError(f"the unmutated checker fails its meta-tests (pytest exit {code}): "
                           f"{first.where}: {first.why}")
    outcomes = []
    for i, name in enumerate(names, 1):
        start = time.perf_counter()
        with contract.planted(name):
            code, first = _meta_tests(tests)
        if code not in (0, 1):  # 1: tests failed; anything else is a broken run, not a kill
            raise RuntimeError(f"the meta-tests did not run under {name} (pytest exit {code})")
        outcomes.append(Outcome(name, code == 1, first.where or "", first.why or ""))
        _report(stream, i, len(names), outcomes[-1], time.perf_counter() - start, contract.MUTANTS[name][1])
    return outcomes


# ---------------------------------------------------------------------------------------
# policy: conformance/policy_checks.py's edge checks against its POLICY_MUTANTS
# ---------------------------------------------------------------------------------------
def _policy_checks():
    from . import policy_checks  # imported when asked for: its own module owns the mutants

    return policy_checks


def run_policy_campaign(names=None, stream=STDOUT):
    """Plant each policy mutant and run the policy's edge checks under it."""
    stream = sys.stdout if stream is STDOUT else stream
    checks = _policy_checks()
    names = list(names) if names else list(checks.POLICY_MUTANTS)
    _check_names(names, checks.POLICY_MUTANTS, "policy")
    if stream is not None:
        print(f"policy: {_count(names)} against policy_checks.edge_problems; first the unmutated policy",
              file=stream, flush=True)
    problems = checks.edge_problems()
    if problems:
        raise RuntimeError(f"the unmutated policy fails its edge checks: {problems[0]}")
    outcomes = []
    for i, name in enumerate(names, 1):
        start = time.perf_counter()
        with checks.planted(name):
            problems = checks.edge_problems()
        outcomes.append(Outcome(name, bool(problems), "policy_checks.edge_problems", problems[0] if problems else ""))
        _report(stream, i, len(names), outcomes[-1], time.perf_counter() - start, checks.POLICY_MUTANTS[name][0])
    return outcomes


def mutants_of(target):
    """{name: description} of a target's mutants."""
    if target == "model":
        return {name: doc for name, (_, doc) in MUTANTS.items()}
    if target == "checker":
        return {name: doc for name, (_, doc) in contract.MUTANTS.items()}
    if target == "policy":
        return {name: doc for name, (doc, _) in _policy_checks().POLICY_MUTANTS.items()}
    raise ValueError(f"unknown target {target!r}; one of {', '.join(TARGETS)}, all")


def _split_names(names, targets):
    """{target: its names among `names`} (None: all of its mutants); a name no target of
    `targets` knows is a ValueError."""
    if not names:
        return {t: None for t in targets}
    chosen = {t: [n for n in names if n in mutants_of(t)] for t in targets}
    unknown = [n for n in names if not any(n in chosen[t] for t in targets)]
    if unknown:
        if len(targets) == 1:
            _check_names(unknown, mutants_of(targets[0]), targets[0])
        known = {n: None for t in targets for n in mutants_of(t)}
        _check_names(unknown, known, "model, checker or policy", listed_by="all")
    return {t: chosen[t] for t in targets if chosen[t]}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m decode_topk.conformance.mutation",
                                     description=__doc__.split("\n", 3)[3],  # less the usage: argparse prints its own
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="all", choices=TARGETS + ("all",),
                        help="which campaign: model, checker, policy, or all of them (default)")
    parser.add_argument("--level", default=None, choices=LEVELS,
                        help="model target: the catalogue level whose cases run (default ci)")
    parser.add_argument("--build", default=None,
                        help="model target: all (default), or one build such as 8x512x8")
    parser.add_argument("--case", default=None, help="model target: only cases whose name contains this")
    parser.add_argument("--mutant", action="append",
                        help="run only this mutant (repeatable; with --target all, of whichever target has it)")
    parser.add_argument("--list", action="store_true", help="list the target's mutants and exit")
    args = parser.parse_args(argv)
    targets = list(TARGETS) if args.target == "all" else [args.target]
    try:
        if args.list:
            for target in targets:
                prefix = f"{target:<8}" if len(targets) > 1 else ""
                for i, (name, doc) in enumerate(mutants_of(target).items(), 1):
                    print(f"{prefix}{i:3d} {name:<34} {doc}")
            return 0
        model_options = (args.level, args.build, args.case)
        if "model" not in targets and any(o is not None for o in model_options):
            raise ValueError("--level, --build and --case choose the model campaign's runs; "
                             f"--target {args.target} has none")
        builds = None if args.build in (None, "all") else [Build.parse(args.build)]
        plan = _split_names(args.mutant, targets)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failed = False
    for target, names in plan.items():
        start = time.perf_counter()
        try:
            if target == "model":
                outcomes = run_campaign(names, args.level or "ci", builds, args.case)
            elif target == "checker":
                outcomes = run_checker_campaign(names)
            else:
                outcomes = run_policy_campaign(names)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except (AssertionError, RuntimeError) as exc:  # the unmutated code fails its own checks
            print(f"error: {target}: {exc}", file=sys.stderr)
            failed = True
            continue
        killed = sum(o.killed for o in outcomes)
        survivors = [o.name for o in outcomes if not o.killed]
        failed |= bool(survivors)
        print(f"mutation score ({target}): {killed}/{len(outcomes)} killed ({100.0 * killed / len(outcomes):.0f}%), "
              f"{time.perf_counter() - start:.1f} s" + (f"; survivors: {', '.join(survivors)}" if survivors else ""),
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
