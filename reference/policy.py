"""The launch policy (SPEC.md 2.1) and the host input checks (SPEC.md 1.5), loaded from
kernel/decode_topk_cute.py without importing the DSL.

The kernel module is vendored into vLLM as one file that imports cutlass at the top, yet
the model must choose builds by exactly the same rules and `reference` must not import
cutlass. So the rules are written once, as plain functions in the kernel module's config
section, and this module executes just those top-level definitions (by name) from that
file's source.
"""

import ast
import importlib.util
from pathlib import Path

_NAMES = (
    "LOGITS_PER_VECTOR", "SAMPLES", "SURVIVOR_CAPACITY", "SURVIVOR_AIM", "KS", "MAX_WIDTH", "WAVES_16",
    "TRACE_FIELDS", "BUILDS", "threads_for", "vector_choices", "capacity", "vectors_for",
    "check_width", "cluster_for", "build_for", "max_rows", "_check_int32", "check_logits", "check_inputs",
    "check_lengths", "_lengths_name", "new_output",
)


def _kernel_source() -> Path:
    # find_spec imports the package `kernel` (its __init__ imports nothing heavy), not
    # the module itself.
    spec = importlib.util.find_spec("decode_topk.kernel.decode_topk_cute")
    if spec is None or spec.origin is None:
        raise ImportError("kernel/decode_topk_cute.py not found: install the decode-topk package")
    return Path(spec.origin)


def _load() -> dict:
    path = _kernel_source()
    tree = ast.parse(path.read_text(), filename=str(path))
    kept = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in _NAMES:
            kept.append(node)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in _NAMES for t in node.targets):
            kept.append(node)
    namespace: dict = {}
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(path), "exec"), namespace)
    missing = [name for name in _NAMES if name not in namespace]
    if missing:
        raise ImportError(f"{path} lacks the launch-policy definitions {missing}")
    return namespace


globals().update({name: value for name, value in _load().items() if name in _NAMES})
