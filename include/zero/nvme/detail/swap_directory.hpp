#pragma once
// SwapDirectory: `<nvme_path>/zero_swap/[<owner>/]rank<r>/`, owned by one tier at a time. A lock
// file in it (flock, held for the tier's lifetime, released by the kernel however the process ends)
// names its holder (host, pid and start time) and, below, every swap file the tier creates,
// recorded before the file is. Swap files found there while the lock is free belong to a run that
// did not exit cleanly (killed, or crashed past its destructors); they are refused, and deleted
// only when asked (remove_stale), since the directory may be on a path a person mistyped.
//
// nvme_path is often /tmp or a shared scratch disk, so the tree is private
// (core/directory_handle.hpp): each level is created 0700, opened without following links and
// required to be a directory of the effective user that no one else can write; everything below is
// reached through those descriptors. remove_stale deletes only what the lock file lists as this
// tier's swap files (regular files of this user); anything else is named and left alone.

#include "zero/core/directory_handle.hpp"
#include "zero/core/error.hpp"
#include "zero/nvme/detail/swap_file_state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace zero::detail {

inline constexpr const char* swap_lock_name = "zero.lock";
inline constexpr const char* swap_file_suffix = ".swp";
inline constexpr const char* swap_manifest_prefix = "swap "; // a lock file's line per swap file

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

