// The program of docs/training-loop.md: a two-layer network trained with zero's engine under ZeRO
// stage 3, written as a user writes it. The build compiles it, the tests run it on 1, 2 and 3
// ranks, and the guide shows its marked regions verbatim.

#include <zero/comm/mpi_communicator.hpp>
#include <zero/engine/engine.hpp>
#include <zero/optim/adam.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

constexpr std::size_t inputs = 8, hidden = 16, outputs = 2, rows = 32; // rows per rank

// y = tanh(x W0^T + b0) W1^T + b1, with W0 [hidden, inputs] and W1 [outputs, hidden], as torch.
struct Activations {
  std::vector<float> x, h, y;
};

template <class T>
std::vector<float> to_float(zero::View<const T> v) {
  std::vector<float> out(v.size());
  zero::convert_n(v.data(), out.data(), v.size());
  return out;
}

void linear(const std::vector<float>& in, std::size_t in_width, const std::vector<float>& w,
            const std::vector<float>& b, std::size_t out_width, std::vector<float>& out) {
  out.assign(rows * out_width, 0.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out_width; ++o) {
      float sum = b[o];
      for (std::size_t i = 0; i < in_width; ++i)
        sum += in[r * in_width + i] * w[o * in_width + i];
      out[r * out_width + o] = sum;
    }
}

} // namespace

int main(int argc, char** argv) {
  // example-begin setup
  zero::MpiCommunicator comm(argc, argv);

  // Register the parameters layer by layer: `layer` is the layer, the unit of gathering.
  const std::vector<zero::ParameterSpec> parameters = {
      {"fc0.weight", hidden * inputs, zero::DType::float32, 0},
      {"fc0.bias", hidden, zero::DType::float32, 0},
      {"fc1.weight", outputs * hidden, zero::DType::float32, 1},
      {"fc1.bias", outputs, zero::DType::float32, 1}};

  zero::EngineOptions options;
  options.compute_dtype = zero::DType::bfloat16; // bf16 weights for compute, fp32 master weights
  options.gradient_clipping = 1.0;               // by the global norm over all shards

  using Engine = zero::Engine<zero::Stage<3>, zero::MpiCommunicator, zero::host, zero::AdamW,
                              zero::StaticLossScaler>;
  Engine engine(comm, parameters, zero::AdamW({.lr = 1e-2}), zero::StaticLossScaler{}, options);
  // example-end setup

  // example-begin init
  for (std::size_t layer = 0; layer < engine.layers(); ++layer) {
    std::vector<float> values(engine.layout().layer(layer).numel);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = 0.3f * std::sin(float(i + 7 * layer));
    engine.set_layer(layer, values); // rank 0's values reach every rank's shard
  }
  // example-end init

  // Each rank trains on its own rows of a synthetic regression task.
  Activations a;
  a.x.resize(rows * inputs);
  std::vector<float> target(rows * outputs);
  for (std::size_t i = 0; i < a.x.size(); ++i)
    a.x[i] = std::cos(float(i + 100 * std::size_t(comm.rank())));
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < outputs; ++o)
      target[r * outputs + o] = std::sin(a.x[r * inputs + o] + a.x[r * inputs]);

  double first_loss = 0, loss = 0;
  using T = zero::bfloat16;
  // example-begin loop
  for (int step = 0; step < 60; ++step) {
    // Forward: under stage 3 a layer's weights are gathered while its handle lives (and the next
    // layer's gather is already under way).
    {
      auto w0 = engine.acquire(0);
      linear(a.x, inputs, to_float(w0.parameter<T>(0)), to_float(w0.parameter<T>(1)), hidden, a.h);
      for (float& v : a.h)
        v = std::tanh(v);
    }
    {
      auto w1 = engine.acquire(1);
      linear(a.h, hidden, to_float(w1.parameter<T>(0)), to_float(w1.parameter<T>(1)), outputs, a.y);
    }
    std::vector<float> dy(rows * outputs);
    loss = 0;
    for (std::size_t i = 0; i < dy.size(); ++i) {
      const float d = a.y[i] - target[i];
      loss += d * d / double(dy.size());
      dy[i] = 2 * d / float(dy.size()); // d(mean squared error)/dy
    }

    // Backward, last layer first: each layer's gradient is reduced across the ranks as soon as it
    // is handed over, while the layers below are still computing.
    std::vector<float> dh(rows * hidden, 0.0f);
    {
      auto w1 = engine.acquire(1);
      const std::vector<float> weight = to_float(w1.parameter<T>(0));
      zero::View<T> grad = engine.gradients<T>(1); // fc1.weight then fc1.bias
      for (std::size_t o = 0; o < outputs; ++o) {
        float bias_grad = 0;
        for (std::size_t i = 0; i < hidden; ++i) {
          float sum = 0;
          for (std::size_t r = 0; r < rows; ++r)
            sum += dy[r * outputs + o] * a.h[r * hidden + i];
          grad[o * hidden + i] = T(sum);
        }
        for (std::size_t r = 0; r < rows; ++r)
          bias_grad += dy[r * outputs + o];
        grad[outputs * hidden + o] = T(bias_grad);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t i = 0; i < hidden; ++i)
            dh[r * hidden + i] += dy[r * outputs + o] * weight[o * hidden + i];
      }
      engine.grads_ready(1);
    }
    {
      zero::View<T> grad = engine.gradients<T>(0);
      for (std::size_t i = 0; i < dh.size(); ++i)
        dh[i] *= 1 - a.h[i] * a.h[i]; // tanh'
      for (std::size_t o = 0; o < hidden; ++o) {
        float bias_grad = 0;
        for (std::size_t i = 0; i < inputs; ++i) {
          float sum = 0;
          for (std::size_t r = 0; r < rows; ++r)
            sum += dh[r * hidden + o] * a.x[r * inputs + i];
          grad[o * inputs + i] = T(sum);
        }
        for (std::size_t r = 0; r < rows; ++r)
          bias_grad += dh[r * hidden + o];
        grad[hidden * inputs + o] = T(bias_grad);
      }
      engine.grads_ready(0);
    }

    // Overflow check on every rank, clipping by the global norm, Adam on this rank's shard.
    const zero::StepResult result = engine.step();
    if (!result.applied && comm.rank() == 0) std::printf("step %d skipped (overflow)\n", step);
    if (step == 0) first_loss = loss;
  }
  // example-end loop

  // example-begin report
  const zero::MemoryReport memory = engine.memory();
  std::printf("rank %d: loss %.4f -> %.4f; model states %zu bytes (paper formula %.0f), buffers "
              "%zu bytes\n",
              comm.rank(), first_loss, loss, memory.model_states(),
              engine.paper_model_state_bytes(), memory.buffers);
  // example-end report
  return loss < 0.5 * first_loss ? 0 : 1;
}
