// The engine composed with tensor parallelism, at every tensor-parallel size that divides the
// world (1, 2 and 4 ranks at 4; 1 and 3 at 3). Each tensor rank registers its slices of the split
// tensors and the replicated ones whole, and writes its part of known full gradients. Promises:
// - the step's gradient norm is the norm of the full gradients, each replicated parameter counted
//   once, on every rank of the grid; with groups of one rank it is the plain engine's, bit for bit;
// - an overflow on one rank skips the step on every rank, and the dynamic loss scale drops
//   everywhere alike;
// - clipping uses the same coefficient on every rank, the replicated parameters stay bitwise the
//   same across the tensor-parallel group, and stages 0-3 give bitwise the same weights;
// - tensor ranks that registered different parameters are refused on every rank, naming the
//   parameter and both tensor ranks, and TensorParallelGroups refuses a size that does not divide
//   the world or that differs between ranks;
// - a checkpoint holds each tensor rank's slices in a sub-directory of its own and loads at the
//   same tensor-parallel size at any stage and data-parallel size; one of another tensor-parallel
//   size (with or without tensor parallelism) is refused naming both sizes.
// The engines are zero::engines' prebuilt ones (this unit compiles none of their code).

#include "comm_test.hpp"

#include <zero/checkpoint/manifest.hpp>
#include <zero/engine/model_layout.hpp>
#include <zero/engines.hpp>
#include <zero/shard/per_parameter.hpp>
#include <zero/tensor_parallel/groups.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tensor_parallel_engine_test {

using zero::testing::world;
using Groups = zero::TensorParallelGroups<zero::MpiCommunicator>;

// The model whole: the split parameters are cut into one slice per tensor rank (of uneven sizes
// where the size does not divide), the replicated ones are held whole by every tensor rank.
struct FullParameter {
  std::string name;
  std::size_t numel;
  int layer;
  bool replicated;
};
const std::vector<FullParameter> full_model = {
    {"embed.weight", 24, 0, false},     {"embed.position", 10, 0, true},
    {"h0.ln.weight", 5, 1, true},       {"h0.attn.qkv.weight", 36, 1, false},
    {"h0.attn.qkv.bias", 6, 1, false},  {"h0.attn.proj.weight", 30, 1, false},
    {"h0.attn.proj.bias", 7, 1, true},  {"h1.ln.bias", 3, 2, true},
    {"h1.mlp.fc.weight", 48, 2, false}, {"head.weight", 18, 3, false},
};
constexpr std::size_t layer_count = 4;

// Tensor rank t's elements of parameter p, in the full parameter.
std::pair<std::size_t, std::size_t> slice(std::size_t p, int t, int tensor_size) {
  const FullParameter& full = full_model[p];
  if (full.replicated) return {0, full.numel};
  const auto n = full.numel, ranks = static_cast<std::size_t>(tensor_size);
  const auto r = static_cast<std::size_t>(t);
  return {r * n / ranks, (r + 1) * n / ranks};
}

std::vector<zero::ParameterSpec> my_specs(int t, int tensor_size) {
  std::vector<zero::ParameterSpec> specs;
  // example-begin tensor-parallel-specs
  // Every tensor rank registers the same parameters, in the same order and layers, under the
  // whole tensor's name: its slice of a split one, a replicated one whole and marked.
  for (std::size_t p = 0; p < full_model.size(); ++p) {
    const auto [begin, end] = slice(p, t, tensor_size); // all of it when replicated
    zero::ParameterSpec spec{
        full_model[p].name, end - begin, zero::DType::float32, full_model[p].layer, {end - begin}};
    spec.replicated_over_tensor_parallel = full_model[p].replicated;
    specs.push_back(spec);
  }
  // example-end tensor-parallel-specs
  return specs;
}

// Multiples of 1/16: every square and every sum of them is exact in double, so the norm does not
// depend on the order of the additions.
float full_gradient(std::size_t p, std::size_t i, int step) {
  return static_cast<float>(static_cast<int>((i * 7 + p * 13 + std::size_t(step) * 5) % 17) - 8) /
         16.0f;
}
float full_weight(std::size_t p, std::size_t i) {
  return 0.25f + static_cast<float>(static_cast<int>((i * 5 + p * 3) % 11) - 5) / 32.0f;
}

