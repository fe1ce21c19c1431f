#pragma once
// The typed front end every zero communicator shares (CRTP): it accepts any contiguous buffer in
// the communicator's memory space (vectors, spans, Buffers, Views), checks sizes and roots with
// errors that name the call, and hands a CollectiveArgs to the backend's submit().
//
// The overloads for blocks of different sizes exist only where the backend declares
// `static constexpr bool supports_variable_counts = true`: a submit() written before them would
// read `count` as every rank's block and run past the buffers.

#include "zero/comm/collective.hpp"
#include "zero/core/dtype.hpp"
#include "zero/core/error.hpp"
#include "zero/core/memory_space.hpp"
#include "zero/core/work.hpp"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <numeric>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace zero {

template <class R, class Space>
concept CommInput = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    Element<std::ranges::range_value_t<R>> && accepts_space<Space, memory_space_of<R>>;

template <class R, class Space>
concept CommOutput = CommInput<R, Space> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

template <class R>
using comm_element_t = std::remove_cv_t<std::ranges::range_value_t<R>>;

namespace detail {

template <class Backend>
concept SubmitsVariableCounts = Backend::supports_variable_counts;
template <class Backend>
concept SubmitsWireQuantization = Backend::supports_wire_quantization;

template <class Derived, MemorySpace Space>
class CollectiveApi {
 public:
  using memory_space = Space;

  template <CommInput<Space> In, CommOutput<Space> Out>
  Work all_reduce(In&& in, Out&& out, ReduceOp op) {
    same_element<In, Out>();
    require_size(std::ranges::size(out) == std::ranges::size(in), "all_reduce",
                 "output has " + std::to_string(std::ranges::size(out)) +
                     " elements but input has " + std::to_string(std::ranges::size(in)));
    return submit_args(Collective::all_reduce, std::ranges::data(in), std::ranges::data(out),
                       std::ranges::size(in), dtype_of<comm_element_t<In>>, op);
  }
  template <CommOutput<Space> Buf>
  Work all_reduce(Buf&& data, ReduceOp op) {
    return all_reduce(data, data, op);
  }

  // Input: size() blocks of out.size() elements; rank r receives the reduction of block r.
  template <CommInput<Space> In, CommOutput<Space> Out>
  Work reduce_scatter(In&& in, Out&& out, ReduceOp op) {
    same_element<In, Out>();
    const std::size_t block = std::ranges::size(out);
    require_size(std::ranges::size(in) == block * ranks(), "reduce_scatter",
                 "input has " + std::to_string(std::ranges::size(in)) + " elements, not " +
                     std::to_string(ranks()) + " ranks x " + std::to_string(block) +
                     " (the output's size)");
    return submit_args(Collective::reduce_scatter, std::ranges::data(in), std::ranges::data(out),
                       block, dtype_of<comm_element_t<In>>, op);
  }
  // In place: the result lands in block rank() of `data`.
  template <CommOutput<Space> Buf>
  Work reduce_scatter(Buf&& data, ReduceOp op) {
    const std::size_t block = equal_blocks(std::ranges::size(data), "reduce_scatter");
    auto* base = std::ranges::data(data);
    return submit_args(Collective::reduce_scatter, base, base + block * rank_index(), block,
                       dtype_of<comm_element_t<Buf>>, op);
  }

  // Output: size() blocks of in.size() elements, block r from rank r.
  template <CommInput<Space> In, CommOutput<Space> Out>
  Work all_gather(In&& in, Out&& out) {
    same_element<In, Out>();
    const std::size_t block = std::ranges::size(in);
    require_size(std::ranges::size(out) == block * ranks(), "all_gather",
                 "output has " + std::to_string(std::ranges::size(out)) + " elements, not " +
                     std::to_string(ranks()) + " ranks x " + std::to_string(block) +
                     " (the input's size)");
    return submit_args(Collective::all_gather, std::ranges::data(in), std::ranges::data(out), block,
                       dtype_of<comm_element_t<In>>, ReduceOp::sum);
  }
  // In place: this rank's contribution is already in block rank() of `data`.
  template <CommOutput<Space> Buf>
  Work all_gather(Buf&& data) {
    const std::size_t block = equal_blocks(std::ranges::size(data), "all_gather");
    auto* base = std::ranges::data(data);
    return submit_args(Collective::all_gather, base + block * rank_index(), base, block,
                       dtype_of<comm_element_t<Buf>>, ReduceOp::sum);
  }

