// tests/kv/porcupine_check.h: kv-porcupine (apps/kv/porcupine, built into
// .tools by scripts/install-porcupine.sh) on a history file, for the tests
// that define SLUICE_KV_PORCUPINE (kv_history_test, kv_app_test).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "support/test_support.h"

namespace kv::testing {

// The checker's exit status and output on `history` (-1 and a message
// naming the install script if it is missing).
inline sluice::testing::ProcessResult porcupine(const std::string& history) {
  const std::string checker = SLUICE_KV_PORCUPINE;
  if (!std::filesystem::exists(checker)) {
    return sluice::testing::ProcessResult{
        -1, 0, false, "no " + checker + ": run scripts/install-porcupine.sh (needs go)", 0};
  }
  return sluice::testing::run_process({checker, "-timeout", "100s", history}, {},
                                      std::chrono::seconds(120));
}

// porcupine finds the history of `ops` operations linearizable.
inline void expect_porcupine_linearizable(const std::string& history, int ops) {
  const sluice::testing::ProcessResult p = porcupine(history);
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_EQ(sluice::testing::count_lines_with(
                p.output, "kv-porcupine: linearizable (" + std::to_string(ops) + " operations"),
            1)
      << p.output;
}

}  // namespace kv::testing
