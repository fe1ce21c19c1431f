#pragma once
// State files, at the disk's speed:
//   - StateFileWriter appends records to a new file, checksumming each chunk as it goes. It copies
//     them into aligned staging buffers that a second thread writes with O_DIRECT while the next
//     one fills, and makes the file durable (fsync) before it is described in a manifest.
//   - VerifiedReader reads byte ranges of a saved file, checking every chunk it touches against
//     the manifest (a flipped bit or a truncated file is an error, never a silent load). It reads
//     whole chunks with O_DIRECT into a window, and the next window ahead while the caller copies
//     out of this one.
// Where the file system refuses O_DIRECT (tmpfs), the same code runs buffered.

#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/core/error.hpp"
#include "zero/optim/quantized_moments.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace zero::checkpoint {

// A 4096-byte-aligned buffer, not initialised (what O_DIRECT transfers need).
class AlignedBuffer {
 public:
  static constexpr std::size_t alignment = 4096;
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes)
      : data_(static_cast<std::byte*>(std::aligned_alloc(alignment, round_up(bytes)))),
        size_(round_up(bytes)) {
    if (!data_)
      fail(ErrorKind::io, "checkpoint: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  static std::size_t round_up(std::size_t bytes) {
    return (bytes + alignment - 1) / alignment * alignment;
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
};

// A new state file written front to back, one record at a time.
class StateFileWriter {
 public:
  static constexpr std::size_t staging_bytes = std::size_t(8) << 20;

  // Creates the file `name` in `dir` (a new file, never through a link).
  StateFileWriter(const DirectoryHandle& dir, const std::string& name,
                  std::size_t chunk_bytes = default_chunk_bytes)
      : file_(FileHandle::maybe_direct(dir, name, O_WRONLY | O_CREAT, direct_)),
        chunk_bytes_(chunk_bytes), whole_(XXH3_createState()),
        chunk_(XXH3_createState()), staging_{AlignedBuffer(staging_bytes),
                                             AlignedBuffer(staging_bytes)} {
    require(whole_ && chunk_, "checkpoint: out of memory for a checksum state", ErrorKind::io);
    XXH3_64bits_reset(whole_.get());
    XXH3_64bits_reset(chunk_.get());
    entry_.name = name;
    entry_.chunk_bytes = chunk_bytes;
  }
  StateFileWriter(const StateFileWriter&) = delete;
  StateFileWriter& operator=(const StateFileWriter&) = delete;
  ~StateFileWriter() {
    if (writing_.valid()) writing_.wait();
  }

  // Appends `values` as tensor `tensor` at shard positions [shard_begin, +values.size()).
  void append(std::size_t tensor, std::size_t shard_begin, std::span<const float> values) {
    if (values.empty()) return;
    begin_record(tensor, shard_begin, values.size(), RecordEncoding::fp32);
    append_bytes(std::as_bytes(values));
  }
  // Appends an 8-bit moment as it is kept: its codes, then its block scales.
  void append(std::size_t tensor, std::size_t shard_begin, const QuantizedMomentView& moment) {
    if (moment.size() == 0) return;
    require(moment.scales.size() == quantized_blocks(moment.size()),
            "checkpoint: an 8-bit moment of " + std::to_string(moment.size()) + " codes has " +
                std::to_string(moment.scales.size()) + " block scales");
    begin_record(tensor, shard_begin, moment.size(), encoding_of(*moment.map));
    append_bytes(std::as_bytes(std::span(moment.codes.data(), moment.codes.size())));
    append_bytes(std::as_bytes(std::span(moment.scales.data(), moment.scales.size())));
  }
  // Appends a record's bytes as another writer would have (a background save's snapshot of
  // them): `bytes` holds Record::bytes_of(encoding, count).
  void append(std::size_t tensor, std::size_t shard_begin, std::size_t count,
              RecordEncoding encoding, std::span<const std::byte> bytes) {
    if (count == 0) return;
    require(bytes.size() == Record::bytes_of(encoding, count),
            "checkpoint: a record of " + std::to_string(count) + " values has " +
                std::to_string(bytes.size()) + " bytes");
    begin_record(tensor, shard_begin, count, encoding);
    append_bytes(bytes);
  }

  // Durable, and described: the entry a manifest lists (the caller adds the pieces).
  StateFile finish() {
    if (in_chunk_ > 0) close_chunk();
    // The last piece padded to whole blocks (O_DIRECT writes no less), then cut back.
    const std::size_t tail = AlignedBuffer::round_up(filled_);
    std::memset(staging_[current_].data() + filled_, 0, tail - filled_);
    if (tail > 0) hand_over(tail);
    wait_for_write();
    file_.truncate(entry_.bytes);
    entry_.xxh3 = XXH3_64bits_digest(whole_.get());
    file_.sync();
    return std::move(entry_);
  }

 private:
  struct FreeState {
    void operator()(XXH3_state_t* s) const noexcept { XXH3_freeState(s); }
  };
  void begin_record(std::size_t tensor, std::size_t shard_begin, std::size_t count,
                    RecordEncoding encoding) {
    entry_.records.push_back({tensor, shard_begin, count, entry_.bytes, encoding});
  }
  void append_bytes(std::span<const std::byte> data) {
    const std::byte* bytes = data.data();
    std::size_t left = data.size();
    while (left > 0) {
      // Up to the end of the current chunk (so every chunk's checksum covers exactly its bytes)
      // and of the staging buffer.
      const std::size_t n = std::min({left, chunk_bytes_ - in_chunk_, staging_bytes - filled_});
      XXH3_64bits_update(chunk_.get(), bytes, n);
      XXH3_64bits_update(whole_.get(), bytes, n);
      std::memcpy(staging_[current_].data() + filled_, bytes, n);
      filled_ += n;
      entry_.bytes += n;
      in_chunk_ += n;
      bytes += n;
      left -= n;
      if (in_chunk_ == chunk_bytes_) close_chunk();
      if (filled_ == staging_bytes) hand_over(staging_bytes);
    }
  }
  void close_chunk() {
    entry_.chunks.push_back(XXH3_64bits_digest(chunk_.get()));
    XXH3_64bits_reset(chunk_.get());
    in_chunk_ = 0;
  }
  // The current staging buffer goes to the writing thread; the other one (once written) fills.
  void hand_over(std::size_t bytes) {
    wait_for_write();
    const std::byte* data = staging_[current_].data();
    const std::size_t offset = written_;
    writing_ = std::async(std::launch::async,
                          [this, data, bytes, offset] { file_.write_all(data, bytes, offset); });
    written_ += bytes;
    current_ ^= 1;
    filled_ = 0;
  }
  void wait_for_write() {
    if (writing_.valid()) writing_.get(); // rethrows the write's error
  }

  bool direct_ = false;
  FileHandle file_;
  std::size_t chunk_bytes_;
  std::unique_ptr<XXH3_state_t, FreeState> whole_, chunk_;
  std::size_t in_chunk_ = 0;
  AlignedBuffer staging_[2];
  std::size_t current_ = 0, filled_ = 0, written_ = 0;
  std::future<void> writing_;
  StateFile entry_;
};

// Byte ranges of one saved state file, every chunk they touch read whole and checked.
class VerifiedReader {
 public:
  // Reads ahead `ahead_bytes` (rounded to whole chunks): a load() of at most that much that starts
  // where the previous one ended finds its bytes already read.
  VerifiedReader(const std::filesystem::path& dir, const StateFile& entry,
                 std::size_t ahead_bytes = std::size_t(34) << 20)
      : entry_(&entry), file_(open_checked(dir / entry.name, entry, direct_)),
        ahead_bytes_((ahead_bytes + entry.chunk_bytes - 1) / entry.chunk_bytes *
                     entry.chunk_bytes) {}
  VerifiedReader(const VerifiedReader&) = delete;
  VerifiedReader& operator=(const VerifiedReader&) = delete;
  ~VerifiedReader() {
    if (ahead_.valid()) ahead_.wait();
  }

  const std::filesystem::path& path() const noexcept { return file_.path(); }

  // The whole chunks covering [begin, end) into the window, each checked; then, where reads go
  // front to back, the next ahead_bytes are read ahead. Returns the bytes read into the window.
  std::size_t load(std::size_t begin, std::size_t end) {
    const std::size_t c = entry_->chunk_bytes;
    const std::size_t from = begin / c * c;
    const std::size_t to = std::min(entry_->bytes, (end + c - 1) / c * c);
    const bool ahead_holds = ahead_.valid() && from >= ahead_begin_ && to <= ahead_end_;
    // Reading ahead pays where the reads go front to back; a sparse pattern (a rank taking its
    // share of another layout) would only read more.
    const bool sequential = ahead_holds || from == window_end_;
    if (ahead_.valid()) ahead_.get();
    if (ahead_holds) {
      std::swap(window_, spare_);
      window_begin_ = ahead_begin_, window_end_ = ahead_end_;
    } else {
      ensure(window_, to - from);
      read(window_, from, to);
      window_begin_ = from, window_end_ = to;
    }
    verify(window_begin_, window_end_);
    if (sequential && window_end_ < entry_->bytes) {
      ahead_begin_ = window_end_;
      ahead_end_ = std::min(entry_->bytes, window_end_ + ahead_bytes_);
      ensure(spare_, ahead_end_ - ahead_begin_);
      ahead_ = std::async(std::launch::async, [this] { read(spare_, ahead_begin_, ahead_end_); });
    }
    return window_end_ - window_begin_;
  }
  // Frees the windows (a reader of many files keeps few of them).
  void release() {
    if (ahead_.valid()) ahead_.wait();
    ahead_ = {};
    window_ = {};
    spare_ = {};
    window_begin_ = window_end_ = 0;
  }
  std::size_t window_end() const noexcept { return window_end_; }
  bool holds(std::size_t begin, std::size_t end) const noexcept {
    return begin >= window_begin_ && end <= window_end_;
  }
  const std::byte* at(std::size_t offset) const noexcept {
    return window_.data() + (offset - window_begin_);
  }

  // Reads the whole file, window after window (each read ahead), and checks its checksum too.
  void verify_all() {
    // Owned: load() throws at the first chunk that does not match.
    const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> s(XXH3_createState(),
                                                                     &XXH3_freeState);
    require(s != nullptr, "checkpoint: out of memory for a checksum state", ErrorKind::io);
    XXH3_64bits_reset(s.get());
    for (std::size_t at = 0; at < entry_->bytes; at += ahead_bytes_) {
      load(at, std::min(entry_->bytes, at + ahead_bytes_));
      XXH3_64bits_update(s.get(), window_.data(), window_end_ - window_begin_);
    }
    const auto whole = XXH3_64bits_digest(s.get());
    if (whole != entry_->xxh3)
      fail(ErrorKind::io, "checkpoint: " + path().string() +
                              " is corrupt: its checksum does not match the manifest");
  }

 private:
  static FileHandle open_checked(const std::filesystem::path& path, const StateFile& entry,
                                 bool& direct) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      fail(ErrorKind::io,
           "checkpoint: the state file " + path.string() + " is missing (the manifest lists it)");
    FileHandle f = FileHandle::maybe_direct(path, direct);
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
  static void ensure(AlignedBuffer& buffer, std::size_t bytes) {
    if (buffer.size() < bytes) buffer = AlignedBuffer(bytes);
  }
  // Bytes [from, to) of the file into `into`; O_DIRECT reads whole blocks, the last one may end
  // the file early.
  // Large windows are read as `streams` parts at once (8 measured best here, against 4 and 16): a
  // disk serves several requests in flight
  // faster than one after the other.
  void read(AlignedBuffer& into, std::size_t from, std::size_t to) const {
    const std::size_t asked = AlignedBuffer::round_up(to - from);
    ensure_capacity(into, asked);
    constexpr std::size_t streams = 8;
    const std::size_t part =
        AlignedBuffer::round_up(std::max(asked / streams, FileHandle::request_bytes));
    std::vector<std::future<std::size_t>> others;
    for (std::size_t at = part; at < asked; at += part)
      others.push_back(std::async(std::launch::async, [&, at] {
        return file_.read_some(into.data() + at, std::min(part, asked - at), from + at);
      }));
    std::size_t got = file_.read_some(into.data(), std::min(part, asked), from);
    for (std::size_t k = 0; k < others.size(); ++k) {
      const std::size_t n = others[k].get();
      // Parts after a short one read nothing: the file ends there.
      if (got == std::min(part, asked) * (k + 1)) got += n;
    }
    if (got < to - from)
      fail(ErrorKind::io, "checkpoint: " + path().string() + " is truncated (it ends at byte " +
                              std::to_string(from + got) + ")");
  }
  static void ensure_capacity(const AlignedBuffer& buffer, std::size_t bytes) {
    if (buffer.size() < bytes)
      fail(ErrorKind::io, "checkpoint: internal error: a read window is too small");
  }
  void verify(std::size_t from, std::size_t to) const {
    const std::size_t c = entry_->chunk_bytes;
    for (std::size_t at = from; at < to; at += c) {
      const std::size_t n = std::min(c, to - at);
      if (checksum(window_.data() + (at - from), n) != entry_->chunks[at / c])
        fail(ErrorKind::io, "checkpoint: " + path().string() +
                                " is corrupt: the checksum of bytes [" + std::to_string(at) + ", " +
                                std::to_string(at + n) + ") does not match the manifest");
    }
  }

  const StateFile* entry_;
  bool direct_ = false;
  FileHandle file_;
  AlignedBuffer window_, spare_;
  std::size_t window_begin_ = 0, window_end_ = 0;
  std::future<void> ahead_;
  std::size_t ahead_bytes_;
  std::size_t ahead_begin_ = 0, ahead_end_ = 0;
};

} // namespace zero::checkpoint
