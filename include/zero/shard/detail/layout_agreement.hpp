#pragma once
// The collective half of verify_layout: every rank contributes a fixed-size summary of its layout
// (or of the error that kept it from building one), and every rank decides from the same gathered
// data, so all ranks take the same path and throw the same message (fail_on_every_rank: the
// communicators destroyed while it unwinds are left together). A difference is then narrowed
// down to the first parameter that differs, with a second and third all-gather only on that path.

#include "zero/comm/communicator.hpp"
#include "zero/comm/text_records.hpp"
#include "zero/core/error.hpp"
#include "zero/shard/detail/parameter_table.hpp"
#include "zero/shard/shard_layout.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace zero::detail {

// What a rank knows about its own layout, or why it has none.
struct LayoutClaim {
  const ShardLayout* layout = nullptr; // null when building failed
  ErrorKind error_kind = ErrorKind::invalid_argument;
  std::string error; // the failure's message when layout is null
};

// The fields of a summary, in order.
namespace summary {
enum Field : std::size_t { failed, error_kind, world, count, parameters, layout_hash, fields };
} // namespace summary

inline std::vector<std::int64_t> summarize(const LayoutClaim& claim) {
  std::vector<std::int64_t> s(summary::fields, 0);
  s[summary::failed] = claim.layout == nullptr ? 1 : 0;
  s[summary::error_kind] = static_cast<std::int64_t>(claim.error_kind);
  if (claim.layout != nullptr) {
    s[summary::world] = claim.layout->world_size();
    s[summary::count] = static_cast<std::int64_t>(claim.layout->parameter_count());
    s[summary::parameters] = static_cast<std::int64_t>(claim.layout->parameters_hash());
    s[summary::layout_hash] = static_cast<std::int64_t>(claim.layout->hash());
  }
  return s;
}

// Called on every rank after the summaries differ in the parameter lists: names the first
// parameter (by registration index) that is not the same everywhere.
template <GatheringCommunicator Comm>
[[noreturn]] void report_parameter_difference(Comm& comm, const ShardLayout& layout,
                                              const std::vector<std::int64_t>& summaries) {
  const auto ranks = static_cast<std::size_t>(comm.size());
  std::size_t common = SIZE_MAX;
  for (std::size_t r = 0; r < ranks; ++r)
    common =
        std::min(common, static_cast<std::size_t>(summaries[r * summary::fields + summary::count]));
  std::vector<std::int64_t> mine(common);
  for (std::size_t p = 0; p < common; ++p)
    mine[p] = static_cast<std::int64_t>(parameter_hash(layout.parameter(p)));
  std::vector<std::int64_t> all(common * ranks);
  comm.all_gather(mine, all).wait();
  std::size_t first = common; // the first index that differs, or the first extra parameter
  for (std::size_t p = 0; p < common && first == common; ++p)
    for (std::size_t r = 1; r < ranks; ++r)
      if (all[r * common + p] != all[p]) {
        first = p;
        break;
      }
  const std::string described = first < layout.parameter_count()
                                    ? describe_parameter(layout.parameter(first))
                                    : std::string("no parameter");
  std::vector<std::string> counts;
  for (std::size_t r = 0; r < ranks; ++r)
    counts.push_back(std::to_string(summaries[r * summary::fields + summary::count]));
  fail_on_every_rank(ErrorKind::mismatch, "ranks registered different parameters: parameter #" +
                                              std::to_string(first) + " is " +
                                              rank_list(gather_text(comm, described)) +
                                              " (parameter counts: " + rank_list(counts) + ")");
}

template <class Comm>
void agree_on_layout(Comm& comm, const LayoutClaim& claim) {
  const auto ranks = static_cast<std::size_t>(comm.size());
  const auto mine = summarize(claim);
  if constexpr (GatheringCommunicator<Comm>) {
    std::vector<std::int64_t> all(summary::fields * ranks);
    comm.all_gather(mine, all).wait();
    auto field = [&](std::size_t r, summary::Field f) { return all[r * summary::fields + f]; };
    for (std::size_t r = 0; r < ranks; ++r)
      if (field(r, summary::failed) != 0) {
        const auto texts = gather_text(comm, claim.error);
        fail_on_every_rank(static_cast<ErrorKind>(field(r, summary::error_kind)),
                           "building the shard layout failed on rank " + std::to_string(r) + ": " +
                               texts[r]);
      }
    bool same_parameters = true;
    bool same_layout = true;
    for (std::size_t r = 1; r < ranks; ++r) {
      same_parameters = same_parameters && field(r, summary::count) == field(0, summary::count) &&
                        field(r, summary::parameters) == field(0, summary::parameters);
      same_layout = same_layout && field(r, summary::world) == field(0, summary::world) &&
                    field(r, summary::layout_hash) == field(0, summary::layout_hash);
    }
    if (!same_parameters) report_parameter_difference(comm, *claim.layout, all);
    if (!same_layout)
      fail_on_every_rank(
          ErrorKind::mismatch,
          "ranks registered the same parameters but built different shard layouts: " +
              rank_list(gather_text(comm, std::string(claim.layout->policy()) + " over " +
                                              std::to_string(claim.layout->world_size()) +
                                              " ranks")));
  } else if constexpr (ReducingCommunicator<Comm>) {
    // Without all_gather, the maximum and minimum of every field tell whether all ranks agree.
    std::vector<std::int64_t> high = mine;
    std::vector<std::int64_t> low = mine;
    comm.all_reduce(high, ReduceOp::max).wait();
    comm.all_reduce(low, ReduceOp::min).wait();
    if (high[summary::failed] != 0)
      fail_on_every_rank(
          ErrorKind::invalid_argument,
          "building the shard layout failed on at least one rank" +
              (claim.layout == nullptr ? ", this one: " + claim.error : std::string()));
    if (high != low)
      fail_on_every_rank(
          ErrorKind::mismatch,
          "ranks registered different parameters or built different shard layouts (this rank: " +
              std::to_string(claim.layout->parameter_count()) + " parameters, " +
              std::string(claim.layout->policy()) + ")");
  } else {
    static_assert(dependent_false<Comm>,
                  "zero: checking a shard layout across ranks needs a communicator with all_gather "
                  "or all_reduce");
  }
}

} // namespace zero::detail
