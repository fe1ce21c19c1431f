// Engines that must not compile, one namespace each, and each must say why: the compiler reports
// every one in a single run, and each case's test (tests/engine/CMakeLists.txt) looks for its own
// message in that report (zero_add_compile_fail_tests, cmake/ZeroTesting.cmake).
#include <zero/comm/self_communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/shard/whole_parameter_greedy.hpp>

#include <utility>

namespace gradients_without_optimizer_states {
// Gradients sharded but not the optimizer states that consume them.
void instantiate() {
  using Plan = zero::ShardingPlan<zero::shard_gradients>;
  zero::SelfCommunicator comm;
  zero::Engine<Plan, zero::SelfCommunicator, zero::host, zero::Adam, zero::StaticLossScaler> engine(
      comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace gradients_without_optimizer_states

namespace stage3_without_all_gather {
// Stage 3 gathers parameters, and this communicator has no all_gather.

// A communicator that can reduce but not gather (all its other members are SelfCommunicator's).
struct ReduceOnly {
  using memory_space = zero::host;
  zero::SelfCommunicator self;
  int rank() const { return 0; }
  int size() const { return 1; }
  template <class... A>
  zero::Work all_reduce(A&&... a) {
    return self.all_reduce(std::forward<A>(a)...);
  }
  template <class... A>
  zero::Work reduce_scatter(A&&... a) {
    return self.reduce_scatter(std::forward<A>(a)...);
  }
  template <class... A>
  zero::Work reduce(A&&... a) {
    return self.reduce(std::forward<A>(a)...);
  }
  void barrier() {}
  ReduceOnly split(int, int) { return {}; }
};
void instantiate() {
  ReduceOnly comm;
  zero::Engine<zero::Stage<3>, ReduceOnly, zero::host, zero::Adam, zero::StaticLossScaler> engine(
      comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace stage3_without_all_gather

namespace unequal_slices_without_counts {
// Whole-parameter greedy partitioning gives ranks blocks of different sizes,
// which the engine reduces and gathers with per-rank counts, and this communicator has none.

// Every operation of zero::Communicator, but no collectives with per-rank counts.
struct EqualBlocksOnly {
  using memory_space = zero::host;
  zero::SelfCommunicator self;
  int rank() const { return 0; }
  int size() const { return 1; }
  template <class In, class Out>
  zero::Work all_reduce(In&& in, Out&& out, zero::ReduceOp op) {
    return self.all_reduce(in, out, op);
  }
  template <class Buf>
  zero::Work all_reduce(Buf&& data, zero::ReduceOp op) {
    return self.all_reduce(data, op);
  }
  template <class In, class Out>
  zero::Work reduce_scatter(In&& in, Out&& out, zero::ReduceOp op) {
    return self.reduce_scatter(in, out, op);
  }
  template <class Buf>
  zero::Work reduce_scatter(Buf&& data, zero::ReduceOp op) {
    return self.reduce_scatter(data, op);
  }
  template <class In, class Out>
  zero::Work reduce(In&& in, Out&& out, zero::ReduceOp op, int root) {
    return self.reduce(in, out, op, root);
  }
  template <class In, class Out>
  zero::Work all_gather(In&& in, Out&& out) {
    return self.all_gather(in, out);
  }
  template <class Buf>
  zero::Work all_gather(Buf&& data) {
    return self.all_gather(data);
  }
  template <class Buf>
  zero::Work broadcast(Buf&& data, int root) {
    return self.broadcast(data, root);
  }
  void barrier() {}
  EqualBlocksOnly split(int, int) { return {}; }
};
static_assert(zero::Communicator<EqualBlocksOnly>);
void instantiate() {
  using Plan = zero::ShardingPlan<zero::shard_optimizer_states,
                                  zero::partition_with<zero::WholeParameterGreedy>>;
  EqualBlocksOnly comm;
  zero::Engine<Plan, EqualBlocksOnly, zero::host, zero::Adam, zero::StaticLossScaler> engine(
      comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace unequal_slices_without_counts

namespace device_memory {
// Model states in device memory with the default (host) execution space.
void instantiate() {
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<2>, zero::SelfCommunicator, zero::cuda, zero::Adam,
               zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace device_memory

namespace gradients_on_nvme {
// Gradients cannot live on the NVMe tier.
void instantiate() {
  using Where = zero::Placement<zero::gradients_in<zero::nvme>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<2>, zero::SelfCommunicator, Where, zero::Adam, zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace gradients_on_nvme

namespace parameters_on_nvme_below_stage3 {
// Stages 0-2 keep the whole compute copy on every rank; parameters go to NVMe
// only as stage 3 shards.
void instantiate() {
  using Where =
      zero::Placement<zero::parameters_in<zero::nvme>, zero::optimizer_states_in<zero::nvme>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<2>, zero::SelfCommunicator, Where, zero::Adam, zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace parameters_on_nvme_below_stage3

namespace optimizer_states_on_nvme_at_stage0 {
// Stage 0 does not shard the optimizer states, so every rank would write the
// same whole copy to its disk.
void instantiate() {
  using Where = zero::Placement<zero::optimizer_states_in<zero::nvme>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<0>, zero::SelfCommunicator, Where, zero::Adam, zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace optimizer_states_on_nvme_at_stage0

namespace parameters_offloaded_below_stage3 {
// Beside a device space the parameters may stay on the host as stage 3's shards only
// (offload_param): under stages 0-2 every rank reads the whole compute copy.
void instantiate() {
  using Where = zero::Placement<zero::execute_on<zero::DeviceTwinSpace>,
                                zero::parameters_in<zero::pinned_host>,
                                zero::optimizer_states_in<zero::pinned_host>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<2>, zero::SelfCommunicator, Where, zero::Adam, zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace parameters_offloaded_below_stage3

namespace parameters_offloaded_without_the_optimizer_states {
// The host's step writes the offloaded parameter shards: the optimizer states must be offloaded
// with them.
void instantiate() {
  using Where = zero::Placement<zero::execute_on<zero::DeviceTwinSpace>,
                                zero::parameters_in<zero::pinned_host>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<3>, zero::SelfCommunicator, Where, zero::Adam, zero::StaticLossScaler>
      engine(comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace parameters_offloaded_without_the_optimizer_states

namespace parameters_offloaded_without_its_header {
// Stage 3's parameter shards in pinned host memory beside a device space (offload_param) without
// <zero/offload/offloaded_parameters.hpp>, which defines their store.
void instantiate() {
  using Where = zero::Placement<zero::execute_on<zero::DeviceTwinSpace>,
                                zero::parameters_in<zero::pinned_host>,
                                zero::optimizer_states_in<zero::pinned_host>>;
  using Staged = zero::StagedCommunicator<zero::DeviceTwinSpace, zero::SelfCommunicator>;
  zero::SelfCommunicator control;
  zero::HostStream stream{"compute"};
  Staged staged(zero::SelfCommunicator{}, zero::DeviceTwinSpace(stream),
                zero::DeviceTwinSpace(stream));
  zero::Engine<zero::Stage<3>, Staged, Where, zero::Adam, zero::StaticLossScaler> engine(
      control, staged, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace parameters_offloaded_without_its_header

namespace offloaded_without_its_header {
// The optimizer states in pinned host memory beside a device space (ZeRO-Offload) without
// <zero/offload/offloaded_optimizer_store.hpp>, which defines their store.
void instantiate() {
  using Where = zero::Placement<zero::execute_on<zero::DeviceTwinSpace>,
                                zero::optimizer_states_in<zero::pinned_host>>;
  using Staged = zero::StagedCommunicator<zero::DeviceTwinSpace, zero::SelfCommunicator>;
  zero::SelfCommunicator control;
  zero::HostStream stream{"compute"};
  Staged staged(zero::SelfCommunicator{}, zero::DeviceTwinSpace(stream),
                zero::DeviceTwinSpace(stream));
  zero::Engine<zero::Stage<2>, Staged, Where, zero::Adam, zero::StaticLossScaler> engine(
      control, staged, {}, zero::Adam{}, zero::StaticLossScaler{});
}
} // namespace offloaded_without_its_header

namespace lamb_on_nvme {
// LAMB's trust ratio combines per-parameter sums in host memory; the NVMe store streams sub-groups.
void instantiate() {
  using Where = zero::Placement<zero::optimizer_states_in<zero::nvme>>;
  zero::SelfCommunicator comm;
  zero::Engine<zero::Stage<2>, zero::SelfCommunicator, Where, zero::Lamb, zero::StaticLossScaler>
      engine(comm, {}, zero::Lamb{}, zero::StaticLossScaler{});
}
} // namespace lamb_on_nvme

namespace lamb_over_a_device {
// LAMB's step runs on the host; its passes have no stream-space overloads.
void instantiate() {
  using Where = zero::Placement<zero::execute_on<zero::DeviceTwinSpace>>;
  using Staged = zero::StagedCommunicator<zero::DeviceTwinSpace, zero::SelfCommunicator>;
  zero::SelfCommunicator control;
  zero::HostStream stream{"compute"};
  Staged staged(zero::SelfCommunicator{}, zero::DeviceTwinSpace(stream),
                zero::DeviceTwinSpace(stream));
  zero::Engine<zero::Stage<2>, Staged, Where, zero::Lamb, zero::StaticLossScaler> engine(
      control, staged, {}, zero::Lamb{}, zero::StaticLossScaler{});
}
} // namespace lamb_over_a_device

int main() {}
