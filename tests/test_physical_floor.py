"""bench/physical_floor.py keeps its loads (CPU only: a compile for sm_90a).

ptxas deletes a load whose result nothing uses: the floor's first version did not fold
its loads into anything, compiled to 18-26 registers, and measured 4-5 us on the H200 at
every size, up to 128 x 1M. Its loads now fold into a word it may store, four tiles of
16-byte loads in flight a thread, which takes registers for 16 loaded words; this checks
that they are there (a floor whose loads are gone needs far fewer) and that two CTAs of
512 threads still fit an SM (64 registers a thread at most).
"""

from pathlib import Path

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")

from decode_topk.kernel import resources  # noqa: E402

pytestmark = pytest.mark.slow

MODULE = str(Path(__file__).resolve().parent.parent / "bench" / "physical_floor.py")


def test_the_physical_floor_keeps_its_loads_and_two_ctas_an_sm():
    module = resources.load_kernel_module(MODULE)
    rows = resources.compile_all(resources.all_variants(MODULE), "sm_90a", module_spec=MODULE, jobs=1,
                                 progress=False)
    assert [row["variant"][0] for row in rows] == list(module.KS)
    for row in rows:
        assert row["local_bytes"] == 0 and row["smem"] == 0 and row["block"] == [module.THREADS, 1, 1], row
        assert 16 + 16 <= row["regs"] <= 64, row  # 16 words in flight, and 2 x 512 threads an SM
