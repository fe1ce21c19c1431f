#pragma once
// The vocabulary split over a tensor-parallel group (Megatron-LM): each rank holds a contiguous
// 1/T of the embedding table's rows, and with a head tied to the table, 1/T of the logits.
// The vocabulary is padded to a multiple of T so that every rank holds as many rows; the padding
// rows are never looked up and their logits are masked out of the softmax, so the model is the
// unpadded one.
//   VocabParallelEmbedding: a rank writes the rows of the tokens it holds and zeros elsewhere;
//     the sum over the group (LeaveTensorParallel) gives every rank the whole lookup.
//   vocab_parallel_cross_entropy: the softmax cross-entropy of logits split by columns, without
//     gathering them: three all-reduces of one value per row (the maximum logit, the sum of the
//     exponentials, the target's logit), where gathering would move rows x vocabulary.

#include "zero/comm/communicator.hpp"
#include "zero/comm/reduce_op.hpp"
#include "zero/core/error.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/view.hpp"
#include "zero/tensor_parallel/conjugates.hpp"
#include "zero/tensor_parallel/slices.hpp"

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace zero {

namespace detail {
template <std::integral Token>
constexpr bool is_negative(Token t) noexcept {
  if constexpr (std::is_signed_v<Token>)
    return t < 0;
  else
    return false;
}
} // namespace detail

// Which rows of the padded vocabulary a rank holds.
struct VocabularySlice {
  std::size_t vocab = 0;        // the model's vocabulary
  std::size_t padded_vocab = 0; // rounded up to a multiple of the group size
  std::size_t first = 0;        // this rank's first row
  std::size_t rows = 0;         // padded_vocab / group size

  VocabularySlice() = default;
  VocabularySlice(std::size_t vocabulary, TensorSlice slice)
      : vocab(vocabulary), padded_vocab(padded_to_multiple(vocabulary, slice.size)),
        first(std::size_t(slice.rank) * (padded_vocab / std::size_t(slice.size))),
        rows(padded_vocab / std::size_t(slice.size)) {}

  bool holds(std::size_t token) const noexcept { return token - first < rows; }
  // Rows of this slice that are real tokens (the last slices may hold padding).
  std::size_t real_rows() const noexcept {
    return first >= vocab ? 0 : std::min(rows, vocab - first);
  }
};

template <ReducingCommunicator Comm>
requires HostAccessibleSpace<typename Comm::memory_space>
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(Comm& tensor, std::size_t vocab, std::size_t width)
      : tensor_(&tensor), slice_(vocab, TensorSlice{tensor.rank(), tensor.size()}), width_(width) {}

  const VocabularySlice& slice() const noexcept { return slice_; }
  std::size_t width() const noexcept { return width_; }

  // out [n, width] = the table's rows of the n tokens; `table` is this rank's slice
  // [slice().rows, width]. Refuses a token outside the vocabulary.
  template <std::integral Token>
  void forward(const Token* tokens, std::size_t n, const float* table, float* out) {
    check_tokens(tokens, n);
    parallel_rows(n, [&](std::size_t r) {
      const std::size_t token = std::size_t(tokens[r]);
      float* row = out + r * width_;
      if (slice_.holds(token))
        std::copy_n(table + (token - slice_.first) * width_, width_, row);
      else
        std::fill_n(row, width_, 0.0f);
    });
    LeaveTensorParallel::forward(*tensor_,
                                 View<float, typename Comm::memory_space>(out, n * width_));
  }

  // Adds each held token's row of dout [n, width] into d_table (this rank's slice); tokens are
  // taken in order, one range of columns per thread, so a row's sum never depends on threads.
  // Refuses a token outside the vocabulary, as forward does: one in the padding would otherwise
  // be added into a padding row, which the model does not have.
  template <std::integral Token>
  void backward(const Token* tokens, std::size_t n, const float* dout, float* d_table) const {
    check_tokens(tokens, n);
    detail::parallel_ranges(width_, [&](std::size_t begin, std::size_t end, int) {
      for (std::size_t r = 0; r < n; ++r) {
        const std::size_t token = std::size_t(tokens[r]);
        if (!slice_.holds(token)) continue;
        float* row = d_table + (token - slice_.first) * width_;
        for (std::size_t c = begin; c < end; ++c)
          row[c] += dout[r * width_ + c];
      }
    });
  }

 private:
  template <class Body>
  static void parallel_rows(std::size_t n, Body&& body) {
    detail::parallel_ranges(n, [&](std::size_t begin, std::size_t end, int) {
      for (std::size_t r = begin; r < end; ++r)
        body(r);
    });
  }
  template <class Token>
  void check_tokens(const Token* tokens, std::size_t n) const {
    for (std::size_t r = 0; r < n; ++r)
      if (detail::is_negative(tokens[r]) || std::size_t(tokens[r]) >= slice_.vocab)
        fail(ErrorKind::invalid_argument, "vocabulary-parallel embedding: token " +
                                              std::to_string(tokens[r]) + " at position " +
                                              std::to_string(r) + " is outside the vocabulary of " +
                                              std::to_string(slice_.vocab));
  }

  Comm* tensor_;
  VocabularySlice slice_;
  std::size_t width_;
};

