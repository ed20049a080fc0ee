// NoPaxosReplica: snapshots and the recovery of a replica restarted
// without its state (message.h, Snapshots and Recovery).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>

#include "nopaxos.h"
#include "nopaxos_internal.h"

namespace kv {

using namespace nopaxos_detail;

// --- Snapshots (message.h).

void NoPaxosReplica::maybe_snapshot() {
  if (options_.snapshot_every == 0) return;
  if (candidate_slot_ == 0 && executed_ >= snapshot_slot_ + options_.snapshot_every &&
      executed_ > base_) {
    candidate_ = store_.snapshot();
    candidate_slot_ = executed_;
    candidate_entry_ = position(at(executed_));
  }
  if (candidate_slot_ == 0 || candidate_slot_ > sync_point_) return;
  // Final: our snapshot now, and the log kept from the previous one.
  const uint64_t previous = snapshot_slot_;
  snapshot_ = std::move(candidate_);
  snapshot_slot_ = candidate_slot_;
  snapshot_entry_ = candidate_entry_;
  candidate_.clear();
  candidate_slot_ = 0;
  ++snapshots_taken_;
  rewrite_ = true;
  if (previous > base_) {
    base_entry_ = position(at(previous));
    log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(previous - base_));
    base_ = previous;
  }
}

void NoPaxosReplica::send_snapshot(uint32_t to, uint64_t slot, uint64_t offset, Outbox& out) {
  if (snapshot_slot_ == 0 || to == id_) return;
  if (slot != snapshot_slot_ || offset > snapshot_.size())
    offset = 0;  // a newer one: from the start
  Message c = make(MsgType::kSnapshotChunk, to);
  c.a = snapshot_slot_;
  c.b = offset;
  c.c = snapshot_.size();
  c.blob = snapshot_.bytes(store_, offset, kSnapshotChunkBytes);
  // The snapshot's last slot's place in the multicast (its command is in
  // the store), where the receiver's log goes on from.
  c.entries.push_back(snapshot_entry_);
  out.push_back(std::move(c));
}

void NoPaxosReplica::request_snapshot(uint32_t from, uint64_t slot, uint64_t offset, Outbox& out) {
  Message r = make(MsgType::kSnapshotRequest, from);
  r.a = slot;
  r.b = offset;
  out.push_back(r);
  if (status_ == Status::kRecovering) recovery_asked_ = now_;
}

void NoPaxosReplica::on_snapshot_chunk(const Message& m, Outbox& out) {
  // Whom a snapshot is taken from. Its slots are final whoever sends it,
  // but what we then tell our leader (that our log matches its log up to
  // the snapshot's slot) holds only for the leader of our view or a later
  // one: a leader of an earlier view, cut off, may hold other entries there.
  if (status_ == Status::kRecovering) {
    if (static_cast<int>(m.from) != recovery_leader_) return;
    recovery_unanswered_ = 0;
  } else if (leading()) {
    // A new leader fetching final slots; a leader in its view needs none.
    if (status_ != Status::kViewChange || !fetching_ || m.from != fetch_from_) return;
    if (m.a <= sync_point_) return;
  } else {
    // From the leader of our view, or of a later one, which we move to
    // (as a StartView would move us: to copy its log, from its snapshot).
    if (m.from != leader_of(m.view) || m.view < view_ || m.session < session_) return;
    if (m.a <= sync_point_) return;  // nothing we lack
    if (newer(m.view, m.session)) enter_view(m.view, m.session);
  }
  bool appended = false;
  const IncomingSnapshot::Step step = incoming_.add(m, &appended);
  if (appended) vc_started_ = last_heard_ = now_;  // progress
  switch (step) {
    case IncomingSnapshot::Step::kIgnored:
      return;
    case IncomingSnapshot::Step::kAskNext:
      return request_snapshot(m.from, incoming_.slot(), incoming_.offset(), out);
    case IncomingSnapshot::Step::kComplete:
      break;
  }
  if (m.entries.empty()) {  // no place in the multicast to go on from
    incoming_.clear();
    return;
  }
  // Slots up to the snapshot's are final and executed in it; later ones
  // stay (what they are for is unchanged: a follower's own, or a log it
  // sends in a view change, above its sync point).
  const uint64_t s = incoming_.slot();
  if (s >= last_slot()) {
    log_.clear();
  } else if (s > base_) {
    log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(s - base_));
  }
  base_ = s;
  base_entry_ = m.entries.front();
  base_entry_.slot = s;
  store_ = incoming_.take_store();
  executed_ = sync_point_ = s;
  synced_upto_ = std::max(synced_upto_, s);
  snapshot_ = Snapshot(incoming_.take_bytes());
  snapshot_slot_ = s;
  snapshot_entry_ = base_entry_;
  candidate_.clear();
  candidate_slot_ = 0;
  ++snapshots_installed_;
  rewrite_ = true;
  if (status_ == Status::kRecovering) {
    recovery_sync_ = std::max(recovery_sync_, s);
    if (last_slot() < recovery_last_) return ask_recovery(out);
    return finish_recovery(out);
  }
  if (status_ == Status::kViewChange) {
    if (leading()) {
      fetching_ = false;  // ask for the final slots after the snapshot at once
      return try_start_view(out);
    }
    // Copying the new leader's log: on from the snapshot.
    sv_first_ = sync_point_ + 1;
    sv_entries_.clear();
    sv_view_ = view_;
    sv_session_ = session_;
    return ask_start_view(out);
  }
  // A follower behind the leader's base: synchronization goes on from here.
  Message r = make(MsgType::kRecover, leader_of(view_));
  r.flag = true;
  r.a = sync_point_;
  out.push_back(r);
  drain(out);
}

