#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck over conformance/sanitize.py (the AOT
# library; every path, fallback and build), on the DecodeTopK kernels only (torch's own
# kernels are not ours). Usage: bash conformance/sanitizers.sh OUT_DIR [SECONDS_PER_TOOL]
# [driver args...]. Each tool's full log goes to OUT_DIR/<tool>.log; its summary is printed.
# racecheck instruments every shared-memory access (~4 s a launch on the H200), so it runs
# the driver at k = 2048 only (RACECHECK_KS; k is a compile-time constant, the paths and
# barriers are the same); memcheck and synccheck run every k.
set -u
out=${1:-build/sanitizers}; shift || true
limit=${1:-170}; shift || true
mkdir -p "$out"
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -z "$cs" ]; then echo "compute-sanitizer not found"; exit 2; fi
"$cs" --version | tail -1
status=0
for tool in memcheck racecheck synccheck; do
    extra=(); driver=()
    [ "$tool" = racecheck ] && extra=(--racecheck-report all) && driver=(--ks ${RACECHECK_KS:-2048})
    start=$(date +%s)
    timeout "$limit" "$cs" --tool "$tool" "${extra[@]}" --kernel-name kns=DecodeTopK --error-exitcode 99 \
        --print-limit 20 python -m decode_topk.conformance.sanitize "$@" "${driver[@]}" > "$out/$tool.log" 2>&1
    rc=$?
    echo "== $tool: exit $rc after $(( $(date +%s) - start )) s"
    grep -E "launches in|ERROR SUMMARY|RACECHECK SUMMARY|hazard|Invalid|Error" "$out/$tool.log" | tail -6
    [ $rc -ne 0 ] && status=1
done
exit $status
