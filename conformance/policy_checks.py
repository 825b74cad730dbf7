"""The launch policy at its edges (SPEC.md 2.1), and planted policy bugs.

A build chosen one logit or one row off at a threshold changes no output and no trace,
only speed (or, where a build's capacity is wrong, whether a launch is taken at all), so
the conformance suite cannot see it. `edge_problems()` states SPEC 2.1's thresholds as a
table of (rows, width, mode) -> build at each edge and one past it, for several resident
counts, and returns every disagreement with the policy as it is imported now.

`POLICY_MUTANTS` are realistic bugs of the policy (name -> (description, patch)); `patch`
returns {function name: replacement} for kernel/policy.py's module globals, so a mutant
changes what every caller of `policy.<name>` and every policy function that calls it sees
(they look each other up by name; a name imported by value elsewhere keeps the original,
which is why the edge table calls the policy through the module). The
mutation campaign (`python -m decode_topk.conformance.mutation --target policy`) requires
`edge_problems` to report each one. Planting replaces a module global of kernel/policy.py,
or a class attribute named 'Build.<attr>'.
"""

import contextlib
import itertools
import math

from decode_topk.kernel import policy

# SPEC 2.1's thresholds, spelled out here rather than derived from the policy's own
# capacities, so that a wrong capacity is seen too.
EDGE_1_8 = 32768  # 1x512x8
EDGE_1 = 65536  # 1x512x16 (and 2x512x8)
EDGE_2 = 131072  # 2x512x16
EDGE_8 = 262144  # 8x512x8 and 4x1024x8
EDGE_16 = 524288  # 8x512x16
EDGE_MAX = 1048576  # 16x512x16
EDGE_DIRECT = 65536  # the direct path's longest token row at 4 and 8 CTAs (two vectors a thread)
EDGE_REGISTER = 8192  # the register build 1x512x2's token rows (SPEC 2.13)
REGISTER_BUILD = "1x512x2"  # one CTA of 512 threads, two vectors a thread in registers
EDGE_STAGE = 16384  # 1x512x4's stage (SPEC 2.12): its D
EDGE_STAGE_2 = 32768  # 2x512x4's stage: the same for it
EDGE_STAGE_3 = 49152  # 3x512x4's stage: the same for it
EDGE_STAGE_4 = 65536  # 4x512x4's stage: the same for it
EDGE_STAGE_8 = 131072  # 8x512x4's stage: the same for it
KEYS = 8  # a block row's stage holds 8 keys a vector (SPEC 2.2): its block capacity, 8 x the stage
# The streamed builds (SPEC 2.1, 2.12): their names, (token, block) capacities and D
# (3x512x4 takes token rows only: block capacity 0).
STREAMED = {"1x512x4": ((EDGE_MAX, KEYS * EDGE_STAGE), EDGE_STAGE),
            "2x512x4": ((EDGE_MAX, KEYS * EDGE_STAGE_2), EDGE_STAGE_2),
            "3x512x4": ((EDGE_MAX, 0), EDGE_STAGE_3),
            "4x512x4": ((EDGE_MAX, KEYS * EDGE_STAGE_4), EDGE_STAGE_4),
            "8x512x4": ((EDGE_MAX, KEYS * EDGE_STAGE_8), EDGE_STAGE_8)}
# The block rule (SPEC 2.1): 16x512x16 past EDGE_BLOCK_16 logits while every row's cluster
# is resident, else 8x512x8 while every row's is, else 4x512x4 where it holds the rows and
# every row's is, else 2x512x8 up to its block capacity, else 2x512x16 while every row's
# cluster is resident and the rows are more than twice 8x512x8's resident clusters, else
# 8x512x8 (in waves).
EDGE_BLOCK_16 = 262144
# The stream rule (SPEC 2.1, 2.12): token batches wider than EDGE_1 logits stream up to
# STREAM_WIDTH logits where 2x512x16 would take at least WAVE_RATIO times the waves of the
# streamed build (but not two waves of it past EDGE_TWO_WAVE logits), from STREAM_ROWS rows
# past it, past the 16-CTA build's two waves, and past its one wave (wider than EDGE_16)
# while every row's 8x512x4 cluster is resident; they take 8x512x4 past EDGE_16 logits while
# every row's 8-CTA cluster is resident, else 4x512x4 while every row's 4-CTA cluster
# is, else 1x512x4 past the resident 2x512x4
# clusters up to EDGE_8 logits (at k = 512 up to EDGE_16 while the rows fit one wave of
# 1x512x4), else 2x512x4. Measured on the H200 and the H100 (kernel/policy.py's
# STREAM_ROWS, STREAM_WIDTH, STREAM_1_WIDTH, STREAM_1_WIDTH_K512, STREAM_WIDE_WIDTH,
# STREAM_WAVE_RATIO and STREAM_TWO_WAVE_WIDTH): when they change there, change these with
# them; the edge table follows them.
STREAM_ROWS = 32
STREAM_WIDTH = EDGE_2
WAVE_RATIO = 2
EDGE_TWO_WAVE = 106496
# Past EDGE_STREAM_3 logits a streaming batch takes 3x512x4 while every row's 3-CTA
# cluster is resident (after the 8- and 4-CTA rules past EDGE_16): kernel/policy.py's
# STREAM_3_WIDTH.
EDGE_STREAM_3 = 131072
# SPEC 2.12's constants of the streamed builds (change them with SPEC 2.12).
SPEC_2_12 = {"STREAM_QUEUE": 8192, "STREAM_TILE": 4, "STREAM_DEPTH": 3, "STREAM_VECTORS": 4}


def _resident_table(small, large16, four=None, two=None, two16=None, stream2=None, register=None, stream4=None,
                    stream8=None, stream3=None):
    """resident(build): `small` clusters of each 8-CTA build (and of the 4-CTA and 2-CTA
    ones unless `four` or `two` is given, and of the 1- and 3-CTA ones), `large16` of
    16x512x16; `two16`, if given, of 2x512x16 alone, `stream2` of 2x512x4 alone, `stream3`
    of 3x512x4 alone, `stream4` of 4x512x4 alone and `stream8` of 8x512x4 alone (so a
    policy that asks the wrong 2-, 3-, 4- or 8-CTA build is seen), `register` of the
    register build alone."""
    def resident(build):
        if build.name == REGISTER_BUILD and register:
            return register
        if build.cluster == 3 and stream3:
            return stream3
        if build.cluster == 16:
            return large16
        if build.cluster == 8 and build.vectors == 4 and stream8:
            return stream8
        if build.cluster == 4 and build.vectors == 4 and stream4:
            return stream4
        if build.cluster == 4 and four:
            return four
        if build.cluster == 2 and build.vectors == 16 and two16:
            return two16
        if build.cluster == 2 and build.vectors == 4 and stream2:
            return stream2
        if build.cluster == 2 and two:
            return two
        return small
    return resident


