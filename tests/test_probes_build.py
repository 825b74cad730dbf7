"""The CUDA C++ probes of bench/ (dsmem_probe.cu, handoff_probe.cu, select_probe.cu: plain
CUDA, run on the H200 without the DSL) build for sm_90a, so that a device call is not spent
on one that does not compile. Skipped where no nvcc is on PATH."""

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize("probe", ["dsmem_probe.cu", "handoff_probe.cu", "select_probe.cu"])
def test_probe_builds_for_sm_90a(probe, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    done = subprocess.run([nvcc, "-O3", "-arch=sm_90a", "-o", str(tmp_path / "probe"), str(BENCH / probe)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "probe").stat().st_size > 0
