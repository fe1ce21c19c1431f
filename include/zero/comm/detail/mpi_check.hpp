#pragma once
// Check macros for MPI calls: ZERO_CHECK_MPI throws zero::Error, ZERO_ASSERT_MPI aborts,
// ZERO_LOG_MPI only reports (destructors). zero's communicators set MPI_ERRORS_RETURN so that a
// failed call reaches these checks instead of aborting inside MPI.

#include "zero/core/error.hpp"

#include <mpi.h>

#include <cstddef>
#include <string>

namespace zero::detail {
struct MpiStatus {
  static bool ok(int status) noexcept { return status == MPI_SUCCESS; }
  static std::string message(int status, const char* call, const char* file, int line) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(status, text, &length);
    return std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(length)) +
           " at " + file + ":" + std::to_string(line);
  }
};
} // namespace zero::detail

#define ZERO_CHECK_MPI(call) ZERO_CHECK_STATUS(::zero::detail::MpiStatus, mpi, call)
#define ZERO_ASSERT_MPI(call) ZERO_ASSERT_STATUS(::zero::detail::MpiStatus, call)
#define ZERO_LOG_MPI(call) ZERO_LOG_STATUS(::zero::detail::MpiStatus, call)
