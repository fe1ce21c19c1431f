#pragma once
// NvmeResiduals: the residuals of split master weights (EngineOptions::master,
// optim/split_master.hpp) of this rank's blocks on the NVMe tier, for the optimizer store of
// ZeRO-Infinity (offload/nvme_optimizer_store.hpp). The masters' high parts are the compute copy,
// which the parameter store keeps in memory, so a step swaps 1 or 2 bytes per element of masters
// each way instead of 4. One swap file; in it every layer's block starts at an aligned offset.
//
// A part of a block moves in one transfer when it starts on a multiple of a unit (4096 bytes:
// 4096 8-bit or 2048 16-bit residuals); the store cuts its sub-groups on multiples of 4096
// elements. In the store's bounce slots the residuals of a part lie where the fp32 masters would
// (4 bytes an element of room), at the start.
//
// The cold paths (setting a layer, reading it back, checkpoints) reconstruct the masters from the
// compute copy, bound by the store's owner as for SplitMasters (engine/split_masters.hpp), and
// write the split weights back into it.

#include "zero/core/error.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"
#include "zero/engine/options.hpp"
#include "zero/engine/split_masters.hpp"
#include "zero/nvme/nvme_tier.hpp"
#include "zero/nvme/swap_file.hpp"
#include "zero/optim/split_master.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace zero {

class NvmeResiduals {
 public:
  static constexpr std::size_t unit_bytes = SwapFile::alignment;

  // The residuals of rank `rank`'s blocks of `layout`, every layer; every residual starts at 0.
  NvmeResiduals(NvmeTier& tier, const ShardLayout& layout, int rank, std::size_t layers,
                MasterStorage storage, DType compute)
      : element_bytes_(storage == MasterStorage::split_16bit ? 2 : 1) {
    require_split_compute_type(compute);
    std::size_t at = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      blocks_.push_back({layout.block(l, rank).size(), at});
      at += round_up(blocks_.back().elements * element_bytes_);
    }
    // A rank with nothing still gets one unit: the tier refuses empty files.
    file_ = tier.create_file("optimizer.master.residuals", std::max(at, unit_bytes));
  }

  // Elements of a unit: where the store may cut its sub-groups.
  std::size_t unit_elements() const noexcept { return unit_bytes / element_bytes_; }

  // The compute copy's block of layer l (host memory), bound by the store's owner.
  void bind_compute_copy(std::function<SplitComputeBlock<>(std::size_t)> compute_copy) {
    compute_copy_ = std::move(compute_copy);
  }

  // Positions `part` of layer l's residuals into `into`, or from `from` (whole units).
  Work read(std::size_t l, Range part, std::span<std::byte> into) {
    return file_.read(offset(l, part), into.first(transfer_bytes(part)));
  }
  Work write(std::size_t l, Range part, std::span<const std::byte> from) {
    return file_.write(offset(l, part), from.first(transfer_bytes(part)));
  }

  // Writes zero residuals over every block, `buffer` (at least one unit, aligned) at a time.
  void write_zeros(std::span<std::byte> buffer) {
    const std::size_t chunk = buffer.size() / unit_bytes * unit_bytes;
    require(chunk > 0, "NvmeResiduals: the buffer for the initial residuals is under a unit");
    std::fill(buffer.begin(), buffer.end(), std::byte{0});
    for (std::size_t l = 0; l < blocks_.size(); ++l)
      for (std::size_t begin = 0; begin < blocks_[l].elements; begin += chunk / element_bytes_)
        write(l, {begin, std::min(blocks_[l].elements, begin + chunk / element_bytes_)}, buffer)
            .wait();
  }

  // f(SplitMasterView<T, R>) over `weights` (positions `part` of layer l's compute block, which
  // the step reads and writes) and the residuals of the part in `bytes`: the step's masters.
  template <SplitComputeType T, class F>
  void with_masters(View<T> weights, std::span<std::byte> bytes, F&& f) {
    with_residuals(bytes, weights.size(), [&]<class R>(View<R> residuals) {
      f(SplitMasterView<T, R>{weights, residuals});
    });
  }

  // The masters of positions `part` of layer l from the bound compute copy and the residuals in
  // `bytes`, into `into` (a checkpoint's save, the layer's weights).
  void reconstruct(std::size_t l, Range part, std::span<std::byte> bytes, View<float> into) {
    std::visit(
        [&]<class T>(View<T> weights) {
          with_residuals(bytes, part.size(), [&]<class R>(View<R> residuals) {
            reconstruct_masters(View<const T>(weights.subview(part.begin, part.size())),
                                View<const R>(residuals), into);
          });
        },
        bound(l));
  }
  // Masters `values` of positions `part` of layer l split into the bound compute copy and the
  // residuals in `bytes` (setting a layer, a checkpoint's load).
  void split(std::size_t l, Range part, View<const float> values, std::span<std::byte> bytes) {
    std::visit(
        [&]<class T>(View<T> weights) {
          with_residuals(bytes, part.size(), [&]<class R>(View<R> residuals) {
            split_masters(
                values, SplitMasterView<T, R>{weights.subview(part.begin, part.size()), residuals});
          });
        },
        bound(l));
  }

  std::size_t file_bytes() const noexcept { return file_.size(); }

 private:
  struct Block {
    std::size_t elements = 0; // this rank's block
    std::size_t offset = 0;   // in the file
  };

  static std::size_t round_up(std::size_t bytes) noexcept {
    return (bytes + unit_bytes - 1) / unit_bytes * unit_bytes;
  }
  std::size_t transfer_bytes(Range part) const noexcept {
    return round_up(part.size() * element_bytes_);
  }
  std::size_t offset(std::size_t l, Range part) const {
    const Block& block = blocks_.at(l);
    require(part.end <= block.elements && (part.begin * element_bytes_) % unit_bytes == 0,
            "NvmeResiduals: positions [" + std::to_string(part.begin) + ", " +
                std::to_string(part.end) + ") of layer " + std::to_string(l) +
                " do not start on a unit or lie outside the block of " +
                std::to_string(block.elements));
    return block.offset + part.begin * element_bytes_;
  }
  template <class F>
  void with_residuals(std::span<std::byte> bytes, std::size_t n, F&& f) {
    if (element_bytes_ == 2)
      f(View<std::int16_t>(reinterpret_cast<std::int16_t*>(bytes.data()), n));
    else
      f(View<std::int8_t>(reinterpret_cast<std::int8_t*>(bytes.data()), n));
  }
  SplitComputeBlock<> bound(std::size_t l) const {
    require(static_cast<bool>(compute_copy_),
            "NvmeResiduals: no compute copy is bound to split the masters over");
    return compute_copy_(l);
  }

  std::size_t element_bytes_;
  std::vector<Block> blocks_;
  SwapFile file_;
  std::function<SplitComputeBlock<>(std::size_t)> compute_copy_;
};

} // namespace zero
