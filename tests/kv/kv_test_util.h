// tests/kv/kv_test_util.h: what every protocol test asserts after a run.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster_sim.h"
#include "linearizability.h"

namespace kv {

// The first message of type t in out, or nullptr.
inline const Message* find(const Outbox& out, MsgType t) {
  for (const Message& m : out)
    if (m.type == t) return &m;
  return nullptr;
}

// A message with its header set; the test sets the fields of its type.
inline Message message(MsgType type, uint32_t from, uint32_t to = 0, uint64_t view = 0,
                       uint64_t session = 0) {
  Message m;
  m.type = type;
  m.from = from;
  m.to = to;
  m.view = view;
  m.session = session;
  return m;
}

// A simulated cluster of `replicas` and `clients` (each doing `ops`
// operations on one key) under `protocol`, seeded by `seed`.
inline ClusterOptions sim_options(Protocol protocol, uint32_t replicas, uint32_t clients,
                                  uint32_t ops, uint64_t seed) {
  ClusterOptions o;
  o.protocol = protocol;
  o.replicas = replicas;
  o.clients = clients;
  o.ops_per_client = ops;
  o.keys = 1;
  o.seed = seed;
  o.sim.seed = seed;
  return o;
}

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

// Each client's operations took effect in the order it issued them (their
// first places in the applied log rise with seq), as a Redis connection's
// pipelined commands do; what apply() skipped is a (0, 0) entry there.
// Runs the cluster to the end and makes expect_consistent's checks and this
// one; returns how many commands replica 0's store skipped.
inline uint64_t expect_consistent_in_client_order(SimCluster& c) {
  EXPECT_TRUE(c.run_until_done(60000));
  expect_consistent(c);
  std::map<uint64_t, uint64_t> last;  // client -> seq of its latest first occurrence
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (const auto& id : c.store(0).applied()) {
    if (id.first == 0 || !seen.insert(id).second) continue;
    EXPECT_EQ(id.second, last[id.first] + 1) << "client " << id.first << " out of order";
    last[id.first] = id.second;
  }
  return c.store(0).skipped();
}

// Each earlier snapshot of a replica's applied log is a prefix of its final
// log: nothing applied is ever lost or reordered.
inline void expect_prefix(const std::vector<std::pair<uint64_t, uint64_t>>& earlier,
                          const std::vector<std::pair<uint64_t, uint64_t>>& later) {
  ASSERT_LE(earlier.size(), later.size());
  for (size_t i = 0; i < earlier.size(); ++i)
    ASSERT_EQ(earlier[i], later[i]) << "applied entry " << i << " changed";
}

// A new leader announces itself (MsgType::kLeader), so that the clients'
// operations reach it without their retry timeout: with that timeout far
// beyond the run, the clients of `o` (3 replicas) still finish after the
// first leader crashes while they run, none of them retrying.
inline void expect_clients_follow_an_announced_leader(ClusterOptions o) {
  o.client_retry_ms = 1000000;
  SimCluster c(o);
  c.net().run(60, [] { return false; });
  ASSERT_FALSE(c.clients_done()) << "the clients finished before the crash";
  c.net().crash(0);
  ASSERT_TRUE(c.run_until_done(20000)) << "the clients waited for their retry timeout";
  expect_consistent(c);
  uint64_t resent = 0;
  for (uint32_t i = 0; i < o.clients; ++i) {
    EXPECT_EQ(c.client(i).retries(), 0u);
    resent += c.client(i).resent_to_leader();
  }
  EXPECT_GT(resent, 0u) << "no client had an operation in flight at the crash";
}

}  // namespace kv
