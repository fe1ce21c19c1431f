// Layout maths of every partitioner (the three built-in ones and the user-written one from
// examples/custom_partitioner) over world sizes 1..8, without communication: every element owned
// exactly once, the mappings in every direction agreeing, the per-policy rules (alignment, chunk
// sizes, PyTorch's greedy assignment), sizes 0, 1, smaller than the world, primes and
// parameters straddling ranks, determinism, and readable errors for bad input.

#include "keep_small_whole.hpp"
#include "reduce_only_communicator.hpp"

#include <zero/comm/self_communicator.hpp>
#include <zero/shard.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using zero::DType;
using zero::ParameterSpec;
using zero::Segment;
using zero::ShardLayout;

static_assert(zero::Partitioner<zero::FlatContiguous> && zero::EqualSlices<zero::FlatContiguous>);
static_assert(zero::Partitioner<zero::PerParameter> && zero::EqualSlices<zero::PerParameter>);
static_assert(zero::Partitioner<zero::WholeParameterGreedy> &&
              !zero::EqualSlices<zero::WholeParameterGreedy>);
static_assert(zero::Partitioner<KeepSmallWhole> && !zero::EqualSlices<KeepSmallWhole>);
static_assert(!zero::Partitioner<int> && !zero::Partitioner<zero::ShardLayout>);
static_assert(zero::StoragePolicy<zero::Replicated> &&
              zero::StoragePolicy<zero::ReplicatedIn<zero::pinned_host>>);
static_assert(zero::StoragePolicy<zero::Sharded<zero::PerParameter, zero::pinned_host>>);
static_assert(!zero::StoragePolicy<zero::FlatContiguous>);

// --- parameter lists -----------------------------------------------------------------------------

std::vector<ParameterSpec> numbered(const std::vector<std::size_t>& sizes, int layer = 0) {
  std::vector<ParameterSpec> params;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    params.push_back({"p" + std::to_string(i), sizes[i], DType::float32, layer});
  return params;
}

// Sizes 0 and 1, smaller than most world sizes, primes, and enough in total to straddle ranks.
std::vector<ParameterSpec> edge_sizes() {
  return numbered({0, 1, 2, 3, 5, 7, 0, 13, 31, 101, 1031, 1, 0});
}

// Layers registered out of order, with negative and sparse ids, of several element types.
std::vector<ParameterSpec> grouped() {
  return {{"a", 5, DType::float32, 2},   {"b", 0, DType::float32, 0},  {"c", 17, DType::float32, 2},
          {"d", 3, DType::float16, -1},  {"e", 64, DType::float32, 0}, {"f", 1, DType::bfloat16, 7},
          {"g", 29, DType::float16, -1}, {"h", 0, DType::bfloat16, 7}, {"i", 8, DType::float32, 0}};
}

std::vector<ParameterSpec> random_parameters(unsigned seed) {
  std::mt19937 rng(seed);
  const std::size_t count = std::uniform_int_distribution<std::size_t>(0, 40)(rng);
  const std::size_t choices[] = {0, 1, 2, 3, 7, 11, 64, 127, 257, 1031};
  std::vector<ParameterSpec> params;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t size = rng() % 3 == 0
                                 ? std::uniform_int_distribution<std::size_t>(0, 1500)(rng)
                                 : choices[rng() % std::size(choices)];
    params.push_back({"r" + std::to_string(i), size, DType::float32, static_cast<int>(rng() % 4)});
  }
  return params;
}

struct ParameterSet {
  std::string name;
  std::vector<ParameterSpec> params;
};

std::vector<ParameterSet> parameter_sets() {
  std::vector<ParameterSet> sets{{"edge", edge_sizes()},
                                 {"grouped", grouped()},
                                 {"empty", {}},
                                 {"all_zero", numbered({0, 0, 0})},
                                 {"one", numbered({1})}};
  for (unsigned seed = 1; seed <= 20; ++seed)
    sets.push_back({"random" + std::to_string(seed), random_parameters(seed)});
  return sets;
}

// --- partitioners under test ---------------------------------------------------------------------

struct Policy {
  std::string name;
  std::function<ShardLayout(std::span<const ParameterSpec>, int)> partition;
  std::function<void(const ShardLayout&)> check_rules; // the policy's own rules
};

