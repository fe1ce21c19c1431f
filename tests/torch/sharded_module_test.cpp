// zero::torch::ShardedModule at 1, 2 and 3 ranks: the module's parameters alias the engine's
// compute copy, gradients reach the engine's store as autograd made them, stage 3 holds a layer's
// weights only inside its call, stages 0-3 give the same bits and plain libtorch's Adam within a
// bound, checkpoints and the state_dict file round-trip, and what the adapter refuses it names.
#include "zero/torch/sharded_module.hpp"

#include "zero/engine/engine.hpp"
#include "zero/optim/adam.hpp"

#include "comm_test.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

template <int S>
using EngineOf = zero::Engine<zero::Stage<S>, zero::MpiCommunicator, zero::host, zero::Adam,
                              zero::StaticLossScaler, zero::ComputeTypes<float>>;

// Three children, each one engine layer; `spare` is a parameter the forward never uses.
struct SmallImpl : torch::nn::Module {
  SmallImpl()
      : in(register_module("in", torch::nn::Linear(6, 8))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})))),
        out(register_module("out", torch::nn::Linear(8, 3))) {
    spare = out->register_parameter("spare", torch::ones({4}));
  }
  torch::nn::Linear in;
  torch::nn::LayerNorm norm;
  torch::nn::Linear out;
  torch::Tensor spare;
};
TORCH_MODULE(Small);

Small make_small() {
  torch::manual_seed(7);
  return Small();
}

// This rank's batch of step `step` (a rank's rows differ from another's).
torch::Tensor batch(int step, int rank) {
  torch::manual_seed(std::uint64_t(1000 + 10 * step + rank));
  return torch::randn({5, 6});
}

// The loss through run(layer, function, input), as an example's forward is written.
template <class Run>
torch::Tensor small_loss(Small& m, Run&& run, const torch::Tensor& x) {
  torch::Tensor h = run(
      0, [m](const torch::Tensor& in) mutable { return torch::tanh(m->in(in)); }, x);
  h = run(
      1, [m](const torch::Tensor& in) mutable { return m->norm(in); }, h);
  h = run(
      2, [m](const torch::Tensor& in) mutable { return m->out(in); }, h);
  return h.pow(2).mean();
}

template <class Sharded>
auto through(Sharded& sharded) {
  return [&sharded](std::int64_t l, auto f, const torch::Tensor& in) {
    return sharded.call(std::size_t(l), f, in);
  };
}

template <int S>
struct Trainer {
  Small model = make_small();
  zero::torch::ModuleLayers layers = zero::torch::ModuleLayers::by_child(*model);
  EngineOf<S> engine;
  zero::torch::ShardedModule<EngineOf<S>> sharded;

  explicit Trainer(zero::EngineOptions options = deterministic())
      : engine(zero::testing::world(), layers.specs(), zero::Adam({.lr = 0.01}),
               zero::StaticLossScaler{}, options),
        sharded(engine, *model, layers) {}

  static zero::EngineOptions deterministic() {
    zero::EngineOptions o;
    o.deterministic = true;
    return o;
  }
  // One step on this rank's batch; the loss.
  double step(int i) {
    const torch::Tensor loss =
        small_loss(model, through(sharded), batch(i, zero::testing::world().rank()));
    sharded.backward(loss);
    EXPECT_TRUE(sharded.step().applied);
    return loss.item<double>();
  }
  std::vector<std::vector<float>> weights() {
    std::vector<std::vector<float>> all;
    for (std::size_t l = 0; l < engine.layers(); ++l)
      all.push_back(engine.get_layer(l));
    return all;
  }
};

class TorchTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); } // ranks share the cores
};

