#pragma once
// Command line of zero-estimate: flags, read by CLI11 (which writes --help), their values (7.5e9,
// 7.5B, 32GB, 80GiB), and usage errors that say which flag and why.

#include "zero/estimate/activation_memory.hpp"
#include "zero/estimate/memory.hpp"
#include "zero/estimate/tensor_parallel.hpp"

#include <command_line/parse.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zero_estimate {

using zero::estimate::Tier;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Arguments {
  std::optional<double> parameters;
  std::optional<std::int64_t> data_parallel;
  std::optional<int> stage;
  std::optional<double> device_memory;
  std::optional<double> host_memory; // each rank's, for offloaded states
  std::optional<double> nvme_memory;
  std::optional<std::string> config_path;
  std::optional<double> optimizer_bytes;
  std::optional<double> param_bytes;
  std::optional<double> grad_bytes;
  std::optional<Tier> offload_optimizer;
  std::optional<double> offload_ratio;
  std::optional<Tier> offload_param;
  std::int64_t tensor_parallel = 1;
  std::optional<zero::estimate::TransformerShape> shape;
  std::int64_t recomputed_layers = 0;
  // Activation checkpointing's K (number_checkpoints), capped at the layers; absent: every layer.
  std::optional<std::int64_t> checkpoints;
  std::int64_t checkpoints_asked = 0; // as given, before the cap
  std::optional<double> activation_bytes;
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

inline double parse_share(std::string_view flag, const std::string& text) {
  const auto [number, suffix] = split_number(flag, text);
  if (!suffix.empty() || !(number > 0 && number <= 1))
    throw UsageError(std::string(flag) + ": expected a share in (0, 1], got '" + text + "'");
  return number;
}

inline Tier parse_tier(std::string_view flag, const std::string& text) {
  if (text == "none") return Tier::device;
  if (text == "cpu") return Tier::cpu;
  if (text == "nvme") return Tier::nvme;
  throw UsageError(std::string(flag) + ": expected none, cpu or nvme, got '" + text + "'");
}

namespace detail {

// What CLI11 reads, as text: parse_arguments converts and checks each value after it, with the
// functions above, so that their messages name the flag.
struct Text {
  std::string parameters, data_parallel, stage, device_memory, host_memory, nvme_memory,
      config_path, optimizer_bytes, param_bytes, grad_bytes, offload_optimizer, offload_ratio,
      offload_param, tensor_parallel, layers, hidden, heads, sequence, vocabulary, micro_batch,
      recomputed_layers, checkpoints, activation_bytes;
};

// The command line, bound to `text` and `args` (the flags). parse_arguments reads it; help_text
// prints it.
inline void describe(CLI::App& app, Text& text, Arguments& args) {
  app.description(
      "Memory that model states (parameters, gradients, optimizer states) take per data-parallel\n"
      "rank under each ZeRO stage, the communication volume per step, and the largest model that\n"
      "fits a device: the model of the ZeRO paper (Rajbhandari et al., SC'20), 1 GB = 1e9 bytes;\n"
      "with --tp, over Megatron-style tensor-parallel groups (Shoeybi et al., 2019).\n"
      "Give --params N, a transformer's shape (--layers ...), or --device-memory SIZE.");
  app.footer("example: zero-estimate --params 7.5e9 --dp 64    (the paper's Figure 1: 120, 31.4, "
             "16.6, 1.9 GB)");
  // --help only (no -h), as always. Unknown arguments are collected and reported by
  // parse_arguments in the tool's own words; a flag given twice is refused there (the last would
  // count in CLI11).
  app.set_help_flag("--help", "print this help")->disable_flag_override();
  app.get_formatter()->column_width(26);
  app.allow_extras();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--params", text.parameters,
                 "parameter count Psi: 7.5e9, 7500000000, 7.5B, 350M, 1T")
      ->type_name("N");
  app.add_option("--dp", text.data_parallel,
                 "data-parallel ranks N_d (default 1, or the data-parallel size that\n"
                 "the config's three batch sizes imply); the world is N_d x T ranks")
      ->type_name("N");
  app.add_option("--tp", text.tensor_parallel,
                 "tensor-parallel ranks T per group (default 1): model states are\n"
                 "those of Psi_rank = Psi_split / T + Psi_replicated over N_d; with\n"
                 "--params alone every parameter is taken as split")
      ->type_name("T");
  app.add_option("--stage", text.stage,
                 "only ZeRO stage S (0-3); default: all stages, or the config's stage")
      ->type_name("S");
  app.add_option("--device-memory", text.device_memory,
                 "also print the largest model per stage that fits SIZE per device:\n"
                 "32GB, 80GiB, 1.5TB (units B KB MB GB TB KiB MiB GiB TiB)")
      ->type_name("SIZE");
  app.add_option("--host-memory", text.host_memory,
                 "host memory per rank for offloaded states: with --device-memory,\n"
                 "the largest model bounded by both, and per offload placement")
      ->type_name("SIZE");
  app.add_option("--nvme-memory", text.nvme_memory,
                 "NVMe space per rank for offloaded states, as --host-memory")
      ->type_name("SIZE");
  app.add_option("--config", text.config_path,
                 "a DeepSpeed ds_config.json: stage, offload and bytes per parameter\n"
                 "(fp16/bf16 and optimizer) come from it; flags override it")
      ->type_name("FILE");
  app.add_option("--optimizer-bytes", text.optimizer_bytes,
                 "optimizer-state bytes per parameter (default 12: mixed-precision Adam)")
      ->type_name("K");
  app.add_option("--param-bytes", text.param_bytes,
                 "bytes per parameter of the parameters (default 2)")
      ->type_name("B");
  app.add_option("--grad-bytes", text.grad_bytes,
                 "bytes per parameter of the gradients (default 2)")
      ->type_name("B");
  app.add_option("--offload-optimizer", text.offload_optimizer,
                 "where optimizer states live: none, cpu or nvme (stages 1-3)")
      ->type_name("D");
  app.add_option("--offload-ratio", text.offload_ratio,
                 "the share R of the optimizer states (and, from stage 2, of their\n"
                 "gradients) that --offload-optimizer moves; the rest stays on the\n"
                 "device (default 1; DeepSpeed's offload_optimizer.ratio)")
      ->type_name("R");
  app.add_option("--offload-param", text.offload_param,
                 "where the parameter shard lives: none, cpu or nvme (stage 3)")
      ->type_name("D");
  // The transformer's shape, all or none; it replaces --params.
  app.add_option("--layers", text.layers,
                 "a GPT-2 transformer instead of --params: L layers of\n"
                 "12 H^2 + 13 H parameters, plus V H + S H + 2 H; with\n"
                 "--hidden H --heads A --seq S --vocab V --micro-batch B")
      ->type_name("L");
  app.add_option("--hidden", text.hidden, "hidden width H")->type_name("H");
  app.add_option("--heads", text.heads, "attention heads A")->type_name("A");
  app.add_option("--seq", text.sequence, "sequence length S")->type_name("S");
  app.add_option("--vocab", text.vocabulary, "vocabulary V (padded to a multiple of T)")
      ->type_name("V");
  app.add_option("--micro-batch", text.micro_batch,
                 "sequences per rank and step B; with T > 1 the tensor-parallel\n"
                 "traffic (Megatron-LM, section 3) is 4 L + 2 R + 2 all-reduces of\n"
                 "B S H activations of P bytes and 3 of B S (the cross-entropy),\n"
                 "a ring putting 2 (T-1)/T of their bytes on each rank's wire")
      ->type_name("B");
  app.add_option("--recomputed-layers", text.recomputed_layers,
                 "R layers recomputed in the backward pass (default 0, or what\n"
                 "--checkpoints recomputes: L - floor(L / K))")
      ->type_name("R");
  app.add_option("--checkpoints", text.checkpoints,
                 "activation checkpointing's K (number_checkpoints), 1..L, a\n"
                 "larger K capped at L; default L (every layer checkpointed).\n"
                 "With the shape, activation memory per rank is printed without\n"
                 "checkpointing, with it, with ZeRO-R's partitioned activations\n"
                 "(Pa) and with Pa's slices on another tier")
      ->type_name("K");
  app.add_option("--activation-bytes", text.activation_bytes,
                 "bytes per activation element (default: the parameters', 2 for\n"
                 "fp16/bf16; 4 for fp32, as train_gpt on the host keeps them)")
      ->type_name("N");
  // disable_flag_override: `--json=false` is refused, not read as "no JSON".
  app.add_flag("--json", args.json, "print JSON instead of a table")->disable_flag_override();
}

// The transformer's shape: every flag of it or none, checked against --tp.
inline void read_shape(const CLI::App& app, const Text& text, Arguments& args) {
  const std::vector<std::pair<const char*, const std::string*>> flags{
      {"--layers", &text.layers},    {"--hidden", &text.hidden},
      {"--heads", &text.heads},      {"--seq", &text.sequence},
      {"--vocab", &text.vocabulary}, {"--micro-batch", &text.micro_batch}};
  std::vector<std::int64_t> values;
  std::string missing;
  for (const auto& [flag, value] : flags) {
    if (app.count(flag) > 0)
      values.push_back(parse_whole(flag, *value, 1, std::int64_t{1} << 40));
    else
      missing += std::string(missing.empty() ? "" : ", ") + flag;
  }
  const bool recomputes = app.count("--recomputed-layers") > 0;
  const bool checkpoints = app.count("--checkpoints") > 0;
  const bool activation_bytes = app.count("--activation-bytes") > 0;
  if (values.empty() && !recomputes && !checkpoints && !activation_bytes) return;
  if (values.empty())
    throw UsageError(std::string(recomputes    ? "--recomputed-layers"
                                 : checkpoints ? "--checkpoints"
                                               : "--activation-bytes") +
                     " needs the transformer's shape");
  if (!missing.empty()) throw UsageError("the transformer's shape needs " + missing + " as well");
  if (args.parameters) throw UsageError("give --params or the transformer's shape, not both");
  const zero::estimate::TransformerShape shape{values[0], values[1], values[2],
                                               values[3], values[4], values[5]};
  const auto whole = [](std::int64_t n) { return std::to_string(n); };
  const std::int64_t t = args.tensor_parallel;
  if (shape.heads % t != 0)
    throw UsageError("--heads " + whole(shape.heads) + " does not split over --tp " + whole(t));
  if (shape.hidden % t != 0)
    throw UsageError("--hidden " + whole(shape.hidden) + " does not split over --tp " + whole(t));
  if (shape.hidden % shape.heads != 0)
    throw UsageError("--hidden " + whole(shape.hidden) + " does not split into --heads " +
                     whole(shape.heads));
  if (recomputes)
    args.recomputed_layers =
        parse_whole("--recomputed-layers", text.recomputed_layers, 0, shape.layers);
  if (checkpoints) {
    // 0 is checkpointing off, which the table always shows; more than L is capped at L, as
    // zero::CheckpointPlan caps it (the output says so).
    const auto [number, suffix] = split_number("--checkpoints", text.checkpoints);
    if (number == 0 && suffix.empty())
      throw UsageError("--checkpoints 0 is no checkpointing, which the activation table always "
                       "shows; give 1.." +
                       whole(shape.layers));
    args.checkpoints_asked =
        parse_whole("--checkpoints", text.checkpoints, 1, std::int64_t{1} << 40);
    args.checkpoints = std::min(args.checkpoints_asked, shape.layers);
    const std::int64_t recomputed =
        zero::estimate::recomputed_layers(shape.layers, *args.checkpoints);
    if (recomputes && args.recomputed_layers != recomputed)
      throw UsageError("--recomputed-layers " + whole(args.recomputed_layers) +
                       " disagrees with --checkpoints " + text.checkpoints + ", which recomputes " +
                       whole(recomputed) + " of the " + whole(shape.layers) +
                       " layers (L - floor(L / K))");
    args.recomputed_layers = recomputed;
  }
  if (activation_bytes) {
    const auto [number, suffix] = split_number("--activation-bytes", text.activation_bytes);
    if (!suffix.empty() || number <= 0)
      throw UsageError("--activation-bytes: expected a number > 0, got '" + text.activation_bytes +
                       "'");
    args.activation_bytes = number;
  }
  args.shape = shape;
}

} // namespace detail

