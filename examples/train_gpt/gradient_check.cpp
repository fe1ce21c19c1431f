// One forward and backward pass of gpt.hpp's whole model on step 0's batch, for
// check_gradients.py to hold against PyTorch: reads the weights (<name>.npy, as reference.py's
// init_npy writes them) and a byte file, and writes the mean loss (loss.npy) and every parameter's
// gradient (<name>.npy) into the output directory. With --time N it also runs N more passes and
// prints their mean wall time.
//
//   gradient_check --layers 2 --heads 2 --embd 32 --seq 16 --batch 3 --data README.md
//                  --init-npy DIR --out DIR [--time N]

#include "../train_mlp/npy.hpp"
#include "gpt.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

struct Arguments {
  gpt::Config config;
  std::size_t batch = 4;
  std::string data, init_npy, out;
  int time = 0;
};

// A bad command line prints the error and the usage and exits with status 2, as it always did;
// --help prints CLI11's help.
Arguments parse(int argc, char** argv) {
  Arguments a;
  CLI::App app{"One forward and backward pass of train_gpt's model, for check_gradients.py",
               "gradient_check"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--layers", a.config.layers, "transformer blocks")->capture_default_str();
  app.add_option("--heads", a.config.heads, "attention heads")->capture_default_str();
  app.add_option("--embd", a.config.embd, "embedding width")->capture_default_str();
  app.add_option("--seq", a.config.seq, "sequence length")->capture_default_str();
  app.add_option("--batch", a.batch, "sequences")->capture_default_str();
  app.add_option("--data", a.data, "the byte file")->required();
  app.add_option("--init-npy", a.init_npy, "the weights, one .npy per parameter")->required();
  app.add_option("--out", a.out, "where loss.npy and the gradients go")->required();
  app.add_option("--time", a.time, "also time N more passes")->capture_default_str();
  std::string error;
  try {
    app.parse(argc, argv);
    if (a.config.heads == 0 || a.config.embd % a.config.heads != 0)
      error = "--embd must split into --heads heads";
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    error = e.what();
  }
  if (!error.empty()) {
    std::fprintf(stderr,
                 "gradient_check: %s\nusage: gradient_check --layers L --heads H --embd C --seq T "
                 "--batch B --data FILE --init-npy DIR --out DIR [--time N]\n",
                 error.c_str());
    std::exit(2);
  }
  return a;
}

// The whole model's parameters, one flat array per engine layer, as the engine would gather them.
struct Model {
  gpt::Config config;
  std::vector<zero::ParameterSpec> specs = gpt::specs(config);
  std::vector<std::vector<float>> layers;

  explicit Model(const gpt::Config& c) : config(c), layers(c.layers + 2) {
    for (const auto& spec : specs)
      layers[std::size_t(spec.layer)].resize(layers[std::size_t(spec.layer)].size() + spec.numel);
  }
  // Calls f(spec, pointer into `flat`) for each parameter, with flat[layer] laid out as `layers`.
  template <class F>
  void each(std::vector<std::vector<float>>& flat, F f) const {
    std::vector<std::size_t> offset(flat.size());
    for (const auto& spec : specs) {
      const auto layer = std::size_t(spec.layer);
      f(spec, flat[layer].data() + offset[layer]);
      offset[layer] += spec.numel;
    }
  }
};

// Step 0's sequences under reference.py's data rule: sequence b starts at (b * seq) mod
// (bytes - seq - 1), its targets one byte later.
void first_batch(const std::string& data, std::size_t batch, std::size_t seq,
                 std::vector<std::uint8_t>& inputs, std::vector<std::uint8_t>& targets) {
  const std::size_t span = data.size() - seq - 1;
  inputs.resize(batch * seq);
  targets.resize(batch * seq);
  for (std::size_t b = 0; b < batch; ++b) {
    const std::size_t start = (b * seq) % span;
    for (std::size_t t = 0; t < seq; ++t) {
      inputs[b * seq + t] = std::uint8_t(data[start + t]);
      targets[b * seq + t] = std::uint8_t(data[start + t + 1]);
    }
  }
}

// Activations and gradients of one pass, kept between passes so that timed passes allocate
// nothing.
struct Pass {
  std::vector<std::vector<float>> inputs; // each block's input, then ln_f's
  std::vector<std::vector<float>> saved;
  std::vector<float> dx, dnext;
  std::vector<std::vector<float>> gradients;
};

double forward_backward(const Model& model, std::size_t batch,
                        const std::vector<std::uint8_t>& tokens,
                        const std::vector<std::uint8_t>& targets, Pass& pass) {
  const gpt::Config& c = model.config;
  const std::size_t activations = batch * c.seq * c.embd;
  if (pass.inputs.empty()) {
    pass.inputs.assign(c.layers + 1, std::vector<float>(activations));
    pass.saved.assign(c.layers, std::vector<float>(gpt::block_saved_floats(c, batch)));
    pass.dx.resize(activations);
    pass.dnext.resize(activations);
    for (const auto& layer : model.layers)
      pass.gradients.emplace_back(layer.size());
  }

  const float* wte = model.layers[0].data();
  const float* wpe = wte + c.vocab * c.embd;
  float* dwte = pass.gradients[0].data();
  float* dwpe = dwte + c.vocab * c.embd;
  gpt::embed_forward(c, wte, wpe, tokens.data(), pass.inputs[0].data(), batch);
  for (std::size_t i = 0; i < c.layers; ++i)
    gpt::block_forward(c, model.layers[1 + i].data(), pass.inputs[i].data(),
                       pass.inputs[i + 1].data(), pass.saved[i].data(), batch);
  const double loss = gpt::head_forward_backward(
      c, model.layers[c.layers + 1].data(), wte, pass.inputs[c.layers].data(), targets.data(),
      pass.dx.data(), pass.gradients[c.layers + 1].data(), dwte, batch, double(batch * c.seq),
      1.0f);
  for (std::size_t i = c.layers; i-- > 0;) {
    gpt::block_backward(c, model.layers[1 + i].data(), pass.inputs[i].data(), pass.saved[i].data(),
                        pass.dx.data(), pass.dnext.data(), pass.gradients[1 + i].data(), batch);
    pass.dx.swap(pass.dnext);
  }
  gpt::embed_backward(c, tokens.data(), pass.dx.data(), dwte, dwpe, batch);
  return loss;
}

} // namespace

