#!/usr/bin/env bash
# Session 53: the profile build's stamps into shared memory (docs/wip/smem-stamps.patch,
# kernel only, applies on main 2ce5699; with two probe stamps around a staged sampled
# row's B0 arrive, "top" before it and "pass2" after it, names that path does not
# otherwise record). Built, not run (no device time was left). Why: a stamp is CTA 0's
# thread 0 storing %clock to global memory, and a cluster barrier's arrive compiles to a
# GPU-scope MEMBAR that waits for that store, so a phase that ends in an arrive may be
# inflated by a store's round trip (bench/NOTES.md session 53). One call (~40 s; carry
# ["build/arms5.tar.xz"], bench/results and docs/evidence moved aside). Build here:
#   git worktree add --detach /work/wtS HEAD && cd /work/wtS && git apply docs/wip/smem-stamps.patch
#   mkdir -p /tmp/pkgS && ln -sfn /work/wtS /tmp/pkgS/decode_topk
#   PYTHONPATH=/tmp/pkgS python -m decode_topk.kernel.aot --module bench/profile_build.py --out .aot_profile \
#       --arch sm_90a --work /tmp/build/aot_profS
#   slim copy into MAIN/build/S (docs/wip/README.md's tar line, excluding ./kernel/aot too),
#   then in MAIN: tar cJf build/arms5.tar.xz build/S .aot_profile
# Compare with main's own profile build in the same call (the second profile below; it
# has no "top" / "pass2" on the sampled staged rows). The B0 probe on main's global stamps
# (the patch's third hunk alone, session 53, H100): own samples +205-833, arrive
# +1,075-1,139, wait +156-227 cycles; with the stamps in shared memory the arrive should
# fall to a few hundred if the inflation is the stamp's store.
set -u
tar xJf build/arms5.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader
pp() { (cd "$1" && bash .ci/pythonpath); }
(cd build/S && PYTHONPATH=$(pp .) timeout 60 python3 bench/profile_phases.py targets --aot .aot_profile --time) 2>&1 \
    | grep -E "^==|start="
echo "== main's profile build"
PYTHONPATH=$(pp .) timeout 60 python3 bench/profile_phases.py targets --aot .aot_profile --time 2>&1 | grep -E "^==|start="
