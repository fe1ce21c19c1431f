#pragma once
// TEST-ONLY: drops one named wait inside the library, chosen at run time, so that the tests can
// show that the stream-space twin (docs/execution-spaces.md) catches a missing wait in the
// library's own code, not only in pipelines the tests write themselves. Every place where the
// library orders work across streams (a host wait for an event, a fence, a communicator pointed at
// the caller's stream) asks wait_dropped("its name") first, and skips the wait when
//
//   ZERO_TEST_DROP_WAIT=<name>
//
// is in the environment. A program that sets it computes wrong results by design: it is for the
// tests that must see them fail (tests/dropped_waits.cmake), never for a run whose results
// matter. The name is read once, when the program starts; an unknown one stops the program
// naming the known ones, and a dropped wait says so on standard error the first time. Without the
// variable a site costs one load of a constant and a branch that always goes the same way, beside
// a wait that takes a mutex or a CUDA call.

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace zero::detail {

// Every site, named "component.what the wait orders".
inline constexpr std::string_view dropped_wait_sites[] = {
    // OptimizerStore::step over a stream space: done(l) once layer l's queued update has run.
    "optimizer.layer_stepped",
    // BucketedReducer: a host communicator's collective once its bucket's queued packing has run.
    "reducer.packed",
    // BucketedReducer: a communicator ordered after a caller stream pointed at the reducer's.
    "reducer.caller",
    // InPlaceAllReduce (stage 0): the communicator pointed at the stream that wrote the gradient.
    "in_place_reducer.caller",
    // ParameterGather: a buffer gathered into by a host communicator once its queued readers ran.
    "gather.buffer_reusable",
    // ParameterGather: a communicator ordered after a caller stream pointed at the gather's.
    "gather.caller",
    // ParameterGather::refresh_persistent: the fence before the layers kept gathered change.
    "gather.refresh",
    // GradientStore::gradients(l) in host memory: backward writes after the queued work on what
    // was handed over before.
    "gradients.handed_over",
    // GradientStore::average_over_replicas: the fence before the host averages the reduced shard.
    "gradients.replicas",
    // GradientStore: the norm's slots read on the host once their queued copy has run.
    "gradients.sums_read_back",
    // ReplicatedParameters::end_update: the gathers' communicator pointed at the step's stream.
    "replicated_parameters.caller",
    // ShardedParameters::acquire in host memory: the host reads a layer after its queued unpacking.
    "sharded_parameters.unpacked",
    // OffloadedOptimizerStore: a layer's gradient leaves during backward after its delivery.
    "offload.gradient_reduced",
    // OffloadedOptimizerStore: the speculative update reads a layer's gradient once it arrived.
    "offload.speculated_gradient_arrived",
    // OffloadedOptimizerStore: the host update reads a layer's gradient once its copy has run.
    "offload.gradients_arrived",
    // OffloadedOptimizerStore: done(l) once layer l's new compute copy has reached the device.
    "offload.weights_sent",
    // OffloadedOptimizerStore, delayed update: the update starts once every gradient's copy ran.
    "offload.delayed_gradients_arrived",
};

// The site ZERO_TEST_DROP_WAIT names (a view of its entry above), or empty.
inline std::string_view dropped_wait_from_environment() noexcept {
  const char* value = std::getenv("ZERO_TEST_DROP_WAIT");
  if (value == nullptr || *value == '\0') return {};
  for (const std::string_view site : dropped_wait_sites)
    if (site == value) return site;
  std::fprintf(stderr, "zero: ZERO_TEST_DROP_WAIT=%s names no wait; the sites are:", value);
  for (const std::string_view site : dropped_wait_sites)
    std::fprintf(stderr, " %.*s", static_cast<int>(site.size()), site.data());
  std::fprintf(stderr, "\n");
  std::abort();
}

// Read once, before main; read before its initialization (by another static initializer), it is
// empty: no wait is dropped.
inline const std::string_view dropped_wait_site = dropped_wait_from_environment();

// A site's name, checked at compile time against the list above.
class WaitSite {
 public:
  // Implicit: a site is written as its name, wait_dropped("reducer.packed").
  consteval WaitSite(const char* name) : name_(name) {
    bool known = false;
    for (const std::string_view site : dropped_wait_sites)
      known = known || site == name_;
    if (!known) throw "zero: a wait site must be named in dropped_wait_sites";
  }
  constexpr std::string_view name() const noexcept { return name_; }

 private:
  std::string_view name_;
};

[[gnu::cold, gnu::noinline]] inline bool dropping_wait(std::string_view site) noexcept {
  if (site != dropped_wait_site) return false;
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    std::fprintf(stderr, "zero: ZERO_TEST_DROP_WAIT: dropping the wait at %.*s (test only)\n",
                 static_cast<int>(site.size()), site.data());
  return true;
}

// Whether the wait at `site` is to be skipped: false unless a test asked for it.
inline bool wait_dropped(WaitSite site) noexcept {
  if (dropped_wait_site.empty()) [[likely]]
    return false;
  return dropping_wait(site.name());
}

} // namespace zero::detail
