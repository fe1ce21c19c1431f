// Checkpoints on a file system that fills up (a 16 MiB ext4 image on a loop device, mounted for the
// test; skipped with the reason where mounting is not allowed). At every amount of free space from
// none to enough, 4 KiB apart, a save either completes or fails on every rank with an error that
// names the path and "No space left on device"; a failed save leaves nothing under the new tag's
// name and no temporary behind, DIR/latest still names the previous checkpoint, whose files keep
// their bytes; training goes on, and resumes bitwise from either checkpoint. With several ranks,
// some amounts leave room for some ranks' state files and not for the others'. A background save
// fails alike; zero-checkpoint's consolidation into a full file system leaves no partial file.

#include "checkpoint_scenario.hpp"
#include "small_file_system.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace zero::testing::checkpoints;
using zero::testing::SmallFileSystem;

constexpr std::size_t KiB = 1024;

// Rank 0 mounts the file system (the ranks share the machine, and so the mount); every rank learns
// whether it could. Unmounted once every rank is done with it.
struct SharedSmallFileSystem {
  MpiCommunicator* world;
  std::unique_ptr<SmallFileSystem> fs; // rank 0's
  fs::path path;
  bool mounted = false;
  std::string skip_reason = "rank 0 could not mount the test's file system";

  SharedSmallFileSystem(MpiCommunicator& w, const fs::path& scratch) : world(&w) {
    std::vector<std::int64_t> ok{0};
    if (w.rank() == 0) {
      fs = std::make_unique<SmallFileSystem>(16, scratch);
      ok[0] = fs->mounted() ? 1 : 0;
      skip_reason = fs->skip_reason();
    }
    w.broadcast(ok, 0).wait();
    mounted = ok[0] == 1;
    path = scratch / "mnt";
  }
  ~SharedSmallFileSystem() {
    world->barrier();
    fs.reset();
  }
  // Rank 0 fills the file system up to `free` bytes left; every rank waits for it.
  void leave_free(std::size_t free) {
    world->barrier();
    if (fs) {
      const std::size_t left = fs->leave_free(free);
      // A filler that fell short would let a save pass that should have met a full disk.
      EXPECT_LE(left, free + 16 * KiB) << "the filler left " << left << " bytes free, not " << free;
    }
    world->barrier();
  }
  void release() {
    world->barrier();
    if (fs) fs->release_filler();
    world->barrier();
  }
};

// Whether a check failed on any rank: the ranks stop together, never one alone (which would
// leave the others waiting in a collective).
bool failed_anywhere() {
  std::vector<std::int64_t> failed{::testing::Test::HasFailure() ? 1 : 0};
  zero::testing::world().all_reduce(failed, zero::ReduceOp::max).wait();
  return failed[0] != 0;
}

// Every file under `dir` and its bytes.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) {
      std::ifstream in(entry.path(), std::ios::binary);
      files[fs::relative(entry.path(), dir).string()] =
          std::string(std::istreambuf_iterator<char>(in), {});
    }
  return files;
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.insert(entry.path().filename().string());
  return names;
}

