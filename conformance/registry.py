"""Implementations under test, selected by name, each with a record of how to run and judge it.

An implementation is a callable `impl(logits_bits, lengths, k, block_mode)` taking the
contract's NumPy inputs (uint16 BF16 bits [rows, width], int32 lengths [rows]) and
returning `out` (int32 [rows, k]) or `(out, trace)` (trace int32 [rows, 8], SPEC.md 2.11).
It is registered with a *loader*, a function that imports and returns it, so that naming
a GPU implementation never imports torch or cutlass until it is run, and with a `Record`
of what it does, which the suite follows instead of guessing from signatures or
attributes:

| field | values (default first) | the suite |
| --- | --- | --- |
| `returns_trace` | False, True | takes `out`, or unpacks `(out, trace)` and checks the trace |
| `takes_build` | False, True | may force a build: `impl(..., build=(cluster, threads, vectors))` (`--build`) |
| `reports_build` | None, 'last_build' | learns the build it chose itself from its `last_build` attribute after the call (anything `Build.parse` takes); None: unknown, so its trace is checked without a build (a forced build is always known) |
| `trace_oracle` | 'model', 'invariants' | judges a trace by the whole-row invariants of conformance/trace.py (every field against `expected_trace` once the build is known) and, with 'model', also field by field against the model's trace on the same input and build |
| `claims` | 'contract', 'canonical' | 'contract': the output is judged by SPEC.md 1.4's contract (any tie choice, any order: `checker.check`); 'canonical': it must be the canonical answer of SPEC.md 1.4 slot for slot (ties by lowest index, ascending order: `checker.check(..., strict=True)`, reason 'not-canonical'). The suite's `--strict` / `--no-strict` overrides it |
| `sweep_builds` | False, True | without `--build`, the CLI runs every build (the model: cheap, and every build needs its traces) |

The builtins: 'reference' (out only, no build; claims the contract, because by default it
writes its slots by descending key), 'reference-canonical' (the reference with
canonical=True: the canonical answer, so it claims it), 'model' (reference/model.py:
traced, takes a build, reports `last_build`, and judged by the invariants alone because it
is the model), 'aot' and 'jit' (the GPU kernel through the ahead-of-time library or the
DSL: traced, take a build, report `last_build`, compared with the model). The model and
the kernel claim the canonical answer (issue 16).

Any other callable can be named as `pkg.module:attr` (`--impl` of the CLI, `get`,
`record`, `run_suite`): the module is imported and `attr` (dotted for nested attributes)
looked up at once, so a bad name fails before any case runs. A class is instantiated with
no arguments at first use (so a GPU implementation can defer its set-up, as the builtins'
loaders do); anything else callable is the implementation itself. Its record is read from
its attributes of the fields' names (for a class, its class attributes), each optional
with the defaults above; e.g.

    def my_topk(logits_bits, lengths, k, block_mode, build=None): ...
    my_topk.returns_trace = True
    my_topk.takes_build = True
    my_topk.claims = "canonical"  # judged in strict mode (default: "contract")
"""

import importlib
from dataclasses import dataclass, fields
from typing import Callable, Optional


class Unavailable(RuntimeError):
    """A registered implementation that cannot load on this machine (no GPU, a missing or
    stale library, no DSL)."""


REPORTS_BUILD = (None, "last_build")
TRACE_ORACLES = ("model", "invariants")
CLAIMS = ("contract", "canonical")  # SPEC.md 1.4: the contract, or the canonical answer (strict)


