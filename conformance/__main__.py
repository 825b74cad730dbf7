"""python -m decode_topk.conformance [--impl NAME] [--level ci|full] [--case SUBSTR] [--build all|CxTxV]

Runs every case x k x mode of the level through the implementation, checks each output
against the contract (and each trace, for implementations that return one), prints a
table, the trace coverage (rows a path and a fallback reason, per build) and the first
violations with their repro, and exits 1 on any violation, 0 otherwise.

--build: `all` (every build of SPEC.md 2.1; the default for the model) or one build such
as 8x512x8, forced on implementations that take a build; without it, the implementation
chooses.
"""

import argparse
import sys

from . import registry
from .cases import LEVELS
from .suite import run_suite


def _builds(option, impl):
    """The builds of --build: None (the implementation chooses) or a list."""
    from decode_topk.reference.model import all_builds, parse_build

    if option is None:
        option = "all" if impl == "model" else None
    if option is None:
        return None
    return all_builds() if option == "all" else [parse_build(option)]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m decode_topk.conformance", description=__doc__.splitlines()[2])
    parser.add_argument("--impl", default="reference", help=f"implementation ({', '.join(registry.names())})")
    parser.add_argument("--level", default="ci", choices=LEVELS, help="ci (fast) or full (ci plus big cases)")
    parser.add_argument("--case", default=None, help="only cases whose name contains this")
    parser.add_argument("--build", default=None,
                        help="all, or one build such as 8x512x8 (default: all for the model, else the "
                             "implementation's own choice)")
    args = parser.parse_args(argv)
    try:
        result = run_suite(args.impl, args.level, args.case, builds=_builds(args.build, args.impl))
    except (ValueError, registry.Unavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
