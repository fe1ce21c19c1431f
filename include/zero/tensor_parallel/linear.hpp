#pragma once
// Column- and row-parallel linear layers (Megatron-LM), over host memory. A linear layer
// y = x W^T + b with W [out, in] (torch.nn.Linear's) is split two ways:
//   ColumnParallelLinear: each rank holds out / T rows of W and of b and computes those outputs
//     from the whole input. The input enters through EnterTensorParallel: backward sums the
//     ranks' input gradients.
//   RowParallelLinear: each rank holds in / T columns of W and reads its slice of the input (the
//     output of a column-parallel layer, already split), giving a partial sum of y; the partial
//     sums leave through LeaveTensorParallel (summed over the group), then the bias, which every
//     rank holds whole, is added once.
// A column-parallel layer followed by a row-parallel one needs no communication between them:
// the element-wise work in between (GELU, attention per head) runs on each rank's slice.
//
// The matrix products are the caller's (a MatrixProduct: BLAS sgemm's arguments, row-major), so
// that the layers run on whatever BLAS the trainer uses. Bias and column sums take the rows in
// order, one column per thread, so that a result never depends on the thread count. With a group
// of one rank each layer is a plain linear layer, computed as one: the bias first, the product
// added to it.

#include "zero/comm/communicator.hpp"
#include "zero/core/error.hpp"
#include "zero/core/parallel.hpp"
#include "zero/core/view.hpp"
#include "zero/tensor_parallel/conjugates.hpp"
#include "zero/tensor_parallel/slices.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace zero {

// c = alpha op(a) op(b) + beta c, row-major, op = transpose where asked (cblas_sgemm's meaning).
template <class G>
concept MatrixProduct =
    std::invocable<G&, bool, bool, std::size_t, std::size_t, std::size_t, float, const float*,
                   std::size_t, const float*, std::size_t, float, float*, std::size_t>;

namespace detail {
// sums[c] = the sum over rows of m[r, c], rows in order.
inline void column_sums(const float* m, float* sums, std::size_t rows, std::size_t cols) {
  parallel_ranges(cols, [&](std::size_t begin, std::size_t end, int) {
    std::fill(sums + begin, sums + end, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = begin; c < end; ++c)
        sums[c] += m[r * cols + c];
  });
}
// Each row of y ([rows, cols]) set to b.
inline void set_rows(float* y, const float* b, std::size_t rows, std::size_t cols) {
  parallel_ranges(rows, [&](std::size_t begin, std::size_t end, int) {
    for (std::size_t r = begin; r < end; ++r)
      std::copy(b, b + cols, y + r * cols);
  });
}
// Each row of y ([rows, cols]) plus b.
inline void add_to_rows(float* y, const float* b, std::size_t rows, std::size_t cols) {
  parallel_ranges(rows, [&](std::size_t begin, std::size_t end, int) {
    for (std::size_t r = begin; r < end; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        y[r * cols + c] += b[c];
  });
}
} // namespace detail

template <ReducingCommunicator Comm, MatrixProduct Product>
requires HostAccessibleSpace<typename Comm::memory_space>
class ColumnParallelLinear {
 public:
  // The whole layer's sizes; refuses an `out` the group does not divide, naming `name`.
  ColumnParallelLinear(Comm& tensor, std::size_t in, std::size_t out, Product product,
                       std::string_view name = "a column-parallel layer's outputs")
      : tensor_(&tensor), product_(std::move(product)), in_(in),
        out_(slice_extent(out, tensor.size(), name)) {}

  std::size_t in() const noexcept { return in_; }
  // The outputs this rank computes: W and b hold this many rows.
  std::size_t local_out() const noexcept { return out_; }

  // y [rows, local_out] = x W^T + b, from the whole input x [rows, in].
  void forward(const float* x, const float* w, const float* b, float* y, std::size_t rows) {
    detail::set_rows(y, b, rows, out_);
    product_(false, true, rows, out_, in_, 1.0f, x, in_, w, in_, 1.0f, y, out_);
  }

  // From dy [rows, local_out]: dw and db (this rank's rows, overwritten) and dx [rows, in], the
  // whole input's gradient (summed over the group: EnterTensorParallel's backward).
  void backward(const float* x, const float* w, const float* dy, float* dw, float* db, float* dx,
                std::size_t rows) {
    detail::column_sums(dy, db, rows, out_);
    product_(true, false, out_, in_, rows, 1.0f, dy, out_, x, in_, 0.0f, dw, in_);
    product_(false, false, rows, in_, out_, 1.0f, dy, out_, w, in_, 0.0f, dx, in_);
    EnterTensorParallel::backward(*tensor_,
                                  View<float, typename Comm::memory_space>(dx, rows * in_));
  }

 private:
  Comm* tensor_;
  Product product_;
  std::size_t in_, out_;
};

template <ReducingCommunicator Comm, MatrixProduct Product>
requires HostAccessibleSpace<typename Comm::memory_space>
class RowParallelLinear {
 public:
  // The whole layer's sizes; refuses an `in` the group does not divide, naming `name`.
  RowParallelLinear(Comm& tensor, std::size_t in, std::size_t out, Product product,
                    std::string_view name = "a row-parallel layer's inputs")
      : tensor_(&tensor), product_(std::move(product)), in_(slice_extent(in, tensor.size(), name)),
        out_(out) {}

  // The inputs this rank reads: W holds this many columns.
  std::size_t local_in() const noexcept { return in_; }
  std::size_t out() const noexcept { return out_; }

  // y [rows, out] = x W^T + b, from this rank's slice of the input, x [rows, local_in]; y is
  // whole on every rank (LeaveTensorParallel's forward), b added once.
  void forward(const float* x, const float* w, const float* b, float* y, std::size_t rows) {
    if (tensor_->size() == 1) {
      detail::set_rows(y, b, rows, out_);
      product_(false, true, rows, out_, in_, 1.0f, x, in_, w, in_, 1.0f, y, out_);
      return;
    }
    product_(false, true, rows, out_, in_, 1.0f, x, in_, w, in_, 0.0f, y, out_);
    LeaveTensorParallel::forward(*tensor_,
                                 View<float, typename Comm::memory_space>(y, rows * out_));
    detail::add_to_rows(y, b, rows, out_);
  }

  // From dy [rows, out] (whole on every rank): dw (this rank's columns), db (whole, the same on
  // every rank) and dx [rows, local_in], this rank's slice of the input's gradient; no
  // communication (LeaveTensorParallel's backward).
  void backward(const float* x, const float* w, const float* dy, float* dw, float* db, float* dx,
                std::size_t rows) {
    detail::column_sums(dy, db, rows, out_);
    product_(true, false, out_, in_, rows, 1.0f, dy, out_, x, in_, 0.0f, dw, in_);
    product_(false, false, rows, in_, out_, 1.0f, dy, out_, w, in_, 0.0f, dx, in_);
  }

 private:
  Comm* tensor_;
  Product product_;
  std::size_t in_, out_;
};

} // namespace zero
