// Checkpoints through the engine: resuming equals not stopping (bitwise, every stage and
// precision, Adam and LAMB), loading at another world size, stage or partitioner gives back exactly
// the saved states, asynchronous saves, and every kind of bad checkpoint named.
// The engines of Stage<S> are the prebuilt ones (checkpoint_scenario.hpp), linked from
// zero::engines where it is built; the one with another partitioner is compiled here.

#include "checkpoint_scenario.hpp"

#include <zero/checkpoint/reshard.hpp>
#include <zero/engine/engine.hpp>
#include <zero/engines.hpp>
#include <zero/optim/adam.hpp>
#include <zero/optim/lamb.hpp>
#include <zero/optim/sgd.hpp>
#include <zero/shard/per_parameter.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace zero::testing::checkpoints;

// 2K steps in one go, and K + save + load into a new engine + K, agree bitwise.
template <class Plan, class Opt = zero::Adam>
void expect_resume_is_bitwise(DType dtype,
                              zero::AnyLossScaler scaler = default_scaler<zero::AnyLossScaler>(),
                              Run run = {}, zero::EngineOptions options = {}) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  constexpr int k = 3;
  using E = Engine<Plan, Opt>;
  std::vector<std::vector<float>> straight, resumed;
  zero::LossScalerState straight_scaler, resumed_scaler;
  {
    auto e = make<E>(world, dtype, scaler, options);
    initialise(e);
    train(e, 0, k, world.rank(), world.size(), run);
    e.save_checkpoint(dir.path, "step3");
    train(e, k, 2 * k, world.rank(), world.size(), run);
    straight = weights(e);
    straight_scaler = e.scaler().state();
  }
  {
    auto e = make<E>(world, dtype, scaler, options); // a fresh engine, as a new process would
    const auto loaded = e.load_checkpoint(dir.path);
    EXPECT_EQ(loaded.tag, "step3");
    train(e, k, 2 * k, world.rank(), world.size(), run);
    resumed = weights(e);
    resumed_scaler = e.scaler().state();
  }
  expect_bitwise(straight, resumed, "resumed run");
  EXPECT_EQ(straight_scaler.scale, resumed_scaler.scale);
  EXPECT_EQ(straight_scaler.iteration, resumed_scaler.iteration);
  EXPECT_EQ(straight_scaler.hysteresis_left, resumed_scaler.hysteresis_left);
}

// LAMB keeps Adam's two moments; its step count (the bias correction) comes back too.
TEST(Checkpoint, LambResumesBitwise) {
  expect_resume_is_bitwise<zero::Stage<0>, zero::Lamb>(DType::float32);
  expect_resume_is_bitwise<zero::Stage<3>, zero::Lamb>(DType::bfloat16);
}

TEST(Checkpoint, ResumeIsBitwiseAtEveryStageInFp32) {
  expect_resume_is_bitwise<zero::Stage<0>>(DType::float32);
  expect_resume_is_bitwise<zero::Stage<1>>(DType::float32);
  expect_resume_is_bitwise<zero::Stage<2>>(DType::float32);
  expect_resume_is_bitwise<zero::Stage<3>>(DType::float32);
}

TEST(Checkpoint, ResumeIsBitwiseInFp16WithTheLossScalersState) {
  // An overflow before the save leaves the scaler mid-hysteresis; one after it must be seen alike.
  for (int overflow : {1, 4}) {
    expect_resume_is_bitwise<zero::Stage<1>>(
        DType::float16, zero::AnyLossScaler(small_dynamic_scaler()), {DType::float16, overflow});
    expect_resume_is_bitwise<zero::Stage<3>>(
        DType::float16, zero::AnyLossScaler(small_dynamic_scaler()), {DType::float16, overflow});
  }
}

TEST(Checkpoint, ResumeIsBitwiseInBf16) {
  expect_resume_is_bitwise<zero::Stage<2>>(DType::bfloat16);
  expect_resume_is_bitwise<zero::Stage<3>>(DType::bfloat16);
}

