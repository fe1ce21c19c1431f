#pragma once
// StagedCommunicator: collectives on buffers of a stream space (device memory on a GPU) carried
// through pinned host memory over a host communicator (MpiCommunicator by default). It is the GPU
// engine's communicator where NCCL is missing, and where several ranks share one GPU (NCCL needs
// one GPU per rank); over HostStreamSpace it runs in CI with the same ordering rules as on a GPU.
//
// The ordering contract, NcclCommunicator's: a collective reads its input after everything queued
// on the caller's stream before the call (an event recorded there at the call), and collectives
// run in the order they were called, so one may consume another's output without a wait between
// them. Work::wait() returns when the result is in the output buffer.
//
// Each call is queued to the communicator's own worker (a HostStream), which, in order: makes the
// transfer stream wait for the caller's event, copies the input to pinned staging memory on it,
// waits for that copy, runs the host collective, copies the result back on the transfer stream
// and waits for it. One collective is in flight at a time (the staging buffer is reused): the
// price of a path meant for correctness first, where NCCL is the fast one.

#include "zero/comm/collective.hpp"
#include "zero/comm/communicator.hpp"
#include "zero/comm/detail/collective_api.hpp"
#include "zero/core/buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/core/host_stream.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace zero {

template <StreamSpace Space, class Host>
requires Communicator<Host> && Host::memory_space::host_accessible class StagedCommunicator;

namespace detail {

// Completion of one staged collective: the point after its task on the worker.
class StagedWork final : public WorkState {
 public:
  StagedWork(HostStream& worker, std::string what) : what_(std::move(what)) {
    done_.record(worker);
  }
  void wait() override { done_.synchronize(); }
  bool test() override { return done_.query(); }
  std::string description() const override { return what_; }

 private:
  HostEvent done_;
  std::string what_;
};

} // namespace detail

template <StreamSpace Space, class Host>
requires Communicator<Host> && Host::memory_space::host_accessible class StagedCommunicator
    : public detail::CollectiveApi<StagedCommunicator<Space, Host>, typename Space::memory_space> {
 public:
  static constexpr bool supports_variable_counts = VariableCountCommunicator<Host>;
  // The communicator an engine takes beside this one for its host collectives (not host(): this
  // communicator's worker drives that one).
  using host_type = Host;

  // `caller`: the stream whose work produces the inputs (each call waits for it); `transfer`: the
  // stream the staging copies run on. Both streams must outlive the communicator.
  StagedCommunicator(Host host, Space caller, Space transfer)
      : state_(std::make_unique<State>(std::move(host), caller, transfer)) {}

  int rank() const noexcept { return state_->host.rank(); }
  int size() const noexcept { return state_->host.size(); }
  const Host& host() const noexcept { return state_->host; }

  // The stream later calls wait for; the constructor's `caller` until changed.
  void set_caller(Space caller) noexcept { state_->caller = caller; }
  Space caller() const noexcept { return state_->caller; }

  // Ranks with the same color form a group, ordered by key. Collective; runs after the calls
  // queued so far, on the worker, as the host communicator requires.
  StagedCommunicator split(int color, int key) {
    std::optional<Host> part;
    state_->worker.enqueue("split(" + std::to_string(color) + ", " + std::to_string(key) + ")",
                           [&] { part.emplace(state_->host.split(color, key)); });
    state_->worker.synchronize();
    return StagedCommunicator(std::move(*part), state_->caller, state_->transfer);
  }

  // The backend entry point (detail::CollectiveApi checked the arguments).
  Work submit(const CollectiveArgs& args) {
    State& s = *state_;
    auto inputs_ready = std::make_shared<typename Space::event_type>();
    record(s.caller, *inputs_ready);
    s.worker.enqueue(args.describe(), [&s, args, inputs_ready] { s.run(args, *inputs_ready); });
    return Work(std::make_shared<detail::StagedWork>(s.worker, args.describe()));
  }

 private:
  using DeviceSpace = typename Space::memory_space;

  struct State {
    Host host;
    Space caller;
    Space transfer;
    Buffer<std::byte, pinned_host> staging;   // send bytes, then receive bytes; grown on demand
    HostStream worker{"staged communicator"}; // last: drained before the members above go

    State(Host h, Space c, Space t) : host(std::move(h)), caller(c), transfer(t) {}

    // On the worker: stage, run the host collective, copy back.
    void run(const CollectiveArgs& args, const typename Space::event_type& inputs_ready) {
      // The worker is a thread of its own: on a GPU, its device must be the transfer stream's.
      if constexpr (requires { transfer.make_current(); }) transfer.make_current();
      const int ranks = host.size();
      const std::size_t send_bytes = args.send_count(ranks) * args.element_bytes();
      const std::size_t recv_bytes = args.recv_count(ranks) * args.element_bytes();
      if (staging.size() < send_bytes + recv_bytes)
        staging = Buffer<std::byte, pinned_host>(send_bytes + recv_bytes, uninitialized);
      std::byte* send = staging.data();
      std::byte* recv = staging.data() + send_bytes;

      // A broadcast reads the root's input only, a reduce writes the root's output only: the other
      // ranks may pass empty buffers.
      const bool sends = args.kind != Collective::broadcast || args.root == host.rank();
      const bool receives = args.kind != Collective::reduce || args.root == host.rank();

      typename Space::event_type staged;
      wait(transfer, inputs_ready);
      if (sends && send_bytes > 0)
        copy(transfer,
             View<const std::byte, DeviceSpace>(static_cast<const std::byte*>(args.send),
                                                send_bytes),
             View<std::byte, pinned_host>(send, send_bytes));
      record(transfer, staged);
      staged.synchronize();

      CollectiveArgs on_host = args;
      on_host.send = send;
      on_host.recv = recv;
      host.submit(on_host).wait();

      if (!receives || recv_bytes == 0) return;
      typename Space::event_type returned;
      copy(transfer, View<const std::byte, pinned_host>(recv, recv_bytes),
           View<std::byte, DeviceSpace>(static_cast<std::byte*>(args.recv), recv_bytes));
      record(transfer, returned);
      returned.synchronize();
    }
  };

  std::unique_ptr<State> state_;
};

} // namespace zero
