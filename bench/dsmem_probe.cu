// DSMEM probe (bench/NOTES.md session 29): what one cluster-wide exchange of a 256-bin
// histogram costs on the H200, in the forms the kernel could take, with nothing else in
// the way. Not part of the kernel or its build; plain CUDA C++, so that it runs on the GPU
// machine without the DSL:
//
//     nvcc -O3 -arch=sm_90a -o build/dsmem_probe bench/dsmem_probe.cu   (here)
//     build/dsmem_probe                                              (on the H200)
//
// Every CTA has 512 threads and one 256-bin histogram; an exchange leaves in every CTA the
// cluster's total of each bin and the sum over the lower ranks (the kernel's "prefix",
// SPEC.md 2.5). Forms, each timed over REPS exchanges in a loop, CTA 0's thread 0 reading
// clock64 around the loop (cycles an exchange, the mean over the CTAs of the launch):
//
//   barrier    a cluster barrier alone (barrier.cluster.arrive + wait)
//   reduce1    the kernel's form on 1-4 CTAs: thread b sums nothing and makes bin b's
//              reductions into every peer's total and every higher rank's prefix
//              (red.shared::cluster, one word each), then the cluster barrier
//   reduce2    the kernel's form on 8-16 CTAs: a bin's two threads each take every other
//              peer (EXCHANGE_SPLIT_CLUSTER), then the cluster barrier
//   totals     reduce2 without the prefix reductions (what the prefix costs)
//   reduce2g   reduce2 with generic addresses (mapa.u64 of the bin's generic address,
//              red.relaxed.cluster.add.u32 on it), session 39: ptxas re-reads the window
//              register before every shared::cluster reduction of the kernel's form
//   pairs64    two adjacent bins in one 8-byte word, one red.relaxed.cluster.add.u64 a
//              pair (a bin's cluster sum stays below 2^32, so no carry crosses), a word's
//              four threads each taking every fourth peer (session 39)
//   gather     no remote writes: each CTA's histogram in its own shared memory (double
//              buffered, so one cluster barrier an exchange suffices), the barrier, then
//              every CTA reads every peer's 1 KB with 16-byte DSMEM loads (C x 64 of them,
//              one a thread), stores them in a C x 256 matrix, a CTA barrier, thread b sums
//              bin b's column (total, and prefix over the lower ranks), a CTA barrier
//   bulk       Hopper's bulk reduction: each CTA's 1 KB histogram into every peer's totals
//              and every higher rank's prefix with one cp.reduce.async.bulk .add.u32 a peer
//              (issued by C + C - 1 - rank threads), each receiver waiting on its own
//              mbarrier for its C + rank KB; the buffers alternate, and a split cluster
//              barrier (arrive once the next buffer is zeroed, wait before the next
//              exchange's writes) keeps a fast CTA from reducing into a buffer not yet zeroed
//
// Launches: 1 cluster (one long row) and 8 clusters (eight rows) of C = 2, 4, 8, 16 CTAs;
// density: the share of a CTA's bins that are non-zero (1, 1/4, 1/16), spread (every
// sparsity-th bin, so every warp holds some) or contiguous (the first BINS / sparsity
// bins, as a narrow pass's survivors or a pass's high bytes fill a run of bins), because
// the kernel makes a bin's reductions only where its total is non-zero, while the gather
// reads every bin.
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

constexpr int THREADS = 512;
constexpr int BINS = 256;
constexpr int REPS = 256;
constexpr int MAX_C = 16;

enum Form { BARRIER = 0, REDUCE1 = 1, REDUCE2 = 2, GATHER = 3, BULK = 4, TOTALS = 5, REDUCE2G = 6, PAIRS64 = 7 };
static const char *FORM_NAMES[] = {"barrier", "reduce1", "reduce2", "gather", "bulk", "totals", "reduce2g",
                                   "pairs64"};

__device__ __forceinline__ unsigned smem(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bulk_reduce(unsigned dst_cluster, unsigned src, unsigned bytes,
                                            unsigned mbar_cluster) {
  asm volatile(
      "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32 [%0], [%1], %2, [%3];"
      ::"r"(dst_cluster), "r"(src), "r"(bytes), "r"(mbar_cluster) : "memory");
}

__device__ __forceinline__ void mbarrier_wait(unsigned mbar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT;\n}" ::"r"(mbar), "r"(parity) : "memory");
}

__device__ __forceinline__ void red_cluster(unsigned addr, unsigned value) {
  asm volatile("red.relaxed.cluster.shared::cluster.add.u32 [%0], %1;" ::"r"(addr), "r"(value) : "memory");
}

__device__ __forceinline__ void red_cluster64(unsigned addr, unsigned long long value) {
  asm volatile("red.relaxed.cluster.shared::cluster.add.u64 [%0], %1;" ::"r"(addr), "l"(value) : "memory");
}

