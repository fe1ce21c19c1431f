// Shared file systems (docs/reliability.md): checkpoint saving and zero-checkpoint's consolidated
// output, at 1 and 2 ranks. The checkpoint directory must be private (a directory of another user,
// or one others can write, is refused before anything is written); a link planted in a shared
// folder where the directory or an output should be is refused or replaced, never followed; links
// inside the directory (at every name a save creates, replaces or removes) are never followed.
// The swap tree and the examples' writers: shared_swap_test.cpp.

#include "shared_fs_support.hpp"

#include "../checkpoint/checkpoint_scenario.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace {

using namespace zero::testing;
using namespace zero::testing::shared_fs;
namespace ck = zero::testing::checkpoints;

// ---------------------------------------------------------------------------------------------
// Checkpoints: DIR must be private; links in it are replaced or removed, never followed.

using SaveEngine = ck::Engine<zero::Stage<2>>;

// Saves from every rank into `dir`; the error every rank agreed on, or empty.
std::string save_into(const fs::path& dir, const std::string& tag = "t") {
  auto& world = zero::testing::world();
  auto engine = ck::make<SaveEngine>(world, zero::DType::float32);
  ck::initialise(engine);
  try {
    engine.save_checkpoint(dir, tag);
  } catch (const zero::Error& e) {
    return e.what();
  }
  return {};
}

// A scratch directory every rank agrees on (a node's /tmp here), made private.
struct SharedScratch {
  ck::SharedDir dir{zero::testing::world()};
  fs::path path() const { return dir.path; }
  SharedScratch() {
    if (zero::testing::world().rank() == 0)
      fs::permissions(dir.path, fs::perms(0700), fs::perm_options::replace);
    zero::testing::world().barrier();
  }
};

