#pragma once
// Departures: a rank that leaves a communicator tells its peers, so that a peer waiting for it in
// an operation it will never join ends the job within seconds, naming that rank and the last error
// zero raised there, instead of waiting for the watchdog's timeout (ZERO_TIMEOUT_S).
//
// The case it exists for: one rank meets an error its peers do not (a bad input seen there only);
// the program catches it, prints it and returns from main. Its communicators are destroyed on the
// way out while its peers wait in the next collective; the process stays alive (in the teardown,
// or in MPI_Finalize), so PeerLiveness, which looks for processes that are gone, cannot tell.
//
// Each communicator keeps a duplicate for notices. A departing rank sends each peer one notice: how
// many operations it completed and the last error zero raised in its process. A peer's watchdog
// receives notices while an operation is slow: one from a rank that completed fewer operations than
// the running one's number says that rank will never take part. At an orderly teardown every rank
// departs, and each receives all its peers' notices before anything is freed (the wait sleeps
// between looks); that wait is also the teardown's barrier. A rank unwinding from an error does
// not wait: it frees the duplicate at once and leaves its collective frees undone (the
// shared-memory window), and its notice says so, so that peers ending in order leave theirs undone
// too instead of waiting in them for a rank that never comes. Each notice names the instance of the
// communicator it was sent on (numbers exchanged when it was built), so that a late one reaching a
// later communicator that reuses the context is recognised and dropped.

#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/detail/mpi_wait.hpp"
#include "zero/core/error.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace zero::detail {