// Saves `tag` into `ckpt` with 0, 4, 8, ... KiB free until it succeeds. Each failure must be clean:
// the checks above, on the directory as rank 0 sees it once every rank has failed. Returns the
// files the failures named (relative to `ckpt`), to show which steps of a save were hit.
template <class E>
std::set<std::string> save_as_space_grows(E& engine, SharedSmallFileSystem& small,
                                          const fs::path& ckpt, const std::string& tag,
                                          const zero::CheckpointOptions& options,
                                          const std::string& previous) {
  auto& world = zero::testing::world();
  const auto kept = files_of(ckpt / previous);
  const auto names = names_in(ckpt);
  const std::regex named(
      std::regex_replace(ckpt.string(), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
      R"(/([^: ]+): No space left on device)");
  std::set<std::string> hit;
  for (std::size_t free = 0;; free += 4 * KiB) {
    if (free > std::size_t(4) << 20) {
      ADD_FAILURE() << "the save of " << tag << " fails with 4 MiB free";
      break;
    }
    small.leave_free(free);
    try {
      engine.save_checkpoint(ckpt, tag, options);
      break;
    } catch (const zero::Error& error) {
      const std::string what = error.what();
      std::smatch m;
      if (std::regex_search(what, m, named))
        hit.insert(m[1].str());
      else
        ADD_FAILURE() << "with " << free << " bytes free, the error names no path under " << ckpt
                      << " with the reason 'No space left on device': " << what;
    }
    world.barrier();
    if (world.rank() == 0) {
      EXPECT_EQ(zero::checkpoint::latest_tag(ckpt), previous) << "with " << free << " bytes free";
      EXPECT_EQ(names_in(ckpt), names) << "with " << free << " bytes free, a failed save of " << tag
                                       << " left something in " << ckpt;
      EXPECT_TRUE(files_of(ckpt / previous) == kept)
          << "with " << free << " bytes free, the files of " << previous << " changed";
    }
    if (failed_anywhere()) break; // one account of what went wrong is enough
  }
  if (world.rank() == 0) {
    std::cout << "saving " << tag << " failed cleanly at:";
    for (const auto& file : hit)
      std::cout << ' ' << file;
    std::cout << '\n';
  }
  return hit;
}

using E = Engine<zero::Stage<2>>;
constexpr int k = 2;

TEST(CheckpointDiskFull, EveryAmountOfFreeSpaceFailsCleanlyOrSaves) {
  auto& world = zero::testing::world();
  const int rank = world.rank(), ranks = world.size();
  SharedDir dir(world);
  SharedSmallFileSystem small(world, dir.path / "fs");
  if (!small.mounted) GTEST_SKIP() << small.skip_reason;
  const fs::path ckpt = small.path / "ckpt";

  std::vector<std::vector<float>> straight;
  {
    auto e = make<E>(world, DType::float32);
    initialise(e);
    train(e, 0, 2 * k, rank, ranks);
    straight = weights(e);
  }
  const zero::CheckpointOptions options{.user_state = std::vector<std::byte>(10000, std::byte{7})};
  auto e = make<E>(world, DType::float32);
  initialise(e);
  train(e, 0, k, rank, ranks);
  e.save_checkpoint(ckpt, "good", options);
  // A new tag, then the same tag again over the latest (DIR/latest moves twice there).
  const auto hit = save_as_space_grows(e, small, ckpt, "next", options, "good");
  ASSERT_FALSE(failed_anywhere());
  EXPECT_TRUE(std::any_of(hit.begin(), hit.end(), [](const std::string& f) {
    return f.find("states.rank") != f.npos;
  })) << "no failure in a state file";
  train(e, k, k + 1, rank, ranks);
  save_as_space_grows(e, small, ckpt, "next", options, "next");
  ASSERT_FALSE(failed_anywhere());
  small.release();
  EXPECT_EQ(zero::checkpoint::latest_tag(ckpt), "next");

  // Failed saves changed nothing in the engine: it goes on as if none had been tried.
  train(e, k + 1, 2 * k, rank, ranks);
  expect_bitwise(straight, weights(e), "training on after failed saves");
  {
    auto f = make<E>(world, DType::float32);
    EXPECT_EQ(f.load_checkpoint(ckpt, "good").tag, "good");
    train(f, k, 2 * k, rank, ranks);
    expect_bitwise(straight, weights(f), "resumed from the checkpoint before the full disk");
  }
  {
    auto f = make<E>(world, DType::float32);
    EXPECT_EQ(f.load_checkpoint(ckpt).tag, "next");
    train(f, k + 1, 2 * k, rank, ranks);
    expect_bitwise(straight, weights(f), "resumed from the checkpoint saved once space was free");
  }
}

TEST(CheckpointDiskFull, ABackgroundSaveThatRunsOutOfSpaceFailsOnEveryRank) {
  auto& world = zero::testing::world();
  const int rank = world.rank(), ranks = world.size();
  SharedDir dir(world);
  SharedSmallFileSystem small(world, dir.path / "fs");
  if (!small.mounted) GTEST_SKIP() << small.skip_reason;
  const fs::path ckpt = small.path / "ckpt";
  auto e = make<E>(world, DType::float32);
  initialise(e);
  e.save_checkpoint(ckpt, "good");
  const auto kept = files_of(ckpt / "good");
  small.leave_free(8 * KiB); // the new directory fits, the state files do not
  e.save_checkpoint(ckpt, "async", {.async = true});
  train(e, 0, 1, rank, ranks); // while the states are written
  try {
    e.wait_for_checkpoint();
    ADD_FAILURE() << "a background save into a full file system succeeded";
  } catch (const zero::Error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("writing the state files of the checkpoint " + (ckpt / "async").string()),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("states.rank"), std::string::npos) << what;
    EXPECT_NE(what.find(": No space left on device"), std::string::npos) << what;
  }
  world.barrier();
  if (rank == 0) {
    EXPECT_EQ(zero::checkpoint::latest_tag(ckpt), "good");
    EXPECT_EQ(names_in(ckpt), (std::set<std::string>{"good", "latest"}));
    EXPECT_TRUE(files_of(ckpt / "good") == kept);
  }
  small.release();
  e.save_checkpoint(ckpt, "after");
  EXPECT_EQ(zero::checkpoint::latest_tag(ckpt), "after");
}

