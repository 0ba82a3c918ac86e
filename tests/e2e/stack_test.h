// A test fixture that owns a Stack (llmsim + sdgd processes) and prints
// sdgd's log when a test fails.
#ifndef SDG_TESTS_E2E_STACK_TEST_H_
#define SDG_TESTS_E2E_STACK_TEST_H_

#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/stack.h"

namespace sdg::testing {

// A JSON-lines file's objects (blank lines skipped).
inline std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

class StackTest : public ::testing::Test {
 protected:
  void Start(const StackOptions& options = {}) {
    auto stack = Stack::Start(options);
    ASSERT_TRUE(stack.ok()) << stack.status();
    stack_ = *std::move(stack);
  }

  void TearDown() override {
    if (HasFailure() && stack_ != nullptr) {
      std::cerr << "--- sdgd log ---\n" << stack_->SdgdLog();
    }
  }

  std::unique_ptr<Stack> stack_;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_E2E_STACK_TEST_H_
