// Must not compile: the engine needs equal slices per layer, which whole-parameter greedy
// partitioning does not give.
#include <zero/comm/self_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/shard/whole_parameter_greedy.hpp>

int main() {
  using Plan = zero::ShardingPlan<zero::shard_optimizer_states,
                                  zero::partition_with<zero::WholeParameterGreedy>>;
  zero::SelfCommunicator comm;
  zero::Engine<Plan, zero::SelfCommunicator, zero::host, zero::Adam, zero::StaticLossScaler> engine(
      comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