// Saved by all ranks at stage 1, loaded by groups of 1 and (with 3 ranks) 2 ranks at stages 0 and
// 3 with another partitioner: every master weight and moment comes back bitwise, and training
// goes on.
template <class LoadPlan>
void expect_reshard(const fs::path& saved, MpiCommunicator& group, const std::string& tag) {
  auto e = make<Engine<LoadPlan>>(group, DType::float32);
  const auto loaded = e.load_checkpoint(saved);
  EXPECT_EQ(loaded.saved_world_size, zero::testing::world().size());
  e.save_checkpoint(saved.parent_path() / ("again-" + tag), "copy");
  group.barrier();
  const auto a = contents(saved), b = contents(saved.parent_path() / ("again-" + tag) / "copy");
  expect_bitwise(a, b,
                 "states after loading at " + std::to_string(group.size()) + " rank(s), " + tag);
  train(e, 3, 4, group.rank(), group.size());
}

TEST(Checkpoint, LoadsAtAnotherWorldSizeStageAndPartitioner) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  {
    auto e = make<Engine<zero::Stage<1>>>(world, DType::float32);
    initialise(e);
    train(e, 0, 3, world.rank(), world.size());
    e.save_checkpoint(dir.path / "run", "step3");
  }
  const fs::path saved = dir.path / "run" / "step3";
  // Groups: {0} alone, and the rest together (two ranks when there are three).
  MpiCommunicator group = world.split(world.rank() == 0 ? 0 : 1, world.rank());
  using PerParameter3 =
      zero::ShardingPlan<zero::shard_optimizer_states, zero::shard_gradients,
                         zero::shard_parameters, zero::partition_with<zero::PerParameter>>;
  const std::string side = world.rank() == 0 ? "a" : "b";
  expect_reshard<zero::Stage<0>>(saved, group, "stage0-" + side);
  expect_reshard<PerParameter3>(saved, group, "stage3-" + side);
  expect_reshard<zero::Stage<2>>(saved, group, "stage2-" + side);
}

// 8-bit moments (layers 2 and 4 of the scenario's model; the others keep fp32 ones) are saved as
// their codes and scales, read back as fp32 values and quantized again when loaded, into the same
// codes and scales.
zero::EngineOptions eight_bit_moments() {
  zero::EngineOptions options;
  options.moments = zero::MomentStorage::blockwise_8bit;
  options.eight_bit_min_elements = 1000;
  return options;
}

TEST(Checkpoint, EightBitMomentsResumeBitwise) {
  const auto scaler = default_scaler<zero::AnyLossScaler>();
  expect_resume_is_bitwise<zero::Stage<1>>(DType::float32, scaler, {}, eight_bit_moments());
  expect_resume_is_bitwise<zero::Stage<3>>(DType::bfloat16, scaler, {}, eight_bit_moments());
}

