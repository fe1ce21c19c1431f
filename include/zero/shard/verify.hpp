#pragma once
// Layouts agreed across ranks. A rank that registered different parameters (or partitioned them
// differently) would exchange the wrong bytes silently, so layouts meant for communication are
// compared by hash at construction; a difference, or a rank that failed to build its layout, is
// an Error on every rank naming the problem (the first differing parameter, the ranks' policies,
// or the failing rank's message) instead of a hang or corrupt data.

#include "zero/comm/communicator.hpp"
#include "zero/core/error.hpp"
#include "zero/shard/detail/layout_agreement.hpp"
#include "zero/shard/parameter.hpp"
#include "zero/shard/partitioner.hpp"
#include "zero/shard/shard_layout.hpp"

#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace zero {

namespace detail {
template <class Comm, class Build>
ShardLayout agreed_layout(Comm& comm, Build&& build) {
  std::optional<ShardLayout> layout;
  LayoutClaim claim;
  try {
    layout.emplace(build());
    claim.layout = &*layout;
  } catch (const Error& e) {
    claim.error_kind = e.kind();
    claim.error = without_prefix(e.what());
  } catch (const std::exception& e) {
    claim.error = e.what();
  }
  agree_on_layout(comm, claim);
  return std::move(*layout);
}
} // namespace detail

// Collective: throws Error(mismatch) on every rank unless all ranks hold the same layout.
template <CommunicatorGroup Comm>
void verify_layout(Comm& comm, const ShardLayout& layout) {
  detail::LayoutClaim claim;
  claim.layout = &layout;
  detail::agree_on_layout(comm, claim);
}

// Collective: the layout of `params` over the ranks of `comm`, checked to be the same on all.
// When building fails on some rank (a bad parameter list), every rank throws, so no rank is left
// waiting in a collective the failing rank never reaches.
template <CommunicatorGroup Comm, Partitioner P>
ShardLayout make_layout(Comm& comm, const P& partitioner, std::span<const ParameterSpec> params) {
  return detail::agreed_layout(comm, [&] { return partitioner.partition(params, comm.size()); });
}

} // namespace zero
