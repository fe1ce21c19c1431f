#pragma once
// Validation mode: before a collective runs, every rank shares what it is about to call (kind,
// count, element type, reduction, root, and for blocks of different sizes a fingerprint of the
// counts) and all compare. A mismatch throws the same message on every rank instead of hanging or
// reading past a buffer. The shared-memory transport reuses the signature and the message for the
// check it makes at every phase.

#include "zero/comm/collective.hpp"
#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/detail/mpi_wait.hpp"
#include "zero/core/error.hpp"

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zero::detail {

// 0 for equal blocks, else a fingerprint of the per-rank counts (every rank runs the same standard
// library, so std::hash gives every rank the same value).
inline std::uint64_t counts_fingerprint(std::span<const std::size_t> counts) noexcept {
  if (counts.empty()) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(counts.data()), counts.size_bytes());
  return std::hash<std::string_view>{}(bytes) | 1u;
}

struct CallSignature {
  std::uint64_t sequence;
  std::uint64_t count;       // blocks of different sizes: all together (each rank's own differs)
  std::uint64_t counts_hash; // counts_fingerprint of the per-rank counts
  std::int32_t root;         // the root; a quantized reduction (no root): its block size
  std::uint8_t kind, dtype, op, wire_bits = 0; // wire_bits: 0 unless quantized

  static CallSignature of(const CollectiveArgs& a, std::uint64_t sequence) {
    const bool rooted = uses_root(a.kind);
    const bool reducing = uses_reduce_op(a.kind);
    const int ranks = static_cast<int>(a.counts.size());
    return {sequence,
            a.variable_counts() ? a.block_offset(ranks) : a.count,
            counts_fingerprint(a.counts),
            rooted   ? a.root
            : a.wire ? static_cast<std::int32_t>(a.wire->block)
                     : 0,
            static_cast<std::uint8_t>(a.kind),
            static_cast<std::uint8_t>(a.dtype),
            static_cast<std::uint8_t>(reducing ? a.op : ReduceOp::sum),
            static_cast<std::uint8_t>(a.wire ? a.wire->bits : 0)};
  }
  // The call again, for messages; `counts` are the rank's per-rank counts (see gather_counts).
  CollectiveArgs args(std::span<const std::size_t> counts = {}) const {
    CollectiveArgs a;
    a.kind = static_cast<Collective>(kind);
    a.dtype = static_cast<DType>(dtype);
    a.op = static_cast<ReduceOp>(op);
    a.root = uses_root(a.kind) ? root : 0;
    if (wire_bits != 0) a.wire = BlockQuantization{std::size_t(std::uint32_t(root)), wire_bits};
    a.count = count;
    a.counts.assign(counts.begin(), counts.end());
    return a;
  }
  friend bool operator==(const CallSignature&, const CallSignature&) = default;
};

// Every rank's per-rank counts (empty for equal blocks). Collective: the signatures only carry a
// fingerprint, and a message should show the lists themselves.
inline std::vector<std::vector<std::size_t>> gather_counts(MPI_Comm comm,
                                                           std::span<const std::size_t> mine) {
  int size = 1;
  ZERO_CHECK_MPI(MPI_Comm_size(comm, &size));
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), starts(lengths.size());
  ZERO_CHECK_MPI(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  int total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    starts[r] = total;
    total += lengths[r];
  }
  const std::vector<std::uint64_t> sent(mine.begin(), mine.end());
  std::vector<std::uint64_t> all(static_cast<std::size_t>(total));
  ZERO_CHECK_MPI(MPI_Allgatherv(sent.data(), length, MPI_UINT64_T, all.data(), lengths.data(),
                                starts.data(), MPI_UINT64_T, comm));
  std::vector<std::vector<std::size_t>> by_rank(lengths.size());
  for (std::size_t r = 0; r < lengths.size(); ++r)
    by_rank[r].assign(all.begin() + starts[r], all.begin() + starts[r] + lengths[r]);
  return by_rank;
}

// "<heading> on a communicator of 3 ranks: rank 0 called ...; rank 1 called ...", thrown on every
// rank. Collective: every rank that saw the mismatch calls it (all of them, as all read the same
// signatures).
[[noreturn]] inline void fail_mismatch(MPI_Comm comm, const std::string& heading,
                                       std::span<const CallSignature> calls,
                                       std::span<const std::size_t> my_counts) {
  const auto counts = gather_counts(comm, my_counts);
  std::string message =
      heading + " on a communicator of " + std::to_string(calls.size()) + " ranks:";
  for (std::size_t r = 0; r < calls.size(); ++r)
    message += " rank " + std::to_string(r) + " called " + calls[r].args(counts[r]).describe() +
               (r + 1 < calls.size() ? ";" : "");
  fail(ErrorKind::mismatch, message);
}

inline void validate_call(MPI_Comm comm, const CollectiveArgs& args, std::uint64_t sequence) {
  int size = 1;
  ZERO_CHECK_MPI(MPI_Comm_size(comm, &size));
  const CallSignature mine = CallSignature::of(args, sequence);
  std::vector<CallSignature> all(static_cast<std::size_t>(size));
  MPI_Request request = MPI_REQUEST_NULL;
  ZERO_CHECK_MPI(MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE,
                                comm, &request));
  wait_for(request, "comparing collective calls");
  bool agree = true;
  for (const CallSignature& s : all)
    agree = agree && s == all.front();
  if (agree) return;
  fail_mismatch(comm, "collective mismatch at call #" + std::to_string(all.front().sequence), all,
                args.counts);
}

} // namespace zero::detail
