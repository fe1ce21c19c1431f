#pragma once
// NvmeBlocks<T, Tensor>: stage 3's parameter blocks as a BlockSource for ParameterGather, when the
// shard lives on the NVMe tier. A block is read into one of `count` bounce buffers when it is
// asked for, or ahead of that when the gather predicts it (prefetch), and the buffer returns to the
// pool when the gather that read it completed. Layers kept in memory (DeepSpeed's max_in_cpu)
// are served from there.

#include "zero/core/buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"
#include "zero/nvme/bounce_buffers.hpp"
#include "zero/nvme/nvme_slice.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zero {

template <class T, class Tensor>
class NvmeBlocks {
 public:
  // `in_memory[l]`: layer l's block kept in memory instead (null: on NVMe).
  NvmeBlocks(const Tensor& shard, std::vector<const Buffer<T>*> in_memory, BounceBuffers buffers)
      : shard_(shard), in_memory_(std::move(in_memory)), buffers_(std::move(buffers)),
        reads_(in_memory_.size()) {
    for (std::size_t b = buffers_.count(); b-- > 0;)
      free_.push_back(b);
  }

  NvmeBlocks(const NvmeBlocks&) = delete;
  NvmeBlocks& operator=(const NvmeBlocks&) = delete;
  ~NvmeBlocks() {
    for (Read& read : reads_)
      detail::wait_quietly(read.work);
  }

  View<const T> block(std::size_t l) {
    const std::size_t n = shard_.block_range(l).size();
    if (in_memory_[l]) return View<const T>(in_memory_[l]->data(), n);
    Read& read = reads_[l];
    if (!read.buffer) start(l, /*needed=*/true);
    if (read.work.pending()) read.work.wait();
    read.handed_out = true; // the gather reads it until it calls release(l)
    return {buffer(*read.buffer), n};
  }

  // Starts reading layer l's block if a buffer is free; a hint, never an error.
  void prefetch(std::size_t l) {
    if (in_memory_[l] || reads_[l].buffer || free_.empty()) return;
    start(l, /*needed=*/false);
  }

  void release(std::size_t l) {
    Read& read = reads_[l];
    if (!read.buffer) return;
    if (read.work.pending()) read.work.wait();
    free_.push_back(*read.buffer);
    read.buffer.reset();
    read.handed_out = false;
  }

  // Before the shard is written: reads in flight would overlap the writes.
  void drop_reads() {
    for (std::size_t l = 0; l < reads_.size(); ++l)
      release(l);
  }

  std::size_t buffer_bytes() const noexcept { return buffers_.count() * buffers_.bytes(); }

 private:
  struct Read {
    std::optional<std::size_t> buffer;
    Work work;
    bool handed_out = false;
  };

  T* buffer(std::size_t b) { return reinterpret_cast<T*>(buffers_[b].data()); }

  void start(std::size_t l, bool needed) {
    if (free_.empty() && needed) reclaim(l);
    require(!free_.empty(), "NVMe parameters: all " + std::to_string(buffers_.count()) +
                                " read buffers are in use; raise offload_param.buffer_count");
    const std::size_t b = free_.back();
    free_.pop_back();
    const Range all{0, shard_.block_range(l).size()};
    reads_[l].buffer = b;
    reads_[l].work = shard_.read(l, all, View<T>(buffer(b), buffers_.bytes() / sizeof(T)));
  }

  // A block is needed now and every buffer is taken: drop a read ahead nobody asked for yet
  // (blocks handed out are read by a gather in flight and stay).
  void reclaim(std::size_t needed) {
    for (std::size_t l = 0; l < reads_.size(); ++l)
      if (l != needed && reads_[l].buffer && !reads_[l].handed_out) {
        release(l);
        return;
      }
  }

  const Tensor& shard_;
  std::vector<const Buffer<T>*> in_memory_;
  BounceBuffers buffers_;
  std::vector<Read> reads_;
  std::vector<std::size_t> free_;
};

} // namespace zero
