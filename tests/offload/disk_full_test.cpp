// The NVMe tier on a file system that fills up, with direct I/O as on a disk: a 16 MiB ext4 image
// on a loop device, mounted for the test (root only; skipped with the reason otherwise). Opening a
// tier there, creating a swap file and writing one each fail with an error that names the path
// and the system's reason ("No space left on device"), leave no file behind, and never hang; a
// write that runs out of space part way is continued as far as it goes, never reported as done.

#include "../support/small_file_system.hpp"
#include "offload_test_support.hpp"

#include "zero/nvme/nvme_tier.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <vector>

namespace {

using namespace zero::testing;
using zero::BounceBuffers;
using zero::ErrorKind;
using zero::NvmeTier;
using zero::SwapFile;
using zero::Work;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

// With no space, or a block or two (the swap directory fits, its lock file does not).
TEST(NvmeDiskFull, ATierOnAFullFileSystemIsRefused) {
  SmallFileSystem small(16);
  if (!small.mounted()) GTEST_SKIP() << small.skip_reason();
  int refused = 0;
  for (std::size_t free = 0; free <= 16 * KiB; free += 4 * KiB) {
    small.leave_free(free);
    try {
      NvmeTier tier(tier_options(small.path()), 0);
    } catch (const zero::Error& e) {
      ++refused;
      const std::string what = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::io) << what;
      EXPECT_NE(what.find(small.path().string() + "/zero_swap"), std::string::npos) << what;
      EXPECT_NE(what.find("No space left on device"), std::string::npos) << what;
    }
    EXPECT_FALSE(fs::exists(small.path() / "zero_swap"))
        << "with " << free << " bytes free, the tier left its directory behind";
  }
  EXPECT_GE(refused, 2);
}

TEST(NvmeDiskFull, ASwapFileTooLargeForTheDiskIsRefusedAtCreation) {
  SmallFileSystem small(16);
  if (!small.mounted()) GTEST_SKIP() << small.skip_reason();
  small.leave_free(1 * MiB);
  NvmeTier tier(tier_options(small.path()), 0);
  EXPECT_TRUE(tier.direct_io()) << "ext4 takes O_DIRECT";
  const fs::path path = tier.directory() / "optimizer.exp_avg.swp";
  expect_error([&] { (void)tier.create_file("optimizer.exp_avg", 4 * MiB); }, ErrorKind::io,
               {"no space for swap file " + path.string(), "it needs 4194304 bytes",
                "(No space left on device)"});
  EXPECT_FALSE(fs::exists(path)) << "a half-allocated file stays behind";
  SwapFile fits = tier.create_file("optimizer.exp_avg", 512 * KiB);
  EXPECT_EQ(fits.size(), 512 * KiB);
}

// The disk fills up after the file was allocated (the test takes its blocks away, and a filler
// takes the space): io_uring's O_DIRECT writes, several in flight on two threads, write what fits
// and then fail with -ENOSPC. The Work reports it, naming the file and the byte; once space is
// free again the same write succeeds and reads back.
TEST(NvmeDiskFull, DirectWritesThatRunOutOfSpaceNameTheFileAndTheReason) {
  SmallFileSystem small(16);
  if (!small.mounted()) GTEST_SKIP() << small.skip_reason();
  NvmeTier tier(tier_options(small.path(),
                             {.block_size = 64 * KiB, .queue_depth = 4, .intra_op_parallelism = 2}),
                0);
  ASSERT_TRUE(tier.direct_io());
  SwapFile file = tier.create_file("params", 2 * MiB);
  const int fd = ::open(file.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 2 * MiB), 0);
  ::close(fd);
  small.leave_free(512 * KiB);

  BounceBuffers buffers(2, 2 * MiB, false);
  fill_pattern(buffers[0], 3);
  Work write = file.write(0, buffers[0]);
  expect_error([&] { write.wait(); }, ErrorKind::io,
               {"writing swap file " + file.path().string() + " at byte ",
                "failed: No space left on device"});
  EXPECT_GT(tier.stats().bytes_written, 0u) << "nothing was written before the disk was full";
  EXPECT_LT(tier.stats().bytes_written, 2 * MiB);

  small.release_filler();
  file.write(0, buffers[0]).wait();
  file.read(0, buffers[1]).wait();
  EXPECT_TRUE(same_bytes(buffers[0], buffers[1]));
}

} // namespace
