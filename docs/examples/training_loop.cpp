// The program of docs/training-loop.md: a two-layer network trained in fp16 with zero's engine
// under ZeRO stage 3 and a dynamic loss scale, written as a user writes it. The build compiles
// it, the tests run it on 1, 2 and 3 ranks, and the guide shows its marked regions verbatim.

// example-begin includes
#include <zero/comm/mpi_communicator.hpp> // zero::MpiCommunicator: link zero::mpi
#include <zero/core/convert.hpp>          // zero::convert_n: half and bfloat16 to float
#include <zero/engines.hpp> // the engine, stages, optimizers, loss scalers: link zero::engines
// example-end includes

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

constexpr std::size_t inputs = 8, hidden = 16, outputs = 2, rows = 32; // rows per rank

// y = tanh(x W0^T + b0) W1^T + b1, with W0 [hidden, inputs] and W1 [outputs, hidden], as torch.
struct Activations {
  std::vector<float> x, h, y;
};

// This rank's rows of a synthetic regression task.
struct Batch {
  std::vector<float> x, target;
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

// example-begin trainer
// One step of training, written once for every engine: plan, communicator, placement, optimizer
// and loss scaler are Engine's template parameters, the compute type T the caller's choice. The
// engine's type depends on a template parameter here, so its member templates are called with
// `template`: engine.template gradients<T>(l).
template <class T, class Engine>
zero::StepResult train_step(Engine& engine, const Batch& batch, Activations& a, double& loss) {
  // Forward: under stage 3 a layer's weights are gathered while its handle lives (and the next
  // layer's gather is already under way).
  {
    auto w0 = engine.acquire(0);
    linear(batch.x, inputs, to_float(w0.template parameter<T>(0)),
           to_float(w0.template parameter<T>(1)), hidden, a.h);
    for (float& v : a.h)
      v = std::tanh(v);
  }
  {
    auto w1 = engine.acquire(1);
    linear(a.h, hidden, to_float(w1.template parameter<T>(0)),
           to_float(w1.template parameter<T>(1)), outputs, a.y);
  }
  // The loss gradient is multiplied by the loss scale, so that small fp16 gradients do not flush
  // to zero; step() divides it out of the fp32 gradients, and skips the step on every rank when
  // it made one overflow (a DynamicLossScaler then lowers the scale).
  const float scale = static_cast<float>(engine.loss_scale());
  std::vector<float> dy(rows * outputs);
  loss = 0;
  for (std::size_t i = 0; i < dy.size(); ++i) {
    const float d = a.y[i] - batch.target[i];
    loss += d * d / double(dy.size());
    dy[i] = scale * 2 * d / float(dy.size()); // loss scale x d(mean squared error)/dy
  }

  // Backward, last layer first: each layer's gradient is reduced across the ranks as soon as it
  // is handed over, while the layers below are still computing.
  std::vector<float> dh(rows * hidden, 0.0f);
  {
    auto w1 = engine.acquire(1);
    const std::vector<float> weight = to_float(w1.template parameter<T>(0));
    zero::View<T> grad = engine.template gradients<T>(1); // fc1.weight then fc1.bias
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
    zero::View<T> grad = engine.template gradients<T>(0);
    for (std::size_t i = 0; i < dh.size(); ++i)
      dh[i] *= 1 - a.h[i] * a.h[i]; // tanh'
    for (std::size_t o = 0; o < hidden; ++o) {
      float bias_grad = 0;
      for (std::size_t i = 0; i < inputs; ++i) {
        float sum = 0;
        for (std::size_t r = 0; r < rows; ++r)
          sum += dh[r * hidden + o] * batch.x[r * inputs + i];
        grad[o * inputs + i] = T(sum);
      }
      for (std::size_t r = 0; r < rows; ++r)
        bias_grad += dh[r * hidden + o];
      grad[hidden * inputs + o] = T(bias_grad);
    }
    engine.grads_ready(0);
  }

  // Overflow check on every rank, unscaling, clipping by the global norm, Adam on this rank's
  // shard.
  return engine.step();
}
// example-end trainer

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
  options.compute_dtype = zero::DType::float16; // fp16 weights for compute, fp32 master weights
  options.gradient_clipping = 1.0;              // by the global norm over all shards

  // fp16 gradients need a loss scale: the dynamic one starts at 2^16, halves after overflows and
  // doubles after scale_window steps without one (DeepSpeed's rule).
  using Engine = zero::Engine<zero::Stage<3>, zero::MpiCommunicator, zero::host, zero::AdamW,
                              zero::DynamicLossScaler>;
  Engine engine(comm, parameters, zero::AdamW({.lr = 1e-2}), zero::DynamicLossScaler{}, options);
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
  Batch batch;
  batch.x.resize(rows * inputs);
  batch.target.resize(rows * outputs);
  for (std::size_t i = 0; i < batch.x.size(); ++i)
    batch.x[i] = std::cos(float(i + 100 * std::size_t(comm.rank())));
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < outputs; ++o)
      batch.target[r * outputs + o] = std::sin(batch.x[r * inputs + o] + batch.x[r * inputs]);

  Activations a;
  double first_loss = 0, loss = 0;
  // example-begin loop
  for (int step = 0; step < 60; ++step) {
    const zero::StepResult result = train_step<zero::half>(engine, batch, a, loss);
    if (!result.applied && comm.rank() == 0)
      std::printf("step %d skipped (overflow): the loss scale is now %g\n", step,
                  engine.loss_scale());
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
