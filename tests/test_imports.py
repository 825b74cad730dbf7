"""Importing the contract layer must not import torch or cutlass, because CPU-only users
and the conformance suite must not need them."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "cutlass", "cuda")


@pytest.mark.parametrize("module", ["decode_topk", "decode_topk.reference", "decode_topk.conformance", "decode_topk.conformance.__main__", "decode_topk.kernel"])
def test_import_is_light(module):
    code = (f"import sys, {module}\n"
            f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
            "print(heavy)\n"
            "sys.exit(1 if heavy else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"importing {module} imported {result.stdout.strip()} {result.stderr[-2000:]}"

