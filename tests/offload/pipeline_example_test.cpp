// The examples of docs/nvme-tier.md, compiled and run: a tier's life, and the optimizer step's
// pipeline over sub-groups (read sub-group k+1 while updating k while writing k-1).

#include "offload_test_support.hpp"

#include "zero/nvme/nvme_tier.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

namespace {

using namespace zero::testing;

// example-begin nvme-tier
void swap_out_and_back(const std::filesystem::path& nvme_path, int rank) {
  zero::NvmeTier tier({.path = nvme_path, .aio = {.block_size = 1 << 20, .queue_depth = 8}},
                      rank); // <nvme_path>/zero_swap/rank<rank>/, locked
  zero::SwapFile master = tier.create_file("optimizer.master", 64 << 20); // allocated on disk now
  zero::BounceBuffers buffers = tier.make_bounce_buffers(2, 32 << 20);    // aligned to 4096
  std::memset(buffers[0].data(), 1, buffers.bytes());

  zero::Work out = master.write(32 << 20, buffers[0]); // queued: the tier's I/O thread does it
  // ... compute ...
  out.wait(); // the buffer is the caller's again; rethrows zero::Error (ErrorKind::io)
  zero::Work in = master.read(32 << 20, buffers[1]); // checked against the checksums on completion
  in.wait();
} // the tier removes its swap files and directory, also while an exception unwinds
// example-end nvme-tier

TEST(DocsExample, SwapOutAndBack) {
  ScratchDir dir;
  swap_out_and_back(dir.path(), 0);
  EXPECT_FALSE(fs::exists(dir.path() / "zero_swap"));
}

// example-begin sub-group-pipeline
// Updates `groups` sub-groups of buffers.bytes() bytes each, kept in `file`, with three bounce
// buffers: sub-group k+1 is read while k is updated and k-1 is written.
template <class Update>
void pipelined_step(zero::SwapFile& file, zero::BounceBuffers& buffers, std::size_t groups,
                    Update update) {
  const std::size_t bytes = buffers.bytes();
  std::vector<zero::Work> reads(groups);
  std::vector<zero::Work> writes(groups);
  reads[0] = file.read(0, buffers[0]);
  for (std::size_t k = 0; k < groups; ++k) {
    if (k + 1 < groups) {
      if (k >= 2) writes[k - 2].wait(); // its buffer is the one sub-group k+1 reads into
      reads[k + 1] = file.read((k + 1) * bytes, buffers[(k + 1) % 3]);
    }
    reads[k].wait();
    update(k, buffers[k % 3]); // the I/O of k-1 and k+1 goes on meanwhile
    writes[k] = file.write(k * bytes, buffers[k % 3]);
  }
  zero::wait_all(writes);
}
// example-end sub-group-pipeline

TEST(DocsExample, SubGroupPipeline) {
  ScratchDir dir;
  zero::NvmeTier tier({.path = dir.path(), .aio = {.block_size = 64 << 10, .queue_depth = 4}}, 0);
  constexpr std::size_t groups = 7;
  constexpr std::size_t group_bytes = 256 << 10;
  zero::SwapFile file = tier.create_file("optimizer.master", groups * group_bytes);
  zero::BounceBuffers buffers = tier.make_bounce_buffers(3, group_bytes);
  auto floats = [](std::span<std::byte> bytes) {
    return std::span(reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float));
  };
  for (std::size_t k = 0; k < groups; ++k) { // the initial values: the sub-group's index
    for (float& x : floats(buffers[0]))
      x = static_cast<float>(k);
    file.write(k * group_bytes, buffers[0]).wait();
  }
  for (int step = 0; step < 3; ++step)
    pipelined_step(file, buffers, groups, [&](std::size_t, std::span<std::byte> group) {
      for (float& x : floats(group))
        x += 1.0f;
    });
  for (std::size_t k = 0; k < groups; ++k) {
    file.read(k * group_bytes, buffers[0]).wait();
    for (float x : floats(buffers[0]))
      ASSERT_EQ(x, static_cast<float>(k) + 3.0f) << "sub-group " << k;
  }
}

} // namespace
