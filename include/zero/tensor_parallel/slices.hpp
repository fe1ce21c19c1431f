#pragma once
// Which part of a whole tensor each rank of a tensor-parallel group holds, and the copies between
// the two: slicing a whole tensor (initial weights from one file) and joining the slices back
// (consolidated weights). Tensors are row-major [rows, cols], weights as torch.nn.Linear's
// [out, in]; a vector is a matrix of one column.
//   - by rows: a column-parallel layer's weight and bias (each rank computes some outputs), a
//     vocabulary-parallel embedding (each rank holds some tokens' rows);
//   - by columns: a row-parallel layer's weight (each rank reads some inputs);
//   - per head of a fused projection: attention's query|key|value weight [3 C, C] is three blocks
//     of C rows, head h in rows h * C / H onwards of each. Cutting it by thirds would give rank 0
//     all the queries; each rank needs whole heads, so each takes its 1/T of the rows of every
//     block, and its slice is again query|key|value, for its H / T heads.

#include "zero/core/error.hpp"
#include "zero/shard/parameter.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zero {

// Slice `rank` of `size`.
struct TensorSlice {
  int rank = 0;
  int size = 1;
};

// n / size, refused (naming `what`) where size does not divide n.
inline std::size_t slice_extent(std::size_t n, int size, std::string_view what) {
  require(size >= 1 && n % std::size_t(size) == 0,
          std::string(what) + " (" + std::to_string(n) + ") does not divide into " +
              std::to_string(size) + " tensor-parallel slices",
          ErrorKind::invalid_argument);
  return n / std::size_t(size);
}

// n rounded up to a multiple of size: a vocabulary padded so that every rank holds as many rows.
constexpr std::size_t padded_to_multiple(std::size_t n, int size) noexcept {
  const std::size_t s = std::size_t(size);
  return (n + s - 1) / s * s;
}

// The positions [begin, end) of slice `slice` of n (which it divides).
inline Range slice_range(std::size_t n, TensorSlice slice, std::string_view what) {
  const std::size_t extent = slice_extent(n, slice.size, what);
  return {std::size_t(slice.rank) * extent, std::size_t(slice.rank + 1) * extent};
}

namespace detail {
inline void require_whole(std::span<const float> whole, std::size_t rows, std::size_t cols,
                          std::string_view what) {
  require(whole.size() == rows * cols,
          std::string(what) + ": " + std::to_string(whole.size()) + " elements, not " +
              std::to_string(rows) + " x " + std::to_string(cols),
          ErrorKind::invalid_argument);
}
} // namespace detail

// Rows [rank * rows / size, ...) of a [rows, cols] tensor.
inline std::vector<float> slice_rows(std::span<const float> whole, std::size_t rows,
                                     std::size_t cols, TensorSlice slice, std::string_view what) {
  detail::require_whole(whole, rows, cols, what);
  const Range mine = slice_range(rows, slice, what);
  return {whole.begin() + std::ptrdiff_t(mine.begin * cols),
          whole.begin() + std::ptrdiff_t(mine.end * cols)};
}

// Columns [rank * cols / size, ...) of a [rows, cols] tensor.
inline std::vector<float> slice_columns(std::span<const float> whole, std::size_t rows,
                                        std::size_t cols, TensorSlice slice,
                                        std::string_view what) {
  detail::require_whole(whole, rows, cols, what);
  const Range mine = slice_range(cols, slice, what);
  std::vector<float> out;
  out.reserve(rows * mine.size());
  for (std::size_t r = 0; r < rows; ++r)
    out.insert(out.end(), whole.begin() + std::ptrdiff_t(r * cols + mine.begin),
               whole.begin() + std::ptrdiff_t(r * cols + mine.end));
  return out;
}

// A fused projection of `blocks` blocks of `block_rows` rows each ([blocks * block_rows, cols]):
// the same rows of every block, the blocks kept in order.
inline std::vector<float> slice_fused_rows(std::span<const float> whole, std::size_t blocks,
                                           std::size_t block_rows, std::size_t cols,
                                           TensorSlice slice, std::string_view what) {
  detail::require_whole(whole, blocks * block_rows, cols, what);
  const Range mine = slice_range(block_rows, slice, what);
  std::vector<float> out;
  out.reserve(blocks * mine.size() * cols);
  for (std::size_t b = 0; b < blocks; ++b)
    out.insert(out.end(), whole.begin() + std::ptrdiff_t((b * block_rows + mine.begin) * cols),
               whole.begin() + std::ptrdiff_t((b * block_rows + mine.end) * cols));
  return out;
}

