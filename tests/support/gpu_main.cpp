// GoogleTest main for `gpu` tests: without a CUDA device it exits with 77, which CTest reports as
// skipped (SKIP_RETURN_CODE), so that a CPU-only run never counts these tests as passed.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipping GPU tests\n");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
