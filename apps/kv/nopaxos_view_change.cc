// NoPaxosReplica: the view change (see the comment below).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>

#include "nopaxos.h"
#include "nopaxos_internal.h"

namespace kv {

using namespace nopaxos_detail;

// --- View change. Every message stays below kMaxMessageBytes, whatever the
// length of the logs.
//
// ViewChange (replica -> new leader), in parts: view/session, the new view;
// a/b, the sender's last normal view; c, its sync point; entries, its log
// from c + 1 (or from the slot the leader asked for) to its last slot; flag,
// more parts follow. The last part always carries the sender's last entry
// (none if its log ends at c), so the leader knows when it has all. The
// sender sends every part when it starts the view change; every sync_ms the
// new leader asks each replica whose log it lacks, or lacks a part of, for
// the rest (ViewChangeRequest for the same view to that replica, a = the
// first slot it lacks, 0 for "from your sync point"). Asked for slots at or
// below its log base, a replica sends its snapshot instead.
//
// The new leader, once it has f + 1 whole logs (its own among them):
//  1. S = the highest sync point among them, and R a replica that has it.
//  2. If its own sync point is below S, it fetches R's log from its own sync
//     point + 1 to S (ViewChangeRequest to R; R's snapshot first if R no
//     longer keeps those slots) before it goes on. (final_fetches() counts
//     the views started so.)
//  3. Its new log: its own up to its sync point, R's slots up to S, and
//     above S the logs of the latest normal view among the f + 1 merged
//     slot by slot (a no-op if any has one, else the request), to the end of
//     the longest. Its sync point becomes S.
//
// StartView (new leader -> follower): a, the first slot carried; b, the
// leader's last slot when it started the view (view_start_); c, its sync
// point; entries from a, bounded. A follower copies the leader's log after
// its own sync point into a buffer (sv_entries_), asking for the next piece
// (Recover with a = the next slot; a lost piece is asked for again when the
// leader's next SyncPrepare comes) until it holds the leader's log up to b
// at least. Only then does it replace its log after its sync point by the
// copy, become normal in the view and count it as its last normal view;
// until then its log and last normal view stay as they were. A follower
// whose sync point is below the leader's log base gets the snapshot first.
//
// Why it is safe. Call the entries at or below a replica's sync point
// final: the leader of the view that set that sync point held them, f
// followers confirmed holding its log up to there, and (below) every later
// view's log holds them too.
//  - The logs the new leader builds are those the whole-log merge of the
//    original protocol builds from the same f + 1 replicas. Above S it
//    merges the same entries: each replica's part of the log above its own
//    sync point is in its ViewChange. At or below S the whole-log merge
//    gives the final entries: R's sync point came from the leader of some
//    view v that held those entries when f followers had confirmed them; a
//    replica in the latest normal view holds, from the StartView it copied
//    whole, the log of that view's start, which by induction holds v's
//    final entries, and within a view a follower's entries at a slot are the
//    leader's or a request where the leader has a no-op (which the merge
//    replaces by the no-op). So taking R's entries there changes nothing;
//    but the new leader's own entries between its sync point and S may be
//    such requests, or missing: hence the fetch (step 2) before it merges.
//    Entries at or below a replica's sync point are left out of its
//    ViewChange for the same reason: S is at least that sync point.
//  - The whole-log merge relies on this: a replica whose last normal view
//    is v holds v's starting log. Here a follower counts v as its last
//    normal view only once it has copied the leader's log up to the end of
//    v's starting log (b), and its log after its sync point does not change
//    before then (a snapshot it installs meanwhile only replaces slots by
//    final ones). A request completed in some view (f + 1 holders in normal
//    status in that view, the leader among them) is thus in every later
//    merged log, as in the original protocol.
//  - A follower's word that its log matches its leader's up to its sync
//    point (Recover, flag set) is true because the leader's log holds every
//    final entry of its view and the views before. So a follower takes a
//    snapshot only from the leader of its view or of a later one, which it
//    then moves to (on_snapshot_chunk); never from a later view while it
//    still answers to the leader of an earlier one, which may hold other
//    entries at those slots.
//  - Nothing executes what could still change: followers execute only up
//    to their sync point (installing a StartView raises it only to the
//    leader's sync point within the copy), snapshots are only of final
//    slots, and a store rebuilt from a snapshot starts from final state.

void NoPaxosReplica::enter_view(uint64_t view, uint64_t session) {
  view_ = std::max(view_, view);
  session_ = std::max(session_, session);
  status_ = Status::kViewChange;
  std::erase_if(held_, [&](const auto& h) { return h.second.session != session_; });
  ++view_changes_;
  vc_started_ = now_;
  last_sync_ = now_;
  pending_.clear();
  gap_open_ = false;
  follower_synced_.clear();
  view_changes_msgs_.clear();
  fetching_ = false;
  synced_upto_ = 0;
}

void NoPaxosReplica::start_view_change(uint64_t view, uint64_t session, Outbox& out) {
  enter_view(view, session);
  Message req = make(MsgType::kViewChangeRequest, 0);
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    req.to = r;
    out.push_back(req);
  }
  if (leading()) {
    try_start_view(out);  // (our own log counts as ours, unsent)
  } else {
    send_view_change(sync_point_ + 1, out);
  }
}

