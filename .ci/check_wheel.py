"""Check a built decode-topk wheel's contents; print its file list.

    python .ci/check_wheel.py dist/decode_topk-*.whl                    # a pure wheel: no libraries
    python .ci/check_wheel.py dist/decode_topk-*.whl --arch sm_90a sm_100a  # the AOT wheel

Every wheel: the package's modules, SPEC.md, LICENSE and NOTICE (in the package and as the
distribution's license files), py.typed, the three console scripts, nothing from the
repository that is not the package (tests, bench, docs, setup.py). With --arch: for each
arch, kernel/aot/<arch>/libdecode_topk.so and its MANIFEST.json, the manifest's arch that
one, the library's compiled-in arch and kernel hash (read through ctypes: no GPU needed)
equal to the manifest's and to the kernel source's (aot_loader.kernel_source_sha256), and
a platform tag (py3-none-manylinux_*); without, no library and the tag py3-none-any.
Exit 1 with one line a problem.
"""

import argparse
import ctypes
import json
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE_FILES = ("__init__.py", "SPEC.md", "LICENSE", "NOTICE", "py.typed", "reference/topk.py",
                 "reference/model.py", "reference/mutants.py", "conformance/__main__.py", "conformance/checker.py",
                 "conformance/contract.py", "conformance/gpu_impl.py", "kernel/policy.py", "kernel/vendor.py",
                 "kernel/decode_topk_cute.py", "kernel/aot.py", "kernel/aot_loader.py", "kernel/torch_ops.py")
SCRIPTS = ("decode-topk-conformance", "decode-topk-mutation", "decode-topk-aot")
NOT_PACKAGE = ("decode_topk/tests/", "decode_topk/bench/", "decode_topk/docs/", "decode_topk/setup.py",
               "decode_topk/.ci/", "decode_topk/kernel/aot/.gitignore")


def library_facts(data: bytes):
    """(arch, kernel source sha256) compiled into a libdecode_topk.so."""
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(data)
        f.flush()
        lib = ctypes.CDLL(f.name)
        lib.dtk_arch.restype = lib.dtk_kernel_source_sha256.restype = ctypes.c_char_p
        return lib.dtk_arch().decode(), lib.dtk_kernel_source_sha256().decode()


def check(wheel: Path, archs) -> list:
    problems = []
    z = zipfile.ZipFile(wheel)
    names = set(z.namelist())
    dist_info = next((n.split("/")[0] for n in names if n.endswith(".dist-info/WHEEL")), None)
    if dist_info is None:
        return [f"{wheel}: no .dist-info/WHEEL"]
    problems += [f"missing decode_topk/{f}" for f in PACKAGE_FILES if f"decode_topk/{f}" not in names]
    problems += [f"missing {dist_info}/licenses/{f}" for f in ("LICENSE", "NOTICE")
                 if f"{dist_info}/licenses/{f}" not in names]
    entry_points = z.read(f"{dist_info}/entry_points.txt").decode() if f"{dist_info}/entry_points.txt" in names else ""
    problems += [f"no console script {s}" for s in SCRIPTS if f"{s} =" not in entry_points]
    problems += [f"not of the package: {n}" for n in sorted(names) if n.startswith(NOT_PACKAGE)]
    tag = next(line.split(": ", 1)[1] for line in z.read(f"{dist_info}/WHEEL").decode().splitlines()
               if line.startswith("Tag: "))
    libraries = sorted(n for n in names if n.endswith(".so"))
    if not archs:
        if tag != "py3-none-any":
            problems.append(f"a wheel without libraries is tagged {tag}, not py3-none-any")
        problems += [f"unexpected library {n}" for n in libraries]
        return problems
    if not tag.startswith("py3-none-manylinux_"):
        problems.append(f"a wheel with libraries is tagged {tag}, not py3-none-manylinux_*")
    from decode_topk.kernel.aot_loader import kernel_source_sha256

    expected = kernel_source_sha256()
    for arch in archs:
        folder = f"decode_topk/kernel/aot/{arch}"
        lib, manifest = f"{folder}/libdecode_topk.so", f"{folder}/MANIFEST.json"
        if lib not in names or manifest not in names:
            problems += [f"missing {n}" for n in (lib, manifest) if n not in names]
            continue
        m = json.loads(z.read(manifest))
        built_arch, built_sha = library_facts(z.read(lib))
        if m.get("arch") != arch or built_arch != arch:
            problems.append(f"{arch}: manifest arch {m.get('arch')!r}, library arch {built_arch!r}")
        if not m.get("kernel_source_sha256") == built_sha == expected:
            problems.append(f"{arch}: manifest sha256 {str(m.get('kernel_source_sha256'))[:12]}, library "
                            f"{built_sha[:12]}, kernel source {expected[:12]}")
    problems += [f"unexpected library {n}" for n in libraries
                 if not any(n == f"decode_topk/kernel/aot/{a}/libdecode_topk.so" for a in archs)]
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path, help="the .whl file")
    ap.add_argument("--arch", nargs="*", default=[], help="the archs whose libraries it must carry (none: pure)")
    args = ap.parse_args(argv)
    with zipfile.ZipFile(args.wheel) as z:
        print(f"{args.wheel.name}:")
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            print(f"  {info.file_size:>10}  {info.filename}")
    problems = check(args.wheel, args.arch)
    for p in problems:
        print(f"check_wheel: {p}", file=sys.stderr)
    print(f"check_wheel: {'FAIL' if problems else 'ok'}: {args.wheel.name}"
          + (f" carries {', '.join(args.arch)}" if args.arch else " (pure)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
