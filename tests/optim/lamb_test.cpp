// zero::Lamb against a reference of DeepSpeed's FusedLamb (fixtures/lamb_reference.txt, made by
// make_lamb_fixtures.py with numpy): three parameter tensors over 10 steps, each tensor one
// parameter with its own trust ratio. The float32 reference performs zero's roundings (fma
// emulated through float64, which rounds twice in rare ties), so it must agree to an ulp (it
// agrees bit for bit today); the float64 reference is the semantics, which float32 arithmetic
// follows to about 1e-6 after 10 steps (relative to |w| + 0.01), asserted under 1e-5.
// Then the promises the engine relies on: a piece's sums do not depend on the thread count or on
// where the piece sits in memory, and splitting a parameter into pieces changes only the last
// bits of its sums.

#include "fixture.hpp"

#include <zero/optim/fused_step.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/optim/trust_ratio_step.hpp>

#include <gtest/gtest.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace lamb_test {

using optim_fixture::Case;
using optim_fixture::float_from_hex;
using optim_fixture::number;

std::vector<Case> read_cases() {
  return optim_fixture::read_cases(ZERO_LAMB_FIXTURES,
                                   {{"param32", 2}, {"param64", 2}, {"size", 1}});
}

// make_lamb_fixtures.py's initial_weights() and gradient(), evaluated in the same float64 order.
std::vector<float> initial_weights(std::size_t k, std::size_t n, double scale) {
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t h = (i * 2654435761ull + k * 97) % 4093;
    w[i] = static_cast<float>((static_cast<double>(h) - 2046.0) / 1000.0 * scale);
  }
  return w;
}

std::vector<float> gradient(int t, std::size_t k, std::size_t n, double multiplier) {
  constexpr double magnitudes[] = {1.0, 0.1, 0.01, 0.001};
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto step = static_cast<std::size_t>(t);
    const std::size_t h = (i * 7919 + step * 104729 + k * 31) % 2001;
    g[i] = static_cast<float>((static_cast<double>(h) - 1000.0) / 1000.0 *
                              magnitudes[(i + step) % 4] / multiplier);
    if ((i * 13 + step * 7 + k) % 10 == 0) g[i] = 0.0f;
  }
  return g;
}

zero::LambOptions options_of(const Case& c) {
  return {.lr = number(c, "lr"),
          .betas = {number(c, "betas", 0), number(c, "betas", 1)},
          .eps = number(c, "eps"),
          .weight_decay = number(c, "weight_decay"),
          .bias_correction = number(c, "bias_correction") != 0,
          .max_coeff = number(c, "max_coeff"),
          .min_coeff = number(c, "min_coeff")};
}

// Distance in units in the last place (same sign assumed; a sign change counts as far).
std::int64_t ulps(float a, float b) {
  const auto ia = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(a));
  const auto ib = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(b));
  return ia > ib ? ia - ib : ib - ia;
}

TEST(Lamb, MatchesTheFusedLambReference) {
  const auto cases = read_cases();
  ASSERT_EQ(cases.size(), 4u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    zero::Lamb lamb(options_of(c));
    const float multiplier = float_from_hex(c.fields.at("grad_multiplier").at(0));
    const auto tensors = static_cast<std::size_t>(number(c, "tensors"));
    const int steps = static_cast<int>(number(c, "steps"));
    std::vector<std::vector<float>> w, m, v;
    for (std::size_t k = 0; k < tensors; ++k) {
      const auto& size = c.indexed.at("size " + std::to_string(k));
      const auto n = static_cast<std::size_t>(std::stoul(size.at(0)));
      w.push_back(initial_weights(k, n, std::stod(size.at(1))));
      m.emplace_back(n, 0.0f);
      v.emplace_back(n, 0.0f);
    }
    std::int64_t worst_ulps = 0;
    double worst_relative = 0;
    for (int t = 1; t <= steps; ++t) {
      const auto update = lamb.begin_step();
      for (std::size_t k = 0; k < tensors; ++k) {
        const auto g = gradient(t, k, w[k].size(), static_cast<double>(multiplier));
        zero::fused_step(update, zero::view(w[k]), {zero::view(m[k]), zero::view(v[k])},
                         zero::View<const float>(g), multiplier);
        const std::string at = std::to_string(t) + " " + std::to_string(k);
        if (const auto it = c.indexed.find("param32 " + at); it != c.indexed.end()) {
          ASSERT_EQ(it->second.size(), w[k].size());
          for (std::size_t i = 0; i < w[k].size(); ++i) {
            const float want = float_from_hex(it->second[i]);
            worst_ulps = std::max(worst_ulps, ulps(w[k][i], want));
            EXPECT_LE(ulps(w[k][i], want), 1) << "step " << t << " tensor " << k << " [" << i
                                              << "]: " << w[k][i] << " vs " << want;
          }
        }
        if (const auto it = c.indexed.find("param64 " + at); it != c.indexed.end()) {
          for (std::size_t i = 0; i < w[k].size(); ++i) {
            const double want = std::stod(it->second[i]);
            // Relative, with a floor of about an fp32 ulp of the weights' unit scale.
            const double error = std::fabs(double(w[k][i]) - want) / (std::fabs(want) + 1e-2);
            worst_relative = std::max(worst_relative, error);
            EXPECT_LE(error, 1e-5) << "step " << t << " tensor " << k << " [" << i << "]";
          }
        }
      }
    }
    EXPECT_EQ(lamb.step_count(), steps);
    std::cout << c.name << ": within " << worst_ulps << " ulp of the float32 reference, "
              << worst_relative << " of the float64 one\n";
  }
}

