// The ZeRO paper's numbers from the estimator: Table 1 to the printed precision, Figure 1, the
// first row of Table 2, the communication volumes; offload placement; inputs from a config.

#include "zero/config/json.hpp"
#include "zero/estimate/communication.hpp"
#include "zero/estimate/from_config.hpp"
#include "zero/estimate/memory.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace est = zero::estimate;
constexpr double gb = 1e9; // the paper's GB

double device_gb(double parameters, std::int64_t data_parallel, int stage) {
  return est::model_state_memory({parameters, data_parallel, stage}).on(est::Tier::device) / gb;
}

// How Table 1 prints a value: whole GB, truncated, from 100 GB up (4187.5 is printed 4187);
// one decimal from 10 GB; two decimals below; rounding half up; trailing zeros dropped.
std::string paper_format(double value) {
  char text[32];
  if (value >= 100) {
    std::snprintf(text, sizeof text, "%.0f", std::floor(value));
  } else {
    const double scale = value >= 10 ? 10 : 100;
    std::snprintf(text, sizeof text, "%.2f", std::floor(value * scale + 0.5) / scale);
  }
  std::string s = text;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0')
      s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

struct Table1Row {
  std::int64_t data_parallel;
  const char* p_os;
  const char* p_os_g;
  const char* p_os_g_p;
};

void check_table1(double parameters, const std::vector<Table1Row>& rows) {
  for (const Table1Row& row : rows) {
    SCOPED_TRACE("Psi = " + std::to_string(parameters) +
                 ", N_d = " + std::to_string(row.data_parallel));
    EXPECT_EQ(paper_format(device_gb(parameters, row.data_parallel, 1)), row.p_os);
    EXPECT_EQ(paper_format(device_gb(parameters, row.data_parallel, 2)), row.p_os_g);
    EXPECT_EQ(paper_format(device_gb(parameters, row.data_parallel, 3)), row.p_os_g_p);
  }
}

// Rajbhandari et al., Table 1: per-device memory of model states in GB, K = 12.
TEST(ZeroPaper, Table1) {
  check_table1(7.5e9, {{1, "120", "120", "120"},
                       {4, "52.5", "41.3", "30"},
                       {16, "35.6", "21.6", "7.5"},
                       {64, "31.4", "16.6", "1.88"},
                       {256, "30.4", "15.4", "0.47"},
                       {1024, "30.1", "15.1", "0.12"}});
  check_table1(128e9, {{1, "2048", "2048", "2048"},
                       {4, "896", "704", "512"},
                       {16, "608", "368", "128"},
                       {64, "536", "284", "32"},
                       {256, "518", "263", "8"},
                       {1024, "513", "257", "2"}});
  check_table1(1e12, {{1, "16000", "16000", "16000"},
                      {4, "7000", "5500", "4000"},
                      {16, "4750", "2875", "1000"},
                      {64, "4187", "2218", "250"},
                      {256, "4046", "2054", "62.5"},
                      {1024, "4011", "2013", "15.6"}});
  // The baseline (stage 0) is the N_d = 1 column at every N_d.
  EXPECT_EQ(device_gb(7.5e9, 1024, 0), 120.0);
}

// Figure 1: Psi = 7.5B, N_d = 64 gives 120, 31.4, 16.6 and 1.9 GB.
TEST(ZeroPaper, Figure1) {
  const double expected[] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_NEAR(device_gb(7.5e9, 64, stage), expected[stage], 0.05) << "stage " << stage;
  const est::ModelStateMemory stage2 = est::model_state_memory({7.5e9, 64, 2});
  EXPECT_EQ(stage2.parameters.bytes, 15e9);
  EXPECT_EQ(stage2.gradients.bytes, 2 * 7.5e9 / 64);
  EXPECT_EQ(stage2.optimizer_states.bytes, 12 * 7.5e9 / 64);
  EXPECT_EQ(stage2.total(), stage2.on(est::Tier::device));
}

// Table 2, first row (64 V100s of 32 GB, no model parallelism): 2B, 7.6B, 14.4B and 128B.
TEST(ZeroPaper, Table2LargestModel) {
  const double expected[] = {2e9, 7.6e9, 14.4e9, 128e9};
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_NEAR(est::largest_model(32 * gb, {0, 64, stage}), expected[stage], 0.05e9)
        << "stage " << stage;
}

// Section 7: 2 Psi for stages 0-2, 3 Psi (1.5x) for stage 3.
TEST(ZeroPaper, CommunicationVolume) {
  for (int stage = 0; stage <= 2; ++stage)
    EXPECT_EQ(est::communication_elements(stage, 7.5e9), 15e9);
  EXPECT_EQ(est::communication_elements(3, 7.5e9), 22.5e9);
  EXPECT_THROW(est::communication_factor(4), zero::Error);
}

TEST(Offload, MovesStatesOffTheDevice) {
  const double psi = 1e9;
  // Stage 1, optimizer states on the CPU: parameters and full gradients stay.
  auto memory = est::model_state_memory({psi, 8, 1, {}, est::Tier::cpu});
  EXPECT_EQ(memory.on(est::Tier::device), 4 * psi);
  EXPECT_EQ(memory.on(est::Tier::cpu), 12 * psi / 8);
  // Stage 2: the gradient shard goes to the host with the optimizer (ZeRO-Offload).
  memory = est::model_state_memory({psi, 8, 2, {}, est::Tier::cpu});
  EXPECT_EQ(memory.on(est::Tier::device), 2 * psi);
  EXPECT_EQ(memory.on(est::Tier::cpu), 14 * psi / 8);
  // Stage 3, ZeRO-Infinity: optimizer states on NVMe, gradients in host memory, parameters on NVMe.
  memory = est::model_state_memory({psi, 8, 3, {}, est::Tier::nvme, est::Tier::nvme});
  EXPECT_EQ(memory.on(est::Tier::device), 0.0);
  EXPECT_EQ(memory.on(est::Tier::cpu), 2 * psi / 8);
  EXPECT_EQ(memory.on(est::Tier::nvme), 14 * psi / 8);
  EXPECT_TRUE(
      std::isinf(est::largest_model(32 * gb, {0, 8, 3, {}, est::Tier::cpu, est::Tier::cpu})));
  // Offload where the stage has nothing to offload is refused.
  EXPECT_THROW(est::model_state_memory({psi, 8, 0, {}, est::Tier::cpu}), zero::Error);
  EXPECT_THROW(est::model_state_memory({psi, 8, 2, {}, est::Tier::device, est::Tier::cpu}),
               zero::Error);
  // An offload ratio (ZeRO-Offload++): that share of the optimizer states, and from stage 2 of
  // their gradient shard, goes; the rest stays on the device. Stage 3 at a quarter: parameters
  // 2/8, gradients 0.75 * 2/8 and optimizer states 0.75 * 12/8 on the device.
  memory = est::model_state_memory({psi, 8, 3, {}, est::Tier::cpu, est::Tier::device, 0.25});
  EXPECT_EQ(memory.on(est::Tier::device), 12.5 * psi / 8);
  EXPECT_EQ(memory.on(est::Tier::cpu), 3.5 * psi / 8);
  EXPECT_EQ(memory.total(), 16 * psi / 8);
  EXPECT_EQ(memory.optimizer_states.all(), 12 * psi / 8);
  EXPECT_EQ(est::largest_model(12.5 * gb, {0, 8, 3, {}, est::Tier::cpu, est::Tier::device, 0.25}),
            8e9);
  // A ratio outside (0, 1], or below 1 without optimizer offload, is refused.
  EXPECT_THROW(est::model_state_memory({psi, 8, 3, {}, est::Tier::cpu, est::Tier::device, 0}),
               zero::Error);
  EXPECT_THROW(est::model_state_memory({psi, 8, 3, {}, est::Tier::device, est::Tier::device, 0.5}),
               zero::Error);
  EXPECT_THROW(est::model_state_memory({psi, 0, 2}), zero::Error);
}

zero::config::Config config_of(const char* text) {
  return zero::config::from_json_string(
      text, {.unbuilt = zero::config::UnbuiltFeatures::accept, .warn = {}});
}

TEST(FromConfig, BytesPerParameterFollowPrecisionAndOptimizer) {
  auto bytes = est::bytes_per_parameter(config_of(R"({"fp16": {"enabled": true}})"));
  EXPECT_EQ(bytes.parameters, 2);
  EXPECT_EQ(bytes.gradients, 2);
  EXPECT_EQ(bytes.optimizer_states, 12); // no optimizer section: Adam, as the paper
  bytes = est::bytes_per_parameter(config_of(R"({"optimizer": {"type": "SGD",
                                                 "params": {"momentum": 0.9}}})"));
  EXPECT_EQ(bytes.parameters, 4); // fp32: no master copy
  EXPECT_EQ(bytes.optimizer_states, 4);
  bytes = est::bytes_per_parameter(config_of(R"({"bf16": {"enabled": true},
                                                 "optimizer": {"type": "SGD"}})"));
  EXPECT_EQ(bytes.optimizer_states, 4); // the fp32 master copy only
  // 8-bit moments: the master copy, a byte per moment and an fp32 scale per 2048 values of each.
  bytes = est::bytes_per_parameter(config_of(R"({"bf16": {"enabled": true}, "optimizer":
                                    {"type": "AdamW", "params": {"moment_bits": 8}}})"));
  EXPECT_EQ(bytes.optimizer_states, 4 + 2 + 8.0 / 2048);
  // Split masters: the residual in place of the fp32 master; with 8-bit moments 1 + 2 + 8/2048.
  bytes = est::bytes_per_parameter(config_of(R"({"bf16": {"enabled": true}, "optimizer":
                                    {"type": "AdamW", "params": {"moment_bits": 8,
                                     "master_residual_bits": 8}}})"));
  EXPECT_EQ(bytes.optimizer_states, 1 + 2 + 8.0 / 2048);
  bytes = est::bytes_per_parameter(config_of(R"({"fp16": {"enabled": true}, "optimizer":
                                    {"type": "Adam", "params": {"master_residual_bits": 16}}})"));
  EXPECT_EQ(bytes.optimizer_states, 2 + 8);
  const est::ModelStateQuery query = est::query_from_config(
      config_of(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                    "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}},
                    "bf16": {"enabled": true}})"),
      7.5e9, 64);
  EXPECT_EQ(query.stage, 3);
  EXPECT_EQ(query.parameter_offload, est::Tier::cpu);
  EXPECT_EQ(query.optimizer_offload, est::Tier::nvme);
  EXPECT_EQ(est::model_state_memory(query).on(est::Tier::nvme), 12 * 7.5e9 / 64);
  EXPECT_EQ(query.optimizer_offload_ratio, 1);
  // offload_optimizer.ratio (ZeRO-Offload++): that share of the optimizer states offloaded.
  const est::ModelStateQuery split =
      est::query_from_config(config_of(R"({"zero_optimization": {"stage": 3,
                    "offload_optimizer": {"device": "cpu", "ratio": 0.25}},
                    "bf16": {"enabled": true}})"),
                             7.5e9, 64);
  EXPECT_EQ(split.optimizer_offload_ratio, 0.25);
  EXPECT_EQ(est::model_state_memory(split).on(est::Tier::cpu), 0.25 * 14 * 7.5e9 / 64);
}

