#pragma once
// HostStream and HostEvent: CUDA's streams and events on the CPU, so that code written for device
// streams has its ordering checked on machines without a GPU. A HostStream is an in-order queue of
// tasks run by one worker thread it owns: tasks of one stream run in submission order, tasks of
// different streams run concurrently, and the only order across streams is the one events give.
// A stream that misses an event wait then reads data that is not ready, as it would on a GPU, and
// StreamHold (a gate that keeps a stream's worker from starting tasks) makes that deterministic:
// hold the producer, and the consumer that does not wait reads stale data every time, with no
// sleeps. For code that waits on the producer itself, defer_until_waited() makes the stream run a
// task only once something waits for it: as late as its waits allow, so a missing wait reads stale
// data every run, however fast or slow the machine. docs/execution-spaces.md has the contract and
// an example.
//
// Semantics follow CUDA's where they can:
// - HostEvent::record(stream) marks the point after everything queued on `stream` so far;
//   re-recording moves the event to a new point, and a wait already queued keeps the old one.
// - HostStream::wait(event) makes the stream's later tasks wait until the event's point has
//   passed. Waiting on an event that was never recorded does nothing (cudaStreamWaitEvent's rule),
//   and so do query() (true) and synchronize() on it.
// - A deferring stream (defer_until_waited) has no CUDA counterpart: it is the latest a device
//   could run the work, for tests.
// - A task that throws fails its stream: the stream discards its queued tasks, refuses new ones,
//   and synchronize() rethrows the failure (as zero::Error, naming the stream and the task) every
//   time it is called. The events recorded behind the failed task never pass: whoever waits on
//   them fails too, so dependent work never runs on bad data. CUDA's sticky errors are coarser
//   (they poison the whole context); the rule here is that no work runs after what it depends on
//   failed.
// A stream and an event are used from one host thread at a time. The memory a task touches must
// outlive it (until synchronize() or an event after it), as with CUDA's asynchronous calls.

#include "zero/core/error.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace zero {

class HostStream;
class HostEvent;

namespace detail {

// The message of an exception thrown by a task, without zero::Error's "zero: " prefix (the stream
// adds its own).
inline std::string task_failure_text(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    std::string_view text = e.what();
    if (text.starts_with("zero: ")) text.remove_prefix(6);
    return std::string(text);
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

inline ErrorKind task_failure_kind(const std::exception_ptr& failure) noexcept {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return e.kind();
  } catch (...) {
    return ErrorKind::invalid_argument;
  }
}

// How a point recorded on a deferring stream (HostStream::defer_until_waited) asks the stream to
// run up to it: shared by the stream and those points, so that a point outliving its stream asks
// nobody (the stream ran or discarded everything before it went).
class StreamDemand {
 public:
  explicit StreamDemand(HostStream& stream) noexcept : stream_(&stream) {}
  StreamDemand(const StreamDemand&) = delete;
  StreamDemand& operator=(const StreamDemand&) = delete;
  // Lets the stream start its first `tasks` tasks. Defined after HostStream.
  inline void demand(std::uint64_t tasks);
  void detach() noexcept {
    const std::lock_guard lock(mutex_);
    stream_ = nullptr;
  }

 private:
  std::mutex mutex_; // taken before the stream's own
  HostStream* stream_;
};

// One recorded point of an event: passed when the stream's worker reaches it, failed when the
// stream fails before that. Shared by the event, the recording task and the waiting tasks.
class EventPoint {
 public:
  // Recorded on a deferring stream as its `tasks`-th task: whoever waits for the point, or asks
  // whether it passed, first lets the stream run that far. Set before the point is shared.
  void defer_on(std::shared_ptr<StreamDemand> stream, std::uint64_t tasks) noexcept {
    deferred_on_ = std::move(stream);
    tasks_ = tasks;
  }
  void pass() {
    {
      const std::lock_guard lock(mutex_);
      state_ = State::passed;
    }
    changed_.notify_all();
  }
  void abandon(std::string reason) {
    {
      const std::lock_guard lock(mutex_);
      if (state_ != State::pending) return;
      state_ = State::failed;
      reason_ = std::move(reason);
    }
    changed_.notify_all();
  }
  bool passed() const {
    ask_for_it();
    const std::lock_guard lock(mutex_);
    throw_if_failed();
    return state_ == State::passed;
  }
  void wait() const {
    ask_for_it();
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return state_ != State::pending; });
    throw_if_failed();
  }

 private:
  enum class State { pending, passed, failed };
  // Outside the point's mutex: the stream's worker takes it (abandon) under the stream's.
  void ask_for_it() const {
    if (deferred_on_) deferred_on_->demand(tasks_);
  }
  void throw_if_failed() const {
    if (state_ == State::failed)
      fail(ErrorKind::invalid_argument, "the event's point never passed: " + reason_);
  }

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  State state_ = State::pending;
  std::string reason_;
  std::shared_ptr<StreamDemand> deferred_on_; // null unless recorded on a deferring stream
  std::uint64_t tasks_ = 0;
};

} // namespace detail

