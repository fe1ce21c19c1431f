#pragma once
// QuantizedGather<T, Comm>: ZeRO++'s quantized weight gathers (qwZ) for stage 3's ParameterGather.
// Instead of T, a layer's gather carries int8 blocks and their scales
// (core/block_quantization.hpp): start() packs this rank's block into its place in a byte image and
// starts all-gathering every rank's packed block in place; finish() dequantizes the whole image,
// this rank's part included, into the layer's flat image once the gather completed. Byte images are
// pooled: as many as gathers are in flight at once, each as large as the largest layer's.

#include "zero/comm/communicator.hpp"
#include "zero/core/block_quantization.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/shard/layer_gather.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zero {

template <Element T, GatheringCommunicator Comm>
class QuantizedGather {
 public:
  QuantizedGather(Comm& comm, const ShardLayout& layout, BlockQuantization quantization)
      : comm_(comm), layout_(layout), quantization_(quantization) {
    quantization_.validate();
    for (std::size_t l = 0; l < layout.layer_count(); ++l)
      largest_ = std::max(largest_, image_bytes(l));
  }

  // Packs `mine` (this rank's block of layer l) and starts the gather into a pooled byte image,
  // whose index finish() takes. Nothing stays taken when packing or launching throws (a block
  // that cannot be quantized).
  std::size_t start(std::size_t l, View<const T> mine, Work& work) {
    const std::size_t b = take();
    try {
      work = gather(l, mine, pool_[b]);
    } catch (...) {
      free_.push_back(b);
      throw;
    }
    return b;
  }

  // The gather into byte image b completed: every rank's packed block of layer l into its place in
  // `image` (rank r's at flat_range(l, r)); the byte image goes back to the pool.
  void finish(std::size_t l, std::size_t b, View<T> image) {
    const Buffer<std::uint8_t>& packed = pool_[b];
    std::size_t at = 0;
    for (int r = 0; r < layout_.world_size(); ++r) {
      const Range range = layout_.flat_range(l, r);
      const std::size_t bytes = quantization_.packed_bytes(range.size());
      dequantize_blocks(quantization_, std::span<const std::uint8_t>(packed.data() + at, bytes),
                        image.subview(range.begin, range.size()));
      at += bytes;
    }
    free_.push_back(b);
  }

  std::size_t pool_bytes() const noexcept { return pool_.size() * largest_; }

 private:
  // Bytes of layer l's quantized image: every rank's packed block, end to end in rank order.
  std::size_t image_bytes(std::size_t l) const {
    std::size_t bytes = 0;
    for (int r = 0; r < layout_.world_size(); ++r)
      bytes += quantization_.packed_bytes(layout_.block(l, r).size());
    return bytes;
  }

  // Packs `mine` into its place in `image` and all-gathers the packed blocks in place.
  Work gather(std::size_t l, View<const T> mine, Buffer<std::uint8_t>& image) {
    std::vector<std::size_t> counts(std::size_t(layout_.world_size()));
    std::size_t at = 0;
    for (int r = 0; r < layout_.world_size(); ++r) {
      counts[std::size_t(r)] = quantization_.packed_bytes(layout_.block(l, r).size());
      if (r < comm_.rank()) at += counts[std::size_t(r)];
    }
    const View<std::uint8_t> bytes = image.view().first(image_bytes(l));
    const View<std::uint8_t> my_bytes = bytes.subview(at, counts[std::size_t(comm_.rank())]);
    quantize_blocks(quantization_, mine, std::span<std::uint8_t>(my_bytes.data(), my_bytes.size()),
                    "layer " + std::to_string(l) + "'s block on rank " +
                        std::to_string(comm_.rank()));
    if (equal_blocks(layout_, l)) return comm_.all_gather(bytes);
    if constexpr (VariableCountCommunicator<Comm>) {
      return comm_.all_gather(View<const std::uint8_t>(my_bytes), bytes, counts);
    } else {
      fail(ErrorKind::unsupported,
           "quantized gather: the ranks' blocks of layer " + std::to_string(l) +
               " differ in size, which needs a communicator with per-rank counts "
               "(zero::VariableCountCommunicator)");
    }
  }

  std::size_t take() {
    if (!free_.empty()) {
      const std::size_t b = free_.back();
      free_.pop_back();
      return b;
    }
    pool_.emplace_back(largest_, uninitialized);
    return pool_.size() - 1;
  }

  Comm& comm_;
  const ShardLayout& layout_;
  BlockQuantization quantization_;
  std::vector<Buffer<std::uint8_t>> pool_; // byte images, in flight or free
  std::size_t largest_ = 0;
  std::vector<std::size_t> free_;
};

} // namespace zero
