#pragma once
// Check macros for MPI calls: ZERO_CHECK_MPI throws zero::Error, ZERO_ASSERT_MPI aborts,
// ZERO_LOG_MPI only reports (destructors). zero's communicators set MPI_ERRORS_RETURN so that a
// failed call reaches these checks instead of aborting inside MPI.

#include "zero/core/error.hpp"

#include <mpi.h>

#include <string>

namespace zero::detail {
inline std::string mpi_message(int status, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  return std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(length)) +
         " at " + file + ":" + std::to_string(line);
}
} // namespace zero::detail

#define ZERO_CHECK_MPI(call)                                                                       \
  do {                                                                                             \
    const int zero_status_ = (call);                                                               \
    if (zero_status_ != MPI_SUCCESS)                                                               \
      ::zero::fail(::zero::ErrorKind::mpi,                                                         \
                   ::zero::detail::mpi_message(zero_status_, #call, __FILE__, __LINE__));          \
  } while (false)

#define ZERO_ASSERT_MPI(call)                                                                      \
  do {                                                                                             \
    const int zero_status_ = (call);                                                               \
    if (zero_status_ != MPI_SUCCESS) {                                                             \
      ::zero::detail::log_error(                                                                   \
          ::zero::detail::mpi_message(zero_status_, #call, __FILE__, __LINE__));                   \
      std::abort();                                                                                \
    }                                                                                              \
  } while (false)

#define ZERO_LOG_MPI(call)                                                                         \
  do {                                                                                             \
    const int zero_status_ = (call);                                                               \
    if (zero_status_ != MPI_SUCCESS)                                                               \
      ::zero::detail::log_error(                                                                   \
          ::zero::detail::mpi_message(zero_status_, #call, __FILE__, __LINE__));                   \
  } while (false)
