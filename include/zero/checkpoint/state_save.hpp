#pragma once
// StateSave: one rank's part of a save, its state file, written now or by a background thread from
// a snapshot. Either way, the outcome waits in it until join(): a failure is kept as an exception
// there (the engine then agrees on it over all ranks, so that a writer that failed on one rank is
// an error on every rank at the next join, never a hang).

#include "zero/checkpoint/directory.hpp"
#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/core/view.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
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

  // Writes `store`'s states (read_states) to DIR/.TAG.partial now.
  template <class Store>
  static StateSave now(const std::filesystem::path& partial, Store& store) {
    StateSave save;
    try {
      StateFileWriter writer(partial / state_file_name(store.kept_rank()));
      failure_point("writer", store.kept_rank());
      store.read_states([&](std::size_t t, std::size_t l, Range part, View<const float> values) {
        const std::size_t begin = store.kept_layout().block(l, store.kept_rank()).begin;
        writer.append(t, begin + part.begin, std::span<const float>(values.data(), values.size()));
      });
      describe(partial, writer.finish(), store.kept_layout(), store.kept_rank());
    } catch (...) {
      *save.error_ = std::current_exception();
    }
    return save;
  }

  // Copies `store`'s states into host memory now, and writes them from a thread.
  template <class Store>
  static StateSave in_background(const std::filesystem::path& partial, Store& store) {
    StateSave save;
    try {
      auto snapshot = std::make_shared<Snapshot>();
      store.read_states([&](std::size_t t, std::size_t l, Range part, View<const float> values) {
        const std::size_t begin = store.kept_layout().block(l, store.kept_rank()).begin;
        snapshot->items.push_back({t, begin + part.begin, snapshot->values.size(), values.size()});
        snapshot->values.insert(snapshot->values.end(), values.begin(), values.end());
      });
      const int rank = store.kept_rank();
      std::vector<Piece> pieces = pieces_of(store.kept_layout(), rank);
      save.thread_ = std::thread([error = save.error_, partial, rank, snapshot,
                                  pieces = std::move(pieces)]() mutable {
        try {
          StateFileWriter writer(partial / state_file_name(rank));
          failure_point("writer", rank);
          for (const Item& item : snapshot->items)
            writer.append(item.tensor, item.shard_begin,
                          std::span<const float>(snapshot->values.data() + item.at, item.count));
          StateFile file = writer.finish();
          file.pieces = std::move(pieces);
          write_description(partial, file);
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
    std::size_t tensor, shard_begin, at, count;
  };
  struct Snapshot {
    std::vector<Item> items;
    std::vector<float> values;
  };

  static std::vector<Piece> pieces_of(const ShardLayout& layout, int rank) {
    std::vector<Piece> pieces;
    for (const Segment& s : layout.rank_segments(rank))
      pieces.push_back({s.parameter, s.parameter_offset, s.length, s.shard_offset});
    return pieces;
  }
  static void describe(const std::filesystem::path& partial, StateFile file,
                       const ShardLayout& layout, int rank) {
    file.pieces = pieces_of(layout, rank);
    write_description(partial, file);
  }
  // The state file's manifest entry, beside it, for rank 0 to collect.
  static void write_description(const std::filesystem::path& partial, const StateFile& file) {
    const std::string text = to_json(file).dump();
    write_small_file(partial / (file.name + ".json"), std::as_bytes(std::span<const char>(text)));
  }

  std::thread thread_;
  // Shared with the writer thread, which outlives moves of this object.
  std::shared_ptr<std::exception_ptr> error_ = std::make_shared<std::exception_ptr>();
};

} // namespace zero::checkpoint
