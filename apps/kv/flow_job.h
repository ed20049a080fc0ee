// apps/kv/flow_job.h: the store as a `sluice run` job — Multi-Paxos replicas
// and closed-loop clients as the ranks of one job, talking over sluice flows.
//
// Ranks 0 .. replicas-1 are replicas (rank r is replica r, which leads
// ballot 0 when r = 0); every further rank is one client. Two flows carry
// the protocol messages, encoded by codec.h:
//   kv-accept  replicate, replicas -> replicas: phase 2 (Accept, heartbeats),
//              pushed once and delivered to every follower (a replica skips
//              its own records; every replica is a source so that any can lead);
//   kv-msg     shuffle with explicit targets, every rank -> every rank: client
//              requests and replies, phase 1, votes, catch-up, and the end of
//              the job.
// The protocol code is the same MultiPaxosReplica and Client the simulated
// tests run; this file only moves their messages and drives their clocks
// from one Worker loop per rank.
//
// End of the job: a client that finished its operations tells every
// replica and closes its source. Once every client is done and its log is
// fully committed, the leader tells the followers the final slot; each
// follower that applied it answers (to every replica) and closes; the leader
// closes last. Then
// every rank reports to the lowest live rank on a kv-report flow
// (job_report.h), which checks: equal digests and applied logs on all live
// replicas, every operation completed, and the log a linearization of the
// clients' history (check_linearization).
//
// Faults: a leader that stalls or is stopped (SIGSTOP) within the peer
// timeout is replaced; lost messages are made up for (test hooks). A lost
// replica (killed, or stopped past the peer timeout) ends the epoch: the
// flows above belong to an epoch, the ranks alive when it began. Once
// Cluster::alive() says a rank of the epoch is lost (or a flow fails and a
// rank turns out lost within the peer timeout), every rank destroys the
// epoch's flows and declares the next epoch's among the live ranks, under
// names with epoch_suffix(). Messages in flight are lost, which the
// protocols make up for; NOPaxos sees the new ordered flow (a new
// sequencer, on the lowest live client rank) as a new session. A majority of
// the replicas must stay alive; a lost client rank fails the job's checks.
// A replica restarted as a new process (sluice run --restarts; its
// Cluster::incarnation is one higher) comes back in the epoch after the one
// without it: it recovers its state from the others (message.h, Recovery)
// while they serve, and the others forget what its old process promised or
// voted. A restarted client rank exits with status 2. See docs/kv.md.
#pragma once

#include <sluice/cluster.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cluster_sim.h"
#include "flow_epochs.h"
#include "resp_gateway.h"
#include "wal.h"

namespace kv {

struct FlowJobOptions {
  Protocol protocol = Protocol::kMultiPaxos;
  uint32_t replicas = 3;
  uint32_t ops_per_client = 1000;
  uint32_t clients_per_rank = 1;  // closed-loop clients on each client rank
  // Operations each client keeps in flight (client.h); 0: 1 for workload
  // clients (closed-loop), kClientWindow behind a RESP gateway.
  uint32_t window = 0;
  // Commands per Request at most, and NOPaxos: per ordered record, which
  // this rank's clients share (0: bounded in bytes only; 1: one request per
  // sequence number, as NOPaxos was first written).
  uint32_t batch = 0;
  uint32_t keys = 100;
  uint64_t seed = 1;
  std::string workload = "mixed";  // cluster_sim.h ClusterOptions: mixed, a, b, c
  bool zipf = false;
  uint32_t value_bytes = 64;   // YCSB workloads' values
  uint64_t retry_ms = 2000;    // client: resend after this long without an answer
  uint64_t heartbeat_ms = 20;  // leader heartbeats
  // Followers wait this long plus a random share of it (up to as long
  // again) without a leader before they elect one: 20 missed heartbeats at
  // least. With the new leader's announcement (client.h) a lost leader's
  // writes resume within about 0.4-0.9 s.
  uint64_t election_timeout_ms = 400;
  uint64_t snapshot_every = 8192;  // both protocols' snapshot_every (message.h, Snapshots)
  bool trace_retries = false;
  // Test switch: each rank loses this fraction of the protocol messages it
  // receives (seeded by test_drop_seed and the rank): requests, replies,
  // votes, Accepts, and NOPaxos's ordered requests, which then leave gaps.
  // The job's own end-of-run messages are never lost.
  double test_drop = 0;
  uint64_t test_drop_seed = 1;
  // Test switch: a client that finished says so only once a rank has been
  // restarted and every rank is in its epoch again (or 60 s passed), so
  // that a replica killed and restarted is back before the job ends.
  bool test_await_rejoin = false;
  // resp: client ranks serve the Redis protocol (resp_gateway.h) instead of
  // running a workload, on TCP port gateway.port + (client index), or on a
  // port the kernel picks when it is 0 (each prints its port); the rest of
  // `gateway` as given (its history is set from `history` below). Neither
  // the gateways nor the replicas then keep what they completed or applied
  // (StoreOptions::keep_applied), so a job runs for as long as it is used.
  bool resp = false;
  GatewayOptions gateway;
  // The store's limit (StoreOptions::maxmemory; 0: none).
  uint64_t maxmemory = 0;
  // The largest command (its key and values) the job carries: every flow's
  // segment holds a message of bounded size plus one such command (or its
  // result), and a gateway refuses larger ones (gateway.max_entry_bytes is
  // set from it).
  uint64_t max_entry_bytes = kDefaultMaxEntryBytes;
  // The clients' completed operations (history.h: JSON lines, the input of
  // kv-porcupine); empty: none. A workload's: rank 0 writes them all at the
  // end. Behind --resp-port each gateway rank writes its own as they
  // complete: to this file with one gateway rank, to FILE.<rank> with more.
  std::string history;
  // --data-dir: each replica keeps its write-ahead log and snapshot under
  // data_dir/rank-N (replica_disk.h), every change on disk (as `fsync`
  // says) before the messages that follow from it leave, and a job started
  // again on the same directory starts from them. Either protocol, behind
  // --resp-port only. Empty: memory only.
  std::string data_dir;
  FsyncMode fsync = FsyncMode::kEverySec;
  // Test switch: RecordWriterOptions::hold_unsynced (a SIGKILL then loses
  // what was not synced, as a power cut would).
  bool test_hold_unsynced = false;
  uint32_t test_sync_delay_us = 0;  // --test-wal-sync-delay-us: a slower disk
  // Called on every replica after each round of its loop with the number of
  // log entries it has applied (the test switches stall a leader from here).
  std::function<void(uint32_t rank, bool leader, uint64_t applied)>
      on_progress;  // clients print each retry (when, how far they got) to stderr
};

// Runs this rank's part; returns the process exit status (0: every check
// passed, on rank 0; other ranks: their part went well). Rank 0 prints the
// summary. Throws sluice::Error on setup failures.
int run_flow_job(sluice::Cluster& cluster, const FlowJobOptions& options);

}  // namespace kv
