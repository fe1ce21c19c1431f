// Never silent corruption: a swap file truncated or altered under the tier, a read of what was
// never written, a disk that fills up at creation or in the middle of a write — each is an error
// naming the file, the byte offset and what was expected, raised by the Work's wait() or test().

#include "offload_test_support.hpp"

#include "zero/nvme/nvme_tier.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <vector>

namespace integrity_test {

using namespace zero::testing;
using zero::BounceBuffers;
using zero::ErrorKind;
using zero::NvmeTier;
using zero::SwapFile;
using zero::Work;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

// Writes `bytes` of a pattern at byte 0 and waits.
void write_pattern(SwapFile& file, BounceBuffers& buffers, std::size_t bytes) {
  fill_pattern(buffers[0].first(bytes), 42);
  file.write(0, buffers[0].first(bytes)).wait();
}

void with_fd(const fs::path& path, const std::function<void(int)>& action) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  action(fd);
  ::close(fd);
}

TEST(Integrity, ATruncatedFileIsAShortRead) {
  ScratchDir dir;
  NvmeTier tier(tier_options(dir.path(), {.block_size = 4 * MiB}), 0);
  SwapFile file = tier.create_file("optimizer.master", 2 * MiB);
  BounceBuffers buffers(1, 2 * MiB, false);
  write_pattern(file, buffers, 2 * MiB);
  ASSERT_EQ(::truncate(file.path().c_str(), 256 * KiB), 0);
  Work read = file.read(0, buffers[0]);
  expect_error([&] { read.wait(); }, ErrorKind::io,
               {"swap file " + file.path().string() + " ends early",
                "expected 2097152 bytes at byte 0, got 262144", "truncated"});
  // Cut inside a unit: the end of the file is found there too, not by a refused request.
  ASSERT_EQ(::truncate(file.path().c_str(), 100 * KiB + 100), 0);
  Work cut = file.read(0, buffers[0].first(1 * MiB));
  expect_error([&] { cut.wait(); }, ErrorKind::io,
               {file.path().string(), "expected 1048576 bytes at byte 0, got 102500"});
}

TEST(Integrity, AFileChangedUnderUsIsAChecksumError) {
  ScratchDir dir;
  NvmeTier tier(tier_options(dir.path()), 0);
  SwapFile file = tier.create_file("optimizer.master", 2 * MiB);
  BounceBuffers buffers(1, 2 * MiB, false);
  write_pattern(file, buffers, 2 * MiB);
  with_fd(file.path(), [](int fd) {
    const char garbage[16] = "not the tensor!";
    ASSERT_EQ(::pwrite(fd, garbage, sizeof garbage, 1 * MiB + 100), 16);
  });
  Work read = file.read(0, buffers[0]);
  // test() reports the error as wait() does.
  expect_error(
      [&] {
        while (!read.test()) {
        }
      },
      ErrorKind::io,
      {"swap file " + file.path().string() + " changed under us at byte 1048576",
       "written with checksum 0x", "reads back as 0x"});
  // Rethrowing counts as observing the completion: the handle is empty (and safe to drop).
  EXPECT_FALSE(read.pending());
  // The units around it are intact.
  file.read(0, buffers[0].first(1 * MiB)).wait();
  file.read(1 * MiB + 4 * KiB, buffers[0].first(1 * MiB - 4 * KiB)).wait();
}

TEST(Integrity, ReadingWhatWasNeverWrittenIsACallerBug) {
  ScratchDir dir;
  NvmeTier tier(tier_options(dir.path()), 0);
  SwapFile file = tier.create_file("moments", 1 * MiB);
  BounceBuffers buffers(1, 1 * MiB, false);
  write_pattern(file, buffers, 64 * KiB);
  file.read(0, buffers[0].first(64 * KiB)).wait();
  Work read = file.read(0, buffers[0].first(128 * KiB));
  expect_error([&] { read.wait(); }, ErrorKind::io,
               {file.path().string(), "byte 65536 was read before anything was written there",
                "a bug in the caller"});
  // Rewriting part of a unit range updates its checksums.
  fill_pattern(buffers[0].first(8 * KiB), 9);
  file.write(4 * KiB, buffers[0].first(8 * KiB)).wait();
  file.read(0, buffers[0].first(64 * KiB)).wait();
}

