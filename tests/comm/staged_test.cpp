// StagedCommunicator's ordering contract over the host stream space, where a missing wait reads
// stale data deterministically: a collective reads its input after the caller's stream, calls run
// in call order, and a failure on the caller's stream fails the collective on every rank instead
// of sending stale data. (Every collective and element type: collectives_test.cpp, "Staged".)

#include <zero/comm/counting_communicator.hpp>
#include <zero/comm/mpi_communicator.hpp>
#include <zero/comm/staged_communicator.hpp>
#include <zero/core/error.hpp>
#include <zero/core/host_stream_space.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

using zero::HostStream;
using zero::HostStreamSpace;
using zero::ReduceOp;
using Staged = zero::StagedCommunicator<HostStreamSpace, zero::MpiCommunicator>;

// A staged communicator of its own over a duplicate of the world, with its caller stream.
struct StagedSetup {
  HostStream caller{"caller"};
  HostStream transfer{"transfer"};
  Staged comm{zero::MpiCommunicator(boost::mpi::communicator()), HostStreamSpace(caller),
              HostStreamSpace(transfer)};
  int ranks = comm.size();
};

TEST(StagedCommunicator, ReadsItsInputAfterTheCallersStream) {
  StagedSetup s;
  std::vector<float> data(1000, 0.0f);
  {
    auto held = s.caller.hold(); // the producer is slow: its write has not run at the call
    s.caller.enqueue("write the input", [&] { std::fill(data.begin(), data.end(), 1.5f); });
    zero::Work work = s.comm.all_reduce(data, ReduceOp::sum);
    EXPECT_TRUE(work.pending());
    held.release();
    work.wait();
  }
  for (float v : data)
    ASSERT_EQ(v, 1.5f * static_cast<float>(s.ranks));
}

// The same pipeline with the caller's event taken from an idle stream instead: the collective
// runs before the held write and sends the stale zeros. This is what the contract prevents, and
// what the host stream space shows for any dropped wait.
TEST(StagedCommunicator, WithoutTheCallersEventItSendsStaleData) {
  StagedSetup s;
  HostStream idle{"idle"};
  s.comm.set_caller(HostStreamSpace(idle));
  std::vector<float> data(1000, 0.0f);
  auto held = s.caller.hold();
  s.caller.enqueue("write the input", [&] { std::fill(data.begin(), data.end(), 1.5f); });
  s.comm.all_reduce(data, ReduceOp::sum).wait();
  EXPECT_EQ(data[0], 0.0f) << "the collective waited for a stream it was not told about";
  held.release();
  s.caller.synchronize();
}

// Counting the traffic keeps the ordering: the engine sees a counted staged communicator as
// ordered after its caller stream (no host wait before its collectives), and it is.
TEST(StagedCommunicator, CountedItStillReadsItsInputAfterTheCallersStream) {
  using Counted = zero::CountingCommunicator<Staged>;
  static_assert(zero::OrderedAfterCaller<Counted, HostStreamSpace>);
  HostStream caller{"caller"};
  HostStream transfer{"transfer"};
  HostStream other{"other"};
  Counted counted{Staged(zero::MpiCommunicator(boost::mpi::communicator()), HostStreamSpace(caller),
                         HostStreamSpace(transfer))};
  std::vector<float> data(1000, 0.0f);
  {
    zero::CallerScope<Counted, HostStreamSpace> scope(&counted, HostStreamSpace(other));
    EXPECT_EQ(&counted.caller().stream(), &other);
    auto held = other.hold();
    other.enqueue("write the input", [&] { std::fill(data.begin(), data.end(), 2.5f); });
    zero::Work work = counted.all_reduce(data, ReduceOp::sum);
    EXPECT_TRUE(work.pending());
    held.release();
    work.wait();
  }
  EXPECT_EQ(&counted.caller().stream(), &caller) << "the scope restores the caller stream";
  for (float v : data)
    ASSERT_EQ(v, 2.5f * static_cast<float>(counted.size()));
  EXPECT_EQ(counted.stats()[zero::Collective::all_reduce].calls, 1u);
  EXPECT_EQ(counted.stats()[zero::Collective::all_reduce].elements, 1000u);
}

TEST(StagedCommunicator, CallsRunInCallOrder) {
  StagedSetup s;
  std::vector<double> data(5000, 1.0);
  // The second consumes the first's output without a wait between them, as on NCCL's stream.
  zero::Work first = s.comm.all_reduce(data, ReduceOp::sum);
  zero::Work second = s.comm.all_reduce(data, ReduceOp::sum);
  std::vector<double> gathered(5000 * static_cast<std::size_t>(s.ranks));
  zero::Work third = s.comm.all_gather(data, gathered);
  second.wait();
  first.wait();
  third.wait();
  const double want = static_cast<double>(s.ranks) * s.ranks;
  EXPECT_EQ(data[4999], want);
  EXPECT_EQ(gathered.back(), want);
}

// Every rank's producer fails: no rank sends, each gets the failure, naming it.
TEST(StagedCommunicator, AFailedProducerFailsTheCollective) {
  StagedSetup s;
  std::vector<float> data(10, 1.0f);
  s.caller.enqueue("write the input", [] { throw std::runtime_error("producer failed"); });
  try {
    // At the call if the producer has already failed (its stream refuses the event), else at wait.
    s.comm.all_reduce(data, ReduceOp::sum).wait();
    FAIL() << "expected the producer's failure";
  } catch (const zero::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("producer failed"), std::string::npos) << what;
  }
  EXPECT_EQ(data[0], 1.0f);
  EXPECT_THROW(s.caller.synchronize(), zero::Error);
}

} // namespace
