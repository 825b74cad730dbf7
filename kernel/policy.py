"""DecodeTopK's host side without the DSL: the constants of SPEC.md part 2, the builds and
the launch policy (SPEC.md 2.1), the input checks (SPEC.md 1.5) and the host front end
that every launcher shares.

Plain Python: torch is imported inside the functions that read tensors, never at import,
so the model (reference/model.py), the conformance suite and the AOT loader use the very
rules the kernel module uses. The kernel module (decode_topk_cute.py) imports these names
from here; its single-file vendorable form, written by `python -m
decode_topk.kernel.vendor`, carries this module's body inlined at that import, so this
module may import only the standard library.

The front end, `launch`, is the skeleton of one call (output, checks, empty batch, the
build) written once; a *launcher* supplies what differs between the DSL JIT and the AOT
library: how many clusters of a build the device keeps resident, and how one variant is
enqueued on the current stream.
"""

import numbers
import typing

# ---------------------------------------------------------------------------------------
# Constants (SPEC.md part 2)
# ---------------------------------------------------------------------------------------
LOGITS_PER_VECTOR = 8  # one 16-byte vector of BF16 logits, or one block
# The register build's vectors a thread (SPEC.md 2.13): 2 at 512 threads, 1 at 1024 until
# session 30 (a median 0.98 of the time at 1-128 rows, fewer warps issuing its fixed steps;
# two CTAs an SM past them).
REGISTER_VECTORS = 2
SAMPLES = 2048  # sampled path: samples a row


def sample_chunks(cluster):
    """The chunks a row's 2048 samples are spread over (SPEC.md 2.4): the C CTAs' where C
    divides 2048 (every build but 3x512x4), else one, the whole row (3x512x4, whose samples
    are 1x512x4's: every CTA of a streamed build reads all 2048 from global memory, so they
    need not follow its chunks, and where the row's vectors split evenly into 16 chunks,
    as at every width of the grid, they are the power-of-two builds' own, so every build
    takes the same cutoff)."""
    return cluster if SAMPLES % cluster == 0 else 1


# Sample j of a chunk lies at the middle o of its part moved down to the nearest logit p
# with p = 2j mod SAMPLE_BANK_LOGITS (SPEC.md 2.4): 64 two-byte logits span the 32 four-byte
# banks of shared memory once, so the 32 samples a warp reads from its stage lie in 32
# banks. At the middles alone every sample of a chunk of 65,536 logits sat in one of two
# banks (16 lanes of a warp on a bank). Measured on the H200, three seeds (bench/NOTES.md
# session 28): 1x512x16 0.977 of the time, 2x512x16 0.975, 2x512x8 0.982; 8 and 16 CTAs a
# row (256 samples a CTA) 0.99-1.00; the streamed builds (global loads) 0.99.
SAMPLE_BANK_LOGITS = 64
# Sampled path: q aims at k + SURVIVOR_AIM keys at or above the cutoff (SPEC.md 2.4,
# bench/fallback_rates.py), and is at least Q_MIN[k]: the keys at or above the q-th largest
# of 2048 samples of n logits number about Gamma(q) n / 2048 (mean q, deviation sqrt(q) in
# those units), so q - 2 sqrt(q) >= 2048 k / 1,048,576 keeps k of them two deviations
# below the mean at the widest row: q >= (1 + sqrt(1 + k / 512))^2. (Four deviations,
# Q_MIN = {18, 20, 24}, cost 11-14% of CTA 0's cycles at 524,288-1,048,576 logits on the
# H200: bench/NOTES.md session 8.) And q is at most m + ceil(sqrt(Q_DEVIATIONS^2 m)), m =
# ceil(2048 k / length): the samples above the row's k-th largest key number about
# Poisson(m) (deviation sqrt(m)), and the row underflows only when q or more of them are,
# so q Q_DEVIATIONS deviations above m keeps that chance below 7.6e-5 a row wherever this
# bound is below the aim (Poisson tails: below 629,146 logits at k = 512, 386,318 at
# 1024, 219,470 at 2048), where the aim alone was up to 40 deviations above m, and every
# key at or above the cutoff costs each pass and the write (SPEC.md 2.4).
SURVIVOR_AIM = 2560
Q_MIN = {512: 6, 1024: 8, 2048: 11}
Q_DEVIATIONS = 5
# A staged sampled attempt selects in one 256-bin pass of key - cutoff (SPEC.md 2.5): the
# keys cutoff .. cutoff + 254 a bin each, every key from cutoff + NARROW_SPAN up in the last,
# so K is found exactly unless K >= cutoff + NARROW_SPAN (then the row takes the direct
# path: the trace's overflow). On the grid's rows K - cutoff is 0-81 (bench/NOTES.md
# session 14): about q length / 2048 keys (at most k + SURVIVOR_AIM) lie at or above the
# cutoff, a few key steps.
NARROW_SPAN = 255
if not 0 < NARROW_SPAN <= 255:  # its bin must be one of the pass's 256 (the kernel's and the model's)
    raise ValueError(f"NARROW_SPAN = {NARROW_SPAN} is outside [1, 255]")
# The direct path's window from the row's largest key M (token mode, SPEC.md 2.5): one
# 512-bin pass of TOP_SPAN - min(M - key, TOP_SPAN) places K exactly where it lies less
# than TOP_SPAN steps below M (Gaussian rows of 8,192 at k = 2048: 197-351 steps); else the
# two passes. Its TOP_SPAN + 1 bins: 16 a lane of the selecting warp (4 16-byte loads).
TOP_SPAN = 511
KS = (512, 1024, 2048)
MAX_WIDTH = 1048576
WAVES_16 = 2  # token rows past two waves of the 16-CTA build stream
# A block row stages one 2-byte key a block (SPEC.md 2.2), KEY_BLOCKS to a 16-byte key
# vector, so a build's stage holds KEY_BLOCKS times as many blocks as it holds vectors.
KEY_BLOCKS = 8
KEY_POS_INF = 0xFF80  # order_key(+inf): the pinned newest block
KEY_NEG_INF = 0x007F  # order_key(-inf): a block written as -1
TRACE_FIELDS = ("path", "reason", "q", "cutoff", "gt", "eq", "kth", "above")
# The profile build appends, per row, CTA 0's %clock at these points (bench/, not a contract).
PROFILE_STAMPS = ("start", "inputs", "staged", "started", "cutoff", "queued", "top", "pass1", "exchange1", "pass2",
                  "exchange2", "selected", "swept", "placed", "end")


