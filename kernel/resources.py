"""Per-variant GPU resources of DecodeTopK, read without a GPU (cutedsl-notes section 12).

For every compiled variant: registers, local memory (stack frame and spills) and the
launch's shared memory, from three independent sources:

- the cubin's ELF `.nv.info` section (REGCOUNT, FRAME_SIZE, MIN/MAX_STACK_SIZE),
- the bundled ptxas's `-v` report (`remarks{ptx}`: registers, stack frame, spill bytes),
- the host IR's launch configuration (`cudaLaunchConfig_t.dynamicSmemBytes`, blockDim).

Compiling is done in worker processes, because the DSL reads `CUTE_DSL_ARCH`,
`CUTE_DSL_KEEP` and `CUTE_DSL_COMPILER_OPT` once per process: each worker sets them
before it imports the kernel module, so one worker compiles for one architecture.
`kernel/aot.py` uses the same workers to export the variants.

    python -m decode_topk.kernel.resources [--arch sm_90a sm_100a] [--jobs 2] [--json build/resources.json]

prints the table and exits non-zero when any variant uses local memory (spills or a
stack frame).
"""

from __future__ import annotations

import argparse
import hashlib
import concurrent.futures as cf
import contextlib
import importlib
import importlib.util
import json
import multiprocessing
import os
import re
import struct
import sys
import tempfile
import time
from pathlib import Path

KERNEL_MODULE = "decode_topk.kernel.decode_topk_cute"
ARCHS = ("sm_90a", "sm_100a")

# ---------------------------------------------------------------------------------------
# Pure parsers (no DSL): cubin ELF, ptxas report, host IR
# ---------------------------------------------------------------------------------------
# .nv.info attribute codes (EIATTR_*) and formats (EIFMT_*), as in cuobjdump -elf.
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR = {0x2F: "regs", 0x11: "frame", 0x12: "min_stack", 0x23: "max_stack"}


