// Cross-CTA handoff probe through global memory (bench/NOTES.md session 29, "Next" (0)):
// what a row spread over more SMs than one cluster holds would pay to combine its counts,
// with nothing else in the way. Plain CUDA C++, not part of the kernel:
//
//     nvcc -O3 -arch=sm_90a -o build/handoff_probe bench/handoff_probe.cu   (here)
//     build/handoff_probe                                                (on the H200)
//
// Two measurements, CTA 0's thread 0 reading clock64 around a loop of REPS steps (cycles a
// step); every launch has at most one CTA an SM (512 threads, 64 KB of shared memory asked
// for), so all its CTAs are resident together and a spin cannot starve the one it waits on:
//
//   pingpong   two CTAs: CTA 0 stores a flag (st.release.gpu), CTA 1 spins on it
//              (ld.acquire.gpu) and answers on a second flag: half a round trip is one
//              handoff
//   combine    M CTAs (M = 2, 4, 8, 16: the clusters of one row): each adds its 256-bin
//              histogram into one in global memory (red.global.add, one a bin), then thread
//              0 arrives on a counter (atom.add.release.gpu) and spins until all M have
//              (ld.acquire.gpu), a bar.sync, and every thread reads the totals (ld.cg); the
//              buffers rotate over three, the next step's zeroed by CTA 0 before it arrives,
//              so one counter barrier a step suffices. The last step's totals are checked.
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int THREADS = 512;
constexpr int BINS = 256;
constexpr int REPS = 256;

__device__ __forceinline__ void store_release(unsigned *p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned load_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void arrive_release(unsigned *p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

__global__ void __launch_bounds__(THREADS, 1) pingpong(unsigned *flags, long long *cycles) {
  if (threadIdx.x != 0) return;
  long long start = clock64();
  for (unsigned i = 1; i <= REPS; ++i) {
    if (blockIdx.x == 0) {
      store_release(&flags[0], i);
      while (load_acquire(&flags[32]) != i) {
      }
    } else {
      while (load_acquire(&flags[0]) != i) {
      }
      store_release(&flags[32], i);
    }
  }
  if (blockIdx.x == 0) cycles[0] = (clock64() - start) / (2 * REPS);
}

__device__ __forceinline__ unsigned count_of(unsigned b, unsigned cta, unsigned rep) {
  return (b * 7 + cta * 13 + rep) & 15;
}

__global__ void __launch_bounds__(THREADS, 1) combine(unsigned *hist, unsigned *counter, long long *cycles,
                                                      unsigned *wrong) {
  const unsigned tid = threadIdx.x, M = gridDim.x, cta = blockIdx.x;
  __shared__ unsigned totals[BINS];
  long long start = clock64();
  for (unsigned rep = 0; rep < REPS; ++rep) {
    unsigned *buffer = hist + (rep % 3) * BINS;
    if (tid < BINS) atomicAdd(&buffer[tid], count_of(tid, cta, rep));
    // The buffer of rep + 1: every CTA read it at rep - 2 before it arrived at rep - 1, which
    // CTA 0 has passed; the others add into it only after CTA 0 arrives at rep.
    if (cta == 0 && tid < BINS) hist[((rep + 1) % 3) * BINS + tid] = 0;
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      arrive_release(counter);
      while (load_acquire(counter) < M * (rep + 1)) {
      }
    }
    __syncthreads();
    if (tid < BINS) totals[tid] = __ldcg(&buffer[tid]);
    __syncthreads();
  }
  long long end = clock64();
  if (tid == 0) cycles[cta] = (end - start) / REPS;
  if (tid < BINS) {
    unsigned expect = 0;
    for (unsigned c = 0; c < M; ++c) expect += count_of(tid, c, REPS - 1);
    if (totals[tid] != expect) atomicAdd(wrong, 1u);
  }
}

static void check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

int main() {
  unsigned *flags, *hist, *counter, *wrong;
  long long *cycles;
  check(cudaMalloc(&flags, 64 * sizeof(unsigned)), "malloc");
  check(cudaMalloc(&hist, 3 * BINS * sizeof(unsigned)), "malloc");
  check(cudaMalloc(&counter, sizeof(unsigned)), "malloc");
  check(cudaMalloc(&wrong, sizeof(unsigned)), "malloc");
  check(cudaMalloc(&cycles, 64 * sizeof(long long)), "malloc");
  const int smem = 64 * 1024;  // at most one CTA an SM, so that every CTA is resident
  check(cudaFuncSetAttribute(pingpong, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "attr");
  check(cudaFuncSetAttribute(combine, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "attr");
  std::printf("| measurement | CTAs | cycles a step |\n|---|---|---|\n");
  long long host[64];
  for (int trial = 0; trial < 3; ++trial) {  // the first warms up; the last is kept
    check(cudaMemset(flags, 0, 64 * sizeof(unsigned)), "memset");
    pingpong<<<2, THREADS, smem>>>(flags, cycles);
    check(cudaDeviceSynchronize(), "pingpong");
  }
  check(cudaMemcpy(host, cycles, sizeof(long long), cudaMemcpyDeviceToHost), "copy");
  std::printf("| pingpong (one handoff) | 2 | %lld |\n", host[0]);
  for (int M : {2, 4, 8, 16}) {
    double mean = 0;
    for (int trial = 0; trial < 3; ++trial) {
      check(cudaMemset(hist, 0, 3 * BINS * sizeof(unsigned)), "memset");
      check(cudaMemset(counter, 0, sizeof(unsigned)), "memset");
      check(cudaMemset(wrong, 0, sizeof(unsigned)), "memset");
      combine<<<M, THREADS, smem>>>(hist, counter, cycles, wrong);
      check(cudaDeviceSynchronize(), "combine");
      check(cudaMemcpy(host, cycles, M * sizeof(long long), cudaMemcpyDeviceToHost), "copy");
      unsigned bad = 0;
      check(cudaMemcpy(&bad, wrong, sizeof(unsigned), cudaMemcpyDeviceToHost), "copy");
      if (bad) {
        std::fprintf(stderr, "combine M=%d: %u wrong totals\n", M, bad);
        return 1;
      }
      mean = 0;
      for (int c = 0; c < M; ++c) mean += static_cast<double>(host[c]) / M;
    }
    std::printf("| combine (256 bins, a counter barrier) | %d | %.0f |\n", M, mean);
  }
  std::printf("cycles: CTA clock64 over %d steps (pingpong: half a round trip)\n", REPS);
  return 0;
}
