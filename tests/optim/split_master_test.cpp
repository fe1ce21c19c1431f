// Split masters (optim/split_master.hpp): the split against its definition computed in double,
// the round trip, the vector lanes against the scalar form, tiny updates accumulating as with an
// fp32 master, and the split steps (fp32 and 8-bit moments) against the fp32-master steps.

#include "zero/optim/adam.hpp"
#include "zero/optim/fused_step.hpp"
#include "zero/optim/quantized_moments.hpp"
#include "zero/optim/quantized_step.hpp"
#include "zero/optim/sgd.hpp"
#include "zero/optim/split_master.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using zero::bfloat16;
using zero::half;

template <class T>
std::uint16_t bits(T x) {
  return std::bit_cast<std::uint16_t>(x);
}

// The residual's unit, from the definition: 2^(E - F - b) with E raised to the type's smallest
// normal exponent, in double.
template <class T, class R>
double unit_of(T w) {
  const int fraction = std::is_same_v<T, bfloat16> ? 7 : 10;
  const int min_exponent = std::is_same_v<T, bfloat16> ? -126 : -14;
  const float x = static_cast<float>(w);
  const int e = x == 0.0f ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, e - fraction - 8 * int(sizeof(R)));
}

// Masters over many magnitudes, with zeros, subnormals and exact ties of the compute type.
template <class T>
std::vector<float> masters(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(std::is_same_v<T, bfloat16> ? -130 : -20, 12);
  std::vector<float> values(n);
  for (float& v : values)
    v = std::ldexp(mantissa(rng), exponent(rng));
  const float tie = static_cast<float>(T(1.0f)) +
                    std::ldexp(1.0f, std::is_same_v<T, bfloat16> ? -8 : -11); // halfway above 1
  values.insert(values.end(), {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), tie, -tie,
                               1.0f, -1.0f, std::nextafter(2.0f, 0.0f), 3e-5f, -7e-8f});
  return values;
}

template <class T, class R>
void check_split_follows_its_definition(unsigned seed) {
  const double largest = double((1 << (8 * sizeof(R) - 1)) - 1);
  for (const float m : masters<T>(20000, seed)) {
    T w;
    R r;
    zero::split_master(m, w, r);
    ASSERT_EQ(bits(w), bits(T(m))) << m << ": the compute weight is the master rounded";
    const double u = unit_of<T, R>(w);
    const double units = (double(m) - double(static_cast<float>(w))) / u;
    const double expected = std::clamp(std::nearbyint(units), -largest, largest);
    ASSERT_EQ(double(r), expected) << m;
    const float back = zero::reconstruct_master(w, r);
    // Half a unit, and a whole one where a tie's residual was clamped.
    const double bound = (std::fabs(double(r)) == largest ? u : u / 2);
    ASSERT_LE(std::fabs(double(back) - double(m)), bound + std::fabs(double(m)) * 0x1p-24) << m;
    T w2;
    R r2;
    zero::split_master(back, w2, r2);
    ASSERT_EQ(bits(w2), bits(w)) << m << ": splitting the reconstructed master";
    ASSERT_EQ(r2, r) << m << ": splitting the reconstructed master";
  }
}

TEST(SplitMaster, FollowsItsDefinitionAndRoundTrips) {
  check_split_follows_its_definition<bfloat16, std::int8_t>(1);
  check_split_follows_its_definition<bfloat16, std::int16_t>(2);
  check_split_follows_its_definition<half, std::int8_t>(3);
  check_split_follows_its_definition<half, std::int16_t>(4);
}