# ---------------------------------------------------------------------------------------
# Builds and variants
# ---------------------------------------------------------------------------------------
def threads_for(cluster, vectors=None):
    """Threads a CTA: 1024 at 4 CTAs a row (4x1024x8), else 512 (1, 2, 8 and 16 CTAs, the
    register build REGISTER among them, and the 4-CTA streamed build STREAM_4, whose tile
    of STREAM_TILE vectors a thread keeps at most 64 (slot, warp) counts only at 512
    threads: SPEC.md 2.12). `vectors` (None: a staged build) decides only at 4 CTAs (the
    register build had 1024 threads of one vector until session 30: SPEC.md 2.13)."""
    return 1024 if cluster == 4 and vectors != STREAM_VECTORS else 512


def maxima_reads(cluster, threads):
    """How the direct path's row_max reads the C x T/32 words of "maxima" (each warp's
    largest key, every CTA's; SPEC.md 2.5) into one warp: (per, width). Lane l reads words
    l per .. l per + per - 1 of the row's C x W (W = T/32 warps a CTA, CTA-major: word w is
    CTA w // W's word w % W), in loads of `width` consecutive words (4: one 16-byte DSMEM
    load, 1: one word); lanes from words / per read none (up to 32 words, a word a lane). Why not
    always 16-byte loads: at 64 words (4x512x4) a lane's two are half a load (session 43's
    gate found that plan's empty loop). ValueError where no lane's words fit in one CTA."""
    warps = threads // 32
    words = cluster * warps
    # The fewest words a lane that reach every word with 32 lanes and keep a lane's words in
    # one CTA (per divides the warps): words / 32 where both are powers of two, 2 at 48
    # words (3x512x4: 24 lanes of two).
    per = next((p for p in range(1, warps + 1) if warps % p == 0 and 32 * p >= words), None)
    if per is None or words % per:
        raise ValueError(f"row_max has no plan for {cluster} CTAs of {threads} threads ({words} words)")
    return per, (4 if per % 4 == 0 else 1)


def vector_choices(cluster):
    """The 16-byte vectors a thread may stage: 8, or 16 at 512 threads (1024 threads
    leave too few registers for 16); at 16 CTAs only 16, its one build 16x512x16 (it takes
    the few rows of 262,145-524,288 logits as well, SPEC.md 2.1, and a 16x512x8 would be a
    build of its own nobody has measured)."""
    if cluster == 16:
        return (16,)
    return (8,) if threads_for(cluster) == 1024 else (8, 16)


class Build(typing.NamedTuple):
    """One launch shape: `cluster` CTAs a row, `threads` a CTA, `vectors` 16-byte vectors
    staged a thread. Spelled `CxTxV` (its name, e.g. 8x512x8) wherever a person types it."""

    cluster: int
    threads: int
    vectors: int

    @property
    def name(self):
        return f"{self.cluster}x{self.threads}x{self.vectors}"

    @property
    def stage(self):
        """Logits a row's cluster stages in shared memory: C T V 8."""
        return self.cluster * self.threads * self.vectors * LOGITS_PER_VECTOR

    @property
    def streams(self):
        """Whether token rows longer than the stage stream from global memory (SPEC.md
        2.12): the builds of one, two, three, four and eight CTAs of STREAM_VECTORS vectors
        a thread."""
        return self.cluster in (1, 2, 3, 4, 8) and self.vectors == STREAM_VECTORS

    @property
    def registers(self):
        """Whether this is the register build (SPEC.md 2.13): one CTA of 512 threads,
        REGISTER_VECTORS vectors a thread kept in registers, token rows only."""
        return self.vectors == REGISTER_VECTORS

    @property
    def token_only(self):
        """Whether the build takes token rows only: the register build (SPEC.md 2.13), and
        3x512x4, a streamed build for token batches that no block batch's rule takes (its
        stage holds a block row of 393,216 logits, where the block rule has faster builds:
        SPEC.md 2.1), so no block variant of it is built."""
        return self.registers or self.cluster == 3

    @property
    def capacity(self):
        """Logits a token row of this build may hold: its stage, or MAX_WIDTH where it
        streams (block rows: capacity_in)."""
        return MAX_WIDTH if self.streams else self.stage

    def capacity_in(self, block_mode):
        """Logits a row of this build may hold in this mode: a block row's stage holds
        KEY_BLOCKS keys a vector (its blocks never stream), and a token-only build takes
        none (0)."""
        if block_mode:
            return 0 if self.token_only else KEY_BLOCKS * self.stage
        return self.capacity

    @property
    def modes(self):
        """The modes (block_mode values) this build is compiled for."""
        return (False,) if self.token_only else (False, True)

    def __str__(self):
        return self.name

    @classmethod
    def of(cls, cluster, vectors):
        """The build of `cluster` CTAs staging `vectors` a thread (threads_for(cluster,
        vectors))."""
        return cls(cluster, threads_for(cluster, vectors), vectors)

    @classmethod
    def parse(cls, spec):
        """The Build named by spec: a Build, 'CxTxV', (cluster, vectors) or
        (cluster, threads, vectors); ValueError unless it is one of BUILDS."""
        if isinstance(spec, cls):
            parts = tuple(spec)
        elif isinstance(spec, str):
            try:
                parts = tuple(int(x) for x in spec.split("x"))
            except ValueError:
                parts = ()
            if len(parts) != 3:  # the one spelling a person types: all three numbers
                raise ValueError(f"build {spec!r} is not CxTxV (e.g. {BUILDS[0].name})")
        elif isinstance(spec, (tuple, list)) and all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                                                     for x in spec):
            parts = tuple(int(x) for x in spec)
        else:
            raise ValueError(f"build {spec!r} is not a Build, 'CxTxV', (cluster, vectors) or "
                             f"(cluster, threads, vectors)")
        if len(parts) == 2:
            parts = (parts[0], threads_for(*parts), parts[1])
        if len(parts) != 3 or parts not in BUILDS:
            raise ValueError(f"build {spec!r} is not one of {', '.join(b.name for b in BUILDS)}")
        return cls(*parts)


