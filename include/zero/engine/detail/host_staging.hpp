#pragma once
// The stores' cold paths (setting a layer, reading it back, checkpoints) are host code: packing a
// layer's parameters into a block, unpacking an image, handing blocks to the checkpoint writer.
// When a store keeps its states where the host cannot read them (device memory, over a stream
// space), these helpers stage a block through a host copy: read_on_host copies it to the host and
// waits; write_on_host hands the host a copy of the block (its current values, so that what the
// writer leaves alone, such as padding, stays) and copies it back, waiting until it is in place.
// In host memory both pass the block itself: no copy, no wait.

#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"

#include <utility>
#include <vector>

namespace zero::detail {

// f(View<const T>) over the block's values, on the host.
template <class Exec, class T, class Space, class F>
decltype(auto) read_on_host(const Exec& exec, View<const T, Space> block, F&& f) {
  if constexpr (Space::host_accessible) {
    return std::forward<F>(f)(View<const T>(block.data(), block.size()));
  } else {
    static_assert(StreamSpace<Exec>, "zero: a block outside host memory is read through a stream");
    std::vector<T> host(block.size());
    copy(exec, block, View<T>(host));
    exec.fence();
    return std::forward<F>(f)(View<const T>(host));
  }
}

// f(View<T>) writes the block's values on the host; they are in the block on return.
template <class Exec, class T, class Space, class F>
void write_on_host(const Exec& exec, View<T, Space> block, F&& f) {
  if constexpr (Space::host_accessible) {
    std::forward<F>(f)(View<T>(block.data(), block.size()));
  } else {
    static_assert(StreamSpace<Exec>,
                  "zero: a block outside host memory is written through a stream");
    std::vector<T> host(block.size());
    copy(exec, View<const T, Space>(block), View<T>(host));
    exec.fence();
    std::forward<F>(f)(View<T>(host));
    copy(exec, View<const T>(host), block);
    exec.fence();
  }
}

} // namespace zero::detail
