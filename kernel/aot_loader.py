"""DecodeTopK through the ahead-of-time library (`python -m decode_topk.kernel.aot`), without the DSL.

Imports only ctypes, numpy, torch and `reference.policy`, so it runs where cutlass is not
installed (the H200 runner). The library is `.aot/libdecode_topk.so` under the repository
root, or `$DTK_AOT_DIR/libdecode_topk.so`.

    from .aot_loader import decode_topk_aot
    out = decode_topk_aot(logits, lengths, k)                      # token mode
    out, trace = decode_topk_aot(logits, lengths, k, trace=True)   # with the SPEC 2.11 trace

The library refuses to load when its kernel source hash (compiled in) differs from the
SHA-256 of `kernel/decode_topk_cute.py` here: rebuild with `python -m decode_topk.kernel.aot`.
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

from decode_topk.reference import policy

REPO = Path(__file__).resolve().parent.parent
KERNEL_SOURCE = REPO / "kernel" / "decode_topk_cute.py"
LIBRARY = "libdecode_topk.so"
TRACE_FIELDS = 8
DTK_NO_VARIANT, DTK_NO_SMEM, DTK_LOAD_FAILED, DTK_BAD_NEXT_N = -1, -2, -3, -4

# Resident clusters when the library cannot answer the occupancy query (DTK_NO_SMEM or an
# error): the H200's max active clusters at 128 KB of dynamic shared memory a CTA
# (../shared/gpu/README.md), the lowest of the measured columns. Conservative, because a
# smaller count only makes build_for choose 4x1024 earlier (still correct, maybe slower)
# and makes the 16-CTA build refuse rows sooner.
CONSERVATIVE_RESIDENT = {(8, 8): 15, (4, 8): 30, (8, 16): 15, (16, 16): 7}


class StaleLibraryError(RuntimeError):
    """The AOT library was built from a different kernel source."""


def aot_dir() -> Path:
    return Path(os.environ.get("DTK_AOT_DIR", REPO / ".aot"))


def library_path() -> Path:
    return aot_dir() / LIBRARY


def available() -> bool:
    """Whether the library file exists (says nothing about staleness or the GPU)."""
    return library_path().exists()


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


def load_library_at(directory, source):
    """The bound ctypes library directory/libdecode_topk.so, built by kernel/aot.py from
    the module source (a path; its SHA-256 must match the one compiled in, else
    StaleLibraryError, unless DTK_AOT_ALLOW_STALE=1); FileNotFoundError if absent."""
    path = Path(directory) / LIBRARY
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: build it with `python -m decode_topk.kernel.aot` (on a machine "
                                f"with nvidia-cutlass-dsl) and carry {path.parent.name} to the GPU machine")
    lib = _bind(ctypes.CDLL(str(path)))
    built = lib.dtk_kernel_source_sha256().decode()
    here = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    if built != here:
        msg = (f"stale library {path}: built from source sha256 {built[:16]}..., but {source} is "
               f"{here[:16]}...; rebuild with `python -m decode_topk.kernel.aot`")
        if os.environ.get("DTK_AOT_ALLOW_STALE") == "1":
            warnings.warn(msg + " (allowed by DTK_AOT_ALLOW_STALE=1)")
        else:
            raise StaleLibraryError(msg)
    manifest = path.parent / "MANIFEST.json"
    if manifest.exists():
        recorded = json.loads(manifest.read_text()).get("kernel_source_sha256")
        if recorded != built:
            raise StaleLibraryError(f"{manifest} (sha256 {str(recorded)[:16]}...) does not describe {path} "
                                    f"(sha256 {built[:16]}...): rebuild with `python -m decode_topk.kernel.aot`")
    return lib


def load_library():
    """The DecodeTopK library (load_library_at(aot_dir(), the kernel source), loaded once)."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is None:
            _LIB = load_library_at(aot_dir(), KERNEL_SOURCE)
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