# The streamed builds (SPEC.md 2.12): one, two, three, four or eight CTAs of 512 threads
# staging 4 vectors a thread (16,384, 32,768, 49,152, 65,536 or 131,072 logits); each CTA
# streams its chunk of a longer token row from global memory into a queue of at most
# STREAM_QUEUE vectors, in tiles of STREAM_TILE vectors a thread, each thread's loads
# STREAM_DEPTH - 1 tiles ahead of the tile it tests.
STREAM_VECTORS = 4
STREAM_QUEUE = 8192
STREAM_TILE = 4
STREAM_DEPTH = 3
# Whether one thread of the CTA prefetches into L2, a step of STREAM_DEPTH - 1 tiles at a
# time, the tiles whose loads the next step issues (SPEC.md 2.12), so that those loads
# find them in L2 or on their way: medians by row count 0.95-0.97 of the time without it
# on 1x512x4, 0.955-1.00 on 2x512x4; 18 of 264 timings up to 2% slower (forced builds,
# 1-256 rows x 98,304-1,048,576 logits, bench/NOTES.md session 23).
STREAM_PREFETCH = True

# The builds of SPEC.md 2.1.
BUILDS = tuple(Build.of(cluster, vectors) for cluster, vectors in
               ((8, 8), (4, 8), (8, 16), (16, 16), (1, 8), (1, 16), (2, 8), (2, 16), (1, STREAM_VECTORS),
                (2, STREAM_VECTORS), (4, STREAM_VECTORS), (8, STREAM_VECTORS), (1, REGISTER_VECTORS),
                (3, STREAM_VECTORS)))
STREAM = Build.of(1, STREAM_VECTORS)
STREAM_2 = Build.of(2, STREAM_VECTORS)
STREAM_3 = Build.of(3, STREAM_VECTORS)
STREAM_4 = Build.of(4, STREAM_VECTORS)
STREAM_8 = Build.of(8, STREAM_VECTORS)
# The builds whose staging first prefetches the CTA's chunk into L2 (SPEC.md 2.2): 8x512x16,
# 2.5-4.5% faster on single rows of 524,288 logits, 0.5-2.4% on 8 of them. Not the other
# builds that stage in batches (bench/NOTES.md session 23): 1x512x16 at 128 x 65536 and
# 2x512x16 in one wave (64-66 rows) were up to 3.8% and 4.4% slower, where every SM already
# has a CTA's loads in flight; 16x512x16 1% slower; 4x1024x8 at 16 rows unchanged.
STAGE_PREFETCH = (Build.of(8, 16),)
# A staged build's sampled row on clusters of at least SAMPLED_ASYNC_CLUSTER CTAs, of at
# least SAMPLED_ASYNC_MIN_LENGTH logits, in a launch of at most SAMPLED_ASYNC_ROWS rows
# (SPEC.md 2.2, 2.4, 2.10) copies its chunk into the stage asynchronously and selects its
# cutoff from samples read from global memory while the chunk lands. Measured (bench/NOTES.md
# sessions 32-33, A/A arms within 0.97-1.03): on every staged build at the 12 target
# points, 0.93-0.94 of the staged form's time on 16x512x16 (1 x 1M k512 15.10 -> 14.23 us),
# whose cutoff chain after staging is longest (3.7k cycles, 16 CTAs' samples), but
# 1.02-1.10 on 8x512x8, 8x512x16, 2x512x16 and 1x512x16, where the copies and the tops'
# reads from the stage cost more than the shorter chain they hide; on 16x512x16, 0.93-0.96
# at 1-2 rows of 917,504-1,048,576 logits (14-16 of a thread's 16 slots), 0.99-1.00 at
# 786,432 and 0.99-1.04 at 600,000-655,360; 0.98-1.01 at 4 rows and 1.00-1.02 at 8 rows of
# 917,504 and more, 1.02-1.05 at 4-8 rows of 600,000-786,432.
SAMPLED_ASYNC_CLUSTER = 16
SAMPLED_ASYNC_MIN_LENGTH = 917504
SAMPLED_ASYNC_ROWS = 2
# On it each thread copies SAMPLED_FIRST_SLOTS of its slots before B0's arrive and the rest
# after it, so that the arrive's release waits for few copies: 32 bytes a thread (16 KB a
# CTA of 512), about what one SM draws from HBM in the samples' ~1k-cycle latency (0 and
# all 16 measured the same on every build).
SAMPLED_FIRST_SLOTS = 2
# The register build (SPEC.md 2.13): one CTA of 512 threads a token row of at most 8,192
# logits, REGISTER_VECTORS vectors a thread kept in registers; K from the window from the
# row's largest key, or a pass of key >> REG_FINE_SHIFT into REG_BINS bins and one of the
# low REG_FINE_SHIFT bits of K's bin's keys.
REGISTER = Build.of(1, REGISTER_VECTORS)
REG_FINE_SHIFT = 4
REG_BINS = 1 << (16 - REG_FINE_SHIFT)
REG_FINE_MASK = (1 << REG_FINE_SHIFT) - 1


