#pragma once
// StateSave: one rank's part of a save, its state file, written now or by a background thread from
// a snapshot. Either way, the outcome waits in it until join(): a failure is kept as an exception
// there (the engine then agrees on it over all ranks, so that a writer that failed on one rank is
// an error on every rank at the next join, never a hang).

#include "zero/checkpoint/directory.hpp"
#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/checkpoint/state_file.hpp"
#include "zero/core/view.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/shard/shard_layout.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace zero::checkpoint {

class StateSave {
 public:
  // A rank that saves nothing (a replica of another rank's shard).
  StateSave() = default;

  // Writes `store`'s states (read_states) to DIR/.TAG.partial now. 8-bit moments are written as
  // the store keeps them (codes and scales), where it hands them out so.
  template <class Store>
  static StateSave now(const std::shared_ptr<const DirectoryHandle>& partial, Store& store) {
    StateSave save;
    try {
      StateFileWriter writer(*partial, state_file_name(store.kept_rank()));
      failure_point("writer", store.kept_rank());
      store.read_states([&](std::size_t t, std::size_t l, Range part, const auto& values) {
        const std::size_t begin = store.kept_layout().block(l, store.kept_rank()).begin;
        writer.append(t, begin + part.begin, as_record(values));
      });
      StateFile file = writer.finish();
      file.pieces = pieces_of(store.kept_layout(), store.kept_rank());
      write_description(*partial, file);
    } catch (...) {
      *save.error_ = std::current_exception();
    }
    return save;
  }

  // Where a background save copies the states: kept from one save to the next, so that only the
  // first one pays for fresh pages.
  class Snapshot;

  // Makes `snapshot` big enough for `store`'s states (unless a save still writes from it).
  template <class Store>
  static void reserve(Store& store, std::shared_ptr<Snapshot>& snapshot) {
    std::size_t total = 0;
    // A store that counts its bytes is asked: reading its states may read the values, which a
    // delayed update may be writing now.
    if constexpr (requires { store.state_record_bytes(); })
      total = store.state_record_bytes();
    else
      store.read_states([&](std::size_t, std::size_t, Range, const auto& values) {
        total += record_bytes(values);
      });
    if (!snapshot || snapshot.use_count() > 1 || snapshot->capacity < total)
      snapshot = std::make_shared<Snapshot>(total);
  }

  // Copies `store`'s states into `snapshot` (made or grown as needed) now, and writes them from a
  // thread.
  template <class Store>
  static StateSave in_background(const std::shared_ptr<const DirectoryHandle>& partial,
                                 Store& store, std::shared_ptr<Snapshot>& snapshot) {
    StateSave save;
    try {
      reserve(store, snapshot);
      snapshot->items.clear();
      std::size_t at = 0;
      store.read_states([&](std::size_t t, std::size_t l, Range part, const auto& values) {
        const std::size_t begin = store.kept_layout().block(l, store.kept_rank()).begin;
        const std::size_t bytes = record_bytes(values);
        require(at + bytes <= snapshot->capacity,
                "checkpoint: internal error: the states outgrew their snapshot");
        snapshot->items.push_back({t, begin + part.begin, at, values.size(), encoding(values)});
        copy_record(values, snapshot->bytes() + at);
        at += bytes;
      });
      const int rank = store.kept_rank();
      std::vector<Piece> pieces = pieces_of(store.kept_layout(), rank);
      save.thread_ = std::thread([error = save.error_, partial, rank, snapshot,
                                  pieces = std::move(pieces)]() mutable {
        try {
          StateFileWriter writer(*partial, state_file_name(rank));
          failure_point("writer", rank);
          for (const Item& item : snapshot->items)
            writer.append(item.tensor, item.shard_begin, item.count, item.encoding,
                          std::span<const std::byte>(snapshot->bytes() + item.at,
                                                     Record::bytes_of(item.encoding, item.count)));
          StateFile file = writer.finish();
          file.pieces = std::move(pieces);
          write_description(*partial, file);
        } catch (...) {
          *error = std::current_exception();
        }
      });
    } catch (...) {
      *save.error_ = std::current_exception();
    }
    return save;
  }

  StateSave(StateSave&&) noexcept = default;
  StateSave& operator=(StateSave&&) = delete;
  ~StateSave() {
    if (thread_.joinable()) thread_.join();
  }

  // Waits for the writer; rethrows what failed.
  void join() {
    if (thread_.joinable()) thread_.join();
    if (*error_) std::rethrow_exception(std::exchange(*error_, nullptr));
  }

 private:
  struct Item {
    std::size_t tensor, shard_begin, at, count; // at: the first byte in the snapshot
    RecordEncoding encoding;
  };

  // A store hands out fp32 values or an 8-bit moment's codes and scales (QuantizedMomentView).
  static std::span<const float> as_record(View<const float> values) noexcept {
    return {values.data(), values.size()};
  }
  static const QuantizedMomentView& as_record(const QuantizedMomentView& moment) noexcept {
    return moment;
  }
  static RecordEncoding encoding(View<const float>) noexcept { return RecordEncoding::fp32; }
  static RecordEncoding encoding(const QuantizedMomentView& moment) noexcept {
    return encoding_of(*moment.map);
  }
  template <class Values>
  static std::size_t record_bytes(const Values& values) noexcept {
    return Record::bytes_of(encoding(values), values.size());
  }
  static void copy_record(View<const float> values, std::byte* into) noexcept {
    std::memcpy(into, values.data(), values.size() * sizeof(float));
  }
  static void copy_record(const QuantizedMomentView& moment, std::byte* into) noexcept {
    std::memcpy(into, moment.codes.data(), moment.codes.size());
    std::memcpy(into + moment.codes.size(), moment.scales.data(),
                moment.scales.size() * sizeof(float));
  }

 public:
  class Snapshot {
   public:
    // Anonymous memory populated at once (MAP_POPULATE): the first save touches every page of it
    // while training waits, and one populating call costs less than a fault per page. (Huge-page
    // advice made it slower here: the kernel compacts memory to find them.)
    explicit Snapshot(std::size_t bytes)
        : capacity(bytes), bytes_(std::max<std::size_t>(bytes, 1)) {
      void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      if (p == MAP_FAILED)
        fail(ErrorKind::io, "checkpoint: cannot allocate a snapshot of " + std::to_string(bytes_) +
                                " bytes for an asynchronous save");
      data_ = static_cast<std::byte*>(p);
    }
    Snapshot(const Snapshot&) = delete;
    Snapshot& operator=(const Snapshot&) = delete;
    ~Snapshot() { ::munmap(data_, bytes_); }
    std::byte* bytes() const noexcept { return data_; }

    std::size_t capacity; // bytes
    std::vector<Item> items;

   private:
    std::size_t bytes_;
    std::byte* data_ = nullptr;
  };

 private:
  static std::vector<Piece> pieces_of(const ShardLayout& layout, int rank) {
    std::vector<Piece> pieces;
    for (const Segment& s : layout.rank_segments(rank))
      pieces.push_back({s.parameter, s.parameter_offset, s.length, s.shard_offset});
    return pieces;
  }
  // The state file's manifest entry, beside it, for rank 0 to collect.
  static void write_description(const DirectoryHandle& partial, const StateFile& file) {
    const std::string text = to_json(file).dump();
    write_small_file(partial, file.name + ".json", std::as_bytes(std::span<const char>(text)));
  }

  std::thread thread_;
  // Shared with the writer thread, which outlives moves of this object.
  std::shared_ptr<std::exception_ptr> error_ = std::make_shared<std::exception_ptr>();
};

} // namespace zero::checkpoint
