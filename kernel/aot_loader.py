"""DecodeTopK through the ahead-of-time library (`python -m decode_topk.kernel.aot`), without the DSL.

Imports only ctypes, torch and the DSL-free `policy` (the launch policy, the input checks
and the host front end the DSL module shares), so it runs where cutlass is not installed
(the H200 runner). The library, one per GPU arch, is package data:
`decode_topk/kernel/aot/<arch>/libdecode_topk.so` (sm_90a on compute capability 9.0,
sm_100a on 10.0; `python -m decode_topk.kernel.aot --arch ARCH` writes it there, a platform
wheel ships it), or `$DECODE_TOPK_AOT_DIR/<arch>/` or `$DECODE_TOPK_AOT_DIR/` itself
(`DTK_AOT_DIR`: the old name of that variable); `aot_dirs()` lists the folders searched.

    from .aot_loader import decode_topk_aot
    out = decode_topk_aot(logits, lengths, k)                      # token mode
    out, trace = decode_topk_aot(logits, lengths, k, trace=True)   # with the SPEC 2.11 trace

The library refuses to load when its kernel source hash (compiled in) differs from
`kernel_source_sha256()`, the SHA-256 of the kernel's vendorable bundle here: rebuild with
`python -m decode_topk.kernel.aot`.
(`DTK_AOT_ALLOW_STALE=1` turns that into a warning, for pipeline tests with a stand-in.)
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import threading
import warnings
from pathlib import Path

import torch

from . import policy
from .policy import TRACE_FIELDS, Build, Variant

LIBRARY = "libdecode_topk.so"
MANIFEST = "MANIFEST.json"
DTK_NO_VARIANT, DTK_NO_SMEM, DTK_LOAD_FAILED, DTK_BAD_NEXT_N = -1, -2, -3, -4

# Resident clusters when the library cannot answer the occupancy query (DTK_NO_SMEM or an
# error): the H200's max active clusters at 128 KB of dynamic shared memory a CTA
# (../shared/gpu/README.md), the lowest of the measured columns. Conservative, because a
# smaller count only makes build_for choose 4x1024 (or 8x512x16 over 16x512x16) earlier
# (still correct, maybe slower) and makes the 16-CTA build refuse rows sooner. A build not
# listed counts 1 cluster.
CONSERVATIVE_RESIDENT = {Build.of(8, 8): 15, Build.of(4, 8): 30, Build.of(8, 16): 15, Build.of(16, 16): 7}


class StaleLibraryError(RuntimeError):
    """The AOT library does not fit: built from a different kernel source, or for another
    GPU architecture than the device's."""


# ---------------------------------------------------------------------------------------
# Where the library is. One library per GPU architecture, because the kernels use the
# arch-specific features of sm_90a / sm_100a, whose cubins run on exactly that compute
# capability. Shipped as package data (kernel/aot/<arch>/, what `python -m
# decode_topk.kernel.aot --arch ARCH` writes and a platform wheel carries), or anywhere
# $DECODE_TOPK_AOT_DIR points.
# ---------------------------------------------------------------------------------------
PACKAGE_AOT = Path(__file__).resolve().parent / "aot"
AOT_DIR_VARIABLES = ("DECODE_TOPK_AOT_DIR", "DTK_AOT_DIR")  # the second: the old name, still honoured
ARCH_OF_CAPABILITY = {(9, 0): "sm_90a", (10, 0): "sm_100a"}
ARCHS = tuple(ARCH_OF_CAPABILITY.values())


def kernel_source_sha256() -> str:
    """The SHA-256 a library must carry to be loaded: that of the kernel this package
    runs, as its one-file vendorable bundle (kernel/vendor.py: decode_topk_cute.py with
    policy.py inlined, so a change to either makes a built library stale). kernel/aot.py
    stamps libraries with this same function, so what is built and what is expected
    cannot drift apart."""
    from .vendor import bundle_sha256  # stdlib only: no DSL

    return bundle_sha256()