std::size_t round_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m * m;
}

void check_flat_contiguous(const ShardLayout& layout, std::size_t alignment) {
  const auto ranks = static_cast<std::size_t>(layout.world_size());
  for (std::size_t g = 0; g < layout.layer_count(); ++g) {
    const auto& info = layout.layer(g);
    const std::size_t slice = round_up(info.numel, alignment * ranks) / ranks;
    EXPECT_EQ(info.block_numel, slice) << "layer " << info.id;
    EXPECT_EQ(info.flat_numel % (alignment * ranks), 0u);
    for (int r = 0; r < layout.world_size(); ++r) {
      EXPECT_EQ(layout.block(g, r).size(), slice);
      EXPECT_EQ(layout.block(g, r).begin % alignment, 0u) << "block of layer " << info.id;
    }
    // Parameters in registration order, end to end from offset 0 of the flat buffer.
    std::size_t offset = 0;
    for (std::size_t p : layout.layer_parameters(g)) {
      ASSERT_TRUE(layout.layer_offset(p).has_value());
      if (layout.parameter(p).numel != 0) {
        EXPECT_EQ(*layout.layer_offset(p), offset);
      }
      for (const Segment& s : layout.segments(p))
        EXPECT_EQ(static_cast<std::size_t>(s.rank), (offset + s.parameter_offset) / slice);
      offset += layout.parameter(p).numel;
    }
  }
}

void check_per_parameter(const ShardLayout& layout, std::size_t alignment) {
  const auto ranks = static_cast<std::size_t>(layout.world_size());
  for (std::size_t g = 0; g < layout.layer_count(); ++g) {
    std::size_t block_offset = 0; // of the parameter's chunk, the same on every rank
    for (std::size_t p : layout.layer_parameters(g)) {
      const std::size_t numel = layout.parameter(p).numel;
      const std::size_t chunk = round_up((numel + ranks - 1) / ranks, alignment);
      for (const Segment& s : layout.segments(p)) {
        EXPECT_EQ(s.parameter_offset, static_cast<std::size_t>(s.rank) * chunk);
        EXPECT_EQ(s.length, std::min(chunk, numel - s.parameter_offset));
        EXPECT_EQ(s.shard_offset, layout.block(g, s.rank).begin + block_offset);
      }
      block_offset += chunk;
    }
    EXPECT_EQ(layout.layer(g).block_numel, block_offset);
  }
}

// torch.distributed.optim.ZeroRedundancyOptimizer._partition_parameters, written out plainly.
std::vector<int> reference_greedy_owners(const ShardLayout& layout) {
  std::vector<std::size_t> sizes(static_cast<std::size_t>(layout.world_size()), 0);
  std::vector<int> owner(layout.parameter_count(), -1);
  for (std::size_t g = 0; g < layout.layer_count(); ++g) {
    const auto members = layout.layer_parameters(g);
    std::vector<std::size_t> sorted(members.begin(), members.end());
    std::stable_sort(sorted.begin(), sorted.end(), [&](std::size_t a, std::size_t b) {
      return layout.parameter(a).numel > layout.parameter(b).numel;
    });
    for (std::size_t p : sorted) {
      const auto rank = std::min_element(sizes.begin(), sizes.end()) - sizes.begin();
      owner[p] = static_cast<int>(rank);
      sizes[static_cast<std::size_t>(rank)] += layout.parameter(p).numel;
    }
  }
  return owner;
}

void check_greedy(const ShardLayout& layout) {
  const auto owners = reference_greedy_owners(layout);
  std::size_t largest = 0;
  for (std::size_t p = 0; p < layout.parameter_count(); ++p) {
    largest = std::max(largest, layout.parameter(p).numel);
    const auto pieces = layout.segments(p);
    if (layout.parameter(p).numel == 0) {
      EXPECT_TRUE(pieces.empty());
      continue;
    }
    ASSERT_EQ(pieces.size(), 1u) << "greedy split " << layout.parameter(p).name;
    EXPECT_EQ(pieces[0].rank, owners[p]) << layout.parameter(p).name;
    EXPECT_TRUE(layout.layer_offset(p).has_value());
  }
  std::size_t low = SIZE_MAX, high = 0;
  for (int r = 0; r < layout.world_size(); ++r) {
    EXPECT_EQ(layout.padding(r), 0u);
    low = std::min(low, layout.shard_numel(r));
    high = std::max(high, layout.shard_numel(r));
  }
  EXPECT_LE(high - low, largest) << "greedy left ranks more unbalanced than one parameter";
}

