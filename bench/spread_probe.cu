// A row spread over many independent CTAs, handed over once through global memory
// (bench/NOTES.md session 38): is it the shape the single long rows need? Measured in
// session 39: exact, and 1.2-3.0x slower than DecodeTopK (its chain of global round
// trips); dropped. Plain CUDA C++, a probe of the algorithm, not part of the kernel; token
// mode, the canonical answer of SPEC.md 1.4, checked bit for bit against DecodeTopK by
// bench/spread_probe.py:
//
//     nvcc -O3 -arch=sm_90a -shared -Xcompiler -fPIC -o build/spread_probe.so bench/spread_probe.cu
//
// Why it differs from the cluster builds: a cluster holds at most 16 SMs, so a single row of
// 1M logits is staged at 16 SMs' rate and every pass over it runs on 128 KB a CTA. Here the
// row is cut into S slices of C = 4096 V logits, one CTA of 512 threads a slice (V vectors
// a thread, in registers), as many CTAs as the GPU holds. Session 29's handoff probe priced
// a global exchange at ~2k cycles and the cluster design needs three or four; this design
// needs one, because no CTA waits for another:
//   1. Every CTA of a row loads its slice and the same 512 sample vectors (4,096 logits
//      spread evenly over the row's valid length: the same positions in every CTA, so every
//      CTA computes the same cutoff `c`, with no exchange), and selects `c`, the R-th largest
//      sample key, R = q + 5 sqrt(q) + 2 with q = k 4096 / n the sample's expected keys at
//      or above the row's k-th largest (so `c` lies below it but in about one row in 10^6).
//   2. It writes its keys above `c` (and, apart, its keys equal to `c`, the first CAP) into
//      its slice's region of the workspace, in index order, with their counts; then one
//      ticket (a release/acquire atomic on the row's counter). Every CTA but the last exits.
//   3. The last CTA of the row (whichever it is: the answer is a function of the workspace,
//      not of which CTA arrives last) resets the counter for the next launch, scans the
//      slices' counts and:
//      A. at least k keys above `c`: gathers them (index order), selects K and A among them
//         exactly (two 256-bin radix passes) and writes SPEC 1.4's slots;
//      B. fewer than k above `c` but at least k at or above it: K = c, and the answer is
//         every key above `c` and the first k - GT equal to it, each slot by binary search;
//      otherwise (the sample misjudged the row, or a slice overflowed) it selects over the
//      whole row alone, from global memory (exact, slow: the fallback).
#include <cstdint>
#include <cuda_runtime.h>

namespace {

constexpr int T = 512;       // threads a CTA
constexpr int WARPS = T / 32;
constexpr int SAMPLE_VECTORS = T;  // one a thread: 4,096 sample logits
constexpr int CAP = 2048;    // keys above c (and, apart, keys equal to c) a slice keeps
constexpr int FCAP = 16384;  // keys above c the last CTA gathers (more: the fallback)
constexpr int SLICE_WORDS = 2 + 2 * CAP;  // gt count, eq count, gt list, eq list

union Lanes {  // a vector's 8 logits, filled lane by lane
  uint4 v;
  uint16_t h[8];
};

__device__ __forceinline__ uint32_t order_key(uint32_t b) {  // SPEC 1.2
  return (b & 0x8000u) ? (~b & 0xFFFFu) : (b | 0x8000u);
}

struct Smem {
  uint32_t hist[256];
  uint32_t warp_tot[WARPS];
  uint32_t answer[4];
  uint32_t prefix_gt[T + 1];  // the last CTA: keys above c before each slice
  uint32_t prefix_eq[T + 1];
  uint32_t idx[FCAP];         // the last CTA: gathered indices, index order
  uint16_t key[FCAP];
};

// Exclusive CTA scan of v in thread order (every thread calls it); *total gets the sum.
__device__ uint32_t cta_scan(Smem &sm, uint32_t v, uint32_t *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t x = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    uint32_t y = __shfl_up_sync(0xFFFFFFFFu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) sm.warp_tot[warp] = x;
  __syncthreads();
  uint32_t w = lane < WARPS ? sm.warp_tot[lane] : 0, wi = w;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    uint32_t y = __shfl_up_sync(0xFFFFFFFFu, wi, d);
    if (lane >= d) wi += y;
  }
  uint32_t before = __shfl_sync(0xFFFFFFFFu, wi - w, warp);
  *total = __shfl_sync(0xFFFFFFFFu, wi, WARPS - 1);
  __syncthreads();  // warp_tot is reused by the next scan
  return before + x - v;
}

