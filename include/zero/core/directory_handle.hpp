#pragma once
// DirectoryHandle: a directory opened once and then used only through its descriptor (openat,
// mkdirat, unlinkat, renameat), so that a path another local user changes after zero looked at it
// cannot redirect zero's writes and deletions.
//
// Swap files, checkpoints and outputs often go under /tmp or a shared scratch disk, where anyone
// can create entries. The rules (docs/reliability.md, "Shared file systems"):
//   - A directory the user names is trusted as named: links on its way are followed (an
//     administrator may link a scratch disk), except its last component where the folder holding
//     it is writable by others. A link there may have been planted, and is refused.
//   - What zero writes and deletes in lives in private directories: each is a directory (never a
//     link), owned by the effective user and writable by no one else, checked on the open
//     descriptor. Another user can then neither add nor swap an entry in it.
//   - Files are created with O_CREAT | O_EXCL | O_NOFOLLOW (a name someone planted is an error,
//     never followed or truncated), renamed within one directory, and removed with unlinkat
//     without following links; a tree is removed only through directories the user owns.

#include "zero/core/error.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace zero {

namespace detail {

// "alice (uid 1000)", or "uid 1000" for a uid without a name.
inline std::string user_name(uid_t uid) {
  struct passwd entry {};
  struct passwd* found = nullptr;
  char text[1024];
  if (::getpwuid_r(uid, &entry, text, sizeof text, &found) == 0 && found)
    return std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  return "uid " + std::to_string(uid);
}

inline std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Whether someone other than this process's user (or root, who can do anything anyway) can
// create or rename entries in a directory with this status.
inline bool others_can_write(const struct stat& info) {
  const uid_t me = ::geteuid();
  return (info.st_mode & (S_IWGRP | S_IWOTH)) != 0 || (info.st_uid != me && info.st_uid != 0);
}

} // namespace detail

class DirectoryHandle {
 public:
  DirectoryHandle() = default;

  // The directory at `path`, as a user named it; with `create_mode`, missing levels are created
  // with that mode (less the umask). The last component is not followed where it is a link in a
  // folder others can write. `what` names the directory in errors ("nvme_path", "checkpoint").
  static DirectoryHandle open_named(const std::filesystem::path& path, const std::string& what,
                                    int create_mode = -1) {
    require(!path.empty(), what + ": the path is empty");
    const std::filesystem::path absolute = std::filesystem::absolute(path).lexically_normal();
    DirectoryHandle at = open_root(absolute.root_path());
    for (const std::filesystem::path& part : absolute.relative_path()) {
      if (part.empty() || part == ".") continue; // a trailing '/'
      at = at.open_step(part.string(), what, path, create_mode);
    }
    at.path_ = absolute;
    return at;
  }

  DirectoryHandle(DirectoryHandle&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
  DirectoryHandle& operator=(DirectoryHandle&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
      path_ = std::move(other.path_);
    }
    return *this;
  }
  DirectoryHandle(const DirectoryHandle&) = delete;
  DirectoryHandle& operator=(const DirectoryHandle&) = delete;
  ~DirectoryHandle() { close(); }

  bool is_open() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

  // Refuses this directory unless it is private: owned by the effective user, writable by no one
  // else. `advice` says what to do instead.
  void require_private(const std::string& what, const std::string& advice) const {
    struct stat info {};
    if (::fstat(fd_, &info) != 0)
      fail(ErrorKind::io,
           what + " " + path_.string() + ": cannot stat: " + detail::system_text(errno));
    const uid_t me = ::geteuid();
    std::string problem;
    if (info.st_uid != me)
      problem = "is owned by " + detail::user_name(info.st_uid) + ", not by " +
                detail::user_name(me) + " who runs zero";
    else if (info.st_mode & (S_IWGRP | S_IWOTH))
      problem =
          std::string("is writable by ") + ((info.st_mode & S_IWOTH) ? "every user" : "its group");
    if (problem.empty()) return;
    fail(ErrorKind::invalid_argument,
         what + " " + path_.string() + " " + problem + " (owner " + detail::user_name(info.st_uid) +
             ", mode " + detail::mode_text(info.st_mode) +
             "): another user could replace the files zero writes and deletes there. " + advice);
  }

  // The subdirectory `name`, created with `mode` where missing, and required to be private (a
  // link or anything else under that name is refused, never followed).
  DirectoryHandle open_private(const std::string& name, mode_t mode, const std::string& what,
                               const std::string& advice) const {
    check_name(name);
    if (::mkdirat(fd_, name.c_str(), mode) != 0 && errno != EEXIST)
      fail_at(errno, "cannot create", name);
    DirectoryHandle child = open_existing_child(name, what);
    child.require_private(what, advice);
    return child;
  }

