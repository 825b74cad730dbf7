"""bench/profile_phases.py without a GPU: every configuration names a build that holds its
width (a streamed build's token rows: any width) and overrides only attributes the kernel
class has, so a DSL run on the H200 (two device runs) is not spent on a typo or on a knob
that was removed."""

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cutlass")
pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import profile_phases  # noqa: E402

from decode_topk.kernel import decode_topk_cute as dtk  # noqa: E402
from decode_topk.kernel import policy  # noqa: E402


@pytest.mark.parametrize("name", sorted(profile_phases.CONFIGS))
def test_every_configuration_can_run(name):
    assert profile_phases.CONFIGS[name]
    for rows, width, k, block_mode, (cluster, vectors), overrides in profile_phases.CONFIGS[name]:
        threads = overrides.get("threads", policy.threads_for(cluster, vectors))
        assert rows >= 1 and k in policy.KS
        # a streamed build's token rows hold any width (SPEC 2.12), any other row its stage's
        assert width <= policy.Build(cluster, threads, vectors).capacity_in(block_mode), (name, rows, width, cluster,
                                                                                          vectors)
        if "threads" not in overrides:
            assert policy.Build.of(cluster, vectors) in policy.BUILDS, (name, cluster, vectors)
        topk = dtk.make_decode_topk(k, cluster, vectors, block_mode, profile=True)
        unknown = [attr for attr in overrides if attr not in ("threads", "data") and not hasattr(topk, attr)]
        assert unknown == [], (name, unknown)


def test_a_removed_knob_is_refused(monkeypatch):
    monkeypatch.setitem(profile_phases.CONFIGS, "stale", [(1, 8192, 512, False, (1, 8), {"gone_knob": 1})])
    with pytest.raises(SystemExit, match="no attribute 'gone_knob'"):
        profile_phases.main(["stale"])


def test_the_aot_library_refuses_what_changes_the_kernel():
    """--aot runs the profile build as built: `data` is the only override it can honour, so
    the issue's targets run there and session 33's copies knobs are refused up front
    (before any library is opened)."""
    assert all(profile_phases.aot_refusal(c) is None for c in profile_phases.CONFIGS["targets"])
    assert profile_phases.aot_refusal((1, 8192, 512, False, (1, 2), {"data": "gaussian"})) is None
    assert profile_phases.aot_refusal(profile_phases.CONFIGS["s33"][1]) == "overrides copies_before_b0"
    with pytest.raises(SystemExit, match="copies_before_b0"):
        profile_phases.main(["s33", "--aot", "/nonexistent"])


def test_median_stamps_since_the_first_across_the_clock_wrap():
    n = len(policy.TRACE_FIELDS)
    stamps = len(policy.PROFILE_STAMPS)
    fields = np.zeros((3, n + stamps), np.int64)
    fields[:, n] = (2**32 - 10, 100, 200)  # start; the first row's clock wraps before its next stamp
    fields[:, n + 1] = (5, 150, 260)  # 15, 50 and 60 cycles later
    median = profile_phases.median_stamps(fields)
    assert median[0] == 0 and median[1] == 50 and (median[2:] == -1).all()


def test_profile_build_is_the_traced_profile_kernel_and_goes_stale_with_it(monkeypatch):
    import profile_build

    assert profile_build.variants() and all(v.trace and v.k in (512, 2048) for v in profile_build.variants())
    assert {v.build for v in profile_build.variants()} == set(policy.BUILDS)
    trace = profile_build.fake_arguments(512)[3]
    assert trace.shape[1] == len(policy.TRACE_FIELDS) + len(policy.PROFILE_STAMPS)
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