def expected_streams(rows, width, resident, block_mode=False):
    """SPEC 2.1's stream rule: token rows wider than EDGE_1, and up to STREAM_WIDTH where
    the waves of the resident 2x512x16 clusters are at least WAVE_RATIO times those of the
    streamed build, but for two of them past EDGE_TWO_WAVE; past it STREAM_ROWS rows or
    more, or (wider than 8x512x16 holds) rows past the 16-CTA build's two waves, or past
    its one wave while no more than the resident 8x512x4 clusters."""
    if block_mode or width <= EDGE_1:
        return False
    if width <= STREAM_WIDTH:
        staged_waves = math.ceil(rows / resident(policy.Build(2, 512, 16)))
        if width > EDGE_TWO_WAVE and staged_waves == 2:
            return False
        streamed = resident(policy.Build.parse(expected_stream_build(rows, width, resident)))
        return staged_waves >= WAVE_RATIO * math.ceil(rows / streamed)
    large16 = resident(policy.Build(16, 512, 16))
    return rows >= STREAM_ROWS or (width > EDGE_16 and (
        rows > 2 * large16 or large16 < rows <= resident(policy.Build(8, 512, 4))))


def expected_stream_build(rows, width, resident, k=None):
    """Which streamed build a streaming batch takes: past EDGE_16 logits 8x512x4 while the
    rows are no more than the resident 8x512x4 clusters, else 4x512x4 while no more than
    the resident 4x512x4 clusters; past EDGE_STREAM_3 3x512x4 while no more than the
    resident 3x512x4 clusters; else 1x512x4 when the rows
    outnumber the resident 2x512x4 clusters and are at most EDGE_8 logits wide, or at k =
    512 at most EDGE_16 wide and no more than the resident 1x512x4 CTAs; else 2x512x4."""
    if width > EDGE_16 and rows <= resident(policy.Build(8, 512, 4)):
        return "8x512x4"
    if width > EDGE_16 and rows <= resident(policy.Build(4, 512, 4)):
        return "4x512x4"
    if width > EDGE_STREAM_3 and rows <= resident(policy.Build(3, 512, 4)):
        return "3x512x4"
    if rows <= resident(policy.Build(2, 512, 4)):
        return "2x512x4"
    one_wave = rows <= resident(policy.Build(1, 512, 4))
    return "1x512x4" if width <= EDGE_8 or (k == 512 and width <= EDGE_16 and one_wave) else "2x512x4"


def expected_build(rows, width, resident, block_mode=False, k=None):
    """SPEC 2.1's build for rows x width in this mode at k (None: any), as a name
    (independent of kernel/policy.py)."""
    if not block_mode and width <= EDGE_REGISTER:  # at any row count
        return REGISTER_BUILD
    if block_mode:
        if width > EDGE_BLOCK_16 and rows <= resident(policy.Build(16, 512, 16)):
            return "16x512x16"
        if rows <= resident(policy.Build(8, 512, 8)):
            return "8x512x8"
        if width <= KEYS * EDGE_STAGE_4 and rows <= resident(policy.Build(4, 512, 4)):
            return "4x512x4"
        if width <= KEYS * EDGE_1:
            return "2x512x8"
        eight = resident(policy.Build(8, 512, 8))
        return "2x512x16" if 2 * eight < rows <= resident(policy.Build(2, 512, 16)) else "8x512x8"
    if expected_streams(rows, width, resident, block_mode):
        return expected_stream_build(rows, width, resident, k)
    if width <= EDGE_8:
        two_fits = rows <= resident(policy.Build(2, 512, 8))
        if rows <= resident(policy.Build(8, 512, 8)):
            return "8x512x8"
        if width > EDGE_1_8 and rows <= resident(policy.Build(4, 1024, 8)):
            return "4x1024x8"
        if width <= EDGE_1:
            if two_fits:
                return "2x512x8"
            if rows > resident(policy.Build(4, 1024, 8)):
                return "1x512x8" if width <= EDGE_1_8 else "1x512x16"
            return "4x1024x8"
        return "2x512x16" if width <= EDGE_2 else "4x1024x8"
    if width <= EDGE_16 and rows > resident(policy.Build(16, 512, 16)):
        return "8x512x16"
    return "16x512x16"


def edge_problems(p=policy):
    """Disagreements of policy module `p` with SPEC 2.1 at every threshold (a policy that
    raises where SPEC 2.1 has an answer is one too)."""
    try:
        return _edge_problems(p)
    except Exception as exc:  # noqa: BLE001 - a broken policy is a finding, not a crash
        return [f"the policy raised {type(exc).__name__}: {exc}"]


