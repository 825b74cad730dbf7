"""The wheel as a user gets it: built from the files a fresh clone has (a pure wheel, no
AOT library), checked by .ci/check_wheel.py, installed into a fresh venv
(--system-site-packages, so numpy, numba and torch come from this environment; the wheel
itself with --no-deps), then used from a folder outside the repository: the namespace
imports, SPEC.md inside the installed package, the reference's conformance suite and the
console script. Nothing of the checkout may be imported.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import importlib.util, json, sys
import decode_topk, decode_topk.reference, decode_topk.conformance
names = ["decode_topk", "decode_topk.reference", "decode_topk.conformance"]
if importlib.util.find_spec("decode_topk.kernel.policy") is not None:
    import decode_topk.kernel.policy
    names.append("decode_topk.kernel.policy")
from decode_topk.kernel import aot_loader
print(json.dumps({
    "files": {n: sys.modules[n].__file__ for n in names},
    "modules": sorted(str(getattr(m, "__file__", None)) for m in list(sys.modules.values())
                      if getattr(m, "__file__", None) and m.__name__.startswith("decode_topk")),
    "spec": str(decode_topk.spec_path()), "spec_exists": decode_topk.spec_path().is_file(),
    "aot_default": str(aot_loader.default_aot_dir("sm_90a")),
}))
"""


def _clean_copy(dest: Path) -> Path:
    """The working tree as a fresh clone of it would have it: tracked and untracked files
    that git does not ignore (no kernel/aot/ libraries, no build/, no egg-info)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():  # a file deleted in the working tree stays listed until committed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _run(cmd, cwd, env, timeout=300):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know which files a clone has")
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DECODE_TOPK_AOT_DIR", "DTK_AOT_DIR")}
    src = _clean_copy(tmp / "src")
    # No build isolation: the setuptools here builds it, offline and in a few seconds.
    _run([sys.executable, "-m", "pip", "wheel", src, "--no-deps", "--no-build-isolation", "-w", tmp / "dist", "-q"],
         tmp, env)
    (wheel,) = (tmp / "dist").glob("decode_topk-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], tmp, env)
    python = venv / "bin" / "python"
    # This environment's pip, run by the venv's python, installs into the venv.
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], tmp, env)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return {"wheel": wheel, "venv": venv.resolve(), "python": python, "cwd": elsewhere, "env": env}


def test_the_wheel_holds_what_it_should(installed):
    out = _run([sys.executable, ROOT / ".ci" / "check_wheel.py", installed["wheel"]], installed["cwd"],
               installed["env"])
    assert out.rstrip().endswith("(pure)"), out[-500:]


def test_imports_come_from_the_venv_only(installed):
    facts = json.loads(_run([installed["python"], "-c", PROBE], installed["cwd"], installed["env"]))
    venv = str(installed["venv"])
    for name, file in facts["files"].items():
        assert file.startswith(venv), f"{name} imported from {file}, not the venv"
    checkout = [m for m in facts["modules"] if m.startswith(str(ROOT) + os.sep)]
    assert not checkout, f"imported from the checkout: {checkout}"
    assert facts["spec_exists"] and facts["spec"].startswith(venv), facts["spec"]
    # The AOT library's place is the installed package's own folder.
    assert facts["aot_default"].startswith(venv) and facts["aot_default"].endswith("decode_topk/kernel/aot/sm_90a")


def test_the_reference_passes_the_suite_from_the_wheel(installed):
    out = _run([installed["python"], "-m", "decode_topk.conformance", "--impl", "reference", "--level", "ci"],
               installed["cwd"], installed["env"], timeout=900)
    assert "reference" in out


def test_console_scripts(installed):
    out = _run([installed["venv"] / "bin" / "decode-topk-conformance", "--help"], installed["cwd"], installed["env"])
    assert "--impl" in out and "--level" in out
    out = _run([installed["venv"] / "bin" / "decode-topk-aot", "--help"], installed["cwd"], installed["env"])
    assert "--arch" in out
