// apps/kv/message.h: the messages of both replication protocols, and the
// interface every protocol participant implements.
//
// The protocols are deterministic state machines: a Node takes one message
// (or a clock tick) and appends the messages it wants sent to an outbox. It
// never reads a clock, sleeps, or touches a transport, so the same code runs
// on the seeded simulated network of the tests (sim.h) and, later, on sluice
// flows. Time is whatever the caller passes to tick(), in milliseconds.
//
// Node ids: replicas are 0 .. n-1, the NOPaxos sequencer is n, clients are
// n + 1 and up (Config::client_id).
//
// Thread safety: none; a Node belongs to one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store.h"

namespace kv {

enum class MsgType : uint8_t {
  // Both protocols.
  kRequest,  // client -> leader (Multi-Paxos) or -> sequencer (NOPaxos): a batch in cmds
  kReply,    // replica -> client: a batch in cmds (client and seq only) and, from the
             // Multi-Paxos leader or the NOPaxos leader (flag), results pairwise
  // Multi-Paxos.
  kPrepare,    // candidate -> all: phase 1a for ballot `view`, a = its commit index
  kPromise,    // replica -> candidate: phase 1b, entries above the candidate's commit
  kReject,     // replica -> candidate or leader: I promised the higher ballot `view`
  kAccept,     // leader -> followers: phase 2a for entries from slot a; b = commit index
  kAccepted,   // follower -> leader: accepted slots a .. b in ballot `view`
  kCatchUp,    // follower -> leader: send me committed entries from slot a
  kCommitted,  // leader -> follower: committed entries from slot a
  kLeader,     // new leader -> clients: I lead `view` (Multi-Paxos: the ballot; NOPaxos:
               // the view, in `session`); send what you wait for again now
  // NOPaxos.
  kOrdered,            // sequencer -> replicas: a batch of requests (cmds) stamped
                       // (session, msgnum = a)
  kGapRequest,         // replica -> replica(s): do you have log slot a?
  kGapReply,           // answer; flag = found (the entry travels in entries[0])
  kGapCommit,          // leader -> followers: slot a is a no-op
  kGapCommitReply,     // follower -> leader: slot a is a no-op in my log
  kSyncPrepare,        // leader -> followers: my log up to slot a (entries from b);
                       // flag: positions only (each entry's commands left out, their
                       // count in its ballot)
  kSyncReply,          // follower -> leader: my log matches yours up to a; c != 0:
                       // I lack slot c's commands, send the full entries from c
  kSyncCommit,         // leader -> followers: slots up to a are final; execute them
  kViewChangeRequest,  // anyone -> all: move to view (view, session); from the new leader
                       // of that view: a = the first slot of yours it still lacks
  kViewChange,         // replica -> new leader: last normal view (a, b), sync point c,
                       // its log after c (or from the slot asked for), in parts (flag:
                       // more parts follow; the last carries its last entry)
  kStartView,          // new leader -> all: view (view, session), entries from slot a,
                       // b = the log's length when the view started, c = sync point;
                       // a follower joins once it holds all of it (pulling with kRecover)
  kRecover,            // replica -> leader: I am behind your view; send StartView. With
                       // flag: I hold your log up to a; without: send your log from a
  // Both protocols: a replica restarted without its state (see Recovery below).
  kRecoveryRequest,  // recovering -> replicas: a = nonce; b = 0 (whose view is latest?)
                     // or, to the leader it chose, the first log slot it still needs
  kRecoveryReply,    // replica -> recovering: a = nonce; view/session: the replier's;
                     // flag = it leads that view in normal status; b = its last log
                     // slot; c = its commit index (Multi-Paxos) or sync point (NOPaxos);
                     // entries: the leader's log from the slot asked for (bounded);
                     // Multi-Paxos: session = the slot its log starts after (its
                     // snapshot's), when the slot asked for is not above it
  // Both protocols: snapshots (see Snapshots below).
  kSnapshotRequest,  // replica -> replica: send snapshot a (0: your latest) from byte b
  kSnapshotChunk,    // answer: snapshot of slot a, bytes b .. b + blob.size() of c in all;
                     // NOPaxos: entries[0] holds the (session, msgnum) of slot a, and a
                     // recovering replica asking for a slot inside the snapshot gets
                     // this instead of a RecoveryReply
  // Ending a job on flows (flow_job.h), not part of either protocol.
  kDone,      // client -> replicas: I finished my operations
  kFinish,    // leader -> followers: all clients are done; apply up to slot a, then stop
  kFinished,  // follower -> leader: I applied up to the finish slot
};

// A log entry. Multi-Paxos uses `ballot` (the ballot it was accepted in)
// and holds one command; NOPaxos uses `session`/`msgnum` (where the ordered
// multicast put it) and holds the batch of requests the multicast carried
// under that one message number, in order (none: a no-op).
struct Entry {
  uint64_t slot = 0;  // position in the log, from 1
  uint64_t ballot = 0;
  bool committed = false;  // Multi-Paxos promises: the sender knows it is chosen
  uint64_t session = 0;
  uint64_t msgnum = 0;
  Command cmd;                // Multi-Paxos
  std::vector<Command> cmds;  // NOPaxos
  friend bool operator==(const Entry&, const Entry&) = default;
};

struct Message {
  MsgType type = MsgType::kRequest;
  uint32_t from = 0;
  uint32_t to = 0;
  uint64_t view = 0;     // ballot (Multi-Paxos) or leader number (NOPaxos)
  uint64_t session = 0;  // NOPaxos session
  uint64_t a = 0;        // per type, see MsgType
  uint64_t b = 0;
  uint64_t c = 0;
  bool flag = false;
  std::vector<Entry> entries;  // log transfer
  // Batches. kRequest: commands in each client's seq order (Multi-Paxos:
  // one client's; NOPaxos: a client rank may send several clients' as one
  // batch, which the ordered multicast numbers once). kOrdered: that batch.
  // kReply: some of one client's commands (client and seq only) and, where
  // the reply carries results, theirs pairwise.
  std::vector<Command> cmds;
  std::vector<Result> results;
  std::string blob;  // kSnapshotChunk: a piece of a snapshot
};

// A batch of commands or results stays below this many bytes of message,
// well inside the 64 KiB segments of the flows that carry them.
inline constexpr size_t kMaxBatchBytes = 32 * 1024;
// A NOPaxos batch (one ordered record, one log slot) stays below this many
// bytes of commands, so that the ordered flow's segments stay small and a
// log message bounded in bytes (nopaxos_internal.h) holds several slots.
inline constexpr size_t kMaxOrderedBatchBytes = 8 * 1024;
// What a command takes in a message, near enough to bound batches.
inline size_t wire_bytes(const Command& c) {
  return 50 + c.key.size() + c.value.size() + c.expected.size();
}
// Whether a batch of `count` commands taking `bytes` has room for `more`
// commands taking `more_bytes`: a batch holds at most `bound` bytes of
// commands and at most `limit` commands (0: no limit but bytes), and it
// always takes its first.
inline bool batch_has_room(size_t count, size_t bytes, size_t more, size_t more_bytes, size_t bound,
                           uint32_t limit) {
  return count == 0 || (bytes + more_bytes <= bound && (limit == 0 || count + more <= limit));
}
// What a batch of commands takes in a message.
inline size_t wire_bytes(const std::vector<Command>& cmds) {
  size_t n = 0;
  for (const Command& c : cmds) n += wire_bytes(c);
  return n;
}
// What an entry's commands take in a message.
inline size_t wire_bytes(const Entry& e) { return wire_bytes(e.cmd) + 4 + wire_bytes(e.cmds); }

using Outbox = std::vector<Message>;

// Recovery. A replica process that restarts has lost its log, its promises
// and its votes, so it must not act as the replica it was: a vote it forgot
// could let a later quorum miss a chosen value. It starts recovering (the
// protocols' `recover` option, with a nonce no earlier incarnation used):
//  1. It asks every replica which view is latest (RecoveryRequest, b = 0)
//     and waits for f + 1 answers with its nonce, one of them from the
//     leader of the highest view among them, in normal status. Any f + 1
//     replicas other than itself meet every quorum it took part in, so that
//     view is at least the last one it helped to form.
//  2. It copies that leader's log up to the leader's last slot at its
//     answer, in bounded pieces (RecoveryRequest, b = next slot), entries
//     committed or not: the leader proposed every one of them in its view.
//  3. It takes the leader's view and becomes a follower; normal operation
//     (resends, catch-up, synchronization, gap requests) brings the rest.
// While recovering it sends nothing else: no promise, vote, view change or
// reply. If the leader's view changes under it, it starts again with the
// next nonce. The others call Node::forget_replica(r) when they learn r
// restarted (before any message of the new process reaches them): a
// candidate drops r's promise, a leader the votes and sync state r forgot.
inline constexpr size_t kRecoveryEntries = 128;  // log entries per RecoveryReply

// Snapshots. Every `snapshot_every` applied slots a replica serializes its
// store (Store::serialize) as its snapshot of that slot, and drops the log
// entries up to its previous snapshot's slot: a log holds one to two
// snapshot intervals of slots, whatever the run's length. Only applied
// slots are dropped, and applied slots are chosen. A replica that needs
// slots another one no longer keeps (catching up, recovering, a candidate
// behind a promiser's snapshot) fetches that replica's snapshot in chunks
// of kSnapshotChunkBytes (SnapshotRequest / SnapshotChunk), installs it,
// and goes on from the slot after it. A replica keeps its latest snapshot
// until it takes the next, so a transfer in progress can finish; if a newer
// one replaced it, the transfer begins again with that one.
inline constexpr size_t kSnapshotChunkBytes = 32 * 1024;

// 2f + 1 replicas.
struct Config {
  uint32_t replicas = 3;
  uint32_t f() const { return (replicas - 1) / 2; }
  uint32_t majority() const { return replicas / 2 + 1; }
  // The smallest view (Multi-Paxos: ballot) above `view` whose leader,
  // replica view % replicas, is in `present` (a bit per replica; it must
  // hold one): where the replicas left go when their leader is gone
  // (Node::replicas_present).
  uint64_t next_view_led_by(uint32_t present, uint64_t view) const {
    uint64_t v = view + 1;
    while ((present & (1u << (v % replicas))) == 0) ++v;
    return v;
  }
  uint32_t sequencer_id() const { return replicas; }
  uint32_t client_id(uint32_t i) const { return replicas + 1 + i; }
};

class Node {
 public:
  virtual ~Node() = default;
  virtual void receive(const Message& m, Outbox& out) = 0;
  // Called as simulated (or real) time passes; `now_ms` never decreases.
  virtual void tick(uint64_t now_ms, Outbox& out) = 0;
  // Replica `r` restarted without its state (see Recovery above).
  virtual void forget_replica(uint32_t /*r*/) {}
  // The replicas the job's membership holds now, a bit per replica (this
  // node's own included): one missing is gone (its process ended, or the
  // membership declared it lost), not merely slow. A node may act at its
  // next tick where it would otherwise wait for a timeout: a gone
  // leader's successor starts its election, a client sends its unanswered
  // operations again soon. Liveness only: nothing depends on it for
  // safety, and a node that is never told waits for its timeouts.
  virtual void replicas_present(uint32_t /*mask*/) {}
  // The job's flows were declared anew for a new membership (a rank lost,
  // back or new, replica or not): what was sent on the old ones and not
  // delivered is gone with them. A client sends its unanswered operations
  // again soon (liveness only, as above).
  virtual void flows_renewed() {}
  // Whether this node is still recovering (see Recovery above).
  virtual bool recovering() const { return false; }
};

}  // namespace kv
