#pragma once
// The file operations of a checkpoint, with errors that name the path and the system's reason: a
// file handle, durable small files and directories (state files: state_file.hpp).

#include "zero/checkpoint/manifest.hpp"
#include "zero/core/directory_handle.hpp"
#include "zero/core/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace zero::checkpoint {

[[noreturn]] inline void fail_io(const std::string& what, const std::filesystem::path& path,
                                 int error = errno) {
  fail(ErrorKind::io,
       "checkpoint: " + what + " " + path.string() + ": " + ::zero::detail::system_text(error));
}

// An open file descriptor, closed on destruction.
class FileHandle {
 public:
  // The largest request one system call makes: measured on this project's virtual disks, O_DIRECT
  // requests of 1-2 MiB stream 20-30% faster than 8-32 MiB ones (bench/checkpoint).
  static constexpr std::size_t request_bytes = std::size_t(2) << 20;

  FileHandle() = default;
  // Opens a file to read. Writers name the file's directory (below), so that no file is created or
  // written through a path another user could have replaced with a link.
  explicit FileHandle(const std::filesystem::path& path)
      : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), path_(path) {
    if (fd_ < 0) fail_io("cannot open", path);
  }
  // The file `name` in `dir`, never through a link; with O_CREAT, a new file (O_EXCL).
  FileHandle(const DirectoryHandle& dir, const std::string& name, int flags, mode_t mode = 0644)
      : fd_(dir.open_file(name, flags, mode)), path_(dir / name) {
    if (fd_ < 0) fail_io(flags & O_CREAT ? "cannot create" : "cannot open", path_);
  }
  // Takes over an open descriptor.
  FileHandle(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  // A new file `name` in `dir`, with O_DIRECT where the file system takes it (not tmpfs, say),
  // else buffered: `direct` says which. O_DIRECT moves the bytes between the disk and the caller's
  // aligned buffers without the page cache's copy (and its write throttling).
  static FileHandle maybe_direct(const DirectoryHandle& dir, const std::string& name, int flags,
                                 bool& direct) {
    const int fd = dir.open_file(name, flags | O_DIRECT, 0644);
    if (fd >= 0) {
      direct = true;
      return FileHandle(fd, dir / name);
    }
    if (errno != EINVAL) fail_io(flags & O_CREAT ? "cannot create" : "cannot open", dir / name);
    if (flags & O_CREAT) dir.remove_file(name); // O_DIRECT refused after the file was made
    direct = false;
    return FileHandle(dir, name, flags);
  }
  // A file to read, with O_DIRECT where the file system takes it.
  static FileHandle maybe_direct(const std::filesystem::path& path, bool& direct) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    direct = fd >= 0;
    if (fd >= 0) return FileHandle(fd, path);
    if (errno != EINVAL) fail_io("cannot open", path);
    return FileHandle(path);
  }
  FileHandle(FileHandle&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}
  FileHandle& operator=(FileHandle&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
      path_ = std::move(o.path_);
    }
    return *this;
  }
  ~FileHandle() { reset(); }
  int fd() const noexcept { return fd_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  std::size_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail_io("cannot stat", path_);
    return static_cast<std::size_t>(st.st_size);
  }
  void sync() const {
    if (::fsync(fd_) != 0) fail_io("cannot flush (fsync)", path_);
  }
  void write_all(const void* data, std::size_t bytes, std::size_t offset) const {
    const auto* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::pwrite(fd_, p, std::min(bytes, request_bytes), off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail_io("cannot write", path_, n < 0 ? errno : ENOSPC);
      p += n;
      bytes -= std::size_t(n);
      offset += std::size_t(n);
    }
  }
  // Reads up to `bytes`, fewer only at the end of the file; returns how many.
  std::size_t read_some(void* data, std::size_t bytes, std::size_t offset) const {
    auto* p = static_cast<char*>(data);
    std::size_t done = 0;
    while (done < bytes) {
      const ssize_t n =
          ::pread(fd_, p + done, std::min(bytes - done, request_bytes), off_t(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_io("cannot read", path_);
      if (n == 0) break;
      done += std::size_t(n);
    }
    return done;
  }
  void truncate(std::size_t bytes) const {
    if (::ftruncate(fd_, off_t(bytes)) != 0) fail_io("cannot set the size of", path_);
  }
  // Reads exactly `bytes`; a short file is an error naming it as truncated.
  void read_all(void* data, std::size_t bytes, std::size_t offset) const {
    auto* p = static_cast<char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::pread(fd_, p, std::min(bytes, request_bytes), off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_io("cannot read", path_);
      if (n == 0)
        fail(ErrorKind::io, "checkpoint: " + path_.string() + " is truncated (it ends at byte " +
                                std::to_string(offset) + ")");
      p += n;
      bytes -= std::size_t(n);
      offset += std::size_t(n);
    }
  }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::filesystem::path path_;
};

inline std::uint64_t checksum(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}

// DirectoryHandle::write_file_atomically (whole, under a temporary name, renamed), described for a
// manifest. The directory is synced by the caller.
inline OtherFile write_small_file(const DirectoryHandle& dir, const std::string& name,
                                  std::span<const std::byte> bytes) {
  dir.write_file_atomically(name, std::span<const std::span<const std::byte>>(&bytes, 1));
  return {name, bytes.size(), checksum(bytes.data(), bytes.size())};
}

// The file `entry` describes in `dir`, checked against its size and checksum.
inline std::vector<std::byte> read_small_file(const std::filesystem::path& dir,
                                              const OtherFile& entry) {
  const auto path = dir / entry.name;
  const FileHandle f(path);
  // The size first: the manifest's number is allocated only once the file is known to hold it.
  require(f.size() == entry.bytes,
          "checkpoint: " + path.string() + " has " + std::to_string(f.size()) +
              " bytes, the manifest says " + std::to_string(entry.bytes),
          ErrorKind::io);
  std::vector<std::byte> bytes(entry.bytes);
  f.read_all(bytes.data(), bytes.size(), 0);
  require(checksum(bytes.data(), bytes.size()) == entry.xxh3,
          "checkpoint: " + path.string() + " is corrupt: its checksum does not match the manifest",
          ErrorKind::io);
  return bytes;
}

} // namespace zero::checkpoint