def _elf_sections(elf: bytes):
    """(name, bytes) of every section of a 64-bit little-endian ELF."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF (cubin)")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = []
    for i in range(shnum):
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
        heads.append((name, off, size))
    _, stroff, strsize = heads[shstrndx]
    strtab = elf[stroff:stroff + strsize]
    for name, off, size in heads:
        end = strtab.index(b"\0", name)
        yield strtab[name:end].decode(), elf[off:off + size]


def _elf_symbols(elf: bytes):
    """Symbol index -> name, from .symtab/.strtab."""
    secs = dict(_elf_sections(elf))
    symtab, strtab = secs.get(".symtab", b""), secs.get(".strtab", b"")
    names = {}
    for i in range(len(symtab) // 24):
        name, = struct.unpack_from("<I", symtab, i * 24)
        names[i] = strtab[name:strtab.index(b"\0", name)].decode() if name else ""
    return names


def cubin_resources(cubin: bytes) -> dict:
    """{kernel: {"regs", "frame", "min_stack", "max_stack"}} from a cubin's .nv.info
    sections (REGCOUNT etc. are keyed by the kernel's symbol index)."""
    symbols = _elf_symbols(cubin)
    out: dict = {}
    for name, data in _elf_sections(cubin):
        if not name.startswith(".nv.info"):
            continue
        i = 0
        while i + 2 <= len(data):
            fmt, attr = data[i], data[i + 1]
            if fmt == _EIFMT_SVAL:
                size, = struct.unpack_from("<H", data, i + 2)
                payload = data[i + 4:i + 4 + size]
                i += 4 + size
                if attr in _EIATTR and size == 8:
                    sym, value = struct.unpack("<II", payload)
                    out.setdefault(symbols.get(sym, f"sym{sym}"), {})[_EIATTR[attr]] = value
            elif fmt == _EIFMT_HVAL:
                i += 4
            elif fmt == _EIFMT_BVAL:
                i += 4  # one byte value, padded to 4 (format, attr, value, pad)
            elif fmt == _EIFMT_NVAL:
                i += 4
            else:
                break  # unknown format: stop rather than misparse
    return out


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_ptxas(text: str) -> dict:
    """{kernel: {"regs", "stack_frame", "spill_stores", "spill_loads"}} from ptxas -v.

    The DSL prints the report plainly, or (when ptxas reports spills) wrapped and indented
    inside a remark, so the text is flattened to single spaces first and each entry
    function's section runs to the next one."""
    flat = " ".join(_ANSI.sub("", text).split())
    entries = list(_PTXAS_ENTRY.finditer(flat))
    out: dict = {}
    for i, m in enumerate(entries):
        section = flat[m.end():entries[i + 1].start() if i + 1 < len(entries) else len(flat)]
        info = out.setdefault(m.group(1), {})
        f = _PTXAS_FRAME.search(section)
        if f:
            info.update(stack_frame=int(f.group(1)), spill_stores=int(f.group(2)), spill_loads=int(f.group(3)))
        r = _PTXAS_REGS.search(section)
        if r:
            info["regs"] = int(r.group(1))
    return out


_LAUNCH_STRUCT = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"


def launch_config(host_ir: str) -> dict:
    """{"smem": dynamic smem bytes, "block": [x, y, z]} of the (single) cudaLaunchKernelEx
    in the host IR, read from the stores into its cudaLaunchConfig_t (field 1 = blockDim,
    field 2 = dynamicSmemBytes). Values that are not compile-time constants are None."""
    consts = {}
    for m in re.finditer(r"(%\w+) = llvm\.mlir\.constant\((-?\d+) : i(?:32|64)\)", host_ir):
        consts[m.group(1)] = int(m.group(2))
    geps = {}
    for m in re.finditer(r"(%\w+) = llvm\.getelementptr %\w+\[([\d, ]+)\] : \(!llvm\.ptr\) -> !llvm\.ptr, "
                         + re.escape(_LAUNCH_STRUCT), host_ir):
        geps[m.group(1)] = tuple(int(x) for x in m.group(2).split(","))
    found: dict = {}
    for m in re.finditer(r"llvm\.store (%\w+), (%\w+) : i(?:32|64), !llvm\.ptr", host_ir):
        path = geps.get(m.group(2))
        if path is None:
            continue
        found.setdefault(path, []).append(consts.get(m.group(1)))
    def one(path):
        values = found.get(path, [])
        return values[0] if len(set(values)) == 1 else None
    return {"smem": one((0, 2)), "block": [one((0, 1, 0)), one((0, 1, 1)), one((0, 1, 2))],
            "launches": host_ir.count("@_cudaLaunchKernelEx(")}


# ---------------------------------------------------------------------------------------
# Workers (import the DSL)
# ---------------------------------------------------------------------------------------
_STATE: dict = {}


def load_kernel_module(spec: str):
    """The kernel module: a dotted name (default kernel.decode_topk_cute) or a .py path
    (a stand-in with the same API, for testing the pipeline)."""
    if spec.endswith(".py"):
        path = Path(spec).resolve()
        mspec = importlib.util.spec_from_file_location("dtk_kernel_under_test", path)
        module = importlib.util.module_from_spec(mspec)
        sys.modules["dtk_kernel_under_test"] = module
        mspec.loader.exec_module(module)
        return module
    return importlib.import_module(spec)


def kernel_source(spec: str) -> Path:
    if spec.endswith(".py"):
        return Path(spec).resolve()
    found = importlib.util.find_spec(spec)
    return Path(found.origin)


def worker_init(arch: str, module_spec: str, dump_root: str):
    """Set the per-process DSL environment, then import the DSL and the kernel."""
    dump = tempfile.mkdtemp(prefix=f"dump_{os.getpid()}_", dir=dump_root)
    os.environ["CUTE_DSL_ARCH"] = arch
    os.environ["CUTE_DSL_KEEP"] = "ptx,cubin"
    os.environ["CUTE_DSL_DUMP_DIR"] = dump
    opt = os.environ.get("CUTE_DSL_COMPILER_OPT", "")
    if "remarks{ptx}" not in opt:
        os.environ["CUTE_DSL_COMPILER_OPT"] = (opt + " remarks{ptx}").strip()
    _STATE.update(arch=arch, module=load_kernel_module(module_spec), dump=dump)


@contextlib.contextmanager
def _capture_fd2(path: str):
    """Redirect file descriptor 2 (C and Python stderr) into path."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "wb") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(")


# PTX instructions whose count a variant's row records (`ptx_ops`), for the checks that
# the code takes the form SPEC.md describes (tests/test_kernel_compile.py).
PTX_COUNTED = ("cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group")


def ptx_digest(ptx: str) -> str:
    """SHA-256 of the PTX with each kernel entry's name replaced by `ENTRY<i>`: the DSL
    spells the defining module's dotted path into the name (`...kerneldecode_topk_cute
    DecodeTopK...` for kernel.decode_topk_cute) and cuts long names short, so two builds of
    the same device code from modules of different names digest alike, and any other
    byte differs."""
    for i, name in enumerate(dict.fromkeys(_ENTRY.findall(ptx))):
        ptx = ptx.replace(name, f"ENTRY{i}")
    return hashlib.sha256(ptx.encode()).hexdigest()


def worker_compile(variant, export_dir=None) -> dict:
    """Compile one Variant in this worker; read its resources; export it to C into
    export_dir if given. The row's "variant" is [k, cluster, vectors, block_mode, trace]
    (the AOT manifest's spelling)."""
    k, build, block_mode, trace = variant
    cluster, vectors = build.cluster, build.vectors
    module, arch = _STATE["module"], _STATE["arch"]
    name = variant.name
    flat = [k, cluster, vectors, bool(block_mode), bool(trace)]
    log = os.path.join(_STATE["dump"], name + ".stderr")
    t0 = time.perf_counter()
    try:
        with _capture_fd2(log):
            compiled = module.compile_decode_topk(k, cluster, vectors, bool(block_mode), trace=bool(trace),
                                                  arch=arch)
    except BaseException as e:  # noqa: BLE001 - report any failure with its log
        text = Path(log).read_text(errors="replace")[-4000:]
        return {"name": name, "variant": flat, "arch": arch, "error": f"{type(e).__name__}: {e}",
                "log": text}
    seconds = time.perf_counter() - t0
    text = Path(log).read_text(errors="replace")
    kernels = list(getattr(compiled, "kernel_info", {}) or {})
    cubin = compiled.artifacts.CUBIN
    info = cubin_resources(cubin) if isinstance(cubin, (bytes, bytearray)) else {}
    ptxas = parse_ptxas(text)
    launch = launch_config(str(compiled.ir_module))
    arch_ok = isinstance(cubin, (bytes, bytearray)) and f"-arch {arch}".encode() in cubin
    row = {"name": name, "variant": flat, "arch": arch, "compile_s": round(seconds, 3),
           "kernels": kernels, "cubin_bytes": len(cubin) if isinstance(cubin, (bytes, bytearray)) else None,
           "cubin_arch_ok": arch_ok, "nv_info": info, "ptxas": ptxas, "smem": launch["smem"],
           "block": launch["block"]}
    kinfo = info.get(kernels[0], {}) if kernels else (next(iter(info.values()), {}) if info else {})
    pinfo = ptxas.get(kernels[0], {}) if kernels else (next(iter(ptxas.values()), {}) if ptxas else {})
    row.update(regs=kinfo.get("regs", pinfo.get("regs")), frame=kinfo.get("frame"),
               stack_frame=pinfo.get("stack_frame"), spill_stores=pinfo.get("spill_stores"),
               spill_loads=pinfo.get("spill_loads"))
    ptx = compiled.artifacts.PTX
    if isinstance(ptx, str):
        row["ptx_sha256"] = ptx_digest(ptx)
        row["ptx_ops"] = {op: ptx.count(op) for op in PTX_COUNTED}
    row["local_bytes"] = max((row[f] or 0) for f in ("frame", "stack_frame", "spill_stores", "spill_loads"))
    if export_dir is not None:
        compiled.export_to_c(str(export_dir), name, function_prefix=name)
        row["exported"] = True
    return row


def compile_all(variants, arch, module_spec=KERNEL_MODULE, jobs=2, export_dir=None, progress=True):
    """Compile (and optionally export) variants for one arch with `jobs` worker processes;
    returns the rows in the order given."""
    dump_root = tempfile.mkdtemp(prefix="dtk_dump_")
    ctx = multiprocessing.get_context("spawn")
    rows = [None] * len(variants)
    with cf.ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=ctx, initializer=worker_init,
                                initargs=(arch, module_spec, dump_root)) as pool:
        futures = {pool.submit(worker_compile, v, export_dir): i for i, v in enumerate(variants)}
        for fut in cf.as_completed(futures):
            row = fut.result()
            rows[futures[fut]] = row
            if progress:
                status = row.get("error") or f"{row['compile_s']:.1f}s regs={row['regs']} local={row['local_bytes']}"
                print(f"  [{arch}] {row['name']}: {status}", file=sys.stderr, flush=True)
    return rows


def all_variants(module_spec=KERNEL_MODULE, trace=(False,)):
    """Every Variant the module builds with each trace setting given: the module's
    variants(traces) (imports the DSL in this process)."""
    return load_kernel_module(module_spec).variants(tuple(trace))


def format_table(rows) -> str:
    head = ("arch", "variant", "regs", "frame", "spill st/ld", "smem B", "block", "compile s", "status")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['arch']} | {r['name']} | | | | | | | ERROR {r['error'][:80]} |")
            continue
        status = "ok" if r["local_bytes"] == 0 and r["cubin_arch_ok"] else (
            "LOCAL MEMORY" if r["local_bytes"] else "ARCH?")
        lines.append(f"| {r['arch']} | {r['name']} | {r['regs']} | {r['frame']} | "
                     f"{r['spill_stores']}/{r['spill_loads']} | {r['smem']} | {r['block'][0]} | "
                     f"{r['compile_s']} | {status} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", nargs="+", default=list(ARCHS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--module", default=KERNEL_MODULE, help="kernel module (dotted) or a .py path")
    ap.add_argument("--trace", action="store_true", help="also every variant with the trace compiled in")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument("--ptx-digests", default=None, metavar="FILE",
                    help="write {variant@arch: normalised PTX SHA-256} here (ptx_digest)")
    ap.add_argument("--same-ptx-as", default=None, metavar="FILE",
                    help="exit 1 unless every variant's PTX digest equals the one in FILE (a --ptx-digests "
                         "file of an earlier build): device code byte-identical but for the entry name")
    args = ap.parse_args(argv)
    variants = all_variants(args.module, trace=(False, True) if args.trace else (False,))
    rows = []
    t0 = time.perf_counter()
    for arch in args.arch:
        rows += compile_all(variants, arch, args.module, args.jobs)
    wall = time.perf_counter() - t0
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(format_table(rows))
    print(f"\n{len(rows)} compiles in {wall:.1f} s wall ({args.jobs} jobs)")
    digests = {f"{r['name']}@{r['arch']}": r.get("ptx_sha256") for r in rows}
    if args.ptx_digests:
        Path(args.ptx_digests).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    if args.same_ptx_as:
        before = json.loads(Path(args.same_ptx_as).read_text())
        names = set(before) | set(digests)  # a variant new or gone counts as differing
        differ = sorted(name for name in names if before.get(name) != digests.get(name))
        print(f"PTX: {len(names) - len(differ)} of {len(names)} variants identical to "
              f"{args.same_ptx_as}" + (": differ " + ", ".join(differ) if differ else ""))
        if differ:
            return 1
    bad = [r["name"] + "@" + r["arch"] for r in rows if r.get("error") or r["local_bytes"] or not r["cubin_arch_ok"]]
    if bad:
        print("FAILED (error, local memory or wrong arch): " + ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
