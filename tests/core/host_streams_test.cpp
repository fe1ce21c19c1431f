// HostStream, HostEvent and HostStreamSpace: order within a stream, concurrency across streams,
// events as the only order between them, failures that stop dependent work, and the point of the
// space: a pipeline that drops an event wait reads stale data, every run; and for_each_index, the
// kernels a model writes once. StreamHold and a deferring stream make a producer "slow" without
// sleeps, so every test here is deterministic.

#include <zero/core/bfloat16.hpp>
#include <zero/core/error.hpp>
#include <zero/core/execution_space.hpp>
#include <zero/core/for_each.hpp>
#include <zero/core/host_stream.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/core/platform.hpp>
#include <zero/core/stream_space.hpp>
#include <zero/core/view.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Whether `text` contains `part`, showing both when it does not.
testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

static_assert(zero::ExecutionSpace<zero::HostStreamSpace>);
static_assert(zero::StreamSpace<zero::HostStreamSpace>);
static_assert(!zero::StreamSpace<zero::HostThreads>); // no streams, no events

// example-begin pipeline
// Written once over StreamSpace: the producer widens bfloat16 gradients into `widened` on its
// stream, and the consumer copies them on from its own. The event is the only thing that orders
// the consumer's copy after the producer's conversion.
template <zero::StreamSpace Space>
void widen_then_copy(const Space& producer, const Space& consumer,
                     typename Space::event_type& widened_ready,
                     zero::View<const zero::bfloat16, typename Space::memory_space> gradients,
                     zero::View<float, typename Space::memory_space> widened,
                     zero::View<float, typename Space::memory_space> out) {
  convert(producer, gradients, widened);
  record(producer, widened_ready);
  wait(consumer, widened_ready);
  copy(consumer, zero::View<const float, typename Space::memory_space>(widened), out);
}
// example-end pipeline

// The same pipeline with the bug a review can miss: the consumer's wait is dropped.
template <zero::StreamSpace Space>
void widen_then_copy_without_wait(
    const Space& producer, const Space& consumer, typename Space::event_type& widened_ready,
    zero::View<const zero::bfloat16, typename Space::memory_space> gradients,
    zero::View<float, typename Space::memory_space> widened,
    zero::View<float, typename Space::memory_space> out) {
  convert(producer, gradients, widened);
  record(producer, widened_ready);
  copy(consumer, zero::View<const float, typename Space::memory_space>(widened), out);
}

std::vector<zero::bfloat16> gradients_of(const std::vector<float>& values) {
  std::vector<zero::bfloat16> gradients;
  for (float v : values)
    gradients.emplace_back(v);
  return gradients;
}

TEST(HostStream, RunsTasksInSubmissionOrder) {
  zero::HostStream stream("in order");
  std::vector<int> ran; // touched by the worker only until synchronize()
  {
    const zero::StreamHold hold = stream.hold(); // everything is queued before anything runs
    for (int i = 0; i < 1000; ++i)
      stream.enqueue("append " + std::to_string(i), [&ran, i] { ran.push_back(i); });
  }
  stream.synchronize();
  ASSERT_EQ(ran.size(), 1000u);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(ran[static_cast<std::size_t>(i)], i);
}