// Warp 0: the bin b holding the r-th largest of hist[256] (1 <= r <= total) and the count
// above it; answer[0] = b, answer[1] = above. Bins from 255 down are lane order: lane l
// sums bins 255 - 8l .. 248 - 8l. Callers zero hist, add, __syncthreads first; a
// __syncthreads after it hands the answer to everyone.
__device__ void select_bin(Smem &sm, uint32_t r) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  uint32_t bins[8], sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += (bins[j] = sm.hist[255 - 8 * lane - j]);
  uint32_t inc = sum;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    uint32_t y = __shfl_up_sync(0xFFFFFFFFu, inc, d);
    if (lane >= d) inc += y;
  }
  uint32_t above = inc - sum;
  if (above < r && r <= inc) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (above + bins[j] >= r) {
        sm.answer[0] = 255 - 8 * lane - j;
        sm.answer[1] = above;
        break;
      }
      above += bins[j];
    }
  }
}

__device__ void zero_hist(Smem &sm) {
  if (threadIdx.x < 256) sm.hist[threadIdx.x] = 0;
}

// The cutoff's rank among `ns` valid sample keys (step 1).
__device__ uint32_t sample_rank(uint32_t k, uint32_t n, uint32_t ns) {
  // Rounded step by step, as bench/spread_model.py's NumPy does: nvcc would fuse q + 5 sqrt(q)
  // into one fma, and 891 (k, n) pairs of k <= 2048 would then take another rank.
  float q = __fdiv_rn(__fmul_rn(float(k), float(ns)), float(n));
  return uint32_t(ceilf(__fadd_rn(__fadd_rn(q, __fmul_rn(5.0f, __fsqrt_rn(q))), 2.0f)));
}

// Write the canonical slots of keys (key, index), presented in index order by get(i), i <
// count, given K and A (keys above K): thread t takes the run [t m, t m + m).
template <class Get>
__device__ void ranked_write(Smem &sm, Get get, uint32_t count, uint32_t K, uint32_t A, uint32_t k, int *out) {
  const uint32_t m = (count + T - 1) / T, lo = min(count, threadIdx.x * m), hi = min(count, lo + m);
  uint32_t gt = 0, eq = 0;
  for (uint32_t i = lo; i < hi; ++i) {
    uint32_t key, index;
    get(i, key, index);
    gt += key > K;
    eq += key == K;
  }
  uint32_t tot;
  uint32_t packed = cta_scan(sm, gt | (eq << 16), &tot);  // counts below 65536: count <= FCAP
  uint32_t gtb = packed & 0xFFFFu, eqb = packed >> 16, ties = k - A;
  for (uint32_t i = lo; i < hi; ++i) {
    uint32_t key, index;
    get(i, key, index);
    if (key > K) {
      out[gtb + min(eqb, ties)] = int(index);
      ++gtb;
    } else if (key == K) {
      if (eqb < ties) out[gtb + eqb] = int(index);
      ++eqb;
    }
  }
}

// Two 256-bin radix passes over keys presented by get(i), i < count: K, A of rank k.
template <class Get>
__device__ void radix_select(Smem &sm, Get get, uint32_t count, uint32_t k, uint32_t *K, uint32_t *A) {
  zero_hist(sm);
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < count; i += T) {
    uint32_t key, index;
    get(i, key, index);
    atomicAdd(&sm.hist[key >> 8], 1u);
  }
  __syncthreads();
  select_bin(sm, k);
  __syncthreads();
  uint32_t b1 = sm.answer[0], a1 = sm.answer[1];
  __syncthreads();
  zero_hist(sm);
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < count; i += T) {
    uint32_t key, index;
    get(i, key, index);
    if ((key >> 8) == b1) atomicAdd(&sm.hist[key & 255u], 1u);
  }
  __syncthreads();
  select_bin(sm, k - a1);
  __syncthreads();
  *K = b1 << 8 | sm.answer[0];
  *A = a1 + sm.answer[1];
  __syncthreads();
}

