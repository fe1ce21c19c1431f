// MpiCommunicator's compiled part (zero::mpi's library): the communicator's state, its choice of
// transport and everything those transports run. See zero/comm/mpi_communicator.hpp.

#include "zero/comm/mpi_communicator.hpp"

#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/detail/mpi_wait.hpp"
#include "zero/comm/detail/validation.hpp"
#include "zero/comm/progress/departures.hpp"
#include "zero/comm/progress/peer_liveness.hpp"
#include "zero/comm/progress/progress_worker.hpp"
#include "zero/comm/transport/hierarchical_transport.hpp"
#include "zero/comm/transport/mpi_transport.hpp"
#include "zero/comm/transport/shm_transport.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace zero {

namespace {
// The communicators alive in this process: a process that ends without destroying one (exit()
// from an error handler, a communicator that outlives main) still tells its peers it left.
template <class State>
class LiveStates {
 public:
  static LiveStates& instance() {
    static auto* states = new LiveStates; // never destroyed: used from the exit handler
    return *states;
  }
  void add(State* s) {
    std::lock_guard lock(mutex_);
    if (!handler_installed_) handler_installed_ = std::atexit([] { instance().leave_all(); }) == 0;
    states_.insert(s);
  }
  void remove(State* s) {
    std::lock_guard lock(mutex_);
    states_.erase(s);
  }

