#pragma once
// A small file system of the test's own, to fill up: an ext4 image on a loop device (O_DIRECT
// works there, as on a disk; tmpfs may refuse it), mounted on a scratch directory for the test's
// duration. The destructor unmounts it (the loop device goes with it: `mount -o loop` sets
// autoclear) and deletes the image, also when the test fails. Mounting needs root
// (CAP_SYS_ADMIN), a loop device and mkfs.ext4; where one is missing, mounted() is false and
// skip_reason() says why. A test killed before its destructor ran (a timeout, MPI_ABORT) leaves
// its mount: the next SmallFileSystem removes every one whose owner (owner.pid beside the mount
// point) is gone.
//
//   zero::testing::SmallFileSystem small(16);            // MiB, in a new directory under /tmp
//   if (!small.mounted()) GTEST_SKIP() << small.skip_reason();
//   small.leave_free(64 * 1024);                         // a filler takes the rest

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace zero::testing {

class SmallFileSystem {
 public:
  // The image and the mount point go to `scratch` (made, and removed at the end), or to a new
  // directory under /tmp.
  explicit SmallFileSystem(std::size_t mebibytes, std::filesystem::path scratch = {})
      : scratch_(std::move(scratch)) {
    if (scratch_.empty()) {
      std::string pattern =
          (std::filesystem::temp_directory_path() / "zero_small_fs.XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr)
        throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
      scratch_ = pattern;
    }
    mount_point_ = scratch_ / "mnt";
    std::filesystem::create_directories(mount_point_);
    remove_stale();
    std::ofstream(scratch_ / "owner.pid") << ::getpid() << '\n';
    const auto image = scratch_ / "image.ext4";
    const auto log = scratch_ / "log";
    // 4096-byte blocks, as on a disk; no blocks reserved for root (the tests run as root).
    const std::string make = "truncate -s " + std::to_string(mebibytes) + "M " + image.string() +
                             " && mkfs.ext4 -q -F -m 0 -b 4096 " + image.string();
    const std::string mount = "mount -o loop " + image.string() + " " + mount_point_.string();
    if (!run(make, log, "cannot make an ext4 image (mkfs.ext4)")) return;
    if (!run(mount, log,
             "cannot mount an ext4 image on a loop device; this test needs root "
             "(CAP_SYS_ADMIN) and /dev/loop-control"))
      return;
    mounted_ = true;
  }
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;
  ~SmallFileSystem() {
    if (mounted_ && ::umount2(mount_point_.c_str(), 0) != 0)
      ::umount2(mount_point_.c_str(), MNT_DETACH); // busy: detached now, freed when released
    std::error_code ignored;
    std::filesystem::remove_all(scratch_, ignored);
  }

  bool mounted() const noexcept { return mounted_; }
  const std::string& skip_reason() const noexcept { return skip_reason_; }
  const std::filesystem::path& path() const noexcept { return mount_point_; }

  std::size_t free_bytes() const {
    struct statvfs info {};
    if (::statvfs(mount_point_.c_str(), &info) != 0)
      throw std::runtime_error("statvfs " + mount_point_.string() + ": " + std::strerror(errno));
    return static_cast<std::size_t>(info.f_bavail) * info.f_frsize;
  }

  // A file `filler` takes the free space but about `bytes` (a block more or less: the filler's
  // own metadata takes space too); returns what is free now. Replaces the previous filler.
  std::size_t leave_free(std::size_t bytes) {
    release_filler();
    const auto filler = mount_point_ / "filler";
    const int fd = ::open(filler.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error("open " + filler.string() + ": " + std::strerror(errno));
    // statvfs counts blocks the filler's own extent tree may need, so asking for all of them can
    // fail with ENOSPC (more often the more fragmented the free space is): ask for half as much
    // then, down to one block, instead of giving up with nothing filled.
    off_t size = 0;
    for (int attempt = 0; attempt < 64; ++attempt) {
      const std::size_t free = free_bytes();
      if (free <= bytes) break;
      off_t more = static_cast<off_t>((free - bytes) / 4096 * 4096);
      while (more >= 4096 && ::fallocate(fd, 0, size, more) != 0)
        more = more / 2 / 4096 * 4096;
      if (more < 4096) break;
      size += more;
    }
    ::fsync(fd);
    ::syncfs(fd); // commits the journal: blocks freed before are reusable, statvfs is exact
    ::close(fd);
    return free_bytes();
  }
  void release_filler() {
    ::unlink((mount_point_ / "filler").c_str());
    sync();
  }
  // Commits the journal, so that blocks freed before are reusable and free_bytes() is exact.
  void sync() const {
    const int fd = ::open(mount_point_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::syncfs(fd);
      ::close(fd);
    }
  }

 private:
  // The mounts of SmallFileSystems whose process died before unmounting them.
  static void remove_stale() {
    std::ifstream mounts("/proc/self/mounts");
    std::vector<std::filesystem::path> stale;
    for (std::string device, point, rest;
         mounts >> device >> point && std::getline(mounts, rest);) {
      const std::filesystem::path mount_point = point;
      if (mount_point.filename() != "mnt") continue;
      std::ifstream owner(mount_point.parent_path() / "owner.pid");
      long pid = 0;
      if (!(owner >> pid) || pid <= 0) continue;
      if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue; // alive
      stale.push_back(mount_point);
    }
    for (const auto& mount_point : stale) {
      ::umount2(mount_point.c_str(), MNT_DETACH);
      std::error_code ignored;
      std::filesystem::remove_all(mount_point.parent_path(), ignored);
    }
  }

  bool run(const std::string& command, const std::filesystem::path& log, const char* problem) {
    const int status = std::system(("(" + command + ") >" + log.string() + " 2>&1").c_str());
    if (status == 0) return true;
    std::ifstream in(log);
    std::string output{std::istreambuf_iterator<char>(in), {}};
    while (!output.empty() && (output.back() == '\n' || output.back() == ' '))
      output.pop_back();
    skip_reason_ = std::string(problem) + " (" + command + ": " +
                   (output.empty() ? "exit status " + std::to_string(status) : output) + ")";
    return false;
  }

  std::filesystem::path scratch_, mount_point_;
  bool mounted_ = false;
  std::string skip_reason_;
};

} // namespace zero::testing
