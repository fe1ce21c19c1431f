// Small collectives on the calling thread (CommOptions::inline_below_bytes): a call below the size
// that finds the progress thread idle returns complete; calls behind queued ones keep their order;
// results are the same bits with and without it, on every transport the world offers. Part of
// zero_test_collectives.

#include "comm_test.hpp"

#include <zero/comm/mpi_communicator.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace {

using zero::CommOptions;
using zero::MpiCommunicator;
using zero::ReduceOp;

MpiCommunicator with_inline_below(std::size_t bytes) {
  CommOptions options = CommOptions::from_environment();
  options.inline_below_bytes = bytes;
  return MpiCommunicator(boost::mpi::communicator(), options);
}

std::vector<float> values(int rank, std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = float((i * 7 + std::size_t(rank) * 13 + std::size_t(salt)) % 101) * 0.37f;
  return v;
}

TEST(InlineCalls, ASmallCallThatFindsNothingQueuedReturnsComplete) {
  MpiCommunicator comm = with_inline_below(64 << 10);
  std::vector<float> v(1000, 1.0f);
  zero::Work w = comm.all_reduce(v, ReduceOp::sum);
  EXPECT_TRUE(w.test()) << "a 4 KB call on an idle communicator should have run on this thread";
  EXPECT_EQ(v[999], float(comm.size()));
  // The same call above the size goes to the progress thread; either way the result is the same.
  std::vector<float> big(1 << 16, 1.0f);
  comm.all_reduce(big, ReduceOp::sum).wait();
  EXPECT_EQ(big.back(), float(comm.size()));
}

TEST(InlineCalls, CallsBehindQueuedOnesKeepTheirOrderAndBits) {
  // Large calls (queued) and small ones (inline when nothing is queued) interleaved without
  // waiting; every result must equal the one made with everything queued.
  auto run = [](MpiCommunicator& comm) {
    std::vector<std::vector<float>> data;
    std::vector<zero::Work> works;
    for (int k = 0; k < 12; ++k) {
      const std::size_t n = k % 3 == 0 ? std::size_t{300'000} : std::size_t(100 + 37 * k);
      data.push_back(values(comm.rank(), n, k));
      works.push_back(k % 2 == 0 ? comm.all_reduce(data.back(), ReduceOp::sum)
                                 : comm.all_reduce(data.back(), ReduceOp::avg));
    }
    zero::wait_all(works);
    return data;
  };
  MpiCommunicator queued = with_inline_below(0);
  MpiCommunicator inlined = with_inline_below(64 << 10);
  EXPECT_EQ(run(queued), run(inlined));
}

} // namespace
