#pragma once
// Command line of zero-estimate: flags, their values (7.5e9, 7.5B, 32GB, 80GiB), and usage
// errors that say which flag and why.

#include "zero/estimate/memory.hpp"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zero_estimate {

using zero::estimate::Tier;

constexpr const char* usage = R"(usage: zero-estimate --params N [options]
       zero-estimate --device-memory SIZE [options]

Memory that model states (parameters, gradients, optimizer states) take per data-parallel rank
under each ZeRO stage, the communication volume per step, and the largest model that fits a
device: the model of the ZeRO paper (Rajbhandari et al., SC'20), 1 GB = 1e9 bytes.

  --params N              parameter count Psi: 7.5e9, 7500000000, 7.5B, 350M, 1T
  --dp N                  data-parallel ranks N_d (default 1, or the world size that the
                          config's three batch sizes imply)
  --stage S               only ZeRO stage S (0-3); default: all stages, or the config's stage
  --device-memory SIZE    also print the largest model per stage that fits SIZE per device:
                          32GB, 80GiB, 1.5TB (units B KB MB GB TB KiB MiB GiB TiB)
  --config FILE           a DeepSpeed ds_config.json: stage, offload and bytes per parameter
                          (fp16/bf16 and optimizer) come from it; flags override it
  --optimizer-bytes K     optimizer-state bytes per parameter (default 12: mixed-precision Adam)
  --param-bytes B         bytes per parameter of the parameters (default 2)
  --grad-bytes B          bytes per parameter of the gradients (default 2)
  --offload-optimizer D   where optimizer states live: none, cpu or nvme (stages 1-3)
  --offload-param D       where the parameter shard lives: none, cpu or nvme (stage 3)
  --json                  print JSON instead of a table
  --help                  print this help

example: zero-estimate --params 7.5e9 --dp 64    (the paper's Figure 1: 120, 31.4, 16.6, 1.9 GB)
)";

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Arguments {
  std::optional<double> parameters;
  std::optional<std::int64_t> data_parallel;
  std::optional<int> stage;
  std::optional<double> device_memory;
  std::optional<std::string> config_path;
  std::optional<double> optimizer_bytes;
  std::optional<double> param_bytes;
  std::optional<double> grad_bytes;
  std::optional<Tier> offload_optimizer;
  std::optional<Tier> offload_param;
  bool json = false;
  bool help = false;
};

// A number followed by an optional suffix; returns the number and the rest, lower-cased.
inline std::pair<double, std::string> split_number(std::string_view flag, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(number))
    throw UsageError(std::string(flag) + ": expected a number, got '" + text + "'");
  std::string suffix;
  for (const char* c = end; *c; ++c)
    if (*c != ' ') suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  return {number, suffix};
}

// A number times its unit's scale, which may overflow to infinity (1e300T).
inline double scaled(std::string_view flag, const std::string& text, double value) {
  if (!std::isfinite(value)) throw UsageError(std::string(flag) + ": '" + text + "' is too large");
  return value;
}

inline double parse_count(std::string_view flag, const std::string& text) {
  const auto [number, suffix] = split_number(flag, text);
  static const std::map<std::string, double> scale{
      {"", 1.0}, {"k", 1e3}, {"m", 1e6}, {"b", 1e9}, {"t", 1e12}};
  const auto it = scale.find(suffix);
  if (it == scale.end())
    throw UsageError(std::string(flag) + ": unknown suffix in '" + text +
                     "' (use a plain number or K, M, B, T)");
  if (number <= 0) throw UsageError(std::string(flag) + ": must be positive, got '" + text + "'");
  return scaled(flag, text, number * it->second);
}

inline double parse_bytes(std::string_view flag, const std::string& text) {
  const auto [number, unit] = split_number(flag, text);
  static const std::map<std::string, double> scale{
      {"b", 1.0},         {"kb", 1e3},           {"mb", 1e6},
      {"gb", 1e9},        {"tb", 1e12},          {"kib", 1024.0},
      {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  if (unit.empty())
    throw UsageError(std::string(flag) + ": add a unit to '" + text + "', e.g. 32GB or 80GiB");
  const auto it = scale.find(unit);
  if (it == scale.end())
    throw UsageError(std::string(flag) + ": unknown unit in '" + text +
                     "' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  if (number <= 0) throw UsageError(std::string(flag) + ": must be positive, got '" + text + "'");
  return scaled(flag, text, number * it->second);
}

inline std::int64_t parse_whole(std::string_view flag, const std::string& text, std::int64_t min,
                                std::int64_t max) {
  const auto [number, suffix] = split_number(flag, text);
  if (!suffix.empty() || std::floor(number) != number || number < static_cast<double>(min) ||
      number > static_cast<double>(max))
    throw UsageError(std::string(flag) + ": expected a whole number in " + std::to_string(min) +
                     ".." + std::to_string(max) + ", got '" + text + "'");
  return static_cast<std::int64_t>(number);
}

inline double parse_non_negative(std::string_view flag, const std::string& text) {
  const auto [number, suffix] = split_number(flag, text);
  if (!suffix.empty() || number < 0)
    throw UsageError(std::string(flag) + ": expected a number >= 0, got '" + text + "'");
  return number;
}

inline Tier parse_tier(std::string_view flag, const std::string& text) {
  if (text == "none") return Tier::device;
  if (text == "cpu") return Tier::cpu;
  if (text == "nvme") return Tier::nvme;
  throw UsageError(std::string(flag) + ": expected none, cpu or nvme, got '" + text + "'");
}

inline Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  std::map<std::string, bool> seen;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::optional<std::string> value;
    if (flag.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + flag + "'");
    if (const std::size_t equals = flag.find('='); equals != std::string::npos) {
      value = flag.substr(equals + 1);
      flag.resize(equals);
    }
    if (seen[flag]) throw UsageError("option '" + flag + "' given twice");
    seen[flag] = true;
    if (flag == "--json" || flag == "--help") {
      if (value) throw UsageError("option '" + flag + "' takes no value");
      (flag == "--json" ? args.json : args.help) = true;
      continue;
    }
    auto next = [&]() -> std::string {
      if (value) return *value;
      if (i + 1 >= argc) throw UsageError("option '" + flag + "' needs a value");
      return argv[++i];
    };
    if (flag == "--params")
      args.parameters = parse_count(flag, next());
    else if (flag == "--dp")
      args.data_parallel = parse_whole(flag, next(), 1, std::int64_t{1} << 40);
    else if (flag == "--stage")
      args.stage = static_cast<int>(parse_whole(flag, next(), 0, 3));
    else if (flag == "--device-memory")
      args.device_memory = parse_bytes(flag, next());
    else if (flag == "--config")
      args.config_path = next();
    else if (flag == "--optimizer-bytes")
      args.optimizer_bytes = parse_non_negative(flag, next());
    else if (flag == "--param-bytes")
      args.param_bytes = parse_non_negative(flag, next());
    else if (flag == "--grad-bytes")
      args.grad_bytes = parse_non_negative(flag, next());
    else if (flag == "--offload-optimizer")
      args.offload_optimizer = parse_tier(flag, next());
    else if (flag == "--offload-param")
      args.offload_param = parse_tier(flag, next());
    else
      throw UsageError("unknown option '" + flag + "'");
  }
  if (!args.help && !args.parameters && !args.device_memory)
    throw UsageError(
        "give --params (the model size) or --device-memory (to find the largest model)");
  return args;
}

} // namespace zero_estimate
