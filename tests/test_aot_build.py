"""The AOT library's build and location, on the CPU.

Fast: where the loader looks (the package's kernel/aot/<arch>/, $DECODE_TOPK_AOT_DIR and
its old name DTK_AOT_DIR) and what it says when nothing is there; how the build finds a
CUDA 13 toolkit (CUDA_HOME, nvcc on PATH, the CUDA wheels) and what it says when none is
found; `kernel.aot`'s help; the GPU tools' one-line exit without a device; the loader
imports no DSL.

Slow (the DSL): compile two variants, export, generate the shim, link into where the
loader looks, load the library through ctypes (no GPU: launches report a CUDA error, not a
crash), refuse a library built from another kernel source, and let the op's backend choice
take a matching library and pass over a stale one.
"""

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from decode_topk.kernel import aot, aot_loader, policy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = [policy.Variant(512, policy.Build.of(8, 8), True, trace) for trace in (False, True)]


@pytest.fixture
def no_aot_variables(monkeypatch):
    for name in aot_loader.AOT_DIR_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------------------------------
# Where the loader looks
# ---------------------------------------------------------------------------------------
def test_the_package_folder_is_the_default(no_aot_variables):
    package = Path(aot_loader.__file__).resolve().parent / "aot"
    assert aot_loader.aot_dirs("sm_100a") == [package / "sm_100a"]
    assert aot.argument_parser().get_default("out") is None  # so the build writes default_aot_dir(arch)
    assert aot_loader.default_aot_dir("sm_90a") == package / "sm_90a"
    if not aot_loader.device_arch():  # no device to choose by: every arch in turn
        assert aot_loader.aot_dirs() == [package / arch for arch in ("sm_90a", "sm_100a")]


@pytest.mark.parametrize("variable", ["DECODE_TOPK_AOT_DIR", "DTK_AOT_DIR"])
def test_the_aot_dir_variable_and_its_old_name(no_aot_variables, monkeypatch, tmp_path, variable):
    monkeypatch.setenv(variable, str(tmp_path))
    assert aot_loader.aot_dirs("sm_90a") == [tmp_path / "sm_90a", tmp_path]
    assert aot_loader.default_aot_dir("sm_90a") == tmp_path / "sm_90a"
    assert not aot_loader.available("sm_90a")
    (tmp_path / aot.LIBRARY).write_bytes(b"")  # the flat layout of one library (--out DIR)
    assert aot_loader.library_path("sm_90a") == tmp_path / aot.LIBRARY
    (tmp_path / "sm_90a").mkdir()
    (tmp_path / "sm_90a" / aot.LIBRARY).write_bytes(b"")  # the per-arch layout wins
    assert aot_loader.library_path("sm_90a") == tmp_path / "sm_90a" / aot.LIBRARY


def test_the_new_name_wins(no_aot_variables, monkeypatch, tmp_path):
    monkeypatch.setenv("DTK_AOT_DIR", str(tmp_path / "old"))
    monkeypatch.setenv("DECODE_TOPK_AOT_DIR", str(tmp_path / "new"))
    assert aot_loader.aot_dirs("sm_90a")[0] == tmp_path / "new" / "sm_90a"


