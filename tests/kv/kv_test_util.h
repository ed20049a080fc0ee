// tests/kv/kv_test_util.h: what every protocol test asserts after a run.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cluster_sim.h"
#include "linearizability.h"

namespace kv {

// Quiescence first, then: identical applied logs and digests on every live
// replica, every completed op exactly once in the log with the result a
// sequential replay gives, real-time order kept; and on short single-key
// histories the independent exhaustive checker agrees.
inline void expect_consistent(SimCluster& c) {
  c.net().set_filter(nullptr);
  c.net().set_drop_rate(0);
  c.quiesce(500);
  EXPECT_EQ(c.check_replicas(), "");
  EXPECT_EQ(c.check_results(), "");
  std::vector<Completed> h = c.history();
  size_t expected = 0;
  for (uint32_t i = 0; i < c.options().clients; ++i) expected += c.options().ops_per_client;
  EXPECT_EQ(h.size(), expected) << "every client operation completes";
  if (c.options().keys == 1 && h.size() <= 62) {
    std::string why;
    EXPECT_TRUE(linearizable(h, &why)) << why;
  }
}

// Each earlier snapshot of a replica's applied log is a prefix of its final
// log: nothing applied is ever lost or reordered.
inline void expect_prefix(const std::vector<std::pair<uint64_t, uint64_t>>& earlier,
                          const std::vector<std::pair<uint64_t, uint64_t>>& later) {
  ASSERT_LE(earlier.size(), later.size());
  for (size_t i = 0; i < earlier.size(); ++i)
    ASSERT_EQ(earlier[i], later[i]) << "applied entry " << i << " changed";
}

}  // namespace kv