// Saved at stage 1 by all ranks, loaded by groups of 1 and 2 ranks at stages 0 and 2: the states
// come back bitwise (saved again, the files hold the same values). Loaded with fp32 moments they
// are the same values; an fp32-moment checkpoint loaded with 8-bit moments loses at most half a
// step of the dynamic map (under 1% of the largest moment) and keeps the master weights.
TEST(Checkpoint, EightBitMomentsLoadAtAnotherWorldSizeAndStage) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  const auto scaler = default_scaler<zero::AnyLossScaler>();
  for (const bool eight_bit : {true, false}) {
    auto e = make<Engine<zero::Stage<1>>>(world, DType::float32, scaler,
                                          eight_bit ? eight_bit_moments() : zero::EngineOptions{});
    initialise(e);
    train(e, 0, 3, world.rank(), world.size());
    e.save_checkpoint(dir.path / (eight_bit ? "q" : "f"), "step3");
  }
  MpiCommunicator group = world.split(world.rank() == 0 ? 0 : 1, world.rank());
  const std::string side = world.rank() == 0 ? "a" : "b";
  const auto load_and_save = [&]<class Plan>(const fs::path& from, zero::EngineOptions options,
                                             const std::string& tag) {
    auto e = make<Engine<Plan>>(group, DType::float32, scaler, options);
    e.load_checkpoint(from);
    const fs::path again = dir.path / ("again-" + tag + "-" + side);
    e.save_checkpoint(again, "copy");
    group.barrier();
    train(e, 3, 4, group.rank(), group.size());
    return contents(again / "copy");
  };
  const fs::path q = dir.path / "q" / "step3", f = dir.path / "f" / "step3";
  const auto saved = contents(q);
  expect_bitwise(saved, load_and_save.operator()<zero::Stage<0>>(q, eight_bit_moments(), "s0"),
                 "8-bit moments loaded at stage 0");
  expect_bitwise(saved, load_and_save.operator()<zero::Stage<2>>(q, eight_bit_moments(), "s2"),
                 "8-bit moments loaded at stage 2");
  expect_bitwise(saved, load_and_save.operator()<zero::Stage<2>>(q, {}, "fp32"),
                 "8-bit moments loaded as fp32 ones");

  const auto exact = contents(f);
  const auto converted = load_and_save.operator()<zero::Stage<2>>(f, eight_bit_moments(), "conv");
  const std::size_t parameters = exact.size() / 3; // master weights, exp_avg, exp_avg_sq
  expect_bitwise(std::vector(exact.begin(), exact.begin() + std::ptrdiff_t(parameters)),
                 std::vector(converted.begin(), converted.begin() + std::ptrdiff_t(parameters)),
                 "master weights of a converted checkpoint");
  for (std::size_t moment = 1; moment <= 2; ++moment) {
    float largest = 0, error = 0;
    bool changed = false;
    for (std::size_t p = moment * parameters; p < (moment + 1) * parameters; ++p)
      for (std::size_t i = 0; i < exact[p].size(); ++i) {
        largest = std::max(largest, std::fabs(exact[p][i]));
        error = std::max(error, std::fabs(exact[p][i] - converted[p][i]));
        changed = changed || exact[p][i] != converted[p][i];
      }
    EXPECT_TRUE(changed) << "moment " << moment << " was not quantized";
    EXPECT_LE(error, 0.01f * largest) << "moment " << moment;
  }
}

// Split masters (EngineOptions::master) are saved as the fp32 masters they stand for; splitting
// them again on a load gives back the same compute weights and residuals.
zero::EngineOptions split_masters(zero::MasterStorage master) {
  zero::EngineOptions options;
  options.master = master;
  return options;
}

TEST(Checkpoint, SplitMastersResumeBitwise) {
  const auto scaler = default_scaler<zero::AnyLossScaler>();
  expect_resume_is_bitwise<zero::Stage<1>>(DType::bfloat16, scaler, {},
                                           split_masters(zero::MasterStorage::split_16bit));
  zero::EngineOptions both = split_masters(zero::MasterStorage::split_8bit);
  both.moments = zero::MomentStorage::blockwise_8bit;
  both.eight_bit_min_elements = 1000;
  expect_resume_is_bitwise<zero::Stage<3>>(DType::bfloat16, scaler, {}, both);
}

