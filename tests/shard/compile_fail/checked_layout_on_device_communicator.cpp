// Must not compile: ShardedTensor's checking constructor compares the layout across ranks in host
// memory, which a communicator of device memory cannot move; the stores pass zero::layout_agreed.
// Registered with the static_assert's text in CMakeLists.txt.

#include "unordered_device_communicator.hpp"

#include <zero/shard/sharded_tensor.hpp>

#include <memory>
#include <vector>

int main() {
  zero::testing::UnorderedDeviceCommunicator comm;
  const std::vector<zero::ParameterSpec> params{{"w", 10}};
  auto layout =
      std::make_shared<const zero::ShardLayout>(zero::FlatContiguous{}.partition(params, 1));
  zero::ShardedTensor<float, zero::Sharded<zero::FlatContiguous, zero::device_twin>> tensor(comm,
                                                                                            layout);
  return tensor.layout().layer_count() == 1 ? 0 : 1;
}
