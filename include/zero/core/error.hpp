#pragma once
// zero's error type and the three flavours of check: throw (normal code), assert (programming
// errors, compiled out with NDEBUG) and log (destructors and noexcept paths, which must not throw).

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zero {

// Which subsystem failed; lets callers tell a bad argument from a failed MPI or CUDA call.
enum class ErrorKind {
  invalid_argument,
  mismatch,
  numerical,
  mpi,
  cuda,
  nccl,
  io,
  unsupported,
  timeout
};

inline const char* to_string(ErrorKind kind) noexcept {
  switch (kind) {
  case ErrorKind::invalid_argument:
    return "invalid argument";
  case ErrorKind::mismatch:
    return "mismatch between ranks";
  case ErrorKind::numerical:
    return "numerical error";
  case ErrorKind::mpi:
    return "MPI error";
  case ErrorKind::cuda:
    return "CUDA error";
  case ErrorKind::nccl:
    return "NCCL error";
  case ErrorKind::io:
    return "I/O error";
  case ErrorKind::unsupported:
    return "unsupported";
  case ErrorKind::timeout:
    return "timeout";
  }
  return "error";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error("zero: " + message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

// Throws Error(invalid_argument) naming the broken requirement unless `condition` holds.
inline void require(bool condition, std::string_view message,
                    ErrorKind kind = ErrorKind::invalid_argument) {
  if (!condition) fail(kind, std::string(message));
}

namespace detail {
[[noreturn]] inline void assertion_failed(const char* expression, const char* file, int line) {
  std::fprintf(stderr, "zero: assertion '%s' failed at %s:%d\n", expression, file, line);
  std::abort();
}

inline void log_error(const std::string& message) noexcept {
  std::fprintf(stderr, "zero: %s\n", message.c_str());
}
} // namespace detail
} // namespace zero

#ifdef NDEBUG
#define ZERO_ASSERT(expression) ((void)0)
#else
#define ZERO_ASSERT(expression)                                                                    \
  ((expression) ? (void)0 : ::zero::detail::assertion_failed(#expression, __FILE__, __LINE__))
#endif