// The largest model over a device, host memory and NVMe together: the tier that fills first bounds
// it, and names itself.
TEST(Memory, LargestModelOverEveryTierNamesTheTierThatFillsFirst) {
  using est::Tier;
  // ZeRO-Offload on one V100 of 32 GB with 1.5 TB of host memory (a DGX-2's): stage 2 with the
  // optimizer states and gradients in host memory keeps 2 bytes a parameter on the device, 14 on
  // the host. The device bounds it, at 16B (the paper trains 13B: activations and buffers take
  // the rest, which model states leave out).
  const est::ModelStateQuery offload{0, 1, 2, {}, Tier::cpu};
  est::LargestModel largest = est::largest_model({.device = 32e9, .cpu = 1.5e12}, offload);
  EXPECT_EQ(largest.parameters, 16e9);
  EXPECT_EQ(largest.bound_by, Tier::device);
  // With 128 GB of host memory the host fills first: 128e9 / 14.
  largest = est::largest_model({.device = 32e9, .cpu = 128e9}, offload);
  EXPECT_EQ(largest.parameters, 128e9 / 14);
  EXPECT_EQ(largest.bound_by, Tier::cpu);
  // ZeRO-Infinity's placement on one H200 (139 GB), 128 GB of host memory and 64 GB of disk:
  // nothing on the device, the gradients' 2 bytes on the host, 14 on NVMe, which bounds it.
  const est::ModelStateQuery infinity{0, 1, 3, {}, Tier::nvme, Tier::nvme};
  largest = est::largest_model({.device = 139e9, .cpu = 128e9, .nvme = 64e9}, infinity);
  EXPECT_EQ(largest.parameters, 64e9 / 14);
  EXPECT_EQ(largest.bound_by, Tier::nvme);
  // Over 8 ranks each rank holds an eighth: eight times the model.
  largest = est::largest_model({.device = 139e9, .cpu = 128e9, .nvme = 64e9},
                               {0, 8, 3, {}, Tier::nvme, Tier::nvme});
  EXPECT_EQ(largest.parameters, 8 * 64e9 / 14);
  // A tier without a size bounds nothing: with host memory unsized, states offloaded there fit
  // any model.
  largest = est::largest_model({.device = 32e9}, {0, 1, 3, {}, Tier::cpu, Tier::cpu});
  EXPECT_TRUE(std::isinf(largest.parameters));
  EXPECT_FALSE(largest.bound_by);
  EXPECT_THROW(est::largest_model({.device = 32e9, .cpu = -1}, offload), zero::Error);
}

