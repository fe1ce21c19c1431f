#pragma once
// What an Engine built over tensor-parallel groups (zero/tensor_parallel/groups.hpp) checks while
// it is built. Its ranks form a grid: each tensor-parallel group holds the slices of one
// data-parallel replica, each data-parallel group the same slices. A step agrees its norm over
// both, so the tensor ranks must have registered the same parameters, slice for slice, and a
// failure while building must reach every rank of the grid: a rank that refused alone would leave
// the others of its groups waiting in their next collective.

#include "zero/comm/agreed.hpp"
#include "zero/comm/communicator.hpp"
#include "zero/comm/text_records.hpp"
#include "zero/core/error.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace zero::detail {

// build() agreed over the whole grid (agreed_over_grid, zero/comm/agreed.hpp), or build() alone
// without a tensor group (null): the engine without tensor parallelism takes its own path.
template <class Tensor, class Data, class Build>
std::invoke_result_t<Build&> grid_agreed(Tensor* tensor, Data& data, std::string_view what,
                                         Build&& build) {
  if (tensor == nullptr) return build();
  return agreed_over_grid(data, *tensor, what, build);
}

// What a tensor rank says of a parameter when the tensor ranks disagree on it.
inline std::string tensor_parallel_description(const ShardLayout& layout, std::size_t p) {
  if (p >= layout.parameter_count()) return "no parameter";
  const ParameterSpec& spec = layout.parameter(p);
  return "'" + spec.name + "' (layer " + std::to_string(spec.layer) + ", " +
         (spec.replicated_over_tensor_parallel ? "replicated, " : "a slice of ") +
         std::to_string(spec.numel) + " elements)";
}

// 64-bit FNV-1a: names compared across ranks without sending them.
inline std::int64_t name_fingerprint(std::string_view name) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (char c : name)
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return static_cast<std::int64_t>(h);
}

// Collective over the tensor-parallel group: throws on every rank of it, naming the first
// parameter that differs and two tensor ranks that disagree on it, unless all registered as many
// parameters and layers, and each parameter with the same name, layer and replicated flag (a
// replicated parameter with the same number of elements too: every tensor rank holds it whole).
template <GatheringCommunicator Tensor>
void agree_on_tensor_parameters(Tensor& tensor, const ShardLayout& layout) {
  const auto ranks = static_cast<std::size_t>(tensor.size());
  const std::vector<std::int64_t> counts{static_cast<std::int64_t>(layout.parameter_count()),
                                         static_cast<std::int64_t>(layout.layer_count())};
  std::vector<std::int64_t> all_counts(2 * ranks);
  tensor.all_gather(counts, all_counts).wait();
  std::size_t common = layout.parameter_count();
  for (std::size_t r = 0; r < ranks; ++r)
    common = std::min(common, static_cast<std::size_t>(all_counts[2 * r]));

  constexpr std::size_t fields = 4; // name, layer, replicated, elements when replicated
  std::vector<std::int64_t> mine(fields * common), all(fields * common * ranks);
  for (std::size_t p = 0; p < common; ++p) {
    const ParameterSpec& spec = layout.parameter(p);
    const bool replicated = spec.replicated_over_tensor_parallel;
    mine[fields * p] = name_fingerprint(spec.name);
    mine[fields * p + 1] = spec.layer;
    mine[fields * p + 2] = replicated ? 1 : 0;
    mine[fields * p + 3] = replicated ? static_cast<std::int64_t>(spec.numel) : 0;
  }
  tensor.all_gather(mine, all).wait();
  std::size_t first = common; // the first parameter that differs (or the first of a longer list)
  std::size_t other = 0;      // a tensor rank that disagrees with tensor rank 0 on it
  for (std::size_t p = 0; p < common && other == 0; ++p)
    for (std::size_t r = 1; r < ranks && other == 0; ++r)
      if (!std::equal(all.begin() + std::ptrdiff_t(fields * (r * common + p)),
                      all.begin() + std::ptrdiff_t(fields * (r * common + p + 1)),
                      all.begin() + std::ptrdiff_t(fields * p))) {
        first = p;
        other = r;
      }
  for (std::size_t r = 1; r < ranks && other == 0; ++r)
    if (all_counts[2 * r] != all_counts[0] || all_counts[2 * r + 1] != all_counts[1]) other = r;
  if (other == 0) return;

  const auto described = gather_text(tensor, tensor_parallel_description(layout, first));
  const auto count_of = [&](std::size_t r) {
    return std::to_string(all_counts[2 * r]) + " parameters in " +
           std::to_string(all_counts[2 * r + 1]) + " layers";
  };
  const std::string counts_differ = count_of(0) == count_of(other)
                                        ? ""
                                        : " (" + count_of(0) + " against " + count_of(other) + ")";
  fail_on_every_rank(
      ErrorKind::mismatch,
      "tensor parallelism: tensor ranks 0 and " + std::to_string(other) +
          " registered different parameters: parameter #" + std::to_string(first) + " is " +
          described[0] + " on tensor rank 0 but " + described[other] + " on tensor rank " +
          std::to_string(other) + counts_differ +
          "; every tensor rank registers the same parameters in the same order and layers, its "
          "own slices of the split ones and the same whole of each replicated one "
          "(ParameterSpec::replicated_over_tensor_parallel)");
}

} // namespace zero::detail
