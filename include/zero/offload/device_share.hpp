#pragma once
// DeviceShare<Exec>: ZeRO-Offload's CPU/GPU split (EngineOptions::offload_ratio, a config's
// offload_optimizer.ratio: ZeRO-Offload++'s Twin-Flow). Of each layer's block this rank updates,
// the first cut(l) elements (the ratio's share, on a multiple of 16 elements) are updated on the
// host by the offloaded store; the rest of the block keeps its fp32 master weights and moments
// here, in device memory, and is updated by the device's fused step on a stream of its own, queued
// at the start of the update after the gradients' delivery on the engine's stream, so that it runs
// while the host updates its part and while the host's compute copies go up on the engine's
// stream. Its gradients never leave the device and its compute copy is written in place: the link
// carries only the host's share. Before a layer is handed on, the engine's stream waits for the
// device's part of it (order_layer()), and after the update for all of it (finish()).
//
// The host store keeps room for the whole block, and its copy of the device's share is brought up
// to date only when something reads the states between steps (checkpoints, get_layer): download()
// before, upload() after what wrote them. The update is element-wise, so the split gives the
// unsplit step's bits wherever the device's step gives the host's (over the twin, always).
//
// Each step measures both sides (from the start of the update to the end of each side's part) and
// suggests the ratio at which they would end together, assuming each side's time grows with its
// share of the elements.

#include "zero/core/buffer.hpp"
#include "zero/core/error.hpp"
#include "zero/core/stream_space.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/report.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/stream_step.hpp" // fused_step over HostStreamSpace

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <future>
#include <string>
#include <vector>

namespace zero {

template <SideStreams Exec>
class DeviceShare {
  using Memory = typename Exec::memory_space;
  using Clock = std::chrono::steady_clock;

 public:
  // The cut falls on a multiple of this many elements, and each layer's part starts on one in the
  // device's buffers: both the block's part and its states start on 64-byte boundaries (given
  // aligned blocks), where the device's vector loads stay aligned.
  static constexpr std::size_t cut_granularity = 16;

  // `blocks[l]`: the elements of layer l this rank updates; `ratio`: the share the host updates;
  // `tensors`: the fp32 state tensors (master weights, then the optimizer's moments).
  DeviceShare(const std::vector<std::size_t>& blocks, double ratio, std::size_t tensors, Exec exec)
      : exec_(exec), cuts_(host_part(blocks, ratio)), blocks_(blocks), offsets_{0},
        layer_updated_(blocks.size()) {
    for (std::size_t l = 0; l < blocks.size(); ++l) {
      const std::size_t n = blocks[l] - cuts_[l];
      offsets_.push_back(offsets_.back() +
                         (n + cut_granularity - 1) / cut_granularity * cut_granularity);
    }
    states_.reserve(tensors);
    for (std::size_t t = 0; t < tensors; ++t)
      states_.emplace_back(offsets_.back()); // zeros, as the host store's moments start
  }

  DeviceShare(const DeviceShare&) = delete;
  DeviceShare& operator=(const DeviceShare&) = delete;

  // Of blocks of these sizes, the elements the host updates at `ratio`: the nearest multiple of
  // cut_granularity, at most the block.
  static std::vector<std::size_t> host_part(const std::vector<std::size_t>& blocks, double ratio) {
    require(ratio > 0 && ratio <= 1,
            "offload_ratio must be in (0, 1], not " + std::to_string(ratio));
    std::vector<std::size_t> at;
    for (std::size_t n : blocks) {
      const auto units = std::llround(ratio * double(n) / double(cut_granularity));
      at.push_back(std::min(n, std::size_t(units) * cut_granularity));
    }
    return at;
  }

  // The elements of layer l's block the host updates: [0, cut(l)); the rest are this share's.
  std::size_t cut(std::size_t l) const { return cuts_.at(l); }
  // The share of the elements the host updates, as cut.
  double host_share() const noexcept {
    std::size_t host = 0, all = 0;
    for (std::size_t l = 0; l < cuts_.size(); ++l) {
      host += cuts_[l];
      all += blocks_[l];
    }
    return all == 0 ? 1.0 : double(host) / double(all);
  }
  std::size_t bytes() const noexcept { return states_.size() * offsets_.back() * sizeof(float); }