// Saving into `dir` (made by rank 0 with `mode`, handed to nobody when `of_nobody`) is refused on
// every rank with the words `says`, and writes nothing.
void expect_save_refused(const fs::path& dir, fs::perms mode, const std::string& says,
                         bool of_nobody = false) {
  auto& world = zero::testing::world();
  if (world.rank() == 0) {
    fs::create_directory(dir);
    fs::permissions(dir, mode, fs::perm_options::replace);
    if (of_nobody) {
      EXPECT_EQ(::chown(dir.c_str(), nobody, nobody), 0);
    }
  }
  world.barrier();
  const std::string error = save_into(dir);
  EXPECT_NE(error.find("checkpoint directory " + dir.string() + " " + says), std::string::npos)
      << error;
  EXPECT_NE(error.find("Save into a directory only you can write"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(dir)) << "nothing may be written into " << dir;
}

TEST(SharedCheckpoints, ADirectoryOthersCanWriteIsRefused) {
  SharedScratch scratch;
  expect_save_refused(scratch.path() / "ckpt0", fs::perms(0777), "is writable by every user");
  expect_save_refused(scratch.path() / "ckpt1", fs::perms(0775), "is writable by its group");
}

// Only root can hand a directory to another user: elsewhere this skips, saying so, as the CTest
// test of its own that registers it (CAN_SKIP root, tests/faults/CMakeLists.txt).
TEST(SharedCheckpoints, ADirectoryOfAnotherUserIsRefused) {
  if (!is_root()) GTEST_SKIP() << "handing a directory to nobody needs root";
  SharedScratch scratch;
  expect_save_refused(scratch.path() / "ckpt", fs::perms(0755), "is owned by nobody (uid 65534)",
                      true);
}

TEST(SharedCheckpoints, ADirectoryPlantedAsALinkInASharedFolderIsRefused) {
  SharedScratch scratch;
  auto& world = zero::testing::world();
  const fs::path shared = scratch.path() / "shared_tmp";
  std::optional<Victims> victims;
  if (world.rank() == 0) {
    victims.emplace(scratch.path());
    fs::create_directory(shared);
    fs::permissions(shared, fs::perms(01777), fs::perm_options::replace);
    fs::create_directory_symlink(victims->dir, shared / "ckpt");
  }
  world.barrier();
  const std::string error = save_into(shared / "ckpt");
  EXPECT_NE(error.find((shared / "ckpt").string() + " is a symbolic link"), std::string::npos)
      << error;
  if (victims) victims->expect_untouched("checkpoint directory planted as a link");
}

// Links inside DIR (left there by the same user, or by root): every name a save creates,
// replaces or removes. None is followed; the victims keep their contents.
TEST(SharedCheckpoints, LinksInsideTheDirectoryAreNeverFollowed) {
  SharedScratch scratch;
  auto& world = zero::testing::world();
  const fs::path dir = scratch.path() / "ckpt";
  std::optional<Victims> victims;
  if (world.rank() == 0) {
    victims.emplace(scratch.path());
    make_private(dir);
  }
  world.barrier();
  ASSERT_EQ(save_into(dir, "old"), "");
  if (world.rank() == 0) {
    // Leftover names a save removes, the staged `latest`, and the tag saved over next.
    const fs::path names[] = {".gone.partial", ".t.replaced", ".latest.next", ".latest.swap",
                              "latest.tmp"};
    int i = 0;
    for (const fs::path& name : names)
      fs::create_directory_symlink(victims->targets()[std::size_t(i++ % 2)], dir / name);
    fs::create_directory_symlink(victims->dir, dir / "t");
  }
  world.barrier();
  EXPECT_EQ(save_into(dir, "t"), "");
  if (world.rank() == 0) {
    victims->expect_untouched("a save among planted links");
    EXPECT_TRUE(fs::is_directory(dir / "t") && !fs::is_symlink(dir / "t"));
    EXPECT_EQ(read_text(dir / "latest"), "t\n");
    for (const char* gone :
         {".gone.partial", ".t.replaced", ".latest.next", ".latest.swap", "latest.tmp"})
      EXPECT_FALSE(fs::exists(fs::symlink_status(dir / gone))) << gone;
  }
  world.barrier();
  // latest itself a link to a file: replaced, not written through.
  if (world.rank() == 0) {
    fs::remove(dir / "latest");
    fs::create_symlink(victims->file, dir / "latest");
  }
  world.barrier();
  // Refused, without reading through the link: the error would show the target's first line.
  const std::string error = save_into(dir, "u");
  EXPECT_NE(error.find("latest: it is a symbolic link"), std::string::npos) << error;
  EXPECT_EQ(error.find("a file zero did not create"), std::string::npos) << error;
  if (world.rank() == 0) victims->expect_untouched("latest planted as a link");
}

TEST(SharedOutputs, ConsolidateReplacesAPlantedNameAndRefusesALinkedFolder) {
  const char* tool = std::getenv("ZERO_CHECKPOINT_TOOL");
  if (!tool) GTEST_SKIP() << not_applicable << "ZERO_CHECKPOINT_TOOL is not set (no tools built)";
  SharedScratch scratch;
  auto& world = zero::testing::world();
  ASSERT_EQ(save_into(scratch.path() / "ckpt"), "");
  if (world.rank() != 0) return;
  const Victims victims(scratch.path());
  const PlantedOutput planted(scratch.path(), victims, "out.safetensors");
  fs::create_directory_symlink(victims.dir, planted.folder / "npy");
  auto run = [&](const fs::path& to) {
    const std::string command = std::string(tool) + " consolidate " +
                                (scratch.path() / "ckpt").string() + " --to " + to.string() +
                                " 2>&1";
    std::FILE* pipe = ::popen(command.c_str(), "r");
    std::string output;
    char buffer[512];
    while (pipe && std::fgets(buffer, sizeof buffer, pipe))
      output += buffer;
    const int status = pipe ? ::pclose(pipe) : -1;
    return std::pair{WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
  };
  const auto [status, output] = run(planted.out);
  EXPECT_EQ(status, 0) << output;
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(planted.out))) << output;
  victims.expect_untouched("consolidate into a planted name");
  const auto [npy_status, npy_output] = run(planted.folder / "npy");
  EXPECT_EQ(npy_status, 1) << npy_output;
  EXPECT_NE(npy_output.find("is a symbolic link"), std::string::npos) << npy_output;
  victims.expect_untouched("consolidate into a planted folder");
}

} // namespace