// Tensor rank t's values of layer l, its parameters in order: f(p, i) for its elements.
template <class F>
std::vector<float> my_layer(std::size_t l, int t, int tensor_size, F&& f) {
  std::vector<float> values;
  for (std::size_t p = 0; p < full_model.size(); ++p)
    if (static_cast<std::size_t>(full_model[p].layer) == l) {
      const auto [begin, end] = slice(p, t, tensor_size);
      for (std::size_t i = begin; i < end; ++i)
        values.push_back(f(p, i));
    }
  return values;
}

double full_norm(int step) {
  double sum = 0;
  for (std::size_t p = 0; p < full_model.size(); ++p)
    for (std::size_t i = 0; i < full_model[p].numel; ++i) {
      const double g = full_gradient(p, i, step);
      sum += g * g;
    }
  return std::sqrt(sum);
}

std::vector<int> tensor_sizes() {
  std::vector<int> sizes;
  for (int t = 1; t <= world().size(); ++t)
    if (world().size() % t == 0) sizes.push_back(t);
  return sizes;
}

struct TrainingRun {
  int tensor_size = 1;
  int steps = 1;
  double clipping = 0;
  bool dynamic_scaler = false;
  bool overflow_on_last_rank = false;
  bool plain_engine = false; // the constructor over a communicator, for comparison
};

struct Trained {
  std::vector<zero::StepResult> steps;
  std::vector<std::vector<float>> layers; // this tensor rank's, after the steps
  double loss_scale = 0;
};

zero::AnyLossScaler scaler_for(const TrainingRun& run) {
  if (!run.dynamic_scaler) return zero::AnyLossScaler(zero::StaticLossScaler(1.0));
  zero::DynamicLossScalerOptions o;
  o.init_scale = 1024;
  o.hysteresis = 1; // the first overflow halves the scale
  return zero::AnyLossScaler(zero::DynamicLossScaler(o));
}

// One step from the gradients of step `step`, forward and backward as a trainer runs them; with
// `overflow`, one element of a split parameter is infinite.
template <class Engine>
zero::StepResult train_step(Engine& engine, int t, int tensor_size, int step,
                            bool overflow = false) {
  for (std::size_t l = 0; l < layer_count; ++l) {
    auto held = engine.acquire(l);
  }
  for (std::size_t l = layer_count; l-- > 0;) {
    auto held = engine.acquire(l);
    const auto values = my_layer(
        l, t, tensor_size, [&](std::size_t p, std::size_t i) { return full_gradient(p, i, step); });
    zero::View<float> grads = engine.template gradients<float>(l);
    for (std::size_t i = 0; i < values.size(); ++i)
      grads[i] = values[i];
    // A split parameter's element: h0.attn.qkv.weight is layer 1's second parameter.
    if (overflow && l == 1) grads[full_model[2].numel] = std::numeric_limits<float>::infinity();
    engine.grads_ready(l);
  }
  return engine.step();
}

template <class Engine>
void set_weights(Engine& engine, int t, int tensor_size) {
  for (std::size_t l = 0; l < layer_count; ++l)
    engine.set_layer(l, my_layer(l, t, tensor_size, full_weight));
}

template <class Engine>
std::vector<std::vector<float>> weights(Engine& engine) {
  std::vector<std::vector<float>> layers;
  for (std::size_t l = 0; l < layer_count; ++l)
    layers.push_back(engine.get_layer(l));
  return layers;
}

template <class Engine>
Trained train(Engine& engine, const TrainingRun& run, int t) {
  set_weights(engine, t, run.tensor_size);
  Trained trained;
  const bool last_rank = world().rank() + 1 == world().size();
  for (int step = 0; step < run.steps; ++step)
    trained.steps.push_back(
        train_step(engine, t, run.tensor_size, step, run.overflow_on_last_rank && last_rank));
  trained.layers = weights(engine);
  trained.loss_scale = engine.loss_scale();
  return trained;
}

