"""Ahead-of-time build of every DecodeTopK variant into one shared library per GPU arch.

    python -m decode_topk.kernel.aot [--arch sm_90a [sm_100a]] [--out DIR] [--jobs N] [--module M] [--no-trace]
    python -m decode_topk.kernel.aot --find-cuda     # which CUDA toolkit the link would use

Where it goes: by default exactly where the loader looks (kernel/aot_loader.py), the
package's `kernel/aot/<arch>/` (`libdecode_topk.so` and `MANIFEST.json`), or
`$DECODE_TOPK_AOT_DIR/<arch>/` when that is set; `--out DIR` writes DIR itself for one
arch, DIR/<arch>/ for several (the loader searches both layouts under $DECODE_TOPK_AOT_DIR).

Needs: nvidia-cutlass-dsl (it compiles, with its own ptxas), gcc/g++/strip, and a CUDA 13
toolkit for its headers and `libcudart_static.a`, found from $CUDA_HOME, $CUDA_PATH, `nvcc`
on PATH, the CUDA wheels in site-packages (`pip install 'nvidia-cuda-runtime==13.0.*'
'nvidia-cuda-crt==13.0.*' 'nvidia-cuda-cccl==13.0.*'` brings them) or /usr/local/cuda, in
that order (`cuda_toolkit()`). No GPU needed.

A platform wheel holding both arches' libraries (the package data `kernel/aot/*/*`;
setup.py tags a wheel that carries a library `py3-none-manylinux_2_X_<machine>`, X from the
glibc symbol versions the libraries need, and leaves one without any pure):

    python -m decode_topk.kernel.aot --arch sm_90a sm_100a    # ~75 s an arch on 2 cores
    python -m pip wheel . --no-deps -w dist                    # dist/decode_topk-*-py3-none-manylinux_*.whl
    python .ci/check_wheel.py dist/decode_topk-*.whl --arch sm_90a sm_100a

On the GPU machine, `pip install` that wheel (with torch; no DSL needed): the loader takes
the library of the device's arch from the installed package.

Steps of one arch's build:

1. Compiles every variant of `variants()` (k x build x mode) with the trace off and on,
   with `compile_decode_topk` in `--jobs` worker processes (kernel/resources.py: each
   worker sets CUTE_DSL_ARCH before importing the DSL, and the cubin is checked to be for
   that arch), and `export_to_c`s each as `<work>/obj/<name>.{h,o}` with
   name = function prefix = `dtk_k{k}_c{cluster}_v{vectors}_blk{0|1}_tr{0|1}` (the work
   folder, default build/aot_<arch>, holds them and the shim; `<out>` only the library and
   its manifest).
2. Generates one C shim `<work>/shim.c` from the generated headers: the per-tensor structs'
   fields are read from each header and filled from the fake arguments' dynamic modes
   (an unexpected field stops the build). It exports (see `kernel/aot_loader.py`):

       int dtk_launch(int k, int cluster, int vectors, int block_mode, int trace,
                      void* logits, int rows, int width, long long row_stride,
                      void* lengths, int next_n, void* out, void* trace_buf, void* stream);

   lengths holds rows / next_n entries (one a request of next_n rows; the kernel derives
   next_n from the two shapes, module function decode_topk_seq_lens).
       int dtk_max_active_clusters(int k, int cluster, int vectors, int block_mode,
                                   int trace, int* n);
       int dtk_variant_count(void);  int dtk_set_device(int device);
       int dtk_variant(int i, int* k, int* cluster, int* vectors, int* block_mode,
                       int* trace, int* threads, int* smem);
       const char* dtk_kernel_source_sha256(void);  const char* dtk_arch(void);
       const char* dtk_error_name(int code);

   Return codes: 0 success, > 0 a cudaError_t, DTK_NO_VARIANT (-1) no such variant,
   DTK_LOAD_FAILED (-3) the variant's module did not load, DTK_BAD_NEXT_N (-4) next_n < 1
   or not dividing rows, DTK_NO_SMEM (-2) the launch's
   dynamic shared memory size was not a compile-time constant (occupancy unknown).
   Each variant's module is loaded (`<name>_Kernel_Module_Load`) once, lazily, under a
   mutex. The occupancy query takes the kernel handle from the loaded library
   (cudaLibraryGetKernel with the kernel's name) and asks cudaOccupancyMaxActiveClusters
   with the variant's cluster, block and dynamic smem (read from the host IR).
3. Links `<out>/libdecode_topk.so` (static cudart and the DSL's runtime inside; NEEDED is
   only libc) and writes `<out>/MANIFEST.json` (variants, arch, date, the kernel source's
   SHA-256 `aot_loader.kernel_source_sha256()`, resources, the CUDA used). The loader
   refuses a library whose hash differs from the kernel source next to it, or whose arch
   is not the device's.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import typing
from pathlib import Path

from . import policy, resources
from .aot_loader import (ARCHS, DTK_BAD_NEXT_N, DTK_LOAD_FAILED, DTK_NO_SMEM, DTK_NO_VARIANT, LIBRARY, MANIFEST,
                         PACKAGE_AOT, default_aot_dir, kernel_source_sha256)

CUDA_MAJOR = 13  # the DSL's runtime archive (nvidia_cutlass_dsl/cu13) is built against CUDA 13
# The headers the shim's includes reach (the DSL's generated headers include cuda_runtime.h
# and cuda_fp16.h), each with the CUDA wheel that ships it; nvidia-cuda-runtime also ships
# libcudart_static.a. 13.0: the CUDA the libraries run on the H200 were built with.
CUDA_HEADERS = {"cuda_runtime.h": "nvidia-cuda-runtime", "crt/host_config.h": "nvidia-cuda-crt",
                "nv/target": "nvidia-cuda-cccl"}
CUDA_WHEEL_REQUIREMENTS = tuple(f"{wheel}==13.0.*" for wheel in CUDA_HEADERS.values())
CUDA_WHEELS = " ".join(f"'{r}'" for r in CUDA_WHEEL_REQUIREMENTS)  # as typed after `pip install`
CONVENTIONAL_CUDA = Path("/usr/local/cuda")  # the last place searched, where toolkit installers link


def source_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def library_sha256(module, module_spec, src) -> str:
    """The hash a library built from `module` carries: the package's kernel, the hash the
    loader expects (one function for both); a stand-in module (--module x.py) its own
    `library_sha256()` where it has one (bench/profile_build.py: its file and the kernel
    bundle it compiles, so a kernel change makes it stale), else its file's."""
    if module_spec == resources.KERNEL_MODULE:
        return kernel_source_sha256()
    own = getattr(module, "library_sha256", None)
    return own() if own is not None else source_sha256(src)


