#pragma once
// The two conjugate operations of Megatron-LM's tensor parallelism (Shoeybi et al., 2019, section
// 3), where activations cross between replicated and split form:
//   EnterTensorParallel (Megatron's f): a replicated activation enters a region whose layers each
//     hold a slice of the weights. Forward: nothing (every rank already has it). Backward: each
//     rank's gradient covers only its slice's share, so the gradients are summed over the group.
//   LeaveTensorParallel (Megatron's g): each rank holds a partial sum of the activation (a
//     row-parallel layer's output). Forward: summed over the group. Backward: nothing (the
//     gradient of a sum reaches every addend whole).
// An MLP or attention block is f, a column-parallel layer, the element-wise work, a row-parallel
// layer, g: one all-reduce per block in forward (g's) and one in backward (f's), so two of each
// per transformer layer (attention and MLP).
//
// The sums run over the communicator's memory space, in place; a group of one rank is left alone.

#include "zero/comm/communicator.hpp"
#include "zero/comm/reduce_op.hpp"
#include "zero/core/view.hpp"

namespace zero {

// The sum over the group of each rank's `values`, on every rank, in place.
template <ReducingCommunicator Comm, class T>
void sum_over_tensor_group(Comm& tensor, View<T, typename Comm::memory_space> values) {
  if (tensor.size() > 1 && values.size() > 0) tensor.all_reduce(values, ReduceOp::sum).wait();
}

struct EnterTensorParallel {
  template <ReducingCommunicator Comm, class T>
  static void forward(Comm&, View<T, typename Comm::memory_space>) {}
  template <ReducingCommunicator Comm, class T>
  static void backward(Comm& tensor, View<T, typename Comm::memory_space> gradient) {
    sum_over_tensor_group(tensor, gradient);
  }
};

struct LeaveTensorParallel {
  template <ReducingCommunicator Comm, class T>
  static void forward(Comm& tensor, View<T, typename Comm::memory_space> partial_sums) {
    sum_over_tensor_group(tensor, partial_sums);
  }
  template <ReducingCommunicator Comm, class T>
  static void backward(Comm&, View<T, typename Comm::memory_space>) {}
};

} // namespace zero
