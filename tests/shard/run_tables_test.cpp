// Run tables (zero/core/run_table.hpp): the checks made when a table is built and when it is used,
// and LayerImages' packing and unpacking tables, which give the images the layout's segments
// describe through convert_runs and accumulate_runs on HostThreads and, queued, on HostStreamSpace,
// for every layout policy at world sizes 1 to 4, whole layers and pieces of them, float and half.

#include <zero/core/execution_space.hpp>
#include <zero/core/half.hpp>
#include <zero/core/host_stream_space.hpp>
#include <zero/core/run_table.hpp>
#include <zero/shard.hpp>
#include <zero/shard/layer_images.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <exception>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace run_tables_test {

using zero::CopyRun;
using zero::RunTable;

testing::AssertionResult throws_naming(const auto& f, const std::string& part) {
  try {
    f();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(part) != std::string::npos) return testing::AssertionSuccess();
    return testing::AssertionFailure() << "'" << e.what() << "' does not name '" << part << "'";
  }
  return testing::AssertionFailure() << "nothing thrown";
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(RunTables, KnowTheirExtentsAndRefuseOverlappingDestinations) {
  const std::vector<CopyRun> runs{{4, 0, 3}, {CopyRun::zeros, 3, 2}, {0, 10, 1}, {9, 7, 0}};
  const RunTable<> table(runs);
  EXPECT_EQ(table.size(), 3u); // the empty run is dropped
  EXPECT_EQ(table.elements(), 6u);
  EXPECT_EQ(table.source_extent(), 7u);
  EXPECT_EQ(table.destination_extent(), 11u);
  EXPECT_TRUE(throws_naming(
      [] {
        RunTable<>(std::vector<CopyRun>{{0, 0, 4}, {8, 3, 2}});
      },
      "two runs write destination element 3"));
  // A device table cuts long runs so that one kernel block never takes a whole layer.
  EXPECT_LT(RunTable<zero::cuda>::longest_run, std::size_t{1} << 20);
}

TEST(RunTables, KernelsFollowTheRunsAndCheckTheViewsAtTheCall) {
  const std::vector<CopyRun> runs{{4, 0, 3}, {CopyRun::zeros, 3, 2}, {0, 5, 1}};
  const RunTable<> table(runs);
  std::vector<float> from{0, 1, 2, 3, 4, 5, 6};
  std::vector<float> to(6, -1.0f);
  zero::convert_runs(zero::HostThreads{}, zero::View<const float>(from), zero::View<float>(to),
                     table);
  EXPECT_EQ(to, (std::vector<float>{4, 5, 6, 0, 0, 0}));
  zero::accumulate_runs(zero::HostThreads{}, zero::View<const float>(from), zero::View<float>(to),
                        table);
  EXPECT_EQ(to, (std::vector<float>{8, 10, 12, 0, 0, 0})); // zero runs add nothing

  std::vector<float> short_destination(5);
  const auto too_short = [&] {
    zero::convert_runs(zero::HostThreads{}, zero::View<const float>(from),
                       zero::View<float>(short_destination), table);
  };
  EXPECT_TRUE(throws_naming(too_short, "convert_runs: the run table reads 7 and writes 6 "
                                       "elements, but the source has 7 and the destination 5"));
  zero::HostStream stream("runs");
  const zero::HostStreamSpace space(stream);
  const auto queued_too_short = [&] {
    zero::accumulate_runs(space, zero::View<const float>(from).first(6), zero::View<float>(to),
                          table);
  };
  EXPECT_TRUE(throws_naming(queued_too_short, "accumulate_runs: the run table reads 7"));
  space.fence(); // nothing was queued
}

struct Policy {
  std::string name;
  std::function<zero::ShardLayout(const std::vector<zero::ParameterSpec>&, int)> make;
};

std::vector<Policy> policies() {
  return {{"flat",
           [](const auto& p, int w) {
             return zero::make_layout(zero::FlatContiguous{.alignment = 16}, p, w);
           }},
          {"per_parameter",
           [](const auto& p, int w) { return zero::make_layout(zero::PerParameter{}, p, w); }},
          {"greedy", [](const auto& p, int w) {
             return zero::make_layout(zero::WholeParameterGreedy{}, p, w);
           }}};
}

std::vector<zero::ParameterSpec> parameters() {
  std::vector<zero::ParameterSpec> params;
  const std::size_t sizes[] = {0, 1, 2, 3, 5, 7, 13, 31, 101, 1031, 1, 40000};
  for (std::size_t i = 0; i < std::size(sizes); ++i)
    params.push_back({"p" + std::to_string(i), sizes[i], zero::DType::float32, int(i % 3)});
  return params;
}

