// apps/kv/nopaxos.h: NOPaxos (Li et al., OSDI 2016) as deterministic Nodes: the
// sequencer that plays the ordered unreliable multicast, and the replica.
//
// Ordered multicast: the sequencer stamps each client request with its
// session number and the next message number and sends it to every replica;
// any copy may be lost, none overtakes another. (On sluice this is the
// ordered replicate flow, whose lost sequence numbers surface as
// Status::kGap.) A replica that sees message number k + 1 arrive while it
// expects k has a drop notification for k.
//
// Batches: a multicast message carries a batch of requests (Message::cmds,
// one or several clients'), and the batch takes one log slot
// (Entry::cmds; none: a no-op). Everything below is per slot.
//
// Normal operation: replicas append batches in message order; the leader
// (replica view % n) executes each command and answers each client once per
// slot with its results, the others acknowledge each client once per slot. A
// client completes a command on f + 1 replies for the same (view, session,
// log slot) that include the leader's.
//
// Gap agreement: on a drop the leader asks the others for the missing
// request; if none has it within the gap timeout it appends a no-op, sends
// GapCommit and proceeds only when f followers have the no-op too. A
// follower that misses a message asks the leader for that slot (which holds
// either the request or the no-op).
//
// Synchronization: the leader periodically sends each follower its log
// from the last slot that follower confirmed, in pieces bounded in entries
// and bytes; followers install it and answer; at f answers the leader
// commits the new sync point and followers execute up to it. (Followers do
// not execute before: their entries could still become no-ops.) The log
// goes as positions ((session, message number, number of commands) per
// slot): a follower holds the same batch wherever it holds the same
// position, so only a no-op or a batch it lacks differs; for a batch it
// lacks it asks for the full entries from that slot.
//
// View change: a view is (leader number, session number), compared component
// by component; on a conflict replicas move to the component-wise maximum. A
// follower that hears nothing from the leader moves to (leader + 1,
// session); a replica that sees a request of a newer session (the sequencer
// was replaced) moves to (leader, new session). Replicas send the new leader
// their sync point and their log after it (in bounded parts); from f + 1 of
// them it takes the final slots up to the highest sync point among them
// (fetching those it lacks from the replica that has them), and merges the
// logs of the latest normal view slot by slot above it (a no-op if any has
// one, else the request). Followers copy the new log from the leader in
// bounded pieces (StartView) and only then take part in the view. A replica
// whose executed prefix the new log contradicts rebuilds its store from its
// snapshot and the log. (nopaxos.cc, "View change", has the details and the
// safety argument.)
//
// Snapshots (message.h): every snapshot_every executed slots a replica
// serializes its store; once the sync point reaches that slot (at once on a
// follower, which executes only final slots; later on the leader, which
// executes ahead) it is the replica's snapshot of the slot, and the log is
// dropped up to the previous snapshot's slot. Whoever needs slots below a
// log's base (a follower behind, a new leader fetching final slots, a
// recovering replica) gets the snapshot in chunks; each chunk carries, in
// entries[0], the snapshot's last slot's (session, msgnum) with no command,
// where the receiver's log goes on from.
//
// Recovery (message.h): a replica restarted without its state learns the
// latest view from f + 1 others, copies the log of that view's leader in
// bounded pieces and joins as its follower; until then it says nothing but
// RecoveryRequest. The others forget what it acknowledged (forget_replica).
// Where the slots it asks for are below the leader's log base, the leader
// answers with its snapshot instead (a SnapshotChunk in place of the
// RecoveryReply: NOPaxos's RecoveryReply carries the session in `session`,
// where Multi-Paxos puts its base); it installs that and copies the log after.
//
// Durability (--data-dir, durable.h): after each round the host takes the
// replica's changes (take_durable) and writes them before the round's
// messages leave; a replica started again from its files (restore) is in
// the view it was in, with its log and sync point, and its store executed
// as far as it was. The next run's sequencer has a newer session, so the
// replicas' first ordered request starts a view change, whose merge of
// f + 1 logs brings the restored replicas to one log (nopaxos_durable.cc).
//
// Thread safety: none.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "durable.h"
#include "incoming_snapshot.h"
#include "message.h"
#include "store.h"

namespace kv {

class Sequencer : public Node {
 public:
  Sequencer(Config config, uint64_t session) : config_(config), session_(session) {}
  void receive(const Message& m, Outbox& out) override;
  void tick(uint64_t, Outbox&) override {}
  uint64_t session() const { return session_; }