class Variant(typing.NamedTuple):
    """One compiled kernel: k, build, mode and whether it writes the trace."""

    k: int
    build: Build
    block_mode: bool
    trace: bool = False

    @property
    def name(self):
        """The variant's C identifier (the AOT library's function prefix)."""
        return (f"dtk_k{self.k}_c{self.build.cluster}_v{self.build.vectors}_blk{int(self.block_mode)}"
                f"_tr{int(self.trace)}")


def variants(traces=(False,)):
    """Every Variant the kernel module builds, k-major, with each trace setting given (the
    register build in token mode only)."""
    return [Variant(k, build, block_mode, trace) for k in KS for build in BUILDS
            for block_mode in build.modes for trace in traces]


# ---------------------------------------------------------------------------------------
# The launch policy (SPEC.md 2.1). resident(build) -> how many clusters of that build the
# device keeps resident at once (the launcher's occupancy query).
# ---------------------------------------------------------------------------------------
def vectors_for(width, cluster):
    """The fewest staged vectors a thread whose cluster holds a row of width logits, or
    None if no choice holds it."""
    for vectors in vector_choices(cluster):
        if width <= Build.of(cluster, vectors).capacity:
            return vectors
    return None


def check_width(width):
    """Raise ValueError unless 0 <= width <= MAX_WIDTH."""
    if not 0 <= width <= MAX_WIDTH:
        raise ValueError(f"row width {width} is outside [0, {MAX_WIDTH}]: no DecodeTopK build holds it")


# Vectors a thread up to which a token row takes the direct path at C CTAs a row (SPEC.md
# 2.3, measured on the H200: bench/NOTES.md session 7): eight at one CTA, four at two, two
# on the clusters of 4, 8 and 16.
DIRECT_VECTORS = {1: 8, 2: 4}
DIRECT_VECTORS_CLUSTER = 2
# The direct path's ranked write runs over a queue of the chunk's vectors whose top is at
# least K (SPEC.md 2.7) when the chunk holds more than this many vectors a thread, not over
# every vector: the write is bound by the vectors it visits (bench/NOTES.md session 13:
# 13.7k of 37.1k cycles at 128 x 32768 on 1x512x8, eight rounds), and at most one vector in
# two reaches K where a row holds sixteen keys or more a selected one.
WRITE_QUEUE_VECTORS = 2
# The sampled attempt's write over its queue's vectors of top >= K (SPEC.md 2.7) on the
# staged builds of at most this many CTAs a row, whose CTAs' queues span rounds: 0.955-0.994
# of the time at 64-128 rows of 65,536-131,072 logits on 1x512x16, 2x512x16 and 2x512x8;
# on 8 and 16 CTAs a row a CTA's queue is about one round, and the requeue cost as much as
# it spared or more (medians 1.00-1.03, up to 1.06; bench/NOTES.md session 27).
SAMPLED_WRITE_QUEUE_CLUSTER = 2
# On clusters of at least this many CTAs the exchange's DSMEM reductions (SPEC.md 2.5, 2.10)
# are spread over every thread of a bin, not made by one: a thread issues them one after the
# other (~53 cycles each), 2C - 1 - rank a bin. Measured on the H200 (bench/NOTES.md
# sessions 27, 28): 8x512x8 0.947 of the time, 8x512x16 0.960 (session 27: 16x512x16 0.968,
# block mode 0.945); on 2 CTAs a row 0.998-1.010, so they keep one thread a bin.
EXCHANGE_SPLIT_CLUSTER = 8


def direct_max_length(cluster, vectors=None):
    """The longest token row (in logits) that takes the direct path with no sampled attempt
    at `cluster` CTAs a row (SPEC.md 2.3): 8 C T d, d = DIRECT_VECTORS vectors a thread
    (32,768 logits at 1 and 2 CTAs, 65,536 at 4 and 8, 131,072 at 16), below which the
    direct path was measured faster than the sampled one (bench/NOTES.md, sessions 6, 7);
    on the streamed builds (`vectors` = STREAM_VECTORS at one, two, four or eight CTAs)
    their stage, 16,384-131,072 logits, past which their rows stream (SPEC.md 2.12); on the register
    build its capacity, 8,192 (no sampled path, SPEC.md 2.13)."""
    build = None if vectors is None else Build.of(cluster, vectors)
    if build is not None and (build.streams or build.registers):
        return build.stage
    return 8 * cluster * threads_for(cluster) * DIRECT_VECTORS.get(cluster, DIRECT_VECTORS_CLUSTER)


def cluster_for(rows, width, resident):
    """CTAs a row of a staged token batch wider than the register build's 8,192 logits
    (SPEC.md 2.1; block batches: block_build_for): up to 262,144 logits, 8 while every
    row's 8-CTA cluster is resident at once; else 4 past 32,768 logits while every row's
    4-CTA cluster is; else, up to 65,536 logits, 2 while
    every row's 2-CTA cluster is resident, else 1 when the rows outnumber the resident
    4-CTA clusters, else 4; else 2 up to 131,072 logits (in waves past the resident 2-CTA
    clusters), else 4; up to 524,288 logits 16 while every row's 16-CTA cluster is
    resident, else 8; 16 up to 1,048,576 logits, whatever the rows."""
    check_width(width)
    if width <= Build.of(8, 8).capacity:
        def two():  # asked only where its answer decides (under the JIT a query compiles the build)
            return rows <= resident(Build.of(2, 8))
        if rows <= resident(Build.of(8, 8)):
            return 8
        # Past the 2-CTA builds' direct rows, 4x1024x8 while every row's cluster is resident:
        # one wave of twice the CTAs of a 2-CTA one, its rows direct up to 65,536 logits
        # (SPEC.md 2.1; 16-28 x 131072 9-25% faster than on 2x512x16).
        if width > direct_max_length(2) and rows <= resident(Build.of(4, 8)):
            return 4
        if width <= Build.of(1, 16).capacity:
            if two():
                return 2
            return 1 if rows > resident(Build.of(4, 8)) else 4
        # Up to 131,072 logits 2-CTA clusters, in waves past their resident count: a wave
        # of them holds twice the rows of a wave of 4-CTA clusters (SPEC.md 2.1).
        return 2 if width <= Build.of(2, 16).capacity else 4
    # Past 262,144 logits a row's load dominates (staging took 7.1k of 20.0k cycles at 1 x
    # 524288 on 8x512x16): one wave of 16-CTA clusters loads each row over twice the SMs
    # (1-4 rows x 524288: 0.89-0.99 of 8x512x16's time on the H100, SPEC.md 2.1).
    if width <= Build.of(8, 16).capacity and rows > resident(Build.of(16, 16)):
        return 8
    return 16