TEST(SplitMaster, WithBfloat16AndSixteenBitsTheMasterIsFp32Exact) {
  // u is an fp32 ulp of w: every normal fp32 master comes back exactly, but for the half ulp
  // below a power of two, where rounding r loses the last bit.
  for (const float m : masters<bfloat16>(20000, 5)) {
    if (std::fabs(m) < 0x1p-100f) continue;
    bfloat16 w;
    std::int16_t r;
    zero::split_master(m, w, r);
    const float back = zero::reconstruct_master(w, r);
    const float wf = static_cast<float>(w);
    if (std::fabs(m) >= std::fabs(wf) || std::fabs(r) == 32767) continue;
    EXPECT_LE(std::fabs(back - m), std::ldexp(1.0f, std::ilogb(m) - 23)) << m;
  }
  for (const float m : {1.0f + 0x1p-20f, 3.14159265f, -0.1f, 1234.5678f, 1e-20f}) {
    bfloat16 w;
    std::int16_t r;
    zero::split_master(m, w, r);
    EXPECT_EQ(zero::reconstruct_master(w, r), m);
  }
}

template <class T, class R>
void check_lanes_match_the_scalar_form() {
  std::vector<float> m = masters<T>(4099, 7);
  m.push_back(std::numeric_limits<float>::infinity());
  m.push_back(std::numeric_limits<float>::quiet_NaN());
  m.push_back(1e30f); // beyond float16: an infinite weight
  std::vector<T> w(m.size());
  std::vector<R> r(m.size());
  zero::split_masters(zero::View<const float>(m), zero::SplitMasterView<T, R>{w, r});
  std::vector<float> back(m.size());
  zero::reconstruct_masters(zero::View<const T>(w), zero::View<const R>(r),
                            zero::View<float>(back));
  for (std::size_t i = 0; i < m.size(); ++i) {
    T ws;
    R rs;
    zero::split_master(m[i], ws, rs);
    ASSERT_EQ(bits(w[i]), bits(ws)) << i << ": " << m[i];
    ASSERT_EQ(r[i], rs) << i << ": " << m[i];
    const float expected = zero::reconstruct_master(ws, rs);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::bit_cast<std::uint32_t>(expected))
        << i << ": " << m[i];
  }
}

TEST(SplitMaster, VectorLanesMatchTheScalarForm) {
  check_lanes_match_the_scalar_form<bfloat16, std::int8_t>();
  check_lanes_match_the_scalar_form<bfloat16, std::int16_t>();
  check_lanes_match_the_scalar_form<half, std::int8_t>();
  check_lanes_match_the_scalar_form<half, std::int16_t>();
}

// SGD steps of -lr on weights of 1: a bfloat16 ulp below 1 is 2^-8, so a bfloat16 weight alone
// never moves by steps under 2^-9; the split masters follow the fp32 master within half a residual
// unit per step (2^-7 / 2^b / 2 at 1), and steps under half a unit vanish.
template <class R>
void check_tiny_updates_accumulate(float lr, int steps, double tolerance_per_step) {
  const std::size_t n = 4096;
  const zero::SGD sgd({.lr = lr});
  std::vector<float> fp32(n, 1.0f), grad(n, 1.0f);
  std::vector<bfloat16> w(n, bfloat16(1.0f)), alone(n, bfloat16(1.0f));
  std::vector<R> r(n, R{0});
  std::vector<float> momentum(n, 0.0f), momentum_split(n, 0.0f);
  for (int step = 1; step <= steps; ++step) {
    const auto u = sgd.update_for_step(step);
    zero::fused_step(u, zero::View<float>(fp32), {zero::View<float>(momentum)},
                     zero::View<const float>(grad));
    zero::split_fused_step(u, zero::SplitMasterView<bfloat16, R>{w, r},
                           {zero::View<float>(momentum_split)}, zero::View<const float>(grad));
    for (bfloat16& x : alone) // a step on the bfloat16 weight itself
      x = bfloat16(static_cast<float>(x) - lr);
  }
  EXPECT_EQ(static_cast<float>(alone[0]), 1.0f) << "the updates vanish without a master";
  EXPECT_NEAR(fp32[0], 1.0f - float(steps) * lr, 1e-4f);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_NEAR(zero::reconstruct_master(w[i], r[i]), fp32[i], tolerance_per_step * steps) << i;
  EXPECT_EQ(bits(w[0]), bits(bfloat16(fp32[0]))) << "the compute weight moved with the master";
}