TEST_F(TorchTest, ParametersViewTheEnginesComputeCopy) {
  Trainer<0> run;
  std::size_t offset = 0;
  {
    const zero::LayerParameters held = run.engine.acquire(0);
    for (const auto& p : run.layers.layer(0)) {
      EXPECT_EQ(p.tensor.data_ptr<float>(), held.values<float>().data() + offset) << p.name;
      offset += std::size_t(p.tensor.numel());
    }
    // A write through the module is the engine's compute copy...
    const torch::NoGradGuard no_grad;
    run.model->in->weight.fill_(0.25f);
    EXPECT_EQ(held.values<float>()[0], 0.25f);
  }
  // ... and the engine's new weights are what the module sees.
  std::vector<float> values(run.layers.numel(0), -1.5f);
  run.engine.set_layer(0, values);
  EXPECT_TRUE(torch::all(run.model->in->bias == -1.5f).item<bool>());
  run.step(0); // the views follow the update
  const std::vector<float> master = run.engine.get_layer(0);
  const torch::Tensor bias = run.model->in->bias.detach();
  EXPECT_TRUE(
      torch::equal(bias, torch::tensor(std::vector<float>(master.end() - 8, master.end()))));
}

TEST_F(TorchTest, GradientsReachTheStoreAsAutogradMadeThem) {
  Trainer<0> run;
  // The same module in plain libtorch, from the same weights.
  Small plain = make_small();
  const torch::Tensor x = batch(0, 0); // every rank the same rows: the average is the rank's own
  const torch::Tensor plain_loss = small_loss(
      plain, [](std::int64_t, auto f, const torch::Tensor& in) { return f(in); }, x);
  plain_loss.backward();
  const torch::Tensor loss = small_loss(run.model, through(run.sharded), x);
  run.sharded.backward(loss);
  EXPECT_EQ(loss.item<float>(), plain_loss.item<float>());
  for (std::size_t l = 0; l < run.layers.size(); ++l) {
    const zero::View<float> got = run.engine.gradients<float>(l);
    std::size_t offset = 0;
    for (const auto& p : run.layers.layer(l)) {
      const torch::Tensor plain_p = plain->named_parameters()[p.name];
      const torch::Tensor expected =
          plain_p.grad().defined() ? plain_p.grad().contiguous() : torch::zeros_like(plain_p);
      // The store holds the average over ranks by now: of N equal gradients, that is each one's
      // bits when N is a power of two (the sum and the division are exact), else within an ulp.
      const torch::Tensor arrived =
          torch::from_blob(got.data() + offset, expected.sizes(), torch::kFloat32);
      if (std::has_single_bit(unsigned(zero::testing::world().size())))
        EXPECT_TRUE(torch::equal(arrived, expected)) << p.name << " at layer " << l;
      else
        EXPECT_TRUE(torch::allclose(arrived, expected, 1e-6, 0)) << p.name << " at layer " << l;
      EXPECT_FALSE(p.tensor.grad().defined()) << p.name << ": .grad() stays empty";
      offset += std::size_t(p.tensor.numel());
    }
  }
  // The parameter no call used got zeros (plain libtorch leaves its .grad() undefined).
  EXPECT_FALSE(plain->spare.grad().defined());
  EXPECT_TRUE(run.sharded.step().applied);
}

TEST_F(TorchTest, Stage3HoldsALayersWeightsOnlyInsideItsCall) {
  Trainer<3> run;
  const auto held_elements = [&] {
    std::int64_t n = 0;
    for (const auto& p : run.model->parameters())
      n += p.numel();
    return n;
  };
  EXPECT_EQ(held_elements(), 0);
  std::vector<std::int64_t> seen_forward, seen_backward;
  const auto watch = [&](std::int64_t l, auto f, const torch::Tensor& in) {
    return run.sharded.call(
        std::size_t(l),
        [&, f, l](const torch::Tensor& x) mutable {
          (torch::GradMode::is_enabled() ? seen_backward : seen_forward).push_back(held_elements());
          EXPECT_EQ(held_elements(), std::int64_t(run.layers.numel(std::size_t(l))));
          return f(x);
        },
        in);
  };
  const torch::Tensor loss = small_loss(run.model, watch, batch(0, zero::testing::world().rank()));
  EXPECT_EQ(held_elements(), 0) << "after the forward";
  run.sharded.backward(loss);
  EXPECT_EQ(held_elements(), 0) << "after the backward";
  EXPECT_EQ(seen_forward.size(), 3u);
  EXPECT_EQ(seen_backward.size(), 3u); // each layer gathered again for its backward
  EXPECT_TRUE(run.sharded.step().applied);
  // What the engine keeps of the compute copy: at stage 3 its shard and the buffers the layers in
  // flight are gathered into, less than the whole copy stage 0 keeps, from 2 ranks on.
  const std::size_t stage3 = run.engine.memory().parameters.memory;
  const std::size_t stage0 = Trainer<0>().engine.memory().parameters.memory;
  std::printf("compute copy kept by the engine: stage 3 %zu bytes, stage 0 %zu\n", stage3, stage0);
  if (zero::testing::world().size() > 1) {
    EXPECT_LT(stage3, stage0);
  }
}

