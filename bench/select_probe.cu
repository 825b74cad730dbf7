// Three steps of the register build's chain measured alone (bench/NOTES.md session 31):
// warp 0's selection, the CTA scan and the window's adds, each in the kernel's form and in
// the forms of docs/wip (select-walk.patch, select-vote.patch, register-fast-path.patch)
// or of an idea, so that one device call says which is worth a kernel change and its gate.
// Plain CUDA C++ written after the kernel's forms, not part of it:
//
//     nvcc -O3 -arch=sm_90a -o build/select_probe bench/select_probe.cu   (here)
//     build/select_probe                                                (on the H200)
//
// One CTA of 512 threads (16 warps, the register build's) and then 264 of them (two an SM
// on the H200, as past 132 rows, held there by unused dynamic shared memory); each CTA's
// thread 0 reads clock64 around REPS steps (the median CTA, the median of 5 launches), each
// step a bar.sync (the adds' barrier before every selection in the kernel) and then the
// form measured; cycles a step, less its base's (the empty step's, or adds-none's). The
// 512-bin histograms (four, one a step in turn, in shared memory) and each step's q (1 ..
// the histogram's total) come from the host, which computes every step's answer: each
// thread's checksum of the answers (or of the bins it reads) is checked.
//
//   empty          the bar.sync and the step's loads only
//   select         warp 0: 16 bins a lane (four 16-byte loads), a five-shuffle scan, the
//                  serial walk over the lane's bins, three warp reductions (bin, above,
//                  total: DecodeTopK.select's warp_select); lane 0 stores the answer, a
//                  bar.sync, every thread loads it
//   select-walk    the same with docs/wip/select-walk.patch's walk (running sums, then
//                  independent compares and two balanced trees)
//   select-vote    the same as select but the answer handed out by the lane that holds
//                  q (a ballot and two shuffles) and the total by lane 31's inclusive sum
//   every-warp     every warp selects for itself (select's form), no answer stored, no
//                  second barrier (session 12's form, which session 13 replaced)
//   select-cta     every thread one bin (thread t bin 511 - t, so thread order is the
//                  bins' order from the top): a five-shuffle warp scan, the warp totals
//                  stored, a bar.sync, every warp's scan of the 16 totals, the thread whose
//                  bin holds q stores the answer, a bar.sync, every thread loads it (no
//                  serial walk; two barriers where select has one)
//   select-2level  the same first level, then no second barrier: every warp finds the warp
//                  whose bins hold q from the 16 totals (a ballot), loads that warp's 32
//                  bins again, scans them and takes the lane that holds q (a ballot and a
//                  shuffle): one barrier as select, and the answer in every warp
//   scan           the CTA's exclusive scan of one value a thread (the register build's
//                  ranked write): a five-shuffle warp scan, the warp totals stored, a
//                  bar.sync, a five-shuffle scan of the 16 totals and a shuffle
//   scan-redux     the same with the second level one warp reduction of the totals of the
//                  warps before (docs/wip/register-fast-path.patch)
//   adds-none      (the adds' baseline) each thread zeroes a bin, a bar.sync, a bar.sync,
//                  each thread reads a bin
//   adds           between those barriers each thread adds 1 for each of its 16 keys into
//                  the 512-bin window (red.shared.add, as the register build's window pass),
//                  60% of the keys into bin 0, where the window puts every key 511 or more
//                  steps below the row's largest (most keys of a row of 8,192: 16 warps
//                  adding into one word)
//   adds-lane      the same, but a key of bin 0 into its lane's own word instead (bin 0's
//                  count is never needed: where the window's bins 1 .. 511 hold fewer than
//                  k keys the register build takes its two passes either way); lane l of
//                  every warp still meets at word l
//   adds-warp      the same into its warp's own word (docs/wip/window-bin0.patch; and the
//                  staged builds' uncounted keys, docs/wip/warp-trash.patch): a warp's
//                  lanes merge into one add, and no other warp adds there
//   adds-spread    the same keys' adds spread evenly over the 512 bins (no bin crowded)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int THREADS = 512;
constexpr int WARPS = THREADS / 32;
constexpr int BINS = 512;
constexpr int PER = BINS / 32;  // bins a lane
constexpr int HISTS = 4;
constexpr int REPS = 256;
constexpr unsigned FULL = 0xffffffffu;
constexpr int TRIALS = 6;                   // the first warms up; the median of the others
constexpr int RESIDENT_SMEM = 100 * 1024;  // with the static words: two CTAs an SM, not three

