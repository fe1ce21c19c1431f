#pragma once
// Test helpers shared by the host and GPU optimizer tests: a problem (master weights, optimizer
// state, gradients, compute copy) filled with reproducible values, the fused host step over
// its views, and a reference that calls the optimizer's functor element by element on float
// lanes, as a CUDA thread does.

#include <zero/core/dtype.hpp>
#include <zero/core/view.hpp>
#include <zero/optim/fused_step.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace zero::testing {

template <class Grad, class Copy>
struct Problem {
  std::vector<float> master;
  std::vector<std::vector<float>> state;
  std::vector<Grad> grad;
  std::vector<Copy> copy; // Copy = float: no compute copy
  static constexpr bool has_copy = !std::is_same_v<Copy, float>;

  Problem(std::size_t n, std::size_t state_tensors, std::size_t seed)
      : master(n), state(state_tensors, std::vector<float>(n)), grad(n), copy(n) {
    std::mt19937 random(static_cast<unsigned>(seed));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-6, 2);
    for (std::size_t i = 0; i < n; ++i) {
      master[i] = normal(random);
      for (auto& s : state)
        s[i] = std::fabs(normal(random)) * 1e-3f; // v must be non-negative
      grad[i] = convert<Grad>(normal(random) * std::ldexp(1.0f, exponent(random)));
    }
  }
};

template <class Grad, class Copy, class U>
void fused_step_on(Problem<Grad, Copy>& p, const U& update, std::size_t offset, float multiplier) {
  const std::size_t n = p.master.size() - offset;
  std::array<View<float>, U::state_tensors> state;
  for (std::size_t k = 0; k < U::state_tensors; ++k)
    state[k] = View<float>(p.state[k].data() + offset, n);
  const View<const Grad> grad(p.grad.data() + offset, n);
  if constexpr (Problem<Grad, Copy>::has_copy)
    fused_step(update, View<float>(p.master.data() + offset, n), state, grad, multiplier,
               View<Copy>(p.copy.data() + offset, n));
  else
    fused_step(update, View<float>(p.master.data() + offset, n), state, grad, multiplier);
}

template <class Grad, class Copy, class U>
void reference_step_on(Problem<Grad, Copy>& p, const U& update, std::size_t offset,
                       float multiplier) {
  for (std::size_t i = offset; i < p.master.size(); ++i) {
    float param = p.master[i];
    const float grad = convert<float>(p.grad[i]) * multiplier;
    if constexpr (U::state_tensors == 2)
      update(param, grad, p.state[0][i], p.state[1][i]);
    else if constexpr (U::state_tensors == 1)
      update(param, grad, p.state[0][i]);
    else
      update(param, grad);
    p.master[i] = param;
    if constexpr (Problem<Grad, Copy>::has_copy) p.copy[i] = convert<Copy>(param);
  }
}

template <class T>
std::uint32_t bits_of(T value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  return bits;
}

template <class T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (bits_of(got[i]) != bits_of(want[i]) && reported++ < 3)
      ADD_FAILURE() << what << "[" << i << "]: bits " << std::hex << bits_of(got[i]) << " vs "
                    << bits_of(want[i]) << std::dec << " (" << convert<double>(got[i]) << " vs "
                    << convert<double>(want[i]) << ")";
}

template <class Grad, class Copy>
void expect_same_bits(const Problem<Grad, Copy>& got, const Problem<Grad, Copy>& want,
                      const std::string& what) {
  expect_same_bits(got.master, want.master, what + " master");
  for (std::size_t k = 0; k < got.state.size(); ++k)
    expect_same_bits(got.state[k], want.state[k], what + " state " + std::to_string(k));
  if constexpr (Problem<Grad, Copy>::has_copy)
    expect_same_bits(got.copy, want.copy, what + " copy");
}

} // namespace zero::testing