TEST(SplitMaster, TinyUpdatesAccumulateAsWithAnFp32Master) {
  // 16 bits: u at 1 is 2^-23, an fp32 ulp: 1000 steps of 1e-5 as the fp32 master takes them.
  check_tiny_updates_accumulate<std::int16_t>(1e-5f, 1000, 0x1p-24);
  // 8 bits: u at 1 is 2^-15 (3.1e-5): 200 steps of 1e-4 (3.3 units) within half a unit each.
  check_tiny_updates_accumulate<std::int8_t>(1e-4f, 200, 0x1p-16);
}

TEST(SplitMaster, StepsUnderHalfAResidualUnitVanish) {
  // The 8-bit residual's limit: at 1, steps of 1e-5 (a third of 2^-15) round to no change.
  std::vector<bfloat16> w(16, bfloat16(1.0f));
  std::vector<std::int8_t> r(16, 0);
  std::vector<float> grad(16, 1.0f);
  const zero::StatelessSGD sgd({.lr = 1e-5});
  for (int step = 1; step <= 100; ++step)
    zero::split_fused_step(sgd.update_for_step(step),
                           zero::SplitMasterView<bfloat16, std::int8_t>{w, r}, {},
                           zero::View<const float>(grad));
  EXPECT_EQ(zero::reconstruct_master(w[0], r[0]), 1.0f);
}

std::vector<float> random_values(std::size_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v)
    x = d(rng);
  return v;
}

// The split step is the fp32 step on the reconstructed master, followed by a split: the same
// moments, the same compute weight, bit for bit.
TEST(SplitMaster, StepIsTheFp32StepOnTheReconstructedMaster) {
  const std::size_t n = 3 * 2048 + 77; // several runs, and a partial one
  const zero::AdamW adam({.lr = 1e-3, .weight_decay = 0.01});
  std::vector<bfloat16> w(n);
  std::vector<std::int16_t> r(n);
  zero::split_masters(zero::View<const float>(random_values(n, 0.05f, 1)),
                      zero::SplitMasterView<bfloat16, std::int16_t>{w, r});
  std::vector<float> m(n, 0.0f), v(n, 0.0f), m_split(n, 0.0f), v_split(n, 0.0f);
  for (int step = 1; step <= 5; ++step) {
    std::vector<float> master(n);
    zero::reconstruct_masters(zero::View<const bfloat16>(w), zero::View<const std::int16_t>(r),
                              zero::View<float>(master));
    const std::vector<float> grad = random_values(n, 1.0f, 10 + unsigned(step));
    const zero::AdamUpdate u = adam.update_for_step(step);
    std::vector<bfloat16> copy(n);
    zero::fused_step(u, zero::View<float>(master), {zero::View<float>(m), zero::View<float>(v)},
                     zero::View<const float>(grad), 0.5f, zero::View<bfloat16>(copy));
    zero::split_fused_step(u, zero::SplitMasterView<bfloat16, std::int16_t>{w, r},
                           {zero::View<float>(m_split), zero::View<float>(v_split)},
                           zero::View<const float>(grad), 0.5f);
    ASSERT_EQ(m, m_split) << "step " << step;
    ASSERT_EQ(v, v_split) << "step " << step;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits(w[i]), bits(copy[i])) << "step " << step << ", element " << i;
      bfloat16 expected_w;
      std::int16_t expected_r;
      zero::split_master(master[i], expected_w, expected_r);
      ASSERT_EQ(r[i], expected_r) << "step " << step << ", element " << i;
    }
  }
}