enum Form { EMPTY, SELECT, SELECT_WALK, SELECT_VOTE, EVERY_WARP, SELECT_CTA, SELECT_2LEVEL, SCAN, SCAN_REDUX,
            ADDS_NONE, ADDS, ADDS_LANE, ADDS_WARP, ADDS_SPREAD, FORMS };
// The window's adds forms, ADDS_NONE .. ADDS_SPREAD, are the last in Form.
__host__ __device__ constexpr bool window_adds(Form f) { return f >= ADDS_NONE && f < FORMS; }
const char *const NAMES[FORMS] = {"empty",      "select",     "select-walk", "select-vote", "every-warp",
                                  "select-cta", "select-2level", "scan",     "scan-redux",  "adds-none",
                                  "adds",       "adds-lane",  "adds-warp",   "adds-spread"};
// What each form's cycles are read against: the step without the measured work.
const Form BASE[FORMS] = {EMPTY, EMPTY,     EMPTY,     EMPTY,     EMPTY,     EMPTY,    EMPTY,
                          EMPTY, EMPTY,     ADDS_NONE, ADDS_NONE, ADDS_NONE, ADDS_NONE, ADDS_NONE};
// The forms whose every step is a selection of the step's histogram (the same checksum).
__host__ __device__ constexpr bool selects(Form f) {
  return f == SELECT || f == SELECT_WALK || f == SELECT_VOTE || f == EVERY_WARP || f == SELECT_CTA ||
         f == SELECT_2LEVEL;
}
constexpr unsigned FAR_PERCENT = 60;  // keys 511 or more steps below M: bin 0 of the window

struct Answer {
  unsigned bin, above, total;
};

// The lane's 16 bins, top - j for j = 0 .. 15 (top = 511 - 16 lane), and their inclusive
// scan over the lanes (the keys in bins top .. 511 of every lane up to this one).
__device__ __forceinline__ void lane_bins(const unsigned *hist, unsigned lane, unsigned (&c)[PER]) {
  const int top = BINS - 1 - PER * lane;
#pragma unroll
  for (int v = 0; v < PER / 4; ++v) {
    uint4 w = *reinterpret_cast<const uint4 *>(hist + top - 4 * v - 3);
    c[4 * v + 0] = w.w;
    c[4 * v + 1] = w.z;
    c[4 * v + 2] = w.y;
    c[4 * v + 3] = w.x;
  }
}

__device__ __forceinline__ unsigned inclusive_scan(unsigned x, unsigned lane) {
#pragma unroll
  for (int i = 0; i < 5; ++i) {
    unsigned o = __shfl_up_sync(FULL, x, 1 << i);
    if (lane >= (1u << i)) x += o;
  }
  return x;
}

template <Form F>
__device__ __forceinline__ Answer warp_select(const unsigned *hist, unsigned q, unsigned lane) {
  unsigned c[PER];
  lane_bins(hist, lane, c);
  const int top = BINS - 1 - PER * lane;
  unsigned running[PER];
  running[0] = c[0];
#pragma unroll
  for (int j = 1; j < PER; ++j) running[j] = running[j - 1] + c[j];
  const unsigned total = running[PER - 1];
  const unsigned inclusive = inclusive_scan(total, lane);
  const unsigned first = inclusive - total;
  int found = -1;
  unsigned found_above = 0;
  if (F == SELECT_WALK) {
    const unsigned need = q - first;  // in the lane that holds q, 1 .. total
    unsigned s[PER - 1], a[PER - 1];
#pragma unroll
    for (int j = 0; j < PER - 1; ++j) {
      s[j] = running[j] < need ? 1u : 0u;
      a[j] = running[j] < need ? running[j] : 0u;
    }
#pragma unroll
    for (int width = 1; width < PER - 1; width *= 2) {
#pragma unroll
      for (int j = 0; j + width < PER - 1; j += 2 * width) {
        s[j] += s[j + width];
        a[j] = max(a[j], a[j + width]);
      }
    }
    found = top - static_cast<int>(s[0]);
    found_above = first + a[0];
  } else {
    unsigned acc = first;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const bool hit = found < 0 && acc + c[j] >= q;
      found_above = hit ? acc : found_above;
      found = hit ? top - j : found;
      acc += c[j];
    }
  }
  const bool mine = first < q && q <= inclusive;
  Answer r;
  if (F == SELECT_VOTE) {  // select-vote.patch's form: none holds q where q > total
    const unsigned holders = __ballot_sync(FULL, mine);
    const unsigned holder = __popc((holders & (0u - holders)) - 1);  // 32 (lane 0) for none
    const unsigned bin = __shfl_sync(FULL, static_cast<unsigned>(found), holder);
    const unsigned above = __shfl_sync(FULL, found_above, holder);
    r.bin = holders == 0 ? ~0u : bin;
    r.above = holders == 0 ? 0u : above;
    r.total = __shfl_sync(FULL, inclusive, 31);
  } else {
    r.bin = static_cast<unsigned>(__reduce_max_sync(FULL, mine ? found : -1));
    r.above = __reduce_add_sync(FULL, mine ? found_above : 0u);
    r.total = __reduce_add_sync(FULL, total);
  }
  return r;
}

