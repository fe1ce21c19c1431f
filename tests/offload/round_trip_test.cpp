// Data written through a SwapFile is read back bitwise, whatever the aio options: block sizes
// from 4 KiB to 4 MiB, queue depths from 1 to 64, one submission per request or per batch,
// overlapping batches or not, one or several I/O threads; many transfers in flight at once; and
// I/O that progresses while the caller computes, without being waited for.

#include "offload_test_support.hpp"

#include "zero/nvme/nvme_tier.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using namespace zero::testing;
using zero::AioOptions;
using zero::BounceBuffers;
using zero::NvmeTier;
using zero::SwapFile;
using zero::Work;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

// Transfers of many sizes, one after the other: aligned, but not to the block size.
struct Transfer {
  std::size_t offset;
  std::size_t bytes;
};
std::vector<Transfer> transfers_of(std::vector<std::size_t> sizes) {
  std::vector<Transfer> transfers;
  std::size_t offset = 0;
  for (std::size_t bytes : sizes) {
    transfers.push_back({offset, bytes});
    offset += bytes;
  }
  return transfers;
}
const std::vector<Transfer> transfers =
    transfers_of({4 * KiB, 12 * KiB, 1 * MiB, 1 * MiB + 4 * KiB, 5 * MiB + 8 * KiB, 60 * KiB});
constexpr std::size_t file_bytes = 10 * MiB;

void round_trip(NvmeTier& tier, const std::string& name) {
  SwapFile file = tier.create_file(name, file_bytes);
  BounceBuffers written(1, file_bytes, false);
  BounceBuffers read(1, file_bytes, false);
  fill_pattern(written[0], std::hash<std::string>{}(name));
  std::vector<Work> works;
  for (const Transfer& t : transfers)
    works.push_back(file.write(t.offset, written[0].subspan(t.offset, t.bytes)));
  zero::wait_all(works);
  works.clear();
  // Read back in other pieces than were written: every unit still checks.
  for (const Transfer& t : transfers)
    works.push_back(file.read(t.offset, read[0].subspan(t.offset, t.bytes)));
  zero::wait_all(works);
  const std::size_t covered = transfers.back().offset + transfers.back().bytes;
  EXPECT_TRUE(same_bytes(read[0].first(covered), written[0].first(covered)));
  works.clear();
  works.push_back(file.read(2 * MiB, read[0].subspan(0, 3 * MiB)));
  works.front().wait();
  EXPECT_TRUE(same_bytes(read[0].first(3 * MiB), written[0].subspan(2 * MiB, 3 * MiB)));
}

// block size, queue depth, single_submit, overlap_events
using Combination = std::tuple<std::size_t, int, bool, bool>;
class RoundTrip : public ::testing::TestWithParam<Combination> {};

TEST_P(RoundTrip, ReadsBackBitwise) {
  const auto [block_size, queue_depth, single_submit, overlap_events] = GetParam();
  ScratchDir dir;
  AioOptions aio{.block_size = block_size,
                 .queue_depth = queue_depth,
                 .single_submit = single_submit,
                 .overlap_events = overlap_events};
  NvmeTier tier(tier_options(dir.path(), aio), 0);
  EXPECT_TRUE(tier.direct_io() || is_tmpfs(dir.path()));
  round_trip(tier, "tensor");
  const zero::IoStats stats = tier.stats();
  std::size_t moved = 0;
  for (const Transfer& t : transfers)
    moved += t.bytes;
  EXPECT_EQ(stats.bytes_written, moved);
  EXPECT_EQ(stats.bytes_read, moved + 3 * MiB);
  EXPECT_GE(stats.write_requests, moved / block_size);
  EXPECT_GT(stats.busy_seconds, 0.0);
}

INSTANTIATE_TEST_SUITE_P(AioOptions, RoundTrip,
                         ::testing::Combine(::testing::Values(4 * KiB, 64 * KiB, 1 * MiB, 4 * MiB),
                                            ::testing::Values(1, 8, 64), ::testing::Bool(),
                                            ::testing::Bool()));

TEST(RoundTrip, SeveralIoThreadsShareATransfer) {
  ScratchDir dir;
  for (int threads : {2, 3, 8}) {
    NvmeTier tier(
        tier_options(dir.path(),
                     {.block_size = 64 * KiB, .queue_depth = 4, .intra_op_parallelism = threads}),
        0);
    round_trip(tier, "tensor" + std::to_string(threads));
  }
}