// Saved at stage 1 by all ranks, loaded by groups of 1 and 2 ranks at stages 0 and 2: the same
// states (saved again, the same values); loaded with fp32 masters, the same values. An
// fp32-master checkpoint loaded with split masters keeps its moments and moves each master by at
// most one unit of its residual: 2^-8 of a bfloat16 ulp with 8 bits (2^-15 relative).
TEST(Checkpoint, SplitMastersLoadAtAnotherWorldSizeAndStage) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  const auto scaler = default_scaler<zero::AnyLossScaler>();
  const auto eight = split_masters(zero::MasterStorage::split_8bit);
  for (const bool split : {true, false}) {
    auto e = make<Engine<zero::Stage<1>>>(world, DType::bfloat16, scaler,
                                          split ? eight : zero::EngineOptions{});
    initialise(e);
    train(e, 0, 3, world.rank(), world.size());
    e.save_checkpoint(dir.path / (split ? "s" : "f"), "step3");
  }
  MpiCommunicator group = world.split(world.rank() == 0 ? 0 : 1, world.rank());
  const std::string side = world.rank() == 0 ? "a" : "b";
  const auto load_and_save = [&]<class Plan>(const fs::path& from, zero::EngineOptions options,
                                             const std::string& tag) {
    auto e = make<Engine<Plan>>(group, DType::bfloat16, scaler, options);
    e.load_checkpoint(from);
    const fs::path again = dir.path / ("again-" + tag + "-" + side);
    e.save_checkpoint(again, "copy");
    group.barrier();
    train(e, 3, 4, group.rank(), group.size());
    return contents(again / "copy");
  };
  const fs::path s = dir.path / "s" / "step3", f = dir.path / "f" / "step3";
  const auto saved = contents(s);
  expect_bitwise(saved, load_and_save.operator()<zero::Stage<0>>(s, eight, "s0"),
                 "split masters loaded at stage 0");
  expect_bitwise(saved, load_and_save.operator()<zero::Stage<2>>(s, eight, "s2"),
                 "split masters loaded at stage 2");
  expect_bitwise(saved, load_and_save.operator()<zero::Stage<2>>(s, {}, "fp32"),
                 "split masters loaded as fp32 ones");

  const auto exact = contents(f);
  const auto converted = load_and_save.operator()<zero::Stage<2>>(f, eight, "conv");
  const std::size_t parameters = exact.size() / 3; // master weights, exp_avg, exp_avg_sq
  expect_bitwise(std::vector(exact.begin() + std::ptrdiff_t(parameters), exact.end()),
                 std::vector(converted.begin() + std::ptrdiff_t(parameters), converted.end()),
                 "moments of a converted checkpoint");
  bool changed = false;
  for (std::size_t p = 0; p < parameters; ++p)
    for (std::size_t i = 0; i < exact[p].size(); ++i) {
      ASSERT_LE(std::fabs(exact[p][i] - converted[p][i]), std::fabs(exact[p][i]) * 0x1p-15f)
          << "master " << p << " element " << i;
      changed = changed || exact[p][i] != converted[p][i];
    }
  EXPECT_TRUE(changed) << "no master was rounded to its residual";
}