template <Form F>
__device__ __forceinline__ unsigned exclusive_scan(unsigned value, unsigned lane, unsigned warp, unsigned *totals) {
  const unsigned inclusive = inclusive_scan(value, lane);
  if (lane == 31) totals[warp] = inclusive;
  __syncthreads();
  if (F == SCAN_REDUX) {
    const unsigned word = lane < warp ? totals[lane % WARPS] : 0u;
    return inclusive - value + __reduce_add_sync(FULL, word);
  }
  const unsigned word = lane < WARPS ? totals[lane % WARPS] : 0u;
  const unsigned scanned = inclusive_scan(word, lane);
  return inclusive - value + __shfl_sync(FULL, scanned - word, warp);
}

// Key e of thread t's window bin: bin 0 for FAR_PERCENT of the keys, else 1 .. 511
// (adds-spread: 0 .. 511 evenly), from a hash, the same in every step.
__host__ __device__ inline unsigned key_bin(unsigned t, unsigned e, bool spread) {
  unsigned h = (t * 16 + e + 1) * 2654435761u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  if (spread) return h % BINS;
  return (h % 100 < FAR_PERCENT) ? 0u : 1 + (h >> 8) % (BINS - 1);
}

__device__ __forceinline__ void shared_add(unsigned *word) {
  asm volatile("red.shared.add.u32 [%0], 1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(word)))
               : "memory");
}

template <Form F>
__global__ void __launch_bounds__(THREADS, 2) probe(const unsigned *hists_g, const unsigned *qs_g, long long *cycles,
                                                    unsigned *sums) {
  __shared__ __align__(16) unsigned hists[HISTS * BINS];
  __shared__ unsigned qs[REPS];
  __shared__ uint4 answer;  // one 16-byte store and load, as DecodeTopK.select
  __shared__ unsigned totals[2][WARPS];  // a step's in turn: no barrier after the reads
  __shared__ unsigned window[BINS], trash[32];
  const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (unsigned i = tid; i < HISTS * BINS; i += THREADS) hists[i] = hists_g[i];
  for (unsigned i = tid; i < REPS; i += THREADS) qs[i] = qs_g[i];
  __syncthreads();
  unsigned bins[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) bins[e] = key_bin(tid, e, F == ADDS_SPREAD);
  unsigned sum = 0;
  long long start = clock64();
#pragma unroll 1  // every form pays the same loop overhead a step
  for (unsigned rep = 0; rep < REPS; ++rep) {
    const unsigned *hist = hists + (rep % HISTS) * BINS;
    const unsigned q = qs[rep];
    __syncthreads();  // the adds' barrier, before every selection of the kernel
    if (F == SELECT || F == SELECT_WALK || F == SELECT_VOTE) {
      if (warp == 0) {
        Answer a = warp_select<F>(hist, q, lane);
        if (lane == 0) answer = make_uint4(a.bin, a.above, a.total, 0);
      }
      __syncthreads();
      const uint4 got = answer;
      sum += got.x * 3 + got.y + got.z * 7;
    } else if (F == EVERY_WARP) {
      Answer a = warp_select<SELECT>(hist, q, lane);
      sum += a.bin * 3 + a.above + a.total * 7;
    } else if (F == SELECT_CTA || F == SELECT_2LEVEL) {
      const unsigned c = hist[BINS - 1 - tid];  // thread order: the bins from the top
      const unsigned inclusive = inclusive_scan(c, lane);
      unsigned *tot = totals[rep & 1];
      if (lane == 31) tot[warp] = inclusive;
      __syncthreads();
      const unsigned word = lane < WARPS ? tot[lane] : 0u;
      const unsigned warps_inclusive = inclusive_scan(word, lane);  // lanes 0 .. 15: warps 0 .. lane
      const unsigned total = __shfl_sync(FULL, warps_inclusive, WARPS - 1);
      if (F == SELECT_CTA) {
        const unsigned first = __shfl_sync(FULL, warps_inclusive - word, warp) + inclusive - c;
        if (first < q && q <= first + c) answer = make_uint4(BINS - 1 - tid, first, total, 0);
        __syncthreads();
        const uint4 got = answer;
        sum += got.x * 3 + got.y + got.z * 7;
      } else {
        const unsigned holder = __ffs(__ballot_sync(FULL, lane < WARPS && warps_inclusive >= q)) - 1;
        const unsigned before = __shfl_sync(FULL, warps_inclusive - word, holder);
        const unsigned c2 = hist[BINS - 1 - (holder * 32 + lane)];
        const unsigned inclusive2 = inclusive_scan(c2, lane) + before;
        const unsigned l = __ffs(__ballot_sync(FULL, inclusive2 >= q)) - 1;
        const unsigned above = __shfl_sync(FULL, inclusive2 - c2, l);
        sum += (BINS - 1 - (holder * 32 + l)) * 3 + above + total * 7;
      }
    } else if (F == SCAN || F == SCAN_REDUX) {
      const unsigned value = hist[tid] & 31;  // a thread's count, as popc(gt) + (ties << 16)
      sum += exclusive_scan<F>(value, lane, warp, totals[rep & 1]) + q;
    } else if (window_adds(F)) {
      window[tid] = 0;
      if (tid < 32) trash[tid] = 0;
      __syncthreads();
      if (F != ADDS_NONE) {
#pragma unroll
        for (int e = 0; e < 16; ++e) {
          unsigned *far = F == ADDS_LANE ? &trash[lane] : F == ADDS_WARP ? &trash[warp] : &window[0];
          shared_add(bins[e] == 0 ? far : &window[bins[e]]);
        }
      }
      __syncthreads();
      sum += window[tid] * (tid + 1) + q;
    } else {
      sum += q + hist[tid];
    }
  }
  long long end = clock64();
  if (tid == 0) cycles[blockIdx.x] = (end - start) / REPS;
  if (blockIdx.x == 0) sums[tid] = sum;
}

