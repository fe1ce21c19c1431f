// AioOptions: DeepSpeed's defaults, values refused by name, and the mapping from a config's
// "aio" section.

#include "offload_test_support.hpp"

#include "zero/config/json.hpp"
#include "zero/nvme/aio_options.hpp"

#include <gtest/gtest.h>

namespace {

using namespace zero::testing;
using zero::AioOptions;
using zero::ErrorKind;

TEST(AioOptions, DefaultsAreDeepSpeeds) {
  const AioOptions aio;
  EXPECT_EQ(aio.block_size, 1u << 20);
  EXPECT_EQ(aio.queue_depth, 8);
  EXPECT_FALSE(aio.single_submit);
  EXPECT_TRUE(aio.overlap_events);
  EXPECT_EQ(aio.intra_op_parallelism, 1);
  EXPECT_NO_THROW(aio.validate());
  EXPECT_EQ(AioOptions::from_config(zero::Config{}).block_size, aio.block_size);
}

TEST(AioOptions, RefusedValuesNameTheKey) {
  auto refused = [](AioOptions aio, std::vector<std::string> pieces) {
    expect_error([&] { aio.validate(); }, ErrorKind::invalid_argument, pieces);
  };
  refused({.block_size = 1000}, {"aio.block_size: expected a multiple of 4096 bytes (the O_DIRECT "
                                 "alignment) between 4096 and 1073741824, got 1000"});
  refused({.block_size = 0}, {"aio.block_size", "got 0"});
  refused({.block_size = std::size_t{2} << 30}, {"aio.block_size", "got 2147483648"});
  refused({.queue_depth = 0}, {"aio.queue_depth: expected 1..4096, got 0"});
  refused({.queue_depth = 5000}, {"aio.queue_depth: expected 1..4096, got 5000"});
  refused({.intra_op_parallelism = 0}, {"aio.intra_op_parallelism: expected 1..64, got 0"});
  refused({.intra_op_parallelism = 65}, {"aio.intra_op_parallelism: expected 1..64, got 65"});
}

TEST(AioOptions, FromConfig) {
  const zero::Config config = zero::config::from_json_string(
      R"({"aio": {"block_size": 262144, "queue_depth": 32, "single_submit": true,
                  "overlap_events": false, "intra_op_parallelism": 2}})");
  const AioOptions aio = AioOptions::from_config(config);
  EXPECT_EQ(aio.block_size, 262144u);
  EXPECT_EQ(aio.queue_depth, 32);
  EXPECT_TRUE(aio.single_submit);
  EXPECT_FALSE(aio.overlap_events);
  EXPECT_EQ(aio.intra_op_parallelism, 2);
  // The reader takes any positive size, as DeepSpeed does; the tier needs O_DIRECT's alignment.
  const zero::Config odd = zero::config::from_json_string(R"({"aio": {"block_size": 1000}})");
  expect_error([&] { (void)AioOptions::from_config(odd); }, ErrorKind::invalid_argument,
               {"aio.block_size: expected a multiple of 4096", "got 1000"});
  const zero::Config deep = zero::config::from_json_string(R"({"aio": {"queue_depth": 1e10}})");
  expect_error([&] { (void)AioOptions::from_config(deep); }, ErrorKind::invalid_argument,
               {"aio.queue_depth: expected 1..4096, got 10000000000"});
}

} // namespace
