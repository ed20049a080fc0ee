// A combiner flow driven through sluice::Worker between real processes:
// 4 ranks, each with one worker thread that is a source and a target of a
// combiner flow and of a shuffle flow at once, on tiny rings (see
// combiner_worker_thread.cc). CTest runs it over shm, ofi RMA and the ofi
// message path. The program checks every group's count and sums against a
// reference it computes itself, and exactly-once totals over the job; this
// test requires its VERIFIED line.
#include <gtest/gtest.h>

#include <regex>

#include "support/test_support.h"

namespace sluice {
namespace {

using testing::bin;
using testing::run_process;

TEST(CombinerWorkerSystemTest, OneWorkerThreadPerRankIsSourceAndTargetAndGetsExactGroups) {
  const testing::ProcessResult r =
      run_process(testing::job_argv(4, 150, "sluice-combiner-worker-thread",
                                    {"--records", "20000", "--groups", "3000"}),
                  {}, std::chrono::seconds(180));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "FAILED"), 0) << r.output;
  // A job that ends by the rules warns of nothing (over ofi, sources whose
  // last confirmations were still to come once warned they gave up on them).
  EXPECT_EQ(testing::count_lines_with(r.output, "warn:"), 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m,
                                std::regex("VERIFIED 3000 groups, 80000 records, ([0-9]+) "
                                           "partials, ([0-9]+) table flushes, 80000 echo records")))
      << r.output;
  EXPECT_GT(std::stoull(m[2]), 4u) << "the 64-group local tables should have filled: " << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

}  // namespace
}  // namespace sluice
