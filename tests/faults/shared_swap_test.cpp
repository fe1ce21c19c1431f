// Shared file systems (docs/reliability.md): what another local user plants in the directories zero
// writes into (/tmp, a scratch disk) must never make zero delete, truncate or write a file it did
// not create. Here the NVMe tier's swap tree (and the kept-activations tier on it) and the
// examples' output writers: a symbolic link planted at each level (to a directory holding a file,
// and to a file) is refused and its target untouched, with and without remove_stale; a level
// owned by another user (`nobody`: root only, group `root`) or writable by others is refused; a
// foreign file in a swap directory survives remove_stale and is named; a legitimate crash leftover
// is still cleaned. Checkpoints: shared_checkpoint_test.cpp.

#include "shared_fs_support.hpp"

#include "../offload/offload_test_support.hpp"

#include "../../examples/common/write_file.hpp"

#include <zero/nvme/nvme_tier.hpp>
#include <zero/residual/kept_inputs_on_nvme.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

using namespace zero::testing;
using namespace zero::testing::shared_fs;
using zero::ErrorKind;
using zero::NvmeTier;
using zero::SwapFile;

zero::NvmeTierOptions swap_options(const fs::path& path, bool remove_stale,
                                   const std::string& owner = "optimizer") {
  auto options = tier_options(path);
  options.owner = owner;
  options.remove_stale = remove_stale;
  return options;
}

// ---------------------------------------------------------------------------------------------
// The NVMe tier's swap tree: <nvme_path>/zero_swap/<owner>/rank<r>

TEST(SharedSwapTree, ALinkAtAnyLevelIsRefusedAndItsTargetUntouched) {
  const std::vector<std::string> levels{"zero_swap", "optimizer", "rank0"};
  for (std::size_t level = 0; level < levels.size(); ++level)
    for (int target = 0; target < 2; ++target)
      for (bool remove_stale : {false, true}) {
        ScratchDir scratch;
        const Victims victims(scratch.path());
        const fs::path nvme = scratch.path() / "nvme";
        make_private(nvme);
        fs::path at = nvme;
        for (std::size_t l = 0; l < level; ++l)
          make_private(at /= levels[l]);
        const fs::path link = at / levels[level];
        fs::create_directory_symlink(victims.targets()[std::size_t(target)], link);
        const std::string when = link.string() + " -> " +
                                 victims.targets()[std::size_t(target)].string() +
                                 (remove_stale ? ", remove_stale" : "");
        expect_error([&] { NvmeTier tier(swap_options(nvme, remove_stale), 0); },
                     ErrorKind::invalid_argument,
                     {link.string() + " is a symbolic link", "does not follow links"});
        victims.expect_untouched(when);
        EXPECT_TRUE(fs::is_symlink(link)) << when;
      }
}

TEST(SharedSwapTree, ALevelOthersCanWriteIsRefused) {
  for (const char* level : {"zero_swap", "zero_swap/optimizer", "zero_swap/optimizer/rank0"})
    for (const auto& [mode, says] : {std::pair{fs::perms(0777), "writable by every user"},
                                     std::pair{fs::perms(0770), "writable by its group"},
                                     std::pair{fs::perms(01777), "writable by every user"}}) {
      ScratchDir scratch;
      fs::create_directories(scratch.path() / level);
      fs::permissions(scratch.path() / level, mode, fs::perm_options::replace);
      const std::string message = expect_error(
          [&] { NvmeTier tier(swap_options(scratch.path(), true), 0); },
          ErrorKind::invalid_argument,
          {(scratch.path() / level).string() + " is " + says, "nvme_path of your own"});
      EXPECT_TRUE(fs::exists(scratch.path() / level)) << message;
    }
}

TEST(SharedSwapTree, ALevelOfAnotherUserIsRefused) {
  if (!is_root()) GTEST_SKIP() << "handing a directory to nobody needs root";
  for (const char* level : {"zero_swap", "zero_swap/optimizer", "zero_swap/optimizer/rank0"}) {
    ScratchDir scratch;
    fs::create_directories(scratch.path() / level);
    fs::permissions(scratch.path() / level, fs::perms(0700), fs::perm_options::replace);
    ASSERT_EQ(::chown((scratch.path() / level).c_str(), nobody, nobody), 0);
    expect_error([&] { NvmeTier tier(swap_options(scratch.path(), true), 0); },
                 ErrorKind::invalid_argument,
                 {(scratch.path() / level).string() + " is owned by nobody (uid 65534)",
                  "mode 0700", "Remove it if no job of yours uses it"});
  }
}