// A deferring stream starts a task only once something waits for a point at or after it: the
// host (an event's synchronize or query, the stream's synchronize) or another stream's wait, when
// that stream reaches it; and no further than that point.
TEST(HostStream, DeferredTasksRunOnlyOnceWaitedFor) {
  zero::HostStream stream("deferring");
  zero::HostStream other("waiting");
  bool before = false;
  stream.enqueue("queued before", [&] { before = true; });
  stream.defer_until_waited();
  std::vector<int> ran; // touched by the worker only until the event that follows it passed
  zero::HostEvent first, second, third;
  stream.enqueue("first", [&] { ran.push_back(1); });
  first.record(stream);
  stream.enqueue("second", [&] { ran.push_back(2); });
  second.record(stream);
  stream.enqueue("third", [&] { ran.push_back(3); });
  third.record(stream);
  stream.enqueue("last", [&] { ran.push_back(4); });
  EXPECT_EQ(stream.deferred_tasks(), 7u); // what was queued before the call runs as before
  first.synchronize();
  EXPECT_TRUE(before);
  EXPECT_EQ(ran, std::vector<int>{1});
  EXPECT_EQ(stream.deferred_tasks(), 5u);
  while (!second.query()) { // asking counts as waiting, so that a loop that polls ends
  }
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  other.wait(third);
  zero::HostEvent waited;
  waited.record(other);
  waited.synchronize(); // the other stream's wait let `stream` run up to `third`, no further
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(stream.deferred_tasks(), 1u);
  stream.synchronize();
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3, 4}));
  stream.end_deferral(); // back to running at once
  zero::HostEvent after;
  stream.enqueue("after", [&] { ran.push_back(5); });
  after.record(stream);
  EXPECT_EQ(stream.deferred_tasks(), 0u);
  stream.synchronize();
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3, 4, 5}));
}

// Deferred work that nobody waits for runs when the deferral ends, or when the stream goes.
TEST(HostStream, DeferredTasksRunAtTheEndOfTheDeferralOrOfTheStream) {
  bool ran = false;
  {
    zero::HostStream stream("deferring");
    stream.defer_until_waited();
    stream.enqueue("never waited for", [&] { ran = true; });
  }
  EXPECT_TRUE(ran);
  zero::HostStream stream("deferring");
  stream.defer_until_waited();
  zero::HostEvent done;
  int value = 0;
  stream.enqueue("write", [&] { value = 7; });
  done.record(stream);
  stream.end_deferral();
  done.synchronize();
  EXPECT_EQ(value, 7);
}

TEST(HostStream, RunsOtherStreamsWhileOneIsHeld) {
  zero::HostStream held("held");
  zero::HostStream free("free");
  bool held_ran = false;
  bool free_ran = false;
  zero::HostEvent held_done;
  zero::StreamHold hold = held.hold();
  held.enqueue("held task", [&] { held_ran = true; });
  held_done.record(held);
  free.enqueue("free task", [&] { free_ran = true; });
  free.synchronize(); // returns although `held` has not started: the streams are independent
  EXPECT_TRUE(free_ran);
  EXPECT_FALSE(held_done.query());
  hold.release();
  held.synchronize();
  EXPECT_TRUE(held_ran);
  EXPECT_TRUE(held_done.query());
}

TEST(HostStreamSpace, EventOrdersConsumerAfterHeldProducer) {
  // example-begin host-spaces
  zero::HostStream producer_stream("producer"); // a worker thread each
  zero::HostStream consumer_stream("consumer");
  const zero::HostStreamSpace producer(producer_stream); // handles on the streams
  const zero::HostStreamSpace consumer(consumer_stream);
  // example-end host-spaces
  const std::vector<zero::bfloat16> gradients = gradients_of({1.5f, -2.0f, 3.25f, 0.5f});
  std::vector<float> widened(4, 0.0f);
  std::vector<float> out(4, 0.0f);
  zero::HostEvent widened_ready;
  zero::HostEvent consumed;
  zero::StreamHold slow_producer = producer_stream.hold();
  widen_then_copy(producer, consumer, widened_ready, zero::View<const zero::bfloat16>(gradients),
                  zero::View<float>(widened), zero::View<float>(out));
  record(consumer, consumed);
  EXPECT_FALSE(consumed.query()); // the consumer waits for the held producer
  slow_producer.release();
  consumer.fence();
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, 3.25f, 0.5f}));
  producer.fence();
}

