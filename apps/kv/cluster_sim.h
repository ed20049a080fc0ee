// apps/kv/cluster_sim.h: a whole replicated store on the simulated network —
// 2f + 1 replicas of one protocol, the NOPaxos sequencer, closed-loop
// clients with a seeded operation mix — and the checks every test makes
// after a run:
//   - check_replicas(): every live replica applied the same log and has the
//     same store digest;
//   - check_results(): every completed operation appears in that log (its
//     first occurrence is where it took effect: exactly once), its result is
//     what a sequential replay of the log gives, and the log order respects
//     real time (an operation completed before another began comes first) —
//     i.e. the log is a linearization of the history.
// The tests also run the independent checker (linearizability.h) on short
// single-key histories.
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client.h"
#include "multipaxos.h"
#include "nopaxos.h"
#include "sim.h"

namespace kv {

struct ClusterOptions {
  Protocol protocol = Protocol::kMultiPaxos;
  uint32_t replicas = 3;
  uint32_t clients = 2;
  uint32_t ops_per_client = 20;
  uint32_t keys = 1;  // keys "k0" .. ; one key makes every operation conflict
  uint64_t seed = 1;
  // The operation mix (generate_ops): "mixed", or YCSB's core workloads "a"
  // (50% reads, 50% updates), "b" (95/5) and "c" (reads only); keys uniform
  // or Zipfian (YCSB's scrambled Zipfian, constant 0.99); YCSB's values
  // padded to at least value_bytes.
  std::string workload = "mixed";
  bool zipf = false;
  uint32_t value_bytes = 0;
  SimOptions sim;
  MultiPaxosOptions multipaxos;
  NoPaxosOptions nopaxos;
  uint64_t client_retry_ms = 40;
  uint32_t client_window = 1;  // operations each client keeps in flight (client.h)
  uint32_t client_batch = 0;   // commands per Request at most (client.h; 0: bytes only)
};

// The operations client `index` runs. "mixed": a seeded mix of put (40%),
// get (35%), compare-and-set (20%, expecting a value some client may have
// written) and delete (5%). "a", "b", "c": YCSB's gets and puts. Values name
// their writer, so every write is distinct (padded to value_bytes).
// Throws std::invalid_argument for an unknown workload.
std::vector<Command> generate_ops(const ClusterOptions& o, uint32_t index);

// The check behind check_results(), for any applied log and history:
// `commands` are every client's operations with their (client, seq) filled in.
std::string check_linearization(const std::vector<std::pair<uint64_t, uint64_t>>& log,
                                const std::vector<Command>& commands,
                                const std::vector<Completed>& history);

class SimCluster {
 public:
  explicit SimCluster(ClusterOptions options);

  SimNetwork& net() { return net_; }
  const ClusterOptions& options() const { return options_; }
  MultiPaxosReplica& mp(uint32_t i) { return *mp_[i]; }
  NoPaxosReplica& np(uint32_t i) { return *np_[i]; }
  Client& client(uint32_t i) { return *clients_[i]; }
  const Store& store(uint32_t i) const;

  // The replica that currently leads (normal status), or -1.
  int leader() const;
  bool clients_done() const;
  // Runs until every client finished or `deadline_ms` of simulated time
  // passed; returns whether they finished.
  bool run_until_done(uint64_t deadline_ms);
  // Lets heartbeats and synchronization bring every replica up to date.
  void quiesce(uint64_t ms = 300) { net_.run_for(ms); }
  // NOPaxos: replaces the sequencer by a new one with the next session.
  void new_sequencer();
  // Replica r's process restarts without its state: what it had in flight
  // is lost, the others forget its promises and votes, and a new replica
  // under the same id recovers (message.h, Recovery).
  void restart(uint32_t r);
  bool recovering(uint32_t r) const;
  // NOPaxos: every replica's process dies at once and starts again from
  // what it kept on disk (--data-dir with --fsync always: its state as of
  // its last round, durable_state), and the sequencer is replaced, as the
  // next run of a job has a new one (nopaxos.h, Durability). Messages in
  // flight to the replicas are lost.
  void restart_all_from_disk();

  // "" when the check passes, else what differs.
  std::string check_replicas() const;
  std::string check_results() const;
  // Every completed operation of every client.
  std::vector<Completed> history() const;

 private:
  ClusterOptions options_;
  Config config_;
  SimNetwork net_;
  std::vector<std::unique_ptr<MultiPaxosReplica>> mp_;
  std::vector<std::unique_ptr<NoPaxosReplica>> np_;
  std::vector<std::unique_ptr<Sequencer>> sequencers_;
  std::vector<std::unique_ptr<Client>> clients_;
  uint64_t restarts_ = 0;
};

}  // namespace kv