// The files of a run that died: a forked child makes a tier and a swap file and exits without
// destructors, as after SIGKILL.
void leave_a_crashed_run(const fs::path& nvme) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      NvmeTier tier(swap_options(nvme, false), 0);
      SwapFile file = tier.create_file("master", 4096);
      ::_exit(0);
    } catch (...) {
      ::_exit(3);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(SharedSwapTree, RemoveStaleCleansACrashLeftoverAndNamesAndKeepsAnythingElse) {
  ScratchDir scratch;
  const Victims victims(scratch.path());
  const fs::path nvme = scratch.path() / "nvme";
  make_private(nvme);
  leave_a_crashed_run(nvme);
  const fs::path rank0 = nvme / "zero_swap" / "optimizer" / "rank0";
  ASSERT_TRUE(fs::is_regular_file(rank0 / "master.swp"));
  // Things zero did not make, under names it might: a swap-like file its lock does not list, links
  // to the victims (one named like a listed swap file would be), a directory with a file.
  std::ofstream(rank0 / "notes.txt") << "mine";
  std::ofstream(rank0 / "other.swp") << "not listed";
  fs::create_directory_symlink(victims.dir, rank0 / "dir_link.swp");
  fs::create_symlink(victims.file, rank0 / "file_link.swp");
  fs::create_directory(rank0 / "sub");
  std::ofstream(rank0 / "sub" / "kept.txt") << "mine";
  ::testing::internal::CaptureStderr();
  expect_error([&] { NvmeTier tier(swap_options(nvme, true), 0); }, ErrorKind::invalid_argument,
               {"holds 5 entr(ies) (dir_link.swp, file_link.swp, notes.txt, other.swp, sub)",
                "that zero did not make", "left these alone"});
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("removed from swap directory " + rank0.string() + " 1 file(s) (master.swp)"),
            std::string::npos)
      << said;
  EXPECT_FALSE(fs::exists(rank0 / "master.swp")) << "the crashed run's swap file stays";
  for (const char* kept : {"notes.txt", "other.swp", "sub/kept.txt"})
    EXPECT_TRUE(fs::exists(rank0 / kept)) << kept;
  EXPECT_TRUE(fs::is_symlink(rank0 / "dir_link.swp"));
  EXPECT_TRUE(fs::is_symlink(rank0 / "file_link.swp"));
  victims.expect_untouched("remove_stale beside foreign entries");
}

TEST(SharedSwapTree, ACrashLeftoverAloneIsCleaned) {
  ScratchDir scratch;
  leave_a_crashed_run(scratch.path());
  const fs::path rank0 = scratch.path() / "zero_swap" / "optimizer" / "rank0";
  expect_error([&] { NvmeTier tier(swap_options(scratch.path(), false), 0); },
               ErrorKind::invalid_argument, {"holds 1 file(s) (master.swp)", "remove_stale"});
  ::testing::internal::CaptureStderr();
  {
    NvmeTier tier(swap_options(scratch.path(), true), 0);
    EXPECT_FALSE(fs::exists(rank0 / "master.swp"));
    SwapFile again = tier.create_file("master", 4096);
  }
  ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(scratch.path() / "zero_swap"));
}

// nvme_path itself: a link in a folder others can write (a planted /tmp/nvme) is refused; one in
// a folder of the user's own (an administrator's link to a scratch disk) is followed.
TEST(SharedSwapTree, NvmePathALinkOnlyWhereOthersCouldHavePlantedIt) {
  ScratchDir scratch;
  const Victims victims(scratch.path());
  const fs::path shared = scratch.path() / "shared_tmp";
  fs::create_directory(shared);
  fs::permissions(shared, fs::perms(01777), fs::perm_options::replace);
  fs::create_directory_symlink(victims.dir, shared / "nvme");
  expect_error([&] { NvmeTier tier(swap_options(shared / "nvme", true), 0); },
               ErrorKind::invalid_argument,
               {(shared / "nvme").string() + " is a symbolic link (to " + victims.dir.string(),
                "which others can write (mode 1777)"});
  victims.expect_untouched("nvme_path planted in a shared folder");

  const fs::path disk = scratch.path() / "disk";
  make_private(disk);
  fs::create_directory_symlink(disk, scratch.path() / "nvme_link");
  NvmeTier tier(swap_options(scratch.path() / "nvme_link", false), 0);
  EXPECT_TRUE(fs::exists(disk / "zero_swap" / "optimizer" / "rank0" / "zero.lock"));
}

// The kept-activations tier is an NVMe tier of its own owner: the same checks.
TEST(SharedSwapTree, KeptActivationsRefuseAPlantedLink) {
  ScratchDir scratch;
  const Victims victims(scratch.path());
  make_private(scratch.path() / "zero_swap");
  fs::create_directory_symlink(victims.dir, scratch.path() / "zero_swap" / "activations");
  expect_error(
      [&] { zero::KeptInputsOnNvme tier({.path = scratch.path(), .owner = "activations"}, 0); },
      ErrorKind::invalid_argument, {"is a symbolic link"});
  victims.expect_untouched("kept activations");
}

// ---------------------------------------------------------------------------------------------
// The examples' .npy and --json writers.

TEST(SharedOutputs, TheExamplesWritersReplaceAPlantedNameAndWriteNoTarget) {
  ScratchDir scratch;
  const Victims victims(scratch.path());
  const PlantedOutput planted(scratch.path(), victims, "result.json");
  examples::write_file_atomically(planted.out.string(), {std::span<const char>("{}\n", 3)});
  victims.expect_untouched("the examples' writer");
  EXPECT_FALSE(fs::is_symlink(planted.out));
  EXPECT_EQ(read_text(planted.out), "{}\n");
}

} // namespace
