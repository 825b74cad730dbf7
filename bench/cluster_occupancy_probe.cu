// Cluster occupancy probe (bench/NOTES.md session 46): how many clusters of C CTAs of 512
// threads the GPU keeps resident at once, for C = 1..8 and the shared-memory footprints of
// DecodeTopK's builds, as cudaOccupancyMaxActiveClusters answers for a kernel that does
// nothing. Why: 32 rows of 262,144-1,048,576 logits are past every 4-CTA build's 30
// resident clusters (the clusters must fit the GPCs, not only the 132 SMs), so the policy
// reads them over two SMs a row; a cluster of three would read them over three if 32 such
// clusters fit. Not part of the kernel or its build; plain CUDA C++:
//
//     nvcc -O3 -arch=sm_90a -o build/cluster_occupancy_probe bench/cluster_occupancy_probe.cu  (here)
//     build/cluster_occupancy_probe                                                      (on the GPU)
//
// Prints one line a footprint: the resident clusters for each C (0: none fits; -1: the
// query failed), and the cluster count times C (the SMs' worth of CTAs it keeps busy).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void nothing(int *out) {
    extern __shared__ int smem[];
    if (out != nullptr && threadIdx.x == 0) out[blockIdx.x] = smem[0];
}

int main() {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    std::printf("%s, %d SMs, %zu B shared memory a block (opt-in), %zu an SM\n", prop.name,
                prop.multiProcessorCount, prop.sharedMemPerBlockOptin, prop.sharedMemPerMultiprocessor);
    // The builds' footprints (bytes of dynamic shared memory; kernel/resources' table):
    // 59,568 (block 4x512x4, 8x512x4), 96,432 (block 8x512x8), 100,656 (token 8x512x8),
    // 170,160 (2x512x16), 194,864 (the streamed token builds).
    const int footprints[] = {59568, 96432, 100656, 170160, 194864};
    cudaFuncSetAttribute(nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    std::printf("%10s", "smem B");
    for (int c = 1; c <= 8; ++c) std::printf("   C=%d (SMs)", c);
    std::printf("\n");
    for (int f : footprints) {
        std::printf("%10d", f);
        for (int c = 1; c <= 8; ++c) {
            cudaLaunchConfig_t config = {};
            cudaLaunchAttribute attribute;
            attribute.id = cudaLaunchAttributeClusterDimension;
            attribute.val.clusterDim.x = c;
            attribute.val.clusterDim.y = 1;
            attribute.val.clusterDim.z = 1;
            config.gridDim = dim3(c * 64, 1, 1);
            config.blockDim = dim3(512, 1, 1);
            config.dynamicSmemBytes = f;
            config.attrs = &attribute;
            config.numAttrs = 1;
            int clusters = 0;
            cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, nothing, &config);
            if (err != cudaSuccess) { clusters = -1; cudaGetLastError(); }
            std::printf("   %3d (%4d)", clusters, clusters > 0 ? clusters * c : 0);
        }
        std::printf("\n");
    }
    return 0;
}