// The softmax cross-entropy of each of `rows` rows against its target token, from this rank's
// columns of the logits (`logits` [rows, slice.rows], the padding columns ignored). Writes each
// row's loss (the same on every rank) and, when `dlogits` is given (it may be `logits`), this
// rank's columns of (softmax - one-hot) * gradient_scale, zero in the padding. The exponentials
// are taken in double, the maximum subtracted first.
template <ReducingCommunicator Comm, std::integral Token>
requires HostAccessibleSpace<typename Comm::memory_space>
void vocab_parallel_cross_entropy(Comm& tensor, const VocabularySlice& slice, const float* logits,
                                  const Token* targets, std::size_t rows, double* losses,
                                  float* dlogits, float gradient_scale) {
  using Memory = typename Comm::memory_space;
  for (std::size_t r = 0; r < rows; ++r)
    require(!detail::is_negative(targets[r]) && std::size_t(targets[r]) < slice.vocab,
            "vocabulary-parallel cross-entropy: target " + std::to_string(targets[r]) + " at row " +
                std::to_string(r) + " is outside the vocabulary of " + std::to_string(slice.vocab));
  const std::size_t columns = slice.rows, real = slice.real_rows();
  std::vector<float> top(rows), target_logit(rows, 0.0f);
  std::vector<double> sum(rows, 0.0);
  const auto each_row = [rows](auto&& body) {
    detail::parallel_ranges(rows, [&](std::size_t begin, std::size_t end, int) {
      for (std::size_t r = begin; r < end; ++r)
        body(r);
    });
  };
  each_row([&](std::size_t r) {
    const float* row = logits + r * columns;
    float m = -std::numeric_limits<float>::infinity();
    for (std::size_t c = 0; c < real; ++c)
      m = std::max(m, row[c]);
    top[r] = m;
    const std::size_t target = std::size_t(targets[r]);
    if (slice.holds(target)) target_logit[r] = row[target - slice.first];
  });
  if (tensor.size() > 1) tensor.all_reduce(View<float, Memory>(top), ReduceOp::max).wait();
  each_row([&](std::size_t r) {
    const float* row = logits + r * columns;
    double s = 0.0;
    for (std::size_t c = 0; c < real; ++c)
      s += std::exp(double(row[c]) - double(top[r]));
    sum[r] = s;
  });
  sum_over_tensor_group(tensor, View<double, Memory>(sum));
  sum_over_tensor_group(tensor, View<float, Memory>(target_logit)); // one rank's, zeros elsewhere
  each_row([&](std::size_t r) {
    losses[r] = std::log(sum[r]) - (double(target_logit[r]) - double(top[r]));
    if (!dlogits) return;
    const float* row = logits + r * columns;
    float* d = dlogits + r * columns;
    const double scale = double(gradient_scale) / sum[r];
    for (std::size_t c = 0; c < real; ++c)
      d[c] = float(std::exp(double(row[c]) - double(top[r])) * scale);
    std::fill(d + real, d + columns, 0.0f);
    const std::size_t target = std::size_t(targets[r]);
    if (slice.holds(target)) d[target - slice.first] -= gradient_scale;
  });
}

} // namespace zero