def no_cuda_device_reason():
    """None when torch sees a CUDA device, else one line saying why not (for the GPU tools'
    and the op's errors)."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"no CUDA device: torch {torch.__version__} is a CPU-only build"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else " (no GPU, or no NVIDIA driver)"
    return f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) sees none{hint}"


def device_arch(device=None):
    """The library arch of a CUDA device (default: the current one), e.g. 'sm_90a' for
    compute capability 9.0; None without a CUDA device or for a device no library is
    built for (loading then says which)."""
    if not torch.cuda.is_available():
        return None
    return ARCH_OF_CAPABILITY.get(tuple(torch.cuda.get_device_capability(device)))


def _aot_dir_variable():
    """(name, folder) of the first of AOT_DIR_VARIABLES that is set and non-empty, else None."""
    for name in AOT_DIR_VARIABLES:
        if os.environ.get(name):
            return name, Path(os.environ[name])
    return None


def aot_dirs(arch=None) -> list:
    """The folders searched for libdecode_topk.so, in order, for arch (default: the
    current device's; without a device, or on one no library is built for, every arch in
    turn): with $DECODE_TOPK_AOT_DIR (or $DTK_AOT_DIR) set, its <arch>/ subfolder, then
    the folder itself; else the package's kernel/aot/<arch>/."""
    arch = arch or device_arch()
    archs = [arch] if arch else list(ARCHS)
    variable = _aot_dir_variable()
    if variable is not None:
        root = variable[1]
        return [root / a for a in archs] + [root]
    return [PACKAGE_AOT / a for a in archs]


def default_aot_dir(arch) -> Path:
    """Where the library for arch goes when nothing else is said: the first folder the
    loader searches for it (what `python -m decode_topk.kernel.aot --arch ARCH` writes)."""
    return aot_dirs(arch)[0]


def aot_dir(arch=None) -> Path:
    """The first folder of aot_dirs(arch) that holds the library, else the first searched."""
    dirs = aot_dirs(arch)
    return next((d for d in dirs if (d / LIBRARY).exists()), dirs[0])


def library_path(arch=None) -> Path:
    return aot_dir(arch) / LIBRARY


def available(arch=None) -> bool:
    """Whether the library file exists (says nothing about staleness or the GPU)."""
    return library_path(arch).exists()


def not_found_message(arch=None) -> str:
    """One line: which library is missing, where it was looked for and how to get it."""
    arch = arch or device_arch()
    dirs = aot_dirs(arch)
    variable = _aot_dir_variable()
    where = (f"{variable[0]}={variable[1]}" if variable is not None
             else f"{AOT_DIR_VARIABLES[0]} unset, so the package's {PACKAGE_AOT}")
    what = f"for {arch}" if arch else f"for any of {', '.join(ARCHS)} (no CUDA device to choose by)"
    return (f"DecodeTopK AOT library {LIBRARY} {what} not found: looked in {', '.join(map(str, dirs))} "
            f"({where}). Build it with `python -m decode_topk.kernel.aot --arch {arch or ARCHS[0]}` "
            f"(nvidia-cutlass-dsl and a CUDA 13 toolkit; it writes {default_aot_dir(arch or ARCHS[0])}), "
            f"install a decode-topk wheel that ships it, or set {AOT_DIR_VARIABLES[0]} to a folder holding it")


_LIB = None
_LIB_LOCK = threading.Lock()
_RESIDENT: dict = {}


def _bind(lib):
    i, p = ctypes.c_int, ctypes.c_void_p
    lib.dtk_launch.argtypes = [i, i, i, i, i, p, i, i, ctypes.c_longlong, p, i, p, p, p]
    lib.dtk_launch.restype = i
    lib.dtk_max_active_clusters.argtypes = [i, i, i, i, i, ctypes.POINTER(i)]
    lib.dtk_max_active_clusters.restype = i
    lib.dtk_variant_count.argtypes = []
    lib.dtk_variant_count.restype = i
    lib.dtk_variant.argtypes = [i] + [ctypes.POINTER(i)] * 7
    lib.dtk_variant.restype = i
    lib.dtk_set_device.argtypes = [i]
    lib.dtk_set_device.restype = i
    lib.dtk_kernel_source_sha256.restype = ctypes.c_char_p
    lib.dtk_arch.restype = ctypes.c_char_p
    lib.dtk_error_name.argtypes = [i]
    lib.dtk_error_name.restype = ctypes.c_char_p
    return lib