  // Blocks of different sizes, end to end in `in` in rank order: block r has counts[r] elements and
  // rank r receives its reduction, so out.size() == counts[rank()]. `out` may be this rank's block
  // inside `in` (in place). Every element is reduced in rank order, so the bits are those of the
  // equal-block call and of all_reduce; equal counts run as the equal-block call.
  // `Backend` (always Derived) makes the constraint depend on this template's own parameters:
  // Clang 14 checks a constraint that names only Derived while Derived is still incomplete (as this
  // base is instantiated), and then rejects every call.
  template <CommInput<Space> In, CommOutput<Space> Out, class Backend = Derived>
  Work reduce_scatter(In&& in, Out&& out, std::span<const std::size_t> counts,
                      ReduceOp op) requires SubmitsVariableCounts<Backend> {
    same_element<In, Out>();
    check_blocks("reduce_scatter", counts, {"input", std::ranges::size(in)},
                 {"output", std::ranges::size(out)});
    return submit_blocks(Collective::reduce_scatter, std::ranges::data(in), std::ranges::data(out),
                         counts, dtype_of<comm_element_t<In>>, op);
  }

  // The same reduction with the contributions quantized to `wire`'s blocks where they cross the
  // network (ZeRO++'s qgZ): within each node, then across nodes, every contribution and every
  // node's partial sum travels as blocks of `wire.bits`-bit codes with a float scale, and is summed
  // in float in the fixed order. Sum and avg of floating-point values only. Exact where no network
  // is crossed (one node); `Backend` declares supports_wire_quantization.
  template <CommInput<Space> In, CommOutput<Space> Out, class Backend = Derived>
  Work reduce_scatter(In&& in, Out&& out, std::span<const std::size_t> counts, ReduceOp op,
                      const BlockQuantization& wire) requires SubmitsVariableCounts<Backend> &&
      SubmitsWireQuantization<Backend> {
    same_element<In, Out>();
    static_assert(FloatingElement<comm_element_t<In>>,
                  "zero: a quantized reduction needs floating-point values");
    check_blocks("reduce_scatter", counts, {"input", std::ranges::size(in)},
                 {"output", std::ranges::size(out)});
    wire.validate();
    require_size(op == ReduceOp::sum || op == ReduceOp::avg, "reduce_scatter",
                 std::string("a quantized reduction adds its contributions; ") + to_string(op) +
                     " cannot be taken over quantized values");
    return submit_blocks(Collective::reduce_scatter, std::ranges::data(in), std::ranges::data(out),
                         counts, dtype_of<comm_element_t<In>>, op, wire);
  }

  // Block r (counts[r] elements) from rank r, end to end in `out` in rank order, so
  // in.size() == counts[rank()]. `in` may be this rank's block inside `out` (in place).
  template <CommInput<Space> In, CommOutput<Space> Out, class Backend = Derived>
  Work all_gather(In&& in, Out&& out,
                  std::span<const std::size_t> counts) requires SubmitsVariableCounts<Backend> {
    same_element<In, Out>();
    check_blocks("all_gather", counts, {"output", std::ranges::size(out)},
                 {"input", std::ranges::size(in)});
    return submit_blocks(Collective::all_gather, std::ranges::data(in), std::ranges::data(out),
                         counts, dtype_of<comm_element_t<In>>, ReduceOp::sum);
  }

  template <CommOutput<Space> Buf>
  Work broadcast(Buf&& data, int root) {
    check_root(root, "broadcast");
    return submit_args(Collective::broadcast, std::ranges::data(data), std::ranges::data(data),
                       std::ranges::size(data), dtype_of<comm_element_t<Buf>>, ReduceOp::sum, root);
  }
  // `in` is read on the root only (other ranks may pass an empty range).
  template <CommInput<Space> In, CommOutput<Space> Out>
  Work broadcast(In&& in, Out&& out, int root) {
    same_element<In, Out>();
    check_root(root, "broadcast");
    if (self().rank() == root)
      require_size(std::ranges::size(in) == std::ranges::size(out), "broadcast",
                   "root's input has " + std::to_string(std::ranges::size(in)) +
                       " elements but its output " + std::to_string(std::ranges::size(out)));
    return submit_args(Collective::broadcast, std::ranges::data(in), std::ranges::data(out),
                       std::ranges::size(out), dtype_of<comm_element_t<In>>, ReduceOp::sum, root);
  }

