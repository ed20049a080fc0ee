// tests/kv/nopaxos_test_util.h: what the NOPaxos tests share (crafted
// messages and entries, a cluster's options, dropping ordered messages).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kv_test_util.h"

namespace kv {

inline ClusterOptions nopaxos(uint32_t replicas, uint32_t clients, uint32_t ops,
                              uint64_t seed = 1) {
  return sim_options(Protocol::kNoPaxos, replicas, clients, ops, seed);
}

// Drops the listed ordered multicast messages (counted per destination,
// from 1) to the listed replicas.
inline void drop_ordered(SimCluster& c, std::set<uint32_t> to, std::set<int> nth) {
  auto counts = std::make_shared<std::map<uint32_t, int>>();
  c.net().set_filter([=](const Message& m) {
    if (m.type != MsgType::kOrdered || !to.count(m.to)) return true;
    return !nth.count(++(*counts)[m.to]);
  });
}

inline uint64_t noops(const NoPaxosReplica& r) {
  uint64_t n = 0;
  for (const Entry& e : r.log()) n += e.cmds.empty();
  return n;
}

inline Message ordered(uint32_t to, uint64_t session, uint64_t msgnum, uint64_t client) {
  Message m = message(MsgType::kOrdered, 3, to, 0, session);
  m.a = msgnum;
  Command c;
  c.op = Op::kPut;
  c.client = client;
  c.seq = 1;
  c.key = "k";
  c.value = "v" + std::to_string(client);
  m.cmds.push_back(std::move(c));
  return m;
}

inline size_t count(const Outbox& out, MsgType t) {
  size_t n = 0;
  for (const Message& m : out) n += m.type == t;
  return n;
}

inline Entry logged(uint64_t slot, uint64_t msgnum, uint64_t client) {
  Entry e;
  e.slot = slot;
  e.session = 1;
  e.msgnum = msgnum;
  if (client != 0) {
    e.cmds = ordered(0, 1, msgnum, client).cmds;
  }
  return e;
}

inline Message view_change(uint32_t from, uint32_t to, uint64_t view, uint64_t last_view,
                           std::vector<Entry> log) {
  Message m = message(MsgType::kViewChange, from, to, view, 1);
  m.a = last_view;
  m.b = 1;
  m.entries = std::move(log);
  return m;
}

// Options of a replica that starts without its state and recovers, asking
// with nonces from `nonce`.
inline NoPaxosOptions recovering(uint64_t nonce) {
  NoPaxosOptions no;
  no.recover = true;
  no.nonce = nonce;
  return no;
}

// Runs until replica r finished recovering, or deadline_ms passed.
inline bool run_until_recovered(SimCluster& c, uint32_t r, uint64_t deadline_ms) {
  return c.net().run(deadline_ms, [&] { return !c.recovering(r); });
}

}  // namespace kv
