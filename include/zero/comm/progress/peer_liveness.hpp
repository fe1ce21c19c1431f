#pragma once
// PeerLiveness: whether the other ranks of a communicator still exist, for the watchdog.
//
// A rank that dies (killed, crashed) in the middle of a collective leaves its peers waiting for
// data that never comes. Launchers usually end the whole job then (mpirun does), but when one does
// not (mpirun --enable-recovery, a scheduler told to keep the survivors) the peers would wait until
// ZERO_TIMEOUT_S and could only guess at the cause. A peer that runs under the same kernel and in
// the same PID namespace (the same boot id and namespace inode: process ids mean the same process
// there) is checked by its process id, so a waiting rank names the lost peer within a second.
// Peers elsewhere are left to the timeout.

#include "zero/comm/detail/mpi_check.hpp"
#include "zero/comm/detail/mpi_wait.hpp"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace zero::detail {

class PeerLiveness {
 public:
  // Collective over `comm`: every rank tells the others who it is.
  PeerLiveness(MPI_Comm comm, int rank) : rank_(rank) {
    Identity me{};
    me.pid = static_cast<std::int64_t>(::getpid());
    ZERO_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &me.world_rank));
    ::gethostname(me.host.data(), me.host.size() - 1);
    const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
    const std::string pid_namespace = read_link("/proc/self/ns/pid");
    if (!boot.empty() && !pid_namespace.empty()) copy_text(me.kernel, boot + "/" + pid_namespace);
    int size = 0;
    ZERO_CHECK_MPI(MPI_Comm_size(comm, &size));
    peers_.resize(static_cast<std::size_t>(size));
    MPI_Request request = MPI_REQUEST_NULL;
    ZERO_CHECK_MPI(MPI_Iallgather(&me, sizeof(Identity), MPI_BYTE, peers_.data(), sizeof(Identity),
                                  MPI_BYTE, comm, &request));
    wait_for(request, "exchanging process identities", {}, mpi_setup_spin);
    const bool knows_itself = me.kernel[0] != '\0';
    for (auto& p : peers_)
      p.checkable = knows_itself && std::strcmp(p.kernel.data(), me.kernel.data()) == 0;
  }

  // "rank 2 (world rank 2, pid 1234 on host n1)" for every peer found gone, joined by ", "; or
  // nothing. All of them: the first rank to notice aborts, and then is gone too.
  std::optional<std::string> lost_peers() const {
    std::string lost;
    int count = 0;
    for (std::size_t r = 0; r < peers_.size(); ++r) {
      const Identity& p = peers_[r];
      if (static_cast<int>(r) == rank_ || !p.checkable || alive(p.pid)) continue;
      lost += (count++ > 0 ? ", rank " : "rank ") + std::to_string(r) + " (world rank " +
              std::to_string(p.world_rank) + ", pid " + std::to_string(p.pid) + " on host " +
              p.host.data() + ")";
    }
    if (count == 0) return std::nullopt;
    return (count == 1 ? "peer " : "peers ") + lost + (count == 1 ? " is" : " are");
  }

 private:
  struct Identity {
    std::int64_t pid = 0;
    int world_rank = 0;
    bool checkable = false; // filled in locally after the exchange
    std::array<char, 64> host{};
    std::array<char, 96> kernel{}; // boot id and PID namespace: where `pid` means this process
  };

  // A process that exited but is not yet reaped by its parent (a zombie) is gone too.
  static bool alive(std::int64_t pid) {
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true; // no /proc: trust kill()
    const auto close = line.rfind(')');         // the command name may hold spaces
    if (close == std::string::npos || close + 2 >= line.size()) return true;
    const char state = line[close + 2];
    return state != 'Z' && state != 'X';
  }

  static std::string read_first_line(const char* path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
  }
  static std::string read_link(const char* path) {
    std::array<char, 64> target{};
    const ssize_t n = ::readlink(path, target.data(), target.size() - 1);
    return n > 0 ? std::string(target.data(), static_cast<std::size_t>(n)) : std::string();
  }
  template <std::size_t N>
  static void copy_text(std::array<char, N>& to, const std::string& text) {
    if (text.size() >= N) return; // unknown: never checked
    std::copy(text.begin(), text.end(), to.begin());
  }

  int rank_ = 0;
  std::vector<Identity> peers_;
};

} // namespace zero::detail
