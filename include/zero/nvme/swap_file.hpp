#pragma once
// SwapFile: one preallocated region of disk for one tensor, made by NvmeTier::create_file.
// write() and read() only queue the transfer and return a Work at once; the tier's I/O threads
// carry it out while the caller computes, and the Work's wait() or test() rethrows what went wrong
// (Error with ErrorKind::io) — a failed write, a file that ends early, a checksum that does not
// match. Until then the buffer belongs to the transfer: do not touch it, and do not start a
// transfer that overlaps a write in flight (transfers in flight may complete in any order).
//
// Offsets, lengths and buffer addresses are multiples of SwapFile::alignment (O_DIRECT's rule);
// BounceBuffers are. A violation is reported at once, by the call.

#include "zero/core/error.hpp"
#include "zero/core/work.hpp"
#include "zero/nvme/aio_options.hpp"
#include "zero/nvme/detail/io_engine.hpp"
#include "zero/nvme/detail/swap_file_state.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace zero {

class NvmeTier;

class SwapFile {
 public:
  static constexpr std::size_t alignment = AioOptions::alignment;

  SwapFile() noexcept = default; // no file; a moved-from SwapFile is one too
  SwapFile(SwapFile&&) noexcept = default;
  SwapFile& operator=(SwapFile&&) noexcept = default;
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;
  // Removes the file, once no transfer uses it any more.
  ~SwapFile() = default;

  // Writes `data` at byte `offset` of the file; with verify_checksums, records its checksums.
  Work write(std::size_t offset, std::span<const std::byte> data) {
    check("write", offset, data.data(), data.size());
    return engine_->submit(detail::IoDirection::write, state_, offset,
                           const_cast<std::byte*>(data.data()), data.size());
  }

  // Reads into `into` from byte `offset`; with verify_checksums, checks it on completion.
  Work read(std::size_t offset, std::span<std::byte> into) {
    check("read", offset, into.data(), into.size());
    return engine_->submit(detail::IoDirection::read, state_, offset, into.data(), into.size());
  }

  std::size_t size() const noexcept { return state_ ? state_->size() : 0; }
  const std::filesystem::path& path() const {
    require(state_ != nullptr, "SwapFile: this handle has no file (default-made or moved from)");
    return state_->path();
  }
  explicit operator bool() const noexcept { return state_ != nullptr; }

 private:
  friend class NvmeTier;
  SwapFile(std::shared_ptr<detail::SwapFileState> state, std::shared_ptr<detail::IoEngine> engine)
      : state_(std::move(state)), engine_(std::move(engine)) {}

  void check(const char* what, std::size_t offset, const std::byte* address,
             std::size_t length) const {
    const std::string name = path().string(); // also refuses an empty handle
    auto aligned = [](std::size_t value) { return value % alignment == 0; };
    if (!aligned(offset) || !aligned(length) ||
        !aligned(static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(address))))
      fail(ErrorKind::invalid_argument,
           std::string("SwapFile::") + what + " of " + name + ": the offset (" +
               std::to_string(offset) + "), the length (" + std::to_string(length) +
               ") and the buffer's address must be multiples of " + std::to_string(alignment) +
               " (O_DIRECT's rule; BounceBuffers are aligned)");
    if (offset > state_->size() || length > state_->size() - offset)
      fail(ErrorKind::invalid_argument,
           std::string("SwapFile::") + what + " of " + name + ": bytes [" + std::to_string(offset) +
               ", " + std::to_string(offset + length) + ") are beyond its size, " +
               std::to_string(state_->size()));
  }

  std::shared_ptr<detail::SwapFileState> state_;
  std::shared_ptr<detail::IoEngine> engine_;
};

} // namespace zero