void check_keep_small_whole(const ShardLayout& layout, std::size_t threshold) {
  for (std::size_t p = 0; p < layout.parameter_count(); ++p) {
    const std::size_t numel = layout.parameter(p).numel;
    const std::size_t pieces = layout.segments(p).size();
    if (numel == 0)
      EXPECT_EQ(pieces, 0u);
    else if (numel < threshold)
      EXPECT_EQ(pieces, 1u);
    else
      EXPECT_EQ(pieces,
                std::min<std::size_t>(static_cast<std::size_t>(layout.world_size()), numel));
  }
}

std::vector<Policy> policies() {
  std::vector<Policy> result;
  for (std::size_t alignment : {1, 4, 16}) {
    zero::FlatContiguous flat{.alignment = alignment};
    result.push_back({flat.describe(),
                      [flat](auto params, int w) { return flat.partition(params, w); },
                      [alignment](const ShardLayout& l) { check_flat_contiguous(l, alignment); }});
  }
  for (std::size_t alignment : {1, 8}) {
    zero::PerParameter per{.alignment = alignment};
    result.push_back({per.describe(),
                      [per](auto params, int w) { return per.partition(params, w); },
                      [alignment](const ShardLayout& l) { check_per_parameter(l, alignment); }});
  }
  result.push_back(
      {"whole_parameter_greedy",
       [](auto params, int w) { return zero::WholeParameterGreedy{}.partition(params, w); },
       check_greedy});
  result.push_back(
      {"keep_small_whole",
       [](auto params, int w) { return KeepSmallWhole{.threshold = 64}.partition(params, w); },
       [](const ShardLayout& l) { check_keep_small_whole(l, 64); }});
  result.push_back({"replicated",
                    [](auto params, int) { return zero::Replicated{}.layout(params, 8); },
                    [](const ShardLayout& l) { EXPECT_EQ(l.world_size(), 1); }});
  return result;
}

// --- the invariants every layout keeps -----------------------------------------------------------