TEST(Integrity, WithoutChecksumsNothingIsChecked) {
  ScratchDir dir;
  auto options = tier_options(dir.path());
  options.verify_checksums = false;
  NvmeTier tier(options, 0);
  SwapFile file = tier.create_file("unchecked", 1 * MiB);
  BounceBuffers buffers(1, 1 * MiB, false);
  file.read(0, buffers[0]).wait(); // zeros: preallocated, never written
  EXPECT_EQ(buffers[0][0], std::byte{0});
}

TEST(Integrity, MisuseIsReportedByTheCall) {
  ScratchDir dir;
  NvmeTier tier(tier_options(dir.path()), 0);
  SwapFile file = tier.create_file("t", 64 * KiB);
  BounceBuffers buffers(1, 128 * KiB, false);
  const std::string name = file.path().string();
  auto invalid = [](const std::function<void()>& call, std::vector<std::string> pieces) {
    expect_error(call, ErrorKind::invalid_argument, pieces);
  };
  invalid([&] { (void)file.write(100, buffers[0].first(4 * KiB)); },
          {"SwapFile::write of " + name, "the offset (100)", "multiples of 4096"});
  invalid([&] { (void)file.read(0, buffers[0].first(100)); }, {"the length (100)"});
  invalid([&] { (void)file.read(0, buffers[0].subspan(8, 4 * KiB)); }, {"the buffer's address"});
  invalid([&] { (void)file.write(60 * KiB, buffers[0].first(8 * KiB)); },
          {"bytes [61440, 69632) are beyond its size, 65536"});
  invalid([&] { (void)tier.create_file("odd", 1000); }, {"multiple of 4096, got 1000"});
  invalid([&] { (void)tier.create_file("a/b", 4096); }, {"\"a/b\" is not a file name"});
  expect_error([&] { (void)tier.create_file("t", 4096); }, ErrorKind::io,
               {"cannot create swap file " + name, "File exists"});
  SwapFile none;
  invalid([&] { (void)none.read(0, buffers[0].first(4 * KiB)); }, {"has no file"});
}

TEST(Integrity, NoSpaceIsReportedWhenTheFileIsCreated) {
  ScratchMount small("tmpfs", "size=2m");
  if (!small.mounted()) GTEST_SKIP() << small.skip_reason();
  NvmeTier tier(tier_options(small.path()), 0);
  const fs::path path = tier.directory() / "optimizer.exp_avg.swp";
  expect_error([&] { (void)tier.create_file("optimizer.exp_avg", 4 * MiB); }, ErrorKind::io,
               {"no space for swap file " + path.string() + ": it needs 4194304 bytes",
                "the file system has ", " free"});
  EXPECT_FALSE(fs::exists(path)) << "a half-allocated file stays behind";
  SwapFile fits = tier.create_file("optimizer.exp_avg", 1 * MiB);
  EXPECT_EQ(fits.size(), 1 * MiB);
}

// A disk that fills up after the file was allocated (here: the test takes its blocks away, and
// another file takes the space) fails a write in the middle, naming the file and the byte.
TEST(Integrity, AWriteThatRunsOutOfSpaceMidwayNamesTheByte) {
  ScratchMount small("tmpfs", "size=2m");
  if (!small.mounted()) GTEST_SKIP() << small.skip_reason();
  NvmeTier tier(tier_options(small.path(), {.block_size = 64 * KiB, .queue_depth = 2}), 0);
  SwapFile file = tier.create_file("params", 1 * MiB);
  with_fd(file.path(), [](int fd) {
    ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1 * MiB), 0);
  });
  const fs::path filler = small.path() / "filler";
  const int fd = ::open(filler.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  std::vector<char> chunk(64 * KiB, 'x');
  off_t filled = 0;
  for (ssize_t n; (n = ::write(fd, chunk.data(), chunk.size())) > 0;)
    filled += n;
  ASSERT_GE(filled, static_cast<off_t>(1 * MiB));
  ASSERT_EQ(::ftruncate(fd, filled - static_cast<off_t>(512 * KiB)), 0); // room for half of it
  ::close(fd);

  BounceBuffers buffers(1, 1 * MiB, false);
  fill_pattern(buffers[0], 3);
  Work write = file.write(0, buffers[0]);
  const std::string message =
      expect_error([&] { write.wait(); }, ErrorKind::io,
                   {"writing swap file " + file.path().string() + " at byte ",
                    "failed: No space left on device"});
  EXPECT_GT(tier.stats().bytes_written, 0u) << "nothing was written before the disk was full";
}

} // namespace integrity_test
