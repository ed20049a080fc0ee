#include "nopaxos.h"

#include <algorithm>

namespace kv {

void Sequencer::receive(const Message& m, Outbox& out) {
  if (m.type != MsgType::kRequest) return;
  Message o;
  o.type = MsgType::kOrdered;
  o.from = config_.sequencer_id();
  o.session = session_;
  o.a = next_++;
  o.cmd = m.cmd;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    o.to = r;
    out.push_back(o);
  }
}

NoPaxosReplica::NoPaxosReplica(Config config, uint32_t id, NoPaxosOptions options)
    : config_(config), id_(id), options_(options), rng_(options.seed * 7919 + id) {
  std::uniform_int_distribution<uint64_t> d(0, options_.view_timeout_ms);
  view_timeout_ = options_.view_timeout_ms + d(rng_);
  if (options_.recover) {
    status_ = Status::kRecovering;
    restart_recovery();
  }
}

Message NoPaxosReplica::make(MsgType t, uint32_t to) const {
  Message m;
  m.type = t;
  m.from = id_;
  m.to = to;
  m.view = view_;
  m.session = session_;
  return m;
}

uint64_t NoPaxosReplica::expected_msgnum() const {
  if (log_.empty() || log_.back().session != session_) return 1;
  return log_.back().msgnum + 1;
}

void NoPaxosReplica::execute_to(uint64_t slot, Outbox& out, bool reply) {
  slot = std::min<uint64_t>(slot, log_.size());
  while (executed_ < slot) {
    const Entry& e = log_[executed_];
    ++executed_;
    Applied how;
    Result r = store_.apply(e.cmd, &how);
    if (reply && (how == Applied::kExecuted || how == Applied::kDuplicate)) {
      Message m = make(MsgType::kReply, static_cast<uint32_t>(e.cmd.client));
      m.a = executed_;
      m.flag = true;
      m.cmd.client = e.cmd.client;
      m.cmd.seq = e.cmd.seq;
      m.result = r;
      out.push_back(m);
    }
  }
}

void NoPaxosReplica::append(const Entry& e, Outbox& out) {
  log_.push_back(e);
  log_.back().slot = log_.size();
  if (leading()) {
    // The leader executes speculatively, in log order, and answers.
    execute_to(log_.size(), out, true);
  } else if (!e.cmd.is_noop()) {
    Message ack = make(MsgType::kReply, static_cast<uint32_t>(e.cmd.client));
    ack.a = log_.size();
    ack.cmd.client = e.cmd.client;
    ack.cmd.seq = e.cmd.seq;
    out.push_back(ack);
  }
}

void NoPaxosReplica::drain(Outbox& out) {
  if (status_ != Status::kNormal) return;
  for (auto it = pending_.begin(); it != pending_.end();) {
    uint64_t want = expected_msgnum();
    if (it->first < want) {
      it = pending_.erase(it);
    } else if (it->first == want) {
      Entry e;
      e.session = session_;
      e.msgnum = want;
      e.cmd = it->second.cmd;
      it = pending_.erase(it);
      append(e, out);
    } else {
      break;
    }
  }
  if (pending_.empty()) {
    gap_open_ = false;
    return;
  }
  if (gap_open_) return;
  // A drop notification for expected_msgnum(): look for the request.
  gap_open_ = true;
  gap_started_ = now_;
  Message g = make(MsgType::kGapRequest, 0);
  g.a = log_.size() + 1;
  g.b = expected_msgnum();
  if (leading()) {
    for (uint32_t r = 0; r < config_.replicas; ++r) {
      if (r == id_) continue;
      g.to = r;
      out.push_back(g);
    }
  } else {
    g.to = leader_of(view_);
    out.push_back(g);
  }
}

void NoPaxosReplica::on_ordered(const Message& m, Outbox& out) {
  if (m.session > session_) {
    // A new sequencer: agree on where the old session's log ends first.
    start_view_change(view_, m.session, out);
    return;
  }
  if (m.session < session_ || status_ == Status::kViewChange) return;
  if (m.a < expected_msgnum()) return;
  pending_[m.a] = m;
  drain(out);
}