void check_invariants(const ShardLayout& layout, const std::vector<ParameterSpec>& params) {
  const int world = layout.world_size();
  const auto ranks = static_cast<std::size_t>(world);
  ASSERT_EQ(layout.parameter_count(), params.size());
  std::size_t numel = 0;
  for (const auto& p : params)
    numel += p.numel;
  ASSERT_EQ(layout.numel(), numel);

  // Every element exactly once, seen from the parameters.
  std::vector<int> owned_times(numel, 0);
  for (std::size_t p = 0; p < params.size(); ++p) {
    EXPECT_EQ(layout.parameter(p).name, params[p].name);
    const auto range = layout.element_range(p);
    EXPECT_EQ(range.size(), params[p].numel);
    std::size_t next = 0;
    for (const Segment& s : layout.segments(p)) {
      EXPECT_EQ(s.parameter, p);
      EXPECT_EQ(s.parameter_offset, next) << params[p].name << " is not tiled in order";
      EXPECT_GT(s.length, 0u);
      next = s.parameter_offset + s.length;
      for (std::size_t k = 0; k < s.length; ++k)
        ++owned_times[range.begin + s.parameter_offset + k];
    }
    EXPECT_EQ(next, params[p].numel);
    if (!params[p].name.empty()) {
      EXPECT_EQ(layout.find(params[p].name), p);
    }
  }
  EXPECT_EQ(std::count(owned_times.begin(), owned_times.end(), 1), static_cast<long>(numel));

  // Seen from the ranks: in shard order, inside the shard and the right block, never overlapping.
  std::size_t total_owned = 0;
  for (int r = 0; r < world; ++r) {
    std::vector<char> used(layout.shard_numel(r), 0);
    std::size_t owned = 0;
    std::size_t previous_end = 0;
    std::set<std::size_t> touched;
    for (const Segment& s : layout.rank_segments(r)) {
      EXPECT_EQ(s.rank, r);
      EXPECT_GE(s.shard_offset, previous_end) << "rank segments out of order";
      previous_end = s.shard_offset + s.length;
      ASSERT_LE(previous_end, layout.shard_numel(r));
      const auto block = layout.block(layout.layer_of(s.parameter), r);
      EXPECT_TRUE(block.begin <= s.shard_offset && previous_end <= block.end);
      for (std::size_t k = 0; k < s.length; ++k)
        EXPECT_EQ(used[s.shard_offset + k]++, 0);
      owned += s.length;
      touched.insert(s.parameter);
    }
    EXPECT_EQ(layout.owned_numel(r), owned);
    EXPECT_EQ(layout.padding(r), layout.shard_numel(r) - owned);
    EXPECT_EQ(layout.parameters_on(r), std::vector<std::size_t>(touched.begin(), touched.end()));
    for (std::size_t s = 0; s < used.size(); ++s)
      if (!used[s]) {
        EXPECT_FALSE(layout.element_at(r, s).has_value());
      }
    total_owned += owned;
    EXPECT_LE(layout.shard_numel(r), layout.max_shard_numel());
  }
  EXPECT_EQ(total_owned, numel);

  // Layers: blocks tile every shard in layer order; flat buffers are the blocks rank by rank.
  std::vector<std::size_t> bytes(ranks, 0);
  std::size_t flat_base = 0;
  for (std::size_t g = 0; g < layout.layer_count(); ++g) {
    const auto& info = layout.layer(g);
    if (g > 0) {
      EXPECT_LT(layout.layer(g - 1).id, info.id);
    }
    EXPECT_EQ(info.flat_base, flat_base);
    flat_base += info.flat_numel;
    std::size_t flat = 0, layer_numel = 0;
    for (int r = 0; r < world; ++r) {
      const auto block = layout.block(g, r);
      EXPECT_EQ(block.begin, g == 0 ? 0 : layout.block(g - 1, r).end);
      EXPECT_EQ(layout.flat_range(g, r), (zero::Range{flat, flat + block.size()}));
      flat += block.size();
      bytes[static_cast<std::size_t>(r)] += block.size() * zero::size_of(info.dtype);
      if (layout.equal_slices()) {
        EXPECT_EQ(block.size(), info.block_numel);
      }
    }
    EXPECT_EQ(info.flat_numel, flat);
    for (std::size_t p : layout.layer_parameters(g)) {
      EXPECT_EQ(layout.layer_of(p), g);
      EXPECT_EQ(layout.parameter(p).layer, info.id);
      layer_numel += layout.parameter(p).numel;
    }
    EXPECT_EQ(info.numel, layer_numel);
    EXPECT_EQ(layout.find_layer(info.id), g);
  }
  for (int r = 0; r < world; ++r) {
    if (layout.layer_count() > 0) {
      EXPECT_EQ(layout.block(layout.layer_count() - 1, r).end, layout.shard_numel(r));
    }
    EXPECT_EQ(layout.bytes(r), bytes[static_cast<std::size_t>(r)]);
  }

  // Every mapping agrees with the segments, element by element (plain comparisons: this loop
  // runs over millions of elements in all).
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto range = layout.element_range(p);
    const std::size_t g = layout.layer_of(p);
    const auto layer_offset = layout.layer_offset(p);
    for (const Segment& s : layout.segments(p))
      for (std::size_t k = 0; k < s.length; ++k) {
        const std::size_t offset = s.parameter_offset + k;
        const zero::Location where{s.rank, s.shard_offset + k};
        const std::size_t flat = layout.flat_offset(s) + k;
        const char* broken = nullptr;
        if (layout.locate(p, offset) != where)
          broken = "locate";
        else if (layout.locate_element(range.begin + offset) != where)
          broken = "locate_element";
        else if (layout.owner_of(range.begin + offset) != s.rank)
          broken = "owner_of";
        else if (layout.element_at(s.rank, s.shard_offset + k) != zero::ElementRef{p, offset})
          broken = "element_at";
        else if (flat >= layout.layer(g).flat_numel || !layout.flat_range(g, s.rank).contains(flat))
          broken = "flat_offset";
        else if (layout.locate_flat(g, flat) != where)
          broken = "locate_flat";
        else if (layer_offset && *layer_offset + offset != flat)
          broken = "layer_offset";
        if (broken != nullptr) {
          ADD_FAILURE() << broken << " disagrees with the segments at element " << offset << " of "
                        << layout.parameter(p).name;
          return;
        }
      }
  }

  // Range queries: a parameter's run and a run of a flat buffer, clipped to the segments.
  for (std::size_t p = 0; p < params.size(); ++p) {
    const std::size_t n = params[p].numel;
    for (zero::Range r : {zero::Range{0, n}, zero::Range{n / 3, std::min(n, 2 * n / 3 + 1)},
                          zero::Range{n / 2, n / 2}}) {
      std::size_t next = r.begin;
      for (const Segment& s : layout.segments_in(p, r)) {
        EXPECT_EQ(s.parameter_offset, next);
        EXPECT_EQ(layout.locate(p, s.parameter_offset), (zero::Location{s.rank, s.shard_offset}));
        EXPECT_EQ(layout.locate(p, s.parameter_offset + s.length - 1),
                  (zero::Location{s.rank, s.shard_offset + s.length - 1}));
        next += s.length;
      }
      EXPECT_EQ(next, r.end);
    }
  }
  for (std::size_t g = 0; g < layout.layer_count(); ++g) {
    const std::size_t f = layout.layer(g).flat_numel;
    for (zero::Range r : {zero::Range{0, f}, zero::Range{f / 4, std::min(f, 3 * f / 4 + 1)},
                          zero::Range{f / 2, f / 2}}) {
      std::size_t carried = 0;
      for (std::size_t i = r.begin; i < r.end; ++i) {
        const zero::Location where = layout.locate_flat(g, i);
        carried += layout.element_at(where.rank, where.shard_offset).has_value() ? 1 : 0;
      }
      std::size_t covered = 0;
      std::size_t previous_end = r.begin;
      for (const Segment& s : layout.flat_segments(g, r)) {
        const std::size_t at = layout.flat_offset(s);
        EXPECT_GE(at, previous_end);
        EXPECT_LE(at + s.length, r.end);
        EXPECT_EQ(layout.locate(s.parameter, s.parameter_offset),
                  (zero::Location{s.rank, s.shard_offset}));
        previous_end = at + s.length;
        covered += s.length;
      }
      EXPECT_EQ(covered, carried) << "flat_segments of layer " << layout.layer(g).id;
    }
  }
}