@dataclass(frozen=True)
class Record:
    """What an implementation returns and how the suite runs and judges it (the table of
    the module docstring)."""

    name: str
    loader: Callable
    returns_trace: bool = False
    takes_build: bool = False
    reports_build: Optional[str] = None
    trace_oracle: str = "model"
    claims: str = "contract"
    sweep_builds: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"implementation name must be a non-empty string, got {self.name!r}")
        if not callable(self.loader):
            raise ValueError(f"loader for {self.name!r} must be callable, got {type(self.loader).__name__}")
        for flag in ("returns_trace", "takes_build", "sweep_builds"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{self.name!r}: {flag} = {getattr(self, flag)!r} is not a bool")
        for value, allowed, what in ((self.reports_build, REPORTS_BUILD, "reports_build"),
                                     (self.trace_oracle, TRACE_ORACLES, "trace_oracle"),
                                     (self.claims, CLAIMS, "claims")):
            if value not in allowed:
                raise ValueError(f"{self.name!r}: {what} = {value!r} is not one of {allowed}")
        if self.sweep_builds and not self.takes_build:
            raise ValueError(f"{self.name!r}: sweep_builds = True needs takes_build = True")

    @property
    def strict(self):
        """Whether the suite judges it in strict mode by default (it claims the canonical
        answer)."""
        return self.claims == "canonical"

    def require_build(self):
        """Raise ValueError unless a build can be forced on this implementation."""
        if not self.takes_build:
            raise ValueError(f"implementation {self.name!r} takes no build (its record: takes_build=False)")


# The record fields an implementation may declare as attributes (pkg.module:attr).
DECLARED = tuple(f.name for f in fields(Record) if f.name not in ("name", "loader"))

_RECORDS = {}
_LOADED = {}


def register(name, loader, replace=False, **declared):
    """Register `loader` (no arguments, returns the implementation callable) as `name`,
    with the record fields `declared` (module docstring; unnamed fields take their
    defaults). Raises ValueError on a taken name (unless `replace`) or a bad field."""
    unknown = sorted(set(declared) - set(DECLARED))
    if unknown:
        raise ValueError(f"unknown record fields {unknown}; known: {', '.join(DECLARED)}")
    record = Record(name, loader, **declared)
    if name in _RECORDS and not replace:
        raise ValueError(f"implementation {name!r} is already registered")
    _RECORDS[name] = record
    _LOADED.pop(name, None)
    return record


def unregister(name):
    """Remove `name` (tests register throw-away implementations)."""
    _RECORDS.pop(name, None)
    _LOADED.pop(name, None)


def names():
    """The registered implementation names, in registration order."""
    return tuple(_RECORDS)


def is_spec(name):
    """Whether `name` has the pkg.module:attr form."""
    return isinstance(name, str) and ":" in name


def record(name):
    """The record of `name`: a registered name, or a pkg.module:attr spec (imported and
    registered under the spec on first use)."""
    if name not in _RECORDS:
        if not is_spec(name):
            raise ValueError(f"unknown implementation {name!r}; registered: {', '.join(names())}, "
                             f"or pkg.module:attr")
        register_spec(name)
    return _RECORDS[name]


def get(name):
    """The implementation of `name` (as `record`), loaded on first use."""
    rec = record(name)
    if name not in _LOADED:
        try:
            _LOADED[name] = rec.loader()
        except Exception as exc:  # no GPU, no or stale library, no DSL: say which
            raise Unavailable(f"implementation {name!r} cannot run here: {type(exc).__name__}: {exc}") from exc
    return _LOADED[name]


def register_spec(spec):
    """Register the callable named by `spec` = 'pkg.module:attr' under the name `spec`,
    its record read from its attributes. Raises ValueError, one line naming what is wrong:
    a malformed spec, a module that does not import, no such attribute, not callable, a
    bad declared field."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(f"implementation {spec!r} is not pkg.module:attr")
    try:
        target = importlib.import_module(module_name)
    except Exception as exc:  # a missing module or one that fails while importing: say which
        raise ValueError(f"implementation {spec!r}: cannot import module {module_name!r}: "
                         f"{type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"implementation {spec!r}: {getattr(target, '__name__', module_name)!r} "
                             f"has no attribute {part!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"implementation {spec!r} is not callable (a {type(target).__name__})")
    declared = {field: getattr(target, field) for field in DECLARED if hasattr(target, field)}
    # A class is a factory (its instance is the implementation), because calling a class
    # with the four inputs would construct an object, never return an output.
    loader = target if isinstance(target, type) else (lambda: target)
    return register(spec, loader, replace=True, **declared)


def _load_reference():
    from decode_topk.reference.topk import decode_topk_reference

    return decode_topk_reference


def _load_reference_canonical():
    from decode_topk.reference.topk import decode_topk_reference

    def reference_canonical(logits_bits, lengths, k, block_mode=False):
        """decode_topk_reference(..., canonical=True): the canonical answer (SPEC.md 1.4)."""
        return decode_topk_reference(logits_bits, lengths, k, block_mode, canonical=True)

    return reference_canonical


def _load_aot():
    # The GPU kernel through the ahead-of-time library (conformance/gpu_impl.py over
    # kernel/aot_loader.py; imports torch, never cutlass): impl(logits_bits, lengths, k,
    # block_mode, build=None) -> (out, trace), out and trace poisoned before every launch,
    # the traced variant, on `build` or the policy's build; the build it ran is left in
    # impl.last_build.
    from .gpu_impl import aot_impl

    return aot_impl()


class _Model:
    """reference/model.py (numba) as an implementation: impl(logits_bits, lengths, k,
    block_mode, build=None) -> (out, trace) on `build` or the policy's build for the
    batch, which it leaves in `last_build` as the GPU implementations do."""

    def __init__(self):
        import sys
        from pathlib import Path

        from decode_topk.reference import model

        # numba compiles the model on its first run (cache=True keeps it in
        # reference/__pycache__ afterwards): say so rather than sit silent for ~10 s.
        if not any(Path(model.__file__).parent.glob("__pycache__/model._simulate_rows*.nbi")):
            print("compiling the model with numba (first run only, about 10 s)...", file=sys.stderr, flush=True)
        self.model = model
        self.last_build = None

    def __call__(self, logits_bits, lengths, k, block_mode=False, build=None):
        rows, width = logits_bits.shape
        self.last_build = self.model.resolve_build(rows, width, build, block_mode=block_mode, k=k)
        return self.model.simulate(logits_bits, lengths, k, block_mode, build=self.last_build)


def _load_jit():
    # The GPU kernel JIT-compiled through the DSL (conformance/gpu_impl.py); the same
    # conventions as 'aot'.
    from .gpu_impl import jit_impl
    return jit_impl()


def _register_builtins():
    # The reference's default slot order is by descending key (any order is the contract's);
    # with canonical=True it gives the canonical answer, which strict mode demands.
    register("reference", _load_reference, claims="contract")
    register("reference-canonical", _load_reference_canonical, claims="canonical")
    # The model is the oracle other traces are compared with, so only the independent
    # whole-row checks judge its own trace. The model and the kernel claim the canonical
    # answer (issue 16: the same output whatever the batch, the build or the run).
    register("model", _Model, returns_trace=True, takes_build=True, reports_build="last_build",
             trace_oracle="invariants", claims="canonical", sweep_builds=True)
    register("aot", _load_aot, returns_trace=True, takes_build=True, reports_build="last_build",
             claims="canonical")
    register("jit", _load_jit, returns_trace=True, takes_build=True, reports_build="last_build",
             claims="canonical")


_register_builtins()