void NoPaxosReplica::on_gap_request(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || status_ == Status::kViewChange) return;
  Message r = make(MsgType::kGapReply, m.from);
  r.a = m.a;
  r.b = m.b;
  if (leading()) {
    // A follower's gap: our log holds the request or the no-op at that slot.
    if (m.a <= log_.size()) {
      r.flag = true;
      r.entries.push_back(log_[m.a - 1]);
    }
  } else {
    // The leader looks for a request it missed: answer with ours, if any.
    for (const Entry& e : log_)
      if (e.session == session_ && e.msgnum == m.b && !e.cmd.is_noop()) {
        r.flag = true;
        r.entries.push_back(e);
      }
    auto it = pending_.find(m.b);
    if (!r.flag && it != pending_.end()) {
      Entry e;
      e.session = session_;
      e.msgnum = m.b;
      e.cmd = it->second.cmd;
      r.flag = true;
      r.entries.push_back(e);
    }
  }
  out.push_back(r);
}

void NoPaxosReplica::on_gap_reply(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || status_ != Status::kNormal || !m.flag) return;
  if (m.a != log_.size() + 1 || m.entries.empty()) return;
  const Entry& e = m.entries.front();
  if (e.session != session_ || e.msgnum != expected_msgnum()) return;
  if (leading()) ++gaps_recovered_;
  gap_open_ = false;
  append(m.entries.front(), out);
  drain(out);
}

void NoPaxosReplica::commit_gap(Outbox& out) {
  // Nobody had it: the slot becomes a no-op, and the leader waits for f
  // followers to hold the no-op too, so a view change cannot lose it.
  Entry e;
  e.session = session_;
  e.msgnum = expected_msgnum();
  append(e, out);
  ++gaps_committed_;
  status_ = Status::kGapCommit;
  gap_open_ = false;
  gap_acks_.clear();
  gap_started_ = now_;
  Message g = make(MsgType::kGapCommit, 0);
  g.a = log_.size();
  g.b = e.msgnum;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    g.to = r;
    out.push_back(g);
  }
}

void NoPaxosReplica::on_gap_commit(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || status_ == Status::kViewChange) return;
  last_heard_ = now_;
  Entry noop;
  noop.session = session_;
  noop.msgnum = m.b;
  noop.slot = m.a;
  if (m.a <= log_.size()) {
    log_[m.a - 1] = noop;
  } else if (m.a == log_.size() + 1) {
    pending_.erase(m.b);
    append(noop, out);
    drain(out);
  } else {
    return;  // we lack earlier slots; our own gap requests will fetch them
  }
  Message r = make(MsgType::kGapCommitReply, m.from);
  r.a = m.a;
  out.push_back(r);
}

void NoPaxosReplica::on_gap_commit_reply(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || status_ != Status::kGapCommit) return;
  if (m.a != log_.size()) return;
  gap_acks_.insert(m.from);
  if (gap_acks_.size() >= config_.f()) {
    status_ = Status::kNormal;
    drain(out);  // and look for the next gap, if there is one
  }
}

void NoPaxosReplica::send_sync_to(uint32_t r, Outbox& out) {
  // Each follower gets the leader's log from just after the last slot it
  // confirmed, at most max_sync_entries at a time (messages stay bounded;
  // a follower far behind catches up over several rounds).
  uint64_t from = std::min<uint64_t>(follower_synced_[r], log_.size()) + 1;
  Message s = make(MsgType::kSyncPrepare, r);
  s.b = from;
  uint64_t last = std::min<uint64_t>(log_.size(), from - 1 + options_.max_sync_entries);
  for (uint64_t slot = from; slot <= last; ++slot) s.entries.push_back(log_[slot - 1]);
  s.a = last;
  out.push_back(s);
}

void NoPaxosReplica::send_sync(Outbox& out) {
  last_sync_ = now_;
  for (uint32_t r = 0; r < config_.replicas; ++r)
    if (r != id_) send_sync_to(r, out);
}

