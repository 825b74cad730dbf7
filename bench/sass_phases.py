"""What the passes cost in instructions, read on the CPU machine: the profile build's SASS cut
at its phase stamps.

    pip download --no-deps nvidia-cuda-nvdisasm -d /tmp/nvd   # once (not a dependency)
    python bench/sass_phases.py K CLUSTER VECTORS [--block] [--arch sm_90a] [--nvdisasm PATH]

Why: on the H200 the short rows' passes are bound by the instructions they issue (bench/
NOTES.md sessions 7 and 8), and device time is scarce, so a change to a pass can be judged
first by what ptxas makes of it. The profile build (`DecodeTopK(..., profile=True)`) reads
%clock at every PROFILE_STAMPS point (`CS2R.32 R, SR_CLOCKLO` in the SASS); this compiles
it for `--arch` without a GPU (the DSL compiles on the CPU), disassembles its cubin with
`nvdisasm -c` and prints, for each stretch between two clock reads in listing order, its
instruction count and the opcodes that tell a pass's cost: atomics (`ATOMS`), reconvergence
(`BSSY`), barriers (`BAR`), shuffles and warp reductions, shared loads and global stores.
The stretches are in code order, not time order: a loop's body is counted once, and the
sampled and direct paths each have their own (bench/NOTES.md session 8 used it to see
ptxas turn each predicated `red.shared` into a branch).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OPCODES = ("ATOMS", "BSSY", "BAR", "SHFL", "REDUX", "LDS", "STS", "STG", "P2R", "R2P")
NVD_ROOT = Path("/tmp/nvd")  # where this docstring's first command unpacks the pip package
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_.]*)")


def stretches(sass: str):
    """[(instructions, {opcode: count})] of the stretches between clock reads of a SASS
    listing (nvdisasm -c): the first stretch ends at the first clock read."""
    out = [[0, {}]]
    for line in sass.splitlines():
        match = _INSTRUCTION.search(line)
        if not match:
            continue
        stretch = out[-1]
        stretch[0] += 1
        base = match.group(1).split(".")[0]
        if base in OPCODES:
            stretch[1][base] = stretch[1].get(base, 0) + 1
        if "SR_CLOCKLO" in line:
            out.append([0, {}])
    return [tuple(stretch) for stretch in out]


def find_nvdisasm(given=None):
    """nvdisasm: --nvdisasm, $NVDISASM, PATH, or the pip package nvidia-cuda-nvdisasm
    unpacked under /tmp/nvd (this docstring's first command, then `python -m zipfile -e`)."""
    for candidate in (given, os.environ.get("NVDISASM"), shutil.which("nvdisasm"),
                      *map(str, NVD_ROOT.glob("**/bin/nvdisasm"))):
        if candidate and Path(candidate).is_file():
            return candidate
    raise SystemExit("sass_phases.py: no nvdisasm (pip download --no-deps nvidia-cuda-nvdisasm -d /tmp/nvd, "
                     "unzip the wheel there, or pass --nvdisasm PATH)")


def profile_cubin(k, cluster, vectors, block_mode, arch):
    """The profile build's cubin, compiled for arch without a GPU."""
    os.environ["CUTE_DSL_ARCH"] = arch
    os.environ["CUTE_DSL_KEEP"] = "cubin"
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", tempfile.mkdtemp(prefix="sass_phases_"))
    import cutlass.cute as cute

    from decode_topk.kernel import decode_topk_cute as dtk

    topk = dtk.make_decode_topk(k, cluster, vectors, block_mode, profile=True)
    compiled = cute.compile(topk, *dtk.fake_arguments(k, topk.trace_width), options=f"--gpu-arch {arch}")
    return compiled.artifacts.CUBIN


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("k", type=int)
    parser.add_argument("cluster", type=int)
    parser.add_argument("vectors", type=int)
    parser.add_argument("--block", action="store_true", help="block mode")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--nvdisasm", help="path of nvdisasm")
    parser.add_argument("--save", help="also write the SASS listing here")
    args = parser.parse_args(argv)
    tool = find_nvdisasm(args.nvdisasm)
    with tempfile.TemporaryDirectory() as work:
        cubin = Path(work) / "kernel.cubin"
        cubin.write_bytes(profile_cubin(args.k, args.cluster, args.vectors, args.block, args.arch))
        sass = subprocess.run([tool, "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    if args.save:
        Path(args.save).write_text(sass)
    rows = stretches(sass)
    from decode_topk.kernel.policy import Build  # DSL-free

    print(f"k {args.k} build {Build.of(args.cluster, args.vectors).name} "
          f"{'block' if args.block else 'token'} {args.arch}: {sum(n for n, _ in rows)} instructions, "
          f"{len(rows) - 1} clock reads")
    print("| stretch | instructions | " + " | ".join(OPCODES) + " |")
    print("|---|---|" + "---|" * len(OPCODES))
    for i, (count, ops) in enumerate(rows):
        print(f"| {i} | {count} | " + " | ".join(str(ops.get(op, 0)) for op in OPCODES) + " |")


if __name__ == "__main__":
    sys.exit(main())