# Where token batches stream (SPEC.md 2.1, 2.12; measured on the H200, bench/NOTES.md
# sessions 9, 10, 16 and 19): STREAM_ROWS rows or more wider than STREAM_WIDTH logits, rows
# wider than 65,536 logits where 2x512x16 would take at least STREAM_WAVE_RATIO times the
# waves of the streamed build (but two past STREAM_TWO_WAVE_WIDTH), and rows past the
# 16-CTA build's WAVES_16 waves. They take 1x512x4 when 2x512x4's clusters would run in
# waves and the rows are at most STREAM_1_WIDTH logits wide, else 2x512x4 (past it one
# CTA's queue of STREAM_QUEUE vectors overflows on crowded rows: about 1 in 256 at 524,288
# logits, rho 0.999, k = 2048, and 8% of 1,048,576-logit rows at k = 2048; a batch waits
# for its slowest row, bench/NOTES.md session 11).
STREAM_ROWS = 32
STREAM_WIDTH = 131072
STREAM_1_WIDTH = 262144
# At k = 512 the one-CTA build's queue holds the survivors of rows twice as wide: up to
# STREAM_1_WIDTH_K512 logits it takes the batches that fit one wave of it and not of
# 2x512x4 (forced builds on 5a264f4357d9, 524,288 logits: 96-128 rows 0.93-0.965 of 2x512x4's
# time, rho 0.999 included; 64 rows 1.47-1.56x and 192 rows 1.13-1.14x slower;
# bench/NOTES.md sessions 18-19). At k = 2048 its queue overflows there (rho 0.999: 283.3
# against 105.0 us at 128 x 524288).
STREAM_1_WIDTH_K512 = 524288
# Past STREAM_WIDE_WIDTH logits a streaming batch whose rows' 4-CTA clusters are all resident
# at once takes 4x512x4: one wave that reads each row over four SMs, where 2x512x4 reads it
# over two and leaves half the SMs idle (at 15-30 rows, the rows past the 16-CTA build's
# two waves and below STREAM_ROWS). Measured on the H100 (every build forced, bundle
# 675edb40ed5f, rho 0.9, k 512 and 2048; bench/NOTES.md session 43): 16-28 rows of
# 600,000-1,048,576 logits took 0.64-0.80 of 2x512x4's time (16 x 1M k512 38.9 against
# 60.6 us), and 31 rows, past the 30 resident clusters (two waves), 1.17-1.22; up to
# 524,288 logits the staged builds stay faster (16-24 x 524288: 8x512x16 even with it,
# 16-24 x 262144: 4x1024x8 0.79-0.81 of its time). (STREAM_WIDE_WIDTH: the streamed
# builds of four and eight CTAs take streaming batches past it, as measured for each.)
STREAM_WIDE_WIDTH = 524288
# Past STREAM_WIDE_WIDTH logits, rows past the 16-CTA build's resident clusters (its second
# wave) whose 8-CTA clusters are all resident at once stream on 8x512x4: one wave that
# reads each row over eight SMs, where 16x512x16 takes two waves and 4x512x4 reads a row
# over four. Measured on the H100 (every build forced, arm bundle 1f4a8a6b08a4, rho 0.9,
# k 512 and 2048; bench/NOTES.md session 44): at 8-14 rows (16x512x16's two waves, 7
# resident) of 600,000 and 786,432 logits 0.90-0.95 of 16x512x16's time, of 1,048,576
# 0.93-0.98 (8 x 1M k512 27.1-27.5 against 29.1 us); at 15 rows (8x512x4's 15 resident)
# 0.83-0.87 of 4x512x4's; at 16 rows (two waves of it) 1.21-1.29x 4x512x4's; at 4-7 rows
# 16x512x16's one wave stays faster (8x512x4 1.38-1.54x its time, 7 x 1M k512 26.7 against
# 18.4 us), and at 524,288 logits, where these rows do not stream, 8x512x16 (8x512x4
# 1.19-1.25x its time at 8-14 rows).
# Up to STREAM_WIDTH, since the streamed builds' narrow pass (kernel 5a264f4357d9): at 72-128
# rows, 2x512x16 in two waves against one of 1x512x4, the stream took 0.81-0.97 of the time;
# at 160 (three against two) 0.94-1.15; at 256 (four against two) 0.77-0.91 (session 19).
# Session 23, with the L2 prefetches: 0.83-1.035 at 96-128 and 256 rows; 2x512x16 took
# 0.80-1.006 of 1x512x4's time at 160-192.
STREAM_WAVE_RATIO = 2
# Past STREAM_TWO_WAVE_WIDTH logits two waves of 2x512x16 beat one of the stream (bundle
# 185a9974f3f8, every build forced on two H100s, bench/NOTES.md session 36): at 80-128 rows
# of 114,688-131,072 logits 2x512x16 took 0.90-1.02 of 1x512x4's time (128 x 131072
# 0.90-0.92, rho 0.999 included), at 106,496 0.94-1.05, at 98,304 0.99-1.11 (the stream's).
# More waves of 2x512x16 keep the ratio rule (256 x 131072: 0.98-1.00).
STREAM_TWO_WAVE_WIDTH = 106496
# Past STREAM_3_WIDTH logits a streaming batch whose rows' 3-CTA clusters are all resident
# at once (and, past STREAM_WIDE_WIDTH, not their 4- or 8-CTA ones) takes 3x512x4: one
# wave that reads each row over three SMs, where 2x512x4 reads it over two and leaves a
# third of the SMs idle (32 rows: 64 of 132 SMs). The GPCs hold 39 clusters of three
# against 30 of four (H100 and H200). Measured on the H100 (bundle df217f48b77f, every
# build forced, rho 0.9 and Gaussian, k 512 and 2048, session 49): fastest at all 24
# points of 32 and 39 rows x 163,840-1,048,576 logits, 0.88-0.94 of 2x512x4's time at
# 163,840-262,144, 0.89-0.90 at 32 x 1M, 0.95-0.975 at 39 x 1M.
STREAM_3_WIDTH = STREAM_WIDTH


