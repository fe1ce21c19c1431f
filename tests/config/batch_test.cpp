// DeepSpeed's batch-size rule against a world size: derivation of the missing sizes and errors
// that show the arithmetic.

#include "zero/config/batch.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace {

namespace config = zero::config;

config::Config batch(std::optional<std::int64_t> train, std::optional<std::int64_t> micro,
                     std::optional<std::int64_t> accumulation) {
  config::Config c;
  c.train_batch_size = train;
  c.train_micro_batch_size_per_gpu = micro;
  c.gradient_accumulation_steps = accumulation;
  return c;
}

void expect_sizes(const config::Config& c, std::int64_t world, std::int64_t train,
                  std::int64_t micro, std::int64_t accumulation) {
  const config::BatchSizes sizes = config::resolve_batch_sizes(c, world);
  EXPECT_EQ(sizes.train_batch_size, train);
  EXPECT_EQ(sizes.train_micro_batch_size_per_gpu, micro);
  EXPECT_EQ(sizes.gradient_accumulation_steps, accumulation);
}

std::string error_of(const config::Config& c, std::int64_t world) {
  try {
    config::resolve_batch_sizes(c, world);
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::invalid_argument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(BatchSizes, DerivesTheMissingOnesAsDeepSpeed) {
  expect_sizes(batch(64, 4, 2), 8, 64, 4, 2);
  expect_sizes(batch(64, 4, std::nullopt), 8, 64, 4, 2);
  expect_sizes(batch(64, std::nullopt, 2), 8, 64, 4, 2);
  expect_sizes(batch(std::nullopt, 4, 2), 8, 64, 4, 2);
  expect_sizes(batch(64, std::nullopt, std::nullopt), 8, 64, 8, 1);
  expect_sizes(batch(std::nullopt, 4, std::nullopt), 8, 32, 4, 1);
  // The seed configs: train_batch_size 16 with one accumulation step on 4 GPUs.
  expect_sizes(batch(16, std::nullopt, 1), 4, 16, 4, 1);
}

TEST(BatchSizes, ViolationsShowTheArithmetic) {
  EXPECT_NE(
      error_of(batch(16, 3, 1), 4)
          .find("batch sizes do not fit world size 4: train_batch_size 16 != "
                "train_micro_batch_size_per_gpu 3 * gradient_accumulation_steps 1 * world size 4 "
                "= 12"),
      std::string::npos);
  // A derived size that makes the rule fail says how it was derived.
  EXPECT_NE(error_of(batch(16, 3, std::nullopt), 2)
                .find("(gradient_accumulation_steps = train_batch_size // "
                      "train_micro_batch_size_per_gpu // world size = 16 // 3 // 2 = 2)"),
            std::string::npos);
  EXPECT_NE(
      error_of(batch(4, std::nullopt, std::nullopt), 8)
          .find("train_micro_batch_size_per_gpu must be positive, got 0 "
                "(train_micro_batch_size_per_gpu = train_batch_size // world size = 4 // 8 = 0"),
      std::string::npos);
  EXPECT_NE(error_of(batch(std::nullopt, std::nullopt, 2), 1)
                .find("give train_batch_size or train_micro_batch_size_per_gpu"),
            std::string::npos);
  EXPECT_NE(error_of(batch(16, 4, 1), 0).find("world size must be at least 1"), std::string::npos);
}

// A program that read the sizes from a file says which (real configs written for one GPU fail at
// two ranks, and the user must know where to look).
TEST(BatchSizes, ErrorsNameTheirSource) {
  try {
    config::resolve_batch_sizes(batch(32, 32, std::nullopt), 2, "ds_config.json");
    ADD_FAILURE() << "no error";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero: ds_config.json: batch sizes: "
                                         "gradient_accumulation_steps must be positive, got 0"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
