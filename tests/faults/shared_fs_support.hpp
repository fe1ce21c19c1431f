#pragma once
// What the shared-file-system tests plant (docs/reliability.md, "Shared file systems"): victims
// (a directory holding a file, and a file) that must keep their contents, and a shared folder
// (mode 1777, as /tmp) holding links at an output's name and at the temporary name zero's writers
// used before (NAME.partial).

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace zero::testing::shared_fs {

namespace fs = std::filesystem;

inline constexpr uid_t nobody = 65534;
inline const std::string victim_text = "a file zero did not create\n";

inline std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// What an attacker aims at: a directory holding a file, and a file.
struct Victims {
  fs::path dir, file_in_dir, file;
  explicit Victims(const fs::path& base) : dir(base / "victim_dir"), file(base / "victim.txt") {
    fs::create_directory(dir);
    file_in_dir = dir / "important.txt";
    std::ofstream(file_in_dir) << victim_text;
    std::ofstream(file) << victim_text;
  }
  // Both files hold what they held, and the directory nothing else.
  void expect_untouched(const std::string& when) const {
    EXPECT_EQ(read_text(file_in_dir), victim_text) << when;
    EXPECT_EQ(read_text(file), victim_text) << when;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir))
      names.push_back(entry.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"important.txt"}) << when;
  }
  std::vector<fs::path> targets() const { return {dir, file}; }
};

inline void make_private(const fs::path& dir) {
  fs::create_directory(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
}

inline bool is_root() {
  return ::geteuid() == 0;
}

// A shared folder (mode 1777, as /tmp) holding links at the output's name and at the temporary
// name the writers used before (NAME.partial).
struct PlantedOutput {
  fs::path folder, out;
  explicit PlantedOutput(const fs::path& base, const Victims& victims, const std::string& name) {
    folder = base / "shared_out";
    fs::create_directories(folder);
    fs::permissions(folder, fs::perms(01777), fs::perm_options::replace);
    out = folder / name;
    fs::create_symlink(victims.file, out);
    fs::create_symlink(victims.file_in_dir, folder / (name + ".partial"));
  }
};

} // namespace zero::testing::shared_fs