// The check CI relies on: over HostStreamSpace, a dropped event wait is a wrong result, every run.
// The producer is held, so the consumer copies `widened` before the conversion has written it.
TEST(HostStreamSpace, DroppedEventWaitReadsStaleData) {
  zero::HostStream producer_stream("producer");
  zero::HostStream consumer_stream("consumer");
  const zero::HostStreamSpace producer(producer_stream);
  const zero::HostStreamSpace consumer(consumer_stream);
  const std::vector<zero::bfloat16> gradients = gradients_of({1.5f, -2.0f, 3.25f, 0.5f});
  std::vector<float> widened(4, 0.0f);
  std::vector<float> out(4, 0.0f);
  zero::HostEvent widened_ready;
  zero::StreamHold slow_producer = producer_stream.hold();
  widen_then_copy_without_wait(producer, consumer, widened_ready,
                               zero::View<const zero::bfloat16>(gradients),
                               zero::View<float>(widened), zero::View<float>(out));
  consumer.fence(); // the consumer does not wait: it has run, on stale data
  slow_producer.release();
  producer.fence();
  EXPECT_EQ(widened, (std::vector<float>{1.5f, -2.0f, 3.25f, 0.5f}));
  EXPECT_EQ(out, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}))
      << "without the event wait the consumer must read the stale buffer";
}

// The same with the producer deferred instead of held: the consumer that waits lets it run (its
// wait task asks for the event), the one that does not wait reads the stale buffer, every run.
TEST(HostStreamSpace, DeferredProducerRunsForItsWaitersOnly) {
  zero::HostStream producer_stream("producer");
  zero::HostStream consumer_stream("consumer");
  const zero::HostStreamSpace producer(producer_stream);
  const zero::HostStreamSpace consumer(consumer_stream);
  const std::vector<zero::bfloat16> gradients = gradients_of({1.5f, -2.0f, 3.25f, 0.5f});
  for (const bool waits : {true, false}) {
    std::vector<float> widened(4, 0.0f);
    std::vector<float> out(4, 0.0f);
    zero::HostEvent widened_ready;
    producer_stream.defer_until_waited();
    if (waits)
      widen_then_copy(producer, consumer, widened_ready,
                      zero::View<const zero::bfloat16>(gradients), zero::View<float>(widened),
                      zero::View<float>(out));
    else
      widen_then_copy_without_wait(producer, consumer, widened_ready,
                                   zero::View<const zero::bfloat16>(gradients),
                                   zero::View<float>(widened), zero::View<float>(out));
    consumer.fence();
    producer_stream.end_deferral();
    producer.fence();
    const std::vector<float> expected =
        waits ? std::vector<float>{1.5f, -2.0f, 3.25f, 0.5f} : std::vector<float>(4, 0.0f);
    EXPECT_EQ(out, expected) << (waits ? "with" : "without") << " the event wait";
  }
}

TEST(HostStream, TaskFailureSurfacesAtSynchronizeAndStopsDependentWork) {
  zero::HostStream producer("producer");
  zero::HostStream consumer("consumer");
  bool later_ran = false;
  bool dependent_ran = false;
  zero::HostEvent after_failure;
  {
    const zero::StreamHold hold = producer.hold(); // the failure happens after all is queued
    producer.enqueue("explode", [] { throw std::runtime_error("boom"); });
    producer.enqueue("later task", [&] { later_ran = true; });
    after_failure.record(producer);
    consumer.wait(after_failure);
    consumer.enqueue("dependent task", [&] { dependent_ran = true; });
  }
  try {
    producer.synchronize();
    FAIL() << "synchronize() must rethrow the task's exception";
  } catch (const zero::Error& e) {
    EXPECT_TRUE(contains(e.what(), "stream 'producer': task 'explode' failed: boom"));
  }
  EXPECT_THROW(producer.synchronize(), zero::Error); // every time, not once
  EXPECT_FALSE(later_ran);
  EXPECT_THROW((void)after_failure.query(), zero::Error);
  EXPECT_THROW(after_failure.synchronize(), zero::Error);
  try {
    producer.enqueue("refused task", [] {});
    FAIL() << "a failed stream must refuse new work";
  } catch (const zero::Error& e) {
    EXPECT_TRUE(contains(e.what(), "refuses 'refused task'"));
    EXPECT_TRUE(contains(e.what(), "'explode' failed: boom"));
  }
  try {
    consumer.synchronize();
    FAIL() << "a stream waiting on a failed stream's event must fail too";
  } catch (const zero::Error& e) {
    EXPECT_TRUE(contains(e.what(), "stream 'consumer': task 'wait for an event' failed"));
    EXPECT_TRUE(contains(e.what(), "'explode' failed: boom"));
  }
  EXPECT_FALSE(dependent_ran);
}

