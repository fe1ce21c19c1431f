#pragma once
// SwapDirectory: `<nvme_path>/zero_swap/[<owner>/]rank<r>/`, owned by one tier at a time. A lock
// file in it (flock, held for the tier's lifetime, released by the kernel however the process ends)
// names its holder: host, pid and start time. Swap files found there while the lock is free belong
// to a run that did not exit cleanly (killed, or crashed past its destructors); they are refused,
// and deleted only when asked (remove_stale), since the directory may be on a path a person
// mistyped.

#include "zero/core/error.hpp"
#include "zero/offload/detail/swap_file_state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace zero::detail {

inline constexpr const char* swap_lock_name = "zero.lock";

inline std::string describe_this_process() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char started[32] = {};
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return "pid " + std::to_string(::getpid()) + " on host " + host + ", started " + started;
}

// The holder line of a lock file, or a placeholder when its writer died before writing it.
inline std::string read_holder(int fd) {
  char text[512] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  std::string holder(text, got > 0 ? static_cast<std::size_t>(got) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0'))
    holder.pop_back();
  return holder.empty() ? "holder unknown" : holder;
}

class SwapDirectory {
 public:
  SwapDirectory(const std::filesystem::path& nvme_path, const std::string& owner, int rank,
                bool remove_stale, const std::string& remove_stale_name = "remove_stale") {
    namespace fs = std::filesystem;
    require(rank >= 0, "NvmeTier: rank must be >= 0, got " + std::to_string(rank));
    require(owner.find('/') == std::string::npos && owner != "." && owner != "..",
            "NvmeTier: the owner \"" + owner + "\" must be a plain directory name (without '/')");
    std::error_code ec;
    const fs::file_status status = fs::status(nvme_path, ec);
    if (!fs::exists(status))
      fail(ErrorKind::invalid_argument,
           "nvme_path " + nvme_path.string() +
               " does not exist; the NVMe tier needs an existing directory for its swap files");
    if (!fs::is_directory(status))
      fail(ErrorKind::invalid_argument, "nvme_path " + nvme_path.string() +
                                            " is not a directory; the NVMe tier needs a directory "
                                            "for its swap files");
    root_ = nvme_path / "zero_swap";
    owner_ = owner.empty() ? root_ : root_ / owner;
    path_ = owner_ / ("rank" + std::to_string(rank));
    // Root ignores permission bits: writability shows only by creating something. The lock file
    // is that test; a directory that another tier is just removing makes it fail with ENOENT.
    try {
      for (int attempt = 0; lock_fd_ < 0; ++attempt) {
        make_directory(nvme_path, root_);
        make_directory(nvme_path, owner_);
        make_directory(nvme_path, path_);
        lock_fd_ = ::open((path_ / swap_lock_name).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lock_fd_ < 0 && (errno != ENOENT || attempt == 3))
          not_writable(nvme_path, path_, errno);
      }
    } catch (...) {
      remove_empty_directories(); // made before the disk was full
      throw;
    }
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      const std::string holder = read_holder(lock_fd_);
      ::close(lock_fd_);
      const bool here = holder.rfind("pid " + std::to_string(::getpid()) + " ", 0) == 0;
      fail(ErrorKind::invalid_argument,
           "swap directory " + path_.string() + " is in use by another run (" + holder + ")" +
               (here ? ": another NvmeTier of this process uses the same nvme_path, owner and rank"
                     : ""));
    }
    claim(remove_stale, remove_stale_name);
  }
  SwapDirectory(const SwapDirectory&) = delete;
  SwapDirectory& operator=(const SwapDirectory&) = delete;

  // Removes whatever is left in the directory (the tier removed its swap files before), the lock
  // file, the directory, and the owner's directory and zero_swap/ when no other tier uses them.
  ~SwapDirectory() {
    remove_files();
    ::unlink((path_ / swap_lock_name).c_str());
    ::rmdir(path_.c_str());
    if (owner_ != root_) ::rmdir(owner_.c_str());
    ::rmdir(root_.c_str());
    ::close(lock_fd_); // last: another run may take the directory only once it is empty
  }

  const std::filesystem::path& path() const noexcept { return path_; }

  // Every entry but the lock file.
  void remove_files() noexcept {
    for (const std::filesystem::path& entry : entries()) {
      std::error_code ignored;
      std::filesystem::remove_all(path_ / entry, ignored);
    }
  }

  // The names of the entries other than the lock file.
  std::vector<std::filesystem::path> entries() const noexcept {
    std::vector<std::filesystem::path> names;
    std::error_code ec;
    try {
      for (std::filesystem::directory_iterator it(path_, ec), end; !ec && it != end;
           it.increment(ec))
        if (it->path().filename() != swap_lock_name) names.push_back(it->path().filename());
    } catch (...) { // out of memory: report what was found so far
    }
    return names;
  }

 private:
  static void make_directory(const std::filesystem::path& nvme_path,
                             const std::filesystem::path& directory) {
    if (::mkdir(directory.c_str(), 0755) == 0 || errno == EEXIST) return;
    not_writable(nvme_path, directory, errno);
  }

  // This tier's directories, where empty (another tier's files keep the shared ones).
  void remove_empty_directories() const noexcept {
    for (const auto* directory : {&path_, &owner_, &root_})
      ::rmdir(directory->c_str());
  }

  [[noreturn]] static void not_writable(const std::filesystem::path& nvme_path,
                                        const std::filesystem::path& what, int error) {
    if (error == ENOSPC || error == EDQUOT) // writable, but full
      fail(ErrorKind::io, "nvme_path " + nvme_path.string() + " is full: creating " +
                              what.string() + " failed: " + errno_text(error));
    fail(ErrorKind::invalid_argument,
         "nvme_path " + nvme_path.string() + " is not writable: creating " + what.string() +
             " failed: " + errno_text(error) +
             "; the NVMe tier needs a directory it can create swap files in");
  }

  // With the lock held: refuse (or delete) what a dead run left, then write ourselves in.
  void claim(bool remove_stale, const std::string& remove_stale_name) {
    const std::vector<std::filesystem::path> stale = entries();
    if (!stale.empty()) {
      const std::string holder = read_holder(lock_fd_);
      const std::string what = std::to_string(stale.size()) + " file(s) (" +
                               stale.front().string() + (stale.size() > 1 ? ", ..." : "") +
                               ") left by a run that did not exit cleanly (" + holder +
                               "; it no longer holds the lock)";
      if (!remove_stale) {
        ::close(lock_fd_);
        fail(ErrorKind::invalid_argument,
             "swap directory " + path_.string() + " holds " + what +
                 ". Delete the directory if no job is using it, or set " + remove_stale_name +
                 " = true to have the NVMe tier delete them");
      }
      remove_files();
      log_error("removed from swap directory " + path_.string() + " " + what);
    }
    const std::string us = describe_this_process() + "\n";
    errno = ENOSPC; // what a short write means
    if (::ftruncate(lock_fd_, 0) != 0 ||
        ::pwrite(lock_fd_, us.data(), us.size(), 0) != static_cast<ssize_t>(us.size())) {
      const int error = errno;
      // A full disk: leave nothing behind.
      ::unlink((path_ / swap_lock_name).c_str());
      remove_empty_directories();
      ::close(lock_fd_);
      fail(ErrorKind::io, "cannot write the lock file of swap directory " + path_.string() + ": " +
                              errno_text(error));
    }
  }

  std::filesystem::path root_;  // <nvme_path>/zero_swap
  std::filesystem::path owner_; // root_, or root_/<owner>
  std::filesystem::path path_;
  int lock_fd_ = -1;
};

} // namespace zero::detail
