// The device's run-table kernels (src/cuda/copy_runs.cu) give HostThreads' bits: every layer of
// three layouts at 3 ranks, packed and unpacked (runs longer than a device table's longest run are
// cut, so a parameter of 100003 elements covers that), for every pair of float, half and bfloat16,
// and accumulated into float.

#include <zero/core/buffer.hpp>
#include <zero/core/cuda_check.hpp>
#include <zero/core/cuda_stream_space.hpp>
#include <zero/core/execution_space.hpp>
#include <zero/shard.hpp>
#include <zero/shard/layer_images.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

template <class T>
zero::Buffer<T, zero::cuda> to_device(const std::vector<T>& values) {
  zero::Buffer<T, zero::cuda> device(values.size(), zero::uninitialized);
  if (!values.empty())
    ZERO_CHECK_CUDA(cudaMemcpy(device.data(), values.data(), values.size() * sizeof(T),
                               cudaMemcpyHostToDevice));
  return device;
}

template <class T>
std::vector<T> to_host(const zero::Buffer<T, zero::cuda>& device) {
  std::vector<T> values(device.size());
  if (!values.empty())
    ZERO_CHECK_CUDA(cudaMemcpy(values.data(), device.data(), values.size() * sizeof(T),
                               cudaMemcpyDeviceToHost));
  return values;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// convert_runs From -> To along `runs` on the device and on the host, from the same values, into
// destinations that start with the same (non-zero) bits.
template <class From, class To>
void check_pair(const std::vector<zero::CopyRun>& runs, std::size_t source, std::size_t target) {
  SCOPED_TRACE(std::string(zero::to_string(zero::dtype_of<From>)) + " to " +
               zero::to_string(zero::dtype_of<To>));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  std::vector<From> from(source);
  for (From& x : from)
    x = zero::convert<From>(value(rng));
  std::vector<To> expected(target, zero::convert<To>(7.0f));
  zero::convert_runs(zero::HostThreads{}, zero::View<const From>(from), zero::View<To>(expected),
                     zero::RunTable<>(runs));

  const zero::CudaStreamSpace space;
  const zero::RunTable<zero::cuda> table(runs);
  const auto d_from = to_device(from);
  auto d_to = to_device(std::vector<To>(target, zero::convert<To>(7.0f)));
  zero::convert_runs(space, zero::View<const From, zero::cuda>(d_from.view()), d_to.view(), table);
  space.fence();
  EXPECT_TRUE(same_bits(to_host(d_to), expected));

  if constexpr (std::is_same_v<To, float>) {
    zero::accumulate_runs(zero::HostThreads{}, zero::View<const From>(from),
                          zero::View<float>(expected), zero::RunTable<>(runs));
    zero::accumulate_runs(space, zero::View<const From, zero::cuda>(d_from.view()), d_to.view(),
                          table);
    space.fence();
    EXPECT_TRUE(same_bits(to_host(d_to), expected));
  }
}

template <class From>
void check_from(const std::vector<zero::CopyRun>& runs, std::size_t source, std::size_t target) {
  check_pair<From, float>(runs, source, target);
  check_pair<From, zero::half>(runs, source, target);
  check_pair<From, zero::bfloat16>(runs, source, target);
}

TEST(DeviceRunTables, GiveTheHostBitsForEveryLayoutAndTypePair) {
  std::vector<zero::ParameterSpec> params;
  const std::size_t sizes[] = {0, 1, 3, 31, 1031, 100003, 7, 40000};
  for (std::size_t i = 0; i < std::size(sizes); ++i)
    params.push_back({"p" + std::to_string(i), sizes[i], zero::DType::float32, int(i % 2)});
  const std::vector<zero::ShardLayout> layouts{
      zero::make_layout(zero::FlatContiguous{.alignment = 16}, params, 3),
      zero::make_layout(zero::PerParameter{}, params, 3),
      zero::make_layout(zero::WholeParameterGreedy{}, params, 3)};
  for (const zero::ShardLayout& layout : layouts) {
    const zero::LayerImages images(layout);
    for (std::size_t l = 0; l < layout.layer_count(); ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const std::size_t numel = layout.layer(l).numel, flat = layout.layer(l).flat_numel;
      std::vector<zero::CopyRun> pack, unpack;
      images.append_pack_runs(l, zero::Range{0, flat}, 5, pack);
      images.append_unpack_runs(l, zero::Range{0, flat}, 0, 0, unpack);
      check_from<float>(pack, numel, flat + 5);
      check_from<zero::half>(pack, numel, flat + 5);
      check_from<zero::bfloat16>(pack, numel, flat + 5);
      check_from<float>(unpack, flat, numel);
      check_from<zero::bfloat16>(unpack, flat, numel);
    }
  }
}

TEST(DeviceRunTables, CheckTheViewsAtTheCall) {
  const zero::CudaStreamSpace space;
  const zero::RunTable<zero::cuda> table(std::vector<zero::CopyRun>{{0, 0, 8}});
  zero::Buffer<float, zero::cuda> from(8), to(4);
  EXPECT_THROW(
      zero::convert_runs(space, zero::View<const float, zero::cuda>(from.view()), to.view(), table),
      zero::Error);
}

} // namespace
