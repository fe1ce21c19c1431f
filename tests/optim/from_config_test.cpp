// zero::with_optimizer: a DeepSpeed config's "optimizer" section becomes the optimizer DeepSpeed
// would run ("Adam" is AdamW unless adam_w_mode is false), with every hyper-parameter carried over,
// and a type the program did not list is refused by name.

#include <zero/config/json.hpp>
#include <zero/optim/from_config.hpp>

#include <gtest/gtest.h>

#include <string>
#include <type_traits>

namespace {

using zero::config::OptimizerConfig;
using zero::config::OptimizerType;

// The name of the optimizer type with_optimizer chose.
template <class O>
std::string name_of(const O&) {
  if constexpr (std::is_same_v<O, zero::Adam>) return "Adam";
  if constexpr (std::is_same_v<O, zero::AdamW>) return "AdamW";
  if constexpr (std::is_same_v<O, zero::SGD>) return "SGD";
  if constexpr (std::is_same_v<O, zero::Lamb>) return "Lamb";
  return "?";
}

std::string chosen(const OptimizerConfig& o) {
  return zero::with_optimizer(o, [](auto optimizer) { return name_of(optimizer); });
}

TEST(WithOptimizer, FollowsDeepSpeedsMeaningOfAdam) {
  OptimizerConfig o;
  o.type = OptimizerType::adam; // adam_w_mode true by default
  EXPECT_EQ(chosen(o), "AdamW");
  o.adam_w_mode = false;
  EXPECT_EQ(chosen(o), "Adam");
  o.type = OptimizerType::adamw;
  EXPECT_EQ(chosen(o), "AdamW");
  o.type = OptimizerType::sgd;
  EXPECT_EQ(chosen(o), "SGD");
  o.type = OptimizerType::lamb;
  EXPECT_EQ(chosen(o), "Lamb");
  o.adam_w_mode = true; // not a Lamb parameter: still Lamb
  EXPECT_EQ(chosen(o), "Lamb");
}

TEST(WithOptimizer, CarriesLambsParametersAndBiasCorrection) {
  const auto config = zero::config::from_json_string(R"({"train_batch_size": 8,
      "optimizer": {"type": "LAMB", "params": {"lr": 0.01, "betas": [0.8, 0.95], "eps": 1e-6,
                    "weight_decay": 0.1, "bias_correction": false, "max_coeff": 5.0,
                    "min_coeff": 0.1}}})");
  ASSERT_TRUE(config.optimizer);
  zero::with_optimizer(*config.optimizer, [](auto optimizer) {
    if constexpr (std::is_same_v<decltype(optimizer), zero::Lamb>) {
      const zero::LambOptions& o = optimizer.options();
      EXPECT_EQ(o.lr, 0.01);
      EXPECT_EQ(o.betas[0], 0.8);
      EXPECT_EQ(o.betas[1], 0.95);
      EXPECT_EQ(o.eps, 1e-6);
      EXPECT_EQ(o.weight_decay, 0.1);
      EXPECT_FALSE(o.bias_correction);
      EXPECT_EQ(o.max_coeff, 5.0);
      EXPECT_EQ(o.min_coeff, 0.1);
    } else {
      ADD_FAILURE() << "expected zero::Lamb";
    }
    return 0;
  });
  const auto adam = zero::config::from_json_string(
      R"({"optimizer": {"type": "AdamW", "params": {"bias_correction": false}}})");
  zero::with_optimizer(*adam.optimizer, [](auto optimizer) {
    if constexpr (std::is_same_v<decltype(optimizer), zero::AdamW>)
      EXPECT_FALSE(optimizer.options().bias_correction);
    else
      ADD_FAILURE() << "expected zero::AdamW";
    return 0;
  });
}

TEST(WithOptimizer, CarriesEveryHyperParameter) {
  const auto config = zero::config::from_json_string(R"({"train_batch_size": 8,
      "optimizer": {"type": "Adam", "params": {"lr": 0.002, "betas": [0.8, 0.95], "eps": 1e-6,
                                               "weight_decay": 0.1, "adam_w_mode": false}}})");
  ASSERT_TRUE(config.optimizer);
  zero::with_optimizer(*config.optimizer, [](auto optimizer) {
    if constexpr (std::is_same_v<decltype(optimizer), zero::Adam>) {
      EXPECT_EQ(optimizer.options().lr, 0.002);
      EXPECT_EQ(optimizer.options().betas[0], 0.8);
      EXPECT_EQ(optimizer.options().betas[1], 0.95);
      EXPECT_EQ(optimizer.options().eps, 1e-6);
      EXPECT_EQ(optimizer.options().weight_decay, 0.1);
    } else {
      ADD_FAILURE() << "expected zero::Adam";
    }
    return 0;
  });
  OptimizerConfig sgd;
  sgd.type = OptimizerType::sgd;
  sgd.lr = 0.5;
  sgd.momentum = 0.9;
  sgd.dampening = 0.1;
  sgd.weight_decay = 0.01;
  sgd.nesterov = false;
  zero::with_optimizer(sgd, [](auto optimizer) {
    if constexpr (std::is_same_v<decltype(optimizer), zero::SGD>) {
      EXPECT_EQ(optimizer.options().lr, 0.5);
      EXPECT_EQ(optimizer.options().momentum, 0.9);
      EXPECT_EQ(optimizer.options().dampening, 0.1);
      EXPECT_EQ(optimizer.options().weight_decay, 0.01);
    } else {
      ADD_FAILURE() << "expected zero::SGD";
    }
    return 0;
  });
}

TEST(WithOptimizer, ATypeTheProgramDidNotListIsRefusedByName) {
  OptimizerConfig o;
  o.type = OptimizerType::sgd;
  try {
    zero::with_optimizer<zero::Adam, zero::AdamW>(o, [](auto) { return 0; });
    ADD_FAILURE() << "SGD was accepted";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), zero::ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("optimizer.type SGD: this program runs Adam "
                                         "(adam_w_mode false), AdamW (or Adam with adam_w_mode)"),
              std::string::npos)
        << e.what();
  }
  o.type = OptimizerType::lamb;
  try {
    zero::with_optimizer<zero::Adam, zero::AdamW>(o, [](auto) { return 0; });
    ADD_FAILURE() << "Lamb was accepted";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.type Lamb: this program runs Adam"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
