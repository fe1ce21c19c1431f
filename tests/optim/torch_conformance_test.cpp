// zero's Adam, AdamW and SGD against torch.optim trajectories (fixtures/torch_reference.txt, made
// by make_fixtures.py with PyTorch 1.13): every step's parameters, the low-precision copy and the
// final optimizer state, through the fused step with fp32, half and bfloat16 gradients and a
// gradient multiplier. Adam without bias correction (DeepSpeed's bias_correction false) is
// torch's own Adam step written out with both corrections 1. The bound is a relative error under
// 1e-6; the formulas follow PyTorch's roundings, so the test also expects identical bits.

#include "fixture.hpp"

#include <zero/optim/adam.hpp>
#include <zero/optim/fused_step.hpp>
#include <zero/optim/sgd.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using optim_fixture::Case;
using optim_fixture::float_from_hex;
using optim_fixture::number;

std::vector<Case> read_cases() {
  return optim_fixture::read_cases(ZERO_OPTIM_FIXTURES,
                                   {{"grad", 1}, {"param", 1}, {"copy", 1}, {"state", 1}});
}

std::vector<float> floats(const std::vector<std::string>& hex) {
  std::vector<float> out;
  for (const auto& h : hex)
    out.push_back(float_from_hex(h));
  return out;
}

std::vector<std::uint16_t> bits16(const std::vector<std::string>& hex) {
  std::vector<std::uint16_t> out;
  for (const auto& h : hex)
    out.push_back(static_cast<std::uint16_t>(std::stoul(h, nullptr, 16)));
  return out;
}

// Equal bits, and within a 1e-6 relative tolerance (reported separately, so that a
// failure says how far off a value is).
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double relative =
        std::fabs(double(got[i]) - double(want[i])) / std::max(std::fabs(double(want[i])), 1e-30);
    const bool same_bits = std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
    if ((relative > 1e-6 || !same_bits) && reported++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs PyTorch " << want[i]
                    << " (relative error " << relative << (same_bits ? "" : ", bits differ") << ")";
  }
}

template <class Grad, class Copy, class Optimizer>
void run_case(const Case& c, Optimizer optimizer) {
  const auto n = static_cast<std::size_t>(number(c, "size"));
  const auto steps = static_cast<int>(number(c, "steps"));
  const float multiplier = float_from_hex(c.fields.at("grad_multiplier").at(0));
  std::vector<float> master = floats(c.fields.at("param0"));
  ASSERT_EQ(master.size(), n);
  std::vector<std::vector<float>> state(Optimizer::state_tensors, std::vector<float>(n, 0.0f));
  std::array<zero::View<float>, Optimizer::state_tensors> state_views;
  for (std::size_t k = 0; k < Optimizer::state_tensors; ++k)
    state_views[k] = zero::view(state[k]);
  std::vector<Copy> copy(n);
  std::vector<Grad> grad(n);

  for (int step = 1; step <= steps; ++step) {
    const auto& stored = c.indexed.at("grad " + std::to_string(step));
    ASSERT_EQ(stored.size(), n);
    if constexpr (std::is_same_v<Grad, float>)
      grad = floats(stored);
    else {
      const auto bits = bits16(stored);
      for (std::size_t i = 0; i < n; ++i)
        grad[i] = Grad::from_bits(bits[i]);
    }
    const auto update = optimizer.begin_step();
    if constexpr (std::is_same_v<Copy, float>) {
      zero::fused_step(update, zero::view(master), state_views, zero::view(grad), multiplier);
    } else {
      zero::fused_step(update, zero::view(master), state_views, zero::view(grad), multiplier,
                       zero::view(copy));
      const auto want = bits16(c.indexed.at("copy " + std::to_string(step)));
      for (std::size_t i = 0; i < n; ++i)
        EXPECT_EQ(copy[i].bits, want[i]) << c.name << " step " << step << " copy[" << i << "]";
    }
    expect_close(master, floats(c.indexed.at("param " + std::to_string(step))),
                 c.name + " step " + std::to_string(step) + " param");
  }
  EXPECT_EQ(optimizer.step_count(), steps);
  for (std::size_t k = 0; k < Optimizer::state_tensors; ++k) {
    const std::string name(Optimizer::state_names[k]);
    const auto it = c.indexed.find("state " + name);
    if (it == c.indexed.end()) continue; // PyTorch keeps no buffer without momentum
    expect_close(state[k], floats(it->second), c.name + " " + name);
  }
}

template <class Grad, class Copy>
void run_with_types(const Case& c) {
  const std::string optimizer = c.fields.at("optimizer").at(0);
  const bool maximize = number(c, "maximize") != 0;
  if (optimizer == "adam" || optimizer == "adamw") {
    const double lr = number(c, "lr"), eps = number(c, "eps"), wd = number(c, "weight_decay");
    const std::array<double, 2> betas = {number(c, "betas", 0), number(c, "betas", 1)};
    const bool bias_correction = number(c, "bias_correction") != 0;
    if (optimizer == "adam")
      run_case<Grad, Copy>(c, zero::Adam({.lr = lr,
                                          .betas = betas,
                                          .eps = eps,
                                          .weight_decay = wd,
                                          .maximize = maximize,
                                          .bias_correction = bias_correction}));
    else
      run_case<Grad, Copy>(c, zero::AdamW({.lr = lr,
                                           .betas = betas,
                                           .eps = eps,
                                           .weight_decay = wd,
                                           .maximize = maximize,
                                           .bias_correction = bias_correction}));
  } else {
    ASSERT_EQ(optimizer, "sgd");
    const zero::SGDOptions options{.lr = number(c, "lr"),
                                   .momentum = number(c, "momentum"),
                                   .dampening = number(c, "dampening"),
                                   .weight_decay = number(c, "weight_decay"),
                                   .nesterov = number(c, "nesterov") != 0,
                                   .maximize = maximize};
    run_case<Grad, Copy>(c, zero::SGD(options));
    if (options.momentum == 0.0) run_case<Grad, Copy>(c, zero::StatelessSGD(options));
  }
}

TEST(TorchConformance, EveryFixtureCase) {
  const auto cases = read_cases();
  ASSERT_GE(cases.size(), 18u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string type = c.fields.at("grad_type").at(0);
    if (type == "float")
      run_with_types<float, float>(c);
    else if (type == "half")
      run_with_types<zero::half, zero::half>(c);
    else if (type == "bfloat16")
      run_with_types<zero::bfloat16, zero::bfloat16>(c);
    else
      FAIL() << "unknown gradient type " << type;
  }
}

} // namespace