 private:
  void leave_all() {
    std::lock_guard lock(mutex_);
    for (State* s : states_) // the process ends: nothing more is freed collectively
      s->departures->announce(s->worker->operations_completed(), true);
  }
  std::mutex mutex_;
  std::set<State*> states_;
  bool handler_installed_ = false;
};
} // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  CommOptions options;   // in force (a chunk of 0 resolved to the transport's default)
  CommOptions requested; // as given
  std::variant<std::unique_ptr<detail::ShmTransport>, std::unique_ptr<detail::MpiTransport>,
               std::unique_ptr<detail::HierarchicalTransport>>
      transport;
  int nodes = 1;
  int ranks_per_node = 1;
  std::vector<std::vector<int>> summation_order;
  std::uint64_t sequence = 0;
  std::unique_ptr<detail::PeerLiveness> peers;
  std::unique_ptr<detail::Departures> departures;
  std::unique_ptr<detail::ProgressWorker> worker;
  int exceptions_at_start = std::uncaught_exceptions();

  // `adopt`: `parent` is a communicator zero made for this one (a split's part), taken over
  // instead of duplicated: creating a communicator costs rounds of messages among the ranks.
  State(MPI_Comm parent, const CommOptions& opts, bool adopt = false)
      : options(opts), requested(opts) {
    initialize_mpi();
    if (adopt) {
      comm = parent;
    } else {
      MPI_Request duplicated = MPI_REQUEST_NULL;
      ZERO_CHECK_MPI(MPI_Comm_idup(parent, &comm, &duplicated));
      detail::wait_for(duplicated, "duplicating the communicator", {}, detail::mpi_setup_spin);
    }
    try {
      ZERO_CHECK_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
      ZERO_CHECK_MPI(MPI_Comm_rank(comm, &rank));
      ZERO_CHECK_MPI(MPI_Comm_size(comm, &size));
      choose_transport(); // refuses a transport the ranks' places rule out, on every rank
      peers = std::make_unique<detail::PeerLiveness>(comm, rank);
      departures = std::make_unique<detail::Departures>(comm, rank, size);
    } catch (...) {
      MPI_Comm_free(&comm); // the destructor does not run for an object never built
      throw;
    }
    detail::Watchdog watchdog{
        .timeout_seconds = options.timeout_seconds,
        .on_timeout = [this](const std::string& what, double seconds,
                             std::uint64_t) { abort_on_timeout(what, seconds); },
        .on_slow = [this](const std::string& what, double,
                          std::uint64_t operation) { abort_if_peer_left(what, operation); },
        .rank = rank,
        .size = size};
    worker = std::make_unique<detail::ProgressWorker>(
        [this](const CollectiveArgs& args) { execute(args); }, std::move(watchdog));
    LiveStates<State>::instance().add(this);
  }
  // std::visit and the variant's assignment throw only for a valueless variant, which a variant
  // of unique_ptrs never is. NOLINTNEXTLINE(bugprone-exception-escape)
  ~State() {
    LiveStates<State>::instance().remove(this);
    worker->stop(); // finishes queued collectives first (their peers have queued them too)
    // Freeing the shared-memory window is a collective call. A rank that unwinds from an error seen
    // on this rank only must not wait in it for peers that are still waiting for its next
    // collective: it leaves the window to the process's end (freeing a communicator does not wait
    // for peers). Otherwise, also when every rank unwinds from the same error, the ranks leave
    // together, and free the window only when no peer left it undone.
    int finalized = 0;
    MPI_Finalized(&finalized); // a program that finalised MPI itself before this
    bool skip_collectives =
        (std::uncaught_exceptions() > exceptions_at_start && !detail::last_error_on_every_rank()) ||
        finalized != 0;
    // A peer still waiting in a later operation learns now that this rank will not come.
    departures->announce(worker->operations_completed(), skip_collectives);
    worker.reset();
    std::string missing;
    if (!skip_collectives) {
      if (!departures->wait_for_peers(options.timeout_seconds, missing)) {
        std::fprintf(stderr,
                     "zero: rank %d of %d left its communicator, but rank(s) %s did not within "
                     "%.0f s (ZERO_TIMEOUT_S): they still wait in an operation this rank never "
                     "called, or never reached the end. Aborting the job.\n",
                     rank, size, missing.c_str(), options.timeout_seconds);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
      skip_collectives = departures->a_peer_abandons();
    }
    if (skip_collectives) std::visit([](auto& t) { t->abandon(); }, transport);
    transport = std::unique_ptr<detail::MpiTransport>();
    departures.reset();
    if (comm != MPI_COMM_NULL && finalized == 0) ZERO_LOG_MPI(MPI_Comm_free(&comm));
  }

  void choose_transport() {
    std::vector<int> keys = node_keys();
    const std::optional<detail::NodeGrid> grid = detail::NodeGrid::from_keys(keys, rank);
    std::sort(keys.begin(), keys.end());
    nodes = static_cast<int>(std::unique(keys.begin(), keys.end()) - keys.begin());
    ranks_per_node = grid ? grid->local_size : 0;
    const bool one_node = nodes == 1;
    const std::string where = std::to_string(size) + " ranks on " + std::to_string(nodes) +
                              " nodes" + (options.node_size > 0 ? " (ZERO_NODE_SIZE)" : "");
    if (options.transport == Transport::shared_memory && !one_node)
      fail_on_every_rank(ErrorKind::unsupported,
                         "ZERO_MPI_TRANSPORT=shm needs all ranks on one node: " + where);
    // Two levels need as many ranks on every node; where they differ (a split communicator may
    // take some ranks of a node), the collectives are flat.
    Transport chosen = options.transport;
    if (chosen == Transport::automatic)
      chosen = one_node ? Transport::shared_memory : Transport::hierarchical;
    if (chosen == Transport::hierarchical && !grid) chosen = Transport::mpi;
    if (chosen == Transport::hierarchical) {
      for (int m = 0; m < grid->nodes; ++m) {
        summation_order.emplace_back();
        for (int l = 0; l < grid->local_size; ++l)
          summation_order.back().push_back(grid->rank(m, l));
      }
    } else {
      summation_order.emplace_back(static_cast<std::size_t>(size));
      std::iota(summation_order.back().begin(), summation_order.back().end(), 0);
    }
    if (options.chunk_bytes == 0)
      options.chunk_bytes =
          chosen == Transport::shared_memory ? shm_chunk_bytes : network_chunk_bytes;
    if (chosen == Transport::shared_memory)
      transport = std::make_unique<detail::ShmTransport>(
          comm, options.chunk_bytes, options.gathers_to_mpi_from_bytes(),
          options.native_below_bytes, options.native_when_oversubscribed);
    else if (chosen == Transport::hierarchical)
      transport = std::make_unique<detail::HierarchicalTransport>(comm, *grid, options.chunk_bytes);
    else
      transport = std::make_unique<detail::MpiTransport>(comm, options.chunk_bytes);
  }

  // Every rank's node key, equal on the ranks of one node: the lowest rank of its node in MPI's
  // shared-memory split; with ZERO_NODE_SIZE=k, each such node is cut further into groups of k
  // consecutive ranks of MPI_COMM_WORLD (so that a split communicator sees the same simulated
  // nodes, and a simulated node never spans two real ones). Collective.
  std::vector<int> node_keys() const {
    int lowest = rank;
    MPI_Comm node = MPI_COMM_NULL;
    detail::arrive_together(comm, "finding the nodes", {}, detail::mpi_setup_spin);
    ZERO_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    MPI_Request request = MPI_REQUEST_NULL;
    ZERO_CHECK_MPI(MPI_Iallreduce(&rank, &lowest, 1, MPI_INT, MPI_MIN, node, &request));
    detail::wait_for(request, "finding the lowest rank of each node", {}, detail::mpi_setup_spin);
    MPI_Comm_free(&node);
    int group = 0;
    if (options.node_size > 0) {
      int world_rank = 0;
      ZERO_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
      group = world_rank / options.node_size;
    }
    const int mine[2] = {lowest, group};
    std::vector<int> pairs(2 * static_cast<std::size_t>(size));
    ZERO_CHECK_MPI(MPI_Iallgather(mine, 2, MPI_INT, pairs.data(), 2, MPI_INT, comm, &request));
    detail::wait_for(request, "exchanging node keys", {}, detail::mpi_setup_spin);
    // The key of a (node, group) pair: the first rank that has it.
    std::map<std::pair<int, int>, int> first;
    std::vector<int> keys(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      const std::pair<int, int> at{pairs[2 * std::size_t(r)], pairs[2 * std::size_t(r) + 1]};
      keys[std::size_t(r)] = first.try_emplace(at, r).first->second;
    }
    return keys;
  }

  void execute(const CollectiveArgs& args) {
    ++sequence;
    // Validation mode compares every call before it runs. Without it, the shared-memory
    // transport still compares signatures at each of its phases; the MPI transport has no
    // phases of its own, and a mismatched MPI call hangs, fails or quietly mixes unlike data, so
    // the MPI transports always compare them first: one allgather of 40 bytes per collective.
    const bool on_mpi_transport = transport.index() != 0;
    if (options.validate || on_mpi_transport) detail::validate_call(comm, args, sequence);
    std::visit([&](auto& t) { t->run(args); }, transport);
  }

  [[noreturn]] void abort_on_timeout(const std::string& what, double seconds) const {
    std::fprintf(stderr,
                 "zero: %s on rank %d of %d did not complete within %.0f s (ZERO_TIMEOUT_S=%g); "
                 "another rank probably skipped this collective or called a different one. "
                 "Aborting the job.\n",
                 what.c_str(), rank, size, seconds, options.timeout_seconds);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();
  }

  // A peer that is gone, or that left the communicator before this operation, will never take
  // part: end the job now instead of at the timeout.
  void abort_if_peer_left(const std::string& what, std::uint64_t operation) const {
    if (const std::optional<std::string> lost = peers->lost_peers()) {
      std::fprintf(stderr,
                   "zero: %s on rank %d of %d cannot complete: %s gone (killed or exited while "
                   "this rank waited). Aborting the job.\n",
                   what.c_str(), rank, size, lost->c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 4);
      std::abort();
    }
    if (const std::optional<std::string> left = departures->departed_before(operation)) {
      std::fprintf(stderr,
                   "zero: %s on rank %d of %d cannot complete: %s (this is its operation %llu "
                   "here). Aborting the job.\n",
                   what.c_str(), rank, size, left->c_str(),
                   static_cast<unsigned long long>(operation));
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 5);
      std::abort();
    }
  }
};

