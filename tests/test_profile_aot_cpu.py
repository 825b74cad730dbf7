"""bench/profile_phases.py --aot and bench/profile_build.py without a GPU and without the
DSL (the GPU machine has neither the DSL nor its staging to spare): the run imports no
DSL up to the library, refuses what the profile library cannot run before opening it,
goes stale with the kernel, launches with the C entry point's argument order, and reads
the stamps across the clock's wrap."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import profile_build  # noqa: E402
import profile_phases  # noqa: E402

from decode_topk.kernel import policy  # noqa: E402


def test_the_aot_run_imports_no_dsl(tmp_path):
    code = "\n".join([
        "import sys",
        "sys.modules['cutlass'] = sys.modules['cutlass.cute'] = None  # any import of the DSL fails",
        f"sys.path.insert(0, {str(BENCH)!r})",
        "import profile_phases",
        "try:",
        f"    profile_phases.main(['targets', 's35', '--aot', {str(tmp_path)!r}])",
        "except FileNotFoundError as e:",
        "    print('NOT FOUND:', e)"])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "NOT FOUND:" in run.stdout, run.stderr[-2000:]
    assert "--module" in run.stdout and "profile_build.py" in run.stdout  # how to build it


def test_the_aot_library_refuses_what_it_does_not_hold():
    """--aot runs the profile build as built, at k 512 and 2048: `data` is the only
    override it honours, so the issue's targets and s35 run there, and session 33's copies
    knobs and q-min's k = 1024 are refused up front (before any library is opened)."""
    for name in ("targets", "s35"):
        assert all(profile_phases.aot_refusal(c) is None for c in profile_phases.CONFIGS[name]), name
    assert profile_phases.aot_refusal(profile_phases.CONFIGS["s33"][1]) == "overrides copies_before_b0"
    assert "k=1024" in profile_phases.aot_refusal((1, 1048576, 1024, False, (16, 16), {}))
    with pytest.raises(SystemExit, match="copies_before_b0"):
        profile_phases.main(["s33", "--aot", "/nonexistent"])
    with pytest.raises(SystemExit, match="k=1024"):
        profile_phases.main(["q-min", "--aot", "/nonexistent"])


def test_median_stamps_across_the_int32_clock_sign():
    """The trace holds %clock as int32: two of three rows cross 2^31 between their first
    stamps (15 and 50 cycles), the third does not (60), so the median is 50 only if the
    difference is taken modulo 2^32."""
    n = len(policy.TRACE_FIELDS)
    trace = np.zeros((3, n + len(policy.PROFILE_STAMPS)), np.int32)
    start = np.array([2**31 - 10, 2**31 - 20, 100], np.int64)
    trace[:, n] = start.astype(np.uint32).view(np.int32)
    trace[:, n + 1] = (start + (15, 50, 60)).astype(np.uint32).view(np.int32)
    median = profile_phases.median_stamps(trace.astype(np.int64))
    assert median[0] == 0 and median[1] == 50 and (median[2:] == -1).all()


def test_profile_build_is_the_traced_profile_kernel_and_goes_stale_with_it(monkeypatch):
    assert profile_build.variants() and all(v.trace and v.k in (512, 2048) for v in profile_build.variants())
    assert {v.build for v in profile_build.variants()} == set(policy.BUILDS)
    before = profile_build.library_sha256()
    monkeypatch.setattr(profile_build, "bundle_sha256", lambda: "0" * 64)  # another kernel
    assert profile_build.library_sha256() != before


def test_a_stand_in_module_stamps_its_own_library_sha256(tmp_path):
    from decode_topk.kernel import aot, resources

    src = tmp_path / "stand_in.py"
    src.write_text("x = 1\n")
    plain = type("M", (), {})()
    assert aot.library_sha256(plain, str(src), src) == aot.source_sha256(src)
    own = type("M", (), {"library_sha256": staticmethod(lambda: "f" * 64)})()
    assert aot.library_sha256(own, str(src), src) == "f" * 64
    assert aot.library_sha256(own, resources.KERNEL_MODULE, src) == aot.kernel_source_sha256()


def test_the_aot_launch_passes_dtk_launch_its_arguments_in_order():
    """grid.launch_library (the floors' and the profile library's launch) against the C
    entry point's order (docs/aot.md): k, cluster, vectors, block mode, traced, logits,
    rows, width, row stride, lengths, next_n, out, trace, stream."""
    import grid

    class Tensor:
        def __init__(self, ptr, shape=(), stride=()):
            self.ptr, self.shape, self._stride = ptr, shape, stride

        def data_ptr(self):
            return self.ptr

        def stride(self, dim):
            return self._stride[dim]

    class Lib:
        def dtk_launch(self, *args):
            self.args = [getattr(a, "value", a) for a in args]
            return 0

    fake_torch = type("T", (), {"cuda": type("C", (), {"current_stream": staticmethod(
        lambda: type("S", (), {"cuda_stream": 77})())})})
    lib = Lib()
    logits, lengths, out, trace = Tensor(11, (3, 4096), (4104, 1)), Tensor(12), Tensor(13), Tensor(14)
    grid.launch_library(lib, fake_torch, "x", logits, lengths, out, 512, 8, 16, True, trace)
    assert lib.args == [512, 8, 16, 1, 1, 11, 3, 4096, 4104, 12, 1, 13, 14, 77]
    grid.launch_library(lib, fake_torch, "x", logits, lengths, out, 2048, 1, 2)
    assert lib.args[3:5] == [0, 0] and lib.args[12] in (0, None)