// The fallback: the whole row by this CTA alone, from global memory.
__device__ void whole_row(Smem &sm, const uint16_t *row, uint32_t n, uint32_t k, int *out) {
  auto get = [&](uint32_t i, uint32_t &key, uint32_t &index) {
    key = order_key(__ldg(row + i));
    index = i;
  };
  uint32_t K, A;
  radix_select(sm, get, n, k, &K, &A);
  // The write in chunks of T keys, a key a thread, carrying the counts across chunks.
  uint32_t gt_run = 0, eq_run = 0, ties = k - A;
  for (uint32_t base = 0; base < n; base += T) {
    uint32_t i = base + threadIdx.x, key = 0;
    if (i < n) key = order_key(__ldg(row + i));
    uint32_t gt = i < n && key > K, eq = i < n && key == K, tot;
    uint32_t before = cta_scan(sm, gt | (eq << 16), &tot);
    uint32_t gtb = gt_run + (before & 0xFFFFu), eqb = eq_run + (before >> 16);
    if (gt) out[gtb + min(eqb, ties)] = int(i);
    if (eq && eqb < ties) out[gtb + eqb] = int(i);
    gt_run += tot & 0xFFFFu;
    eq_run += tot >> 16;
  }
}

template <int V>
__global__ void __launch_bounds__(T, V <= 2 ? 2 : 1)
spread_topk(const uint16_t *__restrict__ logits, long long stride, const int *__restrict__ lengths, int *out,
            int width, int k, int slices, uint32_t *ws, uint32_t *stats, unsigned long long *stamps,
            int variant) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem &sm = *reinterpret_cast<Smem *>(smem_raw);
  constexpr int C = 4096 * V;  // logits a slice
  const int row = blockIdx.x / slices, s = blockIdx.x % slices;
  const int n = min(max(lengths[row], 0), width);
  const uint16_t *x = logits + row * stride;
  int *o = out + (long long)row * k;
  // Profile stamps (stamps != nullptr): thread 0's %globaltimer (ns) at each phase's end,
  // 8 a CTA: start, samples counted, cutoff, slice counted, region written, ticket, gathered
  // (the last CTA), end (the last CTA).
  unsigned long long *st = stamps ? stamps + 8ull * blockIdx.x : nullptr;
  auto stamp = [&](int i) {
    if (st && threadIdx.x == 0) {
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
      st[i] = t;
    }
  };
  stamp(0);
  if (n <= k) {  // SPEC 1.4's short rows: slice 0 writes them
    if (s == 0)
      for (int j = threadIdx.x; j < k; j += T) o[j] = j < n ? j : -1;
    return;
  }
  // 1. The slice (thread t: logits s C + 8 (V t + v) + lane, lanes at or past n stray) and
  // the samples (thread t: vector (t nvec) / 512 of the row's nvec valid vectors).
  uint4 mine[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    int g = s * C + 8 * (V * threadIdx.x + v);
    mine[v] = g + 8 <= n ? __ldg(reinterpret_cast<const uint4 *>(x + g)) : make_uint4(0, 0, 0, 0);
    if (g < n && g + 8 > n) {  // the row's partial vector, lane by lane
      Lanes lanes;
#pragma unroll
      for (int l = 0; l < 8; ++l) lanes.h[l] = g + l < n ? x[g + l] : 0;
      mine[v] = lanes.v;
    }
  }
  const int nvec = (n + 7) / 8;
  const int sg = int((long long)threadIdx.x * nvec / SAMPLE_VECTORS) * 8;
  uint4 sample = sg + 8 <= n ? __ldg(reinterpret_cast<const uint4 *>(x + sg)) : make_uint4(0, 0, 0, 0);
  int sample_valid = min(max(n - sg, 0), 8);
  if (sample_valid < 8) {
    Lanes lanes;
#pragma unroll
    for (int l = 0; l < 8; ++l) lanes.h[l] = l < sample_valid ? x[sg + l] : 0;
    sample = lanes.v;
  }
  // The cutoff: the R-th largest sample key, two radix passes over 4,096 keys in registers.
  const uint16_t *sk = reinterpret_cast<const uint16_t *>(&sample);
  zero_hist(sm);
  __syncthreads();
