// SPDX-License-Identifier: MIT
/*
 * touch.cu - the kernel gpu_driver's managed mode loads (scripts/gpu-check.sh compiles
 * it to PTX with nvcc --ptx; not built by CMake): every element of a managed buffer
 * touched once per launch, so its pages fault in and migrate to the GPU.
 */
extern "C" __global__ void touch(float *a, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) a[i] += 1.0f;
}