void NoPaxosReplica::send_view_change(uint64_t from, Outbox& out) {
  const uint32_t to = leader_of(view_);
  // Slots we keep only in our snapshot: the snapshot (then the leader asks again).
  if (from <= base_) return send_snapshot(to, 0, 0, out);
  // The last part carries our last entry, whatever was asked for.
  if (from > last_slot() && last_slot() > base_) from = last_slot();
  Message vc = make(MsgType::kViewChange, to);
  vc.a = last_normal_view_;
  vc.b = last_normal_session_;
  vc.c = sync_point_;
  do {
    Message part = vc;
    from = fill(part, from, UINT64_MAX);
    part.flag = from <= last_slot();  // more parts follow
    out.push_back(std::move(part));
  } while (from <= last_slot());
}

void NoPaxosReplica::on_view_change_request(const Message& m, Outbox& out) {
  if (newer(m.view, m.session)) {
    start_view_change(m.view, m.session, out);
    return;
  }
  // The new leader asks for (more of) our ViewChange.
  if (m.view == view_ && m.session == session_ && status_ == Status::kViewChange && !leading() &&
      m.from == leader_of(view_))
    send_view_change(m.a == 0 ? sync_point_ + 1 : m.a, out);
}

void NoPaxosReplica::on_view_change(const Message& m, Outbox& out) {
  if (newer(m.view, m.session)) start_view_change(m.view, m.session, out);
  if (m.view != view_ || m.session != session_ || !leading() || m.from == id_ ||
      m.from >= config_.replicas)
    return;
  if (status_ != Status::kViewChange) {
    // A straggler of a view already started: send it the view.
    send_start_view(m.from, m.c + 1, out);
    return;
  }
  VcLog& v = view_changes_msgs_[m.from];
  if (!v.known || v.view != m.a || v.session != m.b || v.sync != m.c) {
    v = VcLog{};  // its first part, or its state moved on (a snapshot): start again
    v.known = true;
    v.view = m.a;
    v.session = m.b;
    v.sync = m.c;
  }
  for (const Entry& e : m.entries) v.entries[e.slot] = e;
  if (!m.flag) {
    v.ended = true;
    v.last = m.entries.empty() ? m.c : m.entries.back().slot;
  }
  try_start_view(out);
}

bool NoPaxosReplica::complete(const VcLog& v) {
  return v.known && v.ended && first_missing(v, v.sync + 1) > v.last;
}

uint64_t NoPaxosReplica::first_missing(const VcLog& v, uint64_t from) {
  uint64_t s = from;
  for (auto it = v.entries.lower_bound(from); it != v.entries.end() && it->first == s; ++it) ++s;
  return s;
}

void NoPaxosReplica::pull_view_changes(Outbox& out) {
  // New leader, every sync_ms: ask for the ViewChanges (or parts) we lack,
  // and for the final slots we are fetching.
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    Message q = make(MsgType::kViewChangeRequest, r);
    auto it = view_changes_msgs_.find(r);
    if (it == view_changes_msgs_.end() || !it->second.known) {
      q.a = 0;
    } else if (!complete(it->second)) {
      q.a = first_missing(it->second, it->second.sync + 1);
    } else if (fetching_ && r == fetch_from_) {
      q.a = first_missing(it->second, sync_point_ + 1);
    } else {
      continue;
    }
    out.push_back(q);
  }
}