def resident_for(k, block_mode=False, trace=False, device=None):
    """resident(cluster, vectors) for reference.policy: the library's occupancy answer,
    else CONSERVATIVE_RESIDENT."""
    def resident(cluster, vectors):
        n = max_active_clusters(k, cluster, vectors, block_mode, trace, device)
        return n if n is not None else CONSERVATIVE_RESIDENT[(cluster, vectors)]
    return resident


def launch_slices(rows, width, k, block_mode=False, next_n=1):
    """Row slices of at most the policy's row limit (the 16-CTA build's WAVES_16 waves),
    each a whole number of next_n-row requests: how to launch more rows than one launch
    takes (the benchmarks and the soak; decode_topk_aot itself refuses them)."""
    limit = policy.max_rows(width, resident_for(k, block_mode)) or rows
    limit = max(next_n, limit - limit % next_n)
    return [slice(s, min(rows, s + limit)) for s in range(0, rows, limit)]


def decode_topk_aot(logits, lengths, k, out=None, block_mode=False, trace=None, build=None, next_n=1,
                    check_lengths=False):
    """Indices of each row's k largest elements (SPEC.md part 1) via the AOT library, with
    the arguments and checks of the DSL module's decode_topk (policy.check_inputs: the same
    code, so the same ValueErrors).

    logits: CUDA bfloat16 [rows, width], unit inner stride, row stride % 8 == 0, base
    16-byte aligned. lengths: CUDA int32 [rows // next_n] (next_n 1: one a row; else one a
    request of next_n rows, as decode_topk_seq_lens); the kernel clamps. k: 512, 1024 or
    2048. out: CUDA int32 [rows, k] contiguous, 16-byte aligned (allocated if None). trace:
    None/False (no trace), True (allocate one) or a CUDA int32 [rows, 8] contiguous tensor;
    the traced variant runs when a trace is asked for. build: (cluster, vectors),
    (cluster, threads, vectors) or 'CxTxV' to force a build, else the policy's.
    check_lengths: raise a ValueError naming the first length outside [0, width]
    (synchronizes).

    Returns out, or (out, trace) when a trace was asked for. Launches on
    torch.cuda.current_stream(logits.device); does not synchronize.
    """
    if out is None:
        out = policy.new_output(logits, k)
    want_trace = trace is not None and trace is not False
    if trace is True:  # no out means bad logits or k: check_inputs names them
        trace = None if out is None else torch.empty((out.shape[0], TRACE_FIELDS), dtype=torch.int32,
                                                      device=out.device)
    trace_buf = trace if want_trace else None
    device = logits.device if isinstance(logits, torch.Tensor) else None
    cluster, vectors, row_stride = policy.check_inputs(
        logits, lengths, k, out, resident_for(k, block_mode, want_trace, device), next_n, trace_buf,
        build=parse_build(build))
    rows, width = logits.shape
    if check_lengths:
        policy.check_lengths(lengths, width, next_n)
    if rows == 0:
        return (out, trace_buf) if want_trace else out
    lib = load_library()
    with torch.cuda.device(device):
        _set_device(lib, device)
        stream = torch.cuda.current_stream(device).cuda_stream
        err = lib.dtk_launch(k, cluster, vectors, int(bool(block_mode)), int(want_trace),
                             ctypes.c_void_p(logits.data_ptr()), rows, width, row_stride,
                             ctypes.c_void_p(lengths.data_ptr()), next_n, ctypes.c_void_p(out.data_ptr()),
                             ctypes.c_void_p(trace_buf.data_ptr() if trace_buf is not None else 0),
                             ctypes.c_void_p(stream))
    if err:
        if err == DTK_NO_VARIANT:
            raise ValueError(f"the library has no variant k={k} build=({cluster}, {vectors}) "
                             f"block_mode={block_mode} trace={want_trace}")
        raise RuntimeError(f"DecodeTopK AOT launch failed: {error_name(err)} ({err})")
    return (out, trace_buf) if want_trace else out


# ---------------------------------------------------------------------------------------
# The conformance implementation 'aot' (conformance/registry.py): NumPy in, NumPy out.
# ---------------------------------------------------------------------------------------
POISON = 0x7EADBEEF  # written into out and trace before every launch; never a valid value