__device__ __forceinline__ void red_generic(const void *p, unsigned rank, unsigned value) {
  unsigned long long remote;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(remote) : "l"(p), "r"(rank));
  asm volatile("red.relaxed.cluster.add.u32 [%0], %1;" ::"l"(remote), "r"(value) : "memory");
}

__device__ __forceinline__ unsigned map_rank(const void *p, unsigned rank) {
  unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

__device__ __forceinline__ uint4 load_cluster_v4(unsigned addr) {
  uint4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}

// Bin b's count in CTA `rank` at exchange `rep`: it differs by bin, rank and exchange, and
// one bin in `sparsity` is non-zero (spread or contiguous).
__device__ __forceinline__ unsigned count_of(unsigned b, unsigned rank, int rep, unsigned sparsity,
                                             bool contiguous) {
  const unsigned mix = b * 7 + rank * 13 + rep;
  const bool nonzero = contiguous ? b < BINS / sparsity : mix % sparsity == 0;
  return nonzero ? 1 + (mix & 15) : 0;
}

template <int FORM>
__global__ void __launch_bounds__(THREADS, 1)
probe(long long *cycles, unsigned *sink, unsigned sparsity, bool contiguous) {
  __shared__ __align__(16) unsigned totals[BINS], prefix[BINS];
  __shared__ __align__(16) unsigned own[2][BINS];
  __shared__ __align__(16) unsigned matrix[MAX_C][BINS];
  __shared__ __align__(16) unsigned bulk_totals[2][BINS], bulk_prefix[2][BINS];
  __shared__ __align__(8) unsigned long long mbar[2];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned C = cluster.num_blocks(), rank = cluster.block_rank(), tid = threadIdx.x;
  if (tid < BINS) {
    totals[tid] = prefix[tid] = own[0][tid] = own[1][tid] = 0;
    bulk_totals[0][tid] = bulk_totals[1][tid] = bulk_prefix[0][tid] = bulk_prefix[1][tid] = 0;
  }
  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&mbar[0])) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&mbar[1])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  cluster.sync();
  if (FORM == BULK) asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  long long start = clock64();
  for (int rep = 0; rep < REPS; ++rep) {
    const unsigned count = count_of(tid % BINS, rank, rep, sparsity, contiguous);
    if (FORM == REDUCE1 || FORM == REDUCE2 || FORM == TOTALS) {
      const unsigned parts = FORM == REDUCE1 ? 1 : THREADS / BINS, b = tid % BINS, part = tid / BINS;
      if (part < parts) {
        for (unsigned p = part; p < C && count != 0; p += parts) {
          red_cluster(map_rank(&totals[b], p), count);
          if (FORM != TOTALS && rank < p) red_cluster(map_rank(&prefix[b], p), count);
        }
      }
      cluster.sync();
    } else if (FORM == REDUCE2G) {
      const unsigned b = tid % BINS, part = tid / BINS;
      for (unsigned p = part; p < C && count != 0; p += 2) {
        red_generic(&totals[b], p, count);
        if (rank < p) red_generic(&prefix[b], p, count);
      }
      cluster.sync();
    } else if (FORM == PAIRS64) {
      const unsigned w = tid % (BINS / 2), part = tid / (BINS / 2);  // 4 parts of 128 words
      const unsigned long long pair = (static_cast<unsigned long long>(count_of(2 * w + 1, rank, rep, sparsity,
                                                                                  contiguous)) << 32) |
                                      count_of(2 * w, rank, rep, sparsity, contiguous);
      unsigned long long *totals64 = reinterpret_cast<unsigned long long *>(totals);
      unsigned long long *prefix64 = reinterpret_cast<unsigned long long *>(prefix);
      for (unsigned p = part; p < C && pair != 0; p += 4) {
        red_cluster64(map_rank(&totals64[w], p), pair);
        if (rank < p) red_cluster64(map_rank(&prefix64[w], p), pair);
      }
      cluster.sync();
    } else if (FORM == GATHER) {
      unsigned *mine = own[rep & 1];
      if (tid < BINS) mine[tid] = count;
      cluster.sync();
      const unsigned chunks = BINS / 4;  // 16-byte loads a histogram
      for (unsigned j = tid; j < C * chunks; j += THREADS) {
        const unsigned peer = j / chunks, q = j % chunks;
        uint4 v = load_cluster_v4(map_rank(&mine[4 * q], peer));
        *reinterpret_cast<uint4 *>(&matrix[peer][4 * q]) = v;
      }
      __syncthreads();
      if (tid < BINS) {
        unsigned total = 0, below = 0;
        for (unsigned c = 0; c < C; ++c) {
          const unsigned x = matrix[c][tid];
          total += x;
          below += c < rank ? x : 0;
        }
        totals[tid] = total;
        prefix[tid] = below;
      }
      __syncthreads();
    } else if (FORM == BULK) {
      const unsigned buffer = rep & 1;
      // Every peer has zeroed this buffer (and received the last exchange, so `own` may be
      // rewritten): the arrive after the zeroing below, or before the loop.
      asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
      if (tid < BINS) own[0][tid] = count;
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, to the bulk copies
      __syncthreads();
      if (tid < C) {
        bulk_reduce(map_rank(&bulk_totals[buffer][0], tid), smem(&own[0][0]), BINS * 4,
                    map_rank(&mbar[buffer], tid));
      } else if (tid >= MAX_C && tid - MAX_C < C && rank < tid - MAX_C) {
        const unsigned p = tid - MAX_C;
        bulk_reduce(map_rank(&bulk_prefix[buffer][0], p), smem(&own[0][0]), BINS * 4, map_rank(&mbar[buffer], p));
      }
      if (tid == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     ::"r"(smem(&mbar[buffer])), "r"((C + rank) * BINS * 4) : "memory");
      }
      mbarrier_wait(smem(&mbar[buffer]), (rep >> 1) & 1);
      if (tid < BINS) {
        totals[tid] = bulk_totals[buffer][tid];
        prefix[tid] = bulk_prefix[buffer][tid];
        bulk_totals[buffer ^ 1][tid] = 0;
        bulk_prefix[buffer ^ 1][tid] = 0;
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the zeros, to the peers' next copies
      asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    } else {
      cluster.sync();
    }
  }
  if (FORM == BULK) asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  long long end = clock64();
  cluster.sync();  // no CTA exits while a peer may still touch its shared memory
  if (tid == 0) cycles[blockIdx.x] = (end - start) / REPS;
  if (tid < BINS && (FORM == GATHER || FORM == BULK)) {
    // The last exchange's sums, checked (the reductions of reduce1/2 accumulate instead).
    unsigned total = 0, below = 0;
    for (unsigned c = 0; c < C; ++c) {
      const unsigned x = count_of(tid, c, REPS - 1, sparsity, contiguous);
      total += x;
      below += c < rank ? x : 0;
    }
    if (totals[tid] != total || prefix[tid] != below) atomicAdd(sink, 1u);
  }
}