class Layouts : public ::testing::TestWithParam<std::size_t> {};

TEST(Layouts, EveryPolicyKeepsTheInvariantsOverWorldSizes1To8) {
  const auto sets = parameter_sets();
  for (const Policy& policy : policies())
    for (int world = 1; world <= 8; ++world)
      for (const ParameterSet& set : sets) {
        SCOPED_TRACE(policy.name + " over " + std::to_string(world) + " ranks, parameters " +
                     set.name);
        const ShardLayout layout = policy.partition(set.params, world);
        check_invariants(layout, set.params);
        policy.check_rules(layout);
        if (HasFatalFailure() || HasFailure()) return;
        const ShardLayout again = policy.partition(set.params, world);
        EXPECT_EQ(layout.hash(), again.hash()) << "layouts are not deterministic";
      }
}

TEST(Layouts, FlatContiguousStraddlesRanks) {
  const auto params = edge_sizes();
  const auto layout = zero::make_layout(zero::FlatContiguous{.alignment = 1}, params, 3);
  // 1195 elements in 3 slices of 399: p10 (1031 elements, from 163) spans all three ranks.
  const auto pieces = layout.segments(10);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], (Segment{10, 0, 0, 163, 236}));
  EXPECT_EQ(pieces[1], (Segment{10, 1, 236, 0, 399}));
  EXPECT_EQ(pieces[2], (Segment{10, 2, 635, 0, 396}));
  EXPECT_EQ(layout.padding(2), 2u);
  EXPECT_EQ(layout.owner(10, 634), 1);
  EXPECT_EQ(layout.owner(10, 635), 2);
  EXPECT_EQ(layout.owner_of(398), 0);
  EXPECT_EQ(layout.owner_of(399), 1);
  EXPECT_EQ(layout.layer_offset(10), 163u);
}

