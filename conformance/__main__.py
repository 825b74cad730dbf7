"""python -m conformance [--impl NAME] [--level ci|full] [--case SUBSTR]

Runs every case x k x mode of the level through the implementation, checks each output
against the contract, prints a table and the first violations with their repro, and exits
1 on any violation, 0 otherwise.
"""

import argparse
import sys

from . import registry
from .cases import LEVELS
from .suite import run_suite


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__.splitlines()[2])
    parser.add_argument("--impl", default="reference", help=f"implementation ({', '.join(registry.names())})")
    parser.add_argument("--level", default="ci", choices=LEVELS, help="ci (fast) or full (ci plus big cases)")
    parser.add_argument("--case", default=None, help="only cases whose name contains this")
    args = parser.parse_args(argv)
    try:
        result = run_suite(args.impl, args.level, args.case)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