template <int S>
Trained train(const TrainingRun& run) {
  zero::EngineOptions options;
  options.gradient_clipping = run.clipping;
  options.reduce_bucket_elements = 7; // buckets across parameters and layers
  zero::AdamW adamw({.lr = 0.01, .weight_decay = 0.1});
  if (run.plain_engine) {
    zero::PrebuiltEngine<S, zero::AdamW> engine(world(), my_specs(0, 1), adamw, scaler_for(run),
                                                options);
    return train(engine, run, 0);
  }
  // example-begin tensor-parallel-engine
  zero::TensorParallelGroups groups(world(), run.tensor_size); // T consecutive ranks share layers
  // ZeRO shards this rank's slices over groups.data(), the ranks holding the same slices.
  zero::PrebuiltEngine<S, zero::AdamW> engine(
      groups, my_specs(groups.tensor_rank(), run.tensor_size), adamw, scaler_for(run), options);
  // example-end tensor-parallel-engine
  EXPECT_EQ(engine.tensor_parallel_size(), run.tensor_size);
  EXPECT_EQ(engine.tensor_parallel_rank(), groups.tensor_rank());
  EXPECT_EQ(engine.shard_ranks(), groups.data_size());
  return train(engine, run, groups.tensor_rank());
}

Trained train(int stage, const TrainingRun& run) {
  switch (stage) {
  case 0:
    return train<0>(run);
  case 1:
    return train<1>(run);
  case 2:
    return train<2>(run);
  default:
    return train<3>(run);
  }
}

// Every rank's value of x, bit for bit.
std::vector<std::int64_t> on_every_rank(double x) {
  const std::vector<std::int64_t> mine{std::bit_cast<std::int64_t>(x)};
  std::vector<std::int64_t> all(static_cast<std::size_t>(world().size()));
  world().all_gather(mine, all).wait();
  return all;
}
void expect_same_on_every_rank(double x, const std::string& what) {
  const auto all = on_every_rank(x);
  for (std::size_t r = 1; r < all.size(); ++r)
    EXPECT_EQ(all[r], all[0]) << what << " differs on rank " << r << " from rank 0";
}

std::vector<float> replicated_values(const Trained& trained, int t, int tensor_size) {
  std::vector<float> values;
  for (std::size_t l = 0; l < layer_count; ++l) {
    std::size_t at = 0;
    for (std::size_t p = 0; p < full_model.size(); ++p)
      if (static_cast<std::size_t>(full_model[p].layer) == l) {
        const auto [begin, end] = slice(p, t, tensor_size);
        if (full_model[p].replicated)
          values.insert(values.end(), trained.layers[l].begin() + std::ptrdiff_t(at),
                        trained.layers[l].begin() + std::ptrdiff_t(at + end - begin));
        at += end - begin;
      }
  }
  return values;
}

TEST(TensorParallelEngine, NormIsTheFullGradientsNormWithReplicatedCountedOnce) {
  const double expected = full_norm(0);
  for (int tensor_size : tensor_sizes())
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("tensor size " + std::to_string(tensor_size) + ", stage " +
                   std::to_string(stage));
      const Trained trained = train(stage, TrainingRun{.tensor_size = tensor_size});
      const double norm = trained.steps[0].grad_norm;
      EXPECT_TRUE(trained.steps[0].applied);
      EXPECT_NEAR(norm, expected, 1e-12 * expected);
      expect_same_on_every_rank(norm, "the norm");
    }
}

TEST(TensorParallelEngine, GroupsOfOneRankAreThePlainEngine) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const TrainingRun run{.tensor_size = 1, .steps = 2, .clipping = 0.5};
    TrainingRun plain = run;
    plain.plain_engine = true;
    const Trained grouped = train(stage, run), alone = train(stage, plain);
    for (std::size_t s = 0; s < grouped.steps.size(); ++s) {
      EXPECT_EQ(std::bit_cast<std::int64_t>(grouped.steps[s].grad_norm),
                std::bit_cast<std::int64_t>(alone.steps[s].grad_norm));
      EXPECT_EQ(grouped.steps[s].communication.total_calls(),
                alone.steps[s].communication.total_calls());
      EXPECT_EQ(grouped.steps[s].communication.volume_elements(),
                alone.steps[s].communication.volume_elements());
    }
    EXPECT_EQ(grouped.layers, alone.layers);
  }
}