TEST(Layouts, BytesPerRankAreNumelOverWorldPlusPadding) {
  const auto params = edge_sizes(); // 1195 float elements
  for (int world = 1; world <= 8; ++world) {
    const auto layout = zero::make_layout(zero::FlatContiguous{.alignment = 16}, params, world);
    const std::size_t per_rank =
        round_up(1195, 16 * static_cast<std::size_t>(world)) / static_cast<std::size_t>(world);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(layout.shard_numel(r), per_rank);
      EXPECT_EQ(layout.bytes(r), per_rank * 4);
      EXPECT_EQ(layout.owned_numel(r) + layout.padding(r), per_rank);
    }
  }
}

TEST(Layouts, PerParameterPadsTheTailOfEachParameter) {
  const auto params = numbered({10, 1, 0});
  const auto layout = zero::make_layout(zero::PerParameter{}, params, 4);
  // chunks of 3 and 1 elements: p0 is [0,3) [3,6) [6,9) [9,10)+2 padding, p1 is on rank 0 only.
  EXPECT_EQ(layout.layer(0).block_numel, 4u);
  EXPECT_EQ(layout.segments(0)[3], (Segment{0, 3, 9, 0, 1}));
  EXPECT_EQ(layout.segments(1).size(), 1u);
  EXPECT_EQ(layout.locate(1, 0), (zero::Location{0, 3}));
  EXPECT_EQ(layout.padding(0), 0u);
  EXPECT_EQ(layout.padding(3), 3u);
  EXPECT_FALSE(layout.element_at(3, 1).has_value());
  EXPECT_FALSE(layout.layer_offset(0).has_value()); // its chunks are 1 element apart
  EXPECT_EQ(layout.flat_offset(layout.segments(0)[1]), 4u);
}

TEST(Layouts, GreedyMatchesPyTorchOnAKnownCase) {
  // Sorted: 9 (r0), 7 (r1), 5 (r2), 4 (r2: 5 < 7 < 9? no, r2 has 5 -> least), ...
  const auto params = numbered({4, 9, 1, 7, 5, 1});
  const auto layout = zero::make_layout(zero::WholeParameterGreedy{}, params, 3);
  // 9 -> r0 (0), 7 -> r1 (0), 5 -> r2 (0), 4 -> r2 (5), 1 -> r1 (7), 1 -> r1 (8).
  const int expected[] = {2, 0, 1, 1, 2, 1};
  for (std::size_t p = 0; p < params.size(); ++p)
    EXPECT_EQ(layout.owner(p, 0), expected[p]);
  EXPECT_EQ(layout.shard_numel(0), 9u);
  EXPECT_EQ(layout.shard_numel(1), 9u);
  EXPECT_EQ(layout.shard_numel(2), 9u);
  // Registration order within a block: rank 2 holds p0 then p4.
  EXPECT_EQ(layout.locate(0, 0), (zero::Location{2, 0}));
  EXPECT_EQ(layout.locate(4, 0), (zero::Location{2, 4}));
  EXPECT_FALSE(layout.equal_slices());
  try {
    layout.require_equal_slices("stage 3 reduce-scatter");
    FAIL() << "expected an error";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 3 reduce-scatter needs equal blocks"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("whole_parameter_greedy"), std::string::npos);
  }
}