 private:
  Config config_;
  uint64_t session_;
  uint64_t next_ = 1;
};

struct NoPaxosOptions {
  uint64_t sync_ms = 10;          // leader: synchronization (and heartbeat) period
  uint64_t gap_timeout_ms = 5;    // how long to look for a missing request
  uint64_t view_timeout_ms = 60;  // follower: leader silence before a view change
  uint64_t seed = 1;
  uint64_t max_sync_entries = 256;  // log entries per SyncPrepare (and at most ~48 KiB)
  // A process restarted without its state: recover first (message.h,
  // Recovery), with a nonce no earlier incarnation of this replica used.
  bool recover = false;
  uint64_t nonce = 0;
  uint64_t recovery_retry_ms = 50;  // ask again after this long without progress
  // A snapshot every this many executed (and final) slots, the log kept
  // from the one before (message.h, Snapshots); 0: never (the log grows
  // without bound).
  uint64_t snapshot_every = 8192;
  // The store's options (store.h): its maxmemory, and whether it keeps
  // every applied identity.
  StoreOptions store;
};

class NoPaxosReplica : public Node {
 public:
  NoPaxosReplica(Config config, uint32_t id, NoPaxosOptions options = {});

  void receive(const Message& m, Outbox& out) override;
  void tick(uint64_t now_ms, Outbox& out) override;
  void forget_replica(uint32_t r) override;
  // A replica whose view's leader is gone starts, at its next tick, a view
  // change to the smallest later view whose leader is present (every
  // present replica picks the same one), instead of after the view timeout.
  void replicas_present(uint32_t mask) override;
  bool recovering() const override { return status_ == Status::kRecovering; }

  bool is_leader() const { return status_ == Status::kNormal && view_ % config_.replicas == id_; }
  bool normal() const { return status_ == Status::kNormal || status_ == Status::kGapCommit; }
  uint64_t view() const { return view_; }
  uint64_t session() const { return session_; }
  // The last slot in the log (slots up to log_base() are in the snapshot).
  uint64_t log_size() const { return last_slot(); }
  uint64_t log_base() const { return base_; }
  uint64_t log_entries_held() const { return log_.size(); }
  uint64_t sync_point() const { return sync_point_; }
  // The entries held: slots log_base() + 1 .. log_size().
  const std::vector<Entry>& log() const { return log_; }
  const Store& store() const { return store_; }
  uint64_t snapshot_slot() const { return snapshot_slot_; }
  uint64_t snapshots_taken() const { return snapshots_taken_; }
  uint64_t snapshots_installed() const { return snapshots_installed_; }
  uint64_t gaps_committed() const { return gaps_committed_; }
  uint64_t gaps_recovered() const { return gaps_recovered_; }
  uint64_t view_changes() const { return view_changes_; }
  // Views this replica started as leader after fetching final slots it
  // lacked from another replica (nopaxos.cc, View change).
  uint64_t final_fetches() const { return final_fetches_; }
  // Recovery attempts so far (each with its own nonce); 0 if it never recovered.
  uint64_t recovery_attempts() const { return attempt_; }

  // Starts a new replica (before its first tick) from state kept on disk: in its view,
  // normal if it was, with its log, snapshot and sync point, and its store
  // executed as it was (a follower's to the sync point, a leader's to its
  // log's end). `state` must not be a recovering replica's.
  void restore(RestoredState state);
  // The changes since the last call (DurableChanges); false: none. A
  // recovering replica keeps nothing (its files say it is recovering until
  // it finished: then everything, as a rewrite).
  bool take_durable(DurableChanges* changes);
  // Everything kept, as a rewrite.
  DurableChanges durable_state() const;
  // After a restart of the whole job from files not synced at every change
  // (--fsync everysec or no): one replica's disk may hold slots, final ones
  // among them, that the others' lost (a snapshot is synced whatever
  // --fsync says), and a merge without it would put other requests in
  // them. So the first view to start after the restart merges the logs of
  // every replica in `replicas` (a bit per replica: those that restored
  // files), not of any f + 1. forget_replica(r) drops r from them (a new
  // process of r remembers nothing).
  void require_view_changes_from(uint32_t replicas) { full_merge_ = replicas; }

 private:
  enum class Status { kNormal, kGapCommit, kViewChange, kRecovering };

  // What the new leader has of one replica's ViewChange (sent in parts).
  struct VcLog {
    bool known = false;
    uint64_t view = 0, session = 0;  // its last normal view
    uint64_t sync = 0;               // its sync point
    bool ended = false;              // its final part came: `last` is its last slot
    uint64_t last = 0;
    std::map<uint64_t, Entry> entries;  // by slot, from its sync point + 1 (or lower, fetched)
  };