TEST(TensorParallelEngine, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  for (int tensor_size : tensor_sizes()) {
    SCOPED_TRACE("tensor size " + std::to_string(tensor_size));
    Groups groups(world(), tensor_size);
    const int t = groups.tensor_rank();
    const Trained trained = train(3, TrainingRun{.tensor_size = tensor_size,
                                                 .dynamic_scaler = true,
                                                 .overflow_on_last_rank = true});
    EXPECT_FALSE(trained.steps[0].applied);
    EXPECT_FALSE(std::isfinite(trained.steps[0].grad_norm));
    EXPECT_EQ(trained.steps[0].loss_scale, 1024.0);
    EXPECT_EQ(trained.loss_scale, 512.0);
    for (std::size_t l = 0; l < layer_count; ++l)
      EXPECT_EQ(trained.layers[l], my_layer(l, t, tensor_size, full_weight)) << "layer " << l;
  }
}

TEST(TensorParallelEngine, ClippingAgreesAndStagesGiveTheSameBits) {
  for (int tensor_size : tensor_sizes()) {
    Groups groups(world(), tensor_size);
    const int t = groups.tensor_rank();
    const TrainingRun run{.tensor_size = tensor_size, .steps = 3, .clipping = 0.5};
    std::vector<Trained> by_stage;
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("tensor size " + std::to_string(tensor_size) + ", stage " +
                   std::to_string(stage));
      by_stage.push_back(train(stage, run));
      const Trained& trained = by_stage.back();
      for (std::size_t s = 0; s < trained.steps.size(); ++s) {
        EXPECT_TRUE(trained.steps[s].applied);
        EXPECT_NEAR(trained.steps[s].grad_norm, full_norm(int(s)), 1e-12 * full_norm(int(s)));
        EXPECT_LT(trained.steps[s].clip_coefficient, 1.0);
        expect_same_on_every_rank(trained.steps[s].clip_coefficient, "the clip coefficient");
      }
      // The replicated parameters, bit for bit as tensor rank 0 holds them.
      const std::vector<float> mine = replicated_values(trained, t, tensor_size);
      std::vector<float> all(mine.size() * static_cast<std::size_t>(tensor_size));
      groups.tensor().all_gather(mine, all).wait();
      for (int r = 1; r < tensor_size; ++r)
        EXPECT_EQ(std::memcmp(all.data() + std::size_t(r) * mine.size(), all.data(),
                              mine.size() * sizeof(float)),
                  0)
            << "tensor rank " << r << "'s replicated parameters differ from tensor rank 0's";
      if (stage > 0) {
        EXPECT_EQ(trained.layers, by_stage[0].layers) << "against stage 0";
        for (std::size_t s = 0; s < trained.steps.size(); ++s)
          EXPECT_EQ(std::bit_cast<std::int64_t>(trained.steps[s].grad_norm),
                    std::bit_cast<std::int64_t>(by_stage[0].steps[s].grad_norm));
      }
    }
  }
}

// The norm's pieces of a block whose image is not the parameters in order (a per-parameter
// layout): every position of the block outside a replicated parameter, and none inside.
TEST(TensorParallelEngine, NormPiecesLeaveOutExactlyTheReplicatedElements) {
  const auto specs = my_specs(1, 2);
  for (int ranks = 1; ranks <= 4; ++ranks)
    for (int rank = 0; rank < ranks; ++rank) {
      const zero::ModelLayout model(zero::PerParameter{}.partition(specs, ranks), rank, rank,
                                    false);
      for (std::size_t l = 0; l < model.layers(); ++l) {
        std::vector<bool> counted(model.my_block_size(l), true);
        const zero::Range mine = model.my_flat_range(l);
        // The parameter at each position of the layer's parameters in order.
        std::vector<bool> replicated_at;
        for (std::size_t p : model.sharded->layer_parameters(l))
          replicated_at.insert(replicated_at.end(), model.sharded->parameter(p).numel,
                               model.sharded->parameter(p).replicated_over_tensor_parallel);
        model.images.for_each_run(l, mine, [&](const zero::ImageRun& run) {
          for (std::size_t i = 0; i < run.length; ++i)
            if (replicated_at[run.ordered + i]) counted[run.flat - mine.begin + i] = false;
        });
        std::vector<bool> listed(counted.size(), false);
        if (const auto* pieces = model.norm_pieces(l)) {
          for (const zero::Range& piece : *pieces)
            for (std::size_t i = piece.begin; i < piece.end; ++i)
              listed[i] = true;
        } else {
          listed.assign(listed.size(), true);
        }
        EXPECT_EQ(listed, counted) << ranks << " ranks, rank " << rank << ", layer " << l;
      }
      const zero::ModelLayout counting(zero::PerParameter{}.partition(specs, ranks), rank, rank);
      for (std::size_t l = 0; l < counting.layers(); ++l)
        EXPECT_EQ(counting.norm_pieces(l), nullptr);
    }
}

