#pragma once
// The open file behind a SwapFile: created and preallocated in full, so that a disk too small is
// reported when the engine is built rather than in the middle of a step, then reopened with
// O_DIRECT where the tier uses it. Shared by the SwapFile and its transfers in flight, so that the
// descriptor outlives every request that uses it; the last owner closes it and removes the file
// unless the tier already did.

#include "zero/core/directory_handle.hpp"
#include "zero/core/error.hpp"
#include "zero/nvme/detail/checksums.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

namespace zero::detail {

class SwapFileState {
 public:
  // `directory` is the swap directory holding the file `name`: kept open, so that removing the
  // file goes through it and never through a path that could have changed.
  SwapFileState(std::shared_ptr<const DirectoryHandle> directory, std::string name, int fd,
                std::size_t size, bool verify_checksums)
      : directory_(std::move(directory)), name_(std::move(name)), path_(*directory_ / name_),
        fd_(fd), size_(size) {
    if (verify_checksums) checksums_.emplace(size);
  }
  SwapFileState(const SwapFileState&) = delete;
  SwapFileState& operator=(const SwapFileState&) = delete;
  ~SwapFileState() {
    ::close(fd_);
    remove();
  }

  const std::filesystem::path& path() const noexcept { return path_; }
  int fd() const noexcept { return fd_; }
  std::size_t size() const noexcept { return size_; }
  ChecksumTable* checksums() noexcept { return checksums_ ? &*checksums_ : nullptr; }

  // The tier removes its files when it ends; a SwapFile that outlives it must not remove a file
  // of the same name that a later tier created.
  void remove() noexcept {
    if (!removed_.exchange(true)) ::unlinkat(directory_->fd(), name_.c_str(), 0);
  }

 private:
  std::shared_ptr<const DirectoryHandle> directory_;
  std::string name_;
  std::filesystem::path path_;
  int fd_;
  std::size_t size_;
  std::optional<ChecksumTable> checksums_;
  std::atomic<bool> removed_{false};
};

inline std::size_t free_bytes(const DirectoryHandle& directory) {
  struct statvfs info {};
  if (::fstatvfs(directory.fd(), &info) != 0) return 0;
  return static_cast<std::size_t>(info.f_bavail) * info.f_frsize;
}

// Creates the file `name` (which must not exist: O_EXCL, and never through a link) in `directory`
// with `bytes` allocated on disk.
inline std::shared_ptr<SwapFileState>
create_swap_file(const std::shared_ptr<const DirectoryHandle>& directory, const std::string& name,
                 std::size_t bytes, bool direct_io, bool verify_checksums) {
  const std::filesystem::path path = *directory / name;
  // Allocation goes through a buffered descriptor: where the file system cannot fallocate, glibc's
  // posix_fallocate writes one byte per block, which O_DIRECT would refuse.
  const int created = directory->open_file(name, O_RDWR | O_CREAT, 0600);
  if (created < 0) {
    const int error = errno;
    fail(ErrorKind::io,
         "cannot create swap file " + path.string() + ": " + system_text(error) +
             (error == EEXIST ? " (each swap file of a tier needs its own name)" : ""));
  }
  const int error = ::posix_fallocate(created, 0, static_cast<off_t>(bytes));
  if (error != 0) {
    ::close(created);
    ::unlinkat(directory->fd(), name.c_str(), 0);
    if (error == ENOSPC || error == EDQUOT)
      fail(ErrorKind::io, "no space for swap file " + path.string() + ": it needs " +
                              std::to_string(bytes) + " bytes, the file system has " +
                              std::to_string(free_bytes(*directory)) + " free (" +
                              system_text(error) + ")");
    fail(ErrorKind::io, "cannot allocate " + std::to_string(bytes) + " bytes for swap file " +
                            path.string() + ": " + system_text(error));
  }
  if (!direct_io)
    return std::make_shared<SwapFileState>(directory, name, created, bytes, verify_checksums);
  const int direct = directory->open_file(name, O_RDWR | O_DIRECT);
  const int open_error = errno;
  ::close(created);
  if (direct < 0) {
    ::unlinkat(directory->fd(), name.c_str(), 0);
    fail(ErrorKind::io,
         "cannot open swap file " + path.string() + " for direct I/O: " + system_text(open_error));
  }
  return std::make_shared<SwapFileState>(directory, name, direct, bytes, verify_checksums);
}

} // namespace zero::detail