  uint32_t leader_of(uint64_t view) const { return static_cast<uint32_t>(view % config_.replicas); }
  bool leading() const { return leader_of(view_) == id_; }
  uint64_t last_slot() const { return base_ + log_.size(); }
  Entry& at(uint64_t s) { return log_[s - base_ - 1]; }  // base_ < s <= last_slot()
  const Entry& at(uint64_t s) const { return log_[s - base_ - 1]; }
  const Entry& last_entry() const { return log_.empty() ? base_entry_ : log_.back(); }
  // Appends our entries from slot `from` to m.entries, as many as fit in
  // one bounded message (and at most max_entries); returns the next slot.
  // `positions`: each entry's position only, its number of commands in
  // `ballot` (a synchronization's; send_sync_to).
  uint64_t fill(Message& m, uint64_t from, uint64_t max_entries, bool positions = false) const;
  Message make(MsgType t, uint32_t to) const;
  void on_ordered(const Message& m, Outbox& out);
  void append(Entry e, Outbox& out);
  void drain(Outbox& out);
  void execute_to(uint64_t slot, Outbox& out, bool reply);
  void on_gap_request(const Message& m, Outbox& out);
  void on_gap_reply(const Message& m, Outbox& out);
  void on_gap_commit(const Message& m, Outbox& out);
  void on_gap_commit_reply(const Message& m, Outbox& out);
  void on_sync_prepare(const Message& m, Outbox& out);
  void on_sync_reply(const Message& m, Outbox& out);
  void on_sync_commit(const Message& m, Outbox& out);
  void on_recover(const Message& m, Outbox& out);
  // View change (nopaxos.cc).
  void enter_view(uint64_t view, uint64_t session);
  void start_view_change(uint64_t view, uint64_t session, Outbox& out);
  void send_view_change(uint64_t from, Outbox& out);
  void on_view_change_request(const Message& m, Outbox& out);
  void on_view_change(const Message& m, Outbox& out);
  static bool complete(const VcLog& v);
  static uint64_t first_missing(const VcLog& v, uint64_t from);
  void pull_view_changes(Outbox& out);
  void try_start_view(Outbox& out);
  // The new leader of a view tells every client the store knows of (kLeader),
  // so that what waits on the old view is sent again at once.
  void announce(Outbox& out);
  void send_start_view(uint32_t to, uint64_t from, Outbox& out);
  void on_start_view(const Message& m, Outbox& out);
  void ask_start_view(Outbox& out);
  void adopt(std::vector<Entry> after_sync);
  void rebuild_store();
  void send_sync(Outbox& out);
  void send_sync_to(uint32_t follower, Outbox& out, bool full);
  void commit_gap(Outbox& out);
  // Once a view starts: the held messages that continue the log go to
  // pending_ (and are drained); the rest are dropped.
  void release_held(Outbox& out);
  // Whether (view, session) is newer than ours in some component.
  bool newer(uint64_t view, uint64_t session) const { return view > view_ || session > session_; }
  uint64_t expected_msgnum() const;
  // Recovery (message.h): answering a recovering replica, and recovering.
  void on_recovery_request(const Message& m, Outbox& out);
  void on_recovery_reply(const Message& m, Outbox& out);
  void reset_state();
  void restart_recovery();
  void ask_recovery(Outbox& out);
  void finish_recovery(Outbox& out);
  // Snapshots (message.h).
  void maybe_snapshot();
  void send_snapshot(uint32_t to, uint64_t slot, uint64_t offset, Outbox& out);
  void request_snapshot(uint32_t from, uint64_t slot, uint64_t offset, Outbox& out);
  void on_snapshot_chunk(const Message& m, Outbox& out);
  // Durability: slot s changed (take_durable hands it out next).
  void changed(uint64_t s) {
    dirty_lo_ = dirty_lo_ == 0 ? s : std::min(dirty_lo_, s);
    dirty_hi_ = std::max(dirty_hi_, s);
  }
  // The numbers of DurableChanges (view, session, last normal view, sync
  // point, recovering) as they are now.
  void put_numbers(DurableChanges* c) const;
  // What take_durable compares with the last take: view, session, last
  // normal view, sync point.
  std::array<uint64_t, 5> durable_numbers() const {
    return {view_, session_, last_normal_view_, last_normal_session_, sync_point_};
  }

