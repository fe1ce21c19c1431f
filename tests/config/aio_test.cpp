// The NVMe tier's keys: the top-level "aio" section (DeepSpeed's defaults, values, bad values
// named by JSON path, `thread_count` accepted with a note, `use_gds` refused by name) and
// zero_optimization.sub_group_size.

#include "config_test_support.hpp"

#include <gtest/gtest.h>

namespace {

using zero::ErrorKind;
using zero::testing::expect_error;
using zero::testing::expect_invalid;
using zero::testing::parse;
namespace config = zero::config;

TEST(ConfigAio, DefaultsAreDeepSpeeds) {
  const config::Config c = parse("{}").config;
  EXPECT_EQ(c.aio.block_size, 1'048'576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.intra_op_parallelism, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
  EXPECT_EQ(c.zero_optimization.sub_group_size, 1'000'000'000);
  EXPECT_EQ(parse(R"({"aio": {}})").config, c);
}

TEST(ConfigAio, ReadsEveryKey) {
  const auto parsed = parse(R"({"aio": {"block_size": 262144, "queue_depth": 32,
      "intra_op_parallelism": 2, "single_submit": true, "overlap_events": false,
      "use_gds": false}, "zero_optimization": {"stage": 3, "sub_group_size": 1e8}})");
  EXPECT_TRUE(parsed.warnings.empty());
  const config::AioConfig& aio = parsed.config.aio;
  EXPECT_EQ(aio.block_size, 262'144);
  EXPECT_EQ(aio.queue_depth, 32);
  EXPECT_EQ(aio.intra_op_parallelism, 2);
  EXPECT_TRUE(aio.single_submit);
  EXPECT_FALSE(aio.overlap_events);
  EXPECT_EQ(parsed.config.zero_optimization.sub_group_size, 100'000'000);
}

TEST(ConfigAio, BadValuesAreNamedByPath) {
  expect_invalid(R"({"aio": {"block_size": 0}})",
                 {"ds_config.json: aio.block_size: expected a positive integer, got 0"});
  expect_invalid(R"({"aio": {"queue_depth": -8}})",
                 {"aio.queue_depth: expected a positive integer, got -8"});
  expect_invalid(R"({"aio": {"intra_op_parallelism": 1.5}})",
                 {"aio.intra_op_parallelism", "got 1.5, which is not a whole number"});
  expect_invalid(R"({"aio": {"single_submit": "no"}})",
                 {"aio.single_submit: expected true or false, got \"no\""});
  expect_invalid(R"({"aio": {"overlap_events": 1}})",
                 {"aio.overlap_events: expected true or false, got 1"});
  expect_invalid(R"({"aio": {"thread_count": 0}})",
                 {"aio.thread_count: expected a positive integer, got 0"});
  expect_invalid(R"({"aio": [1]})", {"aio: expected an object, got [1]"});
  expect_invalid(R"({"zero_optimization": {"sub_group_size": -1}})",
                 {"zero_optimization.sub_group_size: expected a positive integer, got -1"});
}

TEST(ConfigAio, ThreadCountIsAcceptedWithANote) {
  const auto parsed = parse(R"({"aio": {"thread_count": 4, "block_size": 1048576}})");
  ASSERT_EQ(parsed.warnings.size(), 1u);
  EXPECT_EQ(parsed.warnings[0],
            "ds_config.json: aio.thread_count is ignored, as DeepSpeed's code ignores it (only its "
            "docs still name it); intra_op_parallelism sets the I/O threads");
}

TEST(ConfigAio, GpuDirectStorageIsRefusedByName) {
  expect_error(R"({"aio": {"use_gds": true}})", ErrorKind::unsupported,
               {"ds_config.json: not supported yet:",
                "aio.use_gds = true: GPUDirect Storage needs a GPU engine, which is not built"});
  const auto parsed = parse(R"({"aio": {"use_gds": true}})", config::UnbuiltFeatures::accept);
  ASSERT_EQ(parsed.warnings.size(), 1u);
  EXPECT_NE(parsed.warnings[0].find("aio.use_gds = true"), std::string::npos);
}

TEST(ConfigAio, UnknownKeysInTheSectionAreListed) {
  const auto parsed = parse(R"({"aio": {"block_size": 4096, "ring_size": 64}})");
  ASSERT_EQ(parsed.warnings.size(), 1u);
  EXPECT_EQ(parsed.warnings[0], "ds_config.json: ignoring keys zero does not read: aio.ring_size");
}

} // namespace