def parse_build(build):
    """(cluster, vectors) from None, (cluster, vectors), (cluster, threads, vectors) or
    'CxTxV' (e.g. '8x512x8'); None stays None (the policy chooses)."""
    if build is None:
        return None
    if isinstance(build, str):
        try:
            parts = tuple(int(x) for x in build.split("x"))
        except ValueError:
            raise ValueError(f"build {build!r} is not CxTxV") from None
    else:
        parts = tuple(int(x) for x in build)
    if len(parts) == 3:
        cluster, threads, vectors = parts
        if threads != policy.threads_for(cluster):
            raise ValueError(f"build {build!r}: the {cluster}-CTA build runs {policy.threads_for(cluster)} threads")
    elif len(parts) == 2:
        cluster, vectors = parts
    else:
        raise ValueError(f"build {build!r} is not (cluster, vectors) or CxTxV")
    if (cluster, vectors) not in policy.BUILDS:
        raise ValueError(f"build {build!r} is not one of {policy.BUILDS}")
    return cluster, vectors


def to_device_bf16(logits_bits, device="cuda"):
    """CUDA bfloat16 [rows, width] holding the uint16 BF16 bit patterns exactly, with a
    row stride rounded up to a multiple of 8 (a padded view when width % 8 != 0)."""
    import numpy as np
    bits = np.ascontiguousarray(logits_bits, dtype=np.uint16)
    rows, width = bits.shape
    padded = width + (-width) % 8
    host = torch.from_numpy(bits.view(np.int16))
    dev = torch.empty((rows, padded), dtype=torch.int16, device=device)
    if padded != width:
        dev.fill_(0x7FC0)  # a NaN past the width: never read
    dev[:, :width].copy_(host)
    return dev.view(torch.bfloat16)[:, :width]


def run_numpy(logits_bits, lengths, k, block_mode=False, build=None, trace=True, device="cuda"):
    """(out, trace, (cluster, threads, vectors)) as NumPy for NumPy inputs: copies to the
    GPU, poisons out and trace with POISON, launches (the traced variant when trace),
    synchronizes and copies back. trace is None when not asked for."""
    import numpy as np
    logits = to_device_bf16(logits_bits, device)
    rows, width = logits.shape
    lens = torch.from_numpy(np.ascontiguousarray(lengths, dtype=np.int32)).to(device)
    out = torch.full((rows, int(k)), POISON, dtype=torch.int32, device=device)
    tr = torch.full((rows, TRACE_FIELDS), POISON, dtype=torch.int32, device=device) if trace else None
    b = parse_build(build)
    if b is None:
        resident = resident_for(int(k), block_mode, bool(trace), logits.device)
        cluster, threads, vectors = policy.build_for(rows, width, resident)
    else:
        cluster, vectors = b
        threads = policy.threads_for(cluster)
    decode_topk_aot(logits, lens, int(k), out=out, block_mode=bool(block_mode), trace=tr if trace else None,
                    build=(cluster, vectors))
    torch.cuda.synchronize(logits.device)
    return out.cpu().numpy(), (tr.cpu().numpy() if trace else None), (cluster, threads, vectors)


class ConformanceImpl:
    """impl(logits_bits, lengths, k, block_mode, build=None) -> (out, trace), the traced
    variant on the policy's build (or the given one). `last_build` is the
    (cluster, threads, vectors) of the latest call, so the suite can run the model on the
    same build and compare the traces."""

    def __init__(self):
        load_library()  # fail early (absent or stale library)
        if not torch.cuda.is_available():
            raise RuntimeError("the 'aot' implementation needs a CUDA GPU")
        self.last_build = None

    def __call__(self, logits_bits, lengths, k, block_mode=False, build=None):
        out, trace, self.last_build = run_numpy(logits_bits, lengths, k, block_mode, build, trace=True)
        return out, trace


def conformance_impl():
    """The registry loader of 'aot'."""
    return ConformanceImpl()
