// What each ZERO_TEST_SWEEP keeps of a sweep (sweep.hpp), and that a bad value is refused by name.

#include "sweep.hpp"

#include <zero/comm/reduce_op.hpp>
#include <zero/core/dtype.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

using zero::DType;
using zero::ReduceOp;
using zero::testing::Sweep;
using zero::testing::swept;

constexpr DType dtypes[] = {DType::float32, DType::float64, DType::int32,   DType::int64,
                            DType::uint8,   DType::float16, DType::bfloat16};
constexpr ReduceOp ops[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

TEST(Sweep, AllKeepsEverything) {
  EXPECT_EQ(swept(dtypes, Sweep::all), std::vector<DType>(std::begin(dtypes), std::end(dtypes)));
  EXPECT_EQ(swept(ops, Sweep::all), std::vector<ReduceOp>(std::begin(ops), std::end(ops)));
}

TEST(Sweep, WidthsKeepsTheFirstTypeOfEachWidthAndEveryReduction) {
  EXPECT_EQ(swept(dtypes, Sweep::widths),
            (std::vector<DType>{DType::float32, DType::float64, DType::uint8, DType::float16}));
  EXPECT_EQ(swept(ops, Sweep::widths), std::vector<ReduceOp>(std::begin(ops), std::end(ops)));
}

TEST(Sweep, EndsKeepsTheFirstAndTheLast) {
  EXPECT_EQ(swept(dtypes, Sweep::ends), (std::vector<DType>{DType::float32, DType::bfloat16}));
  EXPECT_EQ(swept(ops, Sweep::ends), (std::vector<ReduceOp>{ReduceOp::sum, ReduceOp::min}));
}

TEST(Sweep, TheEnvironmentsValueIsParsedAndABadOneNamed) {
  EXPECT_EQ(zero::testing::parse_sweep(nullptr), Sweep::all);
  EXPECT_EQ(zero::testing::parse_sweep("widths"), Sweep::widths);
  EXPECT_EQ(zero::testing::parse_sweep("ends"), Sweep::ends);
  try {
    zero::testing::parse_sweep("first");
    FAIL() << "ZERO_TEST_SWEEP=first was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("ZERO_TEST_SWEEP=first"), std::string::npos) << e.what();
  }
}

} // namespace