def waves(rows, resident):
    """The waves in which `rows` rows run on a build that keeps `resident` clusters."""
    return -(-rows // resident)


def streams_for(rows, width, resident, block_mode=False):
    """Whether rows x width takes a streamed build (SPEC.md 2.1): token mode only, rows
    wider than 65,536 logits, and STREAM_ROWS rows or more past STREAM_WIDTH logits, or up
    to it where 2x512x16 would run in at least STREAM_WAVE_RATIO times the waves of the
    streamed build (stream_build_for) but for two waves of it past STREAM_TWO_WAVE_WIDTH
    logits, or rows past the 16-CTA build's WAVES_16 waves, or past its one wave while
    every row's 8x512x4 cluster is resident. (resident is asked only where its answer
    decides: under the JIT a query compiles the build.)"""
    if block_mode or width <= Build.of(1, 16).stage:
        return False
    if width <= STREAM_WIDTH:
        staged = resident(Build.of(2, 16))
        staged_waves = waves(rows, staged)
        if rows <= staged or (width > STREAM_TWO_WAVE_WIDTH and staged_waves == 2):
            return False
        return staged_waves >= STREAM_WAVE_RATIO * waves(rows, resident(stream_build_for(rows, width, resident)))
    if rows >= STREAM_ROWS:
        return True
    if width <= Build.of(8, 16).stage:
        return False
    wide = resident(Build.of(16, 16))
    return rows > WAVES_16 * wide or (rows > wide and rows <= resident(STREAM_8))


def stream_build_for(rows, width, resident, k=None):
    """The streamed build of a streaming batch (SPEC.md 2.1): past STREAM_WIDE_WIDTH logits
    8x512x4 while every row's 8-CTA cluster is resident at once, else 4x512x4 while every
    row's 4-CTA cluster is; past STREAM_3_WIDTH logits 3x512x4 while every row's 3-CTA
    cluster is; else 1x512x4 when its rows
    outnumber the resident 2x512x4 clusters and are at most STREAM_1_WIDTH logits wide, or
    at k = 512 at most STREAM_1_WIDTH_K512 wide while they fit one wave of 1x512x4; else
    2x512x4. (k None: the rule of every k.)"""
    if width > STREAM_WIDE_WIDTH:
        if rows <= resident(STREAM_8):
            return STREAM_8
        if rows <= resident(STREAM_4):
            return STREAM_4
    if width > STREAM_3_WIDTH and rows <= resident(STREAM_3):
        return STREAM_3
    if rows > resident(STREAM_2) and (width <= STREAM_1_WIDTH or (
            k == 512 and width <= STREAM_1_WIDTH_K512 and rows <= resident(STREAM))):
        return STREAM
    return STREAM_2


# Block rows (SPEC.md 2.1, 2.2): a stage of 2-byte keys holds KEY_BLOCKS times the blocks,
# so every staged build holds a block row of 131,072 logits and most hold 1,048,576, and
# the rule picks the most CTAs a row that keep every row's cluster resident at once.
# Measured on the H100 (every build forced on the arm, bundle 0579e567b94d, rho 0.9, k 2048,
# 1-128 rows x 131,072-1,048,576 logits, 0 invalid; bench/NOTES.md session 45): session 45's
# build was the fastest or within 7% of it at every point but 32 x 1,048,576 (2x512x16
# 62.7, 8x512x8 in two waves 55.8 us) and 128 x 1,048,576 (145.8 against 137.6); 16x512x16
# only past BLOCK_16_WIDTH logits (1-4 x 524288: 11.97-13.31 against 13.33-14.59 on
# 8x512x8; 1-4 x 262144: 11.47-12.13 against 10.91-11.46). Against the stage of vectors,
# where 16x512x16 took every block row of 1,048,576 logits in launches of two waves: 64 x
# 1M 150.9 -> 80.0 us, 128 x 1M 280.1 -> 145.8.
# Since session 46, past 2x512x8's 524,288 logits and 8x512x8's resident clusters (its
# block variant's 96 KB: two CTAs an SM), 8x512x8 runs in waves unless it would take a
# third one where one wave of 2x512x16 (one CTA an SM) holds the rows. Measured on the
# H200 (every build forced, bundle 1339cae18c93, 16-128 rows x 1,048,576 in steps of 8,
# rho 0.9; bench/NOTES.md session 46): 8x512x8 in two waves took 47.5-62.8 us at 32-56
# rows against 56.7-64.1 on 2x512x16; at 64 rows 71.8 against 67.0; past 2x512x16's one
# wave (72-128 rows) 75.8-115.4 against 106.5-126.6.
BLOCK_16_WIDTH = 262144


def block_build_for(rows, width, resident):
    """The build of a block batch (SPEC.md 2.1): past BLOCK_16_WIDTH logits 16x512x16
    while every row's 16-CTA cluster is resident at once; else 8x512x8 while every row's
    8-CTA cluster is; else 4x512x4 where it holds the rows and every row's cluster is
    resident; else 2x512x8 where it holds the rows, in waves past its resident clusters;
    past its block capacity 2x512x16 where every row's cluster is resident and 8x512x8
    would take more than two waves, else 8x512x8 in waves."""
    if width > BLOCK_16_WIDTH and rows <= resident(Build.of(16, 16)):
        return Build.of(16, 16)
    eight = resident(Build.of(8, 8))
    if rows <= eight:
        return Build.of(8, 8)
    if width <= STREAM_4.capacity_in(True) and rows <= resident(STREAM_4):
        return STREAM_4
    if width <= Build.of(2, 8).capacity_in(True):
        return Build.of(2, 8)
    return Build.of(2, 16) if 2 * eight < rows <= resident(Build.of(2, 16)) else Build.of(8, 8)


def registers_for(rows, width, resident, block_mode=False):
    """Whether rows x width takes the register build (SPEC.md 2.1, 2.13): token rows of at
    most its 8,192 logits, at any row count (rows and resident decide nothing since
    session 30: past two CTAs an SM it ran in waves in 0.49-0.68 of the time of 1x512x8's
    waves, 300-1024 rows, bench/NOTES.md session 30)."""
    return not block_mode and width <= REGISTER.stage


def build_for(rows, width, resident, block_mode=False, k=None):
    """The Build that runs rows x width at k (SPEC.md 2.1; k None: the choice the rules
    of every k make, which differs from k = 512's only in the streamed build of rows of
    262,145-524,288 logits)."""
    if registers_for(rows, width, resident, block_mode):
        return REGISTER
    if streams_for(rows, width, resident, block_mode):
        return stream_build_for(rows, width, resident, k)
    if block_mode:
        return block_build_for(rows, width, resident)
    cluster = cluster_for(rows, width, resident)
    return Build.of(cluster, vectors_for(width, cluster))


def max_rows(width, resident, block_mode=False):
    """The most rows one launch takes at this width: unbounded (None) in either mode.
    (Until session 45 block rows past 524,288 logits were limited to the 16-CTA build's
    WAVES_16 waves; their stage of keys lets smaller clusters hold them.)"""
    check_width(width)
    return None


def precompile_builds(max_width):
    """The builds build_for picks at any width up to max_width for any row count, in
    either mode: each build's widest row (capped at max_width) and the first width past
    65,536 and past STREAM_WIDTH logits, at 1, 2 and STREAM_ROWS rows, with one cluster
    of every build resident, with two or STREAM_ROWS of one build, or STREAM_ROWS of every
    build (so 8x512x8, the 2-CTA builds, 4x1024x8, the 1-CTA builds and the four streamed
    builds all appear where a width reaches them)."""
    check_width(max_width)
    widths = {min(max_width, w) for w in
              {build.stage for build in BUILDS} | {Build.of(1, 16).stage + 1, STREAM_WIDTH + 1}}
    tables = ([lambda build: 1, lambda build: STREAM_ROWS] +
              [lambda build, one=one, many=many: many if build == one else 1
               for one in BUILDS for many in (2, STREAM_ROWS)])
    return sorted({build_for(rows, width, resident, block_mode) for width in widths for rows in (1, 2, STREAM_ROWS)
                   for resident in tables for block_mode in (False, True)})


# ---------------------------------------------------------------------------------------
# Input checks (SPEC.md 1.5): ValueErrors that name the bad value, before any launch.
# ---------------------------------------------------------------------------------------
def check_flag(name, value):
    """value as a bool, or ValueError unless it is a bool (or a 0/1 int): a truthy string
    such as 'false' must not be taken as True."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if getattr(value, "dtype", None) is not None and value.dtype.kind == "b" and value.shape == ():
        return bool(value)  # a NumPy or torch scalar bool
    raise ValueError(f"{name}={value!r} must be a bool")


def _check_int32(name, tensor, shape, device, align=None):
    """Raise ValueError unless tensor is a contiguous int32 tensor of this shape on this
    device whose base address is align-byte aligned (align None: not looked at)."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype != torch.int32:
        raise ValueError(f"{name} must be torch.int32, got {tensor.dtype}")
    if tuple(tensor.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(tensor.shape)}")
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, logits on {device}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tensor.stride()}")
    if align is not None and tensor.data_ptr() % align:
        raise ValueError(f"{name} base address {tensor.data_ptr():#x} is not {align}-byte aligned")


