#!/usr/bin/env bash
# Session 53's second form of the pushed samples (docs/wip/push-last.patch, applied after
# push-samples.patch on main 3643a75: the push after the chunk's last store, where
# push-samples.patch pushed after the first batch's loads, and three probe stamps in
# push_samples for the profile build), against main and the first form, in one device
# call (55 s on an H100). Build here as push-samples.sh's header says, the tree with both
# patches (/work/wtL, /tmp/pkgL, no traces: timing only), then the slim copies build/P and
# build/L (each with .aot_sol, .aot_floor and its .aot_profile) and
#   tar cJf build/arms2.tar.xz kernel/aot/sm_90a .aot_sol .aot_floor .aot_profile build/P build/L
# On the device (carry ["build/arms2.tar.xz"], bench/results and docs/evidence moved aside):
#   bash docs/wip/push-last.sh
set -u
tar xJf build/arms2.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/device.txt"
R=$PWD
pp() { (cd "$1" && bash .ci/pythonpath); }
PYTHONPATH=$(pp "$R") timeout 200 python3 bench/ab.py run --out "$OUT/ab" --rounds 2 main=. push=build/P last=build/L -- \
    --rows 1 8 32 64 --lengths 131072 524288 --ks 512 2048 --data rho0.9 gaussian --no-l2 \
    > "$OUT/ab.txt" 2>&1
rm -rf "$OUT/ab"
for arm in . build/P build/L; do
    (cd $arm && echo "== $arm" && PYTHONPATH=$(pp .) timeout 40 python3 bench/profile_phases.py targets --aot .aot_profile --time)
done > "$OUT/prof.txt" 2>&1
sed -n '/^| data/,$p' "$OUT/ab.txt"