TEST(Library, TheDocumentedCalls) {
  // example-begin estimate-library
  namespace est = zero::estimate;
  const est::ModelStateMemory memory =
      est::model_state_memory({.parameters = 7.5e9, .data_parallel = 64, .stage = 2});
  const double on_device = memory.on(est::Tier::device); // 16.640625e9 bytes
  const double largest = est::largest_model(32e9, {.data_parallel = 64, .stage = 3}); // 128e9
  const double volume = est::communication_elements(3, 7.5e9); // 22.5e9 elements
  // example-end estimate-library
  EXPECT_EQ(on_device, 16.640625e9);
  EXPECT_EQ(largest, 128e9);
  EXPECT_EQ(volume, 22.5e9);
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(Library, DocsShowTheCompiledExample) {
  const std::string source = read_text(__FILE__);
  const std::string begin = "// example-begin estimate-library\n";
  const std::size_t from = source.find(begin) + begin.size();
  const std::size_t to = source.find("  // example-end estimate-library");
  ASSERT_LT(from, to);
  const std::string snippet = source.substr(from, to - from);
  EXPECT_NE(read_text(ZERO_DOCS_DIR "/estimator.md").find(snippet), std::string::npos)
      << "docs/estimator.md must show, verbatim, the example of " << __FILE__ << ":\n"
      << snippet;
}

} // namespace