def _open_checked(path: Path, expected_sha256: str, source: str,
                  rebuild="rebuild with `python -m decode_topk.kernel.aot`"):
    """The bound library at path, refused (StaleLibraryError, saying `rebuild`) unless it
    was built from the source whose SHA-256 is expected_sha256 (DTK_AOT_ALLOW_STALE=1: a
    warning instead), its MANIFEST.json (if any) describes it, and it is built for the
    current CUDA device's arch (when there is one)."""
    try:
        lib = _bind(ctypes.CDLL(str(path)))
    except (OSError, AttributeError) as e:  # not a library, or not ours (a symbol missing)
        raise OSError(f"cannot load {path} as the DecodeTopK AOT library: {e}") from e
    built = lib.dtk_kernel_source_sha256().decode()
    if built != expected_sha256:
        msg = (f"stale library {path}: built from source sha256 {built[:16]}..., but {source} is "
               f"{expected_sha256[:16]}...; {rebuild}")
        if os.environ.get("DTK_AOT_ALLOW_STALE") == "1":
            warnings.warn(msg + " (allowed by DTK_AOT_ALLOW_STALE=1)")
        else:
            raise StaleLibraryError(msg)
    manifest = path.parent / MANIFEST
    if manifest.exists():
        recorded = json.loads(manifest.read_text()).get("kernel_source_sha256")
        if recorded != built:
            raise StaleLibraryError(f"{manifest} (sha256 {str(recorded)[:16]}...) does not describe {path} "
                                    f"(sha256 {built[:16]}...): {rebuild}")
    if torch.cuda.is_available():
        capability = tuple(torch.cuda.get_device_capability())
        lib_arch, want = lib.dtk_arch().decode(), ARCH_OF_CAPABILITY.get(capability)
        if lib_arch != want:
            device = (f"the current CUDA device ({torch.cuda.get_device_name()}) has compute capability "
                      f"{capability[0]}.{capability[1]}")
            remedy = (f"rebuild with `python -m decode_topk.kernel.aot --arch {want}`" if want else
                      "DecodeTopK runs on compute capability "
                      + " and ".join(f"{c[0]}.{c[1]} ({a})" for c, a in ARCH_OF_CAPABILITY.items()))
            raise StaleLibraryError(f"{path} is built for {lib_arch}, but {device}: {remedy}")
    return lib


def load_library_at(directory, source, expected_sha256=None):
    """The bound ctypes library directory/libdecode_topk.so, built by kernel/aot.py from
    the module source (a path), whose SHA-256 (or expected_sha256: what the module's
    library_sha256() says, kernel/aot.py) must match the one compiled in, else
    StaleLibraryError, unless DTK_AOT_ALLOW_STALE=1; FileNotFoundError if absent."""
    path = Path(directory) / LIBRARY
    build = f"`python -m decode_topk.kernel.aot --module {source} --out {path.parent}`"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: build it with {build} (nvidia-cutlass-dsl and a CUDA 13 "
                                f"toolkit)")
    what = str(source)
    if expected_sha256 is None:
        expected_sha256 = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    else:
        what += " (with what its library_sha256() covers)"
    return _open_checked(path, expected_sha256, what, f"rebuild with {build}")


