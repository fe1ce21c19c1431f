// device_model_test.cpp over CudaStreamSpace: the device model's kernels from nvcc's code, its
// products from cuBLAS, against the host model.
#define ZERO_TEST_CUDA 1
#include "device_model_test.cpp"
