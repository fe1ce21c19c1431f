#pragma once
// MpiCommunicator: collectives among MPI ranks, through Boost.MPI's communicator. Every call is
// non-blocking: it is queued to the communicator's progress thread and returns a Work handle.
// Ranks that share one node (the common case, and every multi-rank test) exchange data through an
// MPI-3 shared-memory window; across nodes the collectives run in two levels, within each node and
// then across nodes (hierarchical_transport.hpp), or as flat chunked MPI calls when the nodes hold
// different numbers of ranks. A reduce_scatter given a BlockQuantization (ZeRO++'s qgZ) is
// quantized on the hierarchical transport only, where it crosses the network.

//
// Compiled once, in zero::mpi's library (src/comm/mpi_communicator.cpp): the transports, the
// progress thread and the watchdog are code that every program with an engine would otherwise
// optimise again in each of its translation units (27% of an engine unit's machine code,
// docs/compile-time.md). This header declares the communicator; what it runs is behind `State`.

#include "zero/comm/communicator.hpp"
#include "zero/comm/detail/collective_api.hpp"
#include "zero/comm/mpi_environment.hpp"
#include "zero/comm/options.hpp"

#include <boost/mpi/communicator.hpp>
#include <mpi.h>

#include <memory>
#include <vector>

namespace zero {

class MpiCommunicator : public detail::CollectiveApi<MpiCommunicator, host> {
 public:
  static constexpr bool supports_variable_counts = true;
  static constexpr bool supports_wire_quantization = true;

  // The world communicator; initialises MPI if needed.
  MpiCommunicator();
  MpiCommunicator(int& argc, char**& argv);
  // A communicator over the ranks of `comm` (duplicated: zero's traffic never mixes with yours).
  explicit MpiCommunicator(const boost::mpi::communicator& comm,
                           CommOptions options = CommOptions::from_environment());

  MpiCommunicator(MpiCommunicator&&) noexcept;
  MpiCommunicator& operator=(MpiCommunicator&&) noexcept;
  ~MpiCommunicator();

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // The settings in force: a chunk of 0 (the default) reads as the chosen transport's chunk.
  const CommOptions& options() const noexcept;
  // "shm" when the ranks talk through shared memory, "hierarchical" across nodes in two levels,
  // "mpi" for flat chunked MPI.
  const char* transport() const noexcept;
  // How many nodes the ranks span, and how many ranks each holds (1 and size() on one node; with
  // ZERO_NODE_SIZE, the simulated nodes). 0 ranks per node when nodes hold different numbers.
  int nodes() const noexcept;
  // Whether a quantized reduce_scatter (ZeRO++'s qgZ) quantizes here: on the hierarchical
  // transport, across nodes; on one node (or over flat MPI) it reduces exactly.
  bool quantizes_on_wire() const noexcept;
  int ranks_per_node() const noexcept;
  // The fixed order in which reductions add the ranks' contributions, for reproducing results: the
  // ranks of each group in order (rounded to the element type once per group on the hierarchical
  // transport), then the groups' sums in order. One group of all ranks in rank order on shared
  // memory and flat MPI; one group per node on the hierarchical transport.
  const std::vector<std::vector<int>>& summation_order() const noexcept;
  // The duplicated communicator zero uses, for interoperating with other MPI code.
  boost::mpi::communicator boost_communicator() const {
    return boost::mpi::communicator(native_handle(), boost::mpi::comm_attach);
  }
  MPI_Comm native_handle() const noexcept;

  // Ranks with the same color form a group, ordered by key (then by rank). Collective.
  MpiCommunicator split(int color, int key);

  // The backend entry point: runs a described collective asynchronously.
  // Below options().inline_below_bytes, a call that finds nothing queued runs on the calling
  // thread: for small messages the hand-off to the progress thread costs more than the transfer.
  Work submit(const CollectiveArgs& args);

 private:
  struct State;
  explicit MpiCommunicator(std::unique_ptr<State> state);

  std::unique_ptr<State> state_;
  // Copies of the state's, read on every typed call without a call into the library.
  int rank_ = 0;
  int size_ = 1;
};

static_assert(Communicator<MpiCommunicator>);
static_assert(VariableCountCommunicator<MpiCommunicator>);
static_assert(QuantizingCommunicator<MpiCommunicator>);

} // namespace zero
