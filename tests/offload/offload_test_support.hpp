#pragma once
// Helpers for the NVMe tier's tests: scratch directories, small tmpfs mounts (root only), data
// with a recognisable pattern, and expecting an Error whose message names given pieces.

#include "test_outcome.hpp"
#include "zero/core/error.hpp"
#include "zero/nvme/nvme_tier.hpp"

#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace zero::testing {

namespace fs = std::filesystem;

// A fresh directory under `base`, removed with everything in it at the end of the test.
class ScratchDir {
 public:
  explicit ScratchDir(const fs::path& base = fs::temp_directory_path()) {
    std::string pattern = (base / "zero_offload_test.XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp under " + base.string() + ": " + std::strerror(errno));
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A file system mounted on a scratch directory for the test's duration; empty when mounting is
// refused (not root, or no mount namespace of our own), with the reason in skip_reason.
class ScratchMount {
 public:
  ScratchMount(const char* type, const char* options, unsigned long flags = 0) {
    if (::mount(type, dir_.path().c_str(), type, flags, options) != 0) {
      skip_reason_ = std::string("cannot mount ") + type + " (" + options +
                     "): " + std::strerror(errno) + "; this test needs root (CAP_SYS_ADMIN)";
      return;
    }
    mounted_ = true;
  }
  ScratchMount(const ScratchMount&) = delete;
  ScratchMount& operator=(const ScratchMount&) = delete;
  ~ScratchMount() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& skip_reason() const { return skip_reason_; }
  const fs::path& path() const { return dir_.path(); }

 private:
  ScratchDir dir_;
  bool mounted_ = false;
  std::string skip_reason_;
};

inline bool is_tmpfs(const fs::path& path) {
  struct statfs info {};
  return ::statfs(path.c_str(), &info) == 0 && info.f_type == 0x01021994; // TMPFS_MAGIC
}

// Bytes that differ from offset to offset and from seed to seed, so that a block read from the
// wrong place or a stale one does not pass for the right one.
inline void fill_pattern(std::span<std::byte> bytes, std::uint64_t seed) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < bytes.size(); i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(bytes.data() + i, &state, std::min<std::size_t>(8, bytes.size() - i));
  }
}

inline bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// Runs `action` and expects Error(kind) whose message contains every piece; returns the message.
inline std::string expect_error(const std::function<void()>& action, ErrorKind kind,
                                const std::vector<std::string>& pieces) {
  try {
    action();
    ADD_FAILURE() << "no error; expected one naming: " << (pieces.empty() ? "" : pieces[0]);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& piece : pieces)
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos)
          << "missing '" << piece << "' in: " << e.what();
    return e.what();
  }
  return {};
}

inline NvmeTierOptions tier_options(const fs::path& path, AioOptions aio = {}) {
  NvmeTierOptions options;
  options.path = path;
  options.aio = aio;
  return options;
}

} // namespace zero::testing
