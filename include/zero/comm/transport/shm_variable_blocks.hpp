#pragma once
// reduce_scatter and all_gather over blocks of different sizes on the shared-memory pipeline
// (ShmTransport, whose staging buffers and phases these use as a friend). Kept apart from the
// transport so that it stays readable.
//
// Every rank runs one phase per piece of the largest block, so phases pair up across ranks as in
// the equal-block calls, and the signature check of the first phase (which folds in the counts)
// stops ranks that disagree about them before any data is read. Each rank's piece is clamped to
// what is left of its own block. The reduction is the equal-block one: every element summed over
// the ranks in rank order by reduce_sources, so the bits match reduce_scatter and all_reduce.

#include "zero/comm/reduce_op.hpp"
#include "zero/comm/transport/host_reduce.hpp"
#include "zero/comm/transport/variable_blocks.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace zero::detail {

template <class Shm>
class ShmVariableBlocks {
 public:
  explicit ShmVariableBlocks(Shm& shm) noexcept : shm_(shm) {}

  // Staging holds one piece per rank: the pieces of the others' blocks that this rank publishes.
  template <class T>
  void reduce_scatter(const T* in, T* out, std::span<const std::size_t> counts, ReduceOp op) {
    const std::size_t ranks = counts.size();
    const std::size_t me = static_cast<std::size_t>(shm_.rank_);
    const std::size_t piece = std::max<std::size_t>(1, shm_.chunk_bytes_ / sizeof(T) / ranks);
    const std::vector<std::size_t> starts = block_starts(counts);
    std::vector<const T*> sources(ranks);
    for (std::size_t offset = 0; offset < largest_block(counts); offset += piece) {
      const int b = shm_.next_buffer();
      T* mine = shm_.template buffer<T>(shm_.rank_, b);
      for (std::size_t r = 0; r < ranks; ++r) {
        const std::size_t p = piece_of(counts[r], offset, piece);
        if (r != me && p != 0) Shm::copy(in + starts[r] + offset, mine + r * piece, p);
      }
      shm_.signal_and_wait();
      const std::size_t p = piece_of(counts[me], offset, piece);
      if (p == 0) continue;
      for (std::size_t r = 0; r < ranks; ++r)
        sources[r] = r == me ? in + starts[me] + offset
                             : shm_.template buffer<T>(static_cast<int>(r), b) + me * piece;
      // In place, `out + offset` is the source read for this rank's own contribution, element by
      // element before it is written; later phases read only further along.
      reduce_sources<T>(out + offset, sources, p, op, static_cast<int>(ranks));
    }
  }

  // Staging holds a piece of this rank's own block; everybody copies every rank's piece out.
  template <class T>
  void all_gather(const T* in, T* out, std::span<const std::size_t> counts) {
    const std::size_t ranks = counts.size();
    const std::size_t me = static_cast<std::size_t>(shm_.rank_);
    const std::size_t piece = shm_.chunk_bytes_ / sizeof(T);
    const std::vector<std::size_t> starts = block_starts(counts);
    for (std::size_t offset = 0; offset < largest_block(counts); offset += piece) {
      const int b = shm_.next_buffer();
      const std::size_t own = piece_of(counts[me], offset, piece);
      if (own != 0) Shm::copy(in + offset, shm_.template buffer<T>(shm_.rank_, b), own);
      shm_.signal_and_wait();
      for (std::size_t r = 0; r < ranks; ++r) {
        const std::size_t p = piece_of(counts[r], offset, piece);
        if (p == 0) continue;
        const T* from = r == me ? in + offset : shm_.template buffer<T>(static_cast<int>(r), b);
        shm_.copy_out(from, out + starts[r] + offset, p); // in place: a copy onto itself, skipped
      }
    }
  }

 private:
  Shm& shm_;
};

} // namespace zero::detail
