"""The CUDA C++ probes of bench/ (dsmem_probe.cu, handoff_probe.cu, select_probe.cu,
cluster_occupancy_probe.cu, read_rate_probe.cu: plain CUDA, run on the H200 without the DSL;
spread_probe.cu, a shared library that bench/spread_probe.py loads) build for sm_90a, so that
a device call is not spent on one that does not compile. Skipped where no nvcc is on PATH."""

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize("probe, flags", [("dsmem_probe.cu", []), ("handoff_probe.cu", []), ("select_probe.cu", []),
                                          ("cluster_occupancy_probe.cu", []), ("read_rate_probe.cu", []),
                                          ("spread_probe.cu", ["-shared", "-Xcompiler", "-fPIC"])])
def test_probe_builds_for_sm_90a(probe, flags, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    done = subprocess.run([nvcc, "-O3", "-arch=sm_90a", *flags, "-o", str(tmp_path / "probe"), str(BENCH / probe)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "probe").stat().st_size > 0