  // --- the step --------------------------------------------------------------------------------
  // Queues the device's part of every layer's update on the share's stream, after the work queued
  // on the engine's stream so far (the gradients' reduction): grads(l) is layer l's whole reduced
  // block in device memory, out(l) where its whole compute copy goes (empty: none). Starts the
  // clocks of both sides.
  template <ElementwiseUpdate U, class Grads, class Out>
  void update(const U& update, float grad_multiplier, Grads& grads, Out& out) {
    require(states_.size() == 1 + U::state_tensors,
            "offload_ratio: the device's share keeps " + std::to_string(states_.size()) +
                " state tensors, the update takes " + std::to_string(1 + U::state_tensors),
            ErrorKind::mismatch);
    stop_clock();       // a step that failed before finish() left it running
    host_stale_ = true; // from now on the host store's copy of the share is behind
    const Exec side = stream_.space();
    record(exec_, gradients_ready_);
    wait(side, gradients_ready_);
    started_ = Clock::now();
    for (std::size_t l = 0; l < cuts_.size(); ++l) {
      const std::size_t n = blocks_[l] - cuts_[l];
      if (n > 0) {
        std::array<View<float, Memory>, U::state_tensors> moments;
        for (std::size_t k = 0; k < U::state_tensors; ++k)
          moments[k] = tail(k + 1, l);
        const auto target = out(l);
        using T = typename decltype(target)::value_type;
        fused_step(side, update, tail(0, l), moments, grads(l).subview(cuts_[l], n),
                   grad_multiplier,
                   target.empty() ? View<T, Memory>{} : target.subview(cuts_[l], n));
      }
      record(side, layer_updated_[l]);
    }
    record(side, updated_);
    // The device's side ends when its last kernel has run: timed by a thread that waits for it
    // (on the stream's device: a thread starts on device 0).
    device_seconds_ = std::async(std::launch::async, [this, start = started_] {
      if constexpr (requires(const Exec& e) { e.make_current(); }) exec_.make_current();
      updated_.synchronize();
      return std::chrono::duration<double>(Clock::now() - start).count();
    });
  }
  // Before layer l is handed on (done(l), once its compute copy is in device memory): the device's
  // part of its update has run, and the engine's stream, where what reads the copy next is
  // queued, waits for it too. One layer behind the host, which does not wait unless the device is
  // the slower side.
  void order_layer(std::size_t l) {
    layer_updated_.at(l).synchronize();
    wait(exec_, layer_updated_[l]);
  }
  // The host's side has ended: the engine's stream waits for the device's whole share (the next
  // step's backward writes the gradients it reads), and the step's report of both sides, with the
  // suggested ratio. Waits for the device's clock.
  SplitReport finish() {
    SplitReport r;
    r.host_share = host_share();
    r.host_seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    wait(exec_, updated_);
    r.device_seconds = device_seconds_.get();
    // Each side's rate in elements per second; the ratio that ends both together.
    if (r.host_seconds > 0 && r.device_seconds > 0 && r.host_share > 0 && r.host_share < 1) {
      const double host_rate = r.host_share / r.host_seconds;
      const double device_rate = (1 - r.host_share) / r.device_seconds;
      r.suggested_ratio = host_rate / (host_rate + device_rate);
    }
    return r;
  }

  // --- the host store's copy ---------------------------------------------------------------------
  // Copies the device's share of every layer into the host store's blocks (`host`: an
  // OptimizerStore, whose for_each_state_block gives each fp32 tensor's block of a layer in the
  // order these were made), once per step at most: before anything reads the states.
  template <class HostStore>
  void download(HostStore& host) {
    if (!host_stale_) return;
    for (std::size_t l = 0; l < cuts_.size(); ++l)
      each_host_tail(host, l, [&](std::size_t t, View<float> into) {
        copy(stream_.space(), View<const float, Memory>(tail(t, l)), into);
      });
    stream_.space().fence(); // after the updates queued on the same stream
    host_stale_ = false;
  }
  // Copies layer l's share from the host store's blocks, which were written.
  template <class HostStore>
  void upload(HostStore& host, std::size_t l) {
    each_host_tail(host, l, [&](std::size_t t, View<float> from) {
      copy(stream_.space(), View<const float>(from), tail(t, l));
    });
    stream_.space().fence();
  }

 private:
  // Waits for the device's clock of the step before, whose report was never taken: the thread
  // must be done with the events before they are recorded again. Its time is dropped.
  void stop_clock() noexcept {
    if (device_seconds_.valid()) device_seconds_.wait();
  }
  View<float, Memory> tail(std::size_t t, std::size_t l) {
    return states_[t].view().subview(offsets_[l], blocks_[l] - cuts_[l]);
  }
  // f(tensor, the share's elements in the host store's block) over layer l's fp32 state blocks.
  template <class HostStore, class F>
  void each_host_tail(HostStore& host, std::size_t l, F&& f) {
    const std::size_t n = blocks_[l] - cuts_[l];
    std::size_t t = 0;
    host.for_each_state_block(l, [&](auto block) {
      const View<std::byte> bytes = handed_out(block);
      require(t < states_.size() && bytes.size() == blocks_[l] * sizeof(float),
              "offload_ratio: the host store's state blocks of layer " + std::to_string(l) +
                  " are not the fp32 blocks the device's share was cut from",
              ErrorKind::mismatch);
      // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): an fp32 block's bytes
      float* first = reinterpret_cast<float*>(bytes.data()) + cuts_[l];
      if (n > 0) f(t, View<float>(first, n));
      ++t;
    });
  }

  Exec exec_;
  std::vector<std::size_t> cuts_;
  std::vector<std::size_t> blocks_;
  std::vector<std::size_t> offsets_;          // where layer l's share starts in each tensor
  std::vector<Buffer<float, Memory>> states_; // master weights, then the moments
  using Event = typename Exec::event_type;
  Event gradients_ready_;            // on the engine's stream, before the update was queued
  std::vector<Event> layer_updated_; // on the share's stream, after layer l's part
  Event updated_;                    // ... after every layer's
  Clock::time_point started_;
  bool host_stale_ = false; // the host store's copy of the share is behind
  std::future<double> device_seconds_;
  // Last: destroyed first, once what was queued on it ran, before the states go.
  typename Exec::side_stream stream_{exec_, "offload.device_share"};
};

} // namespace zero
