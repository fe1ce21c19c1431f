#pragma once
// DeviceStagedBlocks<T, HostBlocks, Exec>: stage 3's parameter blocks kept on the host beside a
// device stream space (offload_param), as a BlockSource in the device's memory for ParameterGather.
// The blocks come from a BlockSource on the host: the shard in host memory (ShardBlocks,
// offload/offloaded_parameters.hpp) or the NVMe tier's reads into bounce buffers (NvmeBlocks,
// offload/nvme_parameters.hpp). block(l) takes layer l's block from there and copies it
// host-to-device into a buffer of the source's own pool, on a copy stream of its own, when the
// gather launches layer l
// (on demand, or prefetched in the recorded order). The gather's collective starts after the
// stream arrival(l, exec) names, which waits for that copy and for the work queued on the
// engine's stream: the engine's stream never waits for a copy, so the copy and the gather of the
// next layer run beside the current layer's kernels. The gather's hint for the layer after the one
// it prefetches (prefetch(l)) starts no copy; it goes to the host source, where the NVMe tier
// starts reading that block into a free bounce buffer.
//
// Why the gather runs on the device and not on the host: each rank copies only its block (1/N of
// the layer) across PCIe and the all-gather runs over the devices' links (NCCL), where gathering on
// the host would copy the whole layer to every device and run the collective over host memory.
// DeepSpeed's partitioned parameters take the same way.
//
// A buffer goes back to the pool once the gather that read it completed (release(l), which the
// gather calls after waiting for its collective, and so after the copy), and the host's block goes
// back to the host source with it; the pool grows to the most blocks in flight at
// once, one per layer being gathered, which the gather's prefetch and live bounds limit. Before
// the host writes the blocks at a step, drop() waits for the copies in flight and frees every
// buffer; after the step's writes were queued on the engine's stream, host_written(exec) orders
// the next copies after them.

#include "zero/core/buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zero {

template <Element T, class HostBlocks, SideStreams Exec>
requires HostAccessibleSpace<typename decltype(std::declval<HostBlocks&>().block(
    std::size_t{}))::memory_space>
class DeviceStagedBlocks {
  using Memory = typename Exec::memory_space;
  using Event = typename Exec::event_type;

 public:
  // `host`: this rank's blocks on the host (it must outlive this source); `sizes[l]`: the
  // elements of layer l's block.
  DeviceStagedBlocks(HostBlocks& host, std::vector<std::size_t> sizes, Exec exec)
      : host_(host), slots_(sizes.size()), exec_(exec) {
    for (std::size_t l = 0; l < sizes.size(); ++l) {
      slots_[l].size = sizes[l];
      largest_ = std::max(largest_, sizes[l]);
    }
  }

  DeviceStagedBlocks(const DeviceStagedBlocks&) = delete;
  DeviceStagedBlocks& operator=(const DeviceStagedBlocks&) = delete;

  // Layer l's block in device memory, its copy queued (arrival() orders a reader after it).
  View<const T, Memory> block(std::size_t l) {
    Slot& s = slots_.at(l);
    if (!s.buffer) start(l);
    return View<const T, Memory>(pool_[*s.buffer].view().first(s.size));
  }

  // The gather's hint: passed to the host source (the NVMe tier starts reading the block ahead);
  // no copy to the device starts on it (see the top of this file).
  void prefetch(std::size_t l) { host_.prefetch(l); }

  // The gather that read layer l's block completed, and so did its copy: the buffer can take
  // another block (the next copy into it is queued behind this one on the copy stream), and the
  // host source may reuse what the copy read.
  void release(std::size_t l) {
    Slot& s = slots_.at(l);
    if (!s.buffer) return;
    free_.push_back(*s.buffer);
    s.buffer.reset();
    host_.release(l);
  }

  // A stream after which a reader of block(l) may start: it waits for the block's copy and for the
  // work queued on `caller` so far. The same stream each time; its waits are all it runs.
  Exec arrival(std::size_t l, const Exec& caller) {
    const Exec order = order_.space();
    record(caller, caller_point_);
    wait(order, caller_point_);
    wait(order, slots_.at(l).arrived);
    return order;
  }

  // Before the host writes the blocks, once no gather reads one (the step): the copies in flight
  // end, and no buffer holds a block.
  void drop() {
    copies_.space().fence();
    for (std::size_t l = 0; l < slots_.size(); ++l)
      release(l);
  }
  // The host's writes of the blocks were queued on `writer` (the step's copies of the new compute
  // copy): later copies read the blocks after them.
  void host_written(const Exec& writer) {
    record(writer, written_);
    wait(copies_.space(), written_);
  }

  std::size_t buffer_bytes() const noexcept { return pool_.size() * largest_ * sizeof(T); }
  // The stream the blocks' copies run on (the tests hold it back).
  Exec copy_space() const noexcept { return copies_.space(); }

 private:
  struct Slot {
    std::optional<std::size_t> buffer; // into pool_, while it holds the layer's block
    std::size_t size = 0;              // of the layer's block
    Event arrived;                     // after the block's copy on the copy stream
  };

  void start(std::size_t l) {
    Slot& s = slots_[l];
    const std::size_t b = take_buffer();
    try {
      const auto from = host_.block(l); // an NVMe read completes here, on the host thread
      require(from.size() == s.size, "offload_param: layer " + std::to_string(l) + "'s block has " +
                                         std::to_string(from.size()) + " elements on the host, " +
                                         std::to_string(s.size) + " expected");
      const Exec copies = copies_.space();
      copy(copies, from, pool_[b].view().first(s.size));
      record(copies, s.arrived);
    } catch (...) { // nothing stays taken: the buffer, and the host's block
      free_.push_back(b);
      host_.release(l);
      throw;
    }
    s.buffer = b;
  }

  std::size_t take_buffer() {
    if (!free_.empty()) {
      const std::size_t b = free_.back();
      free_.pop_back();
      return b;
    }
    pool_.emplace_back(largest_, uninitialized);
    return pool_.size() - 1;
  }

  HostBlocks& host_;
  std::vector<Slot> slots_;
  Exec exec_;
  std::size_t largest_ = 1;
  std::vector<Buffer<T, Memory>> pool_;
  std::vector<std::size_t> free_;
  Event caller_point_; // arrival(): the work queued on the caller's stream
  Event written_;      // host_written(): the step's writes of the blocks
  // Last: destroyed first, once what was queued on them ran, before the pool goes.
  typename Exec::side_stream order_{exec_, "offload_param.order"};
  typename Exec::side_stream copies_{exec_, "offload_param.copies"};
};

} // namespace zero
