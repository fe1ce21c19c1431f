// A GPU test binary for a machine without a CUDA device: gpu_main.cpp must skip it (exit 77)
// there, and fail it when ZERO_EXPECT_GPU=1 says a device is expected, before any test runs.

#include <gtest/gtest.h>

TEST(GpuMain, RunsOnlyWhereADeviceIsPresent) {
  FAIL() << "gpu_main.cpp ran the tests, so it found a CUDA device: this check is for machines "
            "without one (ZERO_GPU_TESTS=syntax)";
}
