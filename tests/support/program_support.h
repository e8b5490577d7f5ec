// Helpers of the program-level tests (tests/program): the host backends they run on, a fixture that
// selects one, and reading jit(f).lower()'s text.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "palladium/palladium.h"

namespace palladium::test_support {

// The interpreter, and the cpu backend where a host compiler is found.
inline std::vector<std::string> host_backends() {
  std::vector<std::string> r{"interpret"};
  for (const std::string& b : available_backends())
    if (b == "cpu") r.push_back(b);
  return r;
}

// A test run once per backend name, with that backend selected for its Array ops.
class OnBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { scope_ = std::make_unique<BackendScope>(GetParam()); }
  std::unique_ptr<BackendScope> scope_;
};

// The "--- optimized ---" program of jit(f).lower(...)'s text.
inline std::string optimized_part(const std::string& lowered) {
  const size_t from = lowered.find("--- optimized ---");
  return lowered.substr(from, lowered.find("--- steps") - from);
}

// How many times `what` occurs in `text`.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace palladium::test_support
