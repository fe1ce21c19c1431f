#pragma once
// A communicator of device memory (the CPU twin's) that is not ordered after a caller stream: it
// has the collectives' signatures and no set_caller. Only for programs that must not compile
// (tests/*/compile_fail): its collectives are declared, never defined.

#include <zero/comm/reduce_op.hpp>
#include <zero/core/memory_space.hpp>
#include <zero/core/work.hpp>

namespace zero::testing {

struct UnorderedDeviceCommunicator {
  using memory_space = device_twin;
  int rank() const noexcept { return 0; }
  int size() const noexcept { return 1; }
  template <class In, class Out>
  Work all_reduce(In&& in, Out&& out, ReduceOp op);
  template <class Buf>
  Work all_reduce(Buf&& data, ReduceOp op);
  template <class In, class Out>
  Work reduce_scatter(In&& in, Out&& out, ReduceOp op);
  template <class Buf>
  Work reduce_scatter(Buf&& data, ReduceOp op);
  template <class In, class Out>
  Work reduce(In&& in, Out&& out, ReduceOp op, int root);
  template <class Buf>
  Work reduce(Buf&& data, ReduceOp op, int root);
};

} // namespace zero::testing