def check_logits(logits, k, resident=None, memory=True, block_mode=False):
    """Raise ValueError naming the bad value unless DecodeTopK takes these logits with this
    k (SPEC.md 1.5): CUDA bfloat16 [rows, width], unit inner stride, rows 16-byte aligned,
    a width some build holds (resident, the launch policy's occupancy, is accepted for the
    callers that pass it: no row count is refused). memory=False leaves out
    what only real device memory shows (the CUDA device, the base address): the custom
    op's fake and CPU implementations check the rest. Returns the row stride in elements
    (a multiple of 8; a single row's own stride is never used)."""
    import torch

    if isinstance(k, bool) or k not in KS:
        raise ValueError(f"k={k!r} is not one of {KS}")
    if not isinstance(logits, torch.Tensor):
        raise ValueError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dtype != torch.bfloat16:
        raise ValueError(f"logits must be torch.bfloat16, got {logits.dtype}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [rows, width], got shape {tuple(logits.shape)}")
    if memory and not logits.is_cuda:
        raise ValueError(f"logits must be on a CUDA device, got {logits.device}")
    rows, width = logits.shape
    if width > 1 and logits.stride(1) != 1:
        raise ValueError(f"logits must have unit inner stride, got strides {logits.stride()}")
    row_stride = logits.stride(0) if rows > 1 else width + (-width) % LOGITS_PER_VECTOR
    if row_stride % LOGITS_PER_VECTOR:
        raise ValueError(f"logits row stride {row_stride} is not a multiple of 8 elements (16 bytes)")
    if memory and logits.data_ptr() % 16:
        raise ValueError(f"logits base address {logits.data_ptr():#x} is not 16-byte aligned")
    if rows >= 2**31:
        raise ValueError(f"rows={rows} does not fit an int32")
    check_width(width)
    return row_stride