// The bytes of each state file of a checkpoint.
std::vector<std::vector<char>> state_file_bytes(const fs::path& checkpoint) {
  std::vector<std::vector<char>> all;
  for (const auto& f : zero::checkpoint::read_manifest(checkpoint).files) {
    std::ifstream in(checkpoint / f.name, std::ios::binary);
    all.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return all;
}

// The moments of the 8-bit layers (2 and 4) are saved as their codes and block scales (the signed
// map's for exp_avg, the unsigned one's for exp_avg_sq), those of the other layers and the master
// weights as fp32 values; the manifest says so and is of version 2 (an fp32-moment checkpoint is
// of version 1, which zero before 8-bit records reads). A background save writes the same bytes
// as one made while training waits.
TEST(Checkpoint, EightBitMomentsAreSavedInEightBits) {
  namespace ck = zero::checkpoint;
  auto& world = zero::testing::world();
  SharedDir dir(world);
  const auto scaler = default_scaler<zero::AnyLossScaler>();
  auto e = make<Engine<zero::Stage<2>>>(world, DType::float32, scaler, eight_bit_moments());
  initialise(e);
  train(e, 0, 2, world.rank(), world.size());
  e.save_checkpoint(dir.path, "sync");
  e.save_checkpoint(dir.path, "async", {.async = true});
  e.wait_for_checkpoint();
  auto f = make<Engine<zero::Stage<2>>>(world, DType::float32, scaler);
  initialise(f);
  f.save_checkpoint(dir.path, "fp32");
  world.barrier();

  EXPECT_EQ(ck::read_manifest(dir.path / "fp32").version, 1);
  const ck::Manifest m = ck::read_manifest(dir.path / "sync");
  EXPECT_EQ(m.version, 2);
  std::size_t eight_bit_records = 0, eight_bit_values = 0;
  for (int rank = 0; rank < world.size(); ++rank) {
    const ck::StateFile& file = m.files.at(std::size_t(rank));
    ASSERT_EQ(file.name, ck::state_file_name(rank));
    for (const ck::Record& r : file.records) {
      // A record is one layer's block of the saving rank (in the saving engine's layout).
      int layer = -1;
      for (std::size_t l = 0; l < e.layers(); ++l) {
        const zero::Range block = e.layout().block(l, rank);
        if (block.begin <= r.shard_begin && r.shard_begin < block.end) layer = int(l);
      }
      const bool quantized_layer = layer == 2 || layer == 4;
      const auto expected = r.tensor == 0 || !quantized_layer ? ck::RecordEncoding::fp32
                            : r.tensor == 1                   ? ck::RecordEncoding::signed_8bit
                                                              : ck::RecordEncoding::unsigned_8bit;
      EXPECT_EQ(r.encoding, expected) << file.name << ": tensor " << r.tensor << " at "
                                      << r.shard_begin << " (layer " << layer << ")";
      if (r.encoding != ck::RecordEncoding::fp32) {
        ++eight_bit_records;
        eight_bit_values += r.count;
      }
    }
  }
  EXPECT_GT(eight_bit_records, 0u);
  // The files hold 4 bytes a value, less 3 for every 8-bit one, plus a 4-byte scale per block.
  std::size_t bytes = 0, values = 0, scale_bytes = 0;
  for (const auto& file : m.files) {
    bytes += file.bytes;
    for (const auto& r : file.records) {
      values += r.count;
      if (r.encoding != ck::RecordEncoding::fp32)
        scale_bytes += zero::quantized_blocks(r.count) * sizeof(float);
    }
  }
  EXPECT_EQ(bytes, 4 * values - 3 * eight_bit_values + scale_bytes);

  EXPECT_EQ(state_file_bytes(dir.path / "sync"), state_file_bytes(dir.path / "async"));
  expect_bitwise(contents(dir.path / "sync"), contents(dir.path / "async"), "async 8-bit save");
}

TEST(Checkpoint, AsynchronousSaveEqualsASynchronousOne) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  auto e = make<Engine<zero::Stage<2>>>(world, DType::float32);
  initialise(e);
  train(e, 0, 2, world.rank(), world.size());
  e.save_checkpoint(dir.path, "sync");
  e.save_checkpoint(dir.path, "async", {.async = true});
  train(e, 2, 4, world.rank(), world.size()); // goes on while the states are written
  e.wait_for_checkpoint();
  expect_bitwise(contents(dir.path / "sync"), contents(dir.path / "async"), "async save");
  EXPECT_EQ(zero::checkpoint::latest_tag(dir.path), "async");
}

TEST(Checkpoint, AWriterThatFailsOnOneRankFailsTheSaveOnEveryRank) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  auto e = make<Engine<zero::Stage<1>>>(world, DType::float32);
  initialise(e);
  e.save_checkpoint(dir.path, "good");
  const std::string last = std::to_string(world.size() - 1);
  ::setenv("ZERO_CHECKPOINT_FAIL", ("writer:" + last).c_str(), 1);
  e.save_checkpoint(dir.path, "bad", {.async = true});
  train(e, 0, 1, world.rank(), world.size());
  try {
    e.wait_for_checkpoint();
    ADD_FAILURE() << "the failed writer was not reported";
  } catch (const zero::Error& error) {
    EXPECT_NE(std::string(error.what()).find("failed on rank " + last), std::string::npos)
        << error.what();
  }
  ::unsetenv("ZERO_CHECKPOINT_FAIL");
  world.barrier();
  EXPECT_EQ(zero::checkpoint::latest_tag(dir.path), "good");
  EXPECT_FALSE(fs::exists(dir.path / "bad"));
  // The engine goes on, and saves again.
  e.save_checkpoint(dir.path, "after");
  EXPECT_EQ(zero::checkpoint::latest_tag(dir.path), "after");
}

