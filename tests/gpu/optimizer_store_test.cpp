// The optimizer store with its states in device memory, stepped over a device stream space
// (CudaStreamSpace; DeviceTwinSpace in CI, see staged_setup.hpp), against the same store in host
// memory on HostThreads (engine/optimizer_store.hpp): the same compute copies, master weights and
// moments bit for bit after two Adam steps, sharded (stages 1-3: this rank's block, gathered back
// through the staged communicator) and whole (stage 0); done(l) comes after layer l's update has
// run (over the twin, on a stream that runs the update only once waited for), in layer order; the
// cold paths (set_layer, layer, read_states and write_states) reach device memory through host
// copies. The device store is built over the staged communicator (its tensors
// on the agreed layout) and steps on a stream that is not the communicator's caller. Runs at 1-3
// ranks (sharing one GPU).

#include "device_model.hpp"
#include "staged_setup.hpp"

#include <zero/core/bfloat16.hpp>
#include <zero/core/execution_space.hpp>
#include <zero/engine/kept.hpp>
#include <zero/engine/model_layout.hpp>
#include <zero/engine/optimizer_store.hpp>
#include <zero/engine/options.hpp>
#include <zero/optim/adam.hpp>
#if !ZERO_TEST_TWIN
#include <zero/optim/cuda_stream_step.hpp>
#endif
#include <zero/shard/flat_contiguous.hpp>
#include <zero/shard/verify.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace zero::testing;
using zero::bfloat16;

template <class T>
std::vector<std::uint32_t> bits(const std::vector<T>& values) {
  std::vector<std::uint32_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t b = 0;
    std::memcpy(&b, &values[i], sizeof(T));
    out[i] = b;
  }
  return out;
}

template <bool Sharded>
void expect_device_store_equals_host() {
  using HostKept = zero::Kept<Sharded, zero::FlatContiguous, zero::host>;
  using DeviceKept = zero::Kept<Sharded, zero::FlatContiguous, DeviceMemory>;
  const std::vector<zero::ParameterSpec> params = engine_test_model();
  const int rank = world().rank();
  const zero::ModelLayout model(zero::make_layout(world(), zero::FlatContiguous{}, params), rank,
                                rank);
  const zero::EngineOptions options;
  StagedSetup s;
  zero::OptimizerStore<zero::Adam, HostKept, zero::HostThreads> on_host(world(), model, options,
                                                                        {});
  zero::OptimizerStore<zero::Adam, DeviceKept, DeviceSpace> on_device(s.comm, model, options,
                                                                      s.compute());
  const std::size_t layers = model.layers();
  for (std::size_t l = 0; l < layers; ++l) {
    std::vector<float> values(model.sharded->layer(l).numel);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(std::sin(0.37 * double(i) + double(l))) * 0.5f;
    on_host.set_layer(l, values);
    on_device.set_layer(l, values);
  }
  // This rank's gradient and compute copy of each layer's block, on the host and on the device.
  std::vector<std::vector<bfloat16>> grads(layers), host_out(layers);
  std::vector<zero::Buffer<bfloat16, DeviceMemory>> device_grads, device_out;
  for (std::size_t l = 0; l < layers; ++l) {
    const std::size_t n = HostKept::layout(model)->block(l, HostKept::rank(model)).size();
    grads[l].resize(n);
    for (std::size_t i = 0; i < n; ++i)
      grads[l][i] = bfloat16(static_cast<float>((i * 7 + l * 3 + std::size_t(rank)) % 23) - 11.0f);
    host_out[l].resize(n);
    device_grads.push_back(s.upload(grads[l])); // there for every stream on return
    device_out.emplace_back(n);
  }
  zero::Adam host_adam({.lr = 0.01, .weight_decay = 0.01}), device_adam = host_adam;
  for (int step = 0; step < 2; ++step) {
    on_host.step(
        host_adam.begin_step(), 1.0f / 8,
        [&](std::size_t l) { return zero::View<const bfloat16>(grads[l]); },
        [&](std::size_t l) { return zero::View<bfloat16>(host_out[l]); }, [](std::size_t) {});
    std::size_t next_done = 0;
    // Over the twin the store's stream runs an update only once something waits for it: a done(l)
    // that did not wait for layer l's update reads the old compute copy, every run.
    const ComputeHold held(s, true);
    on_device.step(
        device_adam.begin_step(), 1.0f / 8,
        [&](std::size_t l) { return std::as_const(device_grads[l]).view(); },
        [&](std::size_t l) { return device_out[l].view(); },
        [&](std::size_t l) {
          EXPECT_EQ(l, next_done++) << "done() out of layer order";
          // The update has run: its compute copy is in place (a sync copy on another stream).
          EXPECT_EQ(bits(s.read(device_out[l])), bits(host_out[l]))
              << "layer " << l << " step " << step << ": done() before its update ran";
        });
    EXPECT_EQ(next_done, layers);
  }
  for (std::size_t l = 0; l < layers; ++l)
    EXPECT_EQ(bits(on_device.layer(s.comm, l)), bits(on_host.layer(world(), l))) << "layer " << l;
  std::vector<std::vector<float>> host_states, device_states;
  on_host.read_states([&](std::size_t, std::size_t, zero::Range, zero::View<const float> v) {
    host_states.emplace_back(v.begin(), v.end());
  });
  on_device.read_states([&](std::size_t, std::size_t, zero::Range, zero::View<const float> v) {
    device_states.emplace_back(v.begin(), v.end());
  });
  ASSERT_EQ(device_states.size(), host_states.size());
  for (std::size_t k = 0; k < host_states.size(); ++k)
    EXPECT_EQ(bits(device_states[k]), bits(host_states[k])) << "state block " << k;
  // write_states then read_states gives back what was written.
  on_device.write_states([](std::size_t t, std::size_t l, zero::Range, zero::View<float> v) {
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(t * 1000 + l * 10) + static_cast<float>(i);
  });
  on_device.read_states([](std::size_t t, std::size_t l, zero::Range, zero::View<const float> v) {
    for (std::size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(v[i], static_cast<float>(t * 1000 + l * 10) + static_cast<float>(i));
  });
}

TEST(DeviceOptimizerStore, ShardedGivesTheHostStoresBits) {
  expect_device_store_equals_host<true>();
}

TEST(DeviceOptimizerStore, WholeGivesTheHostStoresBits) {
  expect_device_store_equals_host<false>();
}

} // namespace