// Layer l's image built from the layout's segments alone (not LayerImages' runs): each rank's
// segment of a parameter at its flat offset, zeros elsewhere.
std::vector<float> reference_image(const zero::ShardLayout& layout, std::size_t l,
                                   const std::vector<float>& ordered) {
  std::vector<float> image(layout.layer(l).flat_numel, 0.0f);
  std::vector<std::size_t> begin(layout.parameter_count(), 0);
  std::size_t at = 0;
  for (std::size_t p : layout.layer_parameters(l)) {
    begin[p] = at;
    at += layout.parameter(p).numel;
  }
  for (int r = 0; r < layout.world_size(); ++r)
    for (const zero::Segment& s : layout.rank_segments(r))
      if (layout.layer_of(s.parameter) == l)
        for (std::size_t i = 0; i < s.length; ++i)
          image[layout.flat_offset(s) + i] = ordered[begin[s.parameter] + s.parameter_offset + i];
  return image;
}

// Packs and unpacks every layer (whole, and a piece at an offset) through tables on `exec`, against
// LayerImages::pack/unpack on the host.
template <class Exec>
void check_tables(const Exec& exec) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  for (const Policy& policy : policies())
    for (int world = 1; world <= 4; ++world) {
      const zero::ShardLayout layout = policy.make(parameters(), world);
      const zero::LayerImages images(layout);
      for (std::size_t l = 0; l < layout.layer_count(); ++l) {
        SCOPED_TRACE(policy.name + ", world " + std::to_string(world) + ", layer " +
                     std::to_string(l));
        const std::size_t numel = layout.layer(l).numel;
        const std::size_t flat = layout.layer(l).flat_numel;
        std::vector<float> ordered(numel);
        for (float& x : ordered)
          x = value(rng);
        // A piece of the image, packed at an offset into a larger buffer.
        const zero::Range piece{flat / 3, flat - flat / 5};
        const std::size_t at = 11;
        std::vector<CopyRun> pack_runs, unpack_runs;
        images.append_pack_runs(l, piece, at, pack_runs);
        images.append_unpack_runs(l, piece, at, 0, unpack_runs);
        const RunTable<> pack_table(pack_runs), unpack_table(unpack_runs);

        const std::vector<float> reference = reference_image(layout, l, ordered);
        std::vector<zero::half> expected(at + piece.size(), zero::half(9.0f));
        for (std::size_t i = piece.begin; i < piece.end; ++i)
          expected[at + i - piece.begin] = zero::half(reference[i]);
        std::vector<zero::half> packed(at + piece.size(), zero::half(9.0f));
        zero::convert_runs(exec, zero::View<const float>(ordered), zero::View<zero::half>(packed),
                           pack_table);
        exec.fence();
        EXPECT_TRUE(same_bits(packed, expected));

        // Unpacked, the piece's elements come back (as half), the rest stay as they were.
        std::vector<float> expected_back(numel, 5.0f), back(numel, 5.0f);
        std::vector<float> marked(numel);
        for (std::size_t i = 0; i < numel; ++i)
          marked[i] = float(i + 1); // 0 marks padding
        const std::vector<float> where = reference_image(layout, l, marked);
        for (std::size_t i = piece.begin; i < piece.end; ++i)
          if (where[i] != 0.0f)
            expected_back[std::size_t(where[i]) - 1] = float(zero::half(reference[i]));
        zero::convert_runs(exec, zero::View<const zero::half>(packed), zero::View<float>(back),
                           unpack_table);
        exec.fence();
        EXPECT_TRUE(same_bits(back, expected_back));

        // The whole layer in float, both ways, and accumulated.
        std::vector<CopyRun> whole_pack, whole_unpack;
        images.append_pack_runs(l, zero::Range{0, flat}, 0, whole_pack);
        images.append_unpack_runs(l, zero::Range{0, flat}, 0, 0, whole_unpack);
        const RunTable<> pack_all(whole_pack), unpack_all(whole_unpack);
        EXPECT_EQ(pack_all.elements(), flat); // padding included
        EXPECT_EQ(unpack_all.elements(), numel);
        std::vector<float> image(flat, 9.0f);
        zero::convert_runs(exec, zero::View<const float>(ordered), zero::View<float>(image),
                           pack_all);
        std::vector<float> sums(numel, 1.0f);
        zero::accumulate_runs(exec, zero::View<const float>(image), zero::View<float>(sums),
                              unpack_all);
        exec.fence();
        EXPECT_TRUE(same_bits(image, reference));
        std::vector<float> sums_expected(numel);
        for (std::size_t i = 0; i < numel; ++i)
          sums_expected[i] = 1.0f + ordered[i];
        EXPECT_TRUE(same_bits(sums, sums_expected));
      }
    }
}

TEST(LayerImageTables, GiveThePackingBitsInline) {
  check_tables(zero::HostThreads{});
}

TEST(LayerImageTables, GiveThePackingBitsQueuedOnAHostStream) {
  zero::HostStream stream("tables");
  check_tables(zero::HostStreamSpace(stream));
}

} // namespace run_tables_test