// Data for the piece tests: awkward size, weights and gradients of mixed magnitude.
struct Piece {
  std::vector<float> w, m, v, g;
  explicit Piece(std::size_t n)
      : w(initial_weights(1, n, 0.7)), m(n), v(n), g(gradient(3, 2, n, 1.0)) {
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = 0.01f * g[i];
      v[i] = 1e-4f * g[i] * g[i] + 1e-8f;
    }
  }
  zero::ParameterSums prepare(const zero::LambUpdate& u, std::size_t begin, std::size_t count) {
    return zero::trust_ratio_prepare(
        u, zero::View<const float>(zero::view(w).subview(begin, count)),
        {zero::view(m).subview(begin, count), zero::view(v).subview(begin, count)},
        zero::View<const float>(zero::view(g).subview(begin, count)), 0.5f);
  }
};

TEST(Lamb, PieceSumsDoNotDependOnThreadsOrPlace) {
  const auto update = zero::Lamb({.weight_decay = 0.01}).update_for_step(3);
  const std::size_t n = 300'001; // many chunks, enough for a parallel region
  Piece a(n), shifted(n + 3);
  // The same piece at another alignment: shifted's elements 3.. are a's.
  std::copy(a.w.begin(), a.w.end(), shifted.w.begin() + 3);
  std::copy(a.m.begin(), a.m.end(), shifted.m.begin() + 3);
  std::copy(a.v.begin(), a.v.end(), shifted.v.begin() + 3);
  std::copy(a.g.begin(), a.g.end(), shifted.g.begin() + 3);
  Piece one_thread = a;
  const zero::ParameterSums sums = a.prepare(update, 0, n);
  ASSERT_GT(n, zero::detail::parallel_threshold);
  const zero::ParameterSums moved = shifted.prepare(update, 3, n);
#if defined(_OPENMP)
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  const zero::ParameterSums single_thread = one_thread.prepare(update, 0, n);
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
  EXPECT_EQ(std::bit_cast<std::uint64_t>(sums.param), std::bit_cast<std::uint64_t>(moved.param));
  EXPECT_EQ(std::bit_cast<std::uint64_t>(sums.direction),
            std::bit_cast<std::uint64_t>(moved.direction));
  EXPECT_EQ(std::bit_cast<std::uint64_t>(sums.param),
            std::bit_cast<std::uint64_t>(single_thread.param));
  EXPECT_EQ(std::bit_cast<std::uint64_t>(sums.direction),
            std::bit_cast<std::uint64_t>(single_thread.direction));
  EXPECT_EQ(a.m, one_thread.m);
  EXPECT_EQ(a.v, one_thread.v);
  EXPECT_GT(sums.param, 0.0);
  EXPECT_GT(sums.direction, 0.0);
}

TEST(Lamb, PiecesGiveTheWholeParametersStepToRounding) {
  const auto update = zero::Lamb({.lr = 0.01, .weight_decay = 0.01}).update_for_step(2);
  const std::size_t n = 10'007;
  Piece whole(n), split(n);
  const zero::ParameterSums all = whole.prepare(update, 0, n);
  zero::ParameterSums parts;
  for (std::size_t begin : {std::size_t{0}, std::size_t{3001}, std::size_t{6500}}) {
    const std::size_t end = begin == 6500 ? n : begin == 3001 ? 6500 : 3001;
    parts += split.prepare(update, begin, end - begin);
  }
  EXPECT_EQ(whole.m, split.m); // the element-wise parts are the same bits
  EXPECT_EQ(whole.v, split.v);
  EXPECT_NEAR(parts.param, all.param, 1e-12 * all.param);
  EXPECT_NEAR(parts.direction, all.direction, 1e-12 * all.direction);
  const float step = update.neg_step(all.param, all.direction);
  zero::trust_ratio_apply(
      update, step, zero::view(whole.w),
      {zero::View<const float>(zero::view(whole.m)), zero::View<const float>(zero::view(whole.v))});
  EXPECT_NE(whole.w, split.w); // it moved
}

TEST(Lamb, TrustRatioFollowsFusedLamb) {
  zero::LambUpdate u = zero::Lamb({.max_coeff = 4.0, .min_coeff = 0.5}).update_for_step(1);
  EXPECT_EQ(u.trust_ratio(0.0, 9.0), 1.0); // a zero parameter
  EXPECT_EQ(u.trust_ratio(9.0, 0.0), 1.0); // a zero direction
  EXPECT_EQ(u.trust_ratio(9.0, 4.0), 1.5);
  EXPECT_EQ(u.trust_ratio(100.0, 1.0), 4.0); // clamped to max_coeff
  EXPECT_EQ(u.trust_ratio(0.01, 1.0), 0.5);  // clamped to min_coeff
  EXPECT_TRUE(std::isnan(u.trust_ratio(std::nan(""), 1.0)));
  // DeepSpeed folds the bias corrections into the step size.
  EXPECT_DOUBLE_EQ(u.step_size, 1e-3 * std::sqrt(1.0 - 0.999) / (1.0 - 0.9));
  EXPECT_EQ(zero::Lamb({.bias_correction = false}).update_for_step(5).step_size, 1e-3);
  EXPECT_EQ(u.neg_step(9.0, 4.0), static_cast<float>(-u.step_size * 1.5));
}

TEST(Lamb, RefusesBadOptions) {
  EXPECT_THROW(zero::Lamb({.lr = -1.0}), zero::Error);
  EXPECT_THROW(zero::Lamb({.betas = {0.9, 1.0}}), zero::Error);
  EXPECT_THROW(zero::Lamb({.max_coeff = 0.001}), zero::Error); // below min_coeff
  EXPECT_THROW(zero::Lamb({.min_coeff = -1.0}), zero::Error);
  EXPECT_THROW(zero::Lamb({.weight_decay = -0.1}), zero::Error);
}

} // namespace lamb_test