// Keeps a HostStream's worker from starting tasks while it lives (a running task finishes), so a
// test can make a stream "slow" without timing. It must not outlive its stream, and the holder
// must release it before synchronizing on that stream (which throws rather than hang).
class [[nodiscard]] StreamHold {
 public:
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  StreamHold(StreamHold&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  StreamHold& operator=(StreamHold&&) = delete;
  ~StreamHold() { release(); }
  inline void release() noexcept;

 private:
  friend class HostStream;
  explicit StreamHold(HostStream& stream) noexcept : stream_(&stream) {}
  HostStream* stream_;
};

class HostStream {
 public:
  explicit HostStream(std::string name = "host stream")
      : name_(std::move(name)), worker_([this] { run(); }) {}
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Runs what is queued (or, after a failure, discards it), then stops the worker. A failure
  // nobody synchronized for is logged: a destructor must not throw.
  ~HostStream() {
    demand_->detach(); // what is deferred runs now: nobody need ask for it
    {
      const std::lock_guard lock(mutex_);
      if (holds_ != 0)
        detail::assertion_failed("no StreamHold outlives its HostStream", __FILE__, __LINE__);
      stopping_ = true;
      deferring_ = false;
    }
    changed_.notify_all();
    worker_.join();
    if (failure_ && !failure_reported_) detail::log_error(failure_message() + " (never reported)");
  }

  const std::string& name() const noexcept { return name_; }

  // Queues `task`; `description` names it in the error if it throws. Throws when the stream has
  // failed (its earlier work did not complete, so later work must not run).
  void enqueue(std::string description, std::function<void()> task) {
    submit(Task{std::move(description), std::move(task), nullptr});
  }

  // Later tasks of this stream wait until `event`'s point has passed. Defined after HostEvent.
  inline void wait(const HostEvent& event);

  // Blocks until everything queued so far has run; rethrows the stream's failure, if any.
  void synchronize() {
    std::unique_lock lock(mutex_);
    const std::uint64_t target = submitted_;
    if (holds_ != 0 && finished_ < target)
      fail(ErrorKind::invalid_argument, "synchronize on stream '" + name_ +
                                            "' while it is held would never return: release " +
                                            "its StreamHold first");
    demanded_ = std::max(demanded_, target); // a deferring stream runs what is waited for
    changed_.notify_all();
    changed_.wait(lock, [&] { return finished_ >= target; });
    if (failure_) {
      failure_reported_ = true;
      fail(detail::task_failure_kind(failure_), failure_message());
    }
  }

  // Until the returned gate is released, the worker starts no task (see StreamHold).
  StreamHold hold() {
    {
      const std::lock_guard lock(mutex_);
      ++holds_;
    }
    return StreamHold(*this);
  }

  // From now until end_deferral(), the worker starts a task queued meanwhile only once something
  // waits for a point at or after it: synchronize(), or HostEvent::synchronize() or query() of an
  // event recorded behind it, or another stream's wait() on such an event once that stream's
  // worker reaches it. The stream is then as late as the waits on it allow (the latest a GPU could
  // run the work), whatever the machine's speed: work that reads what a task writes without a
  // wait for it reads what was there before, every run. A test's way to make a stream late
  // without timing; unlike a StreamHold, code under test may wait on the stream meanwhile. What
  // was queued before the call runs as before.
  void defer_until_waited() {
    const std::lock_guard lock(mutex_);
    deferring_ = true;
    demanded_ = std::max(demanded_, submitted_);
  }
  // Lets everything deferred run, and the stream run as usual again.
  void end_deferral() {
    {
      const std::lock_guard lock(mutex_);
      deferring_ = false;
    }
    changed_.notify_all();
  }
  // Tasks queued and not started because nobody waited for them yet (0 unless deferring).
  std::uint64_t deferred_tasks() const {
    const std::lock_guard lock(mutex_);
    const std::uint64_t may_start = std::max(demanded_, finished_);
    return deferring_ && submitted_ > may_start ? submitted_ - may_start : 0;
  }

