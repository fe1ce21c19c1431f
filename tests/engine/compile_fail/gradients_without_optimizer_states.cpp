// Must not compile: gradients sharded but not the optimizer states that consume them.
#include <zero/comm/self_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

int main() {
  using Plan = zero::ShardingPlan<zero::shard_gradients>;
  zero::SelfCommunicator comm;
  zero::Engine<Plan, zero::SelfCommunicator, zero::host, zero::Adam, zero::StaticLossScaler> engine(
      comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
