#pragma once
// ModuleLayers: how a torch::nn::Module's parameters are cut into zero's layers, the unit the
// engine gathers (stage 3), reduces and updates, and the unit a forward runs through
// ShardedModule::call. By default one layer per direct child with parameters (its own parameters,
// if the module has any, first); or layers the user groups by name prefixes. The names are
// named_parameters()'s, so a consolidated file's keys are the module's state_dict keys.
//
// Refused, each with the names involved: a parameter that is not float32 on the CPU (the engine
// keeps fp32 master weights and makes the compute copy itself), one that does not require a
// gradient (frozen: make it a buffer), and a parameter registered under two names (tied weights:
// its gradient would be the sum of two calls' and its state_dict has both keys; untie it, or copy
// it in the forward of the one layer that owns it).

#include "zero/core/error.hpp"
#include "zero/shard/parameter.hpp"

#include <torch/nn/module.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zero::torch {

struct ModuleParameter {
  std::string name;       // as named_parameters() names it
  ::torch::Tensor tensor; // the module's own parameter; ShardedModule points it at the engine's
  std::vector<std::size_t> shape; // torch's sizes (empty for a scalar); the tensor may be empty
                                  // now (stage 3 outside a call), the shape stays

  std::size_t numel() const {
    std::size_t n = 1;
    for (const std::size_t d : shape)
      n *= d;
    return n;
  }
  std::vector<std::int64_t> sizes() const { return {shape.begin(), shape.end()}; }
};

class ModuleLayers {
 public:
  // One layer per direct child that has parameters, in registration order; parameters registered
  // on the module itself form a layer before them.
  static ModuleLayers by_child(::torch::nn::Module& module) {
    std::vector<Group> groups;
    std::vector<std::string> own;
    for (const auto& p : module.named_parameters(/*recurse=*/false))
      own.push_back(p.key());
    if (!own.empty())
      groups.push_back({"the module's own parameters", "the module's own parameters", own, true});
    for (const auto& child : module.named_children())
      if (!child.value()->parameters(/*recurse=*/true).empty()) {
        const std::string label = "child '" + child.key() + "'";
        groups.push_back({label, label, {child.key()}, false});
      }
    return ModuleLayers(module, groups);
  }

  // Layer i holds the parameters whose names start with one of groups[i]'s prefixes; a prefix
  // matches whole name components ("h.1" holds "h.1.weight", not "h.10.weight"). Every parameter
  // must be in exactly one layer.
  static ModuleLayers grouped(::torch::nn::Module& module,
                              const std::vector<std::vector<std::string>>& prefixes) {
    std::vector<Group> groups;
    for (std::size_t i = 0; i < prefixes.size(); ++i) {
      std::string quoted;
      for (const std::string& prefix : prefixes[i])
        quoted += (quoted.empty() ? "'" : ", '") + prefix + "'";
      groups.push_back({"group " + std::to_string(i), quoted, prefixes[i], false});
    }
    return ModuleLayers(module, groups);
  }

  std::size_t size() const noexcept { return layers_.size(); }
  const std::vector<ModuleParameter>& layer(std::size_t l) const {
    if (l >= layers_.size())
      fail(ErrorKind::invalid_argument, "torch: no layer " + std::to_string(l) + " (layers 0-" +
                                            std::to_string(layers_.size() - 1) + ")");
    return layers_[l];
  }
  // Layer l as errors name it: "layer 2 (child 'fc2')", "layer 1 ('h.0')".
  std::string name(std::size_t l) const {
    layer(l); // (checks l)
    return "layer " + std::to_string(l) + " (" + labels_[l] + ")";
  }
  std::size_t numel(std::size_t l) const {
    std::size_t n = 0;
    for (const ModuleParameter& p : layer(l))
      n += p.numel();
    return n;
  }

  // The engine's parameters: names, shapes and layers as here, fp32 master weights.
  std::vector<ParameterSpec> specs() const {
    std::vector<ParameterSpec> all;
    for (std::size_t l = 0; l < layers_.size(); ++l)
      for (const ModuleParameter& p : layers_[l])
        all.push_back(ParameterSpec{p.name, p.numel(), DType::float32, int(l),
                                    p.shape.empty() ? std::vector<std::size_t>{1} : p.shape});
    return all;
  }

