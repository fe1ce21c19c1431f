// model_kernels_test.cpp over CudaStreamSpace: the kernels launched by nvcc's code
// (zero/core/cuda_for_each.cuh) against the host model.
#define ZERO_TEST_CUDA 1
#include "model_kernels_test.cpp"
