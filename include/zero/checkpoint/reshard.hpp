#pragma once
// StateReader: reads the saved optimizer states into any layout, at any world size. A loading rank
// asks for positions of its own block of a layer (in its new layout); the reader maps each to the
// parameter element it holds, finds where the saving rank kept that element and which file record
// holds it, and reads only those bytes (whole checksummed chunks around them, through a window of
// bounded size). Memory: the caller's buffer plus one window per open file.
//
// 8-bit records (a moment saved as its codes and block scales) are read the same way, the codes
// and the scales of the blocks they fall in, and handed out dequantized (map[code] x scale, as the
// store computes them): an 8-bit store that loads them requantizes them into the same codes and
// scales (requantize), any other store takes the fp32 values.

#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/checkpoint/state_file.hpp"
#include "zero/optim/dynamic_map.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
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
    const Range block = layout.block(layer, rank);
    const std::size_t low = block.begin + part.begin, high = block.begin + part.end;
    Batch reads;
    const auto segments = layout.rank_segments(rank);
    auto it = std::upper_bound(segments.begin(), segments.end(), low,
                               [](std::size_t o, const Segment& s) { return o < s.shard_offset; });
    if (it != segments.begin()) --it;
    std::size_t covered = low; // positions before it are read or zeroed
    for (; it != segments.end() && it->shard_offset < high; ++it) {
      const std::size_t from = std::max(low, it->shard_offset);
      const std::size_t to = std::min(high, it->shard_offset + it->length);
      if (from >= to) continue;
      std::fill(into + (covered - low), into + (from - low), 0.0f); // padding
      const std::size_t first = it->parameter_offset + (from - it->shard_offset);
      add_reads(tensor, it->parameter, first, first + (to - from), into + (from - low), reads);
      covered = to;
    }
    std::fill(into + (covered - low), into + part.size(), 0.0f);
    perform(reads);
  }

  // Bytes read from the files so far.
  std::size_t bytes_read() const noexcept { return bytes_read_; }

  // Elements [elements.begin, elements.end) of parameter p, tensor t (consolidation, tests).
  void read_parameter(std::size_t tensor, std::size_t p, Range elements, float* into) {
    require(p < pieces_.size() && elements.end <= manifest_.parameters[p].numel &&
                elements.begin <= elements.end,
            "checkpoint: no such parameter range");
    Batch reads;
    add_reads(tensor, p, elements.begin, elements.end, into, reads);
    perform(reads);
  }

 private:
  struct SavedPiece {
    std::size_t begin, length, file, shard_offset;
  };
  struct Read {
    std::size_t file, offset, bytes;
    std::byte* into;
  };
  // `count` values of an 8-bit record into `into`: their codes, and the scales of the blocks
  // they fall in, the first value `first_in_block` values into the first of those blocks.
  struct Decode {
    const DynamicMap* map;
    std::size_t first_in_block, count;
    std::vector<std::uint8_t> codes;
    std::vector<float> scales;
    float* into;
  };
  struct Batch {
    std::vector<Read> reads;
    std::vector<Decode> decodes; // their buffers are the reads' targets: kept until performed
  };

  // Reads of parameter p's elements [first, last) of tensor t, to `into`.
  void add_reads(std::size_t t, std::size_t p, std::size_t first, std::size_t last, float* into,
                 Batch& batch) const {
    if (first >= last) return; // nothing to read (a parameter of no elements has no pieces)
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
        const std::size_t at = shard - r->shard_begin; // the first value's place in the record
        if (r->encoding == RecordEncoding::fp32) {
          batch.reads.push_back({it->file, r->file_offset + at * sizeof(float), n * sizeof(float),
                                 reinterpret_cast<std::byte*>(out)});
        } else {
          const std::size_t first_block = at / quantized_moment_block;
          const std::size_t blocks = (at + n - 1) / quantized_moment_block - first_block + 1;
          Decode& d = batch.decodes.emplace_back(
              Decode{&map_of(r->encoding), at % quantized_moment_block, n,
                     std::vector<std::uint8_t>(n), std::vector<float>(blocks), out});
          // The vectors' storage stays where it is when `decodes` grows (a move keeps it).
          batch.reads.push_back(
              {it->file, r->file_offset + at, n, reinterpret_cast<std::byte*>(d.codes.data())});
          batch.reads.push_back({it->file, r->file_offset + r->count + first_block * sizeof(float),
                                 blocks * sizeof(float),
                                 reinterpret_cast<std::byte*>(d.scales.data())});
        }
        shard += n;
        out += n;
        left -= n;
      }
    }
  }

  // The reads in file order, each served from its file's window; where the window ends first, the
  // next one starts exactly there (whole chunks), so front-to-back reading finds it read ahead.
  void perform(Batch& batch) {
    std::vector<Read>& reads = batch.reads;
    std::sort(reads.begin(), reads.end(), [](const Read& a, const Read& b) {
      return a.file != b.file ? a.file < b.file : a.offset < b.offset;
    });
    const std::size_t most = window_bytes / 2;
    for (std::size_t i = 0; i < reads.size(); ++i) {
      VerifiedReader& reader = open(reads[i].file);
      const std::size_t chunk = manifest_.files[reads[i].file].chunk_bytes;
      std::size_t offset = reads[i].offset, left = reads[i].bytes;
      std::byte* out = reads[i].into;
      while (left > 0) {
        if (!reader.holds(offset, offset + 1)) {
          // A new window: this read's rest and the reads close behind it, at most `most` bytes.
          std::size_t end = offset + std::min(left, most);
          for (std::size_t j = i + 1;
               j < reads.size() && reads[j].file == reads[i].file &&
               reads[j].offset <= end + chunk && reads[j].offset + reads[j].bytes - offset <= most;
               ++j)
            end = std::max(end, reads[j].offset + reads[j].bytes);
          bytes_read_ += reader.load(offset, end);
        }
        const std::size_t n = std::min(left, reader.window_end() - offset);
        std::memcpy(out, reader.at(offset), n);
        offset += n;
        out += n;
        left -= n;
      }
    }
    for (const Decode& d : batch.decodes)
      for (std::size_t done = 0, b = 0; done < d.count; ++b) {
        const std::size_t in_block = b == 0 ? d.first_in_block : 0;
        const std::size_t n = std::min(d.count - done, quantized_moment_block - in_block);
        dequantize_block(*d.map, d.codes.data() + done, d.scales[b], n, d.into + done);
        done += n;
      }
  }

  // The reader of file f; at most `windows_kept` files keep their window, so memory stays bounded
  // however many files the checkpoint has.
  VerifiedReader& open(std::size_t f) {
    if (!readers_[f])
      readers_[f] = std::make_unique<VerifiedReader>(dir_, manifest_.files[f], window_bytes / 2);
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
