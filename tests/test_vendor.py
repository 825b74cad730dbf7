"""The single-file vendorable kernel (kernel/vendor.py): generated from decode_topk_cute.py
and policy.py, importing only the standard library, cutlass, torch and cuda-python, and
the same module an engine gets (it imports cleanly on its own and exposes the API)."""

import subprocess
import sys

import pytest

from decode_topk.kernel import vendor

KERNEL_TEXT = vendor.KERNEL.read_text()
POLICY_TEXT = vendor.POLICY.read_text()


def test_bundle_inlines_the_policy_once():
    text = vendor.bundle_source()
    assert "from .policy import" not in text
    assert text.count("def check_inputs(") == 1 and text.count("class Build(") == 1
    assert text.count("class DecodeTopK:") == 1
    assert vendor.bundle_source() == text, "generation must be deterministic"
    assert vendor.bundle_sha256() == vendor.bundle_sha256(text)


def test_bundle_imports_only_what_a_vendored_file_may():
    vendor.check_imports(vendor.bundle_source())


@pytest.mark.parametrize("planted", [
    "import numpy as np\n",                      # a dependency an engine may not have
    "from decode_topk.kernel import policy\n",   # the package itself
    "def f():\n    from . import policy\n",      # a relative import, even inside a function
])
def test_import_check_refuses_anything_else(planted):
    policy = POLICY_TEXT.replace("import typing\n", "import typing\n" + planted, 1)
    with pytest.raises(ValueError, match="imports beyond"):
        vendor.check_imports(vendor.bundle_source(policy_text=policy))


def test_marker_is_required():
    with pytest.raises(ValueError, match="marker"):
        vendor.bundle_source(kernel_text=KERNEL_TEXT.replace(vendor.MARKER, ""))
    with pytest.raises(ValueError, match="from .policy import"):  # code between marker and import
        vendor.bundle_source(kernel_text=KERNEL_TEXT.replace(vendor.MARKER, vendor.MARKER + "X = 1\n"))


def test_cli_writes_and_checks(tmp_path):
    out = tmp_path / "vendored"
    run = [sys.executable, "-m", "decode_topk.kernel.vendor"]
    assert subprocess.run(run + ["--out", str(out)], capture_output=True, text=True, timeout=120).returncode == 0
    path = out / vendor.BUNDLE_NAME
    assert path.read_text() == vendor.bundle_source()
    ok = subprocess.run(run + ["--check", str(path)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    path.write_text(path.read_text().replace("SAMPLES = 2048", "SAMPLES = 1024"))  # a stale copy
    stale = subprocess.run(run + ["--check", str(path)], capture_output=True, text=True, timeout=120)
    assert stale.returncode == 1 and "stale" in stale.stdout
    missing = subprocess.run(run + ["--check", str(tmp_path / "nope.py")], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_bundle_imports_alone(tmp_path):
    """The bundle as an engine has it: a top-level module in a folder of its own, with no
    decode_topk package importable."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
    vendor.write(tmp_path)
    code = ("import sys\n"
            "sys.meta_path.insert(0, type('Block', (), {'find_spec': staticmethod(lambda name, *a: "
            "(_ for _ in ()).throw(ImportError(name)) if name.split('.')[0] == 'decode_topk' else None)})())\n"
            "import decode_topk_cute as d\n"
            "assert d.Build.parse('16x512x16').capacity == 1048576\n"
            "assert d.build_for(1, 131072, lambda b: 15).name == '8x512x8'\n"
            "assert len(d.variants()) == 3 * sum(len(b.modes) for b in d.BUILDS) and callable(d.decode_topk)\n"
            "assert callable(d.precompile) and d.make_decode_topk(512, 1, 2, False).threads == 512\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'decode_topk'))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"