TEST(RoundTrip, ManyTransfersInFlight) {
  ScratchDir dir;
  NvmeTier tier(tier_options(dir.path(), {.block_size = 16 * KiB, .queue_depth = 4}), 0);
  constexpr std::size_t pieces = 256;
  constexpr std::size_t piece = 64 * KiB;
  std::vector<SwapFile> files;
  for (int i = 0; i < 4; ++i)
    files.push_back(tier.create_file("file" + std::to_string(i), pieces / 4 * piece));
  BounceBuffers out(pieces, piece, false);
  BounceBuffers in(pieces, piece, false);
  std::vector<Work> works;
  for (std::size_t i = 0; i < pieces; ++i) {
    fill_pattern(out[i], i);
    works.push_back(files[i % 4].write(i / 4 * piece, out[i]));
  }
  zero::wait_all(works);
  works.clear();
  for (std::size_t i = pieces; i-- > 0;) // in another order than written
    works.push_back(files[i % 4].read(i / 4 * piece, in[i]));
  // Completed out of order: wait for them one by one, from the first.
  for (Work& work : works)
    work.wait();
  for (std::size_t i = 0; i < pieces; ++i)
    ASSERT_TRUE(same_bytes(in[i], out[i])) << "piece " << i;
}

TEST(RoundTrip, ProgressesWhileTheCallerComputes) {
  // Far more requests than the queue holds: they are only all carried out if someone other than
  // wait() keeps submitting them.
  ScratchDir dir;
  NvmeTier tier(tier_options(dir.path(), {.block_size = 256 * KiB, .queue_depth = 2}), 0);
  SwapFile file = tier.create_file("sub_group", 16 * MiB);
  BounceBuffers buffers(2, 16 * MiB, false);
  fill_pattern(buffers[0], 7);
  Work write = file.write(0, buffers[0]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!write.test() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5)); // "computing"
  ASSERT_FALSE(write.pending()) << "the write did not progress without wait()";
  Work read = file.read(0, buffers[1]);
  while (!read.test() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_FALSE(read.pending());
  EXPECT_TRUE(same_bytes(buffers[0], buffers[1]));
  EXPECT_GE(tier.stats().write_requests, 64u); // 16 MiB in 256 KiB requests
}

TEST(RoundTrip, DirectIoOnExt4) {
  const fs::path tmp = fs::temp_directory_path();
  if (is_tmpfs(tmp)) GTEST_SKIP() << tmp << " is a tmpfs here, not a disk file system";
  ScratchDir dir(tmp);
  NvmeTier tier(tier_options(dir.path()), 0);
  EXPECT_TRUE(tier.direct_io()) << tier.directory();
  round_trip(tier, "direct");
}

bool kernel_accepts_o_direct(const fs::path& directory) {
  const fs::path probe = directory / "probe";
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
  if (fd >= 0) ::close(fd);
  fs::remove(probe);
  return fd >= 0;
}

// Linux 6.6 and later accept O_DIRECT on tmpfs (and copy through the page cache); older kernels
// refuse it, and the tier falls back to buffered I/O with a note on stderr.
TEST(RoundTrip, DevShmWithOrWithoutDirectIo) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  ScratchDir dir("/dev/shm");
  const bool accepted = kernel_accepts_o_direct(dir.path());
  ::testing::internal::CaptureStderr();
  NvmeTier tier(tier_options(dir.path()), 0);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(tier.direct_io(), accepted);
  if (!accepted) {
    EXPECT_NE(said.find(tier.directory().string() + " does not support O_DIRECT"),
              std::string::npos)
        << said;
  }
  round_trip(tier, "shm");
}

// ramfs has no direct I/O on any kernel: the fallback, for certain.
TEST(RoundTrip, FallsBackToBufferedIoWhereODirectIsRefused) {
  ScratchMount ramfs("ramfs", "");
  if (!ramfs.mounted()) GTEST_SKIP() << ramfs.skip_reason();
  ::testing::internal::CaptureStderr();
  std::string said;
  {
    NvmeTier tier(tier_options(ramfs.path()), 0);
    said = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(tier.direct_io());
    round_trip(tier, "buffered");
  }
  EXPECT_EQ(said, "zero: " + (ramfs.path() / "zero_swap" / "rank0").string() +
                      " does not support O_DIRECT (tmpfs?); the NVMe tier falls back to buffered "
                      "I/O there\n");
}

TEST(RoundTrip, BufferedAndUncheckedStillRoundTrip) {
  ScratchDir dir;
  auto options = tier_options(dir.path(), {.block_size = 8 * KiB, .queue_depth = 3});
  options.verify_checksums = false;
  NvmeTier tier(options, 1);
  round_trip(tier, "unchecked");
}

} // namespace
