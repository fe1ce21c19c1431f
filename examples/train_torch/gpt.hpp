#pragma once
// A small GPT written with torch::nn modules, as a libtorch user writes one: token and position
// embeddings, pre-LayerNorm blocks (causal multi-head attention, a GELU MLP), a final LayerNorm and
// a linear head (untied: zero keeps each parameter in one layer). Names follow nanoGPT's, so the
// state_dict keys read "h.0.attn.c_attn.weight"; reference.py is the same model in Python.
//
// The forward is written once over a `run(layer, function, input)`: plain libtorch calls the
// function, zero's ShardedModule::call runs it as the engine's layer. Engine layers: 0 the
// embeddings, 1 + i block i, L + 1 the final LayerNorm and the head (with the loss).

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace train_torch {

struct GptConfig {
  std::int64_t layers = 2, heads = 4, embd = 64, seq = 32, vocab = 256;
};

struct CausalSelfAttentionImpl : torch::nn::Module {
  CausalSelfAttentionImpl(std::int64_t embd, std::int64_t head_count)
      : heads(head_count), c_attn(register_module("c_attn", torch::nn::Linear(embd, 3 * embd))),
        c_proj(register_module("c_proj", torch::nn::Linear(embd, embd))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const std::int64_t batch = x.size(0), seq = x.size(1), embd = x.size(2);
    const std::int64_t head_size = embd / heads;
    const auto qkv = c_attn(x).split(embd, 2);
    const auto by_head = [&](const torch::Tensor& t) {
      return t.view({batch, seq, heads, head_size}).transpose(1, 2); // [B, H, T, hs]
    };
    const torch::Tensor q = by_head(qkv[0]), k = by_head(qkv[1]), v = by_head(qkv[2]);
    torch::Tensor att = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(double(head_size)));
    const torch::Tensor future = torch::ones({seq, seq}, torch::kBool).triu(1);
    att = att.masked_fill(future, -std::numeric_limits<float>::infinity()).softmax(-1);
    const torch::Tensor y = att.matmul(v).transpose(1, 2).contiguous().view({batch, seq, embd});
    return c_proj(y);
  }

  std::int64_t heads;
  torch::nn::Linear c_attn, c_proj;
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(std::int64_t embd)
      : c_fc(register_module("c_fc", torch::nn::Linear(embd, 4 * embd))),
        c_proj(register_module("c_proj", torch::nn::Linear(4 * embd, embd))) {}
  torch::Tensor forward(const torch::Tensor& x) { return c_proj(torch::gelu(c_fc(x), "tanh")); }
  torch::nn::Linear c_fc, c_proj;
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  BlockImpl(std::int64_t embd, std::int64_t heads)
      : ln_1(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({embd})))),
        attn(register_module("attn", CausalSelfAttention(embd, heads))),
        ln_2(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({embd})))),
        mlp(register_module("mlp", Mlp(embd))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
  torch::nn::LayerNorm ln_1;
  CausalSelfAttention attn;
  torch::nn::LayerNorm ln_2;
  Mlp mlp;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& c)
      : config(c), wte(register_module("wte", torch::nn::Embedding(c.vocab, c.embd))),
        wpe(register_module("wpe", torch::nn::Embedding(c.seq, c.embd))),
        h(register_module("h", torch::nn::ModuleList())),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd})))),
        lm_head(register_module(
            "lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.embd, c.vocab).bias(false)))) {
    for (std::int64_t i = 0; i < c.layers; ++i)
      h->push_back(Block(c.embd, c.heads));
  }

  // The engine's layers, by name prefixes: the embeddings, each block, the final norm with the
  // head.
  std::vector<std::vector<std::string>> layer_groups() const {
    std::vector<std::vector<std::string>> groups = {{"wte", "wpe"}};
    for (std::int64_t i = 0; i < config.layers; ++i)
      groups.push_back({"h." + std::to_string(i)});
    groups.push_back({"ln_f", "lm_head"});
    return groups;
  }

  // The mean cross-entropy of predicting `targets` from `tokens` ([batch, seq] int64 each), each
  // engine layer's part through run(layer, function, input).
  // The functions capture by value: at stage 3 they run again during backward, after loss()
  // returned.
  template <class Run>
  torch::Tensor loss(Run&& run, const torch::Tensor& tokens, const torch::Tensor& targets) {
    const torch::Tensor positions = torch::arange(tokens.size(1), torch::kLong);
    torch::Tensor x = run(
        0, [this, positions](const torch::Tensor& t) { return wte(t) + wpe(positions); }, tokens);
    for (std::int64_t i = 0; i < config.layers; ++i) {
      Block block(h->ptr<BlockImpl>(std::size_t(i)));
      x = run(
          1 + i, [block](const torch::Tensor& in) mutable { return block->forward(in); }, x);
    }
    return run(
        config.layers + 1,
        [this, targets](const torch::Tensor& in) {
          const torch::Tensor logits = lm_head(ln_f(in));
          return torch::nn::functional::cross_entropy(logits.view({-1, config.vocab}),
                                                      targets.reshape({-1}));
        },
        x);
  }

  GptConfig config;
  torch::nn::Embedding wte, wpe;
  torch::nn::ModuleList h;
  torch::nn::LayerNorm ln_f;
  torch::nn::Linear lm_head;
};
TORCH_MODULE(Gpt);

// Plain libtorch: each layer's function called as it is.
struct CallDirectly {
  template <class F>
  torch::Tensor operator()(std::int64_t, F&& f, const torch::Tensor& input) const {
    return f(input);
  }
};

} // namespace train_torch
