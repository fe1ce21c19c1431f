// Uses zero::torch from the installed package: the adapter's headers compile against the libtorch
// found here, and a torch::nn module's parameters become engine layers, one per child.
#include <zero/torch/sharded_module.hpp>

#include <torch/nn/modules/linear.h>

#include <cstdio>

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(4, 8))),
        fc2(register_module("fc2", torch::nn::Linear(8, 2))) {}
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

int main() {
  Net net;
  const auto layers = zero::torch::ModuleLayers::by_child(*net);
  const auto specs = layers.specs();
  std::printf("consumer_torch ok: %zu layers, %zu parameters, the last %s\n", layers.size(),
              specs.size(), layers.name(1).c_str());
  return layers.size() == 2 && specs.size() == 4 && specs[3].name == "fc2.bias" ? 0 : 1;
}
