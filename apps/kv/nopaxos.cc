// NoPaxosReplica: normal operation, gap agreement and synchronization; the
// view change is in nopaxos_view_change.cc, snapshots and recovery in
// nopaxos_transfer.cc.
#include "nopaxos.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "nopaxos_internal.h"

namespace kv {

using namespace nopaxos_detail;

void Sequencer::receive(const Message& m, Outbox& out) {
  if (m.type != MsgType::kRequest) return;
  Message o;
  o.type = MsgType::kOrdered;
  o.from = config_.sequencer_id();
  o.session = session_;
  o.a = next_++;
  o.cmds = m.cmds;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    o.to = r;
    out.push_back(o);
  }
}

NoPaxosReplica::NoPaxosReplica(Config config, uint32_t id, NoPaxosOptions options)
    : config_(config), id_(id), options_(options), rng_(options.seed * 7919 + id) {
  store_ = Store(options.store);
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

uint64_t NoPaxosReplica::fill(Message& m, uint64_t from, uint64_t max_entries,
                              bool positions) const {
  size_t bytes = kHeaderBytes;
  uint64_t s = std::max(from, base_ + 1);
  for (; s <= last_slot() && m.entries.size() < max_entries; ++s) {
    bytes += kEntryFixedBytes + (positions ? wire_bytes(Entry{}) : wire_bytes(at(s)));
    if (bytes > kMaxMessageBytes && !m.entries.empty()) break;
    if (positions) {
      m.entries.push_back(position(at(s)));
      m.entries.back().ballot = at(s).cmds.size();
    } else {
      m.entries.push_back(at(s));
    }
  }
  return s;
}

uint64_t NoPaxosReplica::expected_msgnum() const {
  if (last_slot() == 0 || last_entry().session != session_) return 1;
  return last_entry().msgnum + 1;
}

namespace {

// The reply (or acknowledgement) for `client` among those from out[first]
// on: a slot's commands are answered with one message per client.
Message& reply_for(uint64_t client, Outbox& out, size_t first, const Message& blank) {
  for (size_t i = first; i < out.size(); ++i)
    if (out[i].to == client) return out[i];
  out.push_back(blank);
  out.back().to = static_cast<uint32_t>(client);
  return out.back();
}

// A command's identity alone, which is all a reply needs to name it.
Command identity(const Command& c) {
  Command id;
  id.client = c.client;
  id.seq = c.seq;
  return id;
}

}  // namespace

void NoPaxosReplica::execute_to(uint64_t slot, Outbox& out, bool reply) {
  slot = std::min<uint64_t>(slot, last_slot());
  while (executed_ < slot) {
    const Entry& e = at(executed_ + 1);
    ++executed_;
    Message blank = make(MsgType::kReply, 0);
    blank.a = executed_;
    blank.flag = true;
    // The slot's replies, a message per client, or several where its
    // results would pass kMaxBatchBytes (a batch of small GETs may read
    // large values): client -> (its open message in `out`, result bytes).
    std::map<uint64_t, std::pair<size_t, size_t>> open;
    // (A no-op slot is a no-op in the store's applied log, as in Multi-Paxos.)
    if (e.cmds.empty()) store_.apply(noop_command());
    for (const Command& c : e.cmds) {
      Applied how;
      Result r = store_.apply(c, &how);
      if (!reply || (how != Applied::kExecuted && how != Applied::kDuplicate)) continue;
      const size_t bytes = 24 + r.value.size();
      auto it = open.find(c.client);
      if (it == open.end() || it->second.second + bytes > kMaxBatchBytes) {
        out.push_back(blank);
        out.back().to = static_cast<uint32_t>(c.client);
        it = open.insert_or_assign(c.client, std::pair<size_t, size_t>{out.size() - 1, 0}).first;
      }
      Message& m = out[it->second.first];
      m.cmds.push_back(identity(c));
      m.results.push_back(std::move(r));
      it->second.second += bytes;
    }
  }
  maybe_snapshot();
}

void NoPaxosReplica::append(Entry e, Outbox& out) {
  log_.push_back(std::move(e));
  const uint64_t slot = last_slot();
  log_.back().slot = slot;
  changed(slot);
  if (leading()) {
    // The leader executes speculatively, in log order, and answers.
    execute_to(slot, out, true);
    return;
  }
  // A follower acknowledges the slot's commands, one message per client.
  Message blank = make(MsgType::kReply, 0);
  blank.a = slot;
  const size_t first = out.size();
  for (const Command& c : log_.back().cmds)
    reply_for(c.client, out, first, blank).cmds.push_back(identity(c));
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
      e.cmds = std::move(it->second.cmds);
      it = pending_.erase(it);
      append(std::move(e), out);
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
  g.a = last_slot() + 1;
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
  // A new sequencer: agree on where the old session's log ends first (and
  // hold this message, the new session's first, for after that).
  if (m.session > session_) start_view_change(view_, m.session, out);
  if (m.session < session_) return;
  if (status_ == Status::kViewChange) {
    // (Not taken in yet: nothing is appended or executed during a view
    // change. Once the view starts they come after its log, as if they
    // had arrived then.)
    if (held_.size() < kMaxHeld) held_.emplace(m.a, m);
    return;
  }
  if (m.a < expected_msgnum()) return;
  pending_[m.a] = m;
  drain(out);
}

void NoPaxosReplica::release_held(Outbox& out) {
  // Only those that continue the log at once: a replica whose log ends
  // before them is behind, and synchronization brings it up in bulk (they
  // would make it ask for the slots in between one gap at a time).
  uint64_t next = expected_msgnum();
  for (auto& [num, m] : held_) {
    if (num < next) continue;
    if (num > next || m.session != session_) break;
    pending_.emplace(num, std::move(m));
    ++next;
  }
  held_.clear();
  drain(out);
}

void NoPaxosReplica::on_gap_request(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || status_ == Status::kViewChange) return;
  Message r = make(MsgType::kGapReply, m.from);
  r.a = m.a;
  r.b = m.b;
  if (leading()) {
    // A follower's gap: our log holds the request or the no-op at that slot.
    // (A slot below our log base: the follower is far behind, and
    // synchronization brings it our snapshot.)
    if (m.a > base_ && m.a <= last_slot()) {
      r.flag = true;
      r.entries.push_back(at(m.a));
    }
  } else {
    // The leader looks for a request it missed: answer with ours, if any.
    for (const Entry& e : log_)
      if (e.session == session_ && e.msgnum == m.b && !e.cmds.empty()) {
        r.flag = true;
        r.entries.push_back(e);
      }
    auto it = pending_.find(m.b);
    if (!r.flag && it != pending_.end()) {
      Entry e;
      e.session = session_;
      e.msgnum = m.b;
      e.cmds = it->second.cmds;
      r.flag = true;
      r.entries.push_back(e);
    }
  }
  out.push_back(r);
}

