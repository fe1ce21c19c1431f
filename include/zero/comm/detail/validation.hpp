#pragma once
// Validation mode: before a collective runs, every rank shares what it is about to call (kind,
// count, element type, reduction, root) and all compare. A mismatch throws the same message on
// every rank instead of hanging or reading past a buffer.

#include "zero/comm/collective.hpp"
#include "zero/comm/detail/mpi_check.hpp"
#include "zero/core/error.hpp"

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zero::detail {

struct CallSignature {
  std::uint64_t sequence;
  std::uint64_t count;
  std::int32_t root;
  std::uint8_t kind, dtype, op, pad = 0;

  static CallSignature of(const CollectiveArgs& a, std::uint64_t sequence) {
    const bool rooted = uses_root(a.kind);
    const bool reducing = uses_reduce_op(a.kind);
    return {sequence,
            a.count,
            rooted ? a.root : 0,
            static_cast<std::uint8_t>(a.kind),
            static_cast<std::uint8_t>(a.dtype),
            static_cast<std::uint8_t>(reducing ? a.op : ReduceOp::sum)};
  }
  CollectiveArgs args() const {
    CollectiveArgs a;
    a.kind = static_cast<Collective>(kind);
    a.dtype = static_cast<DType>(dtype);
    a.op = static_cast<ReduceOp>(op);
    a.root = root;
    a.count = count;
    return a;
  }
  friend bool operator==(const CallSignature&, const CallSignature&) = default;
};

inline void validate_call(MPI_Comm comm, const CollectiveArgs& args, std::uint64_t sequence) {
  int size = 1;
  ZERO_CHECK_MPI(MPI_Comm_size(comm, &size));
  const CallSignature mine = CallSignature::of(args, sequence);
  std::vector<CallSignature> all(static_cast<std::size_t>(size));
  ZERO_CHECK_MPI(
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm));
  bool agree = true;
  for (const CallSignature& s : all)
    agree = agree && s == all.front();
  if (agree) return;
  std::string message = "collective mismatch at call #" + std::to_string(all.front().sequence) +
                        " on a communicator of " + std::to_string(size) + " ranks:";
  for (int r = 0; r < size; ++r)
    message += " rank " + std::to_string(r) + " called " + all[std::size_t(r)].args().describe() +
               (r + 1 < size ? ";" : "");
  fail(ErrorKind::mismatch, message);
}

} // namespace zero::detail