class CudaToolkit(typing.NamedTuple):
    """What the link takes from a CUDA toolkit, and how it was found."""

    include: Path  # holds cuda_runtime.h
    cudart_static: Path  # libcudart_static.a
    version: str  # e.g. "13.0", from CUDART_VERSION
    origin: str  # e.g. "CUDA_HOME=/opt/cuda", "nvcc on PATH", "the CUDA wheels"


def _toolkit_at(root: Path, origin: str):
    """(CudaToolkit, None) for a CUDA 13 toolkit rooted at root (a toolkit install, or a
    CUDA wheel's nvidia/cu13 folder), else (None, a phrase saying what it lacks)."""
    targets = sorted(root.glob("targets/*"))
    include = next((d for d in [root / "include"] + [t / "include" for t in targets]
                    if (d / "cuda_runtime.h").exists()), None)
    if include is None:
        return None, "no include/cuda_runtime.h"
    missing = [f"include/{h} ({wheel})" for h, wheel in CUDA_HEADERS.items() if not (include / h).exists()]
    if missing:
        return None, "no " + ", ".join(missing)
    cudart = next((f for d in [root / "lib64", root / "lib"] + [t / "lib" for t in targets]
                   if (f := d / "libcudart_static.a").exists()), None)
    if cudart is None:
        return None, "no lib64/libcudart_static.a"
    m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", (include / "cuda_runtime_api.h").read_text(errors="replace"))
    if not m:
        return None, "no CUDART_VERSION in cuda_runtime_api.h"
    version = f"{int(m.group(1)) // 1000}.{int(m.group(1)) % 1000 // 10}"
    if int(m.group(1)) // 1000 != CUDA_MAJOR:
        return None, f"CUDA {version}, not {CUDA_MAJOR}"
    return CudaToolkit(include, cudart, version, origin), None


