#pragma once
// What a checkpoint holds besides the model states, and the checks that a checkpoint fits the run
// loading it: the same parameters (names and sizes, in order), the same optimizer, a loss scaler
// that can take the saved state.

#include "zero/checkpoint/checkpoint_options.hpp"
#include "zero/checkpoint/files.hpp"
#include "zero/checkpoint/manifest.hpp"
#include "zero/core/error.hpp"
#include "zero/optim/adam.hpp"
#include "zero/optim/optimizer.hpp"
#include "zero/optim/sgd.hpp"
#include "zero/schedule/lr_scheduler.hpp"
#include "zero/shard/parameter.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace zero {

namespace checkpoint {

inline nlohmann::json hyperparameters(const AdamOptions& o) {
  return {{"betas", o.betas},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"maximize", o.maximize}};
}
inline nlohmann::json hyperparameters(const AdamWOptions& o) {
  return {{"betas", o.betas},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"maximize", o.maximize}};
}
inline nlohmann::json hyperparameters(const SGDOptions& o) {
  return {{"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov},
          {"maximize", o.maximize}};
}

template <Optimizer Opt>
std::string optimizer_name() {
  if constexpr (requires { Opt::name; })
    return std::string(Opt::name);
  else
    return "unnamed optimizer with " + std::to_string(Opt::state_tensors) + " state tensor(s)";
}

template <Optimizer Opt>
void describe_optimizer(Manifest& m, const Opt& optimizer) {
  m.optimizer = optimizer_name<Opt>();
  for (const auto name : Opt::state_names)
    m.optimizer_states.emplace_back(name);
  m.optimizer_step = optimizer.step_count();
  m.lr = optimizer.lr();
  if constexpr (requires { hyperparameters(optimizer.options()); })
    m.hyperparameters = hyperparameters(optimizer.options());
}

template <Optimizer Opt>
void check_optimizer(const Manifest& m, const std::filesystem::path& where) {
  const std::string mine = optimizer_name<Opt>();
  std::vector<std::string> states;
  for (const auto name : Opt::state_names)
    states.emplace_back(name);
  const auto list = [](const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names)
      text += (text.empty() ? "" : ", ") + n;
    return text.empty() ? std::string("none") : text;
  };
  if (m.optimizer != mine)
    fail(ErrorKind::mismatch, "checkpoint: " + where.string() + " was saved by " + m.optimizer +
                                  ", but this engine's optimizer is " + mine +
                                  " (its states cannot be converted)");
  if (m.optimizer_states != states)
    fail(ErrorKind::mismatch, "checkpoint: " + where.string() + " has the optimizer states " +
                                  list(m.optimizer_states) + ", but this engine's " + mine +
                                  " keeps " + list(states) +
                                  " (momentum on in one, off in the "
                                  "other?)");
}

inline void check_parameters(const Manifest& m, std::span<const ParameterSpec> mine,
                             const std::filesystem::path& where) {
  const std::string at = "checkpoint: " + where.string() + " is of a different model: ";
  for (std::size_t p = 0; p < std::min(mine.size(), m.parameters.size()); ++p) {
    const SavedParameter& s = m.parameters[p];
    const ParameterSpec& q = mine[p];
    if (s.name != q.name)
      fail(ErrorKind::mismatch, at + "parameter #" + std::to_string(p) + " is '" + s.name +
                                    "' there and '" + q.name + "' here");
    if (s.numel != q.numel || (!s.shape.empty() && !q.shape.empty() && s.shape != q.shape))
      fail(ErrorKind::mismatch, at + "'" + q.name + "' has " + std::to_string(s.numel) +
                                    " elements there and " + std::to_string(q.numel) + " here");
  }
  if (mine.size() != m.parameters.size())
    fail(ErrorKind::mismatch, at + "it has " + std::to_string(m.parameters.size()) +
                                  " parameters, this engine " + std::to_string(mine.size()));
}

// What load_checkpoint returns about the checkpoint (the user state read and checked).
inline void describe_loaded(LoadedCheckpoint& info, const Manifest& m) {
  info.tag = m.tag;
  info.optimizer_step = m.optimizer_step;
  info.scaler_iteration = m.scaler.iteration;
  info.saved_world_size = m.world_size;
  info.saved_stage = m.stage;
  info.saved_partitioner = m.partitioner;
  info.saved_tensor_parallel_size = m.tensor_parallel_size;
  if (m.user_state) info.user_state = read_small_file(info.path, *m.user_state);
}

inline std::vector<SavedParameter> saved_parameters(std::span<const ParameterSpec> parameters) {
  std::vector<SavedParameter> saved;
  for (const ParameterSpec& p : parameters)
    saved.push_back({p.name, p.shape, p.numel, p.layer, p.replicated_over_tensor_parallel,
                     p.tensor_parallel_split});
  return saved;
}

} // namespace checkpoint
} // namespace zero
