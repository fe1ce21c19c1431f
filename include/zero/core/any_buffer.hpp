#pragma once
// AnyBuffer: a host Buffer whose element type is chosen at run time (a DType), for state whose
// precision is a run-time option (the compute copy of the weights: float, half or bfloat16).
// Typed access checks the type.

#include "zero/core/buffer.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"

#include <cstddef>
#include <string>

namespace zero {

class AnyBuffer {
 public:
  AnyBuffer() = default;
  AnyBuffer(DType dtype, std::size_t size)
      : dtype_(dtype), size_(size), bytes_(size * size_of(dtype)) {}

  DType dtype() const noexcept { return dtype_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t size_bytes() const noexcept { return bytes_.size(); }
  bool empty() const noexcept { return size_ == 0; }
  void* data() noexcept { return bytes_.data(); }
  const void* data() const noexcept { return bytes_.data(); }

  template <Element T>
  View<T> as() {
    check<T>();
    return {reinterpret_cast<T*>(bytes_.data()), size_};
  }
  template <Element T>
  View<const T> as() const {
    check<T>();
    return {reinterpret_cast<const T*>(bytes_.data()), size_};
  }

 private:
  template <class T>
  void check() const {
    if (dtype_of<T> != dtype_)
      fail(ErrorKind::invalid_argument,
           std::string("AnyBuffer holds ") + to_string(dtype_) + ", not " + to_string(dtype_of<T>));
  }

  DType dtype_ = DType::float32;
  std::size_t size_ = 0;
  Buffer<std::byte> bytes_;
};

} // namespace zero
