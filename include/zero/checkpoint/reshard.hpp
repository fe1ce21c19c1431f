#pragma once
// StateReader: reads the saved optimizer states into any layout, at any world size. A loading rank
// asks for positions of its own block of a layer (in its new layout); the reader maps each to the
// parameter element it holds, finds where the saving rank kept that element and which file record
// holds it, and reads only those bytes (whole checksummed chunks around them, through a window of
// bounded size). Memory: the caller's buffer plus one window per open file.

#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/checkpoint/state_file.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zero::checkpoint {

class StateReader {
 public:
  // Reads are widened to whole chunks around what is asked, and grouped into windows of up to
  // window_bytes / 2 (plus a chunk at each end). A file's reader keeps its window and the next one
  // read ahead, and at most four files keep them: memory stays under 4 x 2 x 34 MiB.
  static constexpr std::size_t window_bytes = std::size_t(64) << 20;

  StateReader(std::filesystem::path dir, const Manifest& manifest)
      : dir_(std::move(dir)), manifest_(manifest), readers_(manifest.files.size()),
        pieces_(manifest.parameters.size()), records_(manifest.files.size()) {
    for (std::size_t f = 0; f < manifest.files.size(); ++f) {
      for (const Piece& p : manifest.files[f].pieces)
        pieces_[p.parameter].push_back({p.parameter_offset, p.length, f, p.shard_offset});
      records_[f].resize(manifest.tensors());
      for (const Record& r : manifest.files[f].records) {
        require(r.tensor < manifest.tensors(),
                "checkpoint: " + manifest.files[f].name + " has a record of tensor " +
                    std::to_string(r.tensor) + ", the optimizer has " +
                    std::to_string(manifest.tensors()),
                ErrorKind::io);
        records_[f][r.tensor].push_back(r);
      }
      for (auto& list : records_[f])
        std::sort(list.begin(), list.end(),
                  [](const Record& a, const Record& b) { return a.shard_begin < b.shard_begin; });
    }
    // Every file there and of the size the manifest says, before anything is read.
    for (const StateFile& f : manifest.files) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(dir_ / f.name, ec);
      if (ec)
        fail(ErrorKind::io, "checkpoint: the state file " + (dir_ / f.name).string() +
                                " is missing (the manifest lists it)");
      if (size != f.bytes)
        fail(ErrorKind::io, "checkpoint: " + (dir_ / f.name).string() +
                                (size < f.bytes ? " is truncated: " : " has the wrong size: ") +
                                std::to_string(size) + " bytes, the manifest says " +
                                std::to_string(f.bytes));
    }
    // Every element of every parameter exactly once, or the checkpoint is incomplete.
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      auto& list = pieces_[p];
      std::sort(list.begin(), list.end(),
                [](const SavedPiece& a, const SavedPiece& b) { return a.begin < b.begin; });
      std::size_t next = 0;
      for (const SavedPiece& s : list) {
        if (s.begin != next) break;
        next += s.length;
      }
      if (next != manifest.parameters[p].numel)
        fail(ErrorKind::io, "checkpoint: " + dir_.string() + " does not hold every element of " +
                                manifest.parameters[p].name +
                                " (a state file or its pieces are "
                                "missing from the manifest)");
    }
  }

  // Fills `into` with tensor `tensor` at positions [part.begin, part.end) of rank `rank`'s block of
  // layer `layer` in `layout` (which must describe the saved parameters). Padding becomes zero.
  void fill(std::size_t tensor, const ShardLayout& layout, int rank, std::size_t layer, Range part,
            float* into) {
    std::fill_n(into, part.size(), 0.0f);
    const Range block = layout.block(layer, rank);
    const std::size_t low = block.begin + part.begin, high = block.begin + part.end;
    std::vector<Read> reads;
    const auto segments = layout.rank_segments(rank);
    auto it = std::upper_bound(segments.begin(), segments.end(), low,
                               [](std::size_t o, const Segment& s) { return o < s.shard_offset; });
    if (it != segments.begin()) --it;
    for (; it != segments.end() && it->shard_offset < high; ++it) {
      const std::size_t from = std::max(low, it->shard_offset);
      const std::size_t to = std::min(high, it->shard_offset + it->length);
      if (from >= to) continue;
      const std::size_t first = it->parameter_offset + (from - it->shard_offset);
      add_reads(tensor, it->parameter, first, first + (to - from), into + (from - low), reads);
    }
    perform(reads);
  }

  // Bytes read from the files so far.
  std::size_t bytes_read() const noexcept { return bytes_read_; }

  // Elements [elements.begin, elements.end) of parameter p, tensor t (consolidation, tests).
  void read_parameter(std::size_t tensor, std::size_t p, Range elements, float* into) {
    require(p < pieces_.size() && elements.end <= manifest_.parameters[p].numel &&
                elements.begin <= elements.end,
            "checkpoint: no such parameter range");
    std::vector<Read> reads;
    add_reads(tensor, p, elements.begin, elements.end, into, reads);
    perform(reads);
  }

 private:
  struct SavedPiece {
    std::size_t begin, length, file, shard_offset;
  };
  struct Read {
    std::size_t file, offset, bytes;
    float* into;
  };

  // Reads of parameter p's elements [first, last) of tensor t, to `into`.
  void add_reads(std::size_t t, std::size_t p, std::size_t first, std::size_t last, float* into,
                 std::vector<Read>& reads) const {
    const auto& list = pieces_[p];
    auto it = std::upper_bound(list.begin(), list.end(), first,
                               [](std::size_t o, const SavedPiece& s) { return o < s.begin; });
    for (--it; it != list.end() && it->begin < last; ++it) {
      const std::size_t u = std::max(first, it->begin), v = std::min(last, it->begin + it->length);
      if (u >= v) continue;
      std::size_t shard = it->shard_offset + (u - it->begin);
      std::size_t left = v - u;
      float* out = into + (u - first);
      const auto& recs = records_[it->file][t];
      while (left > 0) {
        auto r = std::upper_bound(recs.begin(), recs.end(), shard,
                                  [](std::size_t o, const Record& x) { return o < x.shard_begin; });
        if (r == recs.begin() || shard >= (r - 1)->shard_begin + (r - 1)->count)
          fail(ErrorKind::io, "checkpoint: " + manifest_.files[it->file].name +
                                  " has no record of " + tensor_name(t) + " at shard position " +
                                  std::to_string(shard) + " (parameter " +
                                  manifest_.parameters[p].name + ")");
        --r;
        const std::size_t n = std::min(left, r->shard_begin + r->count - shard);
        reads.push_back({it->file, r->file_offset + (shard - r->shard_begin) * sizeof(float),
                         n * sizeof(float), out});
        shard += n;
        out += n;
        left -= n;
      }
    }
  }

  void perform(std::vector<Read>& reads) {
    // Large reads in window-sized parts, then in file order, so that neighbours share a window.
    std::vector<Read> parts;
    const std::size_t most = window_bytes / 2;
    for (const Read& r : reads)
      for (std::size_t done = 0; done < r.bytes; done += most)
        parts.push_back({r.file, r.offset + done, std::min(most, r.bytes - done),
                         r.into + done / sizeof(float)});
    std::sort(parts.begin(), parts.end(), [](const Read& a, const Read& b) {
      return a.file != b.file ? a.file < b.file : a.offset < b.offset;
    });
    for (std::size_t i = 0; i < parts.size();) {
      VerifiedReader& reader = open(parts[i].file);
      const std::size_t chunk = manifest_.files[parts[i].file].chunk_bytes;
      const std::size_t begin = parts[i].offset;
      std::size_t end = begin + parts[i].bytes, j = i + 1;
      while (j < parts.size() && parts[j].file == parts[i].file && parts[j].offset <= end + chunk &&
             parts[j].offset + parts[j].bytes - begin <= most) {
        end = std::max(end, parts[j].offset + parts[j].bytes);
        ++j;
      }
      if (!reader.holds(begin, end)) bytes_read_ += reader.load(begin, end);
      for (; i < j; ++i)
        std::memcpy(parts[i].into, reader.at(parts[i].offset), parts[i].bytes);
    }
  }

  // The reader of file f; at most `windows_kept` files keep their window, so memory stays bounded
  // however many files the checkpoint has.
  VerifiedReader& open(std::size_t f) {
    if (!readers_[f]) readers_[f] = std::make_unique<VerifiedReader>(dir_, manifest_.files[f]);
    std::erase(recent_, f);
    recent_.insert(recent_.begin(), f);
    if (recent_.size() > windows_kept) {
      readers_[recent_.back()]->release();
      recent_.pop_back();
    }
    return *readers_[f];
  }
  std::string tensor_name(std::size_t t) const {
    return t == 0 ? std::string("the master weights") : manifest_.optimizer_states.at(t - 1);
  }

  std::filesystem::path dir_;
  const Manifest& manifest_;
  static constexpr std::size_t windows_kept = 4;
  std::vector<std::unique_ptr<VerifiedReader>> readers_;
  std::vector<std::size_t> recent_; // files with a window, most recent first
  std::size_t bytes_read_ = 0;
  std::vector<std::vector<SavedPiece>> pieces_;
  std::vector<std::vector<std::vector<Record>>> records_; // [file][tensor]
};

} // namespace zero::checkpoint