// The same with 8-bit moments, and a split of the elements on a block boundary (two ranks'
// shards) gives the same bytes as the whole.
TEST(SplitMaster, EightBitStepIsTheFp32MasterStepAndShardsAgree) {
  const std::size_t n = 3 * zero::quantized_moment_block + 9;
  const std::size_t blocks = zero::quantized_blocks(n);
  const zero::Adam adam({.lr = 1e-2});
  struct Run {
    std::vector<std::uint8_t> m_codes, v_codes;
    std::vector<float> m_scales, v_scales;
    Run(std::size_t n, std::size_t blocks)
        : m_codes(n, zero::DynamicMap::signed_map().nearest(0.0f)), v_codes(n, 0),
          m_scales(blocks, 0.0f), v_scales(blocks, 0.0f) {}
    zero::QuantizedMoment m(std::size_t begin, std::size_t size) {
      return {zero::View<std::uint8_t>(m_codes).subview(begin, size),
              zero::View<float>(m_scales).subview(begin / zero::quantized_moment_block,
                                                  zero::quantized_blocks(size))};
    }
    zero::QuantizedMoment v(std::size_t begin, std::size_t size) {
      return {zero::View<std::uint8_t>(v_codes).subview(begin, size),
              zero::View<float>(v_scales).subview(begin / zero::quantized_moment_block,
                                                  zero::quantized_blocks(size))};
    }
  };
  Run fp32_master(n, blocks), whole(n, blocks), shards(n, blocks);
  std::vector<half> w(n), w_shards(n);
  std::vector<std::int8_t> r(n), r_shards(n);
  zero::split_masters(zero::View<const float>(random_values(n, 0.05f, 2)),
                      zero::SplitMasterView<half, std::int8_t>{w, r});
  w_shards = w;
  r_shards = r;
  const std::size_t cut = zero::quantized_moment_block;
  for (int step = 1; step <= 5; ++step) {
    std::vector<float> master(n);
    zero::reconstruct_masters(zero::View<const half>(w), zero::View<const std::int8_t>(r),
                              zero::View<float>(master));
    const std::vector<float> grad = random_values(n, 1.0f, 20 + unsigned(step));
    const zero::AdamUpdate u = adam.update_for_step(step);
    std::vector<half> copy(n);
    zero::quantized_fused_step(u, zero::View<float>(master), fp32_master.m(0, n),
                               fp32_master.v(0, n), zero::View<const float>(grad), 1.0f,
                               zero::View<half>(copy));
    zero::quantized_fused_step(u, zero::SplitMasterView<half, std::int8_t>{w, r}, whole.m(0, n),
                               whole.v(0, n), zero::View<const float>(grad));
    for (const auto& [begin, size] : {std::pair{std::size_t{0}, cut}, std::pair{cut, n - cut}})
      zero::quantized_fused_step(u,
                                 zero::SplitMasterView<half, std::int8_t>{
                                     zero::View<half>(w_shards).subview(begin, size),
                                     zero::View<std::int8_t>(r_shards).subview(begin, size)},
                                 shards.m(begin, size), shards.v(begin, size),
                                 zero::View<const float>(grad).subview(begin, size));
    ASSERT_EQ(fp32_master.m_codes, whole.m_codes) << "step " << step;
    ASSERT_EQ(fp32_master.v_scales, whole.v_scales) << "step " << step;
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(bits(w[i]), bits(copy[i])) << "step " << step << ", element " << i;
  }
  EXPECT_EQ(whole.m_codes, shards.m_codes);
  EXPECT_EQ(whole.v_codes, shards.v_codes);
  EXPECT_EQ(whole.m_scales, shards.m_scales);
  EXPECT_EQ(whole.v_scales, shards.v_scales);
  EXPECT_EQ(r, r_shards);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(bits(w[i]), bits(w_shards[i]));
}

TEST(SplitMaster, SizesAreChecked) {
  std::vector<bfloat16> w(10);
  std::vector<std::int8_t> r(9);
  std::vector<float> values(10), moment(10);
  const zero::SGD sgd({.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(zero::split_fused_step(sgd.update_for_step(1),
                                      zero::SplitMasterView<bfloat16, std::int8_t>{w, r},
                                      {zero::View<float>(moment)}, zero::View<const float>(values)),
               zero::Error);
  EXPECT_THROW(zero::split_masters(zero::View<const float>(values),
                                   zero::SplitMasterView<bfloat16, std::int8_t>{w, r}),
               zero::Error);
}

} // namespace