#pragma unroll
  for (int l = 0; l < 8; ++l)  // unrolled: sk[l] stays in registers
    if (l < sample_valid) atomicAdd(&sm.hist[order_key(sk[l]) >> 8], 1u);
  __syncthreads();
  stamp(1);
  if (threadIdx.x < 32) {  // the rank needs the valid samples' count: warp 0 sums first
    uint32_t t = 0;
    for (int b = threadIdx.x; b < 256; b += 32) t += sm.hist[b];
    for (int d = 16; d; d >>= 1) t += __shfl_xor_sync(0xFFFFFFFFu, t, d);
    uint32_t r = min(sample_rank(k, n, t), t);
    select_bin(sm, r);
    if (threadIdx.x == 0) sm.answer[3] = r;
  }
  __syncthreads();
  const uint32_t b1 = sm.answer[0], a1 = sm.answer[1], rank = sm.answer[3];
  __syncthreads();
  zero_hist(sm);
  __syncthreads();
#pragma unroll
  for (int l = 0; l < 8; ++l) {
    uint32_t key = order_key(sk[l]);
    if (l < sample_valid && (key >> 8) == b1) atomicAdd(&sm.hist[key & 255u], 1u);
  }
  __syncthreads();
  select_bin(sm, rank - a1);
  __syncthreads();
  const uint32_t c = b1 << 8 | sm.answer[0];
  stamp(2);
  // 2. This slice's keys above c and equal to c, in index order, into its region.
  const uint16_t *mk = reinterpret_cast<const uint16_t *>(mine);
  uint32_t gt = 0, eq = 0;
#pragma unroll
  for (int j = 0; j < 8 * V; ++j) {
    int g = s * C + 8 * V * threadIdx.x + j;
    uint32_t key = order_key(mk[j]);
    gt += g < n && key > c;
    eq += g < n && key == c;
  }
  uint32_t tot;
  uint32_t before = cta_scan(sm, gt | (eq << 16), &tot);  // C <= 16384 keys a slice (V <= 4)
  stamp(3);
  uint32_t *region = ws + 32 * gridDim.x / slices + (long long)(row * slices + s) * SLICE_WORDS;
  uint32_t gtb = before & 0xFFFFu, eqb = before >> 16;
