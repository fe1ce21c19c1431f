#pragma once
// Stages 2/3 keep no full gradient: while backward writes one layer's gradient it goes into a
// scratch buffer the size of the largest layer, which the reducer copies into its buckets and then
// returns. Buffers are reused, so their number is the number of layers in backward at once
// (usually one), never the model's depth.

#include "zero/core/buffer.hpp"
#include "zero/core/memory_space.hpp"

#include <cstddef>
#include <optional>
#include <vector>

namespace zero::detail {

template <class T, MemorySpace Space = host>
class LayerScratch {
 public:
  LayerScratch(std::size_t layers, std::size_t largest_layer)
      : largest_(largest_layer), of_layer_(layers) {}

  // Layer l's buffer, taken from the pool on first use.
  Buffer<T, Space>& operator[](std::size_t l) {
    std::optional<std::size_t>& slot = of_layer_.at(l);
    if (!slot) {
      if (free_.empty()) {
        buffers_.emplace_back(largest_, uninitialized);
        free_.push_back(buffers_.size() - 1);
      }
      slot = free_.back();
      free_.pop_back();
    }
    return buffers_[*slot];
  }

  // Layer l's gradient was handed over: its buffer goes back to the pool.
  void release(std::size_t l) {
    std::optional<std::size_t>& slot = of_layer_.at(l);
    if (slot) free_.push_back(*slot);
    slot.reset();
  }

  std::size_t bytes() const noexcept { return buffers_.size() * largest_ * sizeof(T); }

 private:
  std::size_t largest_;
  std::vector<Buffer<T, Space>> buffers_; // handed-out views point into the buffers' memory
  std::vector<std::optional<std::size_t>> of_layer_;
  std::vector<std::size_t> free_;
};

} // namespace zero::detail