void NoPaxosReplica::on_sync_prepare(const Message& m, Outbox& out) {
  bool same = m.view == view_ && m.session == session_;
  if (newer(m.view, m.session) && (m.view < view_ || m.session < session_)) {
    // Views that differ both ways: move to the larger of each.
    start_view_change(m.view, m.session, out);
    return;
  }
  if (newer(m.view, m.session) || (same && status_ == Status::kViewChange)) {
    // We missed a view change: ask its leader for the new view.
    out.push_back(make(MsgType::kRecover, m.from));
    return;
  }
  if (m.view != view_ || m.session != session_) {
    // A stale leader: tell it about our view.
    Message v = make(MsgType::kViewChangeRequest, m.from);
    out.push_back(v);
    return;
  }
  last_heard_ = now_;
  if (m.b == 0 || m.b > log_.size() + 1 || m.b > std::max(sync_point_, synced_upto_) + 1) {
    // Our log may differ from the leader's before m.b: ask for it from our
    // sync point on (flag: same view, a suffix is enough).
    Message r = make(MsgType::kRecover, m.from);
    r.flag = true;
    r.a = sync_point_;
    out.push_back(r);
    return;
  }
  // The leader's log is the truth within a view: install it from slot m.b.
  for (const Entry& e : m.entries) {
    if (e.slot <= log_.size()) {
      log_[e.slot - 1] = e;
    } else {
      append(e, out);  // new to us: acknowledged to its client like any other
    }
  }
  synced_upto_ = std::max(synced_upto_, m.a);
  for (auto it = pending_.begin(); it != pending_.end();)
    it = it->first < expected_msgnum() ? pending_.erase(it) : std::next(it);
  gap_open_ = false;
  drain(out);
  Message r = make(MsgType::kSyncReply, m.from);
  r.a = m.a;
  out.push_back(r);
}

void NoPaxosReplica::on_sync_reply(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || !leading() || status_ == Status::kViewChange)
    return;
  uint64_t& confirmed = follower_synced_[m.from];
  confirmed = std::max(confirmed, std::min<uint64_t>(m.a, log_.size()));
  if (confirmed < log_.size()) send_sync_to(m.from, out);  // the next chunk at once
  if (m.a <= sync_point_) {
    // Already committed (this follower missed the SyncCommit): resend it.
    Message c = make(MsgType::kSyncCommit, m.from);
    c.a = sync_point_;
    out.push_back(c);
    return;
  }
  // The new sync point: the highest slot that f followers (and we) hold.
  std::vector<uint64_t> have;
  for (const auto& [r, a] : follower_synced_) have.push_back(a);
  if (have.size() < config_.f()) return;
  std::sort(have.rbegin(), have.rend());
  uint64_t point = have[config_.f() - 1];
  if (point <= sync_point_) return;
  sync_point_ = point;
  Message c = make(MsgType::kSyncCommit, 0);
  c.a = sync_point_;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    c.to = r;
    out.push_back(c);
  }
}

void NoPaxosReplica::on_sync_commit(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || status_ == Status::kViewChange) return;
  // Only the prefix we installed from the leader is known to match its log.
  uint64_t point = std::min(m.a, synced_upto_);
  if (point > sync_point_) sync_point_ = point;
  execute_to(sync_point_, out, false);
}

void NoPaxosReplica::start_view_change(uint64_t view, uint64_t session, Outbox& out) {
  view_ = std::max(view_, view);
  session_ = std::max(session_, session);
  status_ = Status::kViewChange;
  ++view_changes_;
  vc_started_ = now_;
  pending_.clear();
  gap_open_ = false;
  follower_synced_.clear();
  view_changes_msgs_.clear();
  synced_upto_ = 0;
  Message req = make(MsgType::kViewChangeRequest, 0);
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    req.to = r;
    out.push_back(req);
  }
  Message vc = make(MsgType::kViewChange, leader_of(view_));
  vc.a = last_normal_view_;
  vc.b = last_normal_session_;
  vc.entries = log_;
  if (leading()) {
    on_view_change(vc, out);
  } else {
    out.push_back(vc);
  }
}

