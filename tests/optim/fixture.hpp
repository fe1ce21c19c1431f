#pragma once
// The optimizer fixtures (fixtures/*.txt, written through fixture_writer.py by make_fixtures.py and
// make_lamb_fixtures.py): one item per line, `key value...`, each case from `case NAME` to `end`,
// `#` lines comments. float32 values are IEEE-754 binary32 bit patterns in hex, exact.

#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace optim_fixture {

struct Case {
  std::string name;
  std::map<std::string, std::vector<std::string>> fields;  // key -> values (single-line items)
  std::map<std::string, std::vector<std::string>> indexed; // "grad 3", "param32 3 1" -> values
};

// `indexed_keys`: the keys whose items are one of several (per step, per tensor), with how many of
// their first words say which ("grad 3 ...": 1, "param32 3 1 ...": 2); those words join the key.
inline std::vector<Case> read_cases(const std::string& path,
                                    const std::map<std::string, std::size_t>& indexed_keys) {
  std::ifstream in(path);
  if (!in) ADD_FAILURE() << "cannot open " << path;
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string key;
    words >> key;
    std::vector<std::string> values;
    for (std::string v; words >> v;)
      values.push_back(v);
    if (key == "case") {
      cases.push_back({values.at(0), {}, {}});
    } else if (key == "end") {
      continue;
    } else if (const auto it = indexed_keys.find(key); it != indexed_keys.end()) {
      std::string name = key;
      for (std::size_t k = 0; k < it->second; ++k)
        name += " " + values.at(k);
      values.erase(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(it->second));
      cases.back().indexed[name] = values;
    } else {
      cases.back().fields[key] = values;
    }
  }
  return cases;
}

inline float float_from_hex(const std::string& hex) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(std::stoul(hex, nullptr, 16)));
}

inline double number(const Case& c, const std::string& key, std::size_t index = 0) {
  return std::stod(c.fields.at(key).at(index));
}

} // namespace optim_fixture