template <int S>
std::vector<std::vector<float>> train_three_steps() {
  Trainer<S> run;
  for (int i = 0; i < 3; ++i)
    run.step(i);
  return run.weights();
}

TEST_F(TorchTest, StagesGiveTheSameBits) {
  const auto stage0 = train_three_steps<0>();
  EXPECT_EQ(train_three_steps<1>(), stage0);
  EXPECT_EQ(train_three_steps<2>(), stage0);
  EXPECT_EQ(train_three_steps<3>(), stage0);
}

TEST_F(TorchTest, MatchesPlainLibtorchsAdam) {
  auto& world = zero::testing::world();
  Trainer<3> run;
  // Plain libtorch on every rank: the whole global batch, torch::optim::Adam.
  Small plain = make_small();
  torch::optim::Adam adam(plain->parameters(), torch::optim::AdamOptions(0.01));
  const auto direct = [](std::int64_t, auto f, const torch::Tensor& in) { return f(in); };
  for (int i = 0; i < 3; ++i) {
    run.step(i);
    std::vector<torch::Tensor> rows;
    for (int r = 0; r < world.size(); ++r)
      rows.push_back(batch(i, r));
    adam.zero_grad();
    small_loss(plain, direct, torch::cat(rows)).backward();
    adam.step();
  }
  const auto weights = run.weights();
  for (std::size_t l = 0; l < run.layers.size(); ++l) {
    std::size_t offset = 0;
    for (const auto& p : run.layers.layer(l)) {
      const torch::Tensor expected =
          plain->named_parameters()[p.name].detach().contiguous().view(-1);
      const torch::Tensor got =
          torch::from_blob(const_cast<float*>(weights[l].data() + offset), {expected.numel()});
      // Adam divides by sqrt(v) + eps: float rounding in the gradient's last bits moves the
      // update by far less than this.
      EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-6))
          << p.name << ": largest difference " << (got - expected).abs().max().item<float>();
      offset += std::size_t(expected.numel()); // (at stage 3 the module's tensor is empty here)
    }
  }
}

