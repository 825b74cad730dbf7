"""python -m decode_topk.conformance.mutation [--level ci|full] [--build all|CxTxV] [--mutant NAME ...]

The mutation campaign: every planted bug of reference/model.py's MUTANTS must be caught by
the conformance suite (the contract checker, or the trace checks of conformance/trace.py
against the build), on some case of the catalogue in some build. Prints each mutant,
killed or SURVIVED with where and why, then the score; exits 1 unless every mutant is
killed (a survivor means the catalogue lacks a case that shows that bug).

A mutant's run of a (case, k, mode, build) whose output and trace equal the unmutated
model's cannot fail (the model passes the suite), so only differing runs are checked; a
mutant that raises (a write outside a buffer) is killed by that run.
"""

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from decode_topk.reference.model import MUTANTS, all_builds, build_name, parse_build, simulate

from .cases import LEVELS, cases
from .checker import check
from .trace import trace_invariants


@dataclass
class Outcome:
    name: str
    killed: bool
    where: str = ""
    why: str = ""


class Campaign:
    """The runs of a level's cases over builds, with the unmutated model's results cached."""

    def __init__(self, level="ci", builds=None, case_filter=None):
        self.builds = list(builds) if builds else all_builds()
        selected = [c for c in cases(level) if case_filter is None or case_filter in c.name]
        if not selected:
            raise ValueError(f"no case of level {level!r} matches {case_filter!r}")
        # Cheap cases first: most mutants die on the first few runs.
        self.runs = []
        for case in selected:
            logits, lengths = case.generate()
            for build in self.builds:
                if logits.shape[1] > build[0] * build[1] * build[2] * 8:
                    continue
                for k in case.ks:
                    for mode in case.modes:
                        self.runs.append((case.name, logits, lengths, k, mode, build))
        self.runs.sort(key=lambda run: run[1].size)
        self._base = {}

    def base(self, i):
        if i not in self._base:
            _, logits, lengths, k, mode, build = self.runs[i]
            out, trace = simulate(logits, lengths, k, mode, cluster=build[0], vectors=build[2])
            problems = check(logits, lengths, k, mode, out) + trace_invariants(logits, lengths, k, mode, trace, build)
            if problems:
                raise AssertionError(f"the unmutated model fails run {self.describe(i)}: {problems[:3]}")
            self._base[i] = (out, trace)
        return self._base[i]

    def describe(self, i):
        name, _, _, k, mode, build = self.runs[i]
        return f"{name} k={k} {'block' if mode else 'token'} {build_name(build)}"

    def run_mutant(self, name):
        mutant = MUTANTS[name][0]
        for i, (_, logits, lengths, k, mode, build) in enumerate(self.runs):
            base_out, base_trace = self.base(i)
            try:
                out, trace = simulate(logits, lengths, k, mode, cluster=build[0], vectors=build[2], mutant=mutant)
            except Exception as exc:  # noqa: BLE001 - a crash is a detection
                return Outcome(name, True, self.describe(i), f"{type(exc).__name__}: {exc}")
            problems = []
            if not np.array_equal(out, base_out):
                problems += [f"[{v.reason}] row {v.row}: {v.detail}" for v in check(logits, lengths, k, mode, out)]
            if not np.array_equal(trace, base_trace):
                problems += trace_invariants(logits, lengths, k, mode, trace, build)
            if problems:
                return Outcome(name, True, self.describe(i), problems[0])
        return Outcome(name, False)


def run_campaign(names=None, level="ci", builds=None, case_filter=None, stream=sys.stdout):
    """Run the mutants `names` (default: all); return the list of Outcome."""
    names = list(names) if names else list(MUTANTS)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        raise ValueError(f"unknown mutants {unknown}; known: {', '.join(MUTANTS)}")
    campaign = Campaign(level, builds, case_filter)
    outcomes = []
    for name in names:
        start = time.perf_counter()
        outcome = campaign.run_mutant(name)
        outcomes.append(outcome)
        if stream is not None:
            status = "killed  " if outcome.killed else "SURVIVED"
            line = f"{status} {name:<28} {time.perf_counter() - start:6.2f} s  {MUTANTS[name][1]}"
            if outcome.killed:
                line += f"\n         by {outcome.where}: {outcome.why[:160]}"
            print(line, file=stream, flush=True)
    return outcomes


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m decode_topk.conformance.mutation", description=__doc__.splitlines()[2])
    parser.add_argument("--level", default="ci", choices=LEVELS)
    parser.add_argument("--build", default="all", help="all, or one build such as 8x512x8")
    parser.add_argument("--mutant", action="append", help="run only this mutant (repeatable)")
    parser.add_argument("--case", default=None, help="only cases whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, (number, doc) in MUTANTS.items():
            print(f"{number:3d} {name:<28} {doc}")
        return 0
    try:
        builds = None if args.build == "all" else [parse_build(args.build)]
        start = time.perf_counter()
        outcomes = run_campaign(args.mutant, args.level, builds, args.case)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    killed = sum(o.killed for o in outcomes)
    survivors = [o.name for o in outcomes if not o.killed]
    print(f"mutation score: {killed}/{len(outcomes)} killed ({100.0 * killed / len(outcomes):.0f}%), "
          f"{time.perf_counter() - start:.1f} s" + (f"; survivors: {', '.join(survivors)}" if survivors else ""))
    return 0 if not survivors else 1


if __name__ == "__main__":
    sys.exit(main())