template <int FORM>
static double run(int C, int clusters, unsigned sparsity, bool contiguous) {
  const int blocks = C * clusters;
  long long *cycles;
  unsigned *sink;
  cudaMalloc(&cycles, blocks * sizeof(long long));
  cudaMalloc(&sink, sizeof(unsigned));
  cudaFuncSetAttribute(probe<FORM>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(THREADS);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = C;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  double mean = 0;
  cudaMemset(sink, 0, sizeof(unsigned));
  for (int trial = 0; trial < 3; ++trial) {  // the first warms up; the last is kept
    cudaError_t err = cudaLaunchKernelEx(&config, probe<FORM>, cycles, sink, sparsity, contiguous);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      std::fprintf(stderr, "%s C=%d clusters=%d: %s\n", FORM_NAMES[FORM], C, clusters, cudaGetErrorString(err));
      std::exit(1);
    }
    std::vector<long long> host(blocks);
    cudaMemcpy(host.data(), cycles, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
    mean = 0;
    for (long long x : host) mean += static_cast<double>(x) / blocks;
  }
  unsigned wrong = 0;
  cudaMemcpy(&wrong, sink, sizeof(unsigned), cudaMemcpyDeviceToHost);
  if (wrong != 0) {
    std::fprintf(stderr, "%s C=%d clusters=%d: %u wrong sums\n", FORM_NAMES[FORM], C, clusters, wrong);
    std::exit(1);
  }
  cudaFree(cycles);
  cudaFree(sink);
  return mean;
}

int main() {
  std::printf("| clusters | C | density | barrier | reduce1 | reduce2 | totals | gather | bulk | reduce2g | pairs64 |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int clusters : {1, 8}) {
    for (int C : {2, 4, 8, 16}) {
      for (unsigned sparsity : {1u, 4u, 16u}) {
        for (bool contiguous : {false, true}) {
          if (sparsity == 1 && contiguous) continue;
          std::printf("| %d | %d | 1/%u %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", clusters, C,
                      sparsity,
                      contiguous ? "contiguous" : "spread", run<BARRIER>(C, clusters, sparsity, contiguous),
                      run<REDUCE1>(C, clusters, sparsity, contiguous), run<REDUCE2>(C, clusters, sparsity, contiguous),
                      run<TOTALS>(C, clusters, sparsity, contiguous), run<GATHER>(C, clusters, sparsity, contiguous),
                      run<BULK>(C, clusters, sparsity, contiguous), run<REDUCE2G>(C, clusters, sparsity, contiguous),
                      run<PAIRS64>(C, clusters, sparsity, contiguous));
        }
      }
    }
  }
  std::printf("cycles an exchange (CTA clock64 over %d exchanges, mean over the launch's CTAs)\n", REPS);
  return 0;
}