  Config config_;
  uint32_t id_;
  NoPaxosOptions options_;
  std::mt19937_64 rng_;
  Status status_ = Status::kNormal;
  uint64_t view_ = 0;
  uint64_t session_ = 1;
  uint64_t last_normal_view_ = 0;
  uint64_t last_normal_session_ = 1;
  std::vector<Entry> log_;               // slot s at index s - base_ - 1
  uint64_t base_ = 0;                    // slots up to here are in the snapshot only
  Entry base_entry_;                     // slot base_'s (session, msgnum), its command dropped
  std::map<uint64_t, Message> pending_;  // ordered messages past a gap, by msgnum
  // Ordered messages of the view change's session that arrived during it,
  // by msgnum: taken in once the view starts (release_held), where
  // dropping them would make each a gap to agree on. At most kMaxHeld
  // (batches of at most kMaxOrderedBatchBytes); more are dropped.
  std::map<uint64_t, Message> held_;
  static constexpr size_t kMaxHeld = 1024;
  uint64_t sync_point_ = 0;   // slots up to here are final
  uint64_t synced_upto_ = 0;  // follower: log matches the leader's up to here (this view)
  uint64_t executed_ = 0;
  Store store_;
  // The latest snapshot (of slot snapshot_slot_, final), one taken at an
  // executed slot not yet final (the leader executes ahead of its sync
  // point: it becomes the snapshot once the sync point reaches it), and one
  // coming in.
  Snapshot snapshot_;
  uint64_t snapshot_slot_ = 0;
  Entry snapshot_entry_;
  Snapshot candidate_;
  uint64_t candidate_slot_ = 0;
  Entry candidate_entry_;
  IncomingSnapshot incoming_;
  uint64_t snapshots_taken_ = 0;
  uint64_t snapshots_installed_ = 0;
  uint64_t now_ = 0;
  uint64_t last_heard_ = 0;
  bool started_ = false;  // tick() has run once
  uint64_t view_timeout_ = 0;
  uint64_t change_to_ = 0;    // replicas_present: the view to change to at once (0: none)
  uint64_t last_sync_ = 0;    // leader: the last synchronization (or, in a view change, pull)
  uint64_t gap_started_ = 0;  // when the current gap request or gap commit was (re)sent
  bool gap_open_ = false;     // a gap request is outstanding
  std::set<uint32_t> gap_acks_;
  // Leader: per follower, the last slot it confirmed holding as in our log.
  std::map<uint32_t, uint64_t> follower_synced_;
  // Leader: its last slot when it started this view; a follower takes part
  // in the view once it holds the leader's log up to there.
  uint64_t view_start_ = 0;
  // New leader in a view change: the ViewChanges so far, and the replica
  // whose final slots it is fetching (fetching_).
  std::map<uint32_t, VcLog> view_changes_msgs_;
  bool fetching_ = false;
  uint32_t fetch_from_ = 0;
  // Follower in a view change: the new leader's log from its sync point + 1
  // (sv_first_) as far as copied, for view (sv_view_, sv_session_).
  uint64_t sv_view_ = 0;
  uint64_t sv_session_ = 0;
  uint64_t sv_first_ = 0;
  std::vector<Entry> sv_entries_;
  uint64_t vc_started_ = 0;
  uint64_t gaps_committed_ = 0;
  uint64_t gaps_recovered_ = 0;
  uint64_t view_changes_ = 0;
  uint64_t final_fetches_ = 0;
  // Durability (take_durable): the slots changed since the last take
  // (dirty_lo_ .. dirty_hi_; 0: none), whether everything must be written
  // again (the log was cut or replaced, a snapshot taken or installed, a
  // recovery finished), and the numbers as last taken.
  uint64_t dirty_lo_ = 0, dirty_hi_ = 0;
  bool rewrite_ = false;
  std::array<uint64_t, 5> kept_{};
  uint32_t full_merge_ = 0;  // require_view_changes_from: until a view starts
  // Recovering (status_ kRecovering): the nonce of this attempt; phase 1,
  // the latest answer of each other replica; phase 2 (recovery_leader_ set),
  // the leader chosen, its view, its last slot at its phase-1 answer and its
  // latest sync point. log_ holds what was copied so far.
  uint64_t attempt_ = 0;
  uint64_t nonce_ = 0;
  std::map<uint32_t, Message> recovery_replies_;
  int recovery_leader_ = -1;
  uint64_t recovery_view_ = 0;
  uint64_t recovery_session_ = 0;
  uint64_t recovery_last_ = 0;
  uint64_t recovery_sync_ = 0;
  bool recovery_due_ = false;    // ask at the next tick
  uint64_t recovery_asked_ = 0;  // when the last request went
  uint32_t recovery_unanswered_ = 0;
};

}  // namespace kv
