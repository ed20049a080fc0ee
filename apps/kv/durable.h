// apps/kv/durable.h: what a replica of either protocol keeps on disk under
// `sluice-kv run --data-dir` (replica_disk.h), as the protocol hands it
// out (DurableChanges) and as it takes it back (RestoredState).
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "message.h"
#include "store.h"

namespace kv {

// What a replica must not forget, each on disk before any message that
// follows from it leaves (etcd's Ready: the host takes the changes after
// each round, writes them, then sends the outbox):
//   Multi-Paxos  its ballot (the promise) and the entries it accepted or
//                installed; the commit index rides along (it may lag on
//                disk: the protocol learns it again).
//   NOPaxos      its view (leader number and session), the last view it
//                was normal in (what a view change merges by), its log
//                entries (each with its place in the multicast) and its
//                sync point (slots up to it are final).
// A rewrite replaces everything kept: the snapshot (slot and
// Store::serialize bytes) and the whole log after it.
struct DurableChanges {
  uint64_t ballot = 0;   // Multi-Paxos: the ballot; NOPaxos: the view's leader number
  uint64_t commit = 0;   // Multi-Paxos: the commit index; NOPaxos: the sync point
  uint64_t session = 0;  // NOPaxos: the view's session
  uint64_t normal_view = 0, normal_session = 0;  // NOPaxos: the last normal view
  // The replica is recovering from the others (message.h, Recovery): its
  // files hold nothing it may go on from.
  bool recovering = false;
  std::vector<Entry> entries;  // changed since the last take (rewrite: all), by slot
  bool rewrite = false;
  uint64_t snapshot_slot = 0;  // rewrite only: the snapshot's slot (0: none)
  std::string snapshot;        // rewrite only: its bytes
  // NOPaxos, rewrite only: the snapshot's last slot's place in the
  // multicast (session, msgnum; no command), where the log goes on from.
  Entry snapshot_entry;
};

// What a replica restores from disk (replica_disk.h) instead of starting
// empty: the store as of its snapshot, and the rest of DurableChanges as
// the last record left it.
struct RestoredState {
  uint64_t ballot = 0;
  uint64_t commit = 0;
  uint64_t session = 0;
  uint64_t normal_view = 0, normal_session = 0;
  bool recovering = false;
  std::vector<Entry> entries;  // by slot, each above snapshot_slot
  uint64_t snapshot_slot = 0;
  std::string snapshot;  // Store::serialize bytes (empty: no snapshot)
  Entry snapshot_entry;  // NOPaxos (as in DurableChanges)
  Store store;           // restored from `snapshot` (empty: none)
};

}  // namespace kv
