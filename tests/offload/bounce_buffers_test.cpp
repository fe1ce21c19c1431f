// BounceBuffers: aligned for O_DIRECT, zero-filled, movable; with pin_memory locked in RAM, and a
// memlock limit that refuses the lock is an error that says what to do.

#include "offload_test_support.hpp"

#include "zero/nvme/bounce_buffers.hpp"

#include <gtest/gtest.h>

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>

namespace {

using namespace zero::testing;
using zero::BounceBuffers;
using zero::ErrorKind;

TEST(BounceBuffers, AlignedZeroedAndMovable) {
  BounceBuffers buffers(3, 8192, false);
  ASSERT_EQ(buffers.count(), 3u);
  ASSERT_EQ(buffers.bytes(), 8192u);
  for (std::size_t i = 0; i < buffers.count(); ++i) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffers[i].data()) % 4096, 0u);
    EXPECT_EQ(buffers[i].size(), 8192u);
    for (std::byte b : buffers[i])
      ASSERT_EQ(b, std::byte{0});
  }
  buffers[2][8191] = std::byte{7};
  BounceBuffers moved = std::move(buffers);
  EXPECT_EQ(buffers.count(), 0u);
  EXPECT_EQ(moved[2][8191], std::byte{7});
  EXPECT_FALSE(moved.pinned());
  expect_error([] { BounceBuffers odd(2, 1000, false); }, ErrorKind::invalid_argument,
               {"bytes_each must be a multiple of 4096", "got 1000"});
}

TEST(BounceBuffers, PinnedWhereTheLimitAllows) {
  try {
    BounceBuffers pinned(2, 1 << 20, true);
    EXPECT_TRUE(pinned.pinned());
    pinned[1][0] = std::byte{1};
  } catch (const zero::Error& e) {
    // Only the memlock limit refusing is the machine's doing; any other error fails the test.
    const std::string what = e.what();
    if (what.find("pin_memory: cannot lock") == std::string::npos) throw;
    GTEST_SKIP() << "this process may not lock 2 MiB: " << what;
  }
}

// GCC names a sanitized build with __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang 14 through
// __has_feature only.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ZERO_TEST_CLANG_SANITIZED 1
#endif
#endif
#ifndef ZERO_TEST_CLANG_SANITIZED
#define ZERO_TEST_CLANG_SANITIZED 0
#endif

// Without CAP_IPC_LOCK, RLIMIT_MEMLOCK applies: a child process drops the capability, lowers the
// limit and expects the refusal, so that the test process keeps both.
TEST(BounceBuffers, AMemlockLimitThatRefusesIsNamed) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || ZERO_TEST_CLANG_SANITIZED
  GTEST_SKIP() << zero::testing::not_applicable
               << "the sanitizers' runtime turns mlock into a no-op";
#endif
  const pid_t pid = ::fork();
  if (pid == 0) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    if (::syscall(SYS_capget, &header, caps) != 0) ::_exit(77);
    caps[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    if (::syscall(SYS_capset, &header, caps) != 0) ::_exit(77);
    const rlimit limit{64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_MEMLOCK, &limit) != 0) ::_exit(77);
    try {
      BounceBuffers pinned(4, 1 << 20, true);
    } catch (const zero::Error& e) {
      const std::string what = e.what();
      const bool named =
          what.find("pin_memory: cannot lock 4194304 bytes") != std::string::npos &&
          what.find("the memlock limit of this process is 65536 bytes") != std::string::npos &&
          what.find("ulimit -l") != std::string::npos;
      ::_exit(named ? 0 : 2);
    }
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot drop CAP_IPC_LOCK or set the limit here";
  EXPECT_NE(WEXITSTATUS(status), 1) << "mlock beyond the limit was not refused";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the error does not name the lock, the limit and the fix";
}

} // namespace
