"""The profile build (DecodeTopK(..., profile=True): CTA 0's %clock at each PROFILE_STAMPS
point, in the trace's fields past TRACE_FIELDS) as a module that kernel/aot.py builds an
AOT library from, so that bench/profile_phases.py profiles on the GPU machine without the
DSL there (two device runs to stage it, and an upload that leaves little room):

    python -m decode_topk.kernel.aot --module bench/profile_build.py --out .aot_profile --work build/aot_profile

then, on the GPU machine, `python bench/profile_phases.py targets --aot .aot_profile`.
The library holds the kernel as built: the configurations whose overrides change the
kernel (`threads`, or any attribute of DecodeTopK) still need the DSL; `data` does not.

It has the module API kernel/aot.py builds from (fake_arguments, variants,
compile_decode_topk) and imports the DSL only inside them, so that the GPU machine can
import it to check the library: `library_sha256()` is the hash the library carries, over
this file and the kernel's bundle (kernel/vendor.py), so a kernel change makes a built
library stale, as it does the production one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from decode_topk.kernel import policy
from decode_topk.kernel.vendor import bundle_sha256

KS = (512, 2048)  # the grid's k; profile_phases.py's configurations at k 1024 (q-min) need the DSL
TRACE_WIDTH = len(policy.TRACE_FIELDS) + len(policy.PROFILE_STAMPS)


def library_sha256() -> str:
    """What the library is stamped with (kernel/aot.py) and checked against (profile_phases.py
    --aot): this file and the kernel bundle the profile build compiles."""
    return hashlib.sha256(Path(__file__).read_bytes() + bundle_sha256().encode()).hexdigest()


def fake_arguments(k: int, trace_width: int = TRACE_WIDTH):
    from decode_topk.kernel import decode_topk_cute as dtk

    return dtk.fake_arguments(k, trace_width)


def variants(traces=(True,)):
    """The Variants kernel/aot.py builds: every build and mode at KS, traced whatever
    `traces` says (the profile build writes the trace; its stamps are trace fields)."""
    return [v for v in policy.variants((True,)) if v.k in KS]


_compiled = {}


def compile_decode_topk(k, cluster, vector_count, block_mode, trace=True, arch=None, options=None):
    """The kernel/aot.py entry point: the profile build of that variant (always traced)."""
    import cutlass.cute as cute

    from decode_topk.kernel import decode_topk_cute as dtk

    key = (k, cluster, vector_count, block_mode, arch, options)
    if key not in _compiled:
        flags = " ".join(f for f in (None if arch is None else f"--gpu-arch {arch}", options) if f)
        extra = {"options": flags} if flags else {}
        _compiled[key] = cute.compile(dtk.make_decode_topk(k, cluster, vector_count, block_mode, profile=True),
                                      *fake_arguments(k), **extra)
    return _compiled[key]