// The whole tensor from every rank's slice, in rank order: the inverses of the three above.
// `slices[r]` is rank r's.
inline std::vector<float> join_rows(std::span<const std::vector<float>> slices,
                                    std::size_t slice_rows, std::size_t cols,
                                    std::string_view what) {
  std::vector<float> out;
  out.reserve(slices.size() * slice_rows * cols);
  for (const std::vector<float>& s : slices) {
    detail::require_whole(s, slice_rows, cols, what);
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

inline std::vector<float> join_columns(std::span<const std::vector<float>> slices, std::size_t rows,
                                       std::size_t slice_cols, std::string_view what) {
  for (const std::vector<float>& s : slices)
    detail::require_whole(s, rows, slice_cols, what);
  std::vector<float> out;
  out.reserve(rows * slice_cols * slices.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (const std::vector<float>& s : slices)
      out.insert(out.end(), s.begin() + std::ptrdiff_t(r * slice_cols),
                 s.begin() + std::ptrdiff_t((r + 1) * slice_cols));
  return out;
}

inline std::vector<float> join_fused_rows(std::span<const std::vector<float>> slices,
                                          std::size_t blocks, std::size_t slice_block_rows,
                                          std::size_t cols, std::string_view what) {
  for (const std::vector<float>& s : slices)
    detail::require_whole(s, blocks * slice_block_rows, cols, what);
  const std::size_t run = slice_block_rows * cols; // one rank's rows of one block
  std::vector<float> out;
  out.reserve(blocks * run * slices.size());
  for (std::size_t b = 0; b < blocks; ++b)
    for (const std::vector<float>& s : slices)
      out.insert(out.end(), s.begin() + std::ptrdiff_t(b * run),
                 s.begin() + std::ptrdiff_t((b + 1) * run));
  return out;
}

// The whole tensor's shape from a slice's (`slice_shape`; empty: one dimension of `numel`) and how
// `size` slices join (ParameterSpec::tensor_parallel_split).
inline std::vector<std::size_t> whole_shape(std::vector<std::size_t> slice_shape, std::size_t numel,
                                            const TensorParallelSplit& split, int size,
                                            std::string_view what) {
  if (slice_shape.empty()) slice_shape = {numel};
  require(split.dimension < slice_shape.size() && split.blocks >= 1 &&
              slice_shape[split.dimension] % split.blocks == 0,
          std::string(what) + ": a slice of shape [" + std::to_string(slice_shape.size()) +
              " dimensions] does not split along dimension " + std::to_string(split.dimension) +
              " in " + std::to_string(split.blocks) + " blocks",
          ErrorKind::invalid_argument);
  const std::size_t total = slice_shape[split.dimension] * std::size_t(size);
  require(split.whole_extent <= total,
          std::string(what) + ": the whole tensor's extent " + std::to_string(split.whole_extent) +
              " exceeds its " + std::to_string(size) + " slices' " + std::to_string(total),
          ErrorKind::invalid_argument);
  require(split.whole_extent == 0 || split.blocks == 1,
          std::string(what) + ": padding is cut from one block only", ErrorKind::invalid_argument);
  slice_shape[split.dimension] = split.whole_extent ? split.whole_extent : total;
  return slice_shape;
}

// The whole tensor from every rank's slice of it (`slices[r]` rank r's, each of `slice_shape`),
// joined as `split` says; the inverse of cutting it that way (padding dropped).
inline std::vector<float> join_split(std::span<const std::vector<float>> slices,
                                     const std::vector<std::size_t>& slice_shape,
                                     const TensorParallelSplit& split, std::string_view what) {
  const std::size_t numel = slices.empty() ? 0 : slices[0].size();
  std::vector<std::size_t> shape = slice_shape.empty() ? std::vector{numel} : slice_shape;
  const std::vector<std::size_t> whole = whole_shape(shape, numel, split, int(slices.size()), what);
  std::size_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < shape.size(); ++d)
    (d < split.dimension ? outer : inner) *= d == split.dimension ? 1 : shape[d];
  for (const std::vector<float>& s : slices)
    require(s.size() == numel, std::string(what) + ": the slices differ in size",
            ErrorKind::invalid_argument);
  const std::size_t run = shape[split.dimension] / split.blocks * inner; // one block of one rank
  std::vector<float> out;
  out.reserve(numel * slices.size());
  for (std::size_t o = 0; o < outer; ++o) {
    const std::size_t begin = out.size();
    for (std::size_t b = 0; b < split.blocks; ++b)
      for (const std::vector<float>& s : slices) {
        const auto at = s.begin() + std::ptrdiff_t((o * split.blocks + b) * run);
        out.insert(out.end(), at, at + std::ptrdiff_t(run));
      }
    out.resize(begin + whole[split.dimension] * inner); // the padding at the end, dropped
  }
  return out;
}

} // namespace zero