TEST(HostStream, ZeroErrorsKeepTheirKind) {
  zero::HostStream stream("kinds");
  stream.enqueue("read", [] { zero::fail(zero::ErrorKind::io, "disk gone"); });
  try {
    stream.synchronize();
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::io);
    EXPECT_STREQ(e.what(), "zero: stream 'kinds': task 'read' failed: disk gone");
  }
}

TEST(HostStreamSpace, SizeMismatchFailsAtTheCall) {
  zero::HostStream stream("sizes");
  const zero::HostStreamSpace space(stream);
  const std::vector<float> three(3, 1.0f);
  std::vector<float> four(4, 0.0f);
  const zero::StreamHold hold = stream.hold(); // nothing runs: the check is at the call
  EXPECT_THROW(zero::convert(space, zero::View<const float>(three), zero::View<float>(four)),
               zero::Error);
  EXPECT_THROW(zero::accumulate(space, zero::View<const float>(three), zero::View<float>(four)),
               zero::Error);
  try {
    zero::copy(space, zero::View<const float>(three), zero::View<float>(four));
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_TRUE(contains(e.what(), "copy: 3 elements into a buffer of 4"));
  }
  zero::HostEvent nothing_queued;
  nothing_queued.record(stream);
  EXPECT_FALSE(nothing_queued.query()); // held: only the record is queued
}

TEST(HostStreamSpace, FenceWaitsForQueuedConvertsAndAccumulates) {
  zero::HostStream stream("fence");
  const zero::HostStreamSpace space(stream);
  const std::vector<zero::bfloat16> gradients = gradients_of(std::vector<float>(4096, 0.25f));
  std::vector<float> sums(4096, 1.0f);
  std::vector<zero::bfloat16> narrowed(4096);
  {
    const zero::StreamHold hold = stream.hold();
    for (int micro_batch = 0; micro_batch < 4; ++micro_batch)
      zero::accumulate(space, zero::View<const zero::bfloat16>(gradients), zero::View<float>(sums));
    zero::convert(space, zero::View<const float>(sums), zero::View<zero::bfloat16>(narrowed));
  } // calls returned before any work ran
  space.fence();
  for (std::size_t i = 0; i < sums.size(); ++i) {
    EXPECT_EQ(sums[i], 2.0f);
    EXPECT_EQ(static_cast<float>(narrowed[i]), 2.0f);
  }
}

// clear() between steps: the sums are zero only once the queued fill has run, and the
// accumulation queued after it starts from zero.
TEST(HostStreamSpace, FillZeroIsQueuedInOrder) {
  zero::HostStream stream("fill");
  const zero::HostStreamSpace space(stream);
  std::vector<float> sums(5, 3.0f);
  const std::vector<float> gradients(5, 0.5f);
  {
    const zero::StreamHold hold = stream.hold();
    zero::fill_zero(space, zero::View<float>(sums));
    EXPECT_EQ(sums[0], 3.0f); // queued, not run
    zero::accumulate(space, zero::View<const float>(gradients), zero::View<float>(sums));
  }
  space.fence();
  for (float s : sums)
    EXPECT_EQ(s, 0.5f);
}

TEST(HostStreamSpace, FenceRethrowsAFailure) {
  zero::HostStream stream("fence failure");
  const zero::HostStreamSpace space(stream);
  stream.enqueue("bad kernel", [] { zero::fail(zero::ErrorKind::numerical, "nan"); });
  EXPECT_THROW(space.fence(), zero::Error);
}

TEST(HostStream, DestructionRunsQueuedWork) {
  std::vector<int> ran;
  {
    zero::HostStream stream("drained");
    zero::StreamHold hold = stream.hold();
    for (int i = 0; i < 10; ++i)
      stream.enqueue("append", [&ran, i] { ran.push_back(i); });
    hold.release();
  } // no synchronize(): the destructor runs what is queued, then joins the worker
  EXPECT_EQ(ran.size(), 10u);
}

