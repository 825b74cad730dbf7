#!/usr/bin/env bash
# The 3x512x4 arm (docs/design/three_cta.md; landed in session 50) on the H200. Every compile but
# 3x512x4's has the PTX of the gated 1339cae18c93 (docs/evidence/df217f48b77f/same_ptx.txt),
# so the gate's every-build steps force 3x512x4 alone (GATE_BUILD) and the rest
# of the gate runs whole (the policy's builds, GPU tests, soak, PDL and invariance).
# Build here: `python -m decode_topk.kernel.aot --arch sm_90a` (with traces,
# ~3.5 min) and `pip wheel . --no-deps -w dist`; .aot_sol with 3x512x4 (docs/wip/three-cta-measure.sh).
# Two calls on one warm machine, the second within 30 s of the first:
#   call 1 (carry .dsl/a dist .aot_sol .aot_floor; ~520 s): bash docs/wip/three-cta-gate.sh 1
#          the DSL's first half staged; the forced-build measurement at 32 and 39 rows
#          (three-cta-measure.sh, ~150 s); the AOT conformance of 3x512x4 and of the policy's
#          builds beside the sanitizers on 3x512x4; the GPU tests on the wheel.
#          (Ran in session 49: docs/evidence/0fcb0c3171cf/.)
#   call 2 (carry .dsl/b dist; ~500 s): bash docs/wip/three-cta-gate.sh 2
#          the JIT conformance of 3x512x4, the soak, the PDL and invariance tests.
# or call 2's steps as two calls on any machines, in either order:
#   soak (carry dist .aot_sol .aot_floor .peers; ~250 s, ~480 s on an H200):
#          bash docs/wip/three-cta-gate.sh soak
#          the soak on the wheel; then, on an H200 only, the grid and targets with the peers.
#   dsl  (carry .dsl/one, docs/wip/dsl-one.sh; ~350 s; the upload holds 64 MiB, so move
#          bench/results, docs/evidence and bench/NOTES.md aside): bash docs/wip/three-cta-gate.sh dsl
#          the DSL in one upload; the JIT conformance of 3x512x4, the PDL and invariance tests.
#   grid (carry dist .aot_sol .aot_floor .peers; ~240 s, an H200): the soak part's grid and
#          targets alone, for when the soak ran on an H100.
# T (seconds, default 540) bounds each call's work so that its files are packed and come back.
set -u
part=${1:?usage: three-cta-gate.sh 1|2|soak|dsl|grid}
export GATE_BUILD=3x512x4
[ "$part" = dsl ] && export DSL_INSTALL=.dsl/one/install.sh
inner() {
    case "$part" in
    1)
        bash .dsl/a/stage.sh
        ROWS=${ROWS:-32 39} LENGTHS=${LENGTHS:-163840 262144 1048576} BUDGET=${BUDGET:-100} \
            bash docs/wip/three-cta-measure.sh > $OUT/measure.txt 2>&1
        bash conformance/h200_gate.sh sanitizers > $OUT/sanitizers_gate.txt 2>&1 & S=$!
        bash conformance/h200_gate.sh aot > $OUT/aot_gate.txt 2>&1
        GATE_AFTER=$S bash conformance/h200_gate.sh gpu-tests > $OUT/gpu_tests_gate.txt 2>&1
        wait $S ;;
    2)
        bash conformance/h200_gate.sh dsl-jit > $OUT/dsl_jit_gate.txt 2>&1
        bash conformance/h200_gate.sh soak > $OUT/soak_gate.txt 2>&1
        bash conformance/h200_gate.sh dsl-tests > $OUT/dsl_tests_gate.txt 2>&1 ;;
    dsl)
        (source $DSL_INSTALL && python3 -c "import cutlass; print('DSL', cutlass.__file__)") \
            > $OUT/dsl_install.txt 2>&1
        bash conformance/h200_gate.sh dsl-jit > $OUT/dsl_jit_gate.txt 2>&1
        bash conformance/h200_gate.sh dsl-tests > $OUT/dsl_tests_gate.txt 2>&1 ;;
    soak)
        bash conformance/h200_gate.sh soak > $OUT/soak_gate.txt 2>&1
        case "$(cat $OUT/device.txt)" in *H200*) ;; *) return 0 ;; esac ;&
    grid)
        python3 -m pip install -q --no-deps --no-index --target /tmp/site-grid dist/*.whl
        PYTHONPATH=/tmp/site-grid python3 bench/grid.py run --peers .peers --passes 2 --budget 190 \
            --out $OUT/r/grid > $OUT/grid.txt 2>&1
        PYTHONPATH=/tmp/site-grid python3 bench/grid.py run --targets --data rho0.9 gaussian \
            --peers .peers --passes 2 --out $OUT/r/targets >> $OUT/grid.txt 2>&1 ;;
    *) echo "usage: three-cta-gate.sh 1|2|soak|dsl|grid" >&2; return 2 ;;
    esac
}
# (call 1's GPU name: three-cta-measure.sh writes device.txt)
[ "$part" != 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/device.txt
export -f inner; export part
timeout "${T:-540}" bash -c inner; echo "$part: exit $?"
# at most 8 files come back: everything but the summaries in one archive
mkdir -p $OUT/r $OUT/ev && tar czf $OUT/call$part.tgz -C $OUT r ev && rm -rf $OUT/r $OUT/ev
[ -f $OUT/measure.txt ] && tail -n 45 $OUT/measure.txt
[ -f $OUT/dsl_install.txt ] && cat $OUT/dsl_install.txt
for f in $OUT/*_gate.txt; do echo "== $(basename $f)"; tail -n 5 "$f"; done
[ -f $OUT/grid.txt ] && tail -n 6 $OUT/grid.txt
