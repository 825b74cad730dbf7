"""Implementations under test, selected by name.

An implementation is a callable `impl(logits_bits, lengths, k, block_mode)` taking the
contract's NumPy inputs (uint16 BF16 bits [rows, width], int32 lengths [rows]) and
returning `out` (int32 [rows, k]) or `(out, trace)` (trace int32 [rows, 8], SPEC.md 2.11).
It is registered with a *loader*, a function that imports and returns it, so that naming
a GPU implementation never imports torch or cutlass until it is run.

Extension point: the owners of the other implementations add their registration to
`_register_builtins` below, next to 'reference':
- 'model': reference/model.py (numba), returns (out, trace);
- 'aot' and 'jit': the GPU kernel (kernel/decode_topk_cute.py), ahead-of-time compiled
  or JIT-compiled, converting the bits to a CUDA bfloat16 tensor and back.
"""

class Unavailable(RuntimeError):
    """A registered implementation that cannot load on this machine (no GPU, a missing or
    stale library, no DSL)."""


_LOADERS = {}
_LOADED = {}


def register(name, loader, replace=False):
    """Register `loader` (no arguments, returns the implementation callable) as `name`."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"implementation name must be a non-empty string, got {name!r}")
    if not callable(loader):
        raise ValueError(f"loader for {name!r} must be callable, got {type(loader).__name__}")
    if name in _LOADERS and not replace:
        raise ValueError(f"implementation {name!r} is already registered")
    _LOADERS[name] = loader
    _LOADED.pop(name, None)


def unregister(name):
    """Remove `name` (tests register throw-away implementations)."""
    _LOADERS.pop(name, None)
    _LOADED.pop(name, None)


def names():
    """The registered implementation names, in registration order."""
    return tuple(_LOADERS)


def get(name):
    """The implementation registered as `name`, loaded on first use."""
    if name not in _LOADERS:
        raise ValueError(f"unknown implementation {name!r}; registered: {', '.join(names())}")
    if name not in _LOADED:
        try:
            _LOADED[name] = _LOADERS[name]()
        except Exception as exc:  # no GPU, no or stale library, no DSL: say which
            raise Unavailable(f"implementation {name!r} cannot run here: {type(exc).__name__}: {exc}") from exc
    return _LOADED[name]


def _load_reference():
    from decode_topk.reference.topk import decode_topk_reference

    return decode_topk_reference


def _load_aot():
    # The GPU kernel through the ahead-of-time library (kernel/aot_loader.py; imports torch,
    # never cutlass): impl(logits_bits, lengths, k, block_mode, build=None) -> (out, trace),
    # out and trace poisoned before every launch, the traced variant, on `build`
    # ((cluster, threads, vectors), (cluster, vectors) or 'CxTxV') or the policy's build;
    # the build it ran is left in impl.last_build.
    from decode_topk.kernel.aot_loader import conformance_impl

    return conformance_impl()


def _load_model():
    # reference/model.py (numba): impl(logits_bits, lengths, k, block_mode, build=None)
    # -> (out, trace) on `build` (cluster, threads, vectors) or the policy's build.
    from decode_topk.reference.model import decode_topk_model

    return decode_topk_model


def _load_jit():
    # The GPU kernel JIT-compiled through the DSL (kernel/jit_conformance.py); the same
    # conventions as 'aot'.
    from decode_topk.kernel.jit_conformance import JitImpl
    return JitImpl()


def _register_builtins():
    register("reference", _load_reference)
    register("model", _load_model)
    register("aot", _load_aot)
    register("jit", _load_jit)


_register_builtins()