class Departures {
 public:
  // Collective over `comm`: duplicates it for the notices, and the ranks exchange the numbers
  // their notices will carry.
  Departures(MPI_Comm comm, int rank, int size)
      : rank_(rank), instances_(static_cast<std::size_t>(size)),
        left_(static_cast<std::size_t>(size)) {
    MPI_Request request = MPI_REQUEST_NULL;
    ZERO_CHECK_MPI(MPI_Comm_idup(comm, &notices_, &request));
    wait_for(request, "duplicating the communicator for departure notices", {}, mpi_setup_spin);
    try {
      ZERO_CHECK_MPI(MPI_Comm_set_errhandler(notices_, MPI_ERRORS_RETURN));
      instance_ = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}() ^
                  static_cast<std::uint64_t>(::getpid());
      ZERO_CHECK_MPI(MPI_Iallgather(&instance_, 1, MPI_UINT64_T, instances_.data(), 1, MPI_UINT64_T,
                                    notices_, &request));
      wait_for(request, "exchanging the departure notices' numbers", {}, mpi_setup_spin);
    } catch (...) {
      MPI_Comm_free(&notices_); // the destructor does not run for an object never built
      throw;
    }
  }
  Departures(const Departures&) = delete;
  Departures& operator=(const Departures&) = delete;

  // Sends still in flight keep their buffer (MPI still reads it); freeing the duplicate does not
  // wait for peers.
  ~Departures() {
    if (finalized()) return;
    if (!sends_complete()) {
      for (MPI_Request& r : sends_)
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      (void)notice_.release();
    }
    ZERO_LOG_MPI(MPI_Comm_free(&notices_));
  }

  // Tells every peer that this rank leaves after `completed` operations, and whether it leaves its
  // collective frees undone (`abandons`: it unwinds from an error seen here only, or the process
  // exits). The first call counts.
  void announce(std::uint64_t completed, bool abandons) noexcept {
    if (announced_.exchange(true) || finalized()) return;
    notice_ = std::make_unique<Notice>();
    notice_->completed = completed;
    notice_->abandons = abandons ? 1 : 0;
    notice_->pid = static_cast<std::int64_t>(::getpid());
    MPI_Comm_rank(MPI_COMM_WORLD, &notice_->world_rank);
    ::gethostname(notice_->host.data(), notice_->host.size() - 1);
    last_error().copy_to(notice_->error);
    notice_->instance = instance_;
    const int size = static_cast<int>(left_.size());
    for (int r = 0; r < size; ++r) {
      if (r == rank_) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      if (MPI_Isend(notice_.get(), sizeof(Notice), MPI_BYTE, r, tag, notices_, &request) ==
          MPI_SUCCESS)
        sends_.push_back(request);
    }
  }

  // The peers that left after completing fewer than `operation` operations, described for a
  // message ("rank 2 (world rank 2, pid 1234 on host n1) left after 17 operations; the last error
  // zero raised there: ..."), or nothing. Takes the notices that arrived; never waits.
  std::optional<std::string> departed_before(std::uint64_t operation) {
    std::lock_guard lock(mutex_);
    receive_arrived();
    std::string text;
    for (std::size_t r = 0; r < left_.size(); ++r) {
      if (!left_[r] || left_[r]->completed >= operation) continue;
      const Notice& n = *left_[r];
      if (!text.empty()) text += "; ";
      text += "rank " + std::to_string(r) + " (world rank " + std::to_string(n.world_rank) +
              ", pid " + std::to_string(n.pid) + " on host " + n.host.data() + ") left after " +
              std::to_string(n.completed) + " operations and will not take part";
      text += n.error[0] != '\0'
                  ? std::string("; the last error zero raised there: ") + n.error.data()
                  : std::string(" (zero raised no error there)");
    }
    if (text.empty()) return std::nullopt;
    return text;
  }

  // After wait_for_peers: whether a peer left its collective frees undone, so that waiting in one
  // here would wait for it forever.
  bool a_peer_abandons() {
    std::lock_guard lock(mutex_);
    return std::any_of(left_.begin(), left_.end(),
                       [](const std::optional<Notice>& n) { return n && n->abandons != 0; });
  }

  // The orderly end, after announce(): waits until every peer has left too, sleeping between looks
  // as zero's other waits outside the pipeline do (detail/mpi_wait.hpp). False after
  // `timeout_seconds`, with the peers still there in `missing` ("1, 3").
  bool wait_for_peers(double timeout_seconds, std::string& missing) {
    const auto start = std::chrono::steady_clock::now();
    auto pause = mpi_wait_first_sleep;
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        receive_arrived();
        if (all_peers_left() && sends_complete()) return true;
      }
      const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
      if (waited.count() > timeout_seconds) {
        std::lock_guard lock(mutex_);
        for (std::size_t r = 0; r < left_.size(); ++r)
          if (static_cast<int>(r) != rank_ && !left_[r])
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        return false;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, mpi_wait_longest_sleep);
    }
  }

 private:
  struct Notice {
    std::uint64_t instance = 0;  // the communicator's, as the sender numbered it
    std::uint64_t completed = 0; // operations the sender completed on the communicator
    std::int64_t pid = 0;
    int world_rank = 0;
    std::uint8_t abandons = 0; // the sender leaves its collective frees undone
    std::array<char, 64> host{};
    std::array<char, 1024> error{}; // the last error zero raised in the sender's process
  };
  static constexpr int tag = 1;

  static bool finalized() noexcept {
    int done = 0;
    MPI_Finalized(&done);
    return done != 0;
  }

  void receive_arrived() {
    for (;;) {
      int arrived = 0;
      MPI_Status status{};
      if (MPI_Iprobe(MPI_ANY_SOURCE, tag, notices_, &arrived, &status) != MPI_SUCCESS || !arrived)
        return;
      // Called on the watchdog's thread and from a destructor: an error here must not throw. A
      // notice that cannot be read is lost; the watchdog's timeout still ends the wait.
      Notice n;
      if (MPI_Recv(&n, sizeof(Notice), MPI_BYTE, status.MPI_SOURCE, tag, notices_,
                   MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return;
      n.host.back() = '\0';
      n.error.back() = '\0';
      const auto from = static_cast<std::size_t>(status.MPI_SOURCE);
      if (n.instance == instances_[from]) left_[from] = n; // else sent to a freed predecessor
    }
  }

  bool all_peers_left() const noexcept {
    for (std::size_t r = 0; r < left_.size(); ++r)
      if (static_cast<int>(r) != rank_ && !left_[r]) return false;
    return true;
  }

  bool sends_complete() noexcept {
    if (sends_.empty()) return true;
    int done = 0;
    MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  }

  int rank_ = 0;
  MPI_Comm notices_ = MPI_COMM_NULL;
  std::uint64_t instance_ = 0;
  std::vector<std::uint64_t> instances_; // each rank's number for this communicator
  std::atomic<bool> announced_{false};
  std::unique_ptr<Notice> notice_; // this rank's, read by MPI until its sends complete
  std::vector<MPI_Request> sends_;
  std::mutex mutex_;                        // the watchdog's thread and the teardown both receive
  std::vector<std::optional<Notice>> left_; // each peer's notice, once it arrived
};

} // namespace zero::detail
