"""bench/sass_phases.py's parser on a listing of nvdisasm's shape (no nvdisasm, no GPU)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import sass_phases  # noqa: E402

LISTING = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P3 CS2R.32 R5, SR_CLOCKLO ;
.L_x_1:
        /*0020*/                   LDS.128 R4, [R4] ;
        /*0030*/               @P0 ATOMS.ADD RZ, [R5], R4 ;
        /*0040*/                   ATOMS.POPC.INC.32 RZ, [R6+URZ] ;
        /*0050*/                   BSSY B2, `(.L_x_2) ;
        /*0060*/                   REDUX.SUM.S32 UR11, R5 ;
        /*0070*/                   CS2R.32 R3, SR_CLOCKLO ;
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
"""


def test_stretches_cut_at_every_clock_read_and_count_opcodes():
    rows = sass_phases.stretches(LISTING)
    assert [n for n, _ in rows] == [2, 6, 1]
    assert rows[0][1] == {}
    assert rows[1][1] == {"LDS": 1, "ATOMS": 2, "BSSY": 1, "REDUX": 1}
    assert rows[2][1] == {"BAR": 1}


def test_a_missing_nvdisasm_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("NVDISASM", str(tmp_path / "none"))
    monkeypatch.setattr(sass_phases.shutil, "which", lambda name: None)
    monkeypatch.setattr(sass_phases, "NVD_ROOT", tmp_path / "absent")
    try:
        sass_phases.find_nvdisasm(str(tmp_path / "also-none"))
    except SystemExit as exc:
        assert "no nvdisasm" in str(exc)
    else:
        raise AssertionError("find_nvdisasm found a tool that is not there")