inline Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  detail::Text text;
  CLI::App app{"", "zero-estimate"};
  detail::describe(app, text, args);
  // "option '--dp' needs a value", "option '--json' takes no value", as this tool always said.
  args.help = command_line::parse<UsageError>(app, argc, argv,
                                              {.before_flag = "option '", .after_flag = "'"});
  // Every argument is a flag: what CLI11 did not place is an unknown one, or a stray word.
  for (const std::string& extra : app.remaining()) {
    if (!extra.starts_with("--")) throw UsageError("unexpected argument '" + extra + "'");
    throw UsageError("unknown option '" + extra.substr(0, extra.find('=')) + "'");
  }
  for (const CLI::Option* option : app.get_options())
    if (option->count() > 1) throw UsageError("option '" + option->get_name() + "' given twice");
  // Each value given, converted; the flag names itself in the message when it is bad.
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--params")) args.parameters = parse_count("--params", text.parameters);
  if (given("--dp"))
    args.data_parallel = parse_whole("--dp", text.data_parallel, 1, std::int64_t{1} << 40);
  if (given("--stage")) args.stage = static_cast<int>(parse_whole("--stage", text.stage, 0, 3));
  if (given("--device-memory"))
    args.device_memory = parse_bytes("--device-memory", text.device_memory);
  if (given("--host-memory")) args.host_memory = parse_bytes("--host-memory", text.host_memory);
  if (given("--nvme-memory")) args.nvme_memory = parse_bytes("--nvme-memory", text.nvme_memory);
  if ((args.host_memory || args.nvme_memory) && !args.device_memory)
    throw UsageError("--host-memory and --nvme-memory size the tiers below a device: give "
                     "--device-memory too");
  if (given("--config")) args.config_path = text.config_path;
  if (given("--optimizer-bytes"))
    args.optimizer_bytes = parse_non_negative("--optimizer-bytes", text.optimizer_bytes);
  if (given("--param-bytes"))
    args.param_bytes = parse_non_negative("--param-bytes", text.param_bytes);
  if (given("--grad-bytes")) args.grad_bytes = parse_non_negative("--grad-bytes", text.grad_bytes);
  if (given("--offload-optimizer"))
    args.offload_optimizer = parse_tier("--offload-optimizer", text.offload_optimizer);
  if (given("--offload-ratio"))
    args.offload_ratio = parse_share("--offload-ratio", text.offload_ratio);
  if (given("--offload-param"))
    args.offload_param = parse_tier("--offload-param", text.offload_param);
  if (given("--tp"))
    args.tensor_parallel = parse_whole("--tp", text.tensor_parallel, 1, std::int64_t{1} << 20);
  detail::read_shape(app, text, args);
  if (!args.help && !args.parameters && !args.shape && !args.device_memory)
    throw UsageError("give --params (the model size), the transformer's shape (--layers ...) or "
                     "--device-memory (to find the largest model)");
  return args;
}

// --help, as CLI11 writes it.
inline std::string help_text() {
  Arguments args;
  detail::Text text;
  CLI::App app{"", "zero-estimate"};
  detail::describe(app, text, args);
  return app.help();
}

} // namespace zero_estimate
