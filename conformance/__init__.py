"""The DecodeTopK conformance layer: the contract checker, the case catalogue, the
registry of implementations and the suite that runs them (`python -m decode_topk.conformance`).

Importing it imports neither torch nor cutlass.
"""

from .cases import CASES, Case, cases
from .checker import Violation, check
from .registry import get, names, register, unregister
from .suite import compare_traces, run_suite

__all__ = [
    "CASES",
    "Case",
    "Violation",
    "cases",
    "check",
    "compare_traces",
    "get",
    "names",
    "register",
    "run_suite",
    "unregister",
]
