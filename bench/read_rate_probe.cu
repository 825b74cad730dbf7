// Read-rate probe (bench/NOTES.md sessions 50-51): how fast one streamed CTA an SM can
// read a row's chunk from HBM, by the bytes it keeps in flight. Why: at 32 x 1M the
// 3x512x4 launch's load-only floor (bench/speed_of_light.py) read 1.29 TB/s over 96 SMs,
// while more SMs a row is capped by the GPCs' clusters and by the register file (512
// threads x 128 registers fill an SM's). Answer (session 51, H100): every launch here
// reads the 64 MiB at ~2 TB/s with register loads, so an SM's read rate is no limit; that
// floor was wrong (each CTA read the whole row; fixed). Loads only, nothing selected; not
// part of the kernel or its build. Plain CUDA C++:
//
//     nvcc -O3 -arch=sm_90a -o build/read_rate_probe bench/read_rate_probe.cu   (here)
//     build/read_rate_probe                                                     (on the GPU)
//
// Every launch: 32 rows of 1,048,576 BF16 logits (64 MiB), the streamed builds' launch
// (clusters of C CTAs of 512 threads, C a row, 194,864 B of shared memory, so one CTA an
// SM), the L2 evicted before each (a 256 MiB memset), median of 20 after 3. Two forms:
//   regs D  each thread loads D 16-byte vectors, then folds them (D x 8 KB in flight an SM)
//   bulk S  a ring of S 16 KB stages that one thread fills with cp.async.bulk (S x 16 KB in
//           flight an SM); every thread reads its 32 B of a full stage, then the CTA
//           barrier frees it for the next copy
// and, for scale, the physical floor's shape (two CTAs an SM over every SM, no cluster).
// Prints one line a form: us, TB/s, GB/s an SM busy.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); return 1; } } while (0)

constexpr int ROWS = 32;
constexpr long long WIDTH = 1 << 20;            // logits a row
constexpr long long VECTORS = WIDTH / 8;        // 16-byte vectors a row
constexpr int THREADS = 512;
constexpr int SMEM = 194864;                    // the streamed builds' footprint
constexpr int STAGE = 16384;                    // bytes a bulk stage
constexpr int MAX_STAGES = 8;

// A CTA's chunk of its row, as DecodeTopK splits a row over C CTAs (SPEC.md 2.2).
__device__ void chunk(int cluster, long long &start, long long &count) {
    int row = blockIdx.x / cluster, rank = blockIdx.x % cluster;
    long long first = rank * VECTORS / cluster, last = (rank + 1) * VECTORS / cluster;
    start = row * VECTORS + first;
    count = last - first;
}

// One round of a thread's loads: D vectors THREADS apart from base[first + threadIdx.x]
// (those below limit), all issued before any is used, folded into one word.
template <int D>
__device__ __forceinline__ unsigned fold_round(const uint4 *base, long long first, long long limit) {
    uint4 v[D];
#pragma unroll
    for (int d = 0; d < D; ++d) {
        long long i = first + d * THREADS + threadIdx.x;
        v[d] = i < limit ? __ldg(base + i) : make_uint4(0, 0, 0, 0);
    }
    unsigned folded = 0;
#pragma unroll
    for (int d = 0; d < D; ++d) folded ^= v[d].x ^ v[d].y ^ v[d].z ^ v[d].w;
    return folded;
}

// Keeps the loads (ptxas deletes loads nothing uses); never true on this data.
__device__ __forceinline__ void keep(unsigned folded, unsigned *out) {
    if (folded == 0x7EADBEEF) out[blockIdx.x] = folded;
}

template <int D>
__global__ void __launch_bounds__(THREADS, 1) regs(const uint4 *logits, int cluster, unsigned *out) {
    long long start, count;
    chunk(cluster, start, count);
    unsigned folded = 0;
    for (long long first = 0; first < count; first += (long long)THREADS * D)
        folded ^= fold_round<D>(logits + start, first, count);
    keep(folded, out);
}

__device__ __forceinline__ unsigned smem_addr(const void *p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__global__ void __launch_bounds__(THREADS, 1) bulk(const uint4 *logits, int cluster, int stages, unsigned *out) {
    extern __shared__ __align__(128) unsigned char smem[];
    uint64_t *full = reinterpret_cast<uint64_t *>(smem);          // one mbarrier a stage
    unsigned char *ring = smem + 128;
    long long start, count;
    chunk(cluster, start, count);
    const char *src = reinterpret_cast<const char *>(logits + start);
    long long bytes = count * 16;
    long long pieces = (bytes + STAGE - 1) / STAGE;
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(full + s)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // Thread 0 asks for piece p into stage p % stages, with its byte count on that stage's mbarrier.
    auto issue = [&](long long p) {
        int s = p % stages;
        unsigned size = (unsigned)min((long long)STAGE, bytes - p * STAGE);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(smem_addr(full + s)), "r"(size) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem_addr(ring + s * STAGE)), "l"(src + p * STAGE), "r"(size),
                        "r"(smem_addr(full + s)) : "memory");
    };
    if (threadIdx.x == 0)
        for (long long p = 0; p < min((long long)stages, pieces); ++p) issue(p);
    unsigned folded = 0;
    for (long long p = 0; p < pieces; ++p) {
        int s = p % stages;
        unsigned parity = (unsigned)((p / stages) & 1), done = 0;
        while (!done)
            asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                         : "=r"(done) : "r"(smem_addr(full + s)), "r"(parity) : "memory");
        unsigned size = (unsigned)min((long long)STAGE, bytes - p * STAGE);
        const uint4 *stage = reinterpret_cast<const uint4 *>(ring + s * STAGE);
        for (unsigned i = threadIdx.x; i < size / 16; i += THREADS) {
            uint4 v = stage[i];
            folded ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads();  // every thread has read stage s: it may be filled again
        if (threadIdx.x == 0 && p + stages < pieces) issue(p + stages);
    }
    keep(folded, out);
}