void NoPaxosReplica::try_start_view(Outbox& out) {
  if (status_ != Status::kViewChange || !leading()) return;
  std::vector<uint32_t> in;  // whole logs: ours and others'
  for (const auto& [r, v] : view_changes_msgs_)
    if (complete(v)) in.push_back(r);
  if (in.size() + 1 < config_.f() + 1) return;
  for (uint32_t r = 0; r < config_.replicas; ++r)
    if (r != id_ && (full_merge_ >> r & 1) != 0 && std::find(in.begin(), in.end(), r) == in.end())
      return;  // (require_view_changes_from)
  // 1. The highest sync point among them.
  uint64_t S = sync_point_;
  uint32_t holder = id_;
  for (uint32_t r : in)
    if (view_changes_msgs_[r].sync > S) {
      S = view_changes_msgs_[r].sync;
      holder = r;
    }
  // 2. The final slots we lack, from the replica that has them.
  if (holder != id_ && first_missing(view_changes_msgs_[holder], sync_point_ + 1) <= S) {
    if (!fetching_ || fetch_from_ != holder) {
      fetching_ = true;
      fetch_from_ = holder;
      Message q = make(MsgType::kViewChangeRequest, holder);
      q.a = first_missing(view_changes_msgs_[holder], sync_point_ + 1);
      out.push_back(q);
    }
    return;
  }
  // 3. The new log after our sync point: the final slots to S, then the
  // latest normal view's logs merged.
  std::vector<Entry> after;
  if (holder != id_) {
    const VcLog& h = view_changes_msgs_[holder];
    for (uint64_t s = sync_point_ + 1; s <= S; ++s) after.push_back(h.entries.at(s));
  }
  uint64_t lv = last_normal_view_, ls = last_normal_session_;
  for (uint32_t r : in) {
    const VcLog& v = view_changes_msgs_[r];
    if (v.view > lv || v.session > ls) {
      lv = std::max(lv, v.view);
      ls = std::max(ls, v.session);
    }
  }
  // Those in the latest normal view, in replica order (as the whole-log
  // merge went): ours among them if we were.
  std::vector<uint32_t> latest;
  uint64_t last = S;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) {
      if (last_normal_view_ != lv || last_normal_session_ != ls) continue;
      last = std::max(last, last_slot());
    } else {
      if (!std::binary_search(in.begin(), in.end(), r)) continue;
      const VcLog& v = view_changes_msgs_[r];
      if (v.view != lv || v.session != ls) continue;
      last = std::max(last, v.last);
    }
    latest.push_back(r);
  }
  for (uint64_t s = S + 1; s <= last; ++s) {
    // Slot by slot: the entry of the first that has one; a no-op overrides.
    std::optional<Entry> e;
    for (uint32_t r : latest) {
      const Entry* x = nullptr;
      if (r == id_) {
        if (s <= last_slot()) x = &at(s);
      } else {
        const VcLog& v = view_changes_msgs_[r];
        if (s <= v.last) x = &v.entries.at(s);
      }
      if (x && (!e || x->cmds.empty())) e = *x;
    }
    if (!e) {
      // Cannot happen (each log in `latest` holds every slot above its sync
      // point, which is at most S, to its end); a no-op keeps the log dense.
      e = Entry{};
    }
    e->slot = s;
    after.push_back(*e);
  }
  if (holder != id_) ++final_fetches_;
  std::map<uint32_t, uint64_t> their_sync;
  for (uint32_t r : in) their_sync[r] = view_changes_msgs_[r].sync;
  view_changes_msgs_.clear();
  adopt(std::move(after));
  sync_point_ = S;
  // Those that sent their logs hold ours up to their sync points (final).
  for (const auto& [r, sync] : their_sync) follower_synced_[r] = std::min(sync, last_slot());
  fetching_ = false;
  status_ = Status::kNormal;
  full_merge_ = 0;
  last_normal_view_ = view_;
  last_normal_session_ = session_;
  last_heard_ = now_;
  last_sync_ = now_;
  view_start_ = last_slot();
  execute_to(last_slot(), out, false);
  // Each follower gets the new log from after its sync point (ours, for
  // those we did not hear from: they ask for what they lack).
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    auto it = their_sync.find(r);
    send_start_view(r, (it == their_sync.end() ? S : it->second) + 1, out);
  }
  release_held(out);
  announce(out);
}