// A lock file's lines (its first 1 MiB: the holder, then one line per swap file).
inline std::vector<std::string> read_lock_lines(int fd) {
  std::string text(std::size_t(1) << 20, '\0');
  const ssize_t got = ::pread(fd, text.data(), text.size(), 0);
  text.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

// The holder line of a lock file, or a placeholder when its writer died before writing it.
inline std::string read_holder(int fd) {
  const std::vector<std::string> lines = read_lock_lines(fd);
  std::string holder = lines.empty() ? "" : lines.front();
  while (!holder.empty() && holder.back() == '\0')
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
    nvme_path_ = nvme_path;
    const std::string rank_name = "rank" + std::to_string(rank);
    // A directory that another tier is just removing makes a step fail with ENOENT: start again.
    for (int attempt = 0; lock_fd_ < 0; ++attempt) {
      const bool last = attempt == 3;
      nvme_ = DirectoryHandle::open_named(nvme_path, "nvme_path");
      root_ = make_level(nvme_, "zero_swap", last);
      if (root_.is_open() && !owner.empty()) owner_ = make_level(root_, owner, last);
      const DirectoryHandle& parent = owner.empty() ? root_ : owner_;
      DirectoryHandle rank_directory;
      if (parent.is_open()) rank_directory = make_level(parent, rank_name, last);
      if (!rank_directory.is_open()) continue;
      directory_ = std::make_shared<const DirectoryHandle>(std::move(rank_directory));
      // Root ignores permission bits: writability shows only by creating something.
      lock_fd_ = ::openat(directory_->fd(), swap_lock_name,
                          O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (lock_fd_ < 0 && (errno != ENOENT || last)) {
        const int error = errno;
        remove_empty_directories();
        not_writable(*directory_ / swap_lock_name, error);
      }
    }
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      const std::string holder = read_holder(lock_fd_);
      ::close(lock_fd_);
      const bool here = holder.rfind("pid " + std::to_string(::getpid()) + " ", 0) == 0;
      fail(ErrorKind::invalid_argument,
           "swap directory " + path().string() + " is in use by another run (" + holder + ")" +
               (here ? ": another NvmeTier of this process uses the same nvme_path, owner and rank"
                     : ""));
    }
    claim(remove_stale, remove_stale_name);
  }
  SwapDirectory(const SwapDirectory&) = delete;
  SwapDirectory& operator=(const SwapDirectory&) = delete;

  // Removes the swap files this tier recorded (it removed them before, unless it failed), the lock
  // file, the directory, and the owner's directory and zero_swap/ when no other tier uses them.
  ~SwapDirectory() {
    for (const std::string& name : recorded_)
      ::unlinkat(directory_->fd(), name.c_str(), 0);
    ::unlinkat(directory_->fd(), swap_lock_name, 0);
    remove_empty_directories();
    ::close(lock_fd_); // last: another run may take the directory only once it is empty
  }

  const std::filesystem::path& path() const noexcept { return directory_->path(); }
  const std::shared_ptr<const DirectoryHandle>& directory() const noexcept { return directory_; }

  // Writes `name` (a swap file about to be created) into the lock file, so that remove_stale can
  // tell it from anything else should this run die.
  void record(const std::string& name) {
    if (!recorded_.insert(name).second) return;
    const std::string line = swap_manifest_prefix + name + "\n";
    errno = ENOSPC; // what a short write means
    if (::pwrite(lock_fd_, line.data(), line.size(), static_cast<off_t>(lock_bytes_)) !=
        static_cast<ssize_t>(line.size())) {
      recorded_.erase(name);
      fail(ErrorKind::io, "cannot write the lock file of swap directory " + path().string() + ": " +
                              system_text(errno));
    }
    lock_bytes_ += line.size();
  }

  // O_DIRECT accepted here (false on tmpfs before Linux 6.6).
  bool accepts_direct_io() const noexcept {
    const int fd = ::openat(directory_->fd(), swap_lock_name, O_RDONLY | O_DIRECT | O_NOFOLLOW);
    if (fd < 0) return false;
    ::close(fd);
    return true;
  }

 private:
  // A level of the tree, made private (0700) where missing; an empty handle where its parent was
  // removed meanwhile by another tier (unless this is the last attempt).
  DirectoryHandle make_level(const DirectoryHandle& parent, const std::string& name, bool last) {
    if (::mkdirat(parent.fd(), name.c_str(), 0700) != 0 && errno != EEXIST) {
      const int error = errno;
      if (error == ENOENT && !last) return {};
      remove_empty_directories(); // made before the disk was full
      not_writable(parent / name, error);
    }
    struct stat info {};
    if (!parent.status(name, info)) {
      if (!last) return {};
      not_writable(parent / name, ENOENT);
    }
    return parent.open_private_existing(
        name, "swap directory level",
        "Remove it if no job of yours uses it, or give the NVMe tier an nvme_path of your own "
        "(a per-user directory such as /local_nvme/$USER)");
  }

  // This tier's directories, where empty (another tier's files keep the shared ones).
  void remove_empty_directories() const noexcept {
    const std::string rank_name = directory_ ? directory_->path().filename().string() : "";
    const DirectoryHandle& parent = owner_.is_open() ? owner_ : root_;
    if (directory_ && parent.is_open()) parent.remove_empty_directory(rank_name);
    if (owner_.is_open() && root_.is_open())
      root_.remove_empty_directory(owner_.path().filename().string());
    if (root_.is_open() && nvme_.is_open()) nvme_.remove_empty_directory("zero_swap");
  }

  [[noreturn]] void not_writable(const std::filesystem::path& what, int error) const {
    if (error == ENOSPC || error == EDQUOT) // writable, but full
      fail(ErrorKind::io, "nvme_path " + nvme_path_.string() + " is full: creating " +
                              what.string() + " failed: " + system_text(error));
    fail(ErrorKind::invalid_argument,
         "nvme_path " + nvme_path_.string() + " is not writable: creating " + what.string() +
             " failed: " + system_text(error) +
             "; the NVMe tier needs a directory it can create swap files in");
  }

  // With the lock held: refuse (or delete) what a dead run left, then write ourselves in.
  void claim(bool remove_stale, const std::string& remove_stale_name) {
    std::vector<std::string> stale = directory_->entries();
    std::erase(stale, std::string(swap_lock_name));
    if (!stale.empty()) {
      std::sort(stale.begin(), stale.end());
      const std::string holder = read_holder(lock_fd_);
      // What the dead run's lock file lists: its swap files, which only zero makes here.
      std::set<std::string> listed;
      for (const std::string& line : read_lock_lines(lock_fd_))
        if (line.starts_with(swap_manifest_prefix))
          listed.insert(line.substr(std::string(swap_manifest_prefix).size()));
      std::vector<std::string> ours, foreign;
      for (const std::string& name : stale)
        (is_our_swap_file(name, listed) ? ours : foreign).push_back(name);
      const std::string dead_run =
          "left by a run that did not exit cleanly (" + holder + "; it no longer holds the lock)";
      if (!remove_stale) {
        ::close(lock_fd_);
        fail(ErrorKind::invalid_argument,
             "swap directory " + path().string() + " holds " + list(stale, "file(s)") + " " +
                 dead_run + ". Delete the directory if no job is using it, or set " +
                 remove_stale_name + " = true to have the NVMe tier delete " +
                 (foreign.empty() ? "them" : "the swap files its lock file lists"));
      }
      for (const std::string& name : ours)
        directory_->remove_file(name);
      if (!ours.empty())
        log_error("removed from swap directory " + path().string() + " " + list(ours, "file(s)") +
                  " " + dead_run);
      if (!foreign.empty()) {
        ::close(lock_fd_);
        fail(ErrorKind::invalid_argument,
             "swap directory " + path().string() + " holds " + list(foreign, "entr(ies)") +
                 " that zero did not make (not swap files its lock file lists, or not regular "
                 "files of this user): " +
                 remove_stale_name +
                 " deletes only zero's own swap files, and left these alone. Move them away if "
                 "they are yours, then start again");
      }
    }
    const std::string us = describe_this_process() + "\n";
    errno = ENOSPC; // what a short write means
    if (::ftruncate(lock_fd_, 0) != 0 ||
        ::pwrite(lock_fd_, us.data(), us.size(), 0) != static_cast<ssize_t>(us.size())) {
      const int error = errno;
      // A full disk: leave nothing behind.
      ::unlinkat(directory_->fd(), swap_lock_name, 0);
      remove_empty_directories();
      ::close(lock_fd_);
      fail(ErrorKind::io, "cannot write the lock file of swap directory " + path().string() + ": " +
                              system_text(error));
    }
    lock_bytes_ = us.size();
  }

  // A swap file this tier's lock file lists, still a regular file of this user (not a link, a
  // directory, or something another process put there under the same name).
  bool is_our_swap_file(const std::string& name, const std::set<std::string>& listed) const {
    struct stat info {};
    return listed.contains(name) && name.ends_with(swap_file_suffix) &&
           directory_->status(name, info) && S_ISREG(info.st_mode) && info.st_uid == ::geteuid();
  }

  static std::string list(const std::vector<std::string>& names, const std::string& noun) {
    std::string text = std::to_string(names.size()) + " " + noun + " (";
    for (std::size_t i = 0; i < names.size() && i < 5; ++i)
      text += (i > 0 ? ", " : "") + names[i];
    return text + (names.size() > 5 ? ", ...)" : ")");
  }

  std::filesystem::path nvme_path_;
  DirectoryHandle nvme_;  // nvme_path, as named
  DirectoryHandle root_;  // <nvme_path>/zero_swap
  DirectoryHandle owner_; // root_/<owner>, or none
  std::shared_ptr<const DirectoryHandle> directory_;
  int lock_fd_ = -1;
  std::size_t lock_bytes_ = 0;
  std::set<std::string> recorded_;
};

} // namespace zero::detail
