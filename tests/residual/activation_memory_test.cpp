// ActivationMemory with buffers of mixed lifetimes, as a checkpointed loop takes them (kept inputs
// for the step between one segment's buffers and the next), over batches of varying size: the
// arena settles at exactly the live peak and the heap stops moving, where one-by-one allocation
// leaves holes that make the heap grow past what is ever live. Each mode runs in a child process
// of its own, with every allocation from the heap (no mmap) so that the heap's size is the
// footprint.

#include "zero/residual/activation_memory.hpp"

#include <gtest/gtest.h>

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstddef>

namespace {

using zero::ActivationMemory;
using Lifetime = zero::ActivationLifetime;

struct Footprint {
  std::size_t heap = 0;      // bytes the heap grew by over the run
  std::size_t settled = 0;   // ... after the first round of batch sizes
  std::size_t peak_live = 0; // the most bytes live at once
  std::size_t reserved = 0;  // the arena
};

// 4 segments of 3 layers, each layer an output and a saved state 4 times as large; batches of
// 4, 7, 5, 8, 6 and 3 rows in turn, 5 rounds.
Footprint run(bool contiguous) {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  Footprint f;
  const std::size_t start = mallinfo2().arena;
  std::size_t after_first_round = 0;
  {
    ActivationMemory memory(contiguous);
    const std::array<std::size_t, 6> rows = {4, 7, 5, 8, 6, 3};
    constexpr std::size_t width = 4096, segments = 4, layers = 3;
    auto segment = [&](std::size_t activation) {
      for (std::size_t l = 0; l < layers; ++l) {
        memory.take(Lifetime::segment, activation)[0] = 1; // touched, as a layer writes it
        memory.take(Lifetime::segment, 4 * activation)[0] = 1;
      }
      memory.end_segment();
    };
    for (std::size_t step = 0; step < 5 * rows.size(); ++step) {
      const std::size_t activation = rows[step % rows.size()] * width;
      for (std::size_t s = 0; s < segments; ++s) {
        memory.take(Lifetime::step, activation)[0] = 1; // the segment's kept input
        segment(activation);
      }
      memory.take(Lifetime::step, 2 * activation)[0] = 1; // backward's gradient buffers
      for (std::size_t s = 0; s < segments; ++s)
        segment(activation);
      memory.end_step();
      if (step + 1 == rows.size()) after_first_round = mallinfo2().arena;
    }
    f.peak_live = memory.peak_live_bytes();
    f.reserved = memory.reserved_bytes();
    f.heap = mallinfo2().arena - start;
    f.settled = mallinfo2().arena - after_first_round;
  }
  return f;
}

Footprint in_child(bool contiguous) {
  int pipe_ends[2];
  EXPECT_EQ(::pipe(pipe_ends), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    const Footprint f = run(contiguous);
    const bool written = ::write(pipe_ends[1], &f, sizeof f) == ssize_t(sizeof f);
    ::_exit(written ? 0 : 1);
  }
  Footprint f;
  EXPECT_EQ(::read(pipe_ends[0], &f, sizeof f), ssize_t(sizeof f));
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
  return f;
}

TEST(ActivationMemory, TheArenaSettlesAtTheLivePeakWhereOneByOneGrows) {
  const Footprint arena = in_child(true), plain = in_child(false);
  EXPECT_EQ(arena.peak_live, plain.peak_live) << "the same buffers";
  EXPECT_EQ(arena.reserved, arena.peak_live);
  EXPECT_EQ(arena.settled, 0u) << "once sized, the arena takes nothing from the heap";
  // One by one, the holes between long- and short-lived buffers cost a large share more.
  EXPECT_GT(double(plain.heap), 1.3 * double(plain.peak_live))
      << "heap " << plain.heap << " bytes, live at most " << plain.peak_live;
  std::printf("one by one: heap %.2f x the live peak; arena: %.2f x, and still after the first "
              "round of batch sizes\n",
              double(plain.heap) / double(plain.peak_live),
              double(arena.reserved) / double(arena.peak_live));
}

} // namespace