static void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

// Every step's answer, as the host sees it: the bin holding the q-th largest key from the
// top bin, the keys above it, the histogram's total.
static std::vector<unsigned> expected_sums(const std::vector<unsigned> &hists, const std::vector<unsigned> &qs,
                                           Form form) {
  std::vector<unsigned> sums(THREADS, 0), counts(BINS, 0);  // counts: the keys in each bin
  if (window_adds(form) && form != ADDS_NONE)
    for (unsigned u = 0; u < THREADS; ++u)
      for (unsigned e = 0; e < 16; ++e) counts[key_bin(u, e, form == ADDS_SPREAD)] += 1;
  if (form == ADDS_LANE || form == ADDS_WARP) counts[0] = 0;  // bin 0's keys went to the trash words
  for (unsigned rep = 0; rep < REPS; ++rep) {
    const unsigned *hist = &hists[(rep % HISTS) * BINS];
    const unsigned q = qs[rep];
    unsigned total = 0, acc = 0, bin = 0, above = 0;
    bool found = false;
    for (int b = BINS - 1; b >= 0; --b) {
      if (!found && acc + hist[b] >= q) {
        found = true;
        bin = b;
        above = acc;
      }
      acc += hist[b];
      total += hist[b];
    }
    for (unsigned t = 0; t < THREADS; ++t) {
      if (selects(form)) {
        sums[t] += bin * 3 + above + total * 7;
      } else if (form == SCAN || form == SCAN_REDUX) {
        unsigned before = 0;
        for (unsigned u = 0; u < t; ++u) before += hist[u] & 31;
        sums[t] += before + q;
      } else if (window_adds(form)) {
        sums[t] += counts[t] * (t + 1) + q;
      } else {
        sums[t] += q + hist[t];
      }
    }
  }
  return sums;
}