 private:
  friend class HostEvent;
  friend class StreamHold;
  friend class detail::StreamDemand;

  struct Task {
    std::string description;
    std::function<void()> work;
    // The point a record task passes; marked failed instead when the task is discarded.
    std::shared_ptr<detail::EventPoint> recorded;
  };

  void submit(Task task) {
    {
      const std::lock_guard lock(mutex_);
      if (failure_)
        fail(detail::task_failure_kind(failure_), "stream '" + name_ + "' refuses '" +
                                                      task.description +
                                                      "' after its failure: " + failure_text());
      if (deferring_ && task.recorded) task.recorded->defer_on(demand_, submitted_ + 1);
      queue_.push_back(std::move(task));
      ++submitted_;
    }
    changed_.notify_all();
  }

  // Lets a deferring stream start its first `tasks` tasks (detail::StreamDemand).
  void demand(std::uint64_t tasks) {
    {
      const std::lock_guard lock(mutex_);
      if (tasks <= demanded_) return;
      demanded_ = tasks;
    }
    changed_.notify_all();
  }

  void release_hold() noexcept {
    {
      const std::lock_guard lock(mutex_);
      --holds_;
    }
    changed_.notify_all();
  }

  std::string failure_text() const {
    return "task '" + failed_task_ + "' failed: " + detail::task_failure_text(failure_);
  }
  std::string failure_message() const { return "stream '" + name_ + "': " + failure_text(); }

  // The worker: takes tasks in order while the stream is not held (nor deferring past what was
  // asked for: the task in front is the finished_-th); the mutex handoffs order each task after
  // the host calls that queued it and before the synchronize() that waits for it.
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] {
        return (!queue_.empty() && holds_ == 0 && (!deferring_ || finished_ < demanded_)) ||
               (stopping_ && queue_.empty());
      });
      if (queue_.empty()) return;
      Task task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr failure;
      try {
        task.work();
      } catch (...) {
        failure = std::current_exception();
      }
      task.work = nullptr; // the task's captures die outside the lock
      lock.lock();
      ++finished_;
      if (failure) {
        failure_ = failure;
        failed_task_ = task.description;
        // The events behind the failure fail before synchronize() can return, so a host that saw
        // the failure never sees them pending.
        const std::string reason = failure_message();
        if (task.recorded) task.recorded->abandon(reason);
        for (Task& skipped : queue_)
          if (skipped.recorded) skipped.recorded->abandon(reason);
        finished_ += queue_.size();
        queue_.clear();
      }
      changed_.notify_all();
    }
  }

  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Task> queue_;
  std::uint64_t submitted_ = 0;
  std::uint64_t finished_ = 0; // run or discarded
  int holds_ = 0;
  bool deferring_ = false;     // defer_until_waited
  std::uint64_t demanded_ = 0; // while deferring, the tasks that may start
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::string failed_task_;
  bool failure_reported_ = false;
  std::shared_ptr<detail::StreamDemand> demand_ = std::make_shared<detail::StreamDemand>(*this);
  std::thread worker_; // last: it starts running in the constructor and uses the members above
};

inline void detail::StreamDemand::demand(std::uint64_t tasks) {
  const std::lock_guard lock(mutex_);
  if (stream_ != nullptr) stream_->demand(tasks);
}

inline void StreamHold::release() noexcept {
  if (stream_ != nullptr) std::exchange(stream_, nullptr)->release_hold();
}

// A point in a HostStream's order that other streams and the host can wait for.
class HostEvent {
 public:
  HostEvent() = default;

  // Marks the point after everything queued on `stream` so far (throws if the stream has failed).
  void record(HostStream& stream) {
    auto point = std::make_shared<detail::EventPoint>();
    stream.submit(HostStream::Task{"record an event", [point] { point->pass(); }, point});
    point_ = std::move(point);
  }

  // Whether the recorded point has passed (true if never recorded); throws if it never will.
  bool query() const { return point_ == nullptr || point_->passed(); }

  // Blocks the host until the recorded point has passed (at once if never recorded); throws if
  // the stream failed before it.
  void synchronize() const {
    if (point_ != nullptr) point_->wait();
  }

 private:
  friend class HostStream;
  std::shared_ptr<detail::EventPoint> point_;
};

inline void HostStream::wait(const HostEvent& event) {
  if (event.point_ == nullptr) return; // never recorded: nothing to wait for, as in CUDA
  enqueue("wait for an event", [point = event.point_] { point->wait(); });
}

} // namespace zero
