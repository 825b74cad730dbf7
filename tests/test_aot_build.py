"""The AOT pipeline on the CPU: compile two variants, export, generate the shim, link,
load the library through ctypes (no GPU: launches report a CUDA error, not a crash), and
refuse a library built from another kernel source.
"""

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")

from decode_topk.kernel import aot  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
VARIANTS = [(512, 8, 8, True, False), (512, 8, 8, True, True)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("aot")
    manifest = aot.build("sm_90a", out, jobs=2, variants=VARIANTS, work=out / "work")
    return out, manifest


def test_manifest(built):
    out, manifest = built
    assert json.loads((out / aot.MANIFEST).read_text()) == manifest
    assert manifest["arch"] == "sm_90a"
    assert manifest["kernel_source_sha256"] == aot.source_sha256(ROOT / "kernel" / "decode_topk_cute.py")
    assert [v["name"] for v in manifest["variants"]] == ["dtk_k512_c8_v8_blk1_tr0", "dtk_k512_c8_v8_blk1_tr1"]
    assert manifest["library_bytes"] < 64 * 2**20


def test_shim_fills_every_dynamic_mode(built):
    out, _ = built
    shim = (out / "work" / "shim.c").read_text()
    for name in ("dtk_k512_c8_v8_blk1_tr0", "dtk_k512_c8_v8_blk1_tr1"):
        assert "a_logits.dynamic_shapes[1] = (int32_t)(width);" in shim
        assert "a_logits.dynamic_strides[0] = (int64_t)(row_stride);" in shim
        assert f"cute_dsl_{name}_wrapper(&m_{name}, &a_logits, &a_lengths, &a_out, &a_trace," in shim


def test_library_loads_without_a_gpu(built):
    out, _ = built
    lib = ctypes.CDLL(str(out / aot.LIBRARY))
    assert lib.dtk_variant_count() == 2
    lib.dtk_kernel_source_sha256.restype = ctypes.c_char_p
    assert lib.dtk_kernel_source_sha256().decode() == aot.source_sha256(ROOT / "kernel" / "decode_topk_cute.py")
    args = [None, 1, 4096, 4096, None, None, None, None]
    assert lib.dtk_launch(1024, 8, 8, 1, 0, *args) == aot.DTK_NO_VARIANT
    rc = lib.dtk_launch(512, 8, 8, 1, 0, *args)
    assert rc != 0  # no GPU here: a CUDA error code (e.g. 35, insufficient driver), not a crash


def test_loader_refuses_a_stale_library(built, tmp_path):
    out, _ = built
    stale = tmp_path / "aot"
    stale.mkdir()
    (stale / aot.LIBRARY).write_bytes((out / aot.LIBRARY).read_bytes())
    m = json.loads((out / aot.MANIFEST).read_text())
    (stale / aot.MANIFEST).write_text(json.dumps(m))
    code = ("import os, sys\n"
            "import decode_topk.kernel.aot_loader as L\n"
            "L.KERNEL_SOURCE = L.Path(sys.argv[1])\n"
            "try:\n    L.load_library()\nexcept L.StaleLibraryError as e:\n    print('STALE', e); sys.exit(0)\n"
            "sys.exit(1)\n")
    other = tmp_path / "other_kernel.py"
    other.write_text("# a different kernel source\n")
    env = {"DTK_AOT_DIR": str(stale), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code, str(other)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "rebuild with `python -m decode_topk.kernel.aot`" in r.stdout, r.stdout + r.stderr


def test_loader_imports_no_dsl():
    code = ("import sys, kernel.aot_loader\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'cutlass')\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
