#!/usr/bin/env bash
# The pushed-samples arm (docs/wip/push-samples.patch, session 52) measured on the GPU in
# one call (~400 s), before its gate. Build here first (CPU, ~10 min with 2 CPUs):
#   git worktree add -b push-samples /work/wtP HEAD && cd /work/wtP && git apply docs/wip/push-samples.patch
#   mkdir -p /tmp/pkgP && ln -sfn /work/wtP /tmp/pkgP/decode_topk
#   (cd /tmp && PYTHONPATH=/tmp/pkgP python -m decode_topk.kernel.aot --arch sm_90a --work /tmp/build/aot_P)
#   PYTHONPATH=/tmp/pkgP python -m decode_topk.kernel.aot --module bench/profile_build.py --out .aot_profile \
#       --arch sm_90a --work /tmp/build/aot_profP
#   the planted tree the same way from a worktree with push-samples-planted.patch applied
#   after it (/work/wtQ, /tmp/pkgQ; its profile library is not needed);
#   main's own kernel/aot/sm_90a (with traces) and .aot_profile (bench/NOTES.md session 51);
#   then the slim copies, as docs/wip/README.md: build/P (with .aot_sol and .aot_floor) and
#   build/Q, and one archive:
#   tar cJf build/arms.tar.xz kernel/aot/sm_90a .aot_sol .aot_floor .aot_profile build/P build/Q
# On the device (carry ["build/arms.tar.xz"]; move bench/results and docs/evidence aside
# first, the upload's 64 MiB): bash docs/wip/push-samples.sh
# Steps, each bounded so that the call's files come back:
#   1. bench/ab.py: main, main again (the A/A arm) and the arm, two rounds, on the staged
#      sampled builds' points (and the streamed and direct ones beside them, which the arm
#      leaves alone: controls).
#   2. The profile build's phases at issue 15's twelve points, main then the arm.
#   3. The planted bug (the odd lanes' samples lost): the AOT conformance of 8x512x8 must
#      fail (trace fields against the model's).
#   4. The arm's AOT conformance, every build, full, strict, traces against the model's.
set -u
tar xJf build/arms.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/device.txt"
R=$PWD
pp() { (cd "$1" && bash .ci/pythonpath); }
PYTHONPATH=$(pp "$R") timeout 200 python3 bench/ab.py run --out "$OUT/ab" --rounds 2 main=. m2=. push=build/P -- \
    --rows 1 8 32 64 --lengths 131072 262144 524288 1048576 --ks 512 2048 --data rho0.9 gaussian --no-l2 \
    > "$OUT/ab.txt" 2>&1
PYTHONPATH=$(pp "$R") timeout 40 python3 bench/profile_phases.py targets --aot .aot_profile --time \
    > "$OUT/prof_main.txt" 2>&1
(cd build/P && PYTHONPATH=$(pp .) timeout 40 python3 bench/profile_phases.py targets --aot .aot_profile --time) \
    > "$OUT/prof_push.txt" 2>&1
(cd build/Q && PYTHONPATH=$(pp .) timeout 60 python3 -m decode_topk.conformance --impl aot --level full \
    --build 8x512x8) > "$OUT/conf_planted_8x512x8.txt" 2>&1; echo "planted: exit $?" >> "$OUT/conf_planted_8x512x8.txt"
(cd build/P && PYTHONPATH=$(pp .) timeout 240 python3 -m decode_topk.conformance --impl aot --level full \
    --build all) > "$OUT/conf_push_all.txt" 2>&1; echo "arm: exit $?" >> "$OUT/conf_push_all.txt"
tail -n 40 "$OUT/ab.txt"
tail -n 4 "$OUT/conf_planted_8x512x8.txt" "$OUT/conf_push_all.txt"
