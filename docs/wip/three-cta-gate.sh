#!/usr/bin/env bash
# The 3x512x4 arm (branch three-cta, docs/design/three_cta.md) on the H200 in two device
# calls on one warm machine, the second within 30 s of the first. Every compile but 3x512x4's
# has the PTX of the gated 1339cae18c93 (docs/evidence/df217f48b77f/same_ptx.txt on the
# branch), so the gate's every-build steps force 3x512x4 alone (GATE_BUILD) and the rest of
# the gate runs whole (the policy's builds, GPU tests, soak, PDL and invariance).
# Build here, on the branch: `python -m decode_topk.kernel.aot --arch sm_90a` (with traces,
# ~3.5 min) and `pip wheel . --no-deps -w dist`; .aot_sol with 3x512x4 (docs/wip/three-cta-measure.sh).
#   call 1 (carry .dsl/a dist .aot_sol .aot_floor; ~520 s): bash docs/wip/three-cta-gate.sh 1
#          the DSL's first half staged; the forced-build measurement at 32 and 39 rows
#          (three-cta-measure.sh, ~150 s); the AOT conformance of 3x512x4 and of the policy's
#          builds beside the sanitizers on 3x512x4; the GPU tests on the wheel.
#   call 2 (carry .dsl/b dist; ~500 s): bash docs/wip/three-cta-gate.sh 2
#          the JIT conformance of 3x512x4, the soak, the PDL and invariance tests.
# T (seconds, default 540) bounds each call's work so that its files are packed and come back.
set -u
part=${1:?usage: three-cta-gate.sh 1|2}
export GATE_BUILD=3x512x4
inner() {
    if [ "$part" = 1 ]; then
        bash .dsl/a/stage.sh
        ROWS=${ROWS:-32 39} LENGTHS=${LENGTHS:-163840 262144 1048576} BUDGET=${BUDGET:-100} \
            bash docs/wip/three-cta-measure.sh > $OUT/measure.txt 2>&1
        bash conformance/h200_gate.sh sanitizers > $OUT/sanitizers_gate.txt 2>&1 & S=$!
        bash conformance/h200_gate.sh aot > $OUT/aot_gate.txt 2>&1
        GATE_AFTER=$S bash conformance/h200_gate.sh gpu-tests > $OUT/gpu_tests_gate.txt 2>&1
        wait $S
    else
        bash conformance/h200_gate.sh dsl-jit > $OUT/dsl_jit_gate.txt 2>&1
        bash conformance/h200_gate.sh soak > $OUT/soak_gate.txt 2>&1
        bash conformance/h200_gate.sh dsl-tests > $OUT/dsl_tests_gate.txt 2>&1
    fi
}
# (call 1's GPU name: three-cta-measure.sh writes device.txt)
[ "$part" = 2 ] && nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/device.txt
export -f inner; export part
timeout "${T:-540}" bash -c inner; echo "call $part: exit $?"
# at most 8 files come back: everything but the summaries in one archive
mkdir -p $OUT/r $OUT/ev && tar czf $OUT/call$part.tgz -C $OUT r ev && rm -rf $OUT/r $OUT/ev
[ -f $OUT/measure.txt ] && tail -n 45 $OUT/measure.txt
for f in $OUT/*_gate.txt; do echo "== $(basename $f)"; tail -n 5 "$f"; done