// Specs that differ across the tensor group: refused on every rank, naming the parameter and
// the tensor ranks, whichever ranks differ.
template <class Change>
std::string refusal(int tensor_size, Change&& change, zero::EngineOptions options = {}) {
  Groups groups(world(), tensor_size);
  auto specs = my_specs(groups.tensor_rank(), tensor_size);
  change(groups, specs);
  try {
    zero::PrebuiltEngine<2, zero::AdamW> engine(groups, specs, zero::AdamW({.lr = 0.01}),
                                                zero::AnyLossScaler(zero::StaticLossScaler(1.0)),
                                                options);
  } catch (const zero::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "the engine was built";
  return {};
}

TEST(TensorParallelEngine, TensorRanksThatRegisteredDifferentParametersAreRefused) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const int tensor_size = world().size() % 2 == 0 ? 2 : world().size();
  std::string message = refusal(tensor_size, [](Groups& g, auto& specs) {
    if (g.tensor_rank() == 1) specs[3].name = "h0.attn.qkv.kernel";
  });
  EXPECT_NE(message.find("tensor ranks 0 and 1"), std::string::npos) << message;
  EXPECT_NE(message.find("'h0.attn.qkv.weight'"), std::string::npos) << message;
  EXPECT_NE(message.find("'h0.attn.qkv.kernel'"), std::string::npos) << message;

  message = refusal(tensor_size, [](Groups& g, auto& specs) {
    if (g.tensor_rank() == 1) specs[2].replicated_over_tensor_parallel = false;
  });
  EXPECT_NE(message.find("'h0.ln.weight' (layer 1, replicated, 5 elements) on tensor rank 0 but "
                         "'h0.ln.weight' (layer 1, a slice of 5 elements) on tensor rank 1"),
            std::string::npos)
      << message;

  message = refusal(tensor_size, [&](Groups& g, auto& specs) {
    if (g.tensor_rank() == tensor_size - 1) specs[6].numel = 8; // h0.attn.proj.bias
  });
  EXPECT_NE(message.find("'h0.attn.proj.bias'"), std::string::npos) << message;
  EXPECT_NE(message.find("tensor ranks 0 and " + std::to_string(tensor_size - 1)),
            std::string::npos)
      << message;

  message = refusal(tensor_size, [](Groups& g, auto& specs) {
    if (g.tensor_rank() == 1) specs.push_back({"extra", 4, zero::DType::float32, 3});
  });
  EXPECT_NE(message.find("'extra'"), std::string::npos) << message;
  EXPECT_NE(message.find("10 parameters in 4 layers against 11 parameters in 4 layers"),
            std::string::npos)
      << message;

  // One rank alone: its data-parallel group refuses it, and the refusal reaches every rank.
  message = refusal(tensor_size, [](Groups&, auto& specs) {
    if (world().rank() + 1 == world().size()) specs[7].layer = 1;
  });
  EXPECT_NE(message.find("h1.ln.bias"), std::string::npos) << message;
}

