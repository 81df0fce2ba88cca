#pragma once
// Running a language-model PyTorch peer (tools/peers/{bert,gpt3}_peer.py) from a test: whether
// Debian's python3 has torch, and the list of losses the peer prints as "[l0, l1, ...]".
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace benchhost::test_support {

inline bool have_torch() {
  return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
}

/// Run `cmd` and parse the first bracketed list of numbers it prints; adds a test failure (and
/// returns an empty list) when there is none.
inline std::vector<double> run_peer(const std::string& cmd) {
  std::vector<double> out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) text += buf;
  ::pclose(p);
  const auto open = text.find('['), close = text.find(']');
  if (open == std::string::npos || close == std::string::npos) {
    ADD_FAILURE() << "peer printed: " << text;
    return out;
  }
  const std::string list = text.substr(open + 1, close - open - 1);
  for (std::size_t pos = 0; pos < list.size();) {
    std::size_t used = 0;
    out.push_back(std::stod(list.substr(pos), &used));
    pos += used;
    while (pos < list.size() && (list[pos] == ',' || list[pos] == ' ')) ++pos;
  }
  return out;
}

}  // namespace benchhost::test_support