void NoPaxosReplica::on_view_change(const Message& m, Outbox& out) {
  if (newer(m.view, m.session)) {
    start_view_change(m.view, m.session, out);
    if (m.from == id_) return;
  }
  if (m.view != view_ || m.session != session_ || !leading()) return;
  if (status_ != Status::kViewChange) {
    // A straggler of a view already started: send it the view.
    Message sv = make(MsgType::kStartView, m.from);
    sv.entries = log_;
    out.push_back(sv);
    return;
  }
  view_changes_msgs_[m.from] = m;
  if (view_changes_msgs_.size() < config_.f() + 1) return;
  // Keep the logs of the latest normal view; merge them slot by slot.
  uint64_t lv = 0, ls = 0;
  for (const auto& [from, vc] : view_changes_msgs_)
    if (vc.a > lv || vc.b > ls) {
      lv = std::max(lv, vc.a);
      ls = std::max(ls, vc.b);
    }
  std::vector<Entry> merged;
  for (const auto& [from, vc] : view_changes_msgs_) {
    if (vc.a != lv || vc.b != ls) continue;
    for (size_t i = 0; i < vc.entries.size(); ++i) {
      if (i >= merged.size()) {
        merged.push_back(vc.entries[i]);
      } else if (vc.entries[i].cmd.is_noop()) {
        merged[i] = vc.entries[i];
      }
    }
  }
  for (size_t i = 0; i < merged.size(); ++i) merged[i].slot = i + 1;
  view_changes_msgs_.clear();
  status_ = Status::kNormal;
  last_normal_view_ = view_;
  last_normal_session_ = session_;
  last_heard_ = now_;
  adopt_log(std::move(merged), UINT64_MAX, out, false);
  Message sv = make(MsgType::kStartView, 0);
  sv.entries = log_;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    sv.to = r;
    out.push_back(sv);
  }
  send_sync(out);
}

void NoPaxosReplica::adopt_log(std::vector<Entry> log, uint64_t execute_to_slot, Outbox& out,
                               bool reply) {
  // A replica that executed entries the new log does not hold (a former
  // leader's speculation) starts its store again from the log.
  bool same = executed_ <= log.size();
  for (uint64_t i = 0; same && i < executed_; ++i) same = log_[i] == log[i];
  if (!same) {
    store_ = Store();
    executed_ = 0;
  }
  log_ = std::move(log);
  sync_point_ = std::min<uint64_t>(sync_point_, log_.size());
  pending_.clear();
  gap_open_ = false;
  execute_to(execute_to_slot == UINT64_MAX ? log_.size() : execute_to_slot, out, reply);
}

void NoPaxosReplica::on_start_view(const Message& m, Outbox& out) {
  // A new view, or the current one again (to a replica that asked with
  // Recover because its log may differ from the leader's).
  if (m.view < view_ || m.session < session_) return;
  if (m.from != leader_of(m.view)) return;
  view_ = m.view;
  session_ = m.session;
  status_ = Status::kNormal;
  last_normal_view_ = view_;
  last_normal_session_ = session_;
  last_heard_ = now_;
  adopt_log(m.entries, sync_point_, out, false);
  synced_upto_ = log_.size();
  if (executed_ > sync_point_) {
    // Only final slots may stay executed on a follower.
    store_ = Store();
    executed_ = 0;
    execute_to(sync_point_, out, false);
  }
}

// --- Recovery (message.h). Why it is safe: the process that restarted may
// have acknowledged requests, no-ops of gap commits and sync points, and
// sent view changes, and remembers none of it.
//  - While recovering it sends nothing but RecoveryRequests, so it neither
//    contradicts what it said nor counts in any quorum.
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
//    that was not lost in between).

namespace {
// A RecoveryReply stays below this many bytes (codec.cc: the header and
// each entry's fixed fields), well inside a 64 KiB flow segment.
constexpr size_t kRecoveryReplyBytes = 48 * 1024;
constexpr size_t kReplyHeaderBytes = 128;
constexpr size_t kEntryFixedBytes = 32;  // plus wire_bytes(cmd)
// Phase 2 requests the chosen leader leaves unanswered before starting over.
constexpr uint32_t kRecoveryPatience = 4;
}  // namespace

