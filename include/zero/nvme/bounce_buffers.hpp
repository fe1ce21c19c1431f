#pragma once
// BounceBuffers: a fixed set of equal buffers, aligned for O_DIRECT, through which tensors travel
// to and from their swap files: the NVMe tier's only resident memory, allocated once when the
// engine is built, and resident from then on: every page is touched at construction, so that the
// budget is taken (or refused) when the engine is built rather than page by page as transfers first
// reach each buffer, and the resident set does not depend on how many transfers were ever in flight
// at once. With pin_memory they are also locked in RAM (mlock), so that the kernel never pages them
// out under a transfer (and, with a GPU, so that copies to the device can be asynchronous); a
// memlock limit that refuses is reported rather than ignored.

#include "zero/core/error.hpp"
#include "zero/nvme/aio_options.hpp"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace zero {

class BounceBuffers {
 public:
  static constexpr std::size_t alignment = AioOptions::alignment;

  BounceBuffers() noexcept = default;
  // `bytes_each` must be a multiple of 4096. The memory is zero-filled.
  BounceBuffers(std::size_t count, std::size_t bytes_each, bool pin_memory)
      : count_(count), bytes_(bytes_each) {
    require(bytes_each % alignment == 0,
            "BounceBuffers: bytes_each must be a multiple of " + std::to_string(alignment) +
                " (the O_DIRECT alignment), got " + std::to_string(bytes_each));
    const std::size_t total = count * bytes_each;
    if (total == 0) return;
    data_ = map(total);
    touch_every_page(data_, total);
    if (pin_memory && ::mlock(data_, total) != 0) {
      const int error = errno;
      ::munmap(data_, total);
      data_ = nullptr;
      fail(ErrorKind::invalid_argument, refused_lock(total, error));
    }
    pinned_ = pin_memory;
  }

  BounceBuffers(BounceBuffers&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)),
        bytes_(std::exchange(other.bytes_, 0)), pinned_(std::exchange(other.pinned_, false)) {}
  BounceBuffers& operator=(BounceBuffers&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
      bytes_ = std::exchange(other.bytes_, 0);
      pinned_ = std::exchange(other.pinned_, false);
    }
    return *this;
  }
  BounceBuffers(const BounceBuffers&) = delete;
  BounceBuffers& operator=(const BounceBuffers&) = delete;
  ~BounceBuffers() { release(); }

  std::span<std::byte> operator[](std::size_t i) noexcept {
    ZERO_ASSERT(i < count_);
    return {data_ + i * bytes_, bytes_};
  }
  std::span<const std::byte> operator[](std::size_t i) const noexcept {
    ZERO_ASSERT(i < count_);
    return {data_ + i * bytes_, bytes_};
  }
  std::size_t count() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return bytes_; } // of each buffer
  bool pinned() const noexcept { return pinned_; }

 private:
  static constexpr std::size_t huge_page = std::size_t{2} << 20;

  // Anonymous memory, zero-filled on first touch and returned to the system at once when freed.
  // Large sets start on a 2 MiB boundary and ask for transparent huge pages: every request pins
  // its pages for the device, and a few huge pages cost far less to pin than many small ones.
  static std::byte* map(std::size_t total) {
    const bool huge = total >= huge_page;
    const std::size_t reserved = huge ? total + huge_page : total;
    void* p = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      fail(ErrorKind::invalid_argument,
           "out of host memory allocating " + std::to_string(total) + " bytes of bounce buffers");
    auto* start = static_cast<std::byte*>(p);
    if (!huge) return start;
    const auto address = reinterpret_cast<std::uintptr_t>(start);
    const std::size_t skip = (huge_page - address % huge_page) % huge_page;
    if (skip != 0)
      ::munmap(start, skip); // give back what precedes the boundary and follows the end
    ::munmap(start + skip + total, huge_page - skip);
#ifdef MADV_HUGEPAGE
    ::madvise(start + skip, total, MADV_HUGEPAGE);
#endif
    return start + skip;
  }

  // Writes a zero (what the page holds already) into each page: faulting the pages in now, after
  // the huge-page advice, so that they come as huge pages where the system grants them.
  static void touch_every_page(std::byte* start, std::size_t total) noexcept {
    constexpr std::size_t page = 4096;
    for (std::size_t offset = 0; offset < total; offset += page)
      *static_cast<volatile std::byte*>(start + offset) = std::byte{0};
  }

  static std::string refused_lock(std::size_t total, int error) {
    rlimit limit{};
    ::getrlimit(RLIMIT_MEMLOCK, &limit);
    const std::string allowed = limit.rlim_cur == RLIM_INFINITY
                                    ? std::string("unlimited")
                                    : std::to_string(limit.rlim_cur) + " bytes";
    return "pin_memory: cannot lock " + std::to_string(total) +
           " bytes of bounce buffers in RAM (mlock: " + ::zero::detail::system_text(error) +
           "); the memlock limit of this process is " + allowed +
           ". Raise it (ulimit -l, or LimitMEMLOCK / --ulimit memlock in a container) or set "
           "pin_memory to false";
  }

  void release() noexcept {
    if (data_ != nullptr) ::munmap(data_, count_ * bytes_); // also unlocks
    data_ = nullptr;
  }

  std::byte* data_ = nullptr;
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
  bool pinned_ = false;
};

} // namespace zero