void NoPaxosReplica::on_gap_reply(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || status_ != Status::kNormal || !m.flag) return;
  if (m.a != last_slot() + 1 || m.entries.empty()) return;
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
  g.a = last_slot();
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
  if (m.a <= base_) {
    // In our snapshot: final, so it is the leader's entry, the no-op.
  } else if (m.a <= last_slot()) {
    at(m.a) = noop;
    changed(m.a);
  } else if (m.a == last_slot() + 1) {
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
  if (m.a != last_slot()) return;
  gap_acks_.insert(m.from);
  if (gap_acks_.size() >= config_.f()) {
    status_ = Status::kNormal;
    drain(out);  // and look for the next gap, if there is one
  }
}

void NoPaxosReplica::send_sync_to(uint32_t r, Outbox& out, bool full) {
  // Each follower gets the leader's log from just after the last slot it
  // confirmed, at most max_sync_entries and ~48 KiB at a time (messages
  // stay bounded; a follower far behind catches up over several rounds).
  // One that confirmed less than our log base gets the slots after it: if
  // it lacks slots we keep only in our snapshot, it says so (Recover with
  // its sync point) and gets the snapshot (on_recover).
  //
  // Unless `full`, the slots go as positions (flag): each entry's session,
  // message number and number of commands (in `ballot`), without the
  // commands, which the follower almost always has from the multicast; one
  // that lacks a slot's commands asks for the full entries from there
  // (SyncReply c, on_sync_reply).
  const uint64_t from = std::min<uint64_t>(std::max(follower_synced_[r], base_), last_slot()) + 1;
  Message s = make(MsgType::kSyncPrepare, r);
  s.b = from;
  s.flag = !full;
  s.a = fill(s, from, options_.max_sync_entries, !full) - 1;
  out.push_back(s);
}

