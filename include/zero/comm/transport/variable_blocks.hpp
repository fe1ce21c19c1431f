#pragma once
// Pipelining blocks of different sizes, shared by the shared-memory and chunked-MPI transports.
// Every rank runs the same steps, one per `piece` of the largest block (the counts agree across
// ranks, so so does the number of steps); in each step a block moves what is left of it, clamped to
// the piece, possibly nothing. No block is padded to the largest.

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace zero::detail {

// Where each block begins when the blocks lie end to end in rank order.
inline std::vector<std::size_t> block_starts(std::span<const std::size_t> counts) {
  std::vector<std::size_t> starts(counts.size());
  std::size_t start = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    starts[r] = start;
    start += counts[r];
  }
  return starts;
}

inline std::size_t largest_block(std::span<const std::size_t> counts) noexcept {
  return counts.empty() ? 0 : *std::ranges::max_element(counts);
}

// Elements of a block of `count` that the step starting at `offset` moves.
constexpr std::size_t piece_of(std::size_t count, std::size_t offset, std::size_t piece) noexcept {
  return count > offset ? std::min(piece, count - offset) : 0;
}

} // namespace zero::detail
