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

void NoPaxosReplica::receive(const Message& m, Outbox& out) {
  switch (m.type) {
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