TEST(Layouts, HashesTellParametersFromPartitions) {
  const auto params = grouped();
  const auto a = zero::make_layout(zero::FlatContiguous{.alignment = 4}, params, 3);
  const auto b = zero::make_layout(zero::FlatContiguous{.alignment = 8}, params, 3);
  const auto c = zero::make_layout(zero::FlatContiguous{.alignment = 4}, params, 2);
  EXPECT_EQ(a.parameters_hash(), b.parameters_hash());
  EXPECT_NE(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  auto renamed = params;
  renamed[3].name = "D";
  const auto d = zero::make_layout(zero::FlatContiguous{.alignment = 4}, renamed, 3);
  EXPECT_NE(a.parameters_hash(), d.parameters_hash());
  auto resized = params;
  resized[0].numel += 1;
  EXPECT_NE(a.parameters_hash(),
            zero::make_layout(zero::FlatContiguous{.alignment = 4}, resized, 3).parameters_hash());
}

// --- errors --------------------------------------------------------------------------------------

template <class F>
void expect_error(F&& f, const std::string& needle,
                  zero::ErrorKind kind = zero::ErrorKind::invalid_argument) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LayoutErrors, BadArguments) {
  const auto params = edge_sizes();
  for (int world : {0, -1}) {
    expect_error([&] { (void)zero::make_layout(zero::FlatContiguous{}, params, world); },
                 "world size must be at least 1, got " + std::to_string(world));
    expect_error([&] { (void)zero::make_layout(zero::PerParameter{}, params, world); },
                 "world size must be at least 1");
    expect_error([&] { (void)zero::make_layout(zero::WholeParameterGreedy{}, params, world); },
                 "world size must be at least 1");
  }
  expect_error([&] { (void)zero::make_layout(zero::FlatContiguous{.alignment = 0}, params, 2); },
               "flat_contiguous: alignment must be at least 1");
  expect_error([&] { (void)zero::make_layout(zero::PerParameter{.alignment = 0}, params, 2); },
               "per_parameter: alignment must be at least 1");
  auto twice = params;
  twice[7].name = "p2";
  expect_error([&] { (void)zero::make_layout(zero::FlatContiguous{}, twice, 2); },
               "parameter name 'p2' is registered twice (#2 and #7)");
  auto unnamed = numbered({1, 2});
  unnamed[0].name = unnamed[1].name = "";
  EXPECT_NO_THROW((void)zero::make_layout(zero::FlatContiguous{}, unnamed, 2));
  auto mixed = numbered({1, 2});
  mixed[1].dtype = DType::float16;
  expect_error(
      [&] { (void)zero::make_layout(zero::FlatContiguous{}, mixed, 2); },
      "layer 0 mixes element types: 'p0' (1 x float, layer 0) and 'p1' (2 x half, layer 0)");
  const auto layout = zero::make_layout(zero::FlatContiguous{}, params, 2);
  expect_error([&] { (void)layout.locate(1, 1); }, "element 1 is outside parameter 'p1'");
  expect_error([&] { (void)layout.locate(99, 0); }, "parameter #99 does not exist");
  expect_error([&] { (void)layout.shard_numel(2); }, "rank 2 is not in a world of 2");
  expect_error([&] { (void)layout.owner_of(layout.numel()); }, "outside a tensor of 1195");
  expect_error([&] { (void)layout.locate_flat(0, layout.layer(0).flat_numel); }, "flat offset");
  expect_error(
      [&] {
        (void)layout.segments_in(1, {0, 2});
      },
      "[0, 2) is not a range of the 1 elements of parameter p1");
  expect_error([&] { (void)layout.flat_segments(0, {5, 4}); }, "[5, 4) is not a range");
}

// A user partitioner that gets things wrong is stopped by LayoutBuilder::finish().
struct Faulty {
  static constexpr bool equal_slices = false;
  std::function<void(zero::LayoutBuilder&)> lay_out;
  bool claim_equal = false;
  ShardLayout partition(std::span<const ParameterSpec> params, int world) const {
    zero::LayoutBuilder b(params, world, {.policy = "faulty", .equal_slices = claim_equal});
    lay_out(b);
    return std::move(b).finish();
  }
};

