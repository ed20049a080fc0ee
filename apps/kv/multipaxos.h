// apps/kv/multipaxos.h: a Multi-Paxos replica as a deterministic Node.
//
// Ballots double as views: the leader of ballot b is replica b % n. Ballot 0
// belongs to replica 0 from the start (no ballot precedes it, so it needs no
// phase 1). A replica that hears nothing from its leader for its (seeded,
// randomized) election timeout picks the next ballot it leads and runs
// phase 1 once for the whole log: Prepare carries its commit index, and each
// Promise returns every entry above it. The new leader takes, per slot, an
// entry some promiser knows is committed, else the one accepted in the
// highest ballot, else a no-op, and proposes them all again in its ballot,
// and tells every client the replicated state knows that it leads (kLeader),
// so that they resend to it at once.
// From then on phase 2 runs per batch: Accept carries a batch of slots and
// the leader's commit index; followers answer Accepted, and a slot is
// committed when a majority (the leader included) accepted it in the
// current ballot. Replicas apply committed slots in order; the leader answers
// the client when it applies its command. Reads go through the log too.
//
// Followers learn the commit index from Accepts (heartbeats are empty
// Accepts, which also resend uncommitted slots, so lost messages are
// repaired) and fetch committed entries they lack with CatchUp.
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "durable.h"
#include "incoming_snapshot.h"
#include "message.h"
#include "store.h"

namespace kv {

struct MultiPaxosOptions {
  uint64_t heartbeat_ms = 10;
  // A follower starts phase 1 after hearing nothing from the leader for
  // election_timeout_ms plus a random share of it (seeded by replica id and
  // seed, so runs repeat and duelling candidates spread out).
  uint64_t election_timeout_ms = 60;
  uint64_t seed = 1;
  size_t max_batch = 64;
  size_t max_resend = 256;  // slots per resend or catch-up message
  // A process restarted without its state: recover first (message.h,
  // Recovery), with a nonce no earlier incarnation of this replica used.
  bool recover = false;
  uint64_t nonce = 0;
  uint64_t recovery_retry_ms = 50;  // ask again after this long without progress
  // A snapshot every this many applied slots, the log kept from the one
  // before (message.h, Snapshots); 0: never (the log grows without bound).
  uint64_t snapshot_every = 8192;
  // The store's options (store.h): its maxmemory, and whether it keeps
  // every applied identity.
  StoreOptions store;
};

class MultiPaxosReplica : public Node {
 public:
  MultiPaxosReplica(Config config, uint32_t id, MultiPaxosOptions options = {});

  void receive(const Message& m, Outbox& out) override;
  void tick(uint64_t now_ms, Outbox& out) override;
  void forget_replica(uint32_t r) override;
  // A follower whose leader is gone starts phase 1 at its next tick if it
  // leads the smallest ballot above the current one that a present
  // replica leads (the others wait for its Prepare, or their timeouts).
  void replicas_present(uint32_t mask) override;
  bool recovering() const override { return recovering_; }

  // Starts from state kept on disk (before the first tick): a follower in
  // its ballot, its log and store as they were. It never leads a ballot it
  // led before (what it proposed there may be lost from its disk); the
  // replica that leads the next ballot starts phase 1 at its first tick.
  void restore(RestoredState state);
  // The changes since the last call (DurableChanges); false: none. Tracking
  // them costs nothing until the first call.
  bool take_durable(DurableChanges* changes);
  // Everything kept, as a rewrite.
  DurableChanges durable_state() const;
  // After a restart of the whole job from files not synced at every
  // change (--fsync everysec or no): a write acknowledged before the crash
  // may be remembered by one replica only, the others' disks having lost
  // it. So while this replica's commit index is below `slot` (the highest
  // slot any replica's files held), its phase 1 needs a promise from every
  // replica in `replicas` (a bit per replica: those that restored files),
  // not only from a majority. forget_replica(r) drops r from them (a new
  // process of r remembers nothing).
  void require_promises_until(uint64_t slot, uint32_t replicas) {
    full_quorum_until_ = slot;
    full_quorum_ = replicas;
  }
  // Commands executed (Applied::kExecuted) whose client identity's high 32
  // bits are `run` (flow_job.cc: a run on --data-dir stamps its clients so),
  // and the sum of their identity_hash: what this run's clients completed.
  void count_run(uint32_t run) { counted_run_ = run; }
  uint64_t run_executed() const { return run_executed_; }
  uint64_t run_executed_sum() const { return run_executed_sum_; }

  // Starts phase 1 for the next ballot this replica leads now, whatever the
  // timers say (tests use it to make candidates duel).
  void campaign(Outbox& out) { start_election(out); }

  bool is_leader() const { return role_ == Role::kLeader; }
  uint64_t ballot() const { return ballot_; }
  uint64_t commit_index() const { return commit_; }
  // The last slot in the log (slots up to log_base() are in the snapshot).
  uint64_t log_size() const { return last_slot(); }
  uint64_t log_base() const { return base_; }
  uint64_t log_entries_held() const { return log_.size(); }
  uint64_t snapshot_slot() const { return snapshot_slot_; }
  uint64_t snapshots_taken() const { return snapshots_taken_; }
  uint64_t snapshots_installed() const { return snapshots_installed_; }
  const Store& store() const { return store_; }
  // How many times this replica started phase 1.
  uint64_t elections() const { return elections_; }

