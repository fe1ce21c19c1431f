// Must not compile: a Sharded tensor gathers with all_gather, which this communicator lacks.
// Registered with the expected static_assert text in CMakeLists.txt.

#include "reduce_only_communicator.hpp"

#include <zero/shard/sharded_tensor.hpp>

#include <vector>

int main() {
  zero::testing::ReduceOnlyCommunicator comm;
  const std::vector<zero::ParameterSpec> params{{"w", 10}};
  zero::ShardedTensor<float, zero::Sharded<zero::FlatContiguous>> tensor(comm, params);
  auto full = tensor.gather(comm);
  return full.numel() == 10 ? 0 : 1;
}
