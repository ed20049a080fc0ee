// NoPaxosReplica: what it keeps on disk under --data-dir, and starting
// from it (durable.h, nopaxos.h: Durability).
//
// Why a replica restored from its files is safe to go on from: with
// --fsync always, every message a replica sent followed from state that
// was on its disk first (the host writes each round's changes before the
// round's messages leave), so the files hold everything it acknowledged to
// a client, every view it moved to and the sync points it committed or
// installed. Restored, it is the same replica after a pause; what it had
// in memory only (requests held past a gap, the leader's record of what
// each follower confirmed, a log being copied in a view change) is what a
// pause may lose anyway, and the protocol asks for it again. The next
// run's sequencer has a newer session, so the first ordered request makes
// every replica change view, and the merge of f + 1 logs keeps every
// request a client completed (nopaxos_view_change.cc).
#include <algorithm>
#include <cstdint>
#include <utility>

#include "nopaxos.h"
#include "nopaxos_internal.h"

namespace kv {

using namespace nopaxos_detail;

void NoPaxosReplica::restore(RestoredState st) {
  view_ = st.ballot;
  session_ = st.session;
  last_normal_view_ = st.normal_view;
  last_normal_session_ = st.normal_session;
  if (!st.snapshot.empty()) {
    store_ = std::move(st.store);
    snapshot_ = Snapshot(std::move(st.snapshot));
    snapshot_slot_ = st.snapshot_slot;
    snapshot_entry_ = st.snapshot_entry;
    snapshot_entry_.slot = snapshot_slot_;
  }
  base_ = executed_ = snapshot_slot_;
  base_entry_ = snapshot_entry_;
  // The log goes on densely from the snapshot (replica_disk.cc refuses
  // files where it does not).
  for (Entry& e : st.entries)
    if (e.slot == last_slot() + 1) log_.push_back(std::move(e));
  sync_point_ = synced_upto_ = std::clamp(st.commit, snapshot_slot_, last_slot());
  const bool normal = view_ == last_normal_view_ && session_ == last_normal_session_;
  status_ = normal ? Status::kNormal : Status::kViewChange;
  // (A leader executed ahead of its sync point, a follower up to it.)
  Outbox none;
  execute_to(normal && leading() ? last_slot() : sync_point_, none, false);
  rewrite_ = false;
  dirty_lo_ = dirty_hi_ = 0;
  kept_ = durable_numbers();
}

void NoPaxosReplica::put_numbers(DurableChanges* c) const {
  c->ballot = view_;
  c->session = session_;
  c->normal_view = last_normal_view_;
  c->normal_session = last_normal_session_;
  c->commit = sync_point_;
  c->recovering = status_ == Status::kRecovering;
}

DurableChanges NoPaxosReplica::durable_state() const {
  DurableChanges c;
  c.rewrite = true;
  put_numbers(&c);
  if (c.recovering) return c;  // what it copied so far is nothing to go on from
  for (uint64_t s = std::max(base_, snapshot_slot_) + 1; s <= last_slot(); ++s)
    c.entries.push_back(at(s));
  c.snapshot_slot = snapshot_slot_;
  if (snapshot_slot_ > 0) {
    c.snapshot = snapshot_.bytes(store_, 0, snapshot_.size());
    c.snapshot_entry = snapshot_entry_;
    c.snapshot_entry.slot = snapshot_slot_;
  }
  return c;
}

bool NoPaxosReplica::take_durable(DurableChanges* c) {
  if (status_ == Status::kRecovering) return false;
  if (rewrite_) {
    *c = durable_state();
  } else if (dirty_lo_ != 0 || durable_numbers() != kept_) {
    c->rewrite = false;
    put_numbers(c);
    c->snapshot_slot = 0;
    c->snapshot.clear();
    c->entries.clear();
    for (uint64_t s = std::max(dirty_lo_, base_ + 1);
         dirty_lo_ != 0 && s <= dirty_hi_ && s <= last_slot(); ++s)
      c->entries.push_back(at(s));
  } else {
    return false;
  }
  rewrite_ = false;
  dirty_lo_ = dirty_hi_ = 0;
  kept_ = durable_numbers();
  return true;
}

}  // namespace kv