def test_absent_library_says_where_it_looked_and_how_to_get_it(no_aot_variables, monkeypatch, tmp_path):
    monkeypatch.setattr(aot_loader, "_LIB", None)
    monkeypatch.setenv("DECODE_TOPK_AOT_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as e:
        aot_loader.load_library()
    message = str(e.value)
    assert "\n" not in message
    assert f"looked in {tmp_path}/" in message and f"DECODE_TOPK_AOT_DIR={tmp_path}" in message
    assert "python -m decode_topk.kernel.aot --arch sm_" in message


# ---------------------------------------------------------------------------------------
# The CUDA toolkit
# ---------------------------------------------------------------------------------------
def _toolkit(root, version=13000, layout="toolkit"):
    """A fake CUDA toolkit (layout 'toolkit': include/ and lib64/) or CUDA wheel folder
    (layout 'wheel': nvidia/cu13/include and lib) under root; returns its root."""
    top = root / "nvidia" / "cu13" if layout == "wheel" else root
    include, lib = top / "include", top / ("lib" if layout == "wheel" else "lib64")
    for header in aot.CUDA_HEADERS:
        (include / header).parent.mkdir(parents=True, exist_ok=True)
        (include / header).write_text("")
    (include / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION {version}\n")
    lib.mkdir(parents=True)
    (lib / "libcudart_static.a").write_bytes(b"!<arch>\n")
    return top


@pytest.fixture
def nothing_found(monkeypatch, tmp_path):
    """No toolkit anywhere cuda_toolkit() looks, unless a test puts one there."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(aot, "_cuda_wheel_roots", lambda: [])
    monkeypatch.setattr(aot, "CONVENTIONAL_CUDA", tmp_path / "usr_local_cuda")
    return tmp_path


def test_cuda_home_first(nothing_found, monkeypatch):
    root = _toolkit(nothing_found / "cuda")
    monkeypatch.setenv("CUDA_HOME", str(root))
    found = aot.cuda_toolkit()
    assert found.include == root / "include" and found.cudart_static == root / "lib64" / "libcudart_static.a"
    assert found.version == "13.0" and found.origin == f"CUDA_HOME={root}"


def test_nvcc_on_path_through_a_wrapper(nothing_found):
    """nvcc may be a script that execs the real one elsewhere (as on this machine):
    `nvcc -dryrun` reports the toolkit's TOP."""
    root = _toolkit(nothing_found / "cuda-13.0")
    nvcc = nothing_found / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho '#$ TOP={root}/bin/..' >&2\n")
    nvcc.chmod(0o755)
    found = aot.cuda_toolkit()
    assert found.include == root / "include" and found.origin == f"nvcc on PATH ({nvcc})"


def test_the_cuda_wheels(monkeypatch, tmp_path):
    """nvidia/cu13/{include,lib} of nvidia-cuda-runtime & co. in site-packages."""
    top = _toolkit(tmp_path / "site", layout="wheel")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc
    assert aot._cuda_wheel_roots()[0] == top
    found = aot.cuda_toolkit()
    assert found.include == top / "include" and found.cudart_static == top / "lib" / "libcudart_static.a"
    assert found.origin == "the CUDA wheels"


def test_no_toolkit_names_every_place_searched(nothing_found, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_PATH", str(_toolkit(nothing_found / "cuda-12.4", version=12040)))
    with pytest.raises(RuntimeError) as e:
        aot.cuda_toolkit()
    message = str(e.value)
    for part in ("CUDA_HOME unset", "cuda-12.4: CUDA 12.4, not 13", "no nvcc on PATH", "no CUDA wheel",
                 "usr_local_cuda: absent", "pip install 'nvidia-cuda-runtime==13.0.*'", "set CUDA_HOME"):
        assert part in message, (part, message)
    assert aot.main(["--find-cuda"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("decode_topk.kernel.aot: no CUDA 13 toolkit"), err


def test_a_toolkit_missing_a_header_names_its_wheel(nothing_found, monkeypatch):
    root = _toolkit(nothing_found / "cuda")
    (root / "include" / "nv" / "target").unlink()
    monkeypatch.setenv("CUDA_HOME", str(root))
    with pytest.raises(RuntimeError, match=r"no include/nv/target \(nvidia-cuda-cccl\)"):
        aot.cuda_toolkit()


# ---------------------------------------------------------------------------------------
# Feedback
# ---------------------------------------------------------------------------------------
def test_every_aot_option_has_help():
    parser = aot.argument_parser()
    assert parser.description
    for action in parser._actions:
        assert action.help, action.option_strings


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device is here")
@pytest.mark.parametrize("tool", ["gpu", "soak"])
def test_gpu_tools_say_no_device_in_one_line(tool, tmp_path):
    r = subprocess.run([sys.executable, "-m", f"decode_topk.conformance.{tool}", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"decode_topk.conformance.{tool} runs on a CUDA GPU: no CUDA device"), r.stderr


def test_loader_imports_no_dsl():
    code = ("import sys, decode_topk.kernel.aot_loader\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'cutlass')\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------------------------------
# The build (slow: the DSL compiles)
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two variants built with no --out under DECODE_TOPK_AOT_DIR: where the loader looks."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
    root = tmp_path_factory.mktemp("aot")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DECODE_TOPK_AOT_DIR", str(root))
        manifest = aot.build("sm_90a", None, jobs=2, variants=VARIANTS, work=root / "work")
    return root / "sm_90a", manifest


@pytest.mark.slow
def test_build_writes_where_the_loader_looks(built, monkeypatch):
    out, manifest = built
    monkeypatch.setenv("DECODE_TOPK_AOT_DIR", str(out.parent))
    assert manifest["library_path"] == str(out / aot.LIBRARY) == str(aot_loader.library_path("sm_90a"))


@pytest.mark.slow
def test_manifest(built):
    out, manifest = built
    assert json.loads((out / aot.MANIFEST).read_text()) == manifest
    assert manifest["arch"] == "sm_90a"
    assert manifest["kernel_source_sha256"] == aot_loader.kernel_source_sha256()
    assert [v["name"] for v in manifest["variants"]] == ["dtk_k512_c8_v8_blk1_tr0", "dtk_k512_c8_v8_blk1_tr1"]
    assert manifest["library_bytes"] < 64 * 2**20


@pytest.mark.slow
def test_shim_fills_every_dynamic_mode(built):
    out, _ = built
    shim = (out.parent / "work" / "shim.c").read_text()
    for name in ("dtk_k512_c8_v8_blk1_tr0", "dtk_k512_c8_v8_blk1_tr1"):
        assert "a_logits.dynamic_shapes[1] = (int32_t)(width);" in shim
        assert "a_logits.dynamic_strides[0] = (int64_t)(row_stride);" in shim
        assert f"cute_dsl_{name}_wrapper(&m_{name}, &a_logits, &a_lengths, &a_out, &a_trace," in shim


@pytest.mark.slow
def test_library_loads_without_a_gpu(built):
    out, _ = built
    lib = ctypes.CDLL(str(out / aot.LIBRARY))
    assert lib.dtk_variant_count() == 2
    lib.dtk_kernel_source_sha256.restype = ctypes.c_char_p
    assert lib.dtk_kernel_source_sha256().decode() == aot_loader.kernel_source_sha256()
    args = [None, 1, 4096, 4096, None, None, None, None]
    assert lib.dtk_launch(1024, 8, 8, 1, 0, *args) == aot.DTK_NO_VARIANT
    rc = lib.dtk_launch(512, 8, 8, 1, 0, *args)
    assert rc != 0  # no GPU here: a CUDA error code (e.g. 35, insufficient driver), not a crash


def _stale_copy(out, folder):
    folder.mkdir()
    (folder / aot.LIBRARY).write_bytes((out / aot.LIBRARY).read_bytes())
    (folder / aot.MANIFEST).write_text((out / aot.MANIFEST).read_text())
    return folder


@pytest.mark.slow
def test_loader_refuses_a_stale_library(built, tmp_path):
    out, _ = built
    stale = _stale_copy(out, tmp_path / "aot")  # the flat layout, under the old variable's name
    code = ("import sys\n"
            "import decode_topk.kernel.aot_loader as L\n"
            "L.kernel_source_sha256 = lambda: '0' * 64  # a different kernel source\n"
            "try:\n    L.load_library()\nexcept L.StaleLibraryError as e:\n    print('STALE', e); sys.exit(0)\n"
            "sys.exit(1)\n")
    env = {"DTK_AOT_DIR": str(stale), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "rebuild with `python -m decode_topk.kernel.aot`" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_backend_takes_a_matching_library_and_passes_over_a_stale_one(built, monkeypatch):
    import decode_topk.kernel.torch_ops as ops

    out, _ = built
    monkeypatch.delenv(ops.BACKEND_VARIABLE, raising=False)
    monkeypatch.setenv("DECODE_TOPK_AOT_DIR", str(out.parent))
    monkeypatch.setattr(aot_loader, "_LIB", None)
    ops._backend.cache_clear()
    try:
        assert ops.backend() == "aot"
        monkeypatch.setattr(aot_loader, "_LIB", None)
        monkeypatch.setattr(aot_loader, "kernel_source_sha256", lambda: "0" * 64)
        ops._backend.cache_clear()
        with pytest.warns(UserWarning, match="DecodeTopK runs on the DSL: the AOT library cannot be used: stale"):
            assert ops.backend() == "dsl"
    finally:
        ops._backend.cache_clear()