TEST_F(TorchTest, CheckpointsAndTheStateDictFile) {
  auto& world = zero::testing::world();
  std::vector<std::int64_t> id{std::int64_t(std::random_device{}() & 0x7fffffff)};
  world.broadcast(id, 0).wait();
  const fs::path dir = fs::temp_directory_path() / ("zero-torch-test-" + std::to_string(id[0]));
  Trainer<3> run;
  run.step(0);
  run.sharded.save_checkpoint(dir, "one");
  const auto saved = run.weights();
  run.step(1);
  run.sharded.load_checkpoint(dir, "one");
  EXPECT_EQ(run.weights(), saved);

  Trainer<1> stage1; // loads a stage-3 checkpoint; its views show the loaded weights
  stage1.sharded.load_checkpoint(dir, "one");
  EXPECT_EQ(stage1.model->out->weight.view(-1)[0].item<float>(), saved[2][0]);

  const fs::path file = dir / "model.safetensors";
  run.sharded.save_state_dict(file);
  world.barrier();
  std::ifstream in(file, std::ios::binary);
  ASSERT_TRUE(in) << file;
  std::uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  std::string text(length, ' ');
  in.read(text.data(), std::streamsize(length));
  const nlohmann::json header = nlohmann::json::parse(text);
  const std::vector<char> data((std::istreambuf_iterator<char>(in)), {});
  for (std::size_t l = 0; l < run.layers.size(); ++l) {
    std::size_t offset = 0;
    for (const auto& p : run.layers.layer(l)) {
      ASSERT_TRUE(header.contains(p.name)) << p.name;
      EXPECT_EQ(header[p.name]["dtype"], "F32");
      EXPECT_EQ(header[p.name]["shape"].get<std::vector<std::size_t>>(), p.shape);
      const auto begin = header[p.name]["data_offsets"][0].get<std::size_t>();
      const auto end = header[p.name]["data_offsets"][1].get<std::size_t>();
      EXPECT_EQ(std::memcmp(data.data() + begin, saved[l].data() + offset, end - begin), 0)
          << p.name;
      offset += (end - begin) / sizeof(float);
    }
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_F(TorchTest, RefusesWhatItCannotKeepNamingIt) {
  struct Tied : torch::nn::Module {
    Tied() {
      a = register_module("a", torch::nn::Linear(3, 3));
      b = register_module("b", torch::nn::Linear(3, 3));
      b->register_parameter("tied", a->weight); // one tensor under two names
    }
    torch::nn::Linear a{nullptr}, b{nullptr};
  } tied;
  try {
    zero::torch::ModuleLayers::by_child(tied);
    FAIL() << "tied weights were accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'b.tied' and 'a.weight' are one tensor"),
              std::string::npos)
        << e.what();
    // zero's errors say "zero: " once, then the part of zero: "torch: ".
    EXPECT_EQ(std::string(e.what()).rfind("zero: torch: '", 0), 0u) << e.what();
  }
  torch::nn::Linear frozen(3, 3);
  frozen->bias.requires_grad_(false);
  try {
    zero::torch::ModuleLayers::by_child(*frozen);
    FAIL() << "a frozen parameter was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'bias' does not require a gradient"), std::string::npos)
        << e.what();
  }
  Small m = make_small();
  try {
    zero::torch::ModuleLayers::grouped(*m, {{"in"}, {"norm"}});
    FAIL() << "a parameter in no group was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'out.weight' is in no layer's group"), std::string::npos)
        << e.what();
  }
  // A layer called twice in a micro-step: the second call is refused, before anything ran.
  {
    Trainer<0> twice;
    const auto first = [m = twice.model](const torch::Tensor& in) mutable { return m->in(in); };
    const torch::Tensor h = twice.sharded.call(0, first, batch(0, 0));
    try {
      twice.sharded.call(0, first, batch(1, 0));
      FAIL() << "a layer was called twice in one micro-step";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("layer 0 (child 'in') is called a second time"),
                std::string::npos)
          << e.what();
    }
  }
  // Layers never called in a micro-step: step() refuses, naming them (on every rank alike).
  Trainer<2> run;
  const torch::Tensor h = run.sharded.call(
      0, [m = run.model](const torch::Tensor& in) mutable { return m->in(in); }, batch(0, 0));
  run.sharded.backward(h.sum());
  try {
    run.sharded.step();
    FAIL() << "a step without every layer's gradient was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "layer 1 (child 'norm'), layer 2 (child 'out') handed no gradient to the engine"),
              std::string::npos)
        << e.what();
  }
}

// Errors name a layer by what it is: a child of the module, or the grouping's prefixes.
TEST_F(TorchTest, LayersAreNamedByTheirChildOrPrefixes) {
  Small m = make_small();
  EXPECT_EQ(zero::torch::ModuleLayers::by_child(*m).name(2), "layer 2 (child 'out')");
  EXPECT_EQ(zero::torch::ModuleLayers::grouped(*m, {{"in", "norm"}, {"out"}}).name(0),
            "layer 0 ('in', 'norm')");
}

