#pragma once
// zero's error type and the three flavours of check: throw (normal code), assert (programming
// errors, compiled out with NDEBUG) and log (destructors and noexcept paths, which must not throw).

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

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

namespace detail {
// The last error zero raised in this process, for a peer's report when this rank leaves a
// communicator its peers still wait in (comm/progress/departures.hpp): a program that catches the
// error, prints it and returns from main leaves only its own output saying why otherwise.
class LastError {
 public:
  void record(const std::string& message) noexcept {
    std::lock_guard lock(mutex_);
    const std::size_t n = std::min(message.size(), text_.size() - 1);
    std::copy_n(message.data(), n, text_.data());
    text_[n] = '\0';
  }
  // Copies it into `to` (empty when none), cut to fit.
  template <std::size_t N>
  void copy_to(std::array<char, N>& to) const noexcept {
    std::lock_guard lock(mutex_);
    const std::size_t n = std::min(std::strlen(text_.data()), N - 1);
    std::copy_n(text_.data(), n, to.data());
    to[n] = '\0';
  }

 private:
  mutable std::mutex mutex_;
  std::array<char, 1024> text_{};
};

inline LastError& last_error() noexcept {
  static LastError record;
  return record;
}

// Whether the last zero::Error this thread built was raised alike on every rank
// (fail_on_every_rank): a communicator destroyed while that error unwinds can then leave together
// with its peers, which unwind from it too, instead of leaving behind what needs them.
inline bool& last_error_on_every_rank() noexcept {
  thread_local bool on_every_rank = false;
  return on_every_rank;
}
} // namespace detail

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error("zero: " + message), kind_(kind) {
    detail::last_error().record(message);
    detail::last_error_on_every_rank() = false;
  }
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

// The same for an error every rank of the communicators involved raises alike (decided from what a
// collective gave all of them: comm/agreed.hpp), so that they can tear down together.
[[noreturn]] inline void fail_on_every_rank(ErrorKind kind, const std::string& message) {
  Error error(kind, message);
  detail::last_error_on_every_rank() = true;
  throw error;
}
inline void require_on_every_rank(bool condition, std::string_view message,
                                  ErrorKind kind = ErrorKind::invalid_argument) {
  if (!condition) fail_on_every_rank(kind, std::string(message));
}

namespace detail {
[[noreturn]] inline void assertion_failed(const char* expression, const char* file, int line) {
  std::fprintf(stderr, "zero: assertion '%s' failed at %s:%d\n", expression, file, line);
  std::abort();
}

inline void log_error(const std::string& message) noexcept {
  std::fprintf(stderr, "zero: %s\n", message.c_str());
}

// What an errno value means, for messages: "No such file or directory".
inline std::string system_text(int error) {
  return std::generic_category().message(error);
}
} // namespace detail
} // namespace zero

// The checks of a C library's status codes (CUDA, NCCL, MPI), written once. A library is described
// by a type with `static bool ok(Status)` and `static std::string message(Status, const char* call,
// const char* file, int line)`; its three macros are then one line each, e.g.
//   #define ZERO_CHECK_CUDA(call) ZERO_CHECK_STATUS(::zero::detail::CudaStatus, cuda, call)
// ZERO_CHECK_STATUS throws Error(kind); ZERO_ASSERT_STATUS reports and aborts (programming
// errors); ZERO_LOG_STATUS only reports (destructors and noexcept paths).
namespace zero::detail {
template <class Library, class Status>
void check_status(Status status, ErrorKind kind, const char* call, const char* file, int line) {
  if (!Library::ok(status)) fail(kind, Library::message(status, call, file, line));
}
// Reports a failed status (and aborts, with `abort_after`), never throwing: for destructors and
// noexcept paths.
template <class Library, class Status>
void report_status(Status status, bool abort_after, const char* call, const char* file,
                   int line) noexcept {
  if (Library::ok(status)) return;
  try {
    log_error(Library::message(status, call, file, line));
  } catch (...) { // out of memory for the message
    std::fprintf(stderr, "zero: %s failed at %s:%d\n", call, file, line);
  }
  if (abort_after) std::abort();
}
} // namespace zero::detail

#define ZERO_CHECK_STATUS(Library, kind, call)                                                     \
  ::zero::detail::check_status<Library>((call), ::zero::ErrorKind::kind, #call, __FILE__, __LINE__)
#define ZERO_ASSERT_STATUS(Library, call)                                                          \
  ::zero::detail::report_status<Library>((call), true, #call, __FILE__, __LINE__)
#define ZERO_LOG_STATUS(Library, call)                                                             \
  ::zero::detail::report_status<Library>((call), false, #call, __FILE__, __LINE__)

#ifdef NDEBUG
#define ZERO_ASSERT(expression) ((void)0)
#else
#define ZERO_ASSERT(expression)                                                                    \
  ((expression) ? (void)0 : ::zero::detail::assertion_failed(#expression, __FILE__, __LINE__))
#endif
