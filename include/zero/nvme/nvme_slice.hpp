#pragma once
// NvmeSlice<T>: one rank's slice of a ShardedTensor kept on the NVMe tier (a policy
// Sharded<P, zero::nvme>). The slice is one swap file in which every layer's block starts at an
// aligned offset, so that a layer's block, or a part of it that starts at a multiple of
// unit_elements, moves in one transfer of whole units:
//
//   ShardedTensor<float, Sharded<FlatContiguous, nvme>> master(comm, layout, {.space = {&tier,
//   "master"}}); master.write(l, {0, n}, bounce).wait();     // layer l's block, from a
//   BounceBuffers buffer
//
// Transfers round a part's length up to whole units at the end of a block (the file keeps that
// room), so the buffer must hold the rounded length and be aligned, as BounceBuffers are. The file
// starts out unwritten: write every block before reading it (the tier's checksums refuse reads of
// what was never written).

#include "zero/core/error.hpp"
#include "zero/core/nvme.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"
#include "zero/nvme/nvme_tier.hpp"
#include "zero/nvme/swap_file.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace zero {

template <class T>
class NvmeSlice {
 public:
  static constexpr std::size_t unit_bytes = SwapFile::alignment;
  static_assert(unit_bytes % sizeof(T) == 0, "zero: NVMe slices hold elements that tile a unit");
  static constexpr std::size_t unit_elements = unit_bytes / sizeof(T);

  NvmeSlice(const nvme& place, const ShardLayout& layout, int slice)
      : layer_offset_(layout.layer_count() + 1, 0), block_size_(layout.layer_count(), 0) {
    require(place.tier != nullptr,
            "NvmeSlice: the nvme place has no tier (zero::nvme{.tier = &tier, .name = ...})");
    std::size_t at = 0;
    for (std::size_t l = 0; l < layout.layer_count(); ++l) {
      layer_offset_[l] = at;
      block_size_[l] = layout.block(l, slice).size();
      at += round_up(block_size_[l] * sizeof(T));
    }
    layer_offset_.back() = at;
    // A slice with nothing on this rank still gets one unit: the tier refuses empty files.
    file_ = place.tier->create_file(place.name, at == 0 ? unit_bytes : at);
  }

  NvmeSlice(NvmeSlice&&) noexcept = default;
  NvmeSlice& operator=(NvmeSlice&&) noexcept = default;

  // Positions `part` of layer l's block into `into` (its first part.size() elements).
  Work read(std::size_t l, Range part, View<T> into) const {
    const auto [offset, bytes] = extent(l, part, into.size(), "read");
    return file_.read(offset, std::as_writable_bytes(std::span<T>(into.data(), bytes / sizeof(T))));
  }
  // The first part.size() elements of `from` to positions `part` of layer l's block.
  Work write(std::size_t l, Range part, View<const T> from) {
    const auto [offset, bytes] = extent(l, part, from.size(), "write");
    return file_.write(offset, std::as_bytes(std::span<const T>(from.data(), bytes / sizeof(T))));
  }

  std::size_t file_bytes() const noexcept { return file_.size(); }
  const std::filesystem::path& path() const { return file_.path(); }
  // Elements a buffer needs to move `part` of layer l (its size, rounded up at the block's end).
  static std::size_t transfer_elements(Range part) noexcept {
    return round_up(part.size() * sizeof(T)) / sizeof(T);
  }

 private:
  static std::size_t round_up(std::size_t bytes) noexcept {
    return (bytes + unit_bytes - 1) / unit_bytes * unit_bytes;
  }

  struct Extent {
    std::size_t offset, bytes;
  };
  Extent extent(std::size_t l, Range part, std::size_t buffer, const char* op) const {
    const std::size_t bytes = round_up(part.size() * sizeof(T));
    if (part.begin % unit_elements != 0 ||
        (part.end != block_size_.at(l) && part.end % unit_elements != 0))
      fail(ErrorKind::invalid_argument,
           std::string("NvmeSlice::") + op + " of " + file_.path().string() + ": positions [" +
               std::to_string(part.begin) + ", " + std::to_string(part.end) + ") of layer " +
               std::to_string(l) + " do not start and end on " + std::to_string(unit_elements) +
               "-element units (or at the end of the block)");
    if (buffer * sizeof(T) < bytes)
      fail(ErrorKind::invalid_argument,
           std::string("NvmeSlice::") + op + " of " + file_.path().string() + ": a buffer of " +
               std::to_string(buffer) + " elements cannot hold the " + std::to_string(bytes) +
               " bytes the transfer moves (whole units)");
    return {layer_offset_[l] + part.begin * sizeof(T), bytes};
  }

  mutable SwapFile file_; // reads do not change the tensor, but they do queue work on the file
  std::vector<std::size_t> layer_offset_;
  std::vector<std::size_t> block_size_;
};

} // namespace zero