#pragma unroll
  for (int j = 0; j < 8 * V; ++j) {
    int g = s * C + 8 * V * threadIdx.x + j;
    uint32_t key = order_key(mk[j]), word = key << 16 | uint32_t(g - s * C);
    if (g < n && key > c) {
      if (gtb < CAP) region[2 + gtb] = word;
      ++gtb;
    } else if (g < n && key == c) {
      if (eqb < CAP) region[2 + CAP + eqb] = word;
      ++eqb;
    }
  }
  if (threadIdx.x == 0) {
    region[0] = tot & 0xFFFFu;
    region[1] = tot >> 16;
  }
  // variant & 1: no fence a thread; the barrier, then thread 0's release (CUTLASS's
  // GenericBarrier form: bar.sync orders the CTA's stores before thread 0's, and the
  // atom's release is cumulative).
  if (!(variant & 1)) __threadfence();  // every thread's stores before the ticket (release, gpu scope)
  __syncthreads();
  stamp(4);
  uint32_t *counter = ws + 32 * row;
  if (threadIdx.x == 0) {
    uint32_t ticket;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(ticket) : "l"(counter) : "memory");
    sm.answer[3] = ticket == uint32_t(slices - 1);
  }
  __syncthreads();
  stamp(5);
  if (!sm.answer[3]) return;
  if (variant & 2) {  // timing arm: no last-CTA work (the output is not written)
    if (threadIdx.x == 0) *counter = 0;
    stamp(6);
    stamp(7);
    return;
  }
  if (!(variant & 1)) __threadfence();
  // 3. The last CTA of the row.
  if (threadIdx.x == 0) *counter = 0;  // for the next launch: every CTA of this one has arrived
  const uint32_t *rows_ws = ws + 32 * gridDim.x / slices + (long long)row * slices * SLICE_WORDS;
  uint32_t my_gt = 0, my_eq = 0;
  if (threadIdx.x < slices) {
    my_gt = __ldcg(rows_ws + threadIdx.x * SLICE_WORDS);
    my_eq = __ldcg(rows_ws + threadIdx.x * SLICE_WORDS + 1);
  }
  // slices <= T: one a thread; counts up to 1M, so two scans rather than one packed.
  uint32_t GT, EQ;
  uint32_t pg = cta_scan(sm, my_gt, &GT);
  uint32_t pe = cta_scan(sm, my_eq, &EQ);
  uint32_t overflow = __syncthreads_or(my_gt > CAP);
  if (threadIdx.x < slices) {
    sm.prefix_gt[threadIdx.x] = pg;
    sm.prefix_eq[threadIdx.x] = pe;
  }
  if (threadIdx.x == 0) {
    sm.prefix_gt[slices] = GT;
    sm.prefix_eq[slices] = EQ;
  }
  __syncthreads();
  stamp(6);
  auto slice_of = [&](const uint32_t *prefix, uint32_t i) {  // the slice whose range holds i
    int lo = 0, hi = slices - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) >> 1;
      if (prefix[mid] <= i) lo = mid; else hi = mid - 1;
    }
    return lo;
  };
  const uint32_t mode = overflow ? 2 : GT >= uint32_t(k) ? (GT <= FCAP ? 0 : 2) : GT + EQ >= uint32_t(k) ? 1 : 3;
  if (stats && threadIdx.x == 0) atomicAdd(stats + mode, 1u);  // A, B, fallback (overflow), fallback (too few)
  if (mode == 0) {  // A
    for (uint32_t base = 0; base < GT; base += 4 * T) {  // four loads in flight a thread
      uint32_t word[4];
      int sl[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        uint32_t i = base + u * T + threadIdx.x;
        sl[u] = slice_of(sm.prefix_gt, min(i, GT - 1));
        word[u] = i < GT ? __ldcg(rows_ws + (long long)sl[u] * SLICE_WORDS + 2 + (i - sm.prefix_gt[sl[u]])) : 0;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        uint32_t i = base + u * T + threadIdx.x;
        if (i < GT) {
          sm.key[i] = uint16_t(word[u] >> 16);
          sm.idx[i] = uint32_t(sl[u]) * C + (word[u] & 0xFFFFu);
        }
      }
    }
    __syncthreads();
    auto get = [&](uint32_t i, uint32_t &key, uint32_t &index) {
      key = sm.key[i];
      index = sm.idx[i];
    };
    uint32_t K, A;
    radix_select(sm, get, GT, k, &K, &A);
    ranked_write(sm, get, GT, K, A, k, o);
  } else if (mode == 1) {  // B: K = c
    const uint32_t need = k - GT;  // the first `need` keys equal to c, by index
    // The gt keys into idx[0, GT), the chosen eq ones into idx[GT, k): each slice's run of
    // chosen eq keys is a prefix of its list (at most need <= k <= CAP of them).
    for (uint32_t i = threadIdx.x; i < GT; i += T) {
      int sl = slice_of(sm.prefix_gt, i);
      sm.idx[i] = __ldcg(rows_ws + (long long)sl * SLICE_WORDS + 2 + (i - sm.prefix_gt[sl])) & 0xFFFFu;
    }
    for (uint32_t i = threadIdx.x; i < need; i += T) {
      int sl = slice_of(sm.prefix_eq, i);
      sm.idx[GT + i] = __ldcg(rows_ws + (long long)sl * SLICE_WORDS + 2 + CAP + (i - sm.prefix_eq[sl])) & 0xFFFFu;
    }
    __syncthreads();
    // Slot of an entry: the chosen entries of lower slices, then its rank in its own list,
    // then the other list's entries of its slice at lower offsets (binary search).
    auto chosen_eq_before = [&](int sl) { return min(sm.prefix_eq[sl], need); };
    auto lower = [&](uint32_t first, uint32_t count, uint32_t off) {  // entries of idx[first, +count) below off
      uint32_t lo = 0, hi = count;
      while (lo < hi) {
        uint32_t mid = (lo + hi) >> 1;
        if (sm.idx[first + mid] < off) lo = mid + 1; else hi = mid;
      }
      return lo;
    };
    for (uint32_t i = threadIdx.x; i < uint32_t(k); i += T) {
      bool is_gt = i < GT;
      uint32_t j = is_gt ? i : i - GT;
      int sl = slice_of(is_gt ? sm.prefix_gt : sm.prefix_eq, j);
      uint32_t g0 = sm.prefix_gt[sl], g1 = sm.prefix_gt[sl + 1];
      uint32_t e0 = chosen_eq_before(sl), e1 = min(sm.prefix_eq[sl + 1], need);
      uint32_t off = sm.idx[i], slot = g0 + e0;
      if (is_gt) slot += (i - g0) + lower(GT + e0, e1 - e0, off);
      else slot += (j - e0) + lower(g0, g1 - g0, off);
      o[slot] = int(uint32_t(sl) * C + off);
    }
  } else {
    whole_row(sm, x, n, k, o);
  }
  stamp(7);
}

}  // namespace

