#pragma once
// Stages 2/3 keep no full gradient: while backward writes one layer's gradient it goes into a
// scratch buffer the size of the largest layer, which the reducer copies into its buckets and then
// returns. Buffers are reused, so their number is the number of layers in backward at once
// (usually one), never the model's depth.

#include "zero/core/any_buffer.hpp"

#include <cstddef>
#include <optional>
#include <vector>

namespace zero::detail {

class LayerScratch {
 public:
  LayerScratch(DType dtype, std::size_t layers, std::size_t largest_layer)
      : dtype_(dtype), largest_(largest_layer), of_layer_(layers) {}

  // Layer g's buffer, taken from the pool on first use.
  AnyBuffer& operator[](std::size_t g) {
    std::optional<std::size_t>& slot = of_layer_.at(g);
    if (!slot) {
      if (free_.empty()) {
        buffers_.emplace_back(dtype_, largest_);
        free_.push_back(buffers_.size() - 1);
      }
      slot = free_.back();
      free_.pop_back();
    }
    return buffers_[*slot];
  }

  // Layer g's gradient was handed over: its buffer goes back to the pool.
  void release(std::size_t g) {
    std::optional<std::size_t>& slot = of_layer_.at(g);
    if (slot) free_.push_back(*slot);
    slot.reset();
  }

  std::size_t bytes() const noexcept {
    std::size_t total = 0;
    for (const auto& b : buffers_)
      total += b.size_bytes();
    return total;
  }

 private:
  DType dtype_;
  std::size_t largest_;
  std::vector<AnyBuffer> buffers_;
  std::vector<std::optional<std::size_t>> of_layer_;
  std::vector<std::size_t> free_;
};

} // namespace zero::detail
