#pragma once
// A transport's staging buffers: N byte buffers, each grown to the largest request and kept
// between calls, so that a training loop's collectives allocate nothing after the first step.

#include <array>
#include <cstddef>
#include <vector>

namespace zero::detail {

template <std::size_t N>
class ScratchBuffers {
 public:
  // Buffer `which` as room for n elements of A; a later request for the same buffer may move it.
  template <class A>
  A* get(std::size_t which, std::size_t n) {
    std::vector<std::byte>& buffer = buffers_[which];
    if (buffer.size() < n * sizeof(A)) buffer.resize(n * sizeof(A));
    return reinterpret_cast<A*>(buffer.data());
  }

 private:
  std::array<std::vector<std::byte>, N> buffers_;
};

} // namespace zero::detail