  // The layer that holds every parameter of `submodule` (a child the grouping kept whole).
  std::size_t layer_of(const ::torch::nn::Module& submodule) const {
    std::size_t found = layers_.size();
    std::string first; // a parameter of the submodule, to name it in errors
    for (const auto& named : submodule.named_parameters(/*recurse=*/true)) {
      const std::size_t l = layer_holding(named.value());
      if (first.empty()) first = named.key();
      if (l == layers_.size() || (found != layers_.size() && found != l))
        fail(ErrorKind::invalid_argument,
             "torch: the submodule holding '" + first + "' (" + submodule.name() +
                 ") is not one layer: its '" + named.key() + "' is in " +
                 (l == layers_.size() ? "no layer" : "another layer than '" + first + "'"));
      found = l;
    }
    if (found == layers_.size())
      fail(ErrorKind::invalid_argument,
           "torch: the submodule " + submodule.name() + " has no parameters");
    return found;
  }

 private:
  struct Group {
    std::string label;       // in the errors of the grouping: "group 1", "child 'fc2'"
    std::string description; // what the layer is named by afterwards: "child 'fc2'", "'h.0'"
    std::vector<std::string> prefixes;
    bool exact; // the module's own parameters: whole names, not prefixes
  };

  static bool under(const std::string& name, const std::string& prefix, bool exact) {
    if (exact) return name == prefix;
    return name == prefix ||
           (name.size() > prefix.size() && name.starts_with(prefix) && name[prefix.size()] == '.');
  }

  ModuleLayers(::torch::nn::Module& module, const std::vector<Group>& groups) {
    require(!groups.empty(), "torch: the module has no parameters to train");
    layers_.resize(groups.size());
    for (const Group& g : groups)
      labels_.push_back(g.description);
    std::map<const void*, std::string> seen; // tensor -> its first name: ties
    for (const auto& named : module.named_parameters(/*recurse=*/true)) {
      const std::string& name = named.key();
      const ::torch::Tensor& t = named.value();
      const auto [first, fresh] = seen.emplace(t.unsafeGetTensorImpl(), name);
      require(fresh, "torch: '" + name + "' and '" + first->second +
                         "' are one tensor (tied weights); zero keeps each parameter once, in one "
                         "layer: untie them, or reuse the one tensor inside a single layer's call");
      require(t.scalar_type() == ::torch::kFloat32 && t.device().is_cpu(),
              "torch: '" + name + "' is " + std::string(c10::toString(t.scalar_type())) + " on " +
                  t.device().str() +
                  "; register float32 CPU parameters (the engine makes the compute copy)");
      require(t.requires_grad(), "torch: '" + name +
                                     "' does not require a gradient; a frozen tensor is a buffer "
                                     "(register_buffer), not a parameter zero trains");
      std::size_t owner = groups.size();
      for (std::size_t g = 0; g < groups.size(); ++g)
        for (const std::string& prefix : groups[g].prefixes)
          if (under(name, prefix, groups[g].exact)) {
            if (owner != groups.size() && owner != g)
              fail(ErrorKind::invalid_argument, "torch: '" + name + "' is in " +
                                                    groups[owner].label + " and in " +
                                                    groups[g].label);
            owner = g;
          }
      require(owner < groups.size(), "torch: '" + name + "' is in no layer's group");
      std::vector<std::size_t> shape;
      for (const std::int64_t d : t.sizes())
        shape.push_back(std::size_t(d));
      layers_[owner].push_back({name, t, std::move(shape)});
    }
    for (std::size_t g = 0; g < groups.size(); ++g)
      require(!layers_[g].empty(), "torch: " + groups[g].label + " holds no parameter");
  }

  std::size_t layer_holding(const ::torch::Tensor& t) const {
    for (std::size_t l = 0; l < layers_.size(); ++l)
      for (const ModuleParameter& p : layers_[l])
        if (p.tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return l;
    return layers_.size();
  }

  std::vector<std::vector<ModuleParameter>> layers_;
  std::vector<std::string> labels_; // per layer, for name()
};

} // namespace zero::torch
