"""Where the time goes: CTA 0's %clock at each PROFILE_STAMPS point (the profile build).

    source .dsl/b/install.sh && python bench/profile_phases.py [SET ...]
    python bench/profile_phases.py [SET ...] --aot .aot_profile     # no DSL on the GPU machine

SETS: cluster (the default), one-cta, one-cta-1024, targets, q-min, cluster-direct, two-cta,
micro, s13, s14, s15, s16, ...; --time also times each configuration's profile build
(CONFIGS below); --base FILE also profiles each configuration on another kernel source
first (an A/B in one run: e.g. `git show main:kernel/decode_topk_cute.py > /tmp/base.py`),
its lines marked `# base` and `# tree`.

Needs the DSL on the GPU machine, or `--aot DIR`: the profile build's own AOT library
(bench/profile_build.py says how to build it), which runs every configuration whose
overrides leave the kernel as built (`data` only; the others are refused). Data:
indexer-like rows at rho 0.9 (bench/grid.py make_logits). Prints, per configuration, the
median over rows of the cycles since kernel entry at each stamp and the paths the rows
took (bench/NOTES.md keeps the history). Each output is checked exactly first (poisoned
before the first launch), so a variant under test that answers wrongly says so.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/grid.py, as `grid`

import numpy as np  # noqa: E402
import torch  # noqa: E402
from grid import launch_library, make_logits  # noqa: E402

from decode_topk.conformance import gpu_check  # noqa: E402
from decode_topk.conformance.gpu_impl import POISON  # noqa: E402
from decode_topk.kernel import policy  # noqa: E402

cute = dtk = None  # the DSL and the kernel module, imported by main() unless --aot

# (rows, width, k, block_mode, (cluster, vectors), overrides): overrides sets attributes
# of the DecodeTopK before it compiles, so one run compares variants of a build that do
# not exist as code paths of their own (e.g. direct_max=1 << 30: every row direct;
# threads=1024: a thread count other than threads_for(cluster); data="gaussian": other
# rows than bench/grid.py's rho 0.9).
DIRECT = {"direct_max": 1 << 30}
SAMPLED = {"direct_max": 0}  # every token row of n > k samples (SPEC 2.4's positions are distinct past 8 C T logits)
CONFIGS = {
    "cluster": [(1, 131072, 2048, False, (8, 8), {}), (8, 131072, 2048, False, (8, 8), {}),
                (32, 32768, 2048, False, (4, 8), {}), (64, 8192, 512, False, (4, 8), {}),
                (1, 131072, 512, True, (8, 8), {}), (1, 1048576, 512, False, (16, 16), {})],
    "one-cta": [(64, 8192, 512, False, (1, 8), {}), (128, 8192, 2048, False, (1, 8), {}),
                (1, 8192, 512, False, (1, 8), {}), (32, 32768, 2048, False, (1, 8), {}),
                (128, 65536, 512, False, (1, 16), {}), (128, 65536, 512, False, (1, 16), DIRECT)],
    "one-cta-1024": [(rows, width, k, False, (1, 8), dict(over, threads=1024))
                     for rows, width, k in ((64, 8192, 512), (128, 8192, 2048), (64, 16384, 512), (32, 32768, 2048),
                                            (64, 32768, 512), (128, 65536, 512), (128, 65536, 2048))
                     for over in ({}, DIRECT)],
    # issue 15's twelve target points (rho 0.9) on the policy's build on the H200 (session 23,
    # kernel 3f48b395fe97: bench/results/2026-12-03_h200_targets_peers_s23.json; 32 x 1M on
    # 3x512x4 since session 50)
    "targets": [(rows, width, k, False, build, {})
                for rows, width, k, build in ((1, 131072, 2048, (8, 8)), (8, 131072, 2048, (8, 8)),
                                              (64, 131072, 2048, (2, 16)), (32, 32768, 2048, (2, 8)),
                                              (64, 8192, 512, (1, 2)), (1, 1048576, 512, (16, 16)),
                                              (8, 524288, 512, (8, 16)), (64, 262144, 512, (2, 4)),
                                              (128, 65536, 512, (1, 16)), (128, 8192, 2048, (1, 2)),
                                              (1, 8192, 512, (1, 2)), (32, 1048576, 2048, (3, 4)))],
    # the least sample rank Q_MIN[k] (SPEC 2.4) against the aim alone (q_min=1, session 7's rule)
    "q-min": [(rows, width, k, False, build, over)
              for rows, width, k, build in ((1, 1048576, 1024, (16, 16)), (1, 1048576, 2048, (16, 16)),
                                            (8, 1048576, 2048, (16, 16)), (14, 1048576, 2048, (16, 16)))
              for over in ({}, {"q_min": 1})],
    # the cluster builds' sampled path against their direct path at 2-16 vectors a thread
    # (bench/NOTES.md sessions 6, 7: SPEC 2.3's d)
    "cluster-direct": [(rows, width, k, False, build, over)
                       for rows, width, k, build in ((1, 65536, 512, (8, 8)), (1, 65536, 2048, (8, 8)),
                                                     (1, 131072, 512, (8, 8)), (1, 131072, 2048, (8, 8)),
                                                     (64, 131072, 2048, (4, 8)), (1, 262144, 2048, (8, 8)),
                                                     (8, 524288, 512, (8, 16)), (1, 131072, 512, (16, 16)),
                                                     (1, 131072, 2048, (16, 16)), (1, 262144, 2048, (16, 16)))
                       for over in (SAMPLED, DIRECT)],
    # the points of session 8's A/B of the histograms' adds (bench/NOTES.md session 8), at
    # rho 0.9 and Gaussian
    "micro": [(rows, width, k, False, build, over)
              for rows, width, k, build in ((64, 8192, 512, (2, 8)), (128, 8192, 2048, (1, 8)),
                                            (32, 32768, 2048, (2, 8)), (128, 32768, 512, (1, 8)),
                                            (128, 65536, 512, (1, 16)),
                                            (1, 131072, 2048, (8, 8)), (64, 131072, 2048, (2, 16)),
                                            (64, 262144, 512, (4, 8)), (1, 1048576, 512, (16, 16)))
              for over in ({}, {"data": "gaussian"})],
    # the 2-CTA builds' sampled path against their direct path at 4-16 vectors a thread
    "two-cta": [(rows, width, k, False, build, over)
                for rows, width, k, build in ((32, 32768, 2048, (2, 8)), (32, 32768, 512, (2, 8)),
                                              (64, 32768, 512, (2, 8)), (32, 65536, 2048, (2, 8)),
                                              (64, 65536, 512, (2, 16)), (64, 131072, 2048, (2, 16)),
                                              (64, 131072, 512, (2, 16)))
                for over in (SAMPLED, DIRECT)],
    # session 13's 13 points (its A/B of the selections' hand-over ran each with experiment
    # attributes of the kernel, since removed: bench/NOTES.md session 13)
    "s13": [(1, 8192, 512, False, (2, 8), {}), (64, 8192, 512, False, (2, 8), {}),
            (64, 8192, 512, False, (2, 8), {"data": "gaussian"}), (128, 8192, 2048, False, (1, 8), {}),
            (32, 32768, 2048, False, (2, 8), {}), (128, 32768, 512, False, (1, 8), {}),
            (128, 32768, 512, False, (1, 8), {"data": "gaussian"}), (1, 131072, 2048, False, (8, 8), {}),
            (64, 131072, 2048, False, (2, 16), {}), (128, 65536, 512, False, (1, 16), {}),
            (1, 1048576, 512, False, (16, 16), {}), (64, 262144, 512, False, (2, 4), {}),
            (1, 1048576, 2048, True, (16, 16), {})],
}
# session 14: the 13 points and the direct rows the write queue takes or borders (a CTA's
# chunk of 2-8 vectors a thread: 32-128 x 32768 on 2x512x8 and 1x512x8, 128 x 8192 on
# 1x512x8; the block row of 1M is one, at 16 slots)
CONFIGS["s14"] = CONFIGS["s13"] + [
    (32, 32768, 512, False, (2, 8), {}), (64, 32768, 2048, False, (2, 8), {"data": "gaussian"}),
    (128, 8192, 512, False, (1, 8), {}), (128, 32768, 2048, False, (1, 8), {})]
# Session 15 (docs/wip/cluster-top.patch, landed in session 16): the windows from the top on
# the clusters, and the second window on the Gaussian rows whose K lies 255-510 steps below M.
CONFIGS["s15"] = CONFIGS["s14"] + [
    (8, 8192, 2048, False, (2, 8), {"data": "gaussian"}), (128, 8192, 2048, False, (1, 8), {"data": "gaussian"}),
    (1, 32768, 512, False, (8, 8), {}), (8, 32768, 2048, False, (8, 8), {"data": "gaussian"})]

# Session 16: the rows of 8,192 that lose to sglang_v2 (and one of 32,768), with the stamps
# top, selected and swept that split the direct path's selection and write.
CONFIGS["s16"] = [(1, 8192, 512, False, (2, 8), {}), (1, 8192, 512, False, (2, 8), {"data": "gaussian"}),
                  (1, 8192, 2048, False, (2, 8), {"data": "gaussian"}),
                  (64, 8192, 512, False, (2, 8), {"data": "gaussian"}),
                  (128, 8192, 2048, False, (1, 8), {"data": "gaussian"}), (128, 8192, 512, False, (1, 8), {}),
                  (32, 32768, 2048, False, (2, 8), {}), (1, 8192, 2048, False, (2, 4), {"data": "gaussian"})]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", default=["cluster"], choices=sorted(CONFIGS),
                        help="which configurations (default: cluster)")
    parser.add_argument("--time", action="store_true",
                        help="also time each configuration's profile build (bench/grid.py's timer: "
                             "CUDA graph replay, L2 evicted, median of 30)")
    parser.add_argument("--base", metavar="FILE",
                        help="also profile each configuration on this kernel source (a copy of "
                             "kernel/decode_topk_cute.py from another revision), before the tree's")
    parser.add_argument("--aot", metavar="DIR",
                        help="the profile build's AOT library in DIR (bench/profile_build.py), not the DSL: "
                             "configurations with overrides other than data are refused")
    args = parser.parse_args(argv)
    global cute, dtk
    if args.aot:
        if args.base:
            parser.error("--base compiles a kernel source with the DSL; it does not go with --aot")
        refused = [f"{name} {config}: {why}" for name in args.sets for config in CONFIGS[name]
                   if (why := aot_refusal(config))]
        if refused:
            raise SystemExit("profile_phases.py --aot: the profile library holds the kernel as built at k 512 and "
                             "2048, so these need the DSL: " + "; ".join(refused))
        import profile_build
        from decode_topk.kernel import aot_loader

        library = aot_loader.load_library_at(args.aot, profile_build.__file__, profile_build.library_sha256())
        kernels = [("tree", None)]
    else:
        import cutlass.cute as cute
        from decode_topk.kernel import decode_topk_cute as dtk
        library = None
        kernels = [("tree", dtk)]
    if args.base:
        # In the kernel's package, so that its `from .policy import` finds the tree's policy.
        spec = importlib.util.spec_from_file_location("decode_topk.kernel._profile_base", args.base)
        base = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = base
        spec.loader.exec_module(base)
        kernels.insert(0, ("base", base))
    timer = None
    if args.time:
        from grid import Timer
        timer = Timer(torch, 5, 30)
        timer.warm_gpu()
    for name in args.sets:
        for config in CONFIGS[name]:
            for label, module in kernels:
                dtk = module
                if args.base:
                    print("#", label)
                profile(*config, timer=timer, library=library)


def aot_refusal(config):
    """Why the profile library cannot run a configuration, or None: overrides that change
    the kernel (anything but `data`), or a variant it does not hold (bench/profile_build.py:
    k 512 and 2048)."""
    import profile_build

    rows, width, k, block_mode, (cluster, vectors), overrides = config
    kernel = sorted(set(overrides) - {"data"})
    if kernel:
        return f"overrides {', '.join(kernel)}"
    held = {(v.k, v.build.cluster, v.build.vectors, v.block_mode) for v in profile_build.variants()}
    if (k, cluster, vectors, block_mode) not in held:
        return f"no variant k={k} {cluster}x{vectors} {'block' if block_mode else 'token'} in the profile library"
    return None


# Session 17: s16's points, rows that fill their slots (2x512x16, 1x512x16, 4x1024x8, the
# streamed 2x512x4), a sampled row and a block row (an A/B of staging's first load batch
# issued before the length read, measured and dropped: bench/NOTES.md session 17), and rows
# of 8,192 on one CTA of 1024 threads (threads overridden; no such build).
CONFIGS["s17"] = CONFIGS["s16"] + [
    (1, 131072, 2048, False, (8, 8), {}), (64, 131072, 2048, False, (2, 16), {}),
    (128, 65536, 512, False, (1, 16), {}), (16, 131072, 2048, False, (4, 8), {}),
    (64, 262144, 512, False, (2, 4), {}), (1, 1048576, 2048, True, (16, 16), {})] + [
    (rows, 8192, k, False, (1, 8), dict(over, threads=1024))
    for rows, k, over in ((1, 512, {}), (1, 2048, {"data": "gaussian"}), (64, 512, {"data": "gaussian"}),
                          (128, 2048, {"data": "gaussian"}))]

# Session 22: the staged builds' samples from their stages (SPEC 2.4) against main's global
# loads (`--base`), the rows that stage (sampled, direct, block), a streamed row and the
# register build (its staged write at k = 2048).
CONFIGS["s22"] = [
    (rows, width, k, block, build, {} if data == "rho0.9" else {"data": data})
    for rows, width, k, block, build, data in (
        (1, 131072, 512, False, (8, 8), "rho0.9"), (1, 131072, 2048, False, (8, 8), "gaussian"),
        (1, 262144, 2048, False, (8, 8), "gaussian"), (1, 524288, 512, False, (8, 16), "gaussian"),
        (1, 524288, 2048, False, (8, 16), "rho0.9"), (1, 1048576, 512, False, (16, 16), "rho0.9"),
        (8, 131072, 2048, False, (8, 8), "rho0.9"), (64, 131072, 2048, False, (2, 16), "rho0.9"),
        (128, 65536, 512, False, (1, 16), "rho0.9"), (32, 32768, 2048, False, (2, 8), "rho0.9"),
        (1, 131072, 512, True, (8, 8), "rho0.9"), (64, 262144, 512, False, (2, 4), "rho0.9"),
        (1, 8192, 2048, False, (1, 2), "gaussian"), (128, 8192, 2048, False, (1, 2), "gaussian"))]

# The L2 prefetches (session 22's docs/wip/l2-prefetch.patch, landed in session 23): each
# point with the prefetch off, then as built, of staging (2.2: 8x512x16 only, STAGE_PREFETCH)
# and of the stream (2.12).
PREFETCH_STAGE = [(1, 524288, 512, (8, 16), "gaussian"), (1, 524288, 2048, (8, 16), "gaussian"),
                  (8, 524288, 512, (8, 16), "rho0.9")]
PREFETCH_STREAM = [(128, 131072, 2048, (1, 4), "gaussian"), (128, 262144, 2048, (1, 4), "gaussian"),
                   (64, 262144, 512, (2, 4), "rho0.9"), (128, 524288, 2048, (2, 4), "gaussian"),
                   (32, 1048576, 2048, (2, 4), "rho0.9")]
CONFIGS["prefetch"] = [
    (rows, width, k, False, build, dict(over, **({} if data == "rho0.9" else {"data": data})))
    for points, off in ((PREFETCH_STAGE, "stage_prefetch"), (PREFETCH_STREAM, "stream_prefetch"))
    for rows, width, k, build, data in points for over in ({off: False}, {})]

# Session 23: the target points, then the grid's points still lost (Gaussian) on the policy's
# builds (bench/NOTES.md session 23).
CONFIGS["s23"] = CONFIGS["targets"] + [
    (128, 131072, 2048, False, (1, 4), {"data": "gaussian"}), (128, 262144, 2048, False, (1, 4), {"data": "gaussian"}),
    (1, 524288, 512, False, (8, 16), {"data": "gaussian"}), (1, 131072, 512, False, (8, 8), {"data": "gaussian"})]

# Session 29: the register build's window from the top at its three target points, and a
# Gaussian row of 4,096 at k = 2048 (K the row's median: the two passes).
CONFIGS["s29"] = [(64, 8192, 512, False, (1, 2), {}), (128, 8192, 2048, False, (1, 2), {}),
                  (1, 8192, 512, False, (1, 2), {}), (64, 4096, 2048, False, (1, 2), {"data": "gaussian"})]
# Session 30: the register build at 512 threads of two vectors (1x512x2), and at 256 rows,
# two CTAs an SM.
CONFIGS["s30"] = CONFIGS["s29"] + [(256, 8192, 512, False, (1, 2), {}), (256, 8192, 2048, False, (1, 2), {})]

# Session 33: the sampled rows of the 16-CTA build staged by copies (SPEC.md 2.2: at least
# SAMPLED_ASYNC_MIN_LENGTH logits, at most SAMPLED_ASYNC_ROWS rows), each as built (two
# copies a thread before B0's arrive), then with none and with all 16 before it
# (`copies_before_b0`), and a row of 4 that stages as before; the `cutoff` stamp falls
# before `staged` where the chain overlaps the copies. With `--base` (a kernel without the
# form) the overrides are unused.
S33_POINTS = [(1, 1048576, 512, "rho0.9"), (1, 1048576, 2048, "rho0.9"), (2, 1048576, 512, "rho0.9"),
              (1, 917504, 512, "rho0.9"), (1, 1048576, 512, "gaussian"), (4, 1048576, 512, "rho0.9")]
CONFIGS["s33"] = [
    (rows, width, k, False, (16, 16), dict(over, **({} if data == "rho0.9" else {"data": data})))
    for rows, width, k, data in S33_POINTS
    for over in ({}, {"copies_before_b0": 0}, {"copies_before_b0": 16})]

# Session 35: the few long rows on the builds that could take them besides the policy's
# (16x512x16 direct up to 131,072 logits, SPEC 2.3; 8x512x8 against 16x512x16 at 262,144;
# 8x512x16 against 16x512x16 at 524,288), kernel as built, so the profile library runs them
# (`--aot`): with `grid.py run --builds`, the stamps behind a policy change.
CONFIGS["s35"] = [
    (rows, width, k, False, build, {} if data == "rho0.9" else {"data": data})
    for rows, width, builds in ((1, 131072, ((8, 8), (16, 16))), (4, 131072, ((8, 8), (16, 16))),
                                (1, 262144, ((8, 8), (16, 16))), (1, 524288, ((8, 16), (16, 16))))
    for k in (512, 2048) for data in ("rho0.9", "gaussian") for build in builds]

# Session 17: the sampled rows of the grid's losing points and of each sampled build, the
# cutoff's window from the largest sample against the two radix passes (the `cutoff` stamp),
# and two direct rows (staging's one more warp store).
CONFIGS["sampled"] = [
    (1, 131072, 512, False, (8, 8), {}), (1, 131072, 2048, False, (8, 8), {}),
    (1, 262144, 512, False, (8, 8), {"data": "gaussian"}), (1, 524288, 512, False, (8, 16), {}),
    (1, 524288, 2048, False, (8, 16), {"data": "gaussian"}), (1, 1048576, 512, False, (16, 16), {}),
    (8, 524288, 512, False, (8, 16), {}), (64, 131072, 2048, False, (2, 16), {}),
    (128, 65536, 512, False, (1, 16), {}), (64, 262144, 512, False, (2, 4), {}),
    (128, 262144, 2048, False, (1, 4), {"data": "gaussian"}), (32, 1048576, 2048, False, (2, 4), {}),
    (1, 8192, 512, False, (2, 8), {}), (128, 8192, 2048, False, (1, 8), {"data": "gaussian"})]

# Session 17: the streamed builds' one pass over their queues (docs/wip/sample-window.patch).
CONFIGS["streamed"] = [
    (64, 262144, 512, False, (2, 4), {}), (128, 262144, 2048, False, (1, 4), {"data": "gaussian"}),
    (32, 1048576, 2048, False, (2, 4), {}), (128, 524288, 512, False, (2, 4), {"data": "gaussian"}),
    (128, 1048576, 2048, False, (2, 4), {"data": "gaussian"}), (64, 131072, 2048, False, (2, 16), {})]


# Session 51: the multi-CTA streamed builds at their grid points, DecodeTopK / its (fixed)
# launch floor 1.5-2.05 there (bench/NOTES.md session 51): where the time goes around the
# stream, 8 and 32 rows of 262,144-1M (3x512x4, 8x512x4, 2x512x4) and 1x512x4 beside them.
CONFIGS["s51"] = [
    (32, 1048576, 2048, False, (3, 4), {}), (32, 1048576, 512, False, (3, 4), {}),
    (32, 262144, 2048, False, (3, 4), {}), (32, 524288, 2048, False, (3, 4), {}),
    (8, 1048576, 512, False, (8, 4), {}), (8, 1048576, 2048, False, (8, 4), {}),
    (64, 1048576, 2048, False, (2, 4), {}), (128, 262144, 2048, False, (1, 4), {})]

# Session 18: the histogram adds' copies on crowded and Gaussian rows (a variant with
# HIST_COPIES = 4 against main's 8: what a 512-bin window of 4 copies would pay a key).
CONFIGS["copies"] = [
    (1, 8192, 512, False, (2, 8), {"data": "rho0.999"}), (1, 8192, 2048, False, (2, 8), {"data": "rho0.999"}),
    (1, 8192, 2048, False, (2, 8), {"data": "gaussian"}), (64, 8192, 512, False, (2, 8), {"data": "gaussian"}),
    (128, 8192, 2048, False, (1, 8), {"data": "gaussian"}), (128, 8192, 2048, False, (1, 8), {"data": "rho0.999"}),
    (1, 131072, 2048, False, (8, 8), {"data": "rho0.999"}), (128, 65536, 512, False, (1, 16), {"data": "rho0.999"}),
    (32, 32768, 2048, False, (2, 8), {"data": "rho0.999"})]


# Session 18: the direct rows of 32,768 that the grid showed 4-7% slower on 5a264f4357d9
# (run on worktrees of 054e31bd57d1 and 5a264f4357d9, twice each).
# Session 19: one 512-bin window from the top in place of two (Gaussian k2048 rows of 8,192,
# whose K lies 255-510 steps below M) and 4 histogram copies, against 5a264f4357d9.
CONFIGS["window"] = CONFIGS["copies"] + [
    (8, 8192, 2048, False, (2, 8), {"data": "gaussian"}), (32, 32768, 2048, False, (2, 8), {"data": "gaussian"}),
    (32, 65536, 2048, False, (4, 8), {"data": "gaussian"}), (1, 32768, 512, False, (8, 8), {})]

CONFIGS["direct32k"] = [
    (1, 32768, 512, False, (8, 8), {}), (1, 32768, 512, False, (8, 8), {"data": "gaussian"}),
    (1, 32768, 2048, False, (8, 8), {"data": "gaussian"}), (32, 32768, 512, False, (2, 8), {"data": "gaussian"}),
    (8, 32768, 2048, False, (8, 8), {"data": "rho0.999"}), (64, 8192, 512, False, (2, 8), {})]

# Session 20: the register build (1x1024x1 then, 1x512x2 since session 30; SPEC 2.13) against the
# policy's builds at 8,192.
CONFIGS["register"] = [
    (rows, 8192, k, False, build, {} if data == "rho0.9" else {"data": data})
    for data in ("rho0.9", "rho0.999", "gaussian") for rows, k in ((1, 512), (1, 2048), (64, 512), (128, 2048))
    for build in ((1, 2), (2, 8) if rows <= 64 else (1, 8))]
# ... four of them, for the gate's run (session 20)
CONFIGS["register-short"] = [
    (rows, 8192, k, False, build, {"data": "gaussian"}) for rows, k in ((1, 2048), (64, 512), (128, 2048))
    for build in ((1, 2), (2, 8) if rows <= 64 else (1, 8))] + [(1, 8192, 512, False, (1, 2), {}),
                                                                 (1, 8192, 512, False, (2, 8), {})]


def dsl_launcher(k, cluster, vectors, block_mode, overrides, threads=None):
    """(launch(logits, lengths, out, trace), threads, trace width) of the profile build
    compiled with the DSL (threads: a thread count other than threads_for's), the
    overrides set on it first."""
    own = dtk.threads_for
    if threads is not None:
        dtk.threads_for = lambda c, v=None: threads if c == cluster else own(c, v)
    try:
        topk = dtk.make_decode_topk(k, cluster, vectors, block_mode, profile=True)
    finally:
        dtk.threads_for = own
    for name, value in overrides.items():
        if not hasattr(topk, name):
            raise SystemExit(f"profile_phases.py: DecodeTopK has no attribute {name!r} to override")
        setattr(topk, name, value)
    compiled = cute.compile(topk, *dtk.fake_arguments(k, topk.trace_width))

    def launch(logits, lengths, out, trace):
        # The arguments are built inside the call: the timer launches on a stream of its own,
        # and cute_arguments carries the stream current when it is called (replaying one
        # built before timed nothing: every configuration read 1.31 us in session 15).
        compiled(*dtk.cute_arguments(logits, lengths, out, trace))
    return launch, topk.threads, topk.trace_width


def aot_launcher(library, k, cluster, vectors, block_mode):
    """The same from the profile build's AOT library (bench/profile_build.py): its traced
    variant of (k, cluster, vectors, mode), on the stream current at each call."""
    import profile_build

    def launch(logits, lengths, out, trace):
        launch_library(library, torch, "profile library", logits, lengths, out, k, cluster, vectors, block_mode,
                       trace)
    return launch, policy.threads_for(cluster, vectors), profile_build.TRACE_WIDTH


def profile(rows, width, k, block_mode, build, overrides, timer=None, library=None):
    """Print one configuration's median stamps and the paths its rows took (timer: also its
    time, bench/grid.py's Timer; library: the profile build's AOT library, not the DSL)."""
    cluster, vectors = build
    overrides = dict(overrides)
    data = overrides.pop("data", "rho0.9")
    threads = overrides.pop("threads", None)
    if library is not None:
        launch, threads, trace_width = aot_launcher(library, k, cluster, vectors, block_mode)
    else:
        launch, threads, trace_width = dsl_launcher(k, cluster, vectors, block_mode, overrides, threads)
    logits = make_logits(torch, data, rows, width, seed=rows * 7 + width)
    lengths = torch.full((rows,), width, dtype=torch.int32, device="cuda")
    out = torch.full((rows, k), POISON, dtype=torch.int32, device="cuda")
    trace = torch.zeros((rows, trace_width), dtype=torch.int32, device="cuda")
    launch(logits, lengths, out, trace)
    torch.cuda.synchronize()
    counts, first = gpu_check.check(logits, lengths, k, block_mode, out)
    violations = int(sum(counts.values()))
    for _ in range(3):
        trace.zero_()
        launch(logits, lengths, out, trace)
        torch.cuda.synchronize()
    fields = trace.cpu().numpy().astype(np.int64)
    median = median_stamps(fields)
    rule = "".join(f" {name}={value}" for name, value in overrides.items()) + ("" if data == "rho0.9" else f" data={data}")
    print(f"== rows {rows} width {width} k {k} {'block' if block_mode else 'token'} build "
          f"{cluster}x{threads}x{vectors}{rule} paths {np.bincount(fields[:, 0], minlength=3).tolist()}"
          + (f" INVALID: {violations} violations, first rows {first}" if violations else " exact"))
    timed = ""
    if timer is not None:
        timed = f"  us={timer.us(lambda: launch(logits, lengths, out, trace))}"
    print("   " + "  ".join(f"{name}={int(v)}" for name, v in zip(policy.PROFILE_STAMPS, median) if v >= 0) + timed)


def median_stamps(fields):
    """Per PROFILE_STAMPS point, the median over rows of the cycles since the row's first
    stamp (the trace's fields past TRACE_FIELDS; a stamp a row never reached reads 0 and
    counts -1, so a point that no row reached prints nothing). %clock wraps at 2^32."""
    stamps = np.asarray(fields, dtype=np.int64)[:, len(policy.TRACE_FIELDS):]
    since = np.where(stamps != 0, (stamps - stamps[:, :1]) & 0xFFFFFFFF, -1)
    return np.median(since, axis=0)


# Session 27: whether a cluster's first exchange waits for its slowest CTA or for its own
# reductions: each CTA's phases of the same rows (profile_rank: the CTA whose thread 0
# records; %clock is per SM, so only the differences within a CTA compare).
CONFIGS["ranks"] = [
    (rows, width, k, False, build, {"profile_rank": r} if r else {})
    for rows, width, k, build, ranks in ((1, 131072, 2048, (8, 8), (0, 1, 3, 5, 7)),
                                         (8, 524288, 512, (8, 16), (0, 3, 7)),
                                         (1, 1048576, 512, (16, 16), (0, 5, 10, 15)),
                                         (64, 131072, 2048, (2, 16), (0, 1)))
    for r in ranks]


if __name__ == "__main__":
    main()
