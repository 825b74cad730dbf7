"""bench/profile_phases.py without a GPU: every configuration names a build that holds its
width (a streamed build's token rows: any width) and overrides only attributes the kernel
class has, so a DSL run on the H200 (two device runs) is not spent on a typo or on a knob
that was removed."""

import sys
from pathlib import Path

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


def test_the_profile_library_is_compiled_with_the_profile_trace_width():
    import profile_build

    trace = profile_build.fake_arguments(512)[3]
    assert trace.shape[1] == len(policy.TRACE_FIELDS) + len(policy.PROFILE_STAMPS)
