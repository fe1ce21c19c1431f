#pragma once
// A one-rank communicator with the reductions but no all_gather or broadcast: what a backend
// that only reduces looks like to zero's concepts. Used to check that ShardedTensor works with it
// where the policy allows, and fails to compile with a readable message where it does not.

#include <zero/comm/communicator.hpp>
#include <zero/comm/self_communicator.hpp>

namespace zero::testing {

class ReduceOnlyCommunicator {
 public:
  using memory_space = host;
  int rank() const noexcept { return 0; }
  int size() const noexcept { return 1; }

  template <class In, class Out>
  Work all_reduce(In&& in, Out&& out, ReduceOp op) {
    return self_.all_reduce(in, out, op);
  }
  template <class Buf>
  Work all_reduce(Buf&& data, ReduceOp op) {
    return self_.all_reduce(data, op);
  }
  template <class In, class Out>
  Work reduce_scatter(In&& in, Out&& out, ReduceOp op) {
    return self_.reduce_scatter(in, out, op);
  }
  template <class Buf>
  Work reduce_scatter(Buf&& data, ReduceOp op) {
    return self_.reduce_scatter(data, op);
  }
  template <class In, class Out>
  Work reduce(In&& in, Out&& out, ReduceOp op, int root) {
    return self_.reduce(in, out, op, root);
  }
  template <class Buf>
  Work reduce(Buf&& data, ReduceOp op, int root) {
    return self_.reduce(data, op, root);
  }

 private:
  SelfCommunicator self_;
};

static_assert(ReducingCommunicator<ReduceOnlyCommunicator>);
static_assert(!GatheringCommunicator<ReduceOnlyCommunicator>);

} // namespace zero::testing