// The physical floor's shape: 2 CTAs an SM over every SM, the rows' vectors spread evenly.
__global__ void __launch_bounds__(THREADS, 2) spread(const uint4 *logits, long long total, unsigned *out) {
    unsigned folded = 0;
    constexpr int D = 8;
    for (long long first = (long long)blockIdx.x * THREADS * D; first < total;
         first += (long long)gridDim.x * THREADS * D)
        folded ^= fold_round<D>(logits, first, total);
    keep(folded, out);
}

template <typename Launch>
static int timed(const char *name, int ctas, int sms, Launch launch, void *evict, size_t evict_bytes) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int r = 0; r < 23; ++r) {
        CHECK(cudaMemsetAsync(evict, r & 0xFF, evict_bytes));
        CHECK(cudaEventRecord(a));
        CHECK(launch());
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float t;
        CHECK(cudaEventElapsedTime(&t, a, b));
        if (r >= 3) ms.push_back(t);
    }
    CHECK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    double us = ms[ms.size() / 2] * 1e3, total = ROWS * VECTORS * 16.0;
    std::printf("%-26s %4d CTAs on %3d SMs  %8.2f us  %5.2f TB/s  %5.1f GB/s an SM\n", name, ctas, sms, us,
                total / us / 1e6, total / us / 1e3 / sms);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 0;
}

int main() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int sms = prop.multiProcessorCount;
    std::printf("%s, %d SMs; %d rows x %lld logits (%.0f MiB), %d threads, %d B shared a CTA\n", prop.name, sms,
                ROWS, WIDTH, ROWS * VECTORS * 16.0 / (1 << 20), THREADS, SMEM);
    uint4 *logits;
    unsigned *out;
    void *evict;
    const size_t evict_bytes = size_t(256) << 20;
    CHECK(cudaMalloc(&logits, ROWS * VECTORS * 16));
    CHECK(cudaMemset(logits, 0x3F, ROWS * VECTORS * 16));
    CHECK(cudaMalloc(&out, 4096 * sizeof(unsigned)));
    CHECK(cudaMalloc(&evict, evict_bytes));
    struct { int vectors; void (*kernel)(const uint4 *, int, unsigned *); } loads[] = {
        {4, regs<4>}, {8, regs<8>}, {16, regs<16>}};
    for (auto &form : loads) CHECK(cudaFuncSetAttribute(form.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    CHECK(cudaFuncSetAttribute(bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    char name[64];
    for (int cluster : {2, 3, 4}) {
        int ctas = ROWS * cluster;
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = cluster;
        attr.val.clusterDim.y = 1;
        attr.val.clusterDim.z = 1;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(ctas);
        config.blockDim = dim3(THREADS);
        config.dynamicSmemBytes = SMEM;
        config.attrs = &attr;
        config.numAttrs = 1;
        int resident = 0;
        CHECK(cudaOccupancyMaxActiveClusters(&resident, (void *)regs<8>, &config));
        std::printf("C = %d: %d clusters resident at once (%d rows)\n", cluster, resident, ROWS);
        int busy = std::min(ctas, sms);
        for (auto &form : loads) {
            std::snprintf(name, sizeof name, "C%d regs %d", cluster, form.vectors);
            if (timed(name, ctas, busy, [&] { return cudaLaunchKernelEx(&config, form.kernel, (const uint4 *)logits, cluster, out); },
                      evict, evict_bytes)) return 1;
        }
        for (int stages : {2, 4, MAX_STAGES}) {
            std::snprintf(name, sizeof name, "C%d bulk %d x 16 KB", cluster, stages);
            if (timed(name, ctas, busy, [&] { return cudaLaunchKernelEx(&config, bulk, (const uint4 *)logits, cluster, stages, out); },
                      evict, evict_bytes)) return 1;
        }
    }
    long long total = ROWS * VECTORS;
    if (timed("spread regs 8 (2 an SM)", 2 * sms, sms, [&] {
            spread<<<2 * sms, THREADS>>>(logits, total, out);
            return cudaGetLastError(); }, evict, evict_bytes)) return 1;
    CHECK(cudaDeviceSynchronize());
    return 0;
}