void NoPaxosReplica::send_sync(Outbox& out) {
  last_sync_ = now_;
  for (uint32_t r = 0; r < config_.replicas; ++r)
    if (r != id_) send_sync_to(r, out, false);
}

void NoPaxosReplica::on_sync_prepare(const Message& m, Outbox& out) {
  bool same = m.view == view_ && m.session == session_;
  if (newer(m.view, m.session) && (m.view < view_ || m.session < session_)) {
    // Views that differ both ways: move to the larger of each.
    start_view_change(m.view, m.session, out);
    return;
  }
  if (newer(m.view, m.session) || (same && status_ == Status::kViewChange)) {
    // We missed a view change, or have not copied its log yet: ask its
    // leader for the new view's log (StartView).
    Message r = make(MsgType::kRecover, m.from);
    r.a = same && sv_view_ == view_ && sv_session_ == session_ && sv_first_ == sync_point_ + 1
              ? sv_first_ + sv_entries_.size()
              : sync_point_ + 1;
    out.push_back(r);
    return;
  }
  if (m.view != view_ || m.session != session_) {
    // A stale leader: tell it about our view.
    Message v = make(MsgType::kViewChangeRequest, m.from);
    out.push_back(v);
    return;
  }
  last_heard_ = now_;
  if (m.b == 0 || m.b > last_slot() + 1 || m.b > std::max(sync_point_, synced_upto_) + 1) {
    // Our log may differ from the leader's before m.b: ask for it from our
    // sync point on (flag: same view, a suffix is enough).
    Message r = make(MsgType::kRecover, m.from);
    r.flag = true;
    r.a = sync_point_;
    out.push_back(r);
    return;
  }
  // The leader's log is the truth within a view: install it from slot m.b.
  // Positions (m.flag): a slot we hold with the same (session, message
  // number) holds the same batch, the multicast's; a no-op is installed as
  // it is; a batch we lack (or hold a no-op for) stops the install there,
  // and we ask for the full entries from that slot (need).
  uint64_t need = 0;
  for (const Entry& e : m.entries) {
    if (e.slot <= base_) continue;  // final, in our snapshot
    if (!m.flag) {
      if (e.slot > last_slot()) {
        append(e, out);  // new to us: acknowledged to its client like any other
      } else if (!(at(e.slot) == e)) {
        at(e.slot) = e;
        changed(e.slot);
      }
      continue;
    }
    if (e.slot <= last_slot()) {
      Entry& mine = at(e.slot);
      if (mine.session == e.session && mine.msgnum == e.msgnum && mine.cmds.size() == e.ballot)
        continue;
      if (e.ballot == 0) {
        mine = position(e);
        changed(e.slot);
        continue;
      }
    } else if (e.slot == last_slot() + 1) {
      Entry next = position(e);
      auto it = pending_.find(e.msgnum);
      if (e.ballot != 0 && e.session == session_ && it != pending_.end() &&
          it->second.cmds.size() == e.ballot) {
        next.cmds = std::move(it->second.cmds);
        pending_.erase(it);
      }
      if (next.cmds.size() == e.ballot) {
        append(std::move(next), out);
        continue;
      }
    }
    need = e.slot;
    break;
  }
  const uint64_t installed = need != 0 ? need - 1 : m.a;
  synced_upto_ = std::max(synced_upto_, installed);
  for (auto it = pending_.begin(); it != pending_.end();)
    it = it->first < expected_msgnum() ? pending_.erase(it) : std::next(it);
  gap_open_ = false;
  drain(out);
  Message r = make(MsgType::kSyncReply, m.from);
  r.a = installed;
  r.c = need;
  out.push_back(r);
}