void NoPaxosReplica::forget_replica(uint32_t r) {
  if (r >= config_.replicas || r == id_) return;
  if (status_ == Status::kRecovering) {
    // What r answered described a process that is gone; if we were copying
    // its log, it leads no view now: begin again.
    recovery_replies_.erase(r);
    if (recovery_leader_ == static_cast<int>(r)) restart_recovery();
    return;
  }
  // A candidate: r does not stand by the log and view it sent any more.
  view_changes_msgs_.erase(r);
  // A leader: r's log is gone, so its confirmed position must not count
  // towards a sync point. Synchronization starts again at slot 1, in chunks
  // of max_sync_entries (each answered chunk brings the next), and jumps to
  // the end of what r copied when r reports it (kRecover, finish_recovery).
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

void NoPaxosReplica::restart_recovery() {
  // Every attempt has its own nonce, so a late answer to an earlier one is
  // not taken for a current one; incarnations' nonces (the option, unique
  // per incarnation) are a million attempts apart.
  nonce_ = options_.nonce * 1000000 + ++attempt_;
  recovery_replies_.clear();
  recovery_leader_ = -1;
  recovery_unanswered_ = 0;
  recovery_due_ = true;
  log_.clear();
}

void NoPaxosReplica::ask_recovery(Outbox& out) {
  recovery_due_ = false;
  recovery_asked_ = now_;
  Message m = make(MsgType::kRecoveryRequest, 0);
  m.a = nonce_;
  if (recovery_leader_ >= 0) {
    m.to = static_cast<uint32_t>(recovery_leader_);
    m.b = log_.size() + 1;
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
  r.b = log_.size();
  r.c = sync_point_;
  if (m.b > 0 && r.flag) {
    // Phase 2: a piece of our log from slot m.b, bounded in entries and bytes.
    size_t bytes = kReplyHeaderBytes;
    for (uint64_t s = m.b; s <= log_.size() && r.entries.size() < kRecoveryEntries; ++s) {
      bytes += kEntryFixedBytes + wire_bytes(log_[s - 1].cmd);
      if (bytes > kRecoveryReplyBytes && !r.entries.empty()) break;
      r.entries.push_back(log_[s - 1]);
    }
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
    log_.clear();
  } else {
    // 2. A piece of the chosen leader's log.
    if (m.from != static_cast<uint32_t>(recovery_leader_)) return;
    if (!m.flag || m.view != recovery_view_ || m.session != recovery_session_) {
      restart_recovery();  // it no longer leads that view: begin again
      ask_recovery(out);
      return;
    }
    const size_t before = log_.size();
    for (const Entry& e : m.entries)
      if (e.slot == log_.size() + 1) log_.push_back(e);
    if (log_.size() == before) return;  // a piece asked for twice, or late
    recovery_sync_ = std::max(recovery_sync_, m.c);
  }
  recovery_unanswered_ = 0;
  if (log_.size() < recovery_last_) return ask_recovery(out);
  finish_recovery(out);
}

void NoPaxosReplica::finish_recovery(Outbox& out) {
  // 3. A follower of the leader's view with the leader's log. Ordered
  // requests it ignored meanwhile are gaps now (expected_msgnum() follows
  // the log's last entry), which gap requests and synchronization fill.
  status_ = Status::kNormal;
  view_ = recovery_view_;
  session_ = recovery_session_;
  last_normal_view_ = view_;
  last_normal_session_ = session_;
  recovery_replies_.clear();
  recovery_leader_ = -1;
  pending_.clear();
  gap_open_ = false;
  synced_upto_ = log_.size();
  sync_point_ = std::min<uint64_t>(recovery_sync_, log_.size());
  execute_to(sync_point_, out, false);
  last_heard_ = now_;
  // Tell the leader where our log matches its, so synchronization goes on
  // from there rather than from slot 1.
  Message r = make(MsgType::kRecover, leader_of(view_));
  r.flag = true;
  r.a = log_.size();
  out.push_back(r);
}

void NoPaxosReplica::receive(const Message& m, Outbox& out) {
  if (status_ == Status::kRecovering) {
    // Nothing but its own recovery until it is over: it acts on no view.
    if (m.type == MsgType::kRecoveryReply) on_recovery_reply(m, out);
    return;
  }
  switch (m.type) {
    case MsgType::kRecoveryRequest:
      return on_recovery_request(m, out);
    case MsgType::kOrdered:
      return on_ordered(m, out);
    case MsgType::kGapRequest:
      return on_gap_request(m, out);
    case MsgType::kGapReply:
      return on_gap_reply(m, out);
    case MsgType::kGapCommit:
      return on_gap_commit(m, out);
    case MsgType::kGapCommitReply:
      return on_gap_commit_reply(m, out);
    case MsgType::kSyncPrepare:
      return on_sync_prepare(m, out);
    case MsgType::kSyncReply:
      return on_sync_reply(m, out);
    case MsgType::kSyncCommit:
      return on_sync_commit(m, out);
    case MsgType::kViewChangeRequest:
      if (newer(m.view, m.session)) start_view_change(m.view, m.session, out);
      return;
    case MsgType::kViewChange:
      return on_view_change(m, out);
    case MsgType::kStartView:
      return on_start_view(m, out);
    case MsgType::kRecover:
      if (leading() && status_ != Status::kViewChange && m.flag && m.view == view_ &&
          m.session == session_) {
        // Same view: the follower's log matches ours up to its sync point.
        follower_synced_[m.from] = std::min<uint64_t>(m.a, log_.size());
        send_sync_to(m.from, out);
        return;
      }
      if (leading() && status_ != Status::kViewChange) {
        Message sv = make(MsgType::kStartView, m.from);
        sv.entries = log_;
        out.push_back(sv);
      }
      return;
    default:
      return;  // Multi-Paxos messages are not ours
  }
}

void NoPaxosReplica::tick(uint64_t now_ms, Outbox& out) {
  now_ = now_ms;
  if (!started_) {
    // Clocks need not start at 0 (a real one reads time since boot): the
    // leader's silence is counted from the first tick.
    started_ = true;
    last_heard_ = now_ms;
  }
  if (status_ == Status::kRecovering) {
    if (recovery_due_ || now_ - recovery_asked_ >= options_.recovery_retry_ms) {
      // The chosen leader went silent (crashed, or cut off): choose again.
      if (!recovery_due_ && recovery_leader_ >= 0 && ++recovery_unanswered_ >= kRecoveryPatience)
        restart_recovery();
      ask_recovery(out);
    }
    return;  // and no view change: it has no view to leave
  }
  if (status_ == Status::kViewChange) {
    if (now_ - vc_started_ >= view_timeout_) start_view_change(view_ + 1, session_, out);
    return;
  }
  if (leading()) {
    if (status_ == Status::kGapCommit && now_ - gap_started_ >= options_.gap_timeout_ms) {
      gap_started_ = now_;
      Message g = make(MsgType::kGapCommit, 0);
      g.a = log_.size();
      g.b = log_.back().msgnum;
      for (uint32_t r = 0; r < config_.replicas; ++r) {
        if (r == id_ || gap_acks_.count(r)) continue;
        g.to = r;
        out.push_back(g);
      }
    }
    if (status_ == Status::kNormal && gap_open_ && now_ - gap_started_ >= options_.gap_timeout_ms)
      commit_gap(out);
    if (now_ - last_sync_ >= options_.sync_ms) send_sync(out);
    return;
  }
  if (gap_open_ && now_ - gap_started_ >= options_.gap_timeout_ms) {
    gap_started_ = now_;
    Message g = make(MsgType::kGapRequest, leader_of(view_));
    g.a = log_.size() + 1;
    g.b = expected_msgnum();
    out.push_back(g);
  }
  if (now_ - last_heard_ >= view_timeout_) start_view_change(view_ + 1, session_, out);
}

}  // namespace kv