// A block of 8-bit moments could mix replicated parameters with slices: refused by name (groups
// of one rank are the plain engine, which keeps them).
TEST(TensorParallelEngine, EightBitMomentsAreRefused) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  zero::EngineOptions options;
  options.moments = zero::MomentStorage::blockwise_8bit;
  const int tensor_size = world().size() % 2 == 0 ? 2 : world().size();
  const std::string message = refusal(
      tensor_size, [](Groups&, auto&) {}, options);
  EXPECT_NE(message.find("8-bit moments (EngineOptions::moments) are not built under tensor "
                         "parallelism"),
            std::string::npos)
      << message;
}

TEST(TensorParallelEngine, GroupsRefuseASizeThatDoesNotDivideTheWorld) {
  const int ranks = world().size();
  try {
    Groups groups(world(), ranks + 1);
    ADD_FAILURE() << "groups of " << ranks + 1 << " were made of " << ranks << " ranks";
  } catch (const zero::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("do not split into groups of " + std::to_string(ranks + 1)),
        std::string::npos)
        << e.what();
  }
  if (ranks < 2) return;
  try {
    Groups groups(world(), world().rank() == 0 ? 1 : ranks);
    ADD_FAILURE() << "ranks asking for different group sizes made groups";
  } catch (const zero::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("rank 0 asked for groups of 1 ranks, rank 1 for groups of " +
                                   std::to_string(ranks)),
        std::string::npos)
        << e.what();
  }
}

// --- checkpoints
// ----------------------------------------------------------------------------------

// A directory every rank of the world agrees on, removed by rank 0 at the end.
struct SharedDirectory {
  std::filesystem::path path;
  SharedDirectory() {
    std::vector<std::int64_t> n{std::int64_t(std::random_device{}() & 0x7fffffff)};
    world().broadcast(n, 0).wait();
    path = std::filesystem::temp_directory_path() /
           ("zero-tensor-parallel-test-" + std::to_string(n[0]));
    if (world().rank() == 0) std::filesystem::create_directories(path);
    world().barrier();
  }
  ~SharedDirectory() {
    world().barrier();
    if (world().rank() == 0) std::filesystem::remove_all(path);
  }
};

// f(engine, tensor rank) with a prebuilt engine of stage `stage` over tensor groups of `comm`.
template <int S, class F>
void with_engine(zero::MpiCommunicator& comm, int tensor_size, F&& f) {
  Groups groups(comm, tensor_size);
  zero::EngineOptions options;
  options.reduce_bucket_elements = 7;
  zero::PrebuiltEngine<S, zero::AdamW> engine(groups, my_specs(groups.tensor_rank(), tensor_size),
                                              zero::AdamW({.lr = 0.01, .weight_decay = 0.1}),
                                              zero::AnyLossScaler(zero::StaticLossScaler(1.0)),
                                              options);
  f(engine, groups.tensor_rank());
}
template <class F>
void with_engine(int stage, zero::MpiCommunicator& comm, int tensor_size, F&& f) {
  switch (stage) {
  case 0:
    return with_engine<0>(comm, tensor_size, f);
  case 1:
    return with_engine<1>(comm, tensor_size, f);
  case 2:
    return with_engine<2>(comm, tensor_size, f);
  default:
    return with_engine<3>(comm, tensor_size, f);
  }
}

int checkpoint_tensor_size() {
  return world().size() % 2 == 0 ? 2 : world().size();
}