 private:
  enum class Role { kFollower, kCandidate, kLeader };

  std::optional<Entry>& slot(uint64_t s);  // s > base_; grows the log to s
  std::optional<Entry>& at(uint64_t s) { return log_[s - base_ - 1]; }  // base_ < s <= last
  uint64_t last_slot() const { return base_ + log_.size(); }
  void become_follower(uint64_t ballot);
  void start_election(Outbox& out);
  void become_leader(Outbox& out);
  void announce(Outbox& out);  // kLeader to every client the state knows
  void on_request(const Message& m, Outbox& out);
  void on_prepare(const Message& m, Outbox& out);
  void on_promise(const Message& m, Outbox& out);
  void on_accept(const Message& m, Outbox& out);
  void on_accepted(const Message& m, Outbox& out);
  void send_catch_up(uint32_t to, Outbox& out);  // the committed slots after ours, please
  void on_catch_up(const Message& m, Outbox& out);
  void on_committed(const Message& m, Outbox& out);
  void send_accept(uint64_t first, uint64_t last, Outbox& out);
  void propose_batch(Outbox& out);
  void advance_commit(Outbox& out);
  void reset_election_timer();
  void open_votes(uint64_t slot);
  void changed(uint64_t s) {  // slot s's entry was written
    dirty_lo_ = dirty_lo_ == 0 ? s : std::min(dirty_lo_, s);
    dirty_hi_ = std::max(dirty_hi_, s);
  }
  // Recovery (message.h): answering a recovering replica, and recovering.
  void on_recovery_request(const Message& m, Outbox& out);
  void on_recovery_reply(const Message& m, Outbox& out);
  void ask_recovery(Outbox& out);
  void restart_recovery();
  void finish_recovery(Outbox& out);
  // Snapshots (message.h).
  void send_snapshot(uint32_t to, uint64_t slot, uint64_t offset, Outbox& out);
  void request_snapshot(uint32_t from, uint64_t slot, uint64_t offset, Outbox& out);
  void on_snapshot_chunk(const Message& m, Outbox& out);

  Config config_;
  uint32_t id_;
  MultiPaxosOptions options_;
  std::mt19937_64 rng_;
  Role role_;
  uint64_t ballot_ = 0;                    // the highest ballot promised (or led)
  std::vector<std::optional<Entry>> log_;  // slot s at index s - base_ - 1
  uint64_t base_ = 0;                      // slots up to here are in the snapshot only
  // The latest snapshot (of slot snapshot_slot_), and one coming in.
  Snapshot snapshot_;
  uint64_t snapshot_slot_ = 0;
  IncomingSnapshot incoming_;
  uint64_t snapshots_taken_ = 0;
  uint64_t snapshots_installed_ = 0;
  uint64_t commit_ = 0;  // every slot up to here is committed
  uint64_t applied_ = 0;
  Store store_;
  uint64_t now_ = 0;
  uint64_t last_heard_ = 0;
  bool started_ = false;  // tick() has run once
  uint64_t election_timeout_ = 0;
  bool elect_now_ = false;  // replicas_present: the leader is gone and this replica follows it
  uint64_t last_heartbeat_ = 0;
  uint64_t next_catch_up_ = 0;  // no second CatchUp before this (one per heartbeat)
  uint64_t elections_ = 0;
  // Leader: requests waiting for the next batch, the (client, seq) of
  // commands in the log but not yet applied (so a retry is not proposed
  // twice), and who accepted each uncommitted slot in this ballot.
  std::vector<Command> pending_;
  std::set<std::pair<uint64_t, uint64_t>> proposed_;
  // votes_[i]: the replicas (bit r for replica r) that accepted slot
  // votes_first_ + i in this ballot, or kChosen once it is committed.
  static constexpr uint32_t kChosen = ~0u;
  std::deque<uint32_t> votes_;
  uint64_t votes_first_ = 0;
  // Candidate: the promises for ballot_.
  std::map<uint32_t, Message> promises_;
  std::map<uint32_t, std::set<uint64_t>> promise_parts_;  // part indices received
  // Recovering (message.h, Recovery): the nonce of this attempt, the latest
  // answer of each replica to it, and once a leader is chosen, its ballot,
  // its last slot when chosen, the next slot to ask for and its commit index.
  bool recovering_ = false;
  uint64_t nonce_ = 0;
  uint64_t attempt_ = 0;
  std::map<uint32_t, Message> recovery_replies_;
  int recovery_leader_ = -1;
  uint64_t recovery_ballot_ = 0;
  uint64_t recovery_last_ = 0;
  uint64_t recovery_next_ = 1;
  uint64_t recovery_commit_ = 0;
  uint64_t recovery_asked_ = 0;  // when the last request went
  uint32_t recovery_unanswered_ = 0;
  // take_durable: the slots written since (dirty_lo_ .. dirty_hi_, 0:
  // none), whether the log was cut, and the ballot last taken.
  uint64_t dirty_lo_ = 0;
  uint64_t dirty_hi_ = 0;
  bool rewrite_ = false;
  uint64_t durable_ballot_ = 0;
  bool restored_ = false;  // restore() ran: campaign at the first tick if next in line
  uint32_t counted_run_ = 0;
  uint64_t full_quorum_until_ = 0;  // require_promises_until
  uint32_t full_quorum_ = 0;
  uint64_t run_executed_ = 0;
  uint64_t run_executed_sum_ = 0;
};

}  // namespace kv
