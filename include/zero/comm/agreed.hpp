#pragma once
// agreed(comm, what, build): build() on every rank of comm, then one small collective in which
// the ranks tell each other whether it worked. Where it threw on some rank, it throws on every
// rank, naming the first such rank and its message (with a communicator that can only reduce,
// the others learn that some rank failed, not which):
//
//   NvmeTier tier = agreed(comm, "opening the swap directory", [&] { return NvmeTier(...); });
//
// Use it for local work that can fail on one rank only (a full disk, a path one node lacks, a
// memory lock refused) when a collective follows: without it the failing rank unwinds while its
// peers wait in that collective for good. build() itself must not communicate. It returns what
// build() returns (or nothing).

#include "zero/comm/communicator.hpp"
#include "zero/comm/reduce_op.hpp"
#include "zero/comm/text_records.hpp"
#include "zero/core/error.hpp"
#include "zero/core/view.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

template <class Comm, class Build>
requires GatheringCommunicator<Comm> || ReducingCommunicator<Comm> std::invoke_result_t<Build&>
agreed(Comm& comm, std::string_view what, Build&& build) {
  using Result = std::invoke_result_t<Build&>;
  constexpr bool returns = !std::is_void_v<Result>;
  // Long enough for a message naming two paths; longer ones reach the other ranks cut short.
  constexpr std::size_t message_bytes = 1024;
  std::optional<std::conditional_t<returns, Result, bool>> result;
  std::int64_t failed_kind = -1; // the ErrorKind of this rank's failure, -1 when it worked
  std::string message;
  try {
    if constexpr (returns)
      result.emplace(build());
    else
      build();
  } catch (const Error& e) {
    failed_kind = static_cast<std::int64_t>(e.kind());
    message = detail::without_prefix(e.what());
  } catch (const std::exception& e) {
    failed_kind = static_cast<std::int64_t>(ErrorKind::io);
    message = e.what();
  } catch (...) {
    failed_kind = static_cast<std::int64_t>(ErrorKind::io);
    message = "an exception that is not a std::exception";
  }
  const std::string failed_on = std::string(what) + " failed on rank ";
  if constexpr (GatheringCommunicator<Comm>) {
    std::vector<std::int64_t> mine{failed_kind}, all(static_cast<std::size_t>(comm.size()));
    comm.all_gather(mine, all).wait();
    for (std::size_t r = 0; r < all.size(); ++r)
      if (all[r] >= 0) {
        const auto messages = detail::gather_text(comm, message, message_bytes);
        fail_on_every_rank(static_cast<ErrorKind>(all[r]),
                           failed_on + std::to_string(r) + ": " + messages[r]);
      }
  } else {
    std::vector<std::int64_t> worst{failed_kind};
    comm.all_reduce(worst, ReduceOp::max).wait();
    if (worst[0] >= 0)
      fail_on_every_rank(failed_kind >= 0 ? static_cast<ErrorKind>(failed_kind) : ErrorKind::io,
                         failed_kind >= 0 ? failed_on + std::to_string(comm.rank()) + ": " + message
                                          : failed_on + "another rank (its own error says why)");
  }
  if constexpr (returns) return std::move(*result);
}

// agreed() over a grid of ranks cut two ways (zero/tensor_parallel/groups.hpp): build() on every
// rank, then one small collective over `tensor`, the rank's tensor-parallel group, and one over
// `data`, its data-parallel group; where build() threw on any rank of the grid, it throws on every
// rank, naming the first such rank by both places. build() may communicate within one of the
// groups when what fails there fails on every rank of that group alike, never across them: the
// other groups' ranks then learn of it here instead of waiting in their next collective.
template <GatheringCommunicator Data, GatheringCommunicator Tensor, class Build>
std::invoke_result_t<Build&> agreed_over_grid(Data& data, Tensor& tensor, std::string_view what,
                                              Build&& build) {
  using Result = std::invoke_result_t<Build&>;
  constexpr bool returns = !std::is_void_v<Result>;
  constexpr std::size_t message_bytes = 1024;
  std::optional<std::conditional_t<returns, Result, bool>> result;
  std::int64_t kind = -1; // the ErrorKind of this rank's failure, -1 when it worked
  std::string message;
  try {
    if constexpr (returns)
      result.emplace(build());
    else
      build();
  } catch (const Error& e) {
    kind = static_cast<std::int64_t>(e.kind());
    message = detail::without_prefix(e.what());
  } catch (const std::exception& e) {
    kind = static_cast<std::int64_t>(ErrorKind::io);
    message = e.what();
  } catch (...) {
    kind = static_cast<std::int64_t>(ErrorKind::io);
    message = "an exception that is not a std::exception";
  }
  // The first failure in this rank's tensor group, known to all of its ranks ...
  std::vector<std::int64_t> mine{kind}, all(static_cast<std::size_t>(tensor.size()));
  tensor.all_gather(mine, all).wait();
  std::int64_t failed_tensor_rank = -1;
  for (std::size_t t = 0; t < all.size(); ++t)
    if (all[t] >= 0) {
      failed_tensor_rank = static_cast<std::int64_t>(t);
      kind = all[t];
      message = detail::gather_text(tensor, message, message_bytes)[t];
      break;
    }
  // ... then the first over the tensor groups, known to every rank of the grid.
  const std::vector<std::int64_t> group{kind, failed_tensor_rank};
  std::vector<std::int64_t> groups(2 * static_cast<std::size_t>(data.size()));
  data.all_gather(group, groups).wait();
  for (std::size_t d = 0; 2 * d < groups.size(); ++d)
    if (groups[2 * d] >= 0) {
      const auto messages = detail::gather_text(data, message, message_bytes);
      fail_on_every_rank(static_cast<ErrorKind>(groups[2 * d]),
                         std::string(what) + " failed on tensor rank " +
                             std::to_string(groups[2 * d + 1]) + " of data rank " +
                             std::to_string(d) + ": " + messages[d]);
    }
  if constexpr (returns) return std::move(*result);
}

// Rank 0's `values` on every rank of comm (a broadcast), which must hold `count` of them. Only
// rank 0's size counts, so only rank 0's is checked, after the ranks learn it: a rank that threw
// alone would leave the others waiting in the broadcast. `what` names the call in the error.
template <class Comm>
requires GatheringCommunicator<Comm> std::vector<float>
rank0_values(Comm& comm, View<const float> values, std::size_t count, const std::string& what) {
  std::vector<std::int64_t> size{static_cast<std::int64_t>(values.size())};
  comm.broadcast(size, 0).wait();
  require_on_every_rank(static_cast<std::size_t>(size[0]) == count,
                        what + " has " + std::to_string(count) + " elements, rank 0 passed " +
                            std::to_string(size[0]));
  std::vector<float> agreed(count);
  if (comm.rank() == 0) std::copy(values.begin(), values.end(), agreed.begin());
  comm.broadcast(agreed, 0).wait();
  return agreed;
}

} // namespace zero
