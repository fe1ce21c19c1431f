// The device conversions (the hardware instructions behind zero::half / zero::bfloat16 in device
// code) give the same bits as the host conversions, over all 65536 patterns and random floats.

#include <zero/core/buffer.hpp>
#include <zero/core/convert.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/device_convert.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

namespace {

template <class T>
void check_type() {
  std::vector<T> patterns(0x10000);
  for (std::uint32_t i = 0; i < 0x10000u; ++i)
    patterns[i] = T::from_bits(std::uint16_t(i));
  zero::Buffer<T, zero::cuda> d_in(patterns.size());
  zero::Buffer<float, zero::cuda> d_wide(patterns.size());
  ZERO_CHECK_CUDA(
      cudaMemcpy(d_in.data(), patterns.data(), patterns.size() * 2, cudaMemcpyHostToDevice));
  zero::cuda_kernels::convert(d_in.data(), d_wide.data(), patterns.size(), nullptr);
  std::vector<float> wide(patterns.size());
  ZERO_CHECK_CUDA(cudaMemcpy(wide.data(), d_wide.data(), wide.size() * 4, cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < wide.size(); ++i) {
    const float host = static_cast<float>(patterns[i]);
    if (host != host) {
      EXPECT_NE(wide[i], wide[i]) << i;
      continue;
    }
    ASSERT_EQ(std::bit_cast<std::uint32_t>(wide[i]), std::bit_cast<std::uint32_t>(host)) << i;
  }
  std::mt19937 rng(7);
  std::vector<float> floats(1 << 20);
  for (auto& f : floats)
    f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  zero::Buffer<float, zero::cuda> d_floats(floats.size());
  zero::Buffer<T, zero::cuda> d_narrow(floats.size());
  ZERO_CHECK_CUDA(
      cudaMemcpy(d_floats.data(), floats.data(), floats.size() * 4, cudaMemcpyHostToDevice));
  zero::cuda_kernels::convert(d_floats.data(), d_narrow.data(), floats.size(), nullptr);
  std::vector<T> narrow(floats.size());
  ZERO_CHECK_CUDA(
      cudaMemcpy(narrow.data(), d_narrow.data(), narrow.size() * 2, cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < floats.size(); ++i) {
    const T host(floats[i]);
    if (floats[i] != floats[i]) continue; // NaN payloads may differ; NaN-ness checked above
    ASSERT_EQ(narrow[i].bits, host.bits) << floats[i];
  }
}

TEST(DeviceConvert, HalfMatchesHost) {
  check_type<zero::half>();
}
TEST(DeviceConvert, Bfloat16MatchesHost) {
  check_type<zero::bfloat16>();
}

} // namespace
