#pragma once
// The MPI handles a test binary leaves allocated: communicators, groups, datatypes, windows, infos,
// operations and error handlers that zero or a test made and never freed. The MPI test main takes
// a ledger after MPI is initialised and, once every communicator of the binary is released, fails
// the run on each handle that was not there at the start.
//
// Neither of the usual checks sees such a handle. Open MPI frees what is left in MPI_Finalize, so
// LeakSanitizer, which reports after it, finds nothing; and Open MPI's own report
// (mpi_show_handle_leaks, which the MPI tests turn on as well) names a communicator only when
// something else still holds it, a pending request say: a communicator split and forgotten is
// freed without a word (Open MPI 4.1). The ledger reads the handle tables through the standard's
// Fortran conversions instead: with Open MPI a handle's Fortran value is its index in the table
// of its kind, and MPI_*_f2c gives an invalid (null) handle for a free index. Other MPI
// libraries' handles carry no such index: there the ledger records nothing.

#include <mpi.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

namespace zero::testing {

class MpiHandleLedger {
 public:
  // Every handle allocated now: MPI's predefined ones, and whatever MPI_Init made.
  MpiHandleLedger() {
    for (std::size_t k = 0; k < kinds; ++k)
      at_start_[k] = live(k);
  }

  // Prints each handle allocated now that was not at the start, and returns how many there are.
  int report_left_allocated(int rank) const {
    int left = 0;
    for (std::size_t k = 0; k < kinds; ++k) {
      const std::vector<bool> now = live(k);
      for (std::size_t i = 0; i < now.size(); ++i) {
        if (!now[i] || at_start_[k][i]) continue;
        ++left;
        std::fprintf(stderr,
                     "[rank %d] zero tests: %s (Fortran handle %zu) still allocated when the test "
                     "binary ends%s: made by zero or a test and never freed\n",
                     rank, names[k], i, details(k, i).c_str());
      }
    }
    return left;
  }

 private:
  static constexpr std::size_t kinds = 7;
  static constexpr const char* names[kinds] = {"MPI_Comm", "MPI_Group", "MPI_Datatype",  "MPI_Win",
                                               "MPI_Info", "MPI_Op",    "MPI_Errhandler"};
  // Open MPI's tables grow in blocks of 64; a binary holds a few dozen handles of a kind at most.
  static constexpr MPI_Fint scanned = 4096;

#ifdef OPEN_MPI
  static bool allocated(std::size_t kind, MPI_Fint f) {
    switch (kind) {
    case 0: {
      const MPI_Comm c = MPI_Comm_f2c(f);
      return c != nullptr && c != MPI_COMM_NULL;
    }
    case 1: {
      const MPI_Group g = MPI_Group_f2c(f);
      return g != nullptr && g != MPI_GROUP_NULL;
    }
    case 2: {
      const MPI_Datatype t = MPI_Type_f2c(f);
      return t != nullptr && t != MPI_DATATYPE_NULL;
    }
    case 3: {
      const MPI_Win w = MPI_Win_f2c(f);
      return w != nullptr && w != MPI_WIN_NULL;
    }
    case 4: {
      const MPI_Info i = MPI_Info_f2c(f);
      return i != nullptr && i != MPI_INFO_NULL;
    }
    case 5: {
      const MPI_Op o = MPI_Op_f2c(f);
      return o != nullptr && o != MPI_OP_NULL;
    }
    default: {
      const MPI_Errhandler e = MPI_Errhandler_f2c(f);
      return e != nullptr && e != MPI_ERRHANDLER_NULL;
    }
    }
  }

  static std::string details(std::size_t kind, std::size_t i) {
    if (kind != 0) return "";
    const MPI_Comm c = MPI_Comm_f2c(static_cast<MPI_Fint>(i));
    int size = 0;
    MPI_Comm_size(c, &size);
    return ", a communicator of " + std::to_string(size) + " rank" + (size == 1 ? "" : "s");
  }

  static std::vector<bool> live(std::size_t kind) {
    std::vector<bool> found(static_cast<std::size_t>(scanned));
    for (MPI_Fint f = 0; f < scanned; ++f)
      found[static_cast<std::size_t>(f)] = allocated(kind, f);
    return found;
  }
#else
  static std::string details(std::size_t, std::size_t) {
    return "";
  }
  static std::vector<bool> live(std::size_t) {
    return {};
  }
#endif

  std::array<std::vector<bool>, kinds> at_start_;
};

} // namespace zero::testing
