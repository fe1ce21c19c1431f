#pragma once
// MPI start-up through Boost.MPI, once per process, with MPI_THREAD_MULTIPLE: zero's communicators
// run collectives on a progress thread each. If the program initialised MPI itself, zero uses that
// (and checks its thread level); otherwise MPI is finalised at exit.
//
// Under AddressSanitizer, what MPI allocates while it initialises is left out of LeakSanitizer's
// report: Open MPI keeps most of it for the life of the process and frees little in MPI_Finalize.
// Suppressions cannot say "allocated in MPI_Init": the fast unwinder stops at the first frame of
// Open MPI's libraries (built without frame pointers), and the slow one made the MPI tests several
// times slower. Naming the libraries instead would hide every leak whose stack passes through
// them: a communicator split and never freed, a request never completed.

#include "zero/core/error.hpp"

#include <boost/mpi/environment.hpp>
#include <mpi.h>

#if defined(__SANITIZE_ADDRESS__)
#define ZERO_LEAK_CHECKED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZERO_LEAK_CHECKED 1
#endif
#endif
#ifdef ZERO_LEAK_CHECKED
#include <sanitizer/lsan_interface.h>
#endif

#include <memory>
#include <mutex>
#include <string>

namespace zero {

namespace detail {
inline std::unique_ptr<boost::mpi::environment>& mpi_environment_slot() {
  static std::unique_ptr<boost::mpi::environment> environment;
  return environment;
}

inline void check_thread_level() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE)
    fail(ErrorKind::mpi, "MPI provides thread level " + std::to_string(provided) +
                             " but zero needs MPI_THREAD_MULTIPLE (initialise MPI with "
                             "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let zero do it)");
}
} // namespace detail

// Initialises MPI if nobody did; safe to call many times, from the first communicator on.
inline void initialize_mpi(int* argc = nullptr, char*** argv = nullptr) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
#ifdef ZERO_LEAK_CHECKED
    const __lsan::ScopedDisabler mpi_keeps_what_it_initialises;
#endif
    auto& slot = detail::mpi_environment_slot();
    if (argc != nullptr && argv != nullptr)
      slot = std::make_unique<boost::mpi::environment>(*argc, *argv,
                                                       boost::mpi::threading::multiple, true);
    else
      slot = std::make_unique<boost::mpi::environment>(boost::mpi::threading::multiple, true);
  }
  detail::check_thread_level();
}

} // namespace zero

#undef ZERO_LEAK_CHECKED