void NoPaxosReplica::announce(Outbox& out) {
  for (const uint32_t c : store_.client_nodes(config_.client_id(0)))
    out.push_back(make(MsgType::kLeader, c));
}

void NoPaxosReplica::adopt(std::vector<Entry> after_sync) {
  // Our log after our sync point becomes `after_sync` (slots sync_point_ +
  // 1 on). A replica that executed entries there that the new log does not
  // hold (a former leader's speculation) starts its store again from its
  // snapshot (final) and the log.
  const uint64_t first = sync_point_ + 1;
  bool same = executed_ < first + after_sync.size();
  for (uint64_t s = first; same && s <= executed_; ++s) same = at(s) == after_sync[s - first];
  log_.resize(sync_point_ - base_);
  for (Entry& e : after_sync) log_.push_back(std::move(e));
  rewrite_ = true;  // (the log may be shorter than before: written whole)
  pending_.clear();
  gap_open_ = false;
  if (!same) rebuild_store();
}

void NoPaxosReplica::rebuild_store() {
  // (The snapshot's identities are read from the store it replaces, whose
  // applied log begins with them: they are of final slots.)
  const std::string bytes = snapshot_.bytes(store_, 0, snapshot_.size());
  store_ = Store(store_.options());
  if (snapshot_slot_ > 0) {
    std::string why;
    store_.restore(bytes, &why);  // our own serialize(): whole
  }
  executed_ = snapshot_slot_;
  candidate_.clear();
  candidate_slot_ = 0;
}

void NoPaxosReplica::send_start_view(uint32_t to, uint64_t from, Outbox& out) {
  if (from == 0) from = 1;
  // It lacks slots we keep only in our snapshot: that first.
  if (from <= base_) return send_snapshot(to, 0, 0, out);
  Message sv = make(MsgType::kStartView, to);
  sv.a = from;
  sv.b = view_start_;
  sv.c = sync_point_;
  fill(sv, from, UINT64_MAX);
  out.push_back(std::move(sv));
}

void NoPaxosReplica::ask_start_view(Outbox& out) {
  Message r = make(MsgType::kRecover, leader_of(view_));
  r.a = sv_first_ + sv_entries_.size();
  out.push_back(r);
}

void NoPaxosReplica::on_start_view(const Message& m, Outbox& out) {
  if (m.view < view_ || m.session < session_) return;
  if (m.from != leader_of(m.view) || m.from == id_) return;
  const bool same = m.view == view_ && m.session == session_;
  if (same && status_ != Status::kViewChange) return;  // in the view already
  if (!same) enter_view(m.view, m.session);
  if (sv_view_ != view_ || sv_session_ != session_ || sv_first_ != sync_point_ + 1) {
    // A new copy: the leader's log after our sync point.
    sv_view_ = view_;
    sv_session_ = session_;
    sv_first_ = sync_point_ + 1;
    sv_entries_.clear();
  }
  const uint64_t before = sv_first_ + sv_entries_.size();
  uint64_t next = before;
  if (m.a <= next)
    for (const Entry& e : m.entries)
      if (e.slot == next) {
        sv_entries_.push_back(e);
        ++next;
      }
  if (next > before) vc_started_ = now_;  // progress: the leader is there
  if (next - 1 < m.b) {
    // More to copy. (A piece that brought nothing new is a duplicate: its
    // twin already asked for the next, so asking again would only double
    // the traffic; a piece that starts past what we hold asks for ours.)
    if (next > before || m.a > next) ask_start_view(out);
    return;
  }
  // We hold the leader's log up to the end of the view's starting log:
  // take part in the view.
  adopt(std::move(sv_entries_));
  sv_entries_.clear();
  sv_first_ = 0;
  status_ = Status::kNormal;
  full_merge_ = 0;  // (its leader merged what the rule asks)
  last_normal_view_ = view_;
  last_normal_session_ = session_;
  last_heard_ = now_;
  synced_upto_ = last_slot();
  // The leader's sync point is final, and our log is its log up to here.
  sync_point_ = std::max(sync_point_, std::min(m.c, last_slot()));
  // Only final slots may stay executed on a follower.
  if (executed_ > sync_point_) rebuild_store();
  execute_to(sync_point_, out, false);
  // Where our log matches the leader's: synchronization goes on from there.
  Message r = make(MsgType::kRecover, m.from);
  r.flag = true;
  r.a = last_slot();
  out.push_back(r);
  release_held(out);
}

}  // namespace kv
