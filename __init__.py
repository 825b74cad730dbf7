"""DecodeTopK: the exact decode top-k of BF16 sparse-attention indexer logits.

The installed package is one namespace, so nothing collides with an engine's modules:

- `decode_topk.reference`: the contract in NumPy (bit helpers, the reference top-k) and
  the numba model of the kernel's algorithm (SPEC.md part 2);
- `decode_topk.kernel`: what an engine ships: the launch policy and input checks
  (`policy`, DSL-free), the CuTe DSL kernel (`decode_topk_cute`), the ahead-of-time
  library's loader (`aot_loader`) and the torch custom ops (`torch_ops`);
- `decode_topk.conformance`: the checker, the case catalogue and the suite
  (`python -m decode_topk.conformance`).

Importing `decode_topk` imports none of them; `decode_topk.spec_path()` is SPEC.md.
"""

from pathlib import Path as _Path

__version__ = "0.2.0"


def spec_path() -> _Path:
    """The path of SPEC.md, the normative specification (shipped inside the package)."""
    return _Path(__file__).resolve().parent / "SPEC.md"