template <Form F>
static long long run(const unsigned *hists, const unsigned *qs, long long *cycles, unsigned *sums, int ctas,
                     const std::vector<unsigned> &host_hists, const std::vector<unsigned> &host_qs) {
  // RESIDENT_SMEM of dynamic shared memory a CTA (unused): two fit an SM, three do not,
  // whatever each form's registers would allow.
  check(cudaFuncSetAttribute(probe<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, RESIDENT_SMEM), "attribute");
  std::vector<long long> medians, each(ctas);
  for (int trial = 0; trial < TRIALS; ++trial) {  // the first warms up
    probe<F><<<ctas, THREADS, RESIDENT_SMEM>>>(hists, qs, cycles, sums);
    check(cudaDeviceSynchronize(), NAMES[F]);
    check(cudaMemcpy(each.data(), cycles, ctas * sizeof(long long), cudaMemcpyDeviceToHost), "copy");
    std::sort(each.begin(), each.end());
    if (trial > 0) medians.push_back(each[ctas / 2]);  // the median CTA's cycles a step
  }
  std::sort(medians.begin(), medians.end());
  const long long host = medians[medians.size() / 2];
  std::vector<unsigned> got(THREADS);
  check(cudaMemcpy(got.data(), sums, THREADS * sizeof(unsigned), cudaMemcpyDeviceToHost), "copy");
  std::vector<unsigned> want = expected_sums(host_hists, host_qs, F);
  for (int t = 0; t < THREADS; ++t) {
    if (got[t] != want[t]) {
      std::fprintf(stderr, "%s: thread %d's checksum %u, expected %u\n", NAMES[F], t, got[t], want[t]);
      std::exit(1);
    }
  }
  return host;
}

int main() {
  // Four histograms of the kinds the window sees: keys crowded near the top, spread
  // evenly, a few tall bins, and mostly empty.
  std::vector<unsigned> hists(HISTS * BINS, 0), qs(REPS);
  unsigned seed = 12345;
  auto next = [&seed]() { return seed = seed * 1664525u + 1013904223u, seed >> 8; };
  for (int b = 0; b < BINS; ++b) {
    hists[0 * BINS + b] = b > 400 ? next() % 40 : next() % 4;
    hists[1 * BINS + b] = next() % 16;
    hists[2 * BINS + b] = (b % 37 == 0) ? 200 + next() % 100 : 0;
    hists[3 * BINS + b] = (next() % 8 == 0) ? next() % 3 : 0;
  }
  std::vector<unsigned> totals(HISTS, 0);
  for (int h = 0; h < HISTS; ++h)
    for (int b = 0; b < BINS; ++b) totals[h] += hists[h * BINS + b];
  for (unsigned rep = 0; rep < REPS; ++rep) qs[rep] = 1 + next() % totals[rep % HISTS];
  unsigned *hists_d, *qs_d, *sums;
  long long *cycles;
  check(cudaMalloc(&hists_d, hists.size() * sizeof(unsigned)), "malloc");
  check(cudaMalloc(&qs_d, qs.size() * sizeof(unsigned)), "malloc");
  check(cudaMalloc(&sums, THREADS * sizeof(unsigned)), "malloc");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  check(cudaMalloc(&cycles, 2 * sms * sizeof(long long)), "malloc");
  check(cudaMemcpy(hists_d, hists.data(), hists.size() * sizeof(unsigned), cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(qs_d, qs.data(), qs.size() * sizeof(unsigned), cudaMemcpyHostToDevice), "copy");
  std::printf("| form | cycles a step, 1 CTA | less its base | cycles a step, %d CTAs | less its base |\n", 2 * sms);
  std::printf("|---|---|---|---|---|\n");
  // run<F> for each form, indexed by Form.
  using Run = long long (*)(const unsigned *, const unsigned *, long long *, unsigned *, int,
                            const std::vector<unsigned> &, const std::vector<unsigned> &);
  const Run RUN[FORMS] = {run<EMPTY>,      run<SELECT>,        run<SELECT_WALK>, run<SELECT_VOTE>,
                          run<EVERY_WARP>, run<SELECT_CTA>,    run<SELECT_2LEVEL>, run<SCAN>,
                          run<SCAN_REDUX>, run<ADDS_NONE>,     run<ADDS>,        run<ADDS_LANE>,
                          run<ADDS_WARP>,  run<ADDS_SPREAD>};
  long long measured[FORMS][2] = {};
  for (int f = 0; f < FORMS; ++f) {
    long long c[2];
    for (int i = 0; i < 2; ++i) {
      const int ctas = i == 0 ? 1 : 2 * sms;
      c[i] = RUN[f](hists_d, qs_d, cycles, sums, ctas, hists, qs);
      measured[f][i] = c[i];
    }
    const long long *base = measured[BASE[f]];
    std::printf("| %s | %lld | %lld | %lld | %lld |\n", NAMES[f], c[0], c[0] - base[0], c[1], c[1] - base[1]);
  }
  std::printf("cycles: a CTA's clock64 over %d steps, the median CTA of a launch, the median of %d launches; CTA "
              "0's checksums checked\n", REPS, TRIALS - 1);
  return 0;
}