  // `out` is written on the root only (other ranks may pass an empty range).
  template <CommInput<Space> In, CommOutput<Space> Out>
  Work reduce(In&& in, Out&& out, ReduceOp op, int root) {
    same_element<In, Out>();
    check_root(root, "reduce");
    if (self().rank() == root)
      require_size(std::ranges::size(in) == std::ranges::size(out), "reduce",
                   "root's output has " + std::to_string(std::ranges::size(out)) +
                       " elements but the input " + std::to_string(std::ranges::size(in)));
    return submit_args(Collective::reduce, std::ranges::data(in), std::ranges::data(out),
                       std::ranges::size(in), dtype_of<comm_element_t<In>>, op, root);
  }
  template <CommOutput<Space> Buf>
  Work reduce(Buf&& data, ReduceOp op, int root) {
    return reduce(data, data, op, root);
  }

  // Blocks until every rank arrived.
  void barrier() {
    CollectiveArgs args;
    args.kind = Collective::barrier;
    self().submit(args).wait();
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  std::size_t ranks() { return static_cast<std::size_t>(self().size()); }
  std::size_t rank_index() { return static_cast<std::size_t>(self().rank()); }

  template <class In, class Out>
  static constexpr void same_element() {
    static_assert(std::is_same_v<comm_element_t<In>, comm_element_t<Out>>,
                  "zero: a collective's input and output must have the same element type");
  }
  static void require_size(bool ok, const char* op, const std::string& what) {
    if (!ok) fail(ErrorKind::invalid_argument, std::string(op) + ": " + what);
  }
  std::size_t equal_blocks(std::size_t total, const char* op) {
    require_size(total % ranks() == 0, op,
                 "in place needs equal blocks, but " + std::to_string(total) +
                     " elements do not split into " + std::to_string(ranks()) + " ranks");
    return total / ranks();
  }
  void check_root(int root, const char* op) {
    if (root < 0 || root >= self().size())
      fail(ErrorKind::invalid_argument, std::string(op) + ": root " + std::to_string(root) +
                                            " is not a rank of a communicator of " +
                                            std::to_string(self().size()));
  }
  struct SizedBuffer {
    const char* name;
    std::size_t size;
  };
  // `all_blocks` holds every rank's block, `own_block` this rank's.
  void check_blocks(const char* op, std::span<const std::size_t> counts, SizedBuffer all_blocks,
                    SizedBuffer own_block) {
    require_size(counts.size() == ranks(), op,
                 std::to_string(counts.size()) + " counts for a communicator of " +
                     std::to_string(ranks()) + " ranks");
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    require_size(all_blocks.size == total, op,
                 std::string(all_blocks.name) + " has " + std::to_string(all_blocks.size) +
                     " elements, but the counts add up to " + std::to_string(total));
    const std::size_t mine = counts[rank_index()];
    require_size(own_block.size == mine, op,
                 std::string(own_block.name) + " has " + std::to_string(own_block.size) +
                     " elements, but rank " + std::to_string(rank_index()) + "'s count is " +
                     std::to_string(mine));
  }
  Work submit_blocks(Collective kind, const void* send, void* recv,
                     std::span<const std::size_t> counts, DType dtype, ReduceOp op,
                     std::optional<BlockQuantization> wire = std::nullopt) {
    const bool equal =
        std::ranges::adjacent_find(counts, std::ranges::not_equal_to{}) == counts.end();
    if (equal) return submit_args(kind, send, recv, counts.front(), dtype, op, 0, wire);
    CollectiveArgs args;
    args.kind = kind;
    args.dtype = dtype;
    args.op = op;
    args.send = send;
    args.recv = recv;
    args.count = counts[rank_index()];
    args.counts.assign(counts.begin(), counts.end());
    args.wire = wire;
    return self().submit(args);
  }
  Work submit_args(Collective kind, const void* send, void* recv, std::size_t count, DType dtype,
                   ReduceOp op, int root = 0,
                   std::optional<BlockQuantization> wire = std::nullopt) {
    CollectiveArgs args;
    args.kind = kind;
    args.dtype = dtype;
    args.op = op;
    args.root = root;
    args.send = send;
    args.recv = recv;
    args.count = count;
    args.wire = wire;
    return self().submit(args);
  }
};

} // namespace detail
} // namespace zero