def load_library():
    """The DecodeTopK library for the current device (library_path()), checked against
    kernel_source_sha256() and loaded once; FileNotFoundError saying where it looked when
    absent."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            path = library_path()
            if not path.exists():
                raise FileNotFoundError(not_found_message())
            _LIB = _open_checked(path, kernel_source_sha256(), "the kernel source")
        return _LIB


def library_info() -> dict:
    """arch, kernel hash and the variants the library holds."""
    lib = load_library()
    variants = []
    for n in range(lib.dtk_variant_count()):
        vals = [ctypes.c_int() for _ in range(7)]
        lib.dtk_variant(n, *[ctypes.byref(v) for v in vals])
        k, c, v, b, t, threads, smem = (x.value for x in vals)
        variants.append(dict(k=k, cluster=c, vectors=v, block_mode=bool(b), trace=bool(t), threads=threads,
                             smem=smem))
    return {"arch": lib.dtk_arch().decode(), "kernel_source_sha256": lib.dtk_kernel_source_sha256().decode(),
            "library": str(library_path()), "variants": variants}


def error_name(code: int) -> str:
    return load_library().dtk_error_name(int(code)).decode()


def _set_device(lib, device: torch.device):
    index = device.index if device.index is not None else torch.cuda.current_device()
    err = lib.dtk_set_device(index)
    if err:
        raise RuntimeError(f"DecodeTopK AOT: cudaSetDevice({index}) failed: {error_name(err)} ({err})")


def max_active_clusters(k, cluster, vectors, block_mode=False, trace=False, device=None):
    """cudaOccupancyMaxActiveClusters of the compiled variant on `device`, or None when the
    library cannot tell (the launch's shared memory is not a compile-time constant)."""
    lib = load_library()
    device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    key = (device.index, k, cluster, vectors, bool(block_mode), bool(trace))
    if key not in _RESIDENT:
        _set_device(lib, device)
        n = ctypes.c_int(0)
        err = lib.dtk_max_active_clusters(k, cluster, vectors, int(block_mode), int(trace), ctypes.byref(n))
        if err == DTK_NO_VARIANT:
            raise ValueError(f"the library has no variant k={k} cluster={cluster} vectors={vectors} "
                             f"block_mode={block_mode} trace={trace}")
        _RESIDENT[key] = n.value if err == 0 and n.value > 0 else None
        if err not in (0, DTK_NO_SMEM):
            warnings.warn(f"DecodeTopK AOT: occupancy query failed with {error_name(err)} ({err}); "
                          f"using the conservative resident count")
    return _RESIDENT[key]


class AotLauncher:
    """The AOT library's launcher of policy.launch."""

    def resident(self, variant, device=None):
        build = variant.build
        n = max_active_clusters(variant.k, build.cluster, build.vectors, variant.block_mode, variant.trace, device)
        return n if n is not None else CONSERVATIVE_RESIDENT.get(build, 1)

    def enqueue(self, variant, logits, lengths, out, trace, row_stride, next_n):
        lib = load_library()
        device = logits.device
        rows, width = logits.shape
        build = variant.build
        with torch.cuda.device(device):
            _set_device(lib, device)
            stream = torch.cuda.current_stream(device).cuda_stream
            err = lib.dtk_launch(variant.k, build.cluster, build.vectors, int(variant.block_mode), int(variant.trace),
                                 ctypes.c_void_p(logits.data_ptr()), rows, width, row_stride,
                                 ctypes.c_void_p(lengths.data_ptr()), next_n, ctypes.c_void_p(out.data_ptr()),
                                 ctypes.c_void_p(trace.data_ptr() if trace is not None else 0),
                                 ctypes.c_void_p(stream))
        if err == DTK_NO_VARIANT:
            raise ValueError(f"the library has no variant {variant.name}")
        if err:
            raise RuntimeError(f"DecodeTopK AOT launch failed: {error_name(err)} ({err})")


AOT = AotLauncher()


def resident_for(k, block_mode=False, trace=False, device=None):
    """resident(build) of the launch policy: the library's occupancy answer, else
    CONSERVATIVE_RESIDENT."""
    return lambda build: AOT.resident(Variant(k, build, bool(block_mode), bool(trace)), device)


def launch_slices(rows, width, k, block_mode=False, next_n=1):
    """policy.launch_slices with the library's occupancy."""
    return policy.launch_slices(rows, width, resident_for(k, block_mode), next_n, block_mode)


def decode_topk_aot(logits, lengths, k, out=None, block_mode=False, trace=None, build=None, next_n=1,
                    check_lengths=False):
    """Indices of each row's k largest elements (SPEC.md part 1) via the AOT library, with
    the arguments and checks of the DSL module's decode_topk (policy.launch: the same
    code, so the same ValueErrors).

    logits: CUDA bfloat16 [rows, width], unit inner stride, row stride % 8 == 0, base
    16-byte aligned. lengths: CUDA int32 [rows // next_n] (next_n 1: one a row; else one a
    request of next_n rows, as decode_topk_seq_lens); the kernel clamps. k: 512, 1024 or
    2048. out: CUDA int32 [rows, k] contiguous, 16-byte aligned (allocated if None). trace:
    None/False (no trace), True (allocate one) or a CUDA int32 [rows, 8] contiguous tensor;
    the traced variant runs when a trace is asked for. build: a Build, 'CxTxV' or
    (cluster, vectors) to force a build, else the policy's. check_lengths: raise a
    ValueError naming the first length outside [0, width] (synchronizes).

    Returns out, or (out, trace) when a trace was asked for. Launches on
    torch.cuda.current_stream(logits.device); does not synchronize.
    """
    if out is None:
        out = policy.new_output(logits, k)
    want_trace = trace is not None and trace is not False
    if trace is True:  # no out means bad logits or k: launch's checks name them
        trace = None if out is None else torch.empty((out.shape[0], len(TRACE_FIELDS)), dtype=torch.int32,
                                                      device=out.device)
    trace_buf = trace if want_trace else None
    policy.launch(AOT, logits, lengths, k, out, block_mode, trace_buf, build, next_n, check_lengths)
    return (out, trace_buf) if want_trace else out