int main(int argc, char** argv) {
  const Arguments args = parse(argc, argv);
  Model model(args.config);
  model.each(model.layers, [&](const zero::ParameterSpec& spec, float* at) {
    const npy::Array a = npy::load(args.init_npy + "/" + spec.name + ".npy");
    if (a.shape != spec.shape) npy::bad(spec.name, "shape differs from the model's");
    std::copy(a.data.begin(), a.data.end(), at);
  });
  std::ifstream file(args.data, std::ios::binary);
  const std::string data{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  if (data.size() < args.config.seq + 2) npy::bad(args.data, "too short for one sequence");
  std::vector<std::uint8_t> tokens, targets;
  first_batch(data, args.batch, args.config.seq, tokens, targets);

  Pass pass;
  const double loss = forward_backward(model, args.batch, tokens, targets, pass);
  std::printf("loss %.9f\n", loss);
  const gpt::Config& c = model.config;
  const double evaluated = gpt::head_loss(c, model.layers[c.layers + 1].data(),
                                          model.layers[0].data(), pass.inputs[c.layers].data(),
                                          targets.data(), args.batch, double(args.batch * c.seq));
  if (evaluated != loss) {
    std::fprintf(stderr, "head_loss gives %.9f, head_forward_backward %.9f\n", evaluated, loss);
    return 1;
  }
  const float loss_value = float(loss);
  npy::save(args.out + "/loss.npy", {1}, &loss_value);
  model.each(pass.gradients, [&](const zero::ParameterSpec& spec, float* at) {
    npy::save(args.out + "/" + spec.name + ".npy", spec.shape, at);
  });

  if (args.time > 0) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < args.time; ++i)
      forward_backward(model, args.batch, tokens, targets, pass);
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    std::printf("forward+backward %.3f ms\n", elapsed.count() / args.time);
  }
}
