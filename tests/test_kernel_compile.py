"""Every DecodeTopK variant compiles for sm_90a and sm_100a without local memory.

CPU only (no GPU): compiles every (k, build, mode) with the trace off, plus one variant
with the trace on, for each architecture, in worker processes (kernel/resources.py; the
DSL reads CUTE_DSL_ARCH once per process). For each it reads the registers and local
memory from the cubin's .nv.info and the ptxas report, and the launch's dynamic shared
memory from the host IR, prints the table (pytest -s) and writes it to
build/kernel_resources.{md,json}.

Fails on: a compile error, any spill or stack frame (local memory), a cubin for the wrong
architecture, shared memory over the opt-in limit, a launch whose block size is not the
build's threads, a register build that no longer fits two CTAs an SM, or a 16-CTA staged
build's sampled row that does not copy each of its slots asynchronously once.

Time: about 5-15 s a token-mode variant and 5-10 s a block-mode one per core; the whole
module takes a few minutes on 2 cores. DTK_COMPILE_JOBS sets the worker count (default:
the CPU count, at most 4).
"""

import json
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")

from decode_topk.kernel import resources  # noqa: E402
from decode_topk.kernel import policy  # noqa: E402

pytestmark = pytest.mark.slow

ARCHS = ("sm_90a", "sm_100a")
SMEM_OPTIN_LIMIT = 232448  # bytes a block may opt in to on sm_90a and sm_100a (227 KB)
SMEM_PER_SM = 233472  # an SM's shared memory on sm_90a and sm_100a (228 KB)
SMEM_RESERVED_PER_CTA = 1024  # of it, kept by the hardware for each resident CTA
REGISTERS_PER_SM = 65536  # 32-bit registers an SM has on sm_90a and sm_100a
JOBS = int(os.environ.get("DTK_COMPILE_JOBS", min(4, os.cpu_count() or 1)))
OUT_DIR = Path(__file__).resolve().parent.parent / "build"
TRACED = policy.Variant(2048, policy.Build.of(8, 8), False, True)  # the one variant also compiled with the trace on


@pytest.fixture(scope="module")
def table():
    variants = resources.all_variants(trace=(False,)) + [TRACED]
    rows, seconds = [], {}
    for arch in ARCHS:
        t0 = time.perf_counter()
        rows += resources.compile_all(variants, arch, jobs=JOBS, progress=False)
        seconds[arch] = time.perf_counter() - t0
    text = resources.format_table(rows)
    total = sum(seconds.values())
    summary = (f"{len(rows)} compiles ({len(variants)} variants x {len(ARCHS)} archs) in {total:.0f} s wall "
               f"with {JOBS} jobs; " + ", ".join(f"{a}: {s:.0f} s" for a, s in seconds.items()))
    OUT_DIR.mkdir(exist_ok=True)
    (OUT_DIR / "kernel_resources.md").write_text(text + "\n\n" + summary + "\n")
    (OUT_DIR / "kernel_resources.json").write_text(json.dumps(rows, indent=1))
    print("\n" + text + "\n\n" + summary)
    return rows


def _bad(rows, predicate):
    return [f"{r['name']}@{r['arch']}" for r in rows if predicate(r)]


def test_every_variant_compiles(table):
    errors = [f"{r['name']}@{r['arch']}: {r['error']}\n{r.get('log', '')[-2000:]}" for r in table if r.get("error")]
    assert not errors, "\n\n".join(errors)
    have = set(resources.load_kernel_module(resources.KERNEL_MODULE).variants())
    assert have == {policy.Variant(k, b, m) for k in policy.KS for b in policy.BUILDS for m in b.modes}


def test_no_local_memory(table):
    ok = [r for r in table if not r.get("error")]
    assert all(r["regs"] is not None for r in ok), _bad(ok, lambda r: r["regs"] is None)
    assert all(r["spill_stores"] is not None for r in ok), "no ptxas report: " + str(
        _bad(ok, lambda r: r["spill_stores"] is None))
    spilled = [f"{r['name']}@{r['arch']}: frame {r['frame']} B, stack {r['stack_frame']} B, "
               f"spill stores {r['spill_stores']} B, loads {r['spill_loads']} B" for r in ok if r["local_bytes"]]
    assert not spilled, "local memory:\n" + "\n".join(spilled)


def test_cubins_are_for_the_requested_arch(table):
    assert not _bad(table, lambda r: not r.get("error") and not r["cubin_arch_ok"])


def test_launch_shape(table):
    for r in table:
        if r.get("error"):
            continue
        k, cluster, vectors, block_mode, trace = r["variant"]
        assert r["block"][0] == policy.threads_for(cluster, vectors), r["name"]
        assert r["smem"] is not None, f"{r['name']}: dynamic smem is not a compile-time constant"
        assert 0 <= r["smem"] <= SMEM_OPTIN_LIMIT, f"{r['name']}@{r['arch']}: smem {r['smem']} B"
        assert r["regs"] * r["block"][0] <= REGISTERS_PER_SM, f"{r['name']}@{r['arch']}: {r['regs']} registers"


def test_register_build_fits_two_ctas_an_sm(table):
    """SPEC.md 2.1, 2.13: two CTAs of the register build share an SM, which is why the policy
    gives it every token batch of at most 8,192 logits a row at any row count (2.1: at
    133-264 rows one wave instead of 1x512x8's two). Registers are allocated 8 a thread at
    a time, so each variant may use at most 64; its shared memory is a few KB."""
    for r in table:
        k, cluster, vectors, block_mode, trace = r["variant"]
        if r.get("error") or policy.Build.of(cluster, vectors) != policy.REGISTER:
            continue
        allocated = -(-r["regs"] // 8) * 8
        assert 2 * allocated * r["block"][0] <= REGISTERS_PER_SM, f"{r['name']}@{r['arch']}: {r['regs']} registers"
        assert 2 * (r["smem"] + SMEM_RESERVED_PER_CTA) <= SMEM_PER_SM, f"{r['name']}@{r['arch']}: smem {r['smem']} B"


def test_sampled_rows_copy_every_slot(table):
    """SPEC.md 2.2: a token variant of a staged build of SAMPLED_ASYNC_CLUSTER CTAs stages a
    sampled row by one `cp.async` a slot, each its own group, and one wait a slot before its
    top is read (V of each in its PTX, unrolled); no other variant copies that way (block
    rows, the other staged builds, the streamed and the register builds load into
    registers). A slot copied twice or never is a wrong stage the suite sees only on the
    H200."""
    for r in table:
        if r.get("error"):
            continue
        k, cluster, vectors, block_mode, trace = r["variant"]
        build = policy.Build.of(cluster, vectors)
        copies = (not block_mode and not build.streams and not build.registers
                  and cluster >= policy.SAMPLED_ASYNC_CLUSTER)
        want = {op: vectors if copies else 0 for op in resources.PTX_COUNTED}
        assert r.get("ptx_ops") == want, f"{r['name']}@{r['arch']}: {r.get('ptx_ops')} (no PTX kept?), want {want}"
