// tests/nam's shared helpers: sluice-nam run through `sluice run`, and its
// invariant check's verdict. Header-only, for nam_test.cc and
// nam_fault_test.cc (one test binary).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace nam_test {

using sluice::testing::count_lines_with;
using sluice::testing::count_lines_with_all;
using sluice::testing::json_field;
using sluice::testing::json_number;
using sluice::testing::over_ofi;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

// Transaction counts: the ofi (tcp) path is far slower on this shared machine.
inline std::string txns(int shm, int ofi) { return std::to_string(over_ofi() ? ofi : shm); }

inline ProcessResult run_nam(int ranks, const std::vector<std::string>& args,
                             const std::string& program = "sluice-nam",
                             const std::vector<std::string>& launcher = {}) {
  return run_process(sluice::testing::job_argv(ranks, 120, program, args, launcher), {},
                     std::chrono::seconds(150));
}

inline void expect_invariants_ok(const ProcessResult& r) {
  EXPECT_EQ(count_lines_with(r.output, "invariants: OK"), 1) << r.output;
  EXPECT_EQ(json_field(r.output, "invariants"), "OK") << r.output;
  EXPECT_EQ(json_number(r.output, "locked"), 0u) << r.output;
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
}

}  // namespace nam_test