template <class Engine>
std::string load_refusal(Engine& engine, const std::filesystem::path& dir, const std::string& tag) {
  try {
    engine.load_checkpoint(dir, tag);
  } catch (const zero::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "the checkpoint " << tag << " was loaded";
  return {};
}

TEST(TensorParallelEngine, CheckpointsHoldEachTensorRanksSlicesAndLoadAtOtherStagesAndDataSizes) {
  const int tensor_size = checkpoint_tensor_size();
  const SharedDirectory dir;
  const std::vector<std::byte> user_state{std::byte{1}, std::byte{2}, std::byte{3}};
  std::vector<std::vector<float>> saved, continued;
  with_engine(1, world(), tensor_size, [&](auto& engine, int t) {
    set_weights(engine, t, tensor_size);
    for (int step = 0; step < 2; ++step)
      train_step(engine, t, tensor_size, step);
    engine.save_checkpoint(dir.path, "step2", {.user_state = user_state, .async = true});
    saved = weights(engine);
    train_step(engine, t, tensor_size, 2); // while the save is in flight
    continued = weights(engine);
    engine.wait_for_checkpoint();
  });

  // One checkpoint per tensor rank, each a checkpoint of its own.
  const auto tag = dir.path / "step2";
  EXPECT_EQ(zero::checkpoint::saved_tensor_parallel_size(tag), tensor_size);
  for (int t = 0; t < tensor_size && tensor_size > 1; ++t) {
    const auto part = tag / zero::checkpoint::tensor_rank_directory(t, tensor_size);
    const zero::checkpoint::Manifest m = zero::checkpoint::read_manifest(part);
    EXPECT_EQ(m.tensor_parallel_size, tensor_size);
    EXPECT_EQ(m.tensor_parallel_rank, t);
    EXPECT_EQ(m.world_size, world().size() / tensor_size);
    EXPECT_EQ(m.parameters[3].numel,
              slice(3, t, tensor_size).second - slice(3, t, tensor_size).first);
  }
  if (tensor_size == 3) {
    EXPECT_TRUE(std::filesystem::is_directory(tag / "tensor_rank_02_of_03"));
  }

  // The same tensor-parallel size at the other stages: the weights bit for bit, and the next step
  // (the moments and the step count restored) too.
  for (int stage : {0, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    with_engine(stage, world(), tensor_size, [&](auto& engine, int t) {
      const zero::LoadedCheckpoint loaded = engine.load_checkpoint(dir.path);
      EXPECT_EQ(loaded.path, tag);
      EXPECT_EQ(loaded.saved_tensor_parallel_size, tensor_size);
      EXPECT_EQ(loaded.user_state, user_state);
      EXPECT_EQ(weights(engine), saved);
      train_step(engine, t, tensor_size, 2);
      EXPECT_EQ(weights(engine), continued);
    });
  }

  // Another data-parallel size: at 4 ranks, each half of the world is one replica of 2 tensor
  // ranks (tensor rank rank % 2, as in the run that saved).
  if (world().size() == 4) {
    zero::MpiCommunicator half = world().split(world().rank() / 2, world().rank());
    with_engine(3, half, 2, [&](auto& engine, int) {
      engine.load_checkpoint(dir.path, "step2");
      EXPECT_EQ(weights(engine), saved);
    });
  }
}

TEST(TensorParallelEngine, CheckpointsOfAnotherTensorParallelSizeAreRefused) {
  if (world().size() < 2) GTEST_SKIP() << zero::testing::not_applicable << "needs two ranks";
  const int tensor_size = checkpoint_tensor_size();
  const std::string size = std::to_string(tensor_size);
  const SharedDirectory dir;
  with_engine(2, world(), tensor_size, [&](auto& engine, int t) {
    set_weights(engine, t, tensor_size);
    engine.save_checkpoint(dir.path, "sliced");
  });
  {
    zero::PrebuiltEngine<2, zero::AdamW> plain(world(), my_specs(0, 1), zero::AdamW({.lr = 0.01}),
                                               zero::AnyLossScaler(zero::StaticLossScaler(1.0)));
    set_weights(plain, 0, 1);
    const std::string message = load_refusal(plain, dir.path, "sliced");
    EXPECT_NE(message.find("was saved with tensor parallelism of " + size +
                           " ranks, but this engine's tensor-parallel size is 1"),
              std::string::npos)
        << message;
    plain.save_checkpoint(dir.path, "whole");
  }
  with_engine(2, world(), tensor_size, [&](auto& engine, int) {
    const std::string message = load_refusal(engine, dir.path, "whole");
    EXPECT_NE(message.find("was saved without tensor parallelism (size 1), but this engine's "
                           "tensor-parallel size is " +
                           size),
              std::string::npos)
        << message;
  });
  if (world().size() == 4)
    with_engine(2, world(), 4, [&](auto& engine, int) {
      const std::string message = load_refusal(engine, dir.path, "sliced");
      EXPECT_NE(message.find("was saved with tensor parallelism of 2 ranks, but this engine's "
                             "tensor-parallel size is 4"),
                std::string::npos)
          << message;
    });
}

} // namespace tensor_parallel_engine_test