TEST(LayoutErrors, UserPartitionersThatBreakTheRules) {
  const auto params = numbered({4, 3});
  auto run = [&](std::function<void(zero::LayoutBuilder&)> f, bool claim_equal = false) {
    return [=] { (void)Faulty{f, claim_equal}.partition(params, 2); };
  };
  expect_error(
      run([](auto& b) {
        b.begin_layer(0);
        b.place(0, 0, 0, 3);
        b.place(1, 1, 0, 3);
      }),
      "partitioner faulty left elements [3, 4) of 'p0' (4 x float, layer 0) without an owner");
  expect_error(run([](auto& b) {
                 b.begin_layer(0);
                 b.place(0, 0, 0, 4);
                 b.place(0, 1, 2, 2);
                 b.place(1, 1, 0, 3);
               }),
               "placed element 2 of 'p0' (4 x float, layer 0) more than once");
  expect_error(
      run(
          [](auto& b) {
            b.begin_layer(0);
            b.place(0, 0, 0, 4);
            b.place(1, 1, 0, 3);
          },
          true),
      "promises equal slices, but in layer 0 rank 0's block has 4 elements and rank 1's has 3");
  expect_error(run([](auto&) {}), "laid out 0 of 1 layers; layer 0 was never begun");
  expect_error(run([](auto& b) { b.place(0, 0, 0, 4); }), "before beginning a layer");
  expect_error(run([](auto& b) {
                 b.begin_layer(0);
                 b.place(0, 2, 0, 4);
               }),
               "used rank 2 in a world of 2");
  expect_error(run([](auto& b) {
                 b.begin_layer(0);
                 b.place(0, 0, 2, 3);
               }),
               "placed elements [2, 5) of 'p0'");
  expect_error(run([](auto& b) { b.begin_layer(1); }),
               "began layer index 1 but layer index 0 is next");
}

TEST(LayoutErrors, ParametersPlacedOutsideTheirLayer) {
  std::vector<ParameterSpec> params{{"x", 2, DType::float32, 0}, {"y", 2, DType::float32, 1}};
  Faulty faulty{[](zero::LayoutBuilder& b) {
    b.begin_layer(0);
    b.place(1, 0, 0, 2);
  }};
  expect_error([&] { (void)faulty.partition(params, 1); },
               "placed 'y' (2 x float, layer 1) while laying out layer 0");
}

// --- verification on one rank and with a communicator that only reduces -------------------------

TEST(LayoutAgreement, OneRankBuildErrorsAreRethrownWithTheirKind) {
  zero::SelfCommunicator comm;
  auto twice = numbered({1, 1});
  twice[1].name = "p0";
  expect_error([&] { (void)zero::make_layout(comm, zero::FlatContiguous{}, twice); },
               "building the shard layout failed on rank 0: shard layout: parameter name 'p0' is "
               "registered twice");
  const auto layout = zero::make_layout(comm, zero::PerParameter{}, edge_sizes());
  EXPECT_EQ(layout.world_size(), 1);
  EXPECT_NO_THROW(zero::verify_layout(comm, layout));
}

TEST(LayoutAgreement, ReduceOnlyCommunicatorsWorkWhereThePolicyAllows) {
  zero::testing::ReduceOnlyCommunicator comm;
  const auto params = grouped();
  zero::ShardedTensor<float, zero::Replicated> tensor(comm, params);
  std::vector<float> full(tensor.numel());
  for (std::size_t i = 0; i < full.size(); ++i)
    full[i] = static_cast<float>(i) + 0.5f;
  tensor.reduce_scatter_from(comm, full, zero::ReduceOp::avg).wait();
  std::vector<float> back(full.size());
  tensor.gather_into(comm, back).wait();
  EXPECT_EQ(back, full);
  std::vector<float> out(full.size());
  tensor.gather_to(comm, out).wait();
  EXPECT_EQ(out, full);
  // Grouped parameters are out of registration order in the layout, so the slice is not `full`.
  EXPECT_FALSE(tensor.padded_in_order());
  EXPECT_EQ(tensor.bytes_resident(), full.size() * sizeof(float));

  zero::ShardedTensor<float, zero::Sharded<zero::PerParameter>> sharded(comm, params);
  sharded.reduce_scatter_from(comm, full).wait();
  const auto layout = sharded.layout();
  for (const Segment& s : layout.rank_segments(0))
    EXPECT_EQ(sharded.local()[s.shard_offset],
              full[layout.element_range(s.parameter).begin + s.parameter_offset]);

  auto twice = numbered({1, 1});
  twice[1].name = "p0";
  expect_error([&] { (void)zero::make_layout(comm, zero::FlatContiguous{}, twice); },
               "building the shard layout failed on at least one rank, this one: shard layout: "
               "parameter name 'p0'");
}

} // namespace