// Loading a damaged or foreign checkpoint fails on every rank with a message naming the problem.
template <class E, class Damage>
void expect_load_error(const fs::path& dir, Damage&& damage, const std::string& needle, E& engine) {
  auto& world = zero::testing::world();
  world.barrier();
  if (world.rank() == 0) damage();
  world.barrier();
  try {
    (void)engine.load_checkpoint(dir);
    ADD_FAILURE() << "loaded a checkpoint that should fail with: " << needle;
  } catch (const zero::Error& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
}

TEST(Checkpoint, BadCheckpointsAreNamed) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  auto e = make<Engine<zero::Stage<1>>>(world, DType::float32);
  initialise(e);
  train(e, 0, 1, world.rank(), world.size());
  const int last = world.size() - 1;
  const auto fresh = [&](const std::string& tag) {
    e.save_checkpoint(dir.path / tag, "t");
    return dir.path / tag / "t";
  };
  const auto shard = [&](const fs::path& c) { return c / zero::checkpoint::state_file_name(last); };
  {
    const auto c = fresh("missing");
    expect_load_error(
        c, [&] { fs::remove(shard(c)); }, "is missing", e);
  }
  {
    const auto c = fresh("flipped");
    expect_load_error(
        c,
        [&] {
          std::fstream f(shard(c), std::ios::in | std::ios::out | std::ios::binary);
          f.seekg(100);
          char byte = 0;
          f.read(&byte, 1);
          byte = char(byte ^ 0x10);
          f.seekp(100);
          f.write(&byte, 1);
        },
        "is corrupt", e);
  }
  {
    const auto c = fresh("truncated");
    expect_load_error(
        c, [&] { fs::resize_file(shard(c), fs::file_size(shard(c)) - 8); }, "is truncated", e);
  }
  {
    const auto c = fresh("newer");
    expect_load_error(
        c,
        [&] {
          std::ifstream in(c / "manifest.json");
          nlohmann::json j;
          in >> j;
          j["version"] = 99;
          std::ofstream(c / "manifest.json") << j.dump();
        },
        "newer than this library reads", e);
  }
  expect_load_error(
      dir.path, [] {}, "is not a checkpoint directory", e);
  {
    // Another model: one parameter renamed.
    const auto c = fresh("model");
    auto params = model();
    params[3].name = "layer1.other";
    Engine<zero::Stage<1>> other(world, params, zero::Adam(), default_scaler<zero::AnyLossScaler>(),
                                 {});
    expect_load_error(
        c, [] {}, "is of a different model: parameter #3 is 'layer1.bias' there", other);
  }
  {
    const auto c = fresh("optimizer");
    Engine<zero::Stage<1>, zero::SGD> sgd(world, model(), zero::SGD({.lr = 0.1}),
                                          default_scaler<zero::AnyLossScaler>(), {});
    expect_load_error(
        c, [] {}, "was saved by Adam, but this engine's optimizer is SGD", sgd);
  }
  // A failed load leaves the engine usable: a good checkpoint loads.
  const auto good = fresh("good");
  EXPECT_NO_THROW((void)e.load_checkpoint(good));
}

