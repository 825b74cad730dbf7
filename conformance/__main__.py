"""python -m decode_topk.conformance [--impl NAME|pkg.module:attr] [--level ci|full] [--case SUBSTR] [--build all|CxTxV] [--strict|--no-strict]
python -m decode_topk.conformance {gen,out,ver} ...

Runs every case x k x mode of the level through the implementation, checks each output
against the contract (and each trace, for implementations that return one), prints a
table, the trace coverage (rows a path and a fallback reason, per build) and the first
violations with their repro, and exits 1 on any violation, 2 on a usage error (an unknown
or unloadable implementation, a bad build, a --case matching no case), 0 otherwise.

--impl: a registered implementation, or pkg.module:attr for any other callable
impl(logits_bits, lengths, k, block_mode) (e.g. an engine's vendored copy of the kernel
behind a NumPy adapter); its optional attributes returns_trace, takes_build,
reports_build, trace_oracle, claims and sweep_builds say what it returns and how to judge
it (conformance/registry.py).

--build: `all` (every build of SPEC.md 2.1; the default for the model) or one build such
as 8x512x8, forced on implementations that take a build; without it, the implementation
chooses.

--strict / --no-strict: judge every output against the canonical answer of SPEC.md 1.4
too (ties by lowest index, ascending order; reason not-canonical), or by the contract
alone (any tie choice, any order). Default: strict for an implementation that claims
'canonical' (the model, aot, jit, reference-canonical; `claims = "canonical"` on a
pkg.module:attr), else the contract. The summary's `judged:` line says which.

gen, out and ver judge outputs made anywhere (conformance/genver.py): `gen` writes the
level's inputs to an .npz, `out` runs an implementation over them, `ver` judges an outputs
.npz with the suite's checker, reasons and repro lines; `ver --help` gives both layouts.
"""

import argparse
import sys

from decode_topk.kernel.policy import BUILDS, Build

from . import genver, registry
from .cases import LEVELS
from .suite import run_suite


def _builds(option, record):
    """The builds of --build: None (the implementation chooses) or a list."""
    if option is None and record.sweep_builds:
        option = "all"
    if option is None:
        return None
    return list(BUILDS) if option == "all" else [Build.parse(option)]


def _parser():
    raw = argparse.RawDescriptionHelpFormatter
    prog = "python -m decode_topk.conformance"
    # The usage is the docstring's first two lines: argparse's own would show the
    # subcommand as required and the choices of --level twice.
    usage = "\n       ".join(line.replace(prog, "%(prog)s") for line in __doc__.split("\n\n", 1)[0].splitlines())
    parser = argparse.ArgumentParser(prog=prog, usage=usage, formatter_class=raw,
                                     description=__doc__.split("\n\n", 1)[1])
    impl_help = (f"implementation: {', '.join(registry.names())}, or pkg.module:attr (any callable "
                 f"impl(logits_bits, lengths, k, block_mode))")
    build_names = ", ".join(b.name for b in BUILDS)
    # The suite run's options keep their own names (run_*), so that one given before a
    # subcommand is not silently overwritten by that subcommand's option of the same name.
    parser.add_argument("--impl", dest="run_impl", default=None, help=impl_help + " (default: reference)")
    parser.add_argument("--level", dest="run_level", default=None, choices=LEVELS,
                        help="ci (fast, the default) or full (ci plus big cases)")
    parser.add_argument("--case", dest="run_case", default=None, help="only cases whose name contains this")
    parser.add_argument("--build", dest="run_build", default=None,
                        help=f"all, or one build ({build_names}); default: all for the model, else the "
                             f"implementation's own choice")
    parser.add_argument("--strict", dest="run_strict", default=None, action=argparse.BooleanOptionalAction,
                        help="judge against the canonical answer (--strict) or the contract alone "
                             "(--no-strict); default: strict when the implementation claims 'canonical'")
    commands = parser.add_subparsers(dest="command", metavar="{gen,out,ver}",
                                     help="judge outputs made anywhere (default: run the suite)")
    gen = commands.add_parser("gen", formatter_class=raw, description=genver.__doc__,
                              help="write the level's inputs to an .npz")
    gen.add_argument("--level", default="ci", choices=LEVELS, help="ci (fast) or full (ci plus big cases)")
    gen.add_argument("--case", default=None, help="only cases whose name contains this")
    gen.add_argument("--out", required=True, help="the cases .npz to write")
    out = commands.add_parser("out", formatter_class=raw, description=genver.__doc__,
                              help="run an implementation over a cases .npz, write its outputs .npz")
    out.add_argument("cases", help="a cases .npz written by gen")
    out.add_argument("--impl", required=True, help=impl_help)
    out.add_argument("--build", default=None, help=f"one build ({build_names}) forced on the implementation")
    out.add_argument("--out", required=True, help="the outputs .npz to write")
    ver = commands.add_parser("ver", formatter_class=raw, description=genver.__doc__,
                              help="judge an outputs .npz against its cases .npz")
    ver.add_argument("cases", help="a cases .npz written by gen")
    ver.add_argument("outputs", help="an outputs .npz: one int32 [rows, k] array per run id")
    ver.add_argument("--strict", action="store_true",
                     help="judge against the canonical answer (SPEC.md 1.4), not the contract alone")
    return parser


RUN_OPTIONS = {"run_impl": "--impl", "run_level": "--level", "run_case": "--case", "run_build": "--build",
               "run_strict": "--strict/--no-strict"}


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    given = [flag for dest, flag in RUN_OPTIONS.items() if getattr(args, dest) is not None]
    if args.command and given:
        parser.error(f"{', '.join(given)} before `{args.command}` belong to the suite run; "
                     f"give the {args.command} command's options after it")
    try:
        if args.command == "gen":
            count = genver.gen(args.out, args.level, args.case)
            print(f"wrote {count} runs of level {args.level} to {args.out}")
            return 0
        if args.command == "out":
            failed = genver.produce(args.cases, args.impl, args.out, args.build)
            print(f"wrote the outputs of {args.impl} to {args.out}" + (f"; {failed} runs failed" if failed else ""))
            return 1 if failed else 0
        if args.command == "ver":
            return 0 if genver.verify(args.cases, args.outputs, strict=args.strict).ok else 1
        impl = args.run_impl or "reference"
        result = run_suite(impl, args.run_level or "ci", args.run_case,
                           builds=_builds(args.run_build, registry.record(impl)), strict=args.run_strict)
    except (ValueError, registry.Unavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