namespace {
// The world's state, for the two constructors that may have to initialise MPI first.
template <class State>
std::unique_ptr<State> world_state(int* argc, char*** argv) {
  initialize_mpi(argc, argv);
  return std::make_unique<State>(MPI_COMM_WORLD, CommOptions::from_environment());
}
} // namespace

MpiCommunicator::MpiCommunicator() : MpiCommunicator(world_state<State>(nullptr, nullptr)) {}
MpiCommunicator::MpiCommunicator(int& argc, char**& argv)
    : MpiCommunicator(world_state<State>(&argc, &argv)) {}
MpiCommunicator::MpiCommunicator(const boost::mpi::communicator& comm, CommOptions options)
    : MpiCommunicator(std::make_unique<State>(static_cast<MPI_Comm>(comm), options)) {}
MpiCommunicator::MpiCommunicator(std::unique_ptr<State> state)
    : state_(std::move(state)), rank_(state_->rank), size_(state_->size) {}

MpiCommunicator::MpiCommunicator(MpiCommunicator&&) noexcept = default;
MpiCommunicator& MpiCommunicator::operator=(MpiCommunicator&&) noexcept = default;
MpiCommunicator::~MpiCommunicator() = default;

const CommOptions& MpiCommunicator::options() const noexcept {
  return state_->options;
}
const char* MpiCommunicator::transport() const noexcept {
  constexpr const char* names[] = {"shm", "mpi", "hierarchical"};
  return names[state_->transport.index()];
}
int MpiCommunicator::nodes() const noexcept {
  return state_->nodes;
}
bool MpiCommunicator::quantizes_on_wire() const noexcept {
  return state_->transport.index() == 2;
}
int MpiCommunicator::ranks_per_node() const noexcept {
  return state_->ranks_per_node;
}
const std::vector<std::vector<int>>& MpiCommunicator::summation_order() const noexcept {
  return state_->summation_order;
}
MPI_Comm MpiCommunicator::native_handle() const noexcept {
  return state_->comm;
}

MpiCommunicator MpiCommunicator::split(int color, int key) {
  require(color >= 0, "split: color must be non-negative (every rank joins one group)");
  MPI_Comm part = MPI_COMM_NULL;
  // Ordered with this communicator's queued collectives: run it on the progress thread.
  state_->worker->run_and_wait(
      "split(" + std::to_string(color) + ", " + std::to_string(key) + ")", [&] {
        detail::arrive_together(state_->comm, "split", {}, detail::mpi_setup_spin);
        ZERO_CHECK_MPI(MPI_Comm_split(state_->comm, color, key, &part));
      });
  // As this one was asked for: the part picks its own transport and that transport's defaults.
  return MpiCommunicator(std::make_unique<State>(part, state_->requested, /*adopt=*/true));
}

Work MpiCommunicator::submit(const CollectiveArgs& args) {
  detail::ProgressWorker& worker = *state_->worker;
  if (args.payload_bytes(state_->size) < state_->options.inline_below_bytes && worker.idle())
    return Work(worker.run_here(args));
  return Work(worker.enqueue(args));
}

} // namespace zero
