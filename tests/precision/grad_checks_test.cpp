// The gradient passes on the host: the overflow check (read-only, and fused with the unscale)
// over every half and bfloat16 bit pattern and NaN/Inf at every position of vectors around the
// lane counts and the threading threshold, the fp64 sum of squares; and the master-weight casts.

#include <zero/precision/cast.hpp>
#include <zero/precision/grad_norm.hpp>
#include <zero/precision/overflow.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace grad_checks_test {

using zero::bfloat16;
using zero::half;

template <class G>
G from_float(float x) {
  return zero::convert<G>(x);
}

template <class G>
std::vector<G> finite_values(std::size_t n, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<G> v(n);
  for (auto& x : v)
    x = from_float<G>(normal(random));
  return v;
}

template <class G>
std::vector<G> non_finite_values() {
  if constexpr (std::is_same_v<G, float>)
    return {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
            -std::numeric_limits<float>::quiet_NaN()};
  else if constexpr (std::is_same_v<G, half>)
    return {G::from_bits(0x7c00), G::from_bits(0xfc00), G::from_bits(0x7e00), G::from_bits(0x7c01),
            G::from_bits(0xffff)};
  else
    return {G::from_bits(0x7f80), G::from_bits(0xff80), G::from_bits(0x7fc0), G::from_bits(0x7f81),
            G::from_bits(0xffff)};
}

template <class T>
class GradChecks : public ::testing::Test {};
using GradTypes = ::testing::Types<float, half, bfloat16>;
TYPED_TEST_SUITE(GradChecks, GradTypes);

constexpr std::size_t sizes[] = {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100};

TYPED_TEST(GradChecks, FindsNonFiniteValuesAtEveryPosition) {
  using G = TypeParam;
  for (std::size_t n : sizes) {
    auto grads = finite_values<G>(n, static_cast<unsigned>(n));
    EXPECT_FALSE(zero::has_overflow(zero::view(grads))) << n;
    for (std::size_t position = 0; position < n; ++position)
      for (G bad : non_finite_values<G>()) {
        auto copy = grads;
        copy[position] = bad;
        ASSERT_TRUE(zero::has_overflow(zero::view(copy))) << "n=" << n << " at " << position;
        ASSERT_TRUE(zero::unscale_and_check(zero::view(copy), 0.5f))
            << "n=" << n << " at " << position;
        ASSERT_FALSE(std::isfinite(zero::sum_of_squares(zero::view(copy))));
      }
  }
}

TYPED_TEST(GradChecks, ThreadedRangesFindTheirOverflows) {
  using G = TypeParam;
  const std::size_t n = 3 * zero::detail::parallel_threshold + 5;
  auto grads = finite_values<G>(n, 3);
  EXPECT_FALSE(zero::has_overflow(zero::view(grads)));
  for (std::size_t position : {std::size_t{0}, n / 2 - 1, n / 2, n / 2 + 1, n - 1}) {
    auto copy = grads;
    copy[position] = non_finite_values<G>()[0];
    EXPECT_TRUE(zero::has_overflow(zero::view(copy))) << position;
    EXPECT_TRUE(zero::unscale_and_check(zero::view(copy), 1.0f)) << position;
  }
}

TYPED_TEST(GradChecks, LargestFiniteAndSubnormalsAreNoOverflow) {
  using G = TypeParam;
  std::vector<G> extremes;
  if constexpr (std::is_same_v<G, float>)
    extremes = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                std::numeric_limits<float>::denorm_min(), -0.0f};
  else if constexpr (std::is_same_v<G, half>)
    extremes = {G::from_bits(0x7bff), G::from_bits(0xfbff), G::from_bits(0x0001),
                G::from_bits(0x8000)};
  else
    extremes = {G::from_bits(0x7f7f), G::from_bits(0xff7f), G::from_bits(0x0001),
                G::from_bits(0x8000)};
  EXPECT_FALSE(zero::has_overflow(zero::view(extremes)));
  EXPECT_TRUE(std::isfinite(zero::sum_of_squares(zero::view(extremes))));
  // Unscaling the largest value by 2 overflows (fp16: 65504 * 2), by 1/2 does not.
  auto doubled = extremes;
  EXPECT_TRUE(zero::unscale_and_check(zero::view(doubled), 2.0f));
  auto halved = extremes;
  EXPECT_FALSE(zero::unscale_and_check(zero::view(halved), 0.5f));
}