def check_arguments(logits, lengths, k, out, next_n=1, trace=None, trace_width=len(TRACE_FIELDS), memory=True):
    """Raise ValueError naming the bad value unless one launch takes these arguments,
    whatever the device's occupancy (SPEC.md 1.5; memory as in check_logits); else return
    the row stride of check_logits."""
    row_stride = check_logits(logits, k, memory=memory)
    rows = logits.shape[0]
    if isinstance(next_n, bool) or not isinstance(next_n, int) or next_n < 1:
        raise ValueError(f"next_n={next_n!r} must be an int >= 1")
    if rows % next_n:
        raise ValueError(f"rows={rows} is not a multiple of next_n={next_n}")
    _check_int32(_lengths_name(next_n), lengths, (rows // next_n,), logits.device, 4 if memory else None)
    _check_int32("out", out, (rows, k), logits.device, 16 if memory else None)
    if trace is not None:
        _check_int32("trace", trace, (rows, trace_width), logits.device, 16 if memory else None)
    return row_stride


def check_inputs(logits, lengths, k, out, resident, next_n=1, trace=None, trace_width=len(TRACE_FIELDS),
                 build=None, block_mode=False):
    """Raise ValueError naming the bad value unless one DecodeTopK launch takes these
    arguments (SPEC.md 1.5); else return (build, row_stride): the Build to launch
    (build_for(rows, width, resident, block_mode, k), or `build` (anything Build.parse takes), checked to
    hold the width) and the row stride of check_logits.

    logits: CUDA bfloat16 [rows, width]; lengths: int32 [rows // next_n] (one a request
    of next_n rows); out: int32 [rows, k]; trace: None or int32 [rows, trace_width]."""
    chosen = None if build is None else Build.parse(build)
    row_stride = check_arguments(logits, lengths, k, out, next_n, trace, trace_width)
    rows, width = logits.shape
    if chosen is None:
        return build_for(rows, width, resident, block_mode, k), row_stride
    if block_mode not in chosen.modes:
        raise ValueError(f"build {chosen.name} takes token rows only, not block_mode={block_mode}")
    capacity = chosen.capacity_in(block_mode)
    if width > capacity:
        raise ValueError(f"build {chosen.name} holds {'block' if block_mode else 'token'} rows of up to "
                         f"{capacity} logits, not {width}")
    return chosen, row_stride


def _lengths_name(next_n):
    return "lengths" if next_n == 1 else "seq_lens"


def check_lengths(lengths, width, next_n=1):
    """The opt-in length check (it synchronizes): raise ValueError naming the first entry
    of lengths (int32, on the GPU; seq_lens when next_n > 1) outside [0, width]. The
    kernel itself clamps."""
    import torch

    bad = torch.nonzero((lengths < 0) | (lengths > width))
    if bad.numel():
        first = int(bad[0, 0])
        raise ValueError(f"{_lengths_name(next_n)}[{first}]={int(lengths[first])} is outside [0, {width}]")


def new_output(logits, k):
    """int32 [rows, k] on the logits' device for an out left None, or None when the logits
    or k are bad (check_inputs then names them)."""
    import torch

    if isinstance(logits, torch.Tensor) and logits.dim() == 2 and k in KS:
        return torch.empty((logits.shape[0], k), dtype=torch.int32, device=logits.device)
    return None


# ---------------------------------------------------------------------------------------
# The host front end
# ---------------------------------------------------------------------------------------
class Launcher(typing.Protocol):
    """What a way of running the kernel supplies to `launch`."""

    def resident(self, variant: Variant, device) -> int:
        """Clusters of the variant's build the device keeps resident at once."""

    def enqueue(self, variant: Variant, logits, lengths, out, trace, row_stride: int, next_n: int) -> None:
        """Enqueue the variant on the current stream; the arguments are checked."""


def launch(launcher, logits, lengths, k, out=None, block_mode=False, trace=None, build=None, next_n=1,
           check_lengths_first=False):
    """One DecodeTopK call through `launcher`: allocate out if None, check every argument
    (ValueErrors naming the bad value, before any launch), optionally check the lengths
    (synchronizes), and enqueue the variant of the policy's build (or `build`); returns out.
    An empty batch enqueues nothing."""
    block_mode = check_flag("block_mode", block_mode)
    check_lengths_first = check_flag("check_lengths", check_lengths_first)
    if out is None:
        out = new_output(logits, k)
    traced = trace is not None
    device = getattr(logits, "device", None)

    def resident(b):
        return launcher.resident(Variant(k, b, block_mode, traced), device)

    chosen, row_stride = check_inputs(logits, lengths, k, out, resident, next_n, trace, build=build,
                                      block_mode=block_mode)
    if check_lengths_first:
        check_lengths(lengths, logits.shape[1], next_n)
    if logits.shape[0] == 0:
        return out
    launcher.enqueue(Variant(k, chosen, block_mode, traced), logits, lengths, out, trace, row_stride, next_n)
    return out


def launch_slices(rows, width, resident, next_n=1, block_mode=False):
    """Row slices of at most max_rows(width, resident) rows, each a whole number of
    next_n-row requests: how to launch more rows than one launch takes (the benchmarks
    and the soak; `launch` itself refuses them)."""
    limit = max_rows(width, resident, block_mode) or rows
    limit = max(next_n, limit - limit % next_n)
    return [slice(s, min(rows, s + limit)) for s in range(0, rows, limit)]