def _nvcc_roots(nvcc: str):
    """Toolkit roots of an nvcc: the folder above its bin/, and the TOP that `nvcc -dryrun`
    reports (nvcc may be a wrapper script or a link elsewhere)."""
    roots = [Path(nvcc).resolve().parent.parent]
    try:
        r = subprocess.run([nvcc, "-dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True,
                           timeout=30)
        m = re.search(r"^#\$ TOP=(.*)$", r.stdout + r.stderr, re.M)
        if m:
            roots.append(Path(m.group(1).strip()).resolve())
    except (OSError, subprocess.SubprocessError):
        pass
    return list(dict.fromkeys(roots))


def _cuda_wheel_roots() -> list:
    """The CUDA wheels' folders in site-packages. They install into the namespace package
    `nvidia`: nvidia/cu13/{include,lib} (CUDA 13), nvidia/cuda_runtime/{include,lib} (the
    CUDA 12 layout, which _toolkit_at then refuses by its version)."""
    spec = importlib.util.find_spec("nvidia")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return [Path(loc) / sub for loc in locations for sub in (f"cu{CUDA_MAJOR}", "cuda_runtime")
            if (Path(loc) / sub).is_dir()]


def _toolkit_candidates(notes: list):
    """(root, origin) of every place cuda_toolkit() searches, in order; appends to notes a
    phrase for each that offers no folder at all."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            yield Path(os.environ[name]), f"{name}={os.environ[name]}"
        else:
            notes.append(f"{name} unset")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        notes.append("no nvcc on PATH")
    for root in _nvcc_roots(nvcc) if nvcc else []:
        yield root, f"nvcc on PATH ({nvcc})"
    wheels = _cuda_wheel_roots()
    if not wheels:
        notes.append(f"no CUDA wheel (no nvidia/cu{CUDA_MAJOR} in site-packages)")
    for root in wheels:
        yield root, "the CUDA wheels"
    yield CONVENTIONAL_CUDA, str(CONVENTIONAL_CUDA)


def cuda_toolkit() -> CudaToolkit:
    """The CUDA 13 toolkit to link with: the first of $CUDA_HOME, $CUDA_PATH, `nvcc` on PATH,
    the CUDA wheels in site-packages (nvidia/cu13: `pip install CUDA_WHEELS`) and
    /usr/local/cuda that has CUDA_HEADERS and libcudart_static.a of CUDA 13.
    RuntimeError naming every place searched and what it lacked, when none has."""
    notes: list = []
    for root, origin in _toolkit_candidates(notes):
        found, why = _toolkit_at(root, origin) if root.is_dir() else (None, "absent")
        if found:
            return found
        notes.append(f"{origin if origin.endswith(str(root)) else f'{origin} -> {root}'}: {why}")
    raise RuntimeError(f"no CUDA {CUDA_MAJOR} toolkit with cuda_runtime.h and libcudart_static.a found: "
                       + "; ".join(notes) + f". Install one with `pip install {CUDA_WHEELS}` or set CUDA_HOME")


def dsl_runtime_archive() -> Path:
    """<site-packages>/nvidia_cutlass_dsl/cu13/lib/libcuda_dialect_runtime_static.a."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("nvidia_cutlass_dsl is not installed")
    for root in spec.submodule_search_locations:
        p = Path(root) / "cu13" / "lib" / "libcuda_dialect_runtime_static.a"
        if p.exists():
            return p
    raise RuntimeError("libcuda_dialect_runtime_static.a not found under nvidia_cutlass_dsl/cu13/lib")


# ---------------------------------------------------------------------------------------
# Header parsing
# ---------------------------------------------------------------------------------------
_STRUCT = re.compile(r"typedef struct \{(.*?)\}\s*(\w+);", re.S)
_FIELD = re.compile(r"^\s*([\w\s\*]+?)\s*(\w+)(?:\[(\d+)\])?;\s*$")


def parse_header(text: str, prefix: str) -> dict:
    """{"structs": {type: [(ctype, field, count|None)]}, "params": [(type, name)]} of a
    generated <prefix>.h: its struct typedefs and the wrapper's parameters."""
    structs = {}
    for body, name in _STRUCT.findall(text):
        fields = []
        for line in body.strip().splitlines():
            m = _FIELD.match(line)
            if not m:
                raise ValueError(f"{prefix}.h: cannot parse struct {name} field {line!r}")
            fields.append((m.group(1).strip(), m.group(2), int(m.group(3)) if m.group(3) else None))
        structs[name] = fields
    m = re.search(rf"cute_dsl_{re.escape(prefix)}_wrapper\((.*?)\)\s*\{{", text, re.S)
    if not m:
        raise ValueError(f"{prefix}.h: no cute_dsl_{prefix}_wrapper")
    params = []
    for p in m.group(1).split(","):
        p = p.strip()
        pm = re.match(r"(.*?)(\w+)$", p)
        params.append((pm.group(1).replace(" ", ""), pm.group(2)))
    if f"{prefix}_Kernel_Module_Load" not in text:
        raise ValueError(f"{prefix}.h: no {prefix}_Kernel_Module_Load")
    return {"structs": structs, "params": params}


def fake_modes(module, k):
    """Per tensor argument of fake_arguments(k), in order: (dynamic shape modes,
    dynamic stride modes) as mode indices, and the stream's position."""
    args = module.fake_arguments(k)
    out = []
    for a in args:
        if hasattr(a, "shape") and hasattr(a, "stride"):
            dyn_shape = [i for i, s in enumerate(a.shape) if not isinstance(s, int)]
            dyn_stride = [i for i, s in enumerate(a.stride) if not isinstance(s, int)]
            out.append((dyn_shape, dyn_stride))
        else:
            out.append(None)  # the stream
    return out


# C expressions of each tensor's modes in dtk_launch's parameters (SPEC 1.1; the trace is
# [rows, 8]; lengths has one entry a request of next_n rows). Keyed by argument position
# of (logits, lengths, out, trace, stream). Only the dynamic modes are written (the trace's
# rows), so a trace of another static width (bench/profile_build.py's) needs none.
_TRACE_WIDTH = str(len(policy.TRACE_FIELDS))
_SHAPE_EXPR = [("rows", "width"), ("rows / next_n",), ("rows", "K_"), ("rows", _TRACE_WIDTH)]
_STRIDE_EXPR = [("row_stride", "1"), ("1",), ("K_", "1"), (_TRACE_WIDTH, "1")]
_DATA_EXPR = ["logits", "lengths", "out", "trace_buf"]


def variant_c(row: dict, header: dict, modes) -> str:
    """The static launch / occupancy functions of one variant."""
    p = row["name"]
    k, cluster, vectors, block_mode, trace = row["variant"]
    params = header["params"]
    if params[0][0] != f"{p}_Kernel_Module_t*":
        raise ValueError(f"{p}.h: the wrapper's first parameter is {params[0]}, expected the module")
    if params[-1][0] != "cudaStream_t":
        raise ValueError(f"{p}.h: the wrapper's last parameter is {params[-1]}, expected the stream")
    tensor_params = params[1:-1]
    tensor_modes = [m for m in modes if m is not None]
    if len(tensor_params) != len(tensor_modes) or len(tensor_params) != 4:
        raise ValueError(f"{p}.h: wrapper takes {tensor_params}; fake_arguments has {len(tensor_modes)} tensors")
    lines = [f"static {p}_Kernel_Module_t m_{p};", f"static int loaded_{p};",
             f"static int load_{p}(void) {{",
             f"    if (__atomic_load_n(&loaded_{p}, __ATOMIC_ACQUIRE)) return 0;",
             "    int err = devices_ok(); if (err) return err;",
             "    pthread_mutex_lock(&dtk_lock);",
             f"    if (!loaded_{p}) {{",
             f"        {p}_Kernel_Module_Load(&m_{p});",
             f"        if (m_{p}.module != NULL) __atomic_store_n(&loaded_{p}, 1, __ATOMIC_RELEASE);",
             "    }",
             "    pthread_mutex_unlock(&dtk_lock);",
             f"    return loaded_{p} ? 0 : DTK_LOAD_FAILED;",
             "}",
             f"static int launch_{p}(void* logits, int rows, int width, long long row_stride, void* lengths,",
             "                     int next_n, void* out, void* trace_buf, void* stream) {",
             "    if (next_n < 1 || rows % next_n) return DTK_BAD_NEXT_N;",
             f"    const int K_ = {k}; (void)K_;",
             f"    int err = load_{p}(); if (err) return err;"]
    call = [f"&m_{p}"]
    for i, ((ctype, pname), (dyn_shape, dyn_stride)) in enumerate(zip(tensor_params, tensor_modes)):
        stype = ctype.rstrip("*")
        fields = header["structs"].get(stype)
        if fields is None:
            raise ValueError(f"{p}.h: no struct {stype}")
        var = f"a_{pname}"
        lines.append(f"    {stype} {var}; memset(&{var}, 0, sizeof {var});")
        # field -> (the fake tensor's dynamic modes, their C expressions)
        dynamic = {"dynamic_shapes": (dyn_shape, _SHAPE_EXPR[i]), "dynamic_strides": (dyn_stride, _STRIDE_EXPR[i])}
        for ftype, fname, count in fields:
            if fname == "data" and count is None:
                lines.append(f"    {var}.data = {_DATA_EXPR[i]};")
            elif fname in dynamic:
                modes, exprs = dynamic[fname]
                if count != len(modes):
                    raise ValueError(f"{p}.h: {stype}.{fname}[{count}], fake tensor has dynamic "
                                     f"{fname[len('dynamic_'):-1]} modes {modes}")
                for j, mode in enumerate(modes):
                    lines.append(f"    {var}.{fname}[{j}] = ({ftype})({exprs[mode]});")
            else:
                raise ValueError(f"{p}.h: unexpected field {ftype} {fname} in {stype}")
        declared = {f[1] for f in fields}
        if dyn_shape and "dynamic_shapes" not in declared or dyn_stride and "dynamic_strides" not in declared:
            raise ValueError(f"{p}.h: {stype} lacks a dynamic mode of the fake tensor")
        call.append(f"&{var}")
    call.append("(cudaStream_t)stream")
    lines.append(f"    return (int)cute_dsl_{p}_wrapper({', '.join(call)});")
    lines.append("}")
    kernel = row["kernels"][0] if row.get("kernels") else None
    smem = row.get("smem")
    threads = row["block"][0]
    lines.append(f"static int occupancy_{p}(int* n) {{")
    if kernel is None or smem is None or threads is None:
        lines.append("    (void)n; return DTK_NO_SMEM;")
    else:
        lines += [f"    int err = load_{p}(); if (err) return err;",
                  "    cudaKernel_t kern;",
                  f"    cudaError_t e = cudaLibraryGetKernel(&kern, m_{p}.module, \"{kernel}\");",
                  "    if (e != cudaSuccess) return (int)e;",
                  f"    return occupancy(kern, {cluster}, {threads}, {smem}, n);"]
    lines.append("}")
    return "\n".join(lines)


SHIM_HEAD = r"""// Generated by kernel/aot.py -- do not edit.
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <cuda_runtime.h>
%(includes)s

#define DTK_NO_VARIANT (%(no_variant)d)
#define DTK_NO_SMEM (%(no_smem)d)
#define DTK_LOAD_FAILED (%(load_failed)d)
#define DTK_BAD_NEXT_N (%(bad_next_n)d)
#define DTK_EXPORT __attribute__((visibility("default")))

static pthread_mutex_t dtk_lock = PTHREAD_MUTEX_INITIALIZER;

// <name>_Kernel_Module_Load ignores a failing cudaGetDeviceCount and then loops over an
// uninitialised count, so check the devices first.
static int devices_ok(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return (int)e;
    return n > 0 ? 0 : (int)cudaErrorNoDevice;
}

static int occupancy(cudaKernel_t kern, int cluster, int threads, size_t smem, int* n) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    memset(&cfg, 0, sizeof cfg);
    memset(&attr, 0, sizeof attr);
    cfg.gridDim.x = cluster; cfg.gridDim.y = 1; cfg.gridDim.z = 1;
    cfg.blockDim.x = threads; cfg.blockDim.y = 1; cfg.blockDim.z = 1;
    cfg.dynamicSmemBytes = smem;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster; attr.val.clusterDim.y = 1; attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    if (cluster > 8) {  // Module_Load sets it already (cu_attrs); idempotent
        cudaError_t e = cudaFuncSetAttribute((const void*)kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        if (e != cudaSuccess) return (int)e;
    }
    return (int)cudaOccupancyMaxActiveClusters(n, (const void*)kern, &cfg);
}
"""

SHIM_TAIL = r"""
typedef struct {
    int k, cluster, vectors, block_mode, trace, threads, smem;
    int (*launch)(void*, int, int, long long, void*, int, void*, void*, void*);
    int (*occupancy)(int*);
} dtk_variant_t;

static const dtk_variant_t dtk_variants[] = {
%(table)s
};
#define DTK_NVARIANTS ((int)(sizeof dtk_variants / sizeof dtk_variants[0]))

static const dtk_variant_t* find(int k, int cluster, int vectors, int block_mode, int trace) {
    for (int i = 0; i < DTK_NVARIANTS; i++) {
        const dtk_variant_t* v = &dtk_variants[i];
        if (v->k == k && v->cluster == cluster && v->vectors == vectors &&
            v->block_mode == (block_mode != 0) && v->trace == (trace != 0))
            return v;
    }
    return NULL;
}

DTK_EXPORT int dtk_launch(int k, int cluster, int vectors, int block_mode, int trace,
                          void* logits, int rows, int width, long long row_stride,
                          void* lengths, int next_n, void* out, void* trace_buf, void* stream) {
    const dtk_variant_t* v = find(k, cluster, vectors, block_mode, trace);
    if (v == NULL) return DTK_NO_VARIANT;
    return v->launch(logits, rows, width, row_stride, lengths, next_n, out, trace_buf, stream);
}

DTK_EXPORT int dtk_max_active_clusters(int k, int cluster, int vectors, int block_mode, int trace,
                                       int* n) {
    const dtk_variant_t* v = find(k, cluster, vectors, block_mode, trace);
    if (v == NULL) return DTK_NO_VARIANT;
    return v->occupancy(n);
}

DTK_EXPORT int dtk_variant_count(void) { return DTK_NVARIANTS; }

DTK_EXPORT int dtk_set_device(int device) { return (int)cudaSetDevice(device); }

DTK_EXPORT int dtk_variant(int i, int* k, int* cluster, int* vectors, int* block_mode, int* trace,
                           int* threads, int* smem) {
    if (i < 0 || i >= DTK_NVARIANTS) return DTK_NO_VARIANT;
    const dtk_variant_t* v = &dtk_variants[i];
    *k = v->k; *cluster = v->cluster; *vectors = v->vectors; *block_mode = v->block_mode;
    *trace = v->trace; *threads = v->threads; *smem = v->smem;
    return 0;
}

DTK_EXPORT const char* dtk_kernel_source_sha256(void) { return "%(sha)s"; }
DTK_EXPORT const char* dtk_arch(void) { return "%(arch)s"; }

DTK_EXPORT const char* dtk_error_name(int code) {
    if (code == DTK_NO_VARIANT) return "DTK_NO_VARIANT";
    if (code == DTK_NO_SMEM) return "DTK_NO_SMEM";
    if (code == DTK_LOAD_FAILED) return "DTK_LOAD_FAILED";
    if (code == DTK_BAD_NEXT_N) return "DTK_BAD_NEXT_N";
    return cudaGetErrorName((cudaError_t)code);
}
"""


def generate_shim(rows, headers, modes_by_k, sha, arch) -> str:
    includes = "\n".join(f'#include "obj/{r["name"]}.h"' for r in rows)
    parts = [SHIM_HEAD % {"includes": includes, "no_variant": DTK_NO_VARIANT, "no_smem": DTK_NO_SMEM,
                          "load_failed": DTK_LOAD_FAILED, "bad_next_n": DTK_BAD_NEXT_N}]
    table = []
    for r in rows:
        parts.append(variant_c(r, headers[r["name"]], modes_by_k[r["variant"][0]]))
        k, c, v, b, t = r["variant"]
        smem = r["smem"] if r["smem"] is not None else -1
        table.append(f"    {{{k}, {c}, {v}, {int(b)}, {int(t)}, {r['block'][0] or -1}, {smem}, "
                     f"launch_{r['name']}, occupancy_{r['name']}}},")
    parts.append(SHIM_TAIL % {"table": "\n".join(table), "sha": sha, "arch": arch})
    return "\n\n".join(parts)


def run(cmd, cwd=None):
    print("+ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    subprocess.run([str(c) for c in cmd], cwd=cwd, check=True)


def build(arch="sm_90a", out=None, jobs=2, module_spec=resources.KERNEL_MODULE, variants=None,
          work=None) -> dict:
    """Build out/libdecode_topk.so and out/MANIFEST.json; out defaults to where the loader
    looks for arch (aot_loader.default_aot_dir: the package's kernel/aot/<arch>/, or
    $DECODE_TOPK_AOT_DIR/<arch>/). The exported objects, headers and the shim go to work
    (default build/aot_<arch> in the current folder), so that out holds only what the GPU
    machine needs. The CUDA toolkit is looked up first (cuda_toolkit()), so a missing one
    fails before minutes of compiling."""
    t_start = time.perf_counter()
    if arch not in ARCHS:
        raise ValueError(f"arch {arch!r} is not one of {', '.join(ARCHS)}")
    toolkit = cuda_toolkit()
    print(f"CUDA toolkit: {toolkit.include.parent} (CUDA {toolkit.version}, from {toolkit.origin})",
          file=sys.stderr, flush=True)
    module = resources.load_kernel_module(module_spec)  # the DSL: fail before anything is written
    out = Path(out).resolve() if out is not None else default_aot_dir(arch)
    work = Path(work).resolve() if work else Path.cwd() / "build" / f"aot_{arch}"
    obj = work / "obj"
    if obj.exists():
        shutil.rmtree(obj)
    obj.mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    if out.is_relative_to(PACKAGE_AOT):
        # Build output inside the source tree: keep it out of git (as venv does), without
        # an entry in the repository's .gitignore. The wheel takes it as package data.
        (PACKAGE_AOT / ".gitignore").write_text("# written by python -m decode_topk.kernel.aot\n*\n")
    for stale in (out / LIBRARY, out / MANIFEST, work / "shim.c", work / "shim.o"):
        stale.unlink(missing_ok=True)
    src = resources.kernel_source(module_spec)
    sha = library_sha256(module, module_spec, src)
    if variants is None:
        variants = module.variants((False, True))
    modes_by_k = {k: fake_modes(module, k) for k in sorted({v[0] for v in variants})}
    print(f"compiling {len(variants)} variants for {arch} with {jobs} jobs", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rows = resources.compile_all(variants, arch, module_spec, jobs, export_dir=obj)
    t_compile = time.perf_counter() - t0
    errors = [r for r in rows if r.get("error")]
    if errors:
        for r in errors:
            print(f"{r['name']}: {r['error']}\n{r.get('log', '')}", file=sys.stderr)
        raise RuntimeError(f"{len(errors)} variants failed to compile")
    wrong_arch = [r["name"] for r in rows if not r["cubin_arch_ok"]]
    if wrong_arch:
        raise RuntimeError(f"cubins not built for {arch}: {wrong_arch}")
    headers = {}
    for r in rows:
        h = (obj / f"{r['name']}.h").read_text()
        headers[r["name"]] = parse_header(h, r["name"])
        if f"-arch {arch}".encode() not in (obj / f"{r['name']}.o").read_bytes():
            raise RuntimeError(f"{r['name']}.o does not embed a cubin for {arch}")
    (work / "shim.c").write_text(generate_shim(rows, headers, modes_by_k, sha, arch))
    t1 = time.perf_counter()
    print(f"linking {len(rows)} variants into {out / LIBRARY}", file=sys.stderr, flush=True)
    run(["gcc", "-O2", "-fPIC", "-fvisibility=hidden", f"-I{toolkit.include}", f"-I{work}", "-c",
         work / "shim.c", "-o", work / "shim.o"])
    objects = sorted(obj.glob("*.o"))
    run(["g++", "-shared", "-Wl,--exclude-libs,ALL", "-o", out / LIBRARY, work / "shim.o", *objects,
         dsl_runtime_archive(), toolkit.cudart_static, "-ldl", "-lpthread", "-lrt"])
    run(["strip", "--strip-unneeded", out / LIBRARY])
    t_link = time.perf_counter() - t1
    size = (out / LIBRARY).stat().st_size
    manifest = {
        "library": LIBRARY, "arch": arch, "library_path": str(out / LIBRARY),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernel_source": str(src.relative_to(Path.cwd())) if src.is_relative_to(Path.cwd()) else str(src),
        "kernel_source_sha256": sha, "module": module_spec, "library_bytes": size, "work": str(work),
        "cuda": {"version": toolkit.version, "cudart_static": str(toolkit.cudart_static), "origin": toolkit.origin},
        "compile_seconds": round(t_compile, 1), "link_seconds": round(t_link, 1),
        "total_seconds": round(time.perf_counter() - t_start, 1), "jobs": jobs,
        "variants": [{key: r[key] for key in ("name", "variant", "kernels", "regs", "frame", "stack_frame",
                                              "spill_stores", "spill_loads", "local_bytes", "smem", "block",
                                              "compile_s", "cubin_bytes")} for r in rows],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def argument_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m decode_topk.kernel.aot",
        description="Build libdecode_topk.so, every DecodeTopK variant compiled ahead of time, for each GPU arch "
                    "given, where the loader looks for it (no GPU needed; nvidia-cutlass-dsl and a CUDA 13 toolkit "
                    "are).")
    ap.add_argument("--arch", nargs="+", default=["sm_90a"], choices=ARCHS, metavar="ARCH",
                    help=f"GPU archs to build for, one library each: {', '.join(ARCHS)} (compute capability 9.0 "
                         f"and 10.0; default: sm_90a, the H200)")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="where the library and its MANIFEST.json go: DIR itself for one arch, DIR/<arch>/ for "
                         "several (default: where the loader looks, kernel/aot/<arch>/ in the package, or "
                         "$DECODE_TOPK_AOT_DIR/<arch>/ when that is set)")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), metavar="N",
                    help="compile worker processes (default: the CPU count, at most 8; each needs ~0.5 GB)")
    ap.add_argument("--work", default=None, metavar="DIR",
                    help="objects, headers and the generated shim.c (default build/aot_<arch>; DIR/<arch> for "
                         "several archs)")
    ap.add_argument("--module", default=resources.KERNEL_MODULE,
                    help="kernel module (dotted) or a .py stand-in with the same API (e.g. bench/speed_of_light.py)")
    ap.add_argument("--no-trace", action="store_true",
                    help="only the variants without the trace (the library then cannot run the conformance "
                         "suite's traced checks)")
    ap.add_argument("--find-cuda", action="store_true",
                    help="print the CUDA toolkit the link would use (or why none is found: exit 1) and stop")
    return ap