// A manifest that lists an encoding this library does not know, or 8-bit records under version 1,
// is refused by name.
TEST(Checkpoint, BadEncodingsAreNamed) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  auto e = make<Engine<zero::Stage<1>>>(world, DType::float32,
                                        default_scaler<zero::AnyLossScaler>(), eight_bit_moments());
  initialise(e);
  train(e, 0, 1, world.rank(), world.size());
  const auto edit = [&](const std::string& tag, auto&& change) {
    e.save_checkpoint(dir.path / tag, "t");
    const fs::path c = dir.path / tag / "t";
    return std::pair{c, [c, change] {
                       std::ifstream in(c / "manifest.json");
                       nlohmann::json j;
                       in >> j;
                       change(j);
                       std::ofstream(c / "manifest.json") << j.dump();
                     }};
  };
  const auto eight_bit_record = [](nlohmann::json& j) -> nlohmann::json& {
    for (auto& file : j["files"])
      for (auto& r : file["records"])
        if (r.size() == 5) return r;
    throw std::runtime_error("no 8-bit record");
  };
  {
    auto [c, damage] = edit("unknown", [&](nlohmann::json& j) { eight_bit_record(j)[4] = 7; });
    expect_load_error(c, damage, "a record's encoding 7 is none this library knows", e);
  }
  {
    auto [c, damage] = edit("old", [](nlohmann::json& j) { j["version"] = 1; });
    expect_load_error(c, damage, "version 1 holds no 8-bit records, but a file lists some", e);
  }
  {
    // As an fp32 record, the 8-bit one would run past the file's end (or over the next record).
    auto [c, damage] = edit("long", [&](nlohmann::json& j) {
      auto& r = eight_bit_record(j);
      r[2] = r[2].get<std::size_t>() * 1000;
    });
    expect_load_error(c, damage, "a record lies beyond the file's end", e);
  }
}

TEST(Checkpoint, TagsAreSavedOverSafely) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  auto e = make<Engine<zero::Stage<3>>>(world, DType::float32);
  initialise(e);
  e.save_checkpoint(dir.path, "a");
  e.save_checkpoint(dir.path, "b");
  train(e, 0, 1, world.rank(), world.size());
  e.save_checkpoint(dir.path, "b"); // the latest, replaced
  EXPECT_EQ(zero::checkpoint::latest_tag(dir.path), "b");
  const auto b = contents(dir.path / "b");
  e.save_checkpoint(dir.path, "a"); // not the latest
  EXPECT_EQ(zero::checkpoint::latest_tag(dir.path), "a");
  expect_bitwise(b, contents(dir.path / "a"), "a saved over");
  world.barrier();
  for (const auto& entry : fs::directory_iterator(dir.path))
    EXPECT_TRUE(entry.path().filename() == "a" || entry.path().filename() == "b" ||
                entry.path().filename() == "latest")
        << "left behind: " << entry.path();
  world.barrier();
  EXPECT_THROW(e.save_checkpoint(dir.path, "../x"), zero::Error);
  EXPECT_THROW(e.save_checkpoint(dir.path, "latest"), zero::Error);
  EXPECT_THROW(e.save_checkpoint(dir.path, ".hidden"), zero::Error);
}

TEST(Checkpoint, UserStateAndScheduleComeBack) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  auto e = make<Engine<zero::Stage<2>>>(world, DType::float32);
  initialise(e);
  zero::LrScheduler schedule(
      zero::WarmupLR{.warmup_min_lr = 0, .warmup_max_lr = 0.01, .warmup_num_steps = 10}, 0.01);
  for (int i = 0; i < 4; ++i)
    schedule.step();
  const std::string blob = "data position 1234, rng 0xfeed";
  std::vector<std::byte> bytes(blob.size());
  std::memcpy(bytes.data(), blob.data(), blob.size());
  e.save_checkpoint(dir.path, "s", {.user_state = bytes, .lr_scheduler = &schedule});
  zero::LrScheduler resumed(
      zero::WarmupLR{.warmup_min_lr = 0, .warmup_max_lr = 0.01, .warmup_num_steps = 10}, 0.01);
  const auto loaded = e.load_checkpoint(dir.path, "s", &resumed);
  EXPECT_EQ(resumed.last_batch_iteration(), schedule.last_batch_iteration());
  ASSERT_EQ(loaded.user_state.size(), bytes.size());
  EXPECT_EQ(std::memcmp(loaded.user_state.data(), bytes.data(), bytes.size()), 0);
}

} // namespace
