#pragma once
// TrustRatioPasses: the step of an optimizer that scales each parameter by norms over the whole
// parameter (LAMB: a TrustRatioUpdate, optim/trust_ratio_step.hpp) over the blocks an optimizer
// store keeps in host memory. Three passes instead of the element-wise optimizers' one: every
// layer's moments and partial sums of squares, one all-gather of every rank's sums over the shard
// group (2 doubles per parameter from each rank, added in rank order on every rank, so the order
// is fixed whatever the transport), then every layer's weights. The pieces of each parameter in
// the store's blocks (ParameterPieces) say which sums each run of a block feeds.

#include "zero/core/dtype.hpp"
#include "zero/core/view.hpp"
#include "zero/engine/model_layout.hpp"
#include "zero/engine/parameter_pieces.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/trust_ratio_step.hpp"
#include "zero/shard/shard_layout.hpp"

#include <cstddef>
#include <vector>

namespace zero {

class TrustRatioPasses {
 public:
  // `sharded`: the store keeps this rank's shard (stages 1-3), not every rank's blocks.
  TrustRatioPasses(const ModelLayout& model, bool sharded)
      : model_(model), pieces_(model, !sharded) {}

  // One update: master(l) and moment(l, k) are host views of the store's block of layer l (its
  // master weights, moment k); grads(l), out(l) and done(l) as in OptimizerStore::step.
  // Collective over `shard` when Sharded.
  template <bool Sharded, class Comm, TrustRatioUpdate U, class Master, class Moment, class Grads,
            class Out, class Done>
  void step(Comm& shard, const U& update, float grad_multiplier, Master&& master, Moment&& moment,
            Grads&& grads, Out&& out, Done&& done) const {
    const ShardLayout& layout = *model_.sharded;
    const std::size_t row = 2 * layout.parameter_count(); // one rank's sums: (w^2, u^2) each
    std::vector<double> sums(static_cast<std::size_t>(layout.world_size()) * row, 0.0);
    for (std::size_t l = 0; l < model_.layers(); ++l) {
      const auto g = handed_out(grads(l)); // host views of pinned memory too
      for (const ParameterPiece& piece : pieces_.layer(l)) {
        const auto part = [&](auto view) { return view.subview(piece.position, piece.length); };
        const ParameterSums s =
            trust_ratio_prepare(update, View<const float>(part(master(l))),
                                {part(moment(l, 0)), part(moment(l, 1))}, part(g), grad_multiplier);
        double* into = sums.data() + static_cast<std::size_t>(piece.rank) * row;
        into[2 * piece.parameter] += s.param;
        into[2 * piece.parameter + 1] += s.direction;
      }
    }
    if constexpr (Sharded) shard.all_gather(sums).wait(); // this rank's row is in place
    std::vector<float> neg_step(layout.parameter_count());
    for (std::size_t p = 0; p < neg_step.size(); ++p) {
      ParameterSums total;
      for (std::size_t r = 0; r < static_cast<std::size_t>(layout.world_size()); ++r)
        total += ParameterSums{sums[r * row + 2 * p], sums[r * row + 2 * p + 1]};
      neg_step[p] = update.neg_step(total.param, total.direction);
    }
    for (std::size_t l = 0; l < model_.layers(); ++l) {
      const View<float> weights = master(l);
      const auto copy = handed_out(out(l));
      const View<const float> m = moment(l, 0);
      const View<const float> v = moment(l, 1);
      std::size_t next = 0; // padding between pieces is zero: its compute copy is converted
      const auto copy_gap = [&](std::size_t end) {
        if (!copy.empty() && end > next)
          convert_n(weights.data() + next, copy.data() + next, end - next);
      };
      for (const ParameterPiece& piece : pieces_.by_position(l)) {
        copy_gap(piece.position);
        const auto part = [&](auto view) { return view.subview(piece.position, piece.length); };
        trust_ratio_apply(update, neg_step[piece.parameter], part(weights), {part(m), part(v)},
                          copy.empty() ? copy : part(copy));
        next = piece.position + piece.length;
      }
      copy_gap(weights.size());
      done(l);
    }
  }

 private:
  const ModelLayout& model_;
  ParameterPieces pieces_;
};

} // namespace zero