TEST(HostStream, DestructionLogsAFailureNobodySynchronizedFor) {
  testing::internal::CaptureStderr();
  {
    zero::HostStream stream("forgotten");
    stream.enqueue("explode", [] { throw std::runtime_error("boom"); });
  }
  EXPECT_TRUE(contains(testing::internal::GetCapturedStderr(),
                       "stream 'forgotten': task 'explode' failed: boom (never reported)"));
}

TEST(HostStream, SynchronizeOnAHeldStreamThrowsInsteadOfHanging) {
  zero::HostStream stream("held");
  zero::StreamHold hold = stream.hold();
  stream.synchronize(); // nothing queued: returns
  stream.enqueue("pending", [] {});
  EXPECT_THROW(stream.synchronize(), zero::Error);
  hold.release();
  stream.synchronize();
}

TEST(HostEvent, WaitingOnAnUnrecordedEventDoesNothing) {
  zero::HostStream stream("waiter");
  const zero::HostEvent never_recorded;
  EXPECT_TRUE(never_recorded.query());
  never_recorded.synchronize();
  bool ran = false;
  stream.wait(never_recorded); // CUDA's rule: no dependency
  stream.enqueue("after the wait", [&] { ran = true; });
  stream.synchronize();
  EXPECT_TRUE(ran);
}

TEST(HostEvent, AWaitKeepsThePointRecordedWhenItWasQueued) {
  zero::HostStream producer("producer");
  zero::HostStream other("other");
  zero::HostStream consumer("consumer");
  zero::HostEvent event;
  zero::HostEvent consumer_done;
  zero::StreamHold hold = producer.hold();
  event.record(producer);
  consumer.wait(event); // the producer's point
  consumer_done.record(consumer);
  event.record(other); // moves the event, not the wait already queued
  event.synchronize(); // the new point: `other` is not held
  EXPECT_FALSE(consumer_done.query());
  hold.release();
  consumer_done.synchronize();
  EXPECT_TRUE(consumer_done.query());
}

} // namespace

// for_each_index (zero/core/for_each.hpp): every index once, on the host's threads or queued on a
// stream in its order.
struct CountCalls {
  int* calls;
  ZERO_HOST_DEVICE void operator()(std::size_t i) const { ++calls[i]; }
};
struct Doubled {
  static constexpr bool elementwise = true;
  const float* from;
  float* to;
  ZERO_HOST_DEVICE void operator()(std::size_t i) const { to[i] = 2.0f * from[i]; }
};

TEST(ForEachIndex, CallsEveryIndexOnce) {
  // Across the serial and parallel sizes of both kinds of kernel.
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{37}, std::size_t{1} << 16}) {
    std::vector<int> calls(n, 0);
    zero::for_each_index(zero::HostThreads{}, n, CountCalls{calls.data()});
    EXPECT_EQ(calls, std::vector<int>(n, 1)) << n;
    std::vector<float> from(n), to(n, -1.0f);
    for (std::size_t i = 0; i < n; ++i)
      from[i] = float(i);
    zero::for_each_index(zero::HostThreads{}, n, Doubled{from.data(), to.data()});
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(to[i], 2.0f * float(i)) << n;
  }
}

TEST(ForEachIndex, RunsInItsStreamsOrder) {
  zero::HostStream stream("kernels");
  const zero::HostStreamSpace space(stream);
  std::vector<float> values(100, 1.0f), doubled(100, 0.0f);
  zero::StreamHold held = stream.hold();
  const std::vector<float> threes(100, 3.0f);
  copy(space, zero::View<const float>(threes), zero::View<float>(values));
  zero::for_each_index(space, values.size(), Doubled{values.data(), doubled.data()});
  zero::HostEvent done;
  record(space, done);
  EXPECT_FALSE(done.query()); // queued behind the held stream, not run at the call
  EXPECT_EQ(doubled, std::vector<float>(100, 0.0f));
  held.release();
  space.fence();
  EXPECT_EQ(doubled, std::vector<float>(100, 6.0f)); // after the copy queued before it
}