void NoPaxosReplica::on_sync_reply(const Message& m, Outbox& out) {
  if (m.view != view_ || m.session != session_ || !leading() || status_ == Status::kViewChange)
    return;
  uint64_t& confirmed = follower_synced_[m.from];
  confirmed = std::max(confirmed, std::min<uint64_t>(m.a, last_slot()));
  // The next chunk at once; the full entries from slot c if it lacks them.
  if (confirmed < last_slot()) send_sync_to(m.from, out, m.c != 0);
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
  maybe_snapshot();  // a snapshot taken ahead of the sync point may be final now
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

void NoPaxosReplica::on_recover(const Message& m, Outbox& out) {
  if (!leading() || status_ == Status::kViewChange) return;
  if (m.flag && m.view == view_ && m.session == session_) {
    // Same view: the follower's log matches ours up to m.a (its sync point,
    // or what it copied from us).
    follower_synced_[m.from] = std::min<uint64_t>(m.a, last_slot());
    // It lacks slots we keep only in our snapshot: that first.
    if (m.a < base_) return send_snapshot(m.from, 0, 0, out);
    send_sync_to(m.from, out, true);
    return;
  }
  // A replica behind our view (or still copying its log): our log from the
  // slot it asks for (a, its sync point + 1 or the next slot it lacks).
  send_start_view(m.from, m.flag || m.a == 0 ? sync_point_ + 1 : m.a, out);
}

void NoPaxosReplica::receive(const Message& m, Outbox& out) {
  if (status_ == Status::kRecovering) {
    // Nothing but its own recovery until it is over: it acts on no view.
    if (m.type == MsgType::kRecoveryReply) on_recovery_reply(m, out);
    if (m.type == MsgType::kSnapshotChunk) on_snapshot_chunk(m, out);
    return;
  }
  switch (m.type) {
    case MsgType::kRecoveryRequest:
      return on_recovery_request(m, out);
    case MsgType::kSnapshotRequest:
      return send_snapshot(m.from, m.a, m.b, out);
    case MsgType::kSnapshotChunk:
      return on_snapshot_chunk(m, out);
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
      return on_view_change_request(m, out);
    case MsgType::kViewChange:
      return on_view_change(m, out);
    case MsgType::kStartView:
      return on_start_view(m, out);
    case MsgType::kRecover:
      return on_recover(m, out);
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
  if (change_to_ > view_) {
    const uint64_t to = change_to_;
    change_to_ = 0;
    return start_view_change(to, session_, out);
  }
  if (status_ == Status::kViewChange) {
    if (leading() && now_ - last_sync_ >= options_.sync_ms) {
      last_sync_ = now_;
      pull_view_changes(out);
    }
    if (now_ - vc_started_ >= view_timeout_) start_view_change(view_ + 1, session_, out);
    return;
  }
  if (leading()) {
    if (status_ == Status::kGapCommit && now_ - gap_started_ >= options_.gap_timeout_ms) {
      gap_started_ = now_;
      Message g = make(MsgType::kGapCommit, 0);
      g.a = last_slot();
      g.b = last_entry().msgnum;
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
    g.a = last_slot() + 1;
    g.b = expected_msgnum();
    out.push_back(g);
  }
  if (now_ - last_heard_ >= view_timeout_) start_view_change(view_ + 1, session_, out);
}

void NoPaxosReplica::replicas_present(uint32_t mask) {
  // (Recovering, it has no view to leave. Changing views to a gone
  // leader's view, e.g. a session change begun before the loss was known,
  // it moves on to the next view at once too.)
  if (status_ == Status::kRecovering) return;
  if ((mask & (1u << id_)) == 0 || (mask & (1u << leader_of(view_))) != 0) return;
  change_to_ = config_.next_view_led_by(mask, view_);
}

}  // namespace kv
