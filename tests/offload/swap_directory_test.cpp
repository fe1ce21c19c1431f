// The swap directory `<nvme_path>/zero_swap/rank<r>/`: its layout and lock, its removal on a
// normal end and while an exception unwinds, the files a killed run leaves (refused, or deleted
// with remove_stale), a directory in use by a live run, and nvme_path problems named clearly.

#include "offload_test_support.hpp"

#include "zero/nvme/nvme_tier.hpp"

#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

using namespace zero::testing;
using zero::BounceBuffers;
using zero::ErrorKind;
using zero::NvmeTier;
using zero::SwapFile;

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// A forked process that runs `body(hold)`: hold() tells the parent it is ready and blocks until
// the parent calls finish(). The child always ends with _exit, as a killed run would, so nothing
// that `body` left alive is destroyed.
struct Child {
  pid_t pid = -1;
  int hold = -1;
  bool held = false; // whether the child reached hold()
  void finish() {
    ::close(hold);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
};

Child fork_child(const std::function<void(const std::function<void()>& hold)>& body) {
  int ready[2];
  int hold[2];
  if (::pipe(ready) != 0 || ::pipe(hold) != 0) throw std::runtime_error("pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    ::close(hold[1]);
    try {
      body([&] {
        char byte = 1;
        [[maybe_unused]] auto written = ::write(ready[1], &byte, 1);
        [[maybe_unused]] auto got = ::read(hold[0], &byte, 1); // returns when the parent closes
        ::_exit(0);
      });
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(hold[0]);
  char byte = 0;
  const bool held = ::read(ready[0], &byte, 1) == 1; // 0: the child ended without hold()
  ::close(ready[0]);
  return {pid, hold[1], held};
}

TEST(SwapDirectory, LayoutAndLock) {
  ScratchDir dir;
  NvmeTier tier(tier_options(dir.path()), 3);
  EXPECT_EQ(tier.directory(), dir.path() / "zero_swap" / "rank3");
  SwapFile file = tier.create_file("optimizer.master", 8192);
  EXPECT_EQ(file.path(), tier.directory() / "optimizer.master.swp");
  EXPECT_EQ(fs::file_size(file.path()), 8192u);
  const std::string holder = read_text(tier.directory() / "zero.lock");
  EXPECT_EQ(holder.rfind("pid " + std::to_string(::getpid()) + " on host ", 0), 0u) << holder;
  EXPECT_NE(holder.find(", started 20"), std::string::npos) << holder;
}

TEST(SwapDirectory, OwnersShareAPathAndARank) {
  ScratchDir dir;
  {
    auto optimizer = tier_options(dir.path());
    optimizer.owner = "optimizer";
    auto parameters = tier_options(dir.path());
    parameters.owner = "parameters";
    NvmeTier optimizer_tier(optimizer, 0);
    NvmeTier parameter_tier(parameters, 0);
    EXPECT_EQ(optimizer_tier.directory(), dir.path() / "zero_swap" / "optimizer" / "rank0");
    EXPECT_EQ(parameter_tier.directory(), dir.path() / "zero_swap" / "parameters" / "rank0");
    SwapFile a = optimizer_tier.create_file("master", 4096);
    SwapFile b = parameter_tier.create_file("master", 4096);
    expect_error([&] { NvmeTier again(parameters, 0); }, ErrorKind::invalid_argument,
                 {"same nvme_path, owner and rank"});
    auto bad = tier_options(dir.path());
    bad.owner = "a/b";
    expect_error([&] { NvmeTier tier(bad, 0); }, ErrorKind::invalid_argument,
                 {"the owner \"a/b\" must be a plain directory name"});
  }
  EXPECT_FALSE(fs::exists(dir.path() / "zero_swap"));
}

TEST(SwapDirectory, RemovedAtTheEndAndWhileUnwinding) {
  ScratchDir dir;
  {
    NvmeTier tier(tier_options(dir.path()), 0);
    SwapFile kept = tier.create_file("kept", 4096);
    SwapFile dropped = tier.create_file("dropped", 4096);
    const fs::path dropped_path = dropped.path();
    dropped = SwapFile();
    EXPECT_FALSE(fs::exists(dropped_path)) << "a SwapFile removes its file when it ends";
  }
  EXPECT_FALSE(fs::exists(dir.path() / "zero_swap"));
  try {
    NvmeTier tier(tier_options(dir.path()), 0);
    SwapFile file = tier.create_file("params", 4096);
    BounceBuffers buffers(1, 4096, false);
    zero::Work in_flight = file.write(0, buffers[0]);
    throw std::runtime_error("the step failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(dir.path() / "zero_swap"));
}

TEST(SwapDirectory, ASwapFileOutlivingItsTierIsRefused) {
  ScratchDir dir;
  std::optional<NvmeTier> tier(std::in_place, tier_options(dir.path()), 0);
  SwapFile file = tier->create_file("late", 4096);
  const fs::path path = file.path();
  tier.reset();
  EXPECT_FALSE(fs::exists(path));
  BounceBuffers buffers(1, 4096, false);
  expect_error([&] { (void)file.read(0, buffers[0]); }, ErrorKind::invalid_argument,
               {"swap file " + path.string() + " is used after its NvmeTier was destroyed"});
  // A new tier's file of the same name is not removed by the old handle.
  NvmeTier next(tier_options(dir.path()), 0);
  SwapFile again = next.create_file("late", 4096);
  file = SwapFile();
  EXPECT_TRUE(fs::exists(again.path()));
}

TEST(SwapDirectory, MovedTierKeepsItsFiles) {
  ScratchDir dir;
  NvmeTier first(tier_options(dir.path()), 0);
  SwapFile file = first.create_file("x", 4096);
  NvmeTier second = std::move(first);
  BounceBuffers buffers(1, 4096, false);
  file.write(0, buffers[0]).wait();
  EXPECT_EQ(second.directory(), dir.path() / "zero_swap" / "rank0");
  EXPECT_EQ(second.stats().bytes_written, 4096u);
}

TEST(SwapDirectory, StaleFilesOfAKilledRunAreRefusedThenRemovedOnRequest) {
  ScratchDir dir;
  Child child = fork_child([&](const auto&) {
    NvmeTier tier(tier_options(dir.path()), 0);
    SwapFile file = tier.create_file("optimizer.master", 4096);
    ::_exit(0); // as after SIGKILL: no destructor runs
  });
  child.finish();
  ASSERT_FALSE(child.held);
  const fs::path rank0 = dir.path() / "zero_swap" / "rank0";
  ASSERT_TRUE(fs::exists(rank0 / "optimizer.master.swp"));
  expect_error([&] { NvmeTier tier(tier_options(dir.path()), 0); }, ErrorKind::invalid_argument,
               {"swap directory " + rank0.string() + " holds 1 file(s) (optimizer.master.swp)",
                "did not exit cleanly (pid " + std::to_string(child.pid) + " on host ",
                "Delete the directory", "remove_stale = true"});
  ASSERT_TRUE(fs::exists(rank0 / "optimizer.master.swp")) << "refusing must not delete";

  auto options = tier_options(dir.path());
  options.remove_stale = true;
  ::testing::internal::CaptureStderr();
  {
    NvmeTier tier(options, 0);
    EXPECT_FALSE(fs::exists(rank0 / "optimizer.master.swp"));
    SwapFile file = tier.create_file("optimizer.master", 4096);
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("removed from swap directory " + rank0.string()), std::string::npos) << said;
  EXPECT_FALSE(fs::exists(dir.path() / "zero_swap"));
}

TEST(SwapDirectory, InUseByALiveRunIsRefused) {
  ScratchDir dir;
  Child child = fork_child([&](const std::function<void()>& hold) {
    NvmeTier tier(tier_options(dir.path()), 1);
    hold();
  });
  ASSERT_TRUE(child.held);
  expect_error([&] { NvmeTier tier(tier_options(dir.path()), 1); }, ErrorKind::invalid_argument,
               {"swap directory " + (dir.path() / "zero_swap" / "rank1").string() +
                " is in use by another run (pid " + std::to_string(child.pid) + " on host "});
  // Another rank on the same path is another directory.
  NvmeTier other_rank(tier_options(dir.path()), 2);
  child.finish();
}

TEST(SwapDirectory, TheSameDirectoryTwiceInOneProcessIsRefused) {
  ScratchDir dir;
  NvmeTier tier(tier_options(dir.path()), 0);
  expect_error([&] { NvmeTier again(tier_options(dir.path()), 0); }, ErrorKind::invalid_argument,
               {"is in use by another run (pid " + std::to_string(::getpid()),
                "another NvmeTier of this process uses the same nvme_path, owner and rank"});
}

TEST(SwapDirectory, NvmePathProblemsAreNamed) {
  ScratchDir dir;
  const fs::path missing = dir.path() / "missing";
  expect_error([&] { NvmeTier tier(tier_options(missing), 0); }, ErrorKind::invalid_argument,
               {"nvme_path " + missing.string() + " does not exist", "an existing directory"});
  const fs::path file = dir.path() / "file";
  std::ofstream(file) << "not a directory";
  expect_error([&] { NvmeTier tier(tier_options(file), 0); }, ErrorKind::invalid_argument,
               {"nvme_path " + file.string() + " is not a directory"});
  expect_error([&] { NvmeTier tier(tier_options(""), 0); }, ErrorKind::invalid_argument,
               {"the path (DeepSpeed's nvme_path) is empty"});
  expect_error([&] { NvmeTier tier(tier_options(dir.path()), -1); }, ErrorKind::invalid_argument,
               {"rank must be >= 0"});
  auto bad_aio = tier_options(dir.path(), {.block_size = 1000});
  expect_error([&] { NvmeTier tier(bad_aio, 0); }, ErrorKind::invalid_argument, {"aio.block_size"});
}

// Root ignores permission bits, so only a read-only file system shows a directory that cannot
// be written.
TEST(SwapDirectory, AReadOnlyNvmePathIsNamed) {
  ScratchMount read_only("tmpfs", "size=1m", MS_RDONLY);
  if (!read_only.mounted()) GTEST_SKIP() << read_only.skip_reason();
  expect_error([&] { NvmeTier tier(tier_options(read_only.path()), 0); },
               ErrorKind::invalid_argument,
               {"nvme_path " + read_only.path().string() + " is not writable: creating " +
                    (read_only.path() / "zero_swap").string() + " failed: Read-only file system",
                "a directory it can create swap files in"});
}

} // namespace
