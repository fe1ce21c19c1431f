#pragma once
// The file operations of a checkpoint, with errors that name the path and the system's reason:
//   - StateFileWriter appends records to a new file, checksumming each chunk as it goes, and makes
//     the file durable (fsync) before it is described in a manifest;
//   - VerifiedReader reads byte ranges of a saved file, checking every chunk it touches against
//     the manifest, so a flipped bit or a truncated file is an error and never a silent load;
//   - write_small_file and sync_directory make renames durable.

#include "zero/checkpoint/manifest.hpp"
#include "zero/core/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace zero::checkpoint {

[[noreturn]] inline void fail_io(const std::string& what, const std::filesystem::path& path,
                                 int error = errno) {
  fail(ErrorKind::io, "checkpoint: " + what + " " + path.string() + ": " + std::strerror(error));
}

// An open file descriptor, closed on destruction.
class FileHandle {
 public:
  FileHandle() = default;
  FileHandle(const std::filesystem::path& path, int flags, mode_t mode = 0644)
      : fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)), path_(path) {
    if (fd_ < 0) fail_io(flags & O_CREAT ? "cannot create" : "cannot open", path);
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
      const ssize_t n = ::pwrite(fd_, p, std::min<std::size_t>(bytes, 1u << 30), off_t(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail_io("cannot write", path_, n < 0 ? errno : ENOSPC);
      p += n;
      bytes -= std::size_t(n);
      offset += std::size_t(n);
    }
  }
  // Reads exactly `bytes`; a short file is an error naming it as truncated.
  void read_all(void* data, std::size_t bytes, std::size_t offset) const {
    auto* p = static_cast<char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::pread(fd_, p, std::min<std::size_t>(bytes, 1u << 30), off_t(offset));
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

// fsync of a directory: what makes the names created or renamed in it durable.
inline void sync_directory(const std::filesystem::path& dir) {
  FileHandle(dir, O_RDONLY | O_DIRECTORY).sync();
}

inline std::uint64_t checksum(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}

// Writes `bytes` to path through a temporary name, fsyncs it and renames it over path: readers
// see the old file or the new one, never a part. The directory is synced by the caller.
inline OtherFile write_small_file(const std::filesystem::path& path,
                                  std::span<const std::byte> bytes) {
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  {
    FileHandle f(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    f.write_all(bytes.data(), bytes.size(), 0);
    f.sync();
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail_io("cannot rename to", path);
  return {path.filename().string(), bytes.size(), checksum(bytes.data(), bytes.size())};
}

// A new state file written front to back, one record at a time.
class StateFileWriter {
 public:
  StateFileWriter(const std::filesystem::path& path, std::size_t chunk_bytes = default_chunk_bytes)
      : file_(path, O_WRONLY | O_CREAT | O_EXCL), chunk_bytes_(chunk_bytes),
        whole_(XXH3_createState()), chunk_(XXH3_createState()) {
    require(whole_ && chunk_, "checkpoint: out of memory for a checksum state", ErrorKind::io);
    XXH3_64bits_reset(whole_.get());
    XXH3_64bits_reset(chunk_.get());
    entry_.name = path.filename().string();
    entry_.chunk_bytes = chunk_bytes;
  }

  // Appends `values` as tensor `tensor` at shard positions [shard_begin, +values.size()).
  void append(std::size_t tensor, std::size_t shard_begin, std::span<const float> values) {
    if (values.empty()) return;
    entry_.records.push_back({tensor, shard_begin, values.size(), entry_.bytes});
    const auto* bytes = reinterpret_cast<const std::byte*>(values.data());
    std::size_t left = values.size_bytes();
    while (left > 0) {
      // Up to the end of the current chunk, so every chunk's checksum covers exactly its bytes.
      const std::size_t n = std::min(left, chunk_bytes_ - in_chunk_);
      XXH3_64bits_update(chunk_.get(), bytes, n);
      XXH3_64bits_update(whole_.get(), bytes, n);
      file_.write_all(bytes, n, entry_.bytes);
      entry_.bytes += n;
      in_chunk_ += n;
      bytes += n;
      left -= n;
      if (in_chunk_ == chunk_bytes_) close_chunk();
    }
  }

  // Durable, and described: the entry a manifest lists (the caller adds the pieces).
  StateFile finish() {
    if (in_chunk_ > 0) close_chunk();
    entry_.xxh3 = XXH3_64bits_digest(whole_.get());
    file_.sync();
    return std::move(entry_);
  }

 private:
  struct FreeState {
    void operator()(XXH3_state_t* s) const noexcept { XXH3_freeState(s); }
  };
  void close_chunk() {
    entry_.chunks.push_back(XXH3_64bits_digest(chunk_.get()));
    XXH3_64bits_reset(chunk_.get());
    in_chunk_ = 0;
  }

  FileHandle file_;
  std::size_t chunk_bytes_;
  std::unique_ptr<XXH3_state_t, FreeState> whole_, chunk_;
  std::size_t in_chunk_ = 0;
  StateFile entry_;
};

// Byte ranges of one saved state file, every chunk they touch read whole and checked.
class VerifiedReader {
 public:
  VerifiedReader(const std::filesystem::path& dir, const StateFile& entry)
      : entry_(&entry), file_(open_checked(dir / entry.name, entry)) {}

  const std::filesystem::path& path() const noexcept { return file_.path(); }

  // Reads the whole chunks covering [begin, end) into the window, checking each.
  void load(std::size_t begin, std::size_t end) {
    const std::size_t c = entry_->chunk_bytes;
    window_begin_ = begin / c * c;
    window_end_ = std::min(entry_->bytes, (end + c - 1) / c * c);
    window_.resize(window_end_ - window_begin_);
    file_.read_all(window_.data(), window_.size(), window_begin_);
    for (std::size_t at = window_begin_; at < window_end_; at += c) {
      const std::size_t n = std::min(c, window_end_ - at);
      if (checksum(window_.data() + (at - window_begin_), n) != entry_->chunks[at / c])
        fail(ErrorKind::io, "checkpoint: " + path().string() +
                                " is corrupt: the checksum of bytes [" + std::to_string(at) + ", " +
                                std::to_string(at + n) + ") does not match the manifest");
    }
  }
  // Frees the window (a reader of many files keeps few windows).
  void release() {
    window_ = {};
    window_begin_ = window_end_ = 0;
  }
  bool holds(std::size_t begin, std::size_t end) const noexcept {
    return begin >= window_begin_ && end <= window_end_;
  }
  const std::byte* at(std::size_t offset) const noexcept {
    return window_.data() + (offset - window_begin_);
  }

  // Reads the whole file through the window and checks its checksum too (inspect, consolidate).
  void verify_all(std::size_t window_bytes) {
    XXH3_state_t* s = XXH3_createState();
    XXH3_64bits_reset(s);
    for (std::size_t at = 0; at < entry_->bytes; at += window_bytes) {
      load(at, std::min(entry_->bytes, at + window_bytes));
      XXH3_64bits_update(s, window_.data(), window_end_ - window_begin_);
    }
    const auto whole = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    if (whole != entry_->xxh3)
      fail(ErrorKind::io, "checkpoint: " + path().string() +
                              " is corrupt: its checksum does not match the manifest");
  }

 private:
  static FileHandle open_checked(const std::filesystem::path& path, const StateFile& entry) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      fail(ErrorKind::io,
           "checkpoint: the state file " + path.string() + " is missing (the manifest lists it)");
    FileHandle f(path, O_RDONLY);
    const std::size_t size = f.size();
    if (size < entry.bytes)
      fail(ErrorKind::io, "checkpoint: " + path.string() +
                              " is truncated: " + std::to_string(size) +
                              " bytes, the manifest says " + std::to_string(entry.bytes));
    if (size > entry.bytes)
      fail(ErrorKind::io, "checkpoint: " + path.string() + " has " + std::to_string(size) +
                              " bytes, the manifest says " + std::to_string(entry.bytes));
    return f;
  }

  const StateFile* entry_;
  FileHandle file_;
  std::vector<std::byte> window_;
  std::size_t window_begin_ = 0, window_end_ = 0;
};

} // namespace zero::checkpoint
