// DeepSpeed's zero_optimization keys that change how the engine communicates, not what it
// computes: each gives the weights the default gives, bit for bit, and the step's
// report shows that it took effect.
//   reduce_scatter: false        gradients all-reduced, no reduce-scatter in the report
//   overlap_comm: false          no bucket left in flight while backward goes on
//   allgather_bucket_size        stages 1/2 gather layers in pieces: one collective per piece
//   stage3_max_reuse_distance    stage 3 keeps forward's layers for backward: fewer gathers
// and each reaches the engine from a DeepSpeed config (EngineOptions::from_config) at a value other
// than its default.

#include "training_scenario.hpp"

#include <zero/config/json.hpp>
#include <zero/engine/engine.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <string_view>

namespace config_keys_test {

using zero::Collective;
using namespace zero::testing;

const Scenario run{.steps = 3};

template <class Plan>
void expect_same_weights_as_default(const zero::EngineOptions& changed, const std::string& what) {
  const Outcome reference = train<Plan>(run);
  EXPECT_NE(reference.weights[2][0], initial_value(2, 0)) << what; // the weights moved
  expect_same_weights(reference, train<Plan>(run, zero::StaticLossScaler{}, changed),
                      /*bitwise=*/true, what);
}

TEST(EngineConfigKeys, ReduceScatterFalseAllReducesToTheSameBits) {
  zero::EngineOptions all_reduce;
  all_reduce.reduce_scatter = false;
  expect_same_weights_as_default<zero::Stage<1>>(all_reduce, "stage 1, reduce_scatter false");
  expect_same_weights_as_default<zero::Stage<2>>(all_reduce, "stage 2, reduce_scatter false");
  expect_same_weights_as_default<zero::Stage<3>>(all_reduce, "stage 3, reduce_scatter false");
  const Outcome scattered = train<zero::Stage<2>>(run);
  const Outcome reduced = train<zero::Stage<2>>(run, zero::StaticLossScaler{}, all_reduce);
  const auto& before = scattered.steps[1].communication;
  const auto& after = reduced.steps[1].communication;
  EXPECT_GT(before[Collective::reduce_scatter].calls, 0u);
  EXPECT_EQ(after[Collective::reduce_scatter].calls, 0u);
  // The buckets, all-reduced whole, plus the norm's one scalar.
  EXPECT_EQ(after[Collective::all_reduce].elements,
            before[Collective::reduce_scatter].elements + before[Collective::all_reduce].elements);
}

TEST(EngineConfigKeys, OverlapCommFalseLeavesNothingInFlight) {
  zero::EngineOptions blocking;
  blocking.overlap_comm = false;
  expect_same_weights_as_default<zero::Stage<0>>(blocking, "stage 0, overlap_comm false");
  expect_same_weights_as_default<zero::Stage<2>>(blocking, "stage 2, overlap_comm false");
  for (const Outcome& outcome : {train<zero::Stage<0>>(run), train<zero::Stage<2>>(run)})
    EXPECT_GT(outcome.steps[1].reduction.most_in_flight, 0u);
  for (const Outcome& outcome : {train<zero::Stage<0>>(run, zero::StaticLossScaler{}, blocking),
                                 train<zero::Stage<2>>(run, zero::StaticLossScaler{}, blocking)}) {
    EXPECT_GT(outcome.steps[1].reduction.buckets, 1u);
    EXPECT_EQ(outcome.steps[1].reduction.most_in_flight, 0u);
  }
}

TEST(EngineConfigKeys, AllgatherBucketSizeCutsStage1And2Gathers) {
  zero::EngineOptions pieces;
  pieces.allgather_bucket_elements = 64;
  expect_same_weights_as_default<zero::Stage<1>>(pieces, "stage 1, allgather_bucket_size 64");
  expect_same_weights_as_default<zero::Stage<2>>(pieces, "stage 2, allgather_bucket_size 64");
  const Outcome whole = train<zero::Stage<1>>(run);
  const Outcome cut = train<zero::Stage<1>>(run, zero::StaticLossScaler{}, pieces);
  const auto& before = whole.steps[1].communication[Collective::all_gather];
  const auto& after = cut.steps[1].communication[Collective::all_gather];
  const std::size_t layers = whole.weights.size();
  EXPECT_EQ(before.calls, layers);
  EXPECT_EQ(after.elements, before.elements); // the same bytes, in more collectives
  if (zero::testing::world().size() == 1) {
    EXPECT_EQ(after.calls, layers); // one rank gathers nothing: no pieces
    return;
  }
  // Every layer in pieces of at most 64 elements of its image.
  std::size_t pieces_expected = 0;
  for (std::size_t flat : cut.flat_sizes)
    pieces_expected += (flat + 63) / 64;
  EXPECT_EQ(after.calls, pieces_expected);
  EXPECT_GT(after.calls, 2 * layers);
}

TEST(EngineConfigKeys, ReuseDistanceKeepsStage3LayersForBackward) {
  zero::EngineOptions keep;
  keep.max_reuse_distance = 1'000'000'000;
  expect_same_weights_as_default<zero::Stage<3>>(keep, "stage 3, stage3_max_reuse_distance 1e9");
  const Outcome released = train<zero::Stage<3>>(run);
  const Outcome kept = train<zero::Stage<3>>(run, zero::StaticLossScaler{}, keep);
  const std::size_t layers = released.weights.size();
  // Released: forward gathers every layer and backward all but the last again. Kept: forward's
  // gathers serve backward too.
  EXPECT_EQ(released.steps[1].communication[Collective::all_gather].calls, 2 * layers - 1);
  EXPECT_EQ(kept.steps[1].communication[Collective::all_gather].calls, layers);
  // Released after forward, the layer below the top one is acquired again after the top layer
  // twice (forward's last, backward's first): a distance just above that keeps it, and only it.
  zero::EngineOptions near;
  near.max_reuse_distance = 2 * released.last_layer_padded + 1;
  EXPECT_EQ(train<zero::Stage<3>>(run, zero::StaticLossScaler{}, near)
                .steps[1]
                .communication[Collective::all_gather]
                .calls,
            2 * layers - 2);
}

zero::EngineOptions from_config_text(std::string_view text) {
  return zero::EngineOptions::from_config(zero::config::from_json_string(text));
}

// The three keys above, written in a config at values other than their defaults: from_config
// carries each into the options, and the engine does what the options say.
TEST(EngineConfigKeys, FromAConfigAtOtherValuesThanTheDefaults) {
  const zero::EngineOptions defaults = from_config_text("{}");
  const Outcome plain = train<zero::Stage<2>>(run, zero::StaticLossScaler{}, defaults);
  EXPECT_GT(plain.steps[1].reduction.most_in_flight, 0u);

  const zero::EngineOptions blocking =
      from_config_text(R"({"zero_optimization": {"stage": 2, "overlap_comm": false}})");
  EXPECT_FALSE(blocking.overlap_comm);
  const Outcome blocked = train<zero::Stage<2>>(run, zero::StaticLossScaler{}, blocking);
  EXPECT_GT(blocked.steps[1].reduction.buckets, 1u);
  EXPECT_EQ(blocked.steps[1].reduction.most_in_flight, 0u);

  const zero::EngineOptions pieces =
      from_config_text(R"({"zero_optimization": {"stage": 1, "allgather_bucket_size": 64}})");
  EXPECT_EQ(pieces.allgather_bucket_elements, 64u);
  const Outcome cut = train<zero::Stage<1>>(run, zero::StaticLossScaler{}, pieces);
  std::size_t pieces_expected = 0;
  for (std::size_t flat : cut.flat_sizes)
    pieces_expected += zero::testing::world().size() == 1 ? 1 : (flat + 63) / 64;
  EXPECT_EQ(cut.steps[1].communication[Collective::all_gather].calls, pieces_expected);

  const zero::EngineOptions keep =
      from_config_text(R"({"zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 1e9}})");
  EXPECT_EQ(keep.max_reuse_distance, 1'000'000'000u);
  const Outcome kept = train<zero::Stage<3>>(run, zero::StaticLossScaler{}, keep);
  EXPECT_EQ(kept.steps[1].communication[Collective::all_gather].calls, kept.weights.size());
}

// Not a config key, but the same promise: an engine compiled for fewer compute types (to compile
// less) trains its types to the same bits, and refuses the others by name.
TEST(EngineComputeTypes, AnFp32OnlyEngineGivesTheSameBitsAndRefusesHalf) {
  using Fp32Only = zero::ComputeTypes<float>;
  expect_same_weights(
      train<zero::Stage<2>>(run),
      train<zero::Stage<2>, zero::host, zero::Adam, zero::StaticLossScaler, Fp32Only>(run),
      /*bitwise=*/true, "stage 2, fp32-only engine");
  expect_error_contains(
      [] {
        train<zero::Stage<2>, zero::host, zero::Adam, zero::StaticLossScaler, Fp32Only>(
            {.dtype = zero::DType::float16});
      },
      "engine: compute_dtype half: this engine was compiled for float only");
}

} // namespace config_keys_test
