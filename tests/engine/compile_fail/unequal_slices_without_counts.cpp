// Must not compile: whole-parameter greedy partitioning gives ranks blocks of different sizes,
// which the engine reduces and gathers with per-rank counts, and this communicator has none.
#include <zero/comm/self_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>
#include <zero/shard/whole_parameter_greedy.hpp>

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

int main() {
  using Plan = zero::ShardingPlan<zero::shard_optimizer_states,
                                  zero::partition_with<zero::WholeParameterGreedy>>;
  EqualBlocksOnly comm;
  zero::Engine<Plan, EqualBlocksOnly, zero::host, zero::Adam, zero::StaticLossScaler> engine(
      comm, {}, zero::Adam{}, zero::StaticLossScaler{});
}