TEST(GradChecks, EveryHalfAndBfloat16BitPattern) {
  std::vector<half> halves(65536);
  std::vector<bfloat16> bfloats(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    halves[b] = half::from_bits(static_cast<std::uint16_t>(b));
    bfloats[b] = bfloat16::from_bits(static_cast<std::uint16_t>(b));
  }
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const bool half_bad = (b & 0x7c00u) == 0x7c00u;
    const bool bfloat_bad = (b & 0x7f80u) == 0x7f80u;
    ASSERT_EQ(zero::has_overflow(zero::View<const half>(&halves[b], 1)), half_bad) << std::hex << b;
    ASSERT_EQ(zero::has_overflow(zero::View<const bfloat16>(&bfloats[b], 1)), bfloat_bad)
        << std::hex << b;
  }
  // The vector paths over the whole table (every lane sees many patterns).
  EXPECT_TRUE(zero::has_overflow(zero::view(halves)));
  std::vector<half> finite_halves;
  for (half h : halves)
    if ((h.bits & 0x7c00u) != 0x7c00u) finite_halves.push_back(h);
  EXPECT_FALSE(zero::has_overflow(zero::view(finite_halves)));
  // Unscaling every finite half by a power of two is exact where the result is a half.
  auto unscaled = finite_halves;
  EXPECT_FALSE(zero::unscale_and_check(zero::view(unscaled), 0.25f));
  for (std::size_t i = 0; i < unscaled.size(); ++i)
    ASSERT_EQ(unscaled[i].bits, half(static_cast<float>(finite_halves[i]) * 0.25f).bits) << i;
}

TYPED_TEST(GradChecks, UnscaleMultipliesEveryElement) {
  using G = TypeParam;
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{16}, std::size_t{45},
                        zero::detail::parallel_threshold + 17}) {
    const auto original = finite_values<G>(n, 9);
    auto grads = original;
    EXPECT_FALSE(zero::unscale_and_check(zero::view(grads), 1.0f / 1024));
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(zero::convert<float>(grads[i]),
                zero::convert<float>(from_float<G>(zero::convert<float>(original[i]) / 1024)))
          << i;
  }
}

TYPED_TEST(GradChecks, SumOfSquaresInDoublePrecision) {
  using G = TypeParam;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{33},
                        std::size_t{1000}, 2 * zero::detail::parallel_threshold + 3}) {
    const auto grads = finite_values<G>(n, 21);
    long double expected = 0;
    for (G g : grads)
      expected += static_cast<long double>(zero::convert<float>(g)) * zero::convert<float>(g);
    const double got = zero::sum_of_squares(zero::view(grads));
    EXPECT_NEAR(got, static_cast<double>(expected), 1e-13 * static_cast<double>(expected) + 1e-300)
        << n;
    EXPECT_EQ(zero::sum_of_squares(zero::view(grads)), got) << "the same bits every time";
  }
  // fp32 squares that would overflow in fp32 do not in fp64.
  std::vector<float> big(40, 1e30f);
  EXPECT_DOUBLE_EQ(zero::sum_of_squares(zero::view(big)), 40 * double(1e30f) * double(1e30f));
}

TEST(GradNorm, NormAndClipCoefficient) {
  const auto norm = zero::grad_norm_from_sum_of_squares(25.0 * 1024 * 1024, 1.0 / 1024);
  EXPECT_TRUE(norm.finite);
  EXPECT_DOUBLE_EQ(norm.norm, 5.0);
  EXPECT_DOUBLE_EQ(zero::clip_coefficient(norm, 1.0), 1.0 / (5.0 + 1e-6));
  EXPECT_EQ(zero::clip_coefficient(norm, 10.0), 1.0);

  const auto infinite =
      zero::grad_norm_from_sum_of_squares(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(infinite.finite);
  EXPECT_TRUE(std::isinf(infinite.norm)); // reported as it is
  EXPECT_TRUE(std::isnan(zero::clip_coefficient(infinite, 1.0)));
  const auto nan = zero::grad_norm_from_sum_of_squares(std::nan(""));
  EXPECT_FALSE(nan.finite);
  EXPECT_TRUE(std::isnan(nan.norm));
  EXPECT_THROW((void)zero::clip_coefficient(norm, 0.0), zero::Error);
}

template <class To>
void expect_cast_matches(const std::vector<float>& master) {
  std::vector<To> copy(master.size());
  zero::cast_copy(zero::view(master), zero::view(copy));
  std::vector<float> back(master.size());
  zero::cast_copy(zero::view(copy), zero::view(back));
  for (std::size_t i = 0; i < master.size(); ++i) {
    ASSERT_EQ(copy[i].bits, To(master[i]).bits) << i;
    ASSERT_EQ(zero::detail::bit_cast<std::uint32_t>(back[i]),
              zero::detail::bit_cast<std::uint32_t>(static_cast<float>(copy[i])))
        << i;
  }
}

TEST(MasterWeightCast, ThreadedCastsMatchTheScalarConversions) {
  for (std::size_t n :
       {std::size_t{0}, std::size_t{19}, 2 * zero::detail::parallel_threshold + 7}) {
    std::vector<float> master(n);
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 10.0f);
    for (auto& x : master)
      x = normal(random);
    if (n > 3) {
      master[0] = 1e-7f;    // a half subnormal
      master[1] = 70000.0f; // past the largest half: infinity
      master[2] = std::numeric_limits<float>::quiet_NaN();
    }
    expect_cast_matches<half>(master);
    expect_cast_matches<bfloat16>(master);
  }
  std::vector<float> a(3);
  std::vector<half> b(4);
  EXPECT_THROW(zero::cast_copy(zero::view(a), zero::view(b)), zero::Error);
}

} // namespace grad_checks_test