def _edge_problems(p):
    problems = []
    edges = (EDGE_REGISTER, EDGE_STAGE, EDGE_STAGE_2, EDGE_1_8, EDGE_1, EDGE_2, EDGE_8, EDGE_16, EDGE_MAX,
             STREAM_WIDTH, EDGE_TWO_WAVE)
    widths = sorted({0, 1, 8, 4096} | {e + d for e in edges for d in (-1, 0, 1)} - {EDGE_MAX + 1})
    for small, large16, four, two, two16, stream2, register, stream4, stream8, stream3 in (
            (15, 7, 30, 66, None, None, None, None, None, None),
            (30, 14, None, None, None, None, None, None, None, None),
            (1, 1, None, None, None, None, None, None, None, None), (15, 7, 30, 20, None, None, None, None, None, None),
            (15, 7, 30, 66, 40, None, None, None, None, None), (15, 7, 30, 66, 40, 50, None, None, None, None),
            (15, 7, 30, 66, 60, 20, None, None, None, None), (70, 40, None, None, None, None, None, None, None, None),
            (132, 7, 30, 66, None, None, None, None, None, None), (132, 7, 30, 66, 40, 90, None, None, None, None),
            (15, 7, 30, 66, None, None, 132, None, None, None), (132, 7, 30, 66, 40, 90, 50, None, None, None),
            (15, 7, 30, 66, None, None, None, 20, None, None), (15, 7, 30, 66, None, 50, None, 40, None, None),
            (132, 7, 60, 66, 40, 90, None, 36, None, None), (15, 7, 30, 66, None, None, None, None, 12, None),
            (15, 7, 30, 66, None, 50, None, 40, 5, None), (132, 7, 60, 66, 40, 90, None, 36, 20, None),
            (15, 7, 30, 66, None, None, None, 10, 16, None), (30, 7, 30, 66, None, None, None, None, None, None),
            (15, 7, 30, 66, None, None, None, None, None, 40), (15, 7, 30, 66, None, None, None, None, None, 31),
            (132, 7, 30, 66, 40, 90, None, 36, 20, 44), (15, 7, 30, 66, None, 50, None, None, None, 60),
            (70, 40, None, None, None, None, None, None, None, 20)):
        resident = _resident_table(small, large16, four, two, two16, stream2, register, stream4, stream8, stream3)
        four, two, two16, stream2 = four or small, two or small, two16 or two or small, stream2 or two or small
        register = register or small
        stream4 = stream4 or four
        stream8 = stream8 or small
        stream3 = stream3 or small
        row_counts = sorted(({1, small - 1, small, small + 1, stream3 - 1, stream3, stream3 + 1,
                             four - 1, four, four + 1, two - 1, two, two + 1,
                             register - 1, register, register + 1, stream4 - 1, stream4, stream4 + 1,
                             stream8 - 1, stream8, stream8 + 1,
                             stream2 - 1, stream2, stream2 + 1, large16 - 1, large16, large16 + 1, 2 * large16,
                             2 * large16 + 1, STREAM_ROWS - 1,
                             STREAM_ROWS, STREAM_ROWS + 1}
                             | {m * n + d for n in (small, two16) for m in range(1, 7) for d in (-1, 0, 1)}) - {0})
        for width in widths:
            for block_mode in (False, True):
                mode = "block" if block_mode else "token"
                for rows, k in itertools.product(row_counts, (None, 512, 2048)):
                    try:
                        got = p.build_for(rows, width, resident, block_mode, k).name
                    except ValueError as exc:
                        got = f"ValueError({exc})"
                    want = expected_build(rows, width, resident, block_mode, k)
                    if got != want:
                        problems.append(f"build_for(rows={rows}, width={width}, resident {small}/{large16}, {mode}, "
                                        f"k={k}): {got}, SPEC 2.1 says {want}")
                got_limit = p.max_rows(width, resident, block_mode)
                if got_limit is not None:  # (block rows took at most two 16-CTA waves until session 45)
                    problems.append(f"max_rows(width={width}, resident {small}/{large16}, {mode}): {got_limit}, "
                                    "SPEC 2.1 says no limit")
    for width in (-1, EDGE_MAX + 1, EDGE_MAX + 8):
        try:
            p.check_width(width)
            problems.append(f"check_width({width}) accepted a width no build holds")
        except ValueError:
            pass
    for width in (0, EDGE_MAX):
        try:
            p.check_width(width)
        except ValueError as exc:
            problems.append(f"check_width({width}) refused a width a build holds: {exc}")
    # (token, block) capacities: the stage C T V 8 (the streamed builds' token rows: any
    # width) and KEYS times it (a stage of keys, SPEC 2.2)
    capacities = {name: (stage, KEYS * stage) for name, stage in (
        ("8x512x8", EDGE_8), ("4x1024x8", EDGE_8), ("8x512x16", EDGE_16), ("16x512x16", EDGE_MAX),
        ("1x512x8", EDGE_1_8), ("1x512x16", EDGE_1), ("2x512x8", EDGE_1), ("2x512x16", EDGE_2))}
    capacities[REGISTER_BUILD] = (EDGE_REGISTER, 0)
    capacities.update({name: both for name, (both, _) in STREAMED.items()})
    if sorted(b.name for b in p.BUILDS) != sorted(capacities):
        problems.append(f"the builds are {sorted(b.name for b in p.BUILDS)}, SPEC 2.1 and 2.12 say "
                        f"{sorted(capacities)}")
    for build, both in capacities.items():
        for block_mode, capacity in zip((False, True), both):
            got = p.Build.parse(build).capacity_in(block_mode)
            if got != capacity:
                problems.append(f"{build}.capacity_in({block_mode}) is {got}, SPEC 2.1 says {capacity}")
    if {b.name for b in p.BUILDS if b.streams} != set(STREAMED):
        problems.append(f"the builds that stream are {sorted(b.name for b in p.BUILDS if b.streams)}, "
                        f"SPEC 2.12 says {sorted(STREAMED)}")
    for name, want in SPEC_2_12.items():
        if getattr(p, name) != want:
            problems.append(f"{name} = {getattr(p, name)}, SPEC 2.12 says {want}")
    for cluster, want in ((1, 512), (2, 512), (4, 1024), (8, 512), (16, 512)):
        if p.threads_for(cluster) != want:
            problems.append(f"threads_for({cluster}) = {p.threads_for(cluster)}, SPEC 2.1 says {want}")
    if p.threads_for(1, 2) != 512:
        problems.append(f"threads_for(1, 2) = {p.threads_for(1, 2)}, SPEC 2.13 says 512 (the register build)")
    for cluster in (3, 4, 8):
        if p.threads_for(cluster, 4) != 512:
            problems.append(f"threads_for({cluster}, 4) = {p.threads_for(cluster, 4)}, SPEC 2.12 says 512 (the "
                            f"streamed {cluster}x512x4)")
    # SPEC 2.3: the direct path's longest token row, eight vectors a thread at one CTA,
    # four at two, two on the clusters of 4, 8 and 16
    for cluster, want in ((1, EDGE_1_8), (2, EDGE_1_8), (4, EDGE_DIRECT), (8, EDGE_DIRECT),
                          (16, 2 * EDGE_DIRECT)):
        if p.direct_max_length(cluster) != want:
            problems.append(f"direct_max_length({cluster}) = {p.direct_max_length(cluster)}, SPEC 2.3 says {want}")
    # the same for every build by its (C, V), and the streamed builds' stages (SPEC 2.12)
    for build in p.BUILDS:
        want = (STREAMED[build.name][1] if build.name in STREAMED else EDGE_REGISTER if build.name == REGISTER_BUILD
                else p.direct_max_length(build.cluster))
        if p.direct_max_length(build.cluster, build.vectors) != want:
            problems.append(f"direct_max_length({build.cluster}, {build.vectors}) = "
                            f"{p.direct_max_length(build.cluster, build.vectors)}, SPEC 2.3 and 2.12 say {want}")
    want_builds = {(4, 8): 8, (8, EDGE_8): 8, (8, EDGE_8 + 1): 16, (8, EDGE_16): 16, (8, EDGE_16 + 1): None,
                   (16, EDGE_8 + 1): 16, (16, EDGE_MAX): 16, (1, EDGE_1_8): 8, (1, EDGE_1_8 + 1): 16, (1, EDGE_1): 16,
                   (1, EDGE_1 + 1): None,
                   (2, EDGE_1): 8, (2, EDGE_1 + 1): 16, (2, EDGE_2): 16, (2, EDGE_2 + 1): None}
    for (cluster, width), want in want_builds.items():
        if p.vectors_for(width, cluster) != want:
            problems.append(f"vectors_for({width}, {cluster}) = {p.vectors_for(width, cluster)}, SPEC 2.1 says {want}")
    # precompile_builds: every build the rules above pick up to a width, for any resident
    # counts (1x512x4 and 2x512x4 from the first width past EDGE_1: 2x512x4 where it keeps
    # more clusters resident than 2x512x16; 3x512x4 past EDGE_STREAM_3; 4x512x4 and 8x512x4
    # past EDGE_16; block rows: 4x512x4 at every width, 8x512x8 and 2x512x8 at the register
    # build's)
    staged = {"8x512x8", "4x1024x8", "1x512x8", "1x512x16", "2x512x8", "2x512x16", "1x512x4", "2x512x4", "4x512x4",
              REGISTER_BUILD}
    wide = staged | {"8x512x16", "16x512x16"}
    for width, want in ((EDGE_MAX, wide | {"3x512x4", "8x512x4"}), (EDGE_16, wide | {"3x512x4"}),
                        (EDGE_8, staged | {"3x512x4"}),
                        (EDGE_1 + 1, staged),
                        (EDGE_1, {"8x512x8", "4x1024x8", "1x512x8", "1x512x16", "2x512x8", "4x512x4", REGISTER_BUILD}),
                        (EDGE_REGISTER, {"8x512x8", "2x512x8", "4x512x4", REGISTER_BUILD})):
        got = {b.name for b in p.precompile_builds(width)}
        if got != want:
            problems.append(f"precompile_builds({width}) = {sorted(got)}, SPEC 2.1 picks {sorted(want)}")
    return problems + maxima_problems(p)