def main(argv=None):
    args = argument_parser().parse_args(argv)
    try:
        if args.find_cuda:
            t = cuda_toolkit()
            print(f"CUDA {t.version} from {t.origin}: {t.include}/cuda_runtime.h, {t.cudart_static}")
            return 0
        several = len(args.arch) > 1
        for arch in args.arch:
            variants = None
            if args.no_trace:
                module = resources.load_kernel_module(args.module)
                variants = module.variants((False,))
            out = None if args.out is None else Path(args.out) / arch if several else Path(args.out)
            work = None if args.work is None else Path(args.work) / arch if several else Path(args.work)
            m = build(arch, out, args.jobs, args.module, variants=variants, work=work)
            print(resources.format_table([dict(r, arch=m["arch"], cubin_arch_ok=True) for r in m["variants"]]))
            print(f"\n{len(m['variants'])} variants for {m['arch']}: compile {m['compile_seconds']} s, "
                  f"link {m['link_seconds']} s, total {m['total_seconds']} s; "
                  f"{m['library_path']}: {m['library_bytes'] / 2**20:.2f} MiB; "
                  f"kernel sha256 {m['kernel_source_sha256'][:12]}")
            local = [f"{v['name']} ({v['local_bytes']} B)" for v in m["variants"] if v["local_bytes"]]
            if local:
                print("WARNING: local memory (spills / stack frame) in " + ", ".join(local))
    except (RuntimeError, ValueError) as e:  # a missing toolkit, a failed compile: the one line says what
        print(f"decode_topk.kernel.aot: {e}", file=sys.stderr)
        return 1
    except ImportError as e:  # the kernel module imports the DSL
        print(f"decode_topk.kernel.aot: the build compiles with the CuTe DSL, which does not import ({e}); "
              f"install it with `pip install 'decode-topk[kernel]'`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
