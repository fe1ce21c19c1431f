// Activation memory per rank (zero/estimate/activation_memory.hpp): train_gpt's block at T = 2
// summed from saved_layout's buffers one by one, the four schemes, the cap on K, Pa's all-gathers
// and their volume against the tensor-parallel all-reduces, and what is refused.

#include "zero/core/error.hpp"
#include "zero/estimate/activation_memory.hpp"
#include "zero/estimate/tensor_parallel.hpp"

#include <gtest/gtest.h>

namespace {

namespace est = zero::estimate;
using enum est::ActivationScheme;

// train_gpt --layers 4 --embd 64 --heads 4 --seq 32, 8 sequences per rank; V does not matter.
constexpr est::TransformerShape small{
    .layers = 4, .hidden = 64, .heads = 4, .sequence = 32, .vocabulary = 256, .micro_batch = 8};

TEST(ActivationMemory, BlockMatchesSavedLayout) {
  // gpt::saved_layout at T = 2: rows 256, embd 64, local embd 32, local heads 2, local MLP 128.
  const double rows = 8 * 32;
  const double ln1 = rows * 64 + 2 * rows, qkv = rows * 3 * 32, att = 8 * 2 * 32 * 32,
               heads = rows * 32, mid = rows * 64, ln2 = rows * 64 + 2 * rows, fc = rows * 128,
               gelu = rows * 128;
  const est::BlockActivations block = est::block_activations(small, 2);
  EXPECT_EQ(block.input, rows * 64);
  EXPECT_EQ(block.saved(), ln1 + qkv + att + heads + mid + ln2 + fc + gelu);
  EXPECT_EQ(block.replicated, ln1 + mid + ln2);
  EXPECT_EQ(block.split, qkv + att + heads + fc + gelu);
  EXPECT_EQ(block.saved(), 164864);
  // Unsplit, everything is whole: 16 R H + B A S^2 + 4 R with the input.
  EXPECT_EQ(est::block_activations(small, 1).layer(), 16 * rows * 64 + 8 * 4 * 32 * 32 + 4 * rows);
}

TEST(ActivationMemory, FourSchemes) {
  const auto at = [](est::ActivationScheme scheme, std::int64_t k) {
    return est::activation_memory({small, 2, scheme, k, 4});
  };
  const double layer = 16384 + 164864;
  EXPECT_EQ(at(none, 4).device_elements(), 4 * layer);
  EXPECT_EQ(at(none, 4).device_bytes(), 4 * 4 * layer);
  EXPECT_EQ(at(checkpointed, 4).kept, 3 * 16384);
  EXPECT_EQ(at(checkpointed, 4).device_elements(), 3 * 16384 + layer);
  EXPECT_EQ(at(partitioned, 4).kept, 3 * 8192);
  EXPECT_EQ(at(partitioned, 4).gather_buffers, 2 * 16384);
  EXPECT_EQ(at(partitioned, 4).device_elements(), 238592);
  const est::ActivationMemoryPerRank tier = at(partitioned_off_device, 4);
  EXPECT_EQ(tier.kept, 0);
  EXPECT_EQ(tier.device_elements(), 214016);
  EXPECT_EQ(tier.off_device_bytes(), 3 * 8192 * 4);
  // Two segments of 2 layers: one kept input, two layers' working memory.
  EXPECT_EQ(at(checkpointed, 2).device_elements(), 16384 + 2 * layer);
  EXPECT_EQ(at(checkpointed, 2).segment_layers, 2);
  // One segment is no checkpointing: nothing kept, nothing gathered.
  EXPECT_EQ(at(checkpointed, 1).device_elements(), at(none, 1).device_elements());
  EXPECT_EQ(at(partitioned, 1).device_elements(), at(none, 1).device_elements());
}

TEST(ActivationMemory, CheckpointsCappedAtLayers) {
  const est::ActivationMemoryPerRank capped = est::activation_memory({small, 2, checkpointed, 9});
  EXPECT_EQ(capped.segments, 4);
  EXPECT_EQ(capped.device_elements(),
            est::activation_memory({small, 2, checkpointed, 4}).device_elements());
  EXPECT_EQ(est::recomputed_layers(24, 5), 20); // segments 5, 5, 5, 5, 4
  EXPECT_EQ(est::recomputed_layers(4, 9), 3);
  EXPECT_EQ(est::recomputed_layers(4, 1), 0);
}

TEST(ActivationMemory, PaGathersWholeInputs) {
  // K - 1 all-gathers of R H = 16384 elements, as nccl-tests counts them; (T - 1) / T on the wire.
  const est::PartitionedActivationCommunication pa =
      est::partitioned_activation_communication(small, 2, 4, 4);
  EXPECT_EQ(pa.all_gathers, 3);
  EXPECT_EQ(pa.elements, 3 * 16384);
  EXPECT_EQ(pa.bytes, 3 * 16384 * 4);
  EXPECT_EQ(pa.ring_bytes, 3 * 16384 * 4 / 2);
  EXPECT_EQ(est::partitioned_activation_communication(small, 2, 1, 4).all_gathers, 0);
}

TEST(ActivationMemory, PaAgainstTensorParallelism) {
  // A checkpoint at every layer: L - 1 gathers against 6 L all-reduces of R H, each gather putting
  // half of what an all-reduce does on the wire: about 1/12 (the ZeRO paper: under a tenth).
  const est::TransformerShape gpt2{.layers = 24,
                                   .hidden = 1024,
                                   .heads = 16,
                                   .sequence = 1024,
                                   .vocabulary = 50257,
                                   .micro_batch = 4};
  const est::PartitionedActivationCommunication pa =
      est::partitioned_activation_communication(gpt2, 4, 24, 2);
  const est::TensorParallelCommunication tp =
      est::tensor_parallel_communication(gpt2, 4, est::recomputed_layers(24, 24), 2);
  EXPECT_EQ(pa.all_gathers, 23);
  EXPECT_EQ(tp.all_reduces, 6 * 24 + 3);
  EXPECT_NEAR(pa.ring_bytes / tp.ring_bytes, 23.0 / (12 * 24), 1e-5);
  EXPECT_LT(pa.ring_bytes / tp.ring_bytes, 0.1);
  EXPECT_EQ(est::partitioned_activation_communication(gpt2, 1, 24, 2).bytes, 0);
}

TEST(ActivationMemory, Refuses) {
  EXPECT_THROW(est::activation_memory({small, 2, checkpointed, 0}), zero::Error);
  EXPECT_THROW(est::block_activations(small, 3), zero::Error); // 4 heads over 3 ranks
  EXPECT_THROW(est::block_activations(small, 0), zero::Error);
  // No checkpointing ignores K.
  EXPECT_NO_THROW(est::activation_memory({small, 2, none, 0}));
}

} // namespace