def maxima_problems(p=policy):
    """Where the direct path's row_max, on a build of `p.BUILDS`, reads other than SPEC
    2.5's words a lane, or would not read each of
    the C x T/32 words of "maxima" exactly once (p.maxima_reads' plan, walked as the
    kernel walks it: lanes below words // per, per // width loads of `width` words from
    word lane per + h width), or would read a 16-byte load misaligned or across a CTA."""
    problems = []
    for build in p.BUILDS:
        if build.registers:  # the register build reads its own T/32 words (SPEC 2.13)
            continue
        warps = build.threads // 32
        words = build.cluster * warps
        per, width = p.maxima_reads(build.cluster, build.threads)
        # SPEC 2.5: the least divisor of the warps that reaches every word with 32 lanes
        want = min(d for d in range(1, warps + 1) if warps % d == 0 and 32 * d >= words)
        if per != want:
            problems.append(f"{build}: row_max reads {per} words a lane, SPEC 2.5 says {want}")
        read = []
        if words // per > 32:
            problems.append(f"{build}: row_max's plan needs {words // per} lanes of one warp")
        for lane in range(words // per):
            for h in range(per // width):
                first = lane * per + h * width
                if first % width or first % warps + width > warps:
                    problems.append(f"{build}: lane {lane}'s load {h} of {width} words from word {first} is "
                                    "misaligned or crosses a CTA")
                read += range(first, first + width)
        if sorted(read) != list(range(words)):
            problems.append(f"{build}: row_max reads {len(read)} words ({len(set(read) - set(range(words)))} "
                            f"outside the {words}; {len(set(range(words)) - set(read))} unread)")
    return problems


# ---------------------------------------------------------------------------------------
# Planted bugs
# ---------------------------------------------------------------------------------------
def _registers_for(width=lambda w, c: w <= c, rows=lambda r, n: True, modes=lambda block_mode: not block_mode):
    def registers_for(rows_, width_, resident, block_mode=False):
        return (modes(block_mode) and width(width_, policy.REGISTER.stage)
                and rows(rows_, resident(policy.REGISTER)))
    return {"registers_for": registers_for}


def _cluster_for(width_8=lambda w, c: w <= c, rows_ok=lambda r, n: r <= n, width_16=lambda w, c: w <= c,
                 width_1=lambda w, c: w <= c, many=lambda r, n: r > n, width_2=lambda w, c: w <= c,
                 rows_2=lambda r, n: r <= n, first_2=lambda w, c: False, two_vectors=8,
                 width_4=lambda w, c: w > c, rows_4=lambda r, n: r <= n, rows_16=lambda r, n: r > n):
    def cluster_for(rows, width, resident):
        policy.check_width(width)
        if width_8(width, policy.Build.of(8, 8).capacity):
            two = rows_2(rows, resident(policy.Build.of(2, two_vectors)))
            if two and first_2(width, EDGE_REGISTER):
                return 2
            if rows_ok(rows, resident(policy.Build.of(8, 8))):
                return 8
            if width_4(width, policy.direct_max_length(2)) and rows_4(rows, resident(policy.Build.of(4, 8))):
                return 4
            if width_1(width, policy.Build.of(1, 16).capacity):
                if two:
                    return 2
                return 1 if many(rows, resident(policy.Build.of(4, 8))) else 4
            return 2 if width_2(width, policy.Build.of(2, 16).capacity) else 4
        if width_16(width, policy.Build.of(8, 16).capacity) and rows_16(rows, resident(policy.Build.of(16, 16))):
            return 8
        return 16
    return {"cluster_for": cluster_for}


def _max_rows(tokens=False):
    """max_rows as it was until session 45: block rows (and with `tokens` token rows too)
    past 8x512x16's width limited to two waves of the 16-CTA build."""
    def max_rows(width, resident, block_mode=False):
        policy.check_width(width)
        if (not block_mode and not tokens) or width <= policy.Build.of(8, 16).capacity:
            return None
        return policy.WAVES_16 * resident(policy.Build.of(16, 16))
    return {"max_rows": max_rows}


def _streams_for(modes=lambda block_mode: not block_mode, low=lambda w, c: w > c, wide=lambda w, c: w > c,
                 ratio=lambda staged, streamed: staged >= policy.STREAM_WAVE_RATIO * streamed, two_build=(2, 16),
                 streamed_build=None, many=lambda r, n: r >= n, past_waves=lambda r, n: r > n,
                 two_wave=lambda w, c: w > c, two_waves=lambda n: n == 2, past_wave=lambda r, n: r > n,
                 fits_8=lambda r, n: r <= n):
    def streams_for(rows, width, resident, block_mode=False):
        if not modes(block_mode) or not low(width, policy.Build.of(1, 16).stage):
            return False
        if not wide(width, policy.STREAM_WIDTH):
            staged = policy.waves(rows, resident(policy.Build.of(*two_build)))
            if two_wave(width, policy.STREAM_TWO_WAVE_WIDTH) and two_waves(staged):
                return False
            streamed = streamed_build or policy.stream_build_for(rows, width, resident)
            return ratio(staged, policy.waves(rows, resident(streamed)))
        if many(rows, policy.STREAM_ROWS):
            return True
        if width <= policy.Build.of(8, 16).stage:
            return False
        wide16 = resident(policy.Build.of(16, 16))
        return past_waves(rows, policy.WAVES_16 * wide16) or (past_wave(rows, wide16) and
                                                              fits_8(rows, resident(policy.STREAM_8)))
    return {"streams_for": streams_for}


def _stream_build_for(narrow=lambda w, c: w <= c, many=lambda r, n: r > n, asked=None,
                      k512=lambda k: k == 512, wide=lambda w, c: w <= c, one_wave=lambda r, n: r <= n,
                      wide_4=lambda w, c: w > c, fits_4=lambda r, n: r <= n, asked_4=None,
                      wide_8=lambda w, c: w > c, fits_8=lambda r, n: r <= n, asked_8=None,
                      wide_3=lambda w, c: w > c, fits_3=lambda r, n: r <= n, asked_3=None):
    def stream_build_for(rows, width, resident, k=None):
        if wide_8(width, policy.STREAM_WIDE_WIDTH) and fits_8(rows, resident(asked_8 or policy.STREAM_8)):
            return policy.STREAM_8
        if wide_4(width, policy.STREAM_WIDE_WIDTH) and fits_4(rows, resident(asked_4 or policy.STREAM_4)):
            return policy.STREAM_4
        if wide_3(width, policy.STREAM_3_WIDTH) and fits_3(rows, resident(asked_3 or policy.STREAM_3)):
            return policy.STREAM_3
        if many(rows, resident(asked or policy.STREAM_2)) and (narrow(width, policy.STREAM_1_WIDTH) or (
                k512(k) and wide(width, policy.STREAM_1_WIDTH_K512) and one_wave(rows, resident(policy.STREAM)))):
            return policy.STREAM
        return policy.STREAM_2
    return {"stream_build_for": stream_build_for}


def _fits_8(fits):
    """The 8x512x4 residency test `fits(rows, resident)` in both places that ask it:
    whether rows stream (streams_for) and which streamed build they take (stream_build_for)."""
    return {**_stream_build_for(fits_8=fits), **_streams_for(fits_8=fits)}


def _asked_first(build, edge):
    """stream_build_for asking `build`'s residency (past the policy constant named `edge`)
    before every other streamed rule (4x512x4 before 8x512x4; 3x512x4 before both)."""
    own = policy.stream_build_for

    def stream_build_for(rows, width, resident, k=None):
        if width > getattr(policy, edge) and rows <= resident(build):
            return build
        return own(rows, width, resident, k)
    return {"stream_build_for": stream_build_for}


def _capacity_in(stream_token=policy.MAX_WIDTH, stream_block=None, keys=policy.KEY_BLOCKS):
    """Build.capacity_in with the streamed builds' capacities replaced (None: token rows,
    the stage; block rows, `keys` times it) and `keys` keys a vector in every block stage."""
    def capacity_in(self, block_mode):
        if block_mode:
            if self.registers:
                return 0
            return keys * self.stage if stream_block is None or not self.streams else stream_block
        if not self.streams:
            return self.stage
        return self.stage if stream_token is None else stream_token
    return {"Build.capacity_in": capacity_in}


def _block_build_for(wide=lambda w, c: w > c, fits_16=lambda r, n: r <= n, fits_8=lambda r, n: r <= n,
                     holds_4=lambda w, c: w <= c, fits_4=lambda r, n: r <= n, holds_2=lambda w, c: w <= c,
                     asked_16=None, asked_8=None, asked_4=None, two=None,
                     third=lambda r, n: r > 2 * n, fits_two16=lambda r, n: r <= n, asked_two16=None, waves=None):
    """block_build_for with one test or one build replaced."""
    def block_build_for(rows, width, resident):
        big, eight = policy.Build.of(16, 16), policy.Build.of(8, 8)
        if wide(width, policy.BLOCK_16_WIDTH) and fits_16(rows, resident(asked_16 or big)):
            return big
        if fits_8(rows, resident(asked_8 or eight)):
            return eight
        if holds_4(width, policy.STREAM_4.capacity_in(True)) and fits_4(rows, resident(asked_4 or policy.STREAM_4)):
            return policy.STREAM_4
        if two is not None:
            return two
        if holds_2(width, policy.Build.of(2, 8).capacity_in(True)):
            return policy.Build.of(2, 8)
        two16 = policy.Build.of(2, 16)
        if third(rows, resident(eight)) and fits_two16(rows, resident(asked_two16 or two16)):
            return two16
        return waves or eight
    return {"block_build_for": block_build_for}


def _vectors_for(fits=lambda w, c: w <= c, choices=None):
    def vectors_for(width, cluster):
        for vectors in (choices or policy.vector_choices)(cluster):
            if fits(width, policy.Build.of(cluster, vectors).capacity):
                return vectors
        return None
    return {"vectors_for": vectors_for}


def _direct_vectors(table, cluster_default):
    return {"DIRECT_VECTORS": table, "DIRECT_VECTORS_CLUSTER": cluster_default}


def _maxima_reads(per=None, width=lambda per: 4 if per % 4 == 0 else 1, own=policy.maxima_reads):
    """maxima_reads with its words a lane `per(words)` (None: the policy's own) or its load
    width `width(per)` replaced."""
    def maxima_reads(cluster, threads):
        per_ = own(cluster, threads)[0] if per is None else per(cluster * threads // 32)
        return per_, width(per_)
    return {"maxima_reads": maxima_reads}


def _check_width(low=0, high=policy.MAX_WIDTH):
    def check_width(width):
        if not low <= width <= high:
            raise ValueError(f"row width {width} is outside [{low}, {high}]")
    return {"check_width": check_width}


def _stream_rule_mutants(cluster, edge, since):
    """The five residency mutants of the streamed build of `cluster` CTAs' rule in
    stream_build_for (past the policy constant named `edge`, while every row's cluster is
    resident): never taken, taken at the edge, at every width, one row past its resident
    clusters, and one row short of them."""
    build, value = f"{cluster}x512x4", getattr(policy, edge)

    def rule(test, arg):
        return lambda: _stream_build_for(**{f"{test}_{cluster}": arg})
    return {
        f"stream_{cluster}_never": (f"streaming batches never take {build} (the rule before session {since})",
                                    rule("fits", lambda r, n: False)),
        f"stream_{cluster}_at_width": (f"{build} from {edge} logits (width >= {value:,}, not >)",
                                       rule("wide", lambda w, c: w >= c)),
        f"stream_{cluster}_any_width": (f"{build} at every streaming width while its clusters are resident",
                                        rule("wide", lambda w, c: True)),
        f"stream_{cluster}_past_resident": (f"{build} for rows = its resident clusters + 1 (two waves)",
                                            rule("fits", lambda r, n: r <= n + 1)),
        f"stream_{cluster}_strict": (f"{build} only while rows < its resident clusters (not <=)",
                                     rule("fits", lambda r, n: r < n)),
    }


POLICY_MUTANTS = {
    # the register build (SPEC 2.1, 2.13)
    "register_width_past": ("the register build takes rows of 8,193 logits",
                            lambda: _registers_for(width=lambda w, c: w <= c + 1)),
    "register_width_strict": ("the register build only below 8,192 logits",
                              lambda: _registers_for(width=lambda w, c: w < c)),
    "register_rows_bounded": ("the register build only while every row's CTA is resident (the rule before "
                              "session 30)", lambda: _registers_for(rows=lambda r, n: r <= n)),
    "register_block_mode": ("block batches take the register build too",
                            lambda: _registers_for(modes=lambda block_mode: True)),
    "register_never": ("no register build", lambda: _registers_for(modes=lambda block_mode: False)),
    "width_8_strict": ("8-CTA 8-vector builds only for width < 262144 (not <=)",
                       lambda: _cluster_for(width_8=lambda w, c: w < c)),
    "width_8_past": ("8-vector builds take width 262145", lambda: _cluster_for(width_8=lambda w, c: w <= c + 1)),
    "resident_strict": ("8x512x8 only while rows < resident (not <=)", lambda: _cluster_for(rows_ok=lambda r, n: r < n)),
    "resident_past": ("8x512x8 for rows = resident + 1", lambda: _cluster_for(rows_ok=lambda r, n: r <= n + 1)),
    "rows_ignored": ("8x512x8 whatever the rows", lambda: _cluster_for(rows_ok=lambda r, n: True)),
    "width_16_strict": ("8x512x16 only for width < 524288", lambda: _cluster_for(width_16=lambda w, c: w < c)),
    "width_1_strict": ("1-CTA builds only for width < 65536", lambda: _cluster_for(width_1=lambda w, c: w < c)),
    "width_1_past": ("1-CTA builds take width 65537", lambda: _cluster_for(width_1=lambda w, c: w <= c + 1)),
    "one_cta_at_resident": ("1-CTA builds from rows = resident 4-CTA clusters (not one more)",
                            lambda: _cluster_for(many=lambda r, n: r >= n)),
    "one_cta_never": ("no 1-CTA build", lambda: _cluster_for(many=lambda r, n: False)),
    "width_2_strict": ("2-CTA builds only for width < 131072", lambda: _cluster_for(width_2=lambda w, c: w < c)),
    "two_cta_past_resident": ("2-CTA builds for rows = resident 2-CTA clusters + 1",
                              lambda: _cluster_for(rows_2=lambda r, n: r <= n + 1)),
    "two_cta_strict": ("2-CTA builds only while rows < resident", lambda: _cluster_for(rows_2=lambda r, n: r < n)),
    "two_cta_never": ("no 2-CTA build up to 65,536 logits (where its residency decides)",
                      lambda: _cluster_for(rows_2=lambda r, n: False)),
    "two_cta_first_past": ("2 CTAs before 8 up to 8,193 logits (the rule up to 8,192, which session 45 removed "
                           "once no batch reached it, one logit past)",
                           lambda: _cluster_for(first_2=lambda w, c: w <= c + 1)),
    "width_2_past": ("2x512x16 takes width 131073", lambda: _cluster_for(width_2=lambda w, c: w <= c + 1)),
    "two_cta_waves_never": ("4x1024x8, not 2x512x16, for 65,537-131,072 logits past the resident 8-CTA clusters",
                            lambda: _cluster_for(width_2=lambda w, c: False)),
    "two_cta_resident_16": ("the 2-CTA rule asks 2x512x16's residency at every width",
                            lambda: _cluster_for(two_vectors=16)),
    "four_cta_never": ("no 4x1024x8 past 32,768 logits while its clusters are resident (the rule before session 16)",
                       lambda: _cluster_for(rows_4=lambda r, n: False)),
    "four_cta_past_resident": ("4x1024x8 for rows = its resident clusters + 1",
                               lambda: _cluster_for(rows_4=lambda r, n: r <= n + 1)),
    "four_cta_strict": ("4x1024x8 only while rows < its resident clusters",
                        lambda: _cluster_for(rows_4=lambda r, n: r < n)),
    "four_cta_from_32768": ("the 4-CTA rule from 32,768 logits (width >= the 2-CTA direct length)",
                            lambda: _cluster_for(width_4=lambda w, c: w >= c)),
    "four_cta_any_width": ("the 4-CTA rule at every width", lambda: _cluster_for(width_4=lambda w, c: True)),
    "four_cta_past_65536": ("the 4-CTA rule only past 65,536 logits",
                            lambda: _cluster_for(width_4=lambda w, c: w > policy.Build.of(1, 16).capacity)),
    "width_16_past": ("8x512x16 takes width 524289", lambda: _cluster_for(width_16=lambda w, c: w <= c + 1)),
    "wide_16_never": ("8x512x16 for every row count up to 524,288 logits (the rule before session 36)",
                      lambda: _cluster_for(rows_16=lambda r, n: True)),
    "wide_16_past_resident": ("16x512x16 up to 524,288 logits for rows = its resident clusters + 1",
                              lambda: _cluster_for(rows_16=lambda r, n: r > n + 1)),
    "wide_16_strict": ("16x512x16 up to 524,288 logits only while rows < its resident clusters",
                       lambda: _cluster_for(rows_16=lambda r, n: r >= n)),
    "wide_16_resident_8": ("the 16-CTA rule up to 524,288 logits asks 8x512x16's residency",
                           lambda: {"cluster_for": (lambda own: lambda rows, width, resident: own(
                               rows, width, lambda b: resident(policy.Build.of(8, 16)) if b.cluster == 16
                               else resident(b)))(policy.cluster_for)}),
    "vectors_16_by_capacity": ("16 CTAs stage the fewest vectors that hold the row (a 16x512x8 build)",
                               lambda: {"vector_choices": lambda c: (8,) if policy.threads_for(c) == 1024
                                        else (8, 16)}),
    "waves_block_two": ("block rows past 524,288 logits limited to two 16-CTA waves (the rule before session 45)",
                        lambda: _max_rows()),
    "block_capacity_stage": ("a block row's stage holds one block a vector (the stage before session 45)",
                             lambda: _capacity_in(keys=1)),
    "block_capacity_keys_4": ("a block row's stage holds 4 keys a vector", lambda: _capacity_in(keys=4)),
    "block_token_rule": ("block rows take the token rule's cluster (the rule before session 45)",
                         lambda: {"block_build_for": lambda rows, width, resident: policy.Build.of(
                             policy.cluster_for(rows, width, resident),
                             policy.vectors_for(width, policy.cluster_for(rows, width, resident)))}),
    "block_16_at_width": ("block rows take 16x512x16 from 262,144 logits (width >= the edge)",
                          lambda: _block_build_for(wide=lambda w, c: w >= c)),
    "block_16_never": ("block rows never take 16x512x16", lambda: _block_build_for(wide=lambda w, c: False)),
    "block_16_past_resident": ("block rows take 16x512x16 one row past its resident clusters",
                               lambda: _block_build_for(fits_16=lambda r, n: r <= n + 1)),
    "block_16_resident_8": ("the block rule's 16-CTA test asks 8x512x8's residency",
                            lambda: _block_build_for(asked_16=policy.Build.of(8, 8))),
    "block_8_strict": ("block rows take 8x512x8 only while fewer than its resident clusters",
                       lambda: _block_build_for(fits_8=lambda r, n: r < n)),
    "block_8_resident_16": ("the block rule's 8-CTA test asks 16x512x16's residency",
                            lambda: _block_build_for(asked_8=policy.Build.of(16, 16))),
    "block_4_any_width": ("block rows take 4x512x4 past its capacity of keys",
                          lambda: _block_build_for(holds_4=lambda w, c: True)),
    "block_4_never": ("block rows never take 4x512x4", lambda: _block_build_for(fits_4=lambda r, n: False)),
    "block_4_resident_2": ("the block rule's 4-CTA test asks 2x512x8's residency",
                           lambda: _block_build_for(asked_4=policy.Build.of(2, 8))),
    "block_2_always_16": ("block rows past the 4-CTA test take 2x512x16 where 2x512x8 holds them",
                          lambda: _block_build_for(two=policy.Build.of(2, 16))),
    "block_2_strict": ("block rows take 2x512x8 only below its capacity of keys",
                       lambda: _block_build_for(holds_2=lambda w, c: w < c)),
    "block_two16_always": ("past 2x512x8's capacity block rows take 2x512x16 at any row count (the rule before "
                           "session 46)", lambda: _block_build_for(third=lambda r, n: True,
                                                                   fits_two16=lambda r, n: True)),
    "block_two16_never": ("past 2x512x8's capacity block rows always take 8x512x8 in waves",
                          lambda: _block_build_for(third=lambda r, n: False)),
    "block_two16_second_wave": ("block rows take 2x512x16 where 8x512x8 would take a second wave",
                                lambda: _block_build_for(third=lambda r, n: r > n)),
    "block_two16_at_twice": ("block rows take 2x512x16 from twice 8x512x8's resident clusters (>=)",
                             lambda: _block_build_for(third=lambda r, n: r >= 2 * n)),
    "block_two16_past_resident": ("block rows take 2x512x16 one row past its resident clusters",
                                  lambda: _block_build_for(fits_two16=lambda r, n: r <= n + 1)),
    "block_two16_resident_8": ("the block rule's 2x512x16 test asks 8x512x8's residency",
                               lambda: _block_build_for(asked_two16=policy.Build.of(8, 8))),
    "block_waves_two16": ("block rows past 2x512x16's resident clusters take it in waves",
                          lambda: _block_build_for(waves=policy.Build.of(2, 16))),
    "block_waves_16": ("block rows past 2x512x16's resident clusters take 16x512x16 in waves",
                       lambda: _block_build_for(waves=policy.Build.of(16, 16))),
    "vectors_strict": ("16 vectors a thread already at the 8-vector capacity",
                       lambda: _vectors_for(fits=lambda w, c: w < c)),
    "vectors_always_16": ("16 vectors a thread whenever the cluster may stage 16",
                          lambda: _vectors_for(choices=lambda c: (16,) if policy.threads_for(c) == 512 else (8,))),
    "width_max_past": ("check_width accepts 1048577", lambda: _check_width(high=policy.MAX_WIDTH + 1)),
    "width_max_strict": ("check_width refuses 1048576", lambda: _check_width(high=policy.MAX_WIDTH - 1)),
    "width_negative": ("check_width accepts -1", lambda: _check_width(low=-1)),
    "direct_one_vector_at_one_cta": ("the 1-CTA builds sample past one vector a thread (4,096 logits)",
                                     lambda: _direct_vectors({1: 1, 2: 4}, 2)),
    "direct_two_cta_as_cluster": ("the 2-CTA builds sample past two vectors a thread (16,384 logits)",
                                  lambda: _direct_vectors({1: 8, 2: 2}, 2)),
    "direct_cluster_one_vector": ("the clusters sample past one vector a thread (the module doc's rule)",
                                  lambda: _direct_vectors({1: 8, 2: 4}, 1)),
    "direct_max_past": ("the direct path takes one logit past its longest row",
                        lambda: {"direct_max_length": (lambda own: lambda cluster, vectors=None:
                                                       own(cluster, vectors) + 1)(policy.direct_max_length)}),
    "direct_stream_as_one_cta": ("1x512x4's D is the 1-CTA builds' 32,768, not its stage (vectors ignored)",
                                 lambda: {"direct_max_length": (lambda own: lambda cluster, vectors=None:
                                                                own(cluster))(policy.direct_max_length)}),
    "direct_stream_one_stage": ("every streamed build's D is 1x512x4's stage, 16,384 (2x512x4's too)",
                                lambda: {"direct_max_length": (lambda own: lambda cluster, vectors=None:
                                                               policy.STREAM.stage if vectors is not None and
                                                               policy.Build.of(cluster, vectors).streams else
                                                               own(cluster, vectors))(policy.direct_max_length)}),
    "streams_one_cta_only": ("only the 1-CTA build of STREAM_VECTORS streams (2x512x4 a staged build)",
                             lambda: {"Build.streams": property(lambda self: self.cluster == 1 and
                                                                self.vectors == policy.STREAM_VECTORS)}),
    "streams_any_vectors": ("every build of one or two CTAs streams, whatever its vectors",
                            lambda: {"Build.streams": property(lambda self: self.cluster in (1, 2))}),
    **_stream_rule_mutants(4, "STREAM_WIDE_WIDTH", 43),
    **_stream_rule_mutants(3, "STREAM_3_WIDTH", 47),
    "stream_4_resident_1024": ("the 4x512x4 rule asks 4x1024x8's residency, not its own",
                               lambda: _stream_build_for(asked_4=policy.Build.of(4, 8))),
    "stream_4_threads_1024": ("the 4-CTA streamed build has 1024 threads, as 4x1024x8 (threads_for by cluster)",
                              lambda: {"threads_for": lambda cluster, vectors=None: 1024 if cluster == 4 else 512}),
    "stream_3_resident_2": ("the 3x512x4 rule asks 2x512x4's residency, not its own",
                            lambda: _stream_build_for(asked_3=policy.STREAM_2)),
    "stream_3_before_four": ("3x512x4's rule asked before 4x512x4's and 8x512x4's",
                             lambda: _asked_first(policy.STREAM_3, "STREAM_3_WIDTH")),
    "stream_3_block_rows": ("3x512x4 holds block rows (a block variant of it, never chosen nor built)",
                            lambda: {"Build.token_only": property(lambda self: self.registers)}),
    "stream_3_staged": ("3x512x4 is a staged build (its token rows past 49,152 logits refused)",
                        lambda: {"Build.streams": property(lambda self: self.cluster in (1, 2, 4, 8) and
                                                           self.vectors == policy.STREAM_VECTORS)}),
    "stream_8_never": ("streaming batches never take 8x512x4, nor do rows within its one wave stream (the rule "
                       "before session 44)", lambda: _fits_8(lambda r, n: False)),
    "stream_8_build_never": ("streaming batches never take 8x512x4 (rows within its one wave stream on 4x512x4)",
                             lambda: _stream_build_for(fits_8=lambda r, n: False)),
    "stream_8_rows_never": ("rows past the 16-CTA build's one wave stay on it up to two waves (8x512x4 only past them)",
                            lambda: _streams_for(fits_8=lambda r, n: False)),
    "stream_8_at_width": ("8x512x4 from STREAM_WIDE_WIDTH logits (width >= 524,288, not >)",
                          lambda: _stream_build_for(wide_8=lambda w, c: w >= c)),
    "stream_8_past_resident": ("8x512x4 for rows = its resident clusters + 1 (two waves)",
                               lambda: _fits_8(lambda r, n: r <= n + 1)),
    "stream_8_strict": ("8x512x4 only while rows < its resident clusters (not <=)",
                        lambda: _fits_8(lambda r, n: r < n)),
    "stream_8_resident_16": ("the 8x512x4 rule asks 8x512x16's residency, not its own",
                             lambda: _stream_build_for(asked_8=policy.Build.of(8, 16))),
    "stream_8_one_wave_of_16": ("rows of one wave of the 16-CTA build stream on 8x512x4 too (rows >= its resident)",
                                lambda: _streams_for(past_wave=lambda r, n: r >= n)),
    "stream_8_before_rows": ("rows within the 16-CTA build's one wave stream on 8x512x4 (no lower bound)",
                             lambda: _streams_for(past_wave=lambda r, n: True)),
    "stream_8_after_4": ("4x512x4 before 8x512x4 where both clusters are resident",
                         lambda: _asked_first(policy.STREAM_4, "STREAM_WIDE_WIDTH")),
    "stream_8_threads_1024": ("the 8-CTA streamed build has 1024 threads (threads_for(8, 4) = 1024)",
                              lambda: {"threads_for": lambda cluster, vectors=None: 1024 if (
                                  cluster == 4 and vectors != policy.STREAM_VECTORS) or (
                                  cluster == 8 and vectors == policy.STREAM_VECTORS) else 512}),
    "streams_four_ctas_at_most": ("only the builds of one, two or four CTAs of STREAM_VECTORS stream (8x512x4 staged)",
                                  lambda: {"Build.streams": property(lambda self: self.cluster in (1, 2, 4) and
                                                                     self.vectors == policy.STREAM_VECTORS)}),
    "streams_two_ctas_at_most": ("only the builds of one or two CTAs of STREAM_VECTORS stream (4x512x4 staged)",
                                 lambda: {"Build.streams": property(lambda self: self.cluster in (1, 2) and
                                                                    self.vectors == policy.STREAM_VECTORS)}),
    "stream_build_two_ctas": ("streaming batches take 2x512x4, never 1x512x4",
                              lambda: {"STREAM": policy.STREAM_2}),
    "stream_build_one_cta": ("streaming batches take 1x512x4, never 2x512x4",
                             lambda: _stream_build_for(many=lambda r, n: True, narrow=lambda w, c: True)),
    "stream_build_one_cta_wide": ("1x512x4 takes streaming rows of 1,048,576 logits too",
                                  lambda: _stream_build_for(narrow=lambda w, c: True)),
    "stream_build_width_strict": ("1x512x4 only below STREAM_1_WIDTH logits (not at it)",
                                  lambda: _stream_build_for(narrow=lambda w, c: w < c)),
    "stream_build_at_resident": ("1x512x4 from rows = the resident 2x512x4 clusters (not one more)",
                                 lambda: _stream_build_for(many=lambda r, n: r >= n)),
    "stream_build_resident_16": ("the streamed build's choice asks 2x512x16's residency, not 2x512x4's",
                                 lambda: _stream_build_for(asked=policy.Build.of(2, 16))),
    "stream_k512_never": ("1x512x4 never past STREAM_1_WIDTH logits, whatever k",
                          lambda: _stream_build_for(k512=lambda k: False)),
    "stream_k512_any_k": ("1x512x4 up to STREAM_1_WIDTH_K512 logits at every k (k = 2048 too)",
                          lambda: _stream_build_for(k512=lambda k: True)),
    "stream_k512_up_to_1m": ("at k = 512, 1x512x4 at any width while its rows fit one wave",
                             lambda: _stream_build_for(wide=lambda w, c: True)),
    "stream_k512_waves": ("at k = 512, 1x512x4 up to STREAM_1_WIDTH_K512 logits in waves too",
                          lambda: _stream_build_for(one_wave=lambda r, n: True)),
    "stream_k512_wave_strict": ("at k = 512, 1x512x4 only below one full wave (rows < resident, not <=)",
                                lambda: _stream_build_for(one_wave=lambda r, n: r < n)),
    # the stream rule (SPEC 2.1, 2.12)
    "stream_never": ("no batch streams", lambda: _streams_for(modes=lambda block_mode: False)),
    "stream_block_mode": ("block batches stream too", lambda: _streams_for(modes=lambda block_mode: True)),
    "stream_from_65536": ("batches of 65,536 logits stream too (width >= 65,536)",
                          lambda: _streams_for(low=lambda w, c: w >= c)),
    "stream_rows_off_by_one": ("batches stream from STREAM_ROWS + 1 rows (rows > STREAM_ROWS)",
                               lambda: _streams_for(many=lambda r, n: r > n)),
    "stream_rows_early": ("batches stream from STREAM_ROWS - 1 rows",
                          lambda: _streams_for(many=lambda r, n: r >= n - 1)),
    "stream_rows_at_any_width": ("STREAM_ROWS rows stream at 65,537-131,072 logits too",
                                 lambda: _streams_for(wide=lambda w, c: w > policy.Build.of(1, 16).stage)),
    "stream_width_inclusive": ("STREAM_ROWS rows of STREAM_WIDTH logits stream (width >= STREAM_WIDTH)",
                               lambda: _streams_for(wide=lambda w, c: w >= c)),
    "stream_ratio_strict": ("rows up to STREAM_WIDTH stream only past twice the streamed build's waves (>, not >=)",
                            lambda: _streams_for(ratio=lambda staged, streamed: staged > 2 * streamed)),
    "stream_ratio_never": ("rows up to STREAM_WIDTH never stream (2x512x16 in waves)",
                           lambda: _streams_for(ratio=lambda staged, streamed: False)),
    "stream_ratio_one": ("rows up to STREAM_WIDTH stream wherever 2x512x16 takes as many waves as the stream",
                         lambda: {"STREAM_WAVE_RATIO": 1}),
    "stream_ratio_three": ("rows up to STREAM_WIDTH stream from three times the streamed build's waves",
                           lambda: {"STREAM_WAVE_RATIO": 3}),
    "stream_ratio_resident_8": ("the rule up to STREAM_WIDTH asks 2x512x8's residency, not 2x512x16's",
                                lambda: _streams_for(two_build=(2, 8))),
    "stream_ratio_streamed_2": ("the rule up to STREAM_WIDTH counts 2x512x4's waves, not the streamed build's",
                                lambda: _streams_for(streamed_build=policy.STREAM_2)),
    "stream_waves_2_five": ("rows up to STREAM_WIDTH stream past five waves of 2x512x16 (the rule of session 16)",
                            lambda: _streams_for(ratio=lambda staged, streamed: staged > 5)),
    "stream_two_wave_never": ("two waves of 2x512x16 stream at every width up to STREAM_WIDTH (the rule before "
                              "session 36)", lambda: _streams_for(two_wave=lambda w, c: False)),
    "stream_two_wave_at_edge": ("two waves of 2x512x16 stay staged from 106,496 logits (width >= the edge)",
                                lambda: _streams_for(two_wave=lambda w, c: w >= c)),
    "stream_two_wave_past": ("two waves of 2x512x16 stream at 106,497 logits too",
                             lambda: _streams_for(two_wave=lambda w, c: w > c + 1)),
    "stream_two_wave_any_width": ("two waves of 2x512x16 never stream, whatever the width",
                                  lambda: _streams_for(two_wave=lambda w, c: True)),
    "stream_two_wave_any_waves": ("past 106,496 logits no row count streams up to STREAM_WIDTH (not only two waves)",
                                  lambda: _streams_for(two_waves=lambda n: n >= 2)),
    "stream_waves_never": ("token rows past the 16-CTA build's two waves stay on it",
                           lambda: _streams_for(past_waves=lambda r, n: False)),
    "stream_waves_at": ("token rows stream at two waves of the 16-CTA build already (rows >= 2 resident)",
                        lambda: _streams_for(past_waves=lambda r, n: r >= n)),
    "waves_limit_tokens": ("max_rows limits token rows past 524,288 logits (the rule before the streamed build)",
                           lambda: _max_rows(tokens=True)),
    "stream_token_capacity_stage": ("the streamed builds hold token rows of their stage only (16,384, 32,768 logits)",
                                    lambda: _capacity_in(stream_token=None)),
    "stream_block_capacity_max": ("the streamed builds hold block rows of 1,048,576 logits",
                                  lambda: _capacity_in(stream_block=policy.MAX_WIDTH)),
    "threads_swapped": ("1024 threads at 8 CTAs, 512 at 4",
                        lambda: {"threads_for": lambda cluster, vectors=None: 1024 if cluster == 8 else 512}),
    "maxima_16_bytes_at_two_words": ("row_max loads 16 bytes a lane past 32 words (session 43's 4x512x4 M of -1)",
                                     lambda: _maxima_reads(width=lambda per: 4 if per > 1 else 1)),
    "maxima_word_a_lane": ("row_max reads a word a lane whatever the words (32 of 64-256)",
                           lambda: _maxima_reads(per=lambda words: 1)),
    "maxima_16_words_a_lane": ("row_max reads words / 16 a lane (past the last word)",
                               lambda: _maxima_reads(per=lambda words: max(1, words // 16))),
    "maxima_per_power_of_two": ("row_max reads words / 32 a lane (the plan before 3x512x4: 48 lanes at 48 words)",
                                lambda: _maxima_reads(per=lambda words: max(1, words // 32))),
}


@contextlib.contextmanager
def planted(name):
    """Within the block, kernel/policy.py carries the policy mutant `name`."""
    if name not in POLICY_MUTANTS:
        raise ValueError(f"unknown policy mutant {name!r}; known: {', '.join(sorted(POLICY_MUTANTS))}")
    replacements = POLICY_MUTANTS[name][1]()
    targets = {attr: _owner(attr) for attr in replacements}
    saved = {attr: getattr(owner, leaf) for attr, (owner, leaf) in targets.items()}
    try:
        for attr, value in replacements.items():
            setattr(*targets[attr], value)
        yield
    finally:
        for attr, value in saved.items():
            setattr(*targets[attr], value)


def _owner(attr):
    """(object, name) that a replacement `attr` ('name' of kernel/policy.py or
    'Build.name') is set on."""
    owner, _, leaf = attr.rpartition(".")
    return (getattr(policy, owner) if owner else policy), leaf


def campaign(names=None):
    """{mutant: problems reported while it is planted} ([] = survived)."""
    return {name: _problems_under(name) for name in (names or POLICY_MUTANTS)}


def _problems_under(name):
    with planted(name):
        return edge_problems()