// A child whose forward does not run through call(): at stages 0-2 autograd gives its parameters
// a .grad() of their own, which backward() (or step(), after a plain loss.backward()) refuses,
// naming the child; at stage 3, run inside another layer's call, libtorch's error on its empty
// parameters is given with the name of the layer whose call it was.
TEST_F(TorchTest, NamesAChildRunOutsideItsCall) {
  const auto expect_error = [](auto&& f, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one with: " << words;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  // The norm runs directly, between two calls.
  const auto norm_outside = [](auto& run) {
    torch::Tensor h = run.sharded.call(
        0, [m = run.model](const torch::Tensor& in) mutable { return torch::tanh(m->in(in)); },
        batch(0, zero::testing::world().rank()));
    h = run.model->norm(h);
    h = run.sharded.call(
        2, [m = run.model](const torch::Tensor& in) mutable { return m->out(in); }, h);
    return h.pow(2).mean();
  };
  {
    Trainer<0> run;
    const torch::Tensor loss = norm_outside(run);
    expect_error([&] { run.sharded.backward(loss); },
                 "layer 1 (child 'norm') ran outside sharded.call(): autograd gave 'norm.weight' "
                 "a .grad() of its own");
  }
  {
    Trainer<2> run;
    norm_outside(run).backward(); // not sharded.backward(): step() is the next to see it
    expect_error([&] { run.sharded.step(); }, "layer 1 (child 'norm') ran outside sharded.call()");
  }
  {
    Trainer<3> run;
    expect_error(
        [&] {
          run.sharded.call(
              1, [m = run.model](const torch::Tensor& in) mutable { return m->norm(m->in(in)); },
              batch(0, 0));
        },
        "layer 1 (child 'norm')'s function failed at stage 3: ");
  }
  // A .grad() left from plain libtorch before the ShardedModule is not taken for one.
  {
    Small m = make_small();
    m->norm->weight.mutable_grad() = torch::ones({8});
    const auto layers = zero::torch::ModuleLayers::by_child(*m);
    EngineOf<0> engine(zero::testing::world(), layers.specs(), zero::Adam({.lr = 0.01}),
                       zero::StaticLossScaler{});
    zero::torch::ShardedModule<EngineOf<0>> sharded(engine, *m, layers);
    sharded.backward(small_loss(m, through(sharded), batch(0, zero::testing::world().rank())));
    EXPECT_TRUE(sharded.step().applied);
  }
}

// What a call cannot give a gradient to is refused, at every stage: a captured tensor that requires
// one (another layer's output here), a second backward over one forward, an input changed in place
// before stage 3 runs the call again.
template <int S>
void refuses_what_a_call_cannot_differentiate() {
  const auto expect_error = [](auto&& f, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one with: " << words;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  {
    Trainer<S> run;
    const torch::Tensor x = batch(0, 0);
    const torch::Tensor h = run.sharded.call(
        0, [m = run.model](const torch::Tensor& in) mutable { return m->in(in); }, x);
    // Layer 1 adds layer 0's output as a capture, not as its input.
    expect_error(
        [&] {
          const torch::Tensor y = run.sharded.call(
              1, [m = run.model, h](const torch::Tensor& in) mutable { return m->norm(in) + h; },
              h.detach());
          run.sharded.backward(y.sum());
        },
        "reads a tensor computed before the call that requires a gradient");
  }
  {
    Trainer<S> run;
    const torch::Tensor x = batch(0, 0);
    expect_error(
        [&] {
          const torch::Tensor y = run.sharded.call(
              0,
              [m = run.model](const torch::Tensor& in) mutable {
                return m->in(in) + m->out->weight.sum(); // layer 2's parameter
              },
              x);
          run.sharded.backward(y.sum());
        },
        "reads 'out.weight' of layer 2");
  }
  if constexpr (S == 0) { // (at stage 3 the inner call's own error comes first)
    Trainer<S> run;
    expect_error(
        [&] {
          run.sharded.call(
              0,
              [&run](const torch::Tensor& in) {
                return run.sharded.call(
                    1, [m = run.model](const torch::Tensor& x) mutable { return m->norm(x); },
                    torch::tanh(run.model->in(in)).narrow(1, 0, 8));
              },
              batch(0, 0));
        },
        "calls do not nest");
  }
  {
    Trainer<S> run;
    const torch::Tensor loss = small_loss(run.model, through(run.sharded), batch(0, 0));
    loss.backward({}, /*retain_graph=*/true);
    expect_error([&] { loss.backward(); }, "ran twice");
  }
  if constexpr (S == 3) {
    Trainer<S> run;
    torch::Tensor x = batch(0, 0).requires_grad_(false);
    const torch::Tensor h = run.sharded.call(
        0, [m = run.model](const torch::Tensor& in) mutable { return m->in(in); }, x);
    x.add_(1.0f);
    expect_error([&] { h.sum().backward(); }, "modified in place before its backward");
  }
}

TEST_F(TorchTest, RefusesWhatACallCannotDifferentiate) {
  refuses_what_a_call_cannot_differentiate<0>();
  refuses_what_a_call_cannot_differentiate<3>();
}

// Dropout inside a layer: stage 3 runs the layer's forward twice, and must draw the same mask the
// second time, so that its weights are stage 0's bit for bit.
template <int S>
std::vector<std::vector<float>> train_with_dropout() {
  Trainer<S> run;
  torch::manual_seed(42); // the same masks at every stage
  for (int i = 0; i < 3; ++i) {
    torch::Tensor h = run.sharded.call(
        0,
        [m = run.model](const torch::Tensor& in) mutable {
          return torch::dropout(torch::tanh(m->in(in)), 0.5, /*train=*/true);
        },
        batch(i, zero::testing::world().rank()));
    h = run.sharded.call(
        1, [m = run.model](const torch::Tensor& in) mutable { return m->norm(in); }, h);
    h = run.sharded.call(
        2, [m = run.model](const torch::Tensor& in) mutable { return m->out(in); }, h);
    run.sharded.backward(h.pow(2).mean());
    EXPECT_TRUE(run.sharded.step().applied);
  }
  return run.weights();
}

TEST_F(TorchTest, Stage3ReplaysTheRandomStateOfItsFirstForward) {
  EXPECT_EQ(train_with_dropout<3>(), train_with_dropout<0>());
}

TEST_F(TorchTest, RefusesParametersAndComputeTypesItDoesNotTrain) {
  torch::nn::Linear doubles(3, 3);
  doubles->to(torch::kFloat64);
  try {
    zero::torch::ModuleLayers::by_child(*doubles);
    FAIL() << "a float64 parameter was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'weight' is Double"), std::string::npos) << e.what();
  }
  zero::EngineOptions bf16;
  bf16.compute_dtype = zero::DType::bfloat16;
  using Bf16Engine =
      zero::Engine<zero::Stage<0>, zero::MpiCommunicator, zero::host, zero::Adam,
                   zero::StaticLossScaler, zero::ComputeTypes<float, zero::bfloat16>>;
  Small m = make_small();
  const auto layers = zero::torch::ModuleLayers::by_child(*m);
  Bf16Engine engine(zero::testing::world(), layers.specs(), zero::Adam({.lr = 0.01}),
                    zero::StaticLossScaler{}, bf16);
  try {
    zero::torch::ShardedModule<Bf16Engine> sharded(engine, *m, layers);
    FAIL() << "a bfloat16 compute copy was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the compute type is bfloat16"), std::string::npos)
        << e.what();
  }
}

// After the ShardedModule, the module keeps the weights (copy_to_module at stage 3, which would
// otherwise leave NaN).
TEST_F(TorchTest, TheModuleKeepsTheWeightsAfterwards) {
  Small m = make_small();
  std::vector<float> expected;
  {
    const auto layers = zero::torch::ModuleLayers::by_child(*m);
    EngineOf<3> engine(zero::testing::world(), layers.specs(), zero::Adam({.lr = 0.01}),
                       zero::StaticLossScaler{});
    zero::torch::ShardedModule<EngineOf<3>> sharded(engine, *m, layers);
    sharded.backward(small_loss(m, through(sharded), batch(0, zero::testing::world().rank())));
    sharded.step();
    expected = engine.get_layer(2);
    sharded.copy_to_module();
  }
  const torch::Tensor out =
      torch::cat({m->out->weight.detach().reshape(-1), m->out->bias.detach(), m->spare.detach()});
  EXPECT_TRUE(torch::equal(out, torch::tensor(expected)));
}

} // namespace