  // A subdirectory that must exist, required to be private.
  DirectoryHandle open_private_existing(const std::string& name, const std::string& what,
                                        const std::string& advice) const {
    check_name(name);
    DirectoryHandle child = open_existing_child(name, what);
    child.require_private(what, advice);
    return child;
  }

  // openat without following a link; `flags` may hold O_CREAT (O_EXCL is added: a name that
  // exists, a planted one included, fails with EEXIST). Returns -1 with errno set on failure.
  int open_file(const std::string& name, int flags, mode_t mode = 0600) const noexcept {
    if (flags & O_CREAT) flags |= O_EXCL;
    return ::openat(fd_, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  }

  // The entry's status, not following a link; false where it does not exist.
  bool status(const std::string& name, struct stat& info) const noexcept {
    return ::fstatat(fd_, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0;
  }
  bool contains(const std::string& name) const noexcept {
    struct stat info {};
    return status(name, info);
  }

  // The names of its entries (without "." and "..").
  std::vector<std::string> entries() const {
    const int copy = ::openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* listing = copy >= 0 ? ::fdopendir(copy) : nullptr;
    if (!listing) {
      const int error = errno;
      if (copy >= 0) ::close(copy);
      fail(ErrorKind::io, "cannot list " + path_.string() + ": " + detail::system_text(error));
    }
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(listing)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(listing);
    return names;
  }

  // Removes a file (or link: the link itself) named `name`; false where it was not there.
  bool remove_file(const std::string& name) const {
    if (::unlinkat(fd_, name.c_str(), 0) == 0) return true;
    if (errno == ENOENT) return false;
    fail_at(errno, "cannot remove", name);
  }
  // Removes an empty subdirectory; false where it is missing or not empty.
  bool remove_empty_directory(const std::string& name) const noexcept {
    return ::unlinkat(fd_, name.c_str(), AT_REMOVEDIR) == 0;
  }

  // Removes `name` and, for a directory, everything in it: links are removed, never followed, and
  // a directory is entered only when it is private to this user. Missing: nothing to do.
  void remove_tree(const std::string& name) const {
    struct stat info {};
    if (!status(name, info)) return;
    if (S_ISDIR(info.st_mode)) {
      const DirectoryHandle child =
          open_private_existing(name, "directory",
                                "zero removes only what it made; remove it "
                                "yourself if it is yours");
      for (const std::string& entry : child.entries())
        child.remove_tree(entry);
      if (::unlinkat(fd_, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
        fail_at(errno, "cannot remove", name);
      return;
    }
    remove_file(name);
  }

  // Renames an entry within this directory (replacing `to`, never following it).
  void rename(const std::string& from, const std::string& to) const {
    if (::renameat(fd_, from.c_str(), fd_, to.c_str()) != 0)
      fail(ErrorKind::io, "cannot rename " + (path_ / from).string() + " to " +
                              (path_ / to).string() + ": " + detail::system_text(errno));
  }

  // fsync: what makes the names created or renamed here durable.
  void sync() const {
    if (::fsync(fd_) != 0)
      fail(ErrorKind::io,
           "cannot flush (fsync) " + path_.string() + ": " + detail::system_text(errno));
  }

  // Writes `pieces` to `name` whole: under a fresh temporary name (O_EXCL, unpredictable), flushed,
  // then renamed over `name`. Readers see the old file or the new one; a failure (a full disk)
  // leaves neither the temporary nor a part, with an error that names the file and the reason.
  // The directory itself is synced by the caller where the rename must be durable.
  void write_file_atomically(const std::string& name,
                             std::span<const std::span<const std::byte>> pieces) const {
    check_name(name);
    auto [fd, temporary] = create_temporary(name);
    int error = 0;
    for (const std::span<const std::byte> piece : pieces) {
      for (std::size_t done = 0; error == 0 && done < piece.size();) {
        const ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
          error = n < 0 ? errno : ENOSPC;
        else
          done += static_cast<std::size_t>(n);
      }
    }
    if (error == 0 && ::fsync(fd) != 0) error = errno;
    if (::close(fd) != 0 && error == 0) error = errno;
    if (error == 0 && ::renameat(fd_, temporary.c_str(), fd_, name.c_str()) != 0) error = errno;
    if (error != 0) {
      ::unlinkat(fd_, temporary.c_str(), 0);
      fail(ErrorKind::io,
           "cannot write " + (path_ / name).string() + ": " + detail::system_text(error));
    }
  }

  // A new file ".NAME.XXXXXX.tmp" (random letters), opened for writing; its descriptor and name.
  std::pair<int, std::string> create_temporary(const std::string& name) const {
    static constexpr char letters[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::random_device seed;
    std::mt19937 random(seed());
    for (int attempt = 0; attempt < 64; ++attempt) {
      std::string temporary = "." + name + ".";
      for (int i = 0; i < 6; ++i)
        temporary += letters[random() % (sizeof letters - 1)];
      temporary += ".tmp";
      const int fd = open_file(temporary, O_WRONLY | O_CREAT, 0644);
      if (fd >= 0) return {fd, temporary};
      if (errno != EEXIST) fail_at(errno, "cannot create", temporary);
    }
    fail(ErrorKind::io, "cannot create a temporary file for " + (path_ / name).string() +
                            ": 64 random names were all taken");
  }

 private:
  DirectoryHandle(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}

  static DirectoryHandle open_root(const std::filesystem::path& root) {
    const int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
      fail(ErrorKind::io, "cannot open " + root.string() + ": " + detail::system_text(errno));
    return {fd, root};
  }

  // One level of open_named: `name` inside this directory.
  DirectoryHandle open_step(const std::string& name, const std::string& what,
                            const std::filesystem::path& named, int create_mode) const {
    struct stat here {};
    if (::fstat(fd_, &here) != 0) fail_at(errno, "cannot stat", ".");
    const bool untrusted = detail::others_can_write(here);
    if (create_mode >= 0 && ::mkdirat(fd_, name.c_str(), static_cast<mode_t>(create_mode)) != 0 &&
        errno != EEXIST) {
      const int error = errno;
      fail(error == ENOSPC || error == EDQUOT ? ErrorKind::io : ErrorKind::invalid_argument,
           what + " " + named.string() + ": cannot create " + (path_ / name).string() + ": " +
               detail::system_text(error));
    }
    const int fd = ::openat(fd_, name.c_str(),
                            O_RDONLY | O_DIRECTORY | O_CLOEXEC | (untrusted ? O_NOFOLLOW : 0));
    if (fd >= 0) return {fd, path_ / name};
    const int error = errno;
    struct stat info {};
    const bool exists = status(name, info);
    if (exists && S_ISLNK(info.st_mode) && untrusted)
      fail(ErrorKind::invalid_argument,
           what + " " + named.string() + ": " + (path_ / name).string() + " is a symbolic link" +
               link_target(name) + " in " + path_.string() + ", which others can write (mode " +
               detail::mode_text(here.st_mode) +
               "); zero does not follow a link that anyone could have planted. Name the "
               "directory it points to instead");
    if (!exists)
      fail(ErrorKind::invalid_argument,
           what + " " + named.string() + " does not exist" +
               (path_ / name == named ? "" : " (" + (path_ / name).string() + " is missing)"));
    if (error == ENOTDIR)
      fail(ErrorKind::invalid_argument,
           what + " " + named.string() + " is not a directory" +
               (path_ / name == named ? "" : " (" + (path_ / name).string() + " is not one)"));
    fail(ErrorKind::invalid_argument, what + " " + named.string() + ": cannot open " +
                                          (path_ / name).string() + ": " +
                                          detail::system_text(error));
  }

  DirectoryHandle open_existing_child(const std::string& name, const std::string& what) const {
    const int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) return {fd, path_ / name};
    const int error = errno;
    struct stat info {};
    if (status(name, info) && S_ISLNK(info.st_mode))
      fail(ErrorKind::invalid_argument,
           what + " " + (path_ / name).string() + " is a symbolic link" + link_target(name) +
               ", where zero expects a directory of its own: it does not follow links there. "
               "Remove the link if no job of yours made it");
    if (error == ENOTDIR)
      fail(ErrorKind::invalid_argument, what + " " + (path_ / name).string() +
                                            " is not a directory; remove it if no job of yours "
                                            "made it");
    fail_at(error, "cannot open", name);
  }

  std::string link_target(const std::string& name) const {
    char target[4096];
    const ssize_t n = ::readlinkat(fd_, name.c_str(), target, sizeof target);
    return n > 0 ? " (to " + std::string(target, static_cast<std::size_t>(n)) + ")" : "";
  }

  static void check_name(const std::string& name) {
    require(!name.empty() && name != "." && name != ".." &&
                name.find_first_of(std::string("/\0", 2)) == std::string::npos,
            "\"" + name + "\" is not a plain file name (non-empty, without '/')");
  }

  [[noreturn]] void fail_at(int error, const std::string& what, const std::string& name) const {
    fail(ErrorKind::io, what + " " + (path_ / name).string() + ": " + detail::system_text(error));
  }

  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
  std::filesystem::path path_;
};

} // namespace zero
