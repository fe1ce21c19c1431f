// The 8-bit Adam step over a device stream space (CudaStreamSpace, optim/cuda_quantized_step.hpp;
// DeviceTwinSpace in CI, optim/stream_quantized_step.hpp; see staged_setup.hpp) on device memory,
// queued on a stream that is not the caller's, against the host step on host memory: the same
// master weights, codes, scales and compute copy bit for bit after two steps, whole blocks and a
// partial last one; and a mismatched moment fails the call with nothing queued. Runs at 1-3 ranks
// (each rank alone; the communicator only carries the streams).

#include "staged_setup.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/core/buffer.hpp>
#include <zero/core/error.hpp>
#include <zero/core/view.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/dynamic_map.hpp>
#include <zero/optim/quantized_moments.hpp>
#include <zero/optim/quantized_step.hpp>
#if ZERO_TEST_TWIN
#include <zero/optim/stream_quantized_step.hpp>
#else
#include <zero/optim/cuda_quantized_step.hpp>
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// A namespace of its own: the test binary's sources may be built as one unit.
namespace device_quantized_step_test {

using namespace zero::testing;
using zero::bfloat16;

// Master weights, 8-bit moments (quantized from reproducible fp32 moments), bfloat16 gradients
// and compute copy, in host memory.
struct State {
  std::vector<float> master;
  std::vector<std::uint8_t> codes[2];
  std::vector<float> scales[2];
  std::vector<bfloat16> grad, copy;

  explicit State(std::size_t n) : master(n), grad(n), copy(n) {
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> moment[2] = {std::vector<float>(n), std::vector<float>(n)};
    for (std::size_t i = 0; i < n; ++i) {
      master[i] = normal(random);
      moment[0][i] = normal(random) * 1e-3f;
      moment[1][i] = std::fabs(normal(random)) * 1e-6f;
      grad[i] = bfloat16(normal(random) * 1e-2f);
    }
    for (int k = 0; k < 2; ++k) {
      codes[k].resize(n);
      scales[k].resize(zero::quantized_blocks(n));
      zero::quantize(k == 0 ? zero::DynamicMap::signed_map() : zero::DynamicMap::unsigned_map(),
                     zero::View<const float>(moment[k]),
                     {zero::View<std::uint8_t>(codes[k]), zero::View<float>(scales[k])});
    }
  }
};

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(DeviceQuantizedStep, GivesTheHostStepsBytes) {
  StagedSetup s;
  constexpr std::size_t n = 3 * 2048 + 100; // three whole blocks and a partial one
  State host(n);
  zero::Buffer<float, DeviceMemory> master = s.upload(host.master);
  zero::Buffer<std::uint8_t, DeviceMemory> codes[2] = {s.upload(host.codes[0]),
                                                       s.upload(host.codes[1])};
  zero::Buffer<float, DeviceMemory> scales[2] = {s.upload(host.scales[0]),
                                                 s.upload(host.scales[1])};
  zero::Buffer<bfloat16, DeviceMemory> grad = s.upload(host.grad);
  zero::Buffer<bfloat16, DeviceMemory> copy = s.upload(host.copy);
  const DeviceSpace compute = s.compute();
  zero::AdamW optimizer({.lr = 0.01});
  for (int step = 0; step < 2; ++step) { // the second step reads the first's codes and scales
    const zero::AdamUpdate update = optimizer.begin_step();
    zero::quantized_fused_step(
        update, zero::View<float>(host.master),
        {zero::View<std::uint8_t>(host.codes[0]), zero::View<float>(host.scales[0])},
        {zero::View<std::uint8_t>(host.codes[1]), zero::View<float>(host.scales[1])},
        zero::View<const bfloat16>(host.grad), 0.5f, zero::View<bfloat16>(host.copy));
    zero::quantized_fused_step(compute, update, master.view(), {codes[0].view(), scales[0].view()},
                               {codes[1].view(), scales[1].view()},
                               zero::View<const bfloat16, DeviceMemory>(grad.data(), grad.size()),
                               0.5f, copy.view());
  }
  compute.fence();
  EXPECT_TRUE(same_bytes(s.read(master), host.master)) << "master weights";
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(same_bytes(s.read(codes[k]), host.codes[k])) << "codes of moment " << k;
    EXPECT_TRUE(same_bytes(s.read(scales[k]), host.scales[k])) << "scales of moment " << k;
  }
  EXPECT_TRUE(same_bytes(s.read(copy), host.copy)) << "compute copy";
}

TEST(DeviceQuantizedStep, AMismatchedMomentFailsTheCall) {
  StagedSetup s;
  constexpr std::size_t n = 4096;
  State host(n);
  zero::Buffer<float, DeviceMemory> master = s.upload(host.master);
  zero::Buffer<std::uint8_t, DeviceMemory> codes = s.upload(host.codes[0]);
  zero::Buffer<float, DeviceMemory> scales = s.upload(std::vector<float>(1, 1.0f)); // 2 needed
  zero::Buffer<bfloat16, DeviceMemory> grad = s.upload(host.grad);
  const DeviceSpace compute = s.compute();
  zero::Adam adam;
  EXPECT_THROW(
      zero::quantized_fused_step(compute, adam.begin_step(), master.view(),
                                 {codes.view(), scales.view()}, {codes.view(), scales.view()},
                                 zero::View<const bfloat16, DeviceMemory>(grad.data(), grad.size()),
                                 1.0f, zero::View<bfloat16, DeviceMemory>{}),
      zero::Error);
  compute.fence();
  EXPECT_TRUE(same_bytes(s.read(master), host.master)) << "nothing was queued";
}

} // namespace device_quantized_step_test