// --- Recovery (message.h). Why it is safe: the process that restarted may
// have acknowledged requests, no-ops of gap commits and sync points, and
// sent view changes, and remembers none of it.
//  - While recovering it sends nothing but RecoveryRequests (and, to the
//    leader it copies from, SnapshotRequests), so it neither contradicts
//    what it said nor counts in any quorum.
//  - Any f + 1 other replicas meet every quorum it was part of (such a
//    quorum has f members among the 2f others), and each replica's (view,
//    session) only grows, in both components. So the component-wise highest
//    view among f + 1 answers sent after the restart (the nonce tells) is at
//    or after every view a quorum it was part of could have formed.
//  - It takes only that view, once its leader answers in normal status with
//    exactly that view, and holds only that leader's log: a leader's log
//    never changes within its view, and it holds everything the views before
//    made durable. So the log it joins with is one the leader holds, and what
//    it acknowledged before it forgot is in it again (forget_replica says why
//    that was not lost in between). Where the leader no longer keeps the
//    slots asked for, it sends its snapshot: final slots, which every log
//    that holds them holds alike.

void NoPaxosReplica::forget_replica(uint32_t r) {
  if (r >= config_.replicas || r == id_) return;
  full_merge_ &= ~(1u << r);
  if (status_ == Status::kRecovering) {
    // What r answered described a process that is gone; if we were copying
    // its log, it leads no view now: begin again.
    recovery_replies_.erase(r);
    if (recovery_leader_ == static_cast<int>(r)) restart_recovery();
    return;
  }
  // A candidate: r does not stand by the log and view it sent any more.
  view_changes_msgs_.erase(r);
  if (fetching_ && fetch_from_ == r) fetching_ = false;
  // A leader: r's log is gone, so its confirmed position must not count
  // towards a sync point. Synchronization starts again at slot 1 (or our
  // log base), in chunks of max_sync_entries (each answered chunk brings
  // the next), and jumps to the end of what r copied when r reports it
  // (kRecover, finish_recovery).
  follower_synced_.erase(r);
  // The gap commit in progress: r must hold the no-op again to count. One r
  // acknowledged before it restarted, which we already went past, is not
  // lost although only f replicas are now sure to hold it (us and f - 1
  // followers): r sends no ViewChange until it recovered, so a view change
  // quorum is f + 1 of the 2f others, only f of which lack the no-op; it
  // sees the no-op (or a later view's log that carries it) and the merge
  // keeps it. When r recovers it copies the log of this view's leader or a
  // later one's, which holds the no-op, and counts again. (Each further
  // replica that forgets leaves both sides alike.) The same holds for
  // requests r acknowledged to clients and sync points it helped commit.
  gap_acks_.erase(r);
}

void NoPaxosReplica::reset_state() {
  log_.clear();
  base_ = 0;
  base_entry_ = Entry{};
  store_ = Store(store_.options());
  executed_ = sync_point_ = synced_upto_ = 0;
  snapshot_.clear();
  snapshot_slot_ = 0;
  snapshot_entry_ = Entry{};
  candidate_.clear();
  candidate_slot_ = 0;
  incoming_.clear();
  rewrite_ = true;
}

void NoPaxosReplica::restart_recovery() {
  // Every attempt has its own nonce, so a late answer to an earlier one is
  // not taken for a current one; incarnations' nonces (the option, unique
  // per incarnation) are a million attempts apart.
  nonce_ = options_.nonce * 1000000 + ++attempt_;
  recovery_replies_.clear();
  recovery_leader_ = -1;
  recovery_unanswered_ = 0;
  recovery_due_ = true;
  reset_state();
}