// A save over the latest tag that stopped after the directories swapped and before DIR/latest was
// pointed back at TAG (killed there; the old code's full disk failed there too): DIR/latest names
// .TAG.partial, now gone. A reader follows it to TAG; the next save finishes the swap and removes
// what killed saves left (their directories may hold much of a full disk).
TEST(CheckpointDiskFull, WhatAnInterruptedSaveLeftIsFollowedThenRemoved) {
  auto& world = zero::testing::world();
  SharedDir dir(world);
  const fs::path ckpt = dir.path / "ckpt";
  auto e = make<E>(world, DType::float32);
  initialise(e);
  e.save_checkpoint(ckpt, "t");
  const std::set<std::string> leftovers{".old.partial", ".t.replaced", ".latest.next",
                                        ".latest.swap.tmp", "latest.tmp"};
  world.barrier();
  if (world.rank() == 0) {
    std::ofstream(ckpt / "latest") << ".t.partial\n";
    for (const auto& name : leftovers)
      if (name.ends_with(".partial") || name.ends_with(".replaced")) {
        fs::create_directory(ckpt / name);
        std::ofstream(ckpt / name / "states.rank0.bin") << "part of a killed save";
      } else {
        std::ofstream(ckpt / name) << "t\n";
      }
  }
  world.barrier();
  auto f = make<E>(world, DType::float32);
  EXPECT_EQ(f.load_checkpoint(ckpt).path, ckpt / "t");
  f.save_checkpoint(ckpt, "u");
  if (world.rank() == 0) {
    EXPECT_EQ(names_in(ckpt), (std::set<std::string>{"t", "u", "latest"}));
    EXPECT_EQ(zero::checkpoint::latest_tag(ckpt), "u");
  }
}

// zero-checkpoint consolidate (ZERO_CHECKPOINT_TOOL names it; CMake sets it) into a full file
// system: exit status 1, the path and the reason, and no file under the final name or temporary.
TEST(CheckpointDiskFull, ConsolidationIntoAFullFileSystemLeavesNoPartialFile) {
  const char* tool = std::getenv("ZERO_CHECKPOINT_TOOL");
  if (!tool)
    GTEST_SKIP() << zero::testing::not_applicable
                 << "ZERO_CHECKPOINT_TOOL is not set (the tools are not built)";
  auto& world = zero::testing::world();
  SharedDir dir(world);
  SharedSmallFileSystem small(world, dir.path / "fs");
  if (!small.mounted) GTEST_SKIP() << small.skip_reason;
  {
    auto e = make<E>(world, DType::float32);
    initialise(e);
    e.save_checkpoint(dir.path / "ckpt", "saved");
  }
  small.leave_free(8 * KiB);
  if (world.rank() != 0) return;
  for (const char* target : {"out.safetensors", "npy"}) {
    const fs::path to = small.path / target;
    const std::string command = std::string(tool) + " consolidate " + (dir.path / "ckpt").string() +
                                " --moments --to " + to.string() + " 2>&1";
    std::FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, pipe))
      output += buffer;
    const int status = ::pclose(pipe);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << command << ":\n" << output;
    EXPECT_NE(output.find(to.string()), std::string::npos) << output;
    EXPECT_NE(output.find("No space left on device"), std::string::npos) << output;
    std::set<std::string> left;
    for (const auto& entry : fs::recursive_directory_iterator(small.path))
      if (entry.path().extension() == ".partial" || entry.path().extension() == ".tmp")
        left.insert(entry.path().string());
    EXPECT_TRUE(left.empty()) << "left behind: " << *left.begin();
    if (fs::is_regular_file(to)) ADD_FAILURE() << to << " was left on a failed consolidation";
  }
}

} // namespace
