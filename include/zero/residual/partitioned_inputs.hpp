#pragma once
// PartitionedInputs: how CheckpointedLayers keeps an input with partitioned activations (ZeRO-R's
// Pa over an ActivationPartition, residual/activation_partition.hpp). In forward, cut() writes
// this rank's slice of a whole input and returns the input's hash; before backward recomputes
// from it, start_gather() all-gathers every rank's slice into a whole buffer, each rank's hash
// beside it, and finish_gather() waits and checks the gathered input against every rank's hash,
// so that ranks that computed different inputs stop, all naming the same ranks, rather than
// recompute from a mix of them. One gather is in flight at a time.

#include "zero/core/error.hpp"
#include "zero/core/view.hpp"
#include "zero/core/work.hpp"
#include "zero/residual/activation_partition.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <xxhash.h>

namespace zero {

class PartitionedInputs {
 public:
  explicit PartitionedInputs(ActivationPartition& partition) : partition_(partition) {}
  PartitionedInputs(const PartitionedInputs&) = delete;
  PartitionedInputs& operator=(const PartitionedInputs&) = delete;
  ~PartitionedInputs() { wait_quietly(); }

  // Elements of each rank's slice of an input of `elements`, and of a buffer that holds every
  // rank's slice (padding included).
  std::size_t slice_elements(std::size_t elements) const {
    return partition_.slice_elements(elements);
  }
  std::size_t whole_elements(std::size_t elements) const {
    return slice_elements(elements) * partition_.parts();
  }

  // Writes this rank's slice of `whole` into `slice` (the last slice's padding zero); returns the
  // hash of `whole`, which the gather checks.
  std::uint64_t cut(View<const float> whole, View<float> slice) const {
    const std::size_t size = slice.size(), begin = std::min(partition_.part() * size, whole.size());
    const std::size_t end = std::min(begin + size, whole.size());
    std::copy(whole.begin() + begin, whole.begin() + end, slice.begin());
    std::fill(slice.begin() + (end - begin), slice.end(), 0.0f);
    return hash(whole);
  }

  // Starts gathering every rank's slice into `whole`, and every rank's `forward_hash` beside it.
  void start_gather(View<const float> slice, View<float> whole, std::uint64_t forward_hash) {
    gather_ = partition_.all_gather(slice, whole);
    std::memcpy(own_hash_.data(), &forward_hash, sizeof forward_hash);
    hashes_.resize(2 * partition_.parts()); // 64 bits as two floats per rank
    hash_gather_ = partition_.all_gather(View<const float>(own_hash_), View<float>(hashes_));
  }

  // Waits for the gather into `whole` (the input of segment `segment`, its first elements) and
  // checks it against the hash each rank had in forward. Returns the seconds it waited.
  double finish_gather(std::size_t segment, View<const float> whole) {
    const auto start = std::chrono::steady_clock::now();
    gather_.wait();
    hash_gather_.wait();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::uint64_t gathered = hash(whole);
    std::string differing;
    for (std::size_t r = 0; r < partition_.parts(); ++r) {
      std::uint64_t forward_hash = 0;
      std::memcpy(&forward_hash, hashes_.data() + 2 * r, sizeof forward_hash);
      if (forward_hash != gathered)
        differing += (differing.empty() ? "" : ", ") + std::to_string(r);
    }
    require(differing.empty(),
            "CheckpointedLayers: partitioned activations: the input of segment " +
                std::to_string(segment) + " gathered over the group differs from the one rank(s) " +
                differing +
                " of the group had in forward; the ranks of a partition must compute the same "
                "inputs",
            ErrorKind::mismatch);
    return waited;
  }

  // A step abandoned for an error: the gather in flight finishes before its buffers go.
  void wait_quietly() noexcept {
    for (Work* in_flight : {&gather_, &hash_gather_}) {
      try {
        in_flight->wait();
      } catch (...) { // NOLINT(bugprone-empty-catch): the step is abandoned for another error
      }
    }
  }

 private:
  static std::uint64_t hash(View<const float> values) {
    return XXH3_64bits(values.data(), values.size() * sizeof(float));
  }

  ActivationPartition& partition_;
  Work gather_, hash_gather_;
  std::array<float, 2> own_hash_{};
  std::vector<float> hashes_;
};

} // namespace zero