void NoPaxosReplica::ask_recovery(Outbox& out) {
  recovery_due_ = false;
  recovery_asked_ = now_;
  Message m = make(MsgType::kRecoveryRequest, 0);
  m.a = nonce_;
  if (recovery_leader_ >= 0) {
    m.to = static_cast<uint32_t>(recovery_leader_);
    m.b = last_slot() + 1;
    out.push_back(m);
    return;
  }
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    m.to = r;
    out.push_back(m);
  }
}

void NoPaxosReplica::on_recovery_request(const Message& m, Outbox& out) {
  if (m.from >= config_.replicas || m.from == id_) return;
  Message r = make(MsgType::kRecoveryReply, m.from);
  r.a = m.a;
  // (A leader waiting on a gap commit is in normal operation: its last slot
  // is the no-op, which the recovering replica copies and acknowledges.)
  r.flag = leading() && normal();
  r.b = last_slot();
  r.c = sync_point_;
  if (m.b > 0 && r.flag) {
    // Phase 2. Slots we keep only in our snapshot: the snapshot, in place
    // of this answer (the recovering replica asks for its further chunks,
    // installs it and asks for the slots after it).
    if (m.b <= base_) return send_snapshot(m.from, 0, 0, out);
    // A piece of our log from slot m.b, bounded in entries and bytes.
    fill(r, m.b, kRecoveryEntries);
  }
  out.push_back(r);
}

void NoPaxosReplica::on_recovery_reply(const Message& m, Outbox& out) {
  if (m.a != nonce_ || m.from >= config_.replicas || m.from == id_) return;
  if (recovery_leader_ < 0) {
    // 1. Which view is latest: f + 1 answers, one of them from the leader of
    // the highest among them, in normal status. Views are ordered component
    // by component, so that view must be at or after each of the f + 1 in
    // both; if the component-wise maximum is a view nobody leads yet (a view
    // change to it is under way), wait and ask again. The f + 1 may be any
    // of the answers: one in a later view that is not led yet (from a
    // replica cut off in a view change) holds nothing up, and ignoring it
    // is safe: had a quorum formed that view before they answered, one of
    // the f + 1 would have been in it, and so at or after it.
    recovery_replies_[m.from] = m;
    const Message* chosen = nullptr;
    for (const auto& [from, r] : recovery_replies_) {
      if (!r.flag || from != leader_of(r.view)) continue;
      size_t upto = 0;  // answers at or before its view, its own included
      for (const auto& [other, o] : recovery_replies_)
        upto += o.view <= r.view && o.session <= r.session;
      if (upto < config_.f() + 1) continue;
      if (!chosen || r.view > chosen->view ||
          (r.view == chosen->view && r.session > chosen->session))
        chosen = &r;
    }
    if (!chosen) return;
    recovery_leader_ = static_cast<int>(chosen->from);
    recovery_view_ = chosen->view;
    recovery_session_ = chosen->session;
    recovery_last_ = chosen->b;
    recovery_sync_ = chosen->c;
    reset_state();
  } else {
    // 2. A piece of the chosen leader's log.
    if (m.from != static_cast<uint32_t>(recovery_leader_)) return;
    if (!m.flag || m.view != recovery_view_ || m.session != recovery_session_) {
      restart_recovery();  // it no longer leads that view: begin again
      ask_recovery(out);
      return;
    }
    const uint64_t before = last_slot();
    for (const Entry& e : m.entries)
      if (e.slot == last_slot() + 1) log_.push_back(e);
    if (last_slot() == before) return;  // a piece asked for twice, or late
    recovery_sync_ = std::max(recovery_sync_, m.c);
  }
  recovery_unanswered_ = 0;
  if (last_slot() < recovery_last_) return ask_recovery(out);
  finish_recovery(out);
}

void NoPaxosReplica::finish_recovery(Outbox& out) {
  // 3. A follower of the leader's view with the leader's log. Ordered
  // requests it ignored meanwhile are gaps now (expected_msgnum() follows
  // the log's last entry), which gap requests and synchronization fill.
  status_ = Status::kNormal;
  rewrite_ = true;  // (its files said it was recovering)
  view_ = recovery_view_;
  session_ = recovery_session_;
  last_normal_view_ = view_;
  last_normal_session_ = session_;
  recovery_replies_.clear();
  recovery_leader_ = -1;
  pending_.clear();
  held_.clear();
  gap_open_ = false;
  synced_upto_ = last_slot();
  sync_point_ = std::max(sync_point_, std::min<uint64_t>(recovery_sync_, last_slot()));
  execute_to(sync_point_, out, false);
  last_heard_ = now_;
  // Tell the leader where our log matches its, so synchronization goes on
  // from there rather than from slot 1.
  Message r = make(MsgType::kRecover, leader_of(view_));
  r.flag = true;
  r.a = last_slot();
  out.push_back(r);
}

}  // namespace kv