extern "C" {

// Workspace words for `rows` rows of `width` logits: 32 a row for its counter (zeroed once
// by the caller; each launch leaves it zero), then every slice's region.
long long spread_workspace_words(int rows, int width, int vectors) {
  long long slices = (width + 4096LL * vectors - 1) / (4096LL * vectors);
  return 32LL * rows + rows * slices * SLICE_WORDS;
}

// stats, stamps: nullptr or the modes' counts and the profile stamps; variant: 0, or the
// timing arms' bits (1: one release a CTA, 2: no last-CTA work).
int spread_topk_launch(const void *logits, long long stride, const int *lengths, int *out, int rows, int width,
                       int k, int vectors, unsigned *ws, unsigned *stats, unsigned long long *stamps,
                       int variant, cudaStream_t stream) {
  // What the kernel assumes: k <= CAP (mode B takes up to k ties from one list), rows of
  // 16-byte aligned vectors (SPEC 1.1), at most one slice a thread for the last CTA.
  if (k != 512 && k != 1024 && k != 2048) return -1;
  if (rows < 1 || width < 1 || stride % 8 || reinterpret_cast<uintptr_t>(logits) % 16) return -1;
  int slices = int((width + 4096LL * vectors - 1) / (4096LL * vectors));
  if (slices > T) return -1;
  size_t smem = sizeof(Smem);
  dim3 grid(rows * slices), block(T);
  static bool attributes_set[9];  // once a variant, before any graph capture (the eager warm call)
  auto go = [&](auto kernel) {
    if (!attributes_set[vectors]) {
      cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (err != cudaSuccess) return int(err);
      attributes_set[vectors] = true;
    }
    kernel<<<grid, block, smem, stream>>>(static_cast<const uint16_t *>(logits), stride, lengths, out, width, k,
                                          slices, ws, stats, stamps, variant);
    return int(cudaGetLastError());
  };
  switch (vectors) {
    case 1: return go(spread_topk<1>);
    case 2: return go(spread_topk<2>);
    case 4: return go(spread_topk<4>);
    default: return -2;
  }
}
}  // extern "C"
