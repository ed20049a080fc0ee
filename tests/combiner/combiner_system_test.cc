// Combiner flows between real processes through `sluice run`: N:1 and N:M
// (4 ranks x 2 slots), uniform and Zipf-skewed groups, groups that appear on
// one source only, and local tables small enough that sources flush partials
// many times. sluice-combiner-worker checks every target's groups against a
// single-process reference and prints VERIFIED only if all of them match.
// CTest runs this suite once over shm and once with SLUICE_TRANSPORT=ofi.
#include <gtest/gtest.h>

#include <regex>

#include "support/test_support.h"

namespace sluice {
namespace {

using testing::bin;
using testing::run_process;

testing::ProcessResult run_job(std::vector<std::string> worker_args) {
  return run_process(testing::job_argv(4, 170, "sluice-combiner-worker", worker_args), {},
                     std::chrono::seconds(200));
}

// The job verified every group, and its sources flushed their local tables.
void expect_verified(const testing::ProcessResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex(
          "VERIFIED ([0-9]+) groups \\(([0-9]+) on one source only\\).* ([0-9]+) table flushes")))
      << r.output;
  EXPECT_GT(std::stoull(m[1]), 0u);
  EXPECT_EQ(std::stoull(m[2]), 8u * 50) << "every source's 50 private groups" << r.output;
  EXPECT_GT(std::stoull(m[3]), 8u) << "the local tables should have filled: " << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

TEST(CombinerFlowSystemTest, EightSourcesToOneTargetUniformGroups) {
  expect_verified(run_job({"--targets", "0", "--dist", "uniform", "--records", "60000", "--groups",
                           "3000", "--local-groups", "512"}));
}

TEST(CombinerFlowSystemTest, EightSourcesToOneTargetZipfGroups) {
  expect_verified(run_job({"--targets", "0", "--dist", "zipf", "--records", "60000", "--groups",
                           "20000", "--local-groups", "256"}));
}

TEST(CombinerFlowSystemTest, EightSourcesToEightTargetsByKeyUniformGroups) {
  expect_verified(run_job({"--targets", "all", "--dist", "uniform", "--records", "60000",
                           "--groups", "5000", "--local-groups", "512"}));
}

TEST(CombinerFlowSystemTest, EightThreadsEachSourceAndTargetZipfGroups) {
  expect_verified(run_job({"--targets", "all", "--dist", "zipf", "--records", "60000", "--groups",
                           "20000", "--local-groups", "128", "--same-thread"}));
}

}  // namespace
}  // namespace sluice
