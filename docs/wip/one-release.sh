#!/usr/bin/env bash
# Session 54: one release a CTA at every cluster arrive (docs/wip/one-release.patch on main
# 31408ee): a bar.sync, then warp 0's arrive with release, the other warps' relaxed. Why:
# B0's arrive takes ~1.1k cycles (its MEMBAR.ALL.GPU), also with the stamps in shared
# memory (session 54, docs/wip/smem-stamps.sh), so the stamp's store was not the cause.
# Built in session 54; ran in session 55 on an H100 (99 s; bench/NOTES.md session 55).
# One call (~300 s: the A/B of the twelve targets at rho 0.9, each grid run
# bounded by --budget 18; both profiles; 45 s of the arm's AOT conformance; carry
# ["build/armsR.tar.xz"], bench/results and docs/evidence moved aside). Build here:
#   git worktree add --detach /work/wtR HEAD && cd /work/wtR && git apply docs/wip/one-release.patch
#   mkdir -p /tmp/pkgR && ln -sfn /work/wtR /tmp/pkgR/decode_topk
#   cd /tmp && PYTHONPATH=/tmp/pkgR python -m decode_topk.kernel.aot --arch sm_90a --work /tmp/build/aot_R
#   cd /work/wtR && PYTHONPATH=/tmp/pkgR python -m decode_topk.kernel.aot --module bench/profile_build.py \
#       --out .aot_profile --arch sm_90a --work /tmp/build/aot_profR
#   slim copy into MAIN/build/R (docs/wip/README.md's tar line, kernel/aot/sm_90a kept) with .aot_sol,
#   then in MAIN (its own traced library, `python -m decode_topk.kernel.aot --arch sm_90a`,
#   .aot_sol and .aot_profile built by bench/NOTES.md's commands):
#   tar cJf build/armsR.tar.xz kernel/aot/sm_90a .aot_sol .aot_profile build/R    (2.4 MB)
# If it pays: B0's arrive ("top" -> "pass2" is not stamped here; read `staged` -> `started`)
# and X1/X2 shorter in the arm's profile, the A/B faster at the cluster points; then the
# arm's whole gate (racecheck and synccheck matter most: it changes what orders DSMEM).
set -u
tar xJf build/armsR.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/device.txt"
R=$PWD
pp() { (cd "$1" && bash .ci/pythonpath); }
PYTHONPATH=$(pp "$R") timeout 160 python3 bench/ab.py run --out "$OUT/ab" --rounds 2 main=. m2=. one=build/R -- \
    --targets --data rho0.9 --no-l2 --budget 18 > "$OUT/ab.txt" 2>&1
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
for arm in . build/R; do
    (cd $arm && echo "== $arm" && PYTHONPATH=$(pp .) timeout 40 python3 bench/profile_phases.py targets --aot .aot_profile --time)
done > "$OUT/prof.txt" 2>&1
(cd build/R && PYTHONPATH=$(pp .) timeout 45 python3 -m decode_topk.conformance --impl aot --level full \
    --build all) > "$OUT/conf_one_all.txt" 2>&1; echo "arm: exit $?" >> "$OUT/conf_one_all.txt"
grep -E "^==|start=" "$OUT/prof.txt"
tail -n 3 "$OUT/conf_one_all.txt"
sed -n '/^| data/,$p' "$OUT/ab.txt"
