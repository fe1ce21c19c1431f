#pragma once
// SelfCommunicator: a group of one rank, with no dependency. Every collective reduces to a copy
// (or nothing in place); it runs inside the call, so the returned Work is already complete. Blocks
// of different sizes cannot occur with one rank: the front end runs them as equal blocks.

#include "zero/comm/communicator.hpp"
#include "zero/comm/detail/collective_api.hpp"
#include "zero/comm/progress/completed_work.hpp"

#include <cstring>

namespace zero {

class SelfCommunicator : public detail::CollectiveApi<SelfCommunicator, host> {
 public:
  static constexpr bool supports_variable_counts = true;
  // Nothing crosses a wire: a quantized reduce_scatter is the exact copy.
  static constexpr bool supports_wire_quantization = true;

  int rank() const noexcept { return 0; }
  int size() const noexcept { return 1; }
  SelfCommunicator split(int /*color*/, int /*key*/) const noexcept { return {}; }

  // One rank: sum, avg, max and min of a single contribution are the contribution itself.
  Work submit(const CollectiveArgs& args) {
    const std::size_t bytes = args.count * args.element_bytes();
    if (args.kind != Collective::barrier && bytes != 0 && args.send != args.recv)
      std::memmove(args.recv, args.send, bytes);
    return detail::completed_work(args);
  }
};

static_assert(Communicator<SelfCommunicator>);
static_assert(VariableCountCommunicator<SelfCommunicator>);
static_assert(QuantizingCommunicator<SelfCommunicator>);

} // namespace zero
