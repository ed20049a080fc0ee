#include "multipaxos.h"

#include <algorithm>
#include <bit>

namespace kv {
namespace {

// What an entry's fixed fields take in a message (codec.cc), besides its
// command (wire_bytes): near enough to bound messages.
constexpr size_t kEntryBytes = 40;

// Gathers a leader's replies into one kReply per client, or several where
// they would pass kMaxBatchBytes, appended to an outbox.
class ReplyBatch {
 public:
  ReplyBatch(Outbox& out, uint32_t from, uint64_t view) : out_(out), from_(from), view_(view) {}
  void add(uint64_t client, uint64_t seq, const Result& r) {
    const size_t bytes = 24 + r.value.size();
    Open* open = nullptr;
    for (Open& o : open_) {
      if (o.client == client) open = &o;
    }
    if (!open || open->bytes + bytes > kMaxBatchBytes) {
      if (!open) open = &open_.emplace_back();
      Message m;
      m.type = MsgType::kReply;
      m.from = from_;
      m.to = static_cast<uint32_t>(client);
      m.view = view_;
      *open = Open{client, out_.size(), 0};
      out_.push_back(std::move(m));
    }
    Message& m = out_[open->index];
    Command& c = m.cmds.emplace_back();
    c.client = client;
    c.seq = seq;
    m.results.push_back(r);
    open->bytes += bytes;
  }

 private:
  struct Open {
    uint64_t client = 0;
    size_t index = 0;  // in out_
    size_t bytes = 0;
  };
  Outbox& out_;
  uint32_t from_;
  uint64_t view_;
  std::vector<Open> open_;
};

}  // namespace

MultiPaxosReplica::MultiPaxosReplica(Config config, uint32_t id, MultiPaxosOptions options)
    : config_(config),
      id_(id),
      options_(options),
      rng_(options.seed * 1000003 + id),
      role_(id == 0 && !options.recover ? Role::kLeader : Role::kFollower) {
  store_ = Store(options.store);
  reset_election_timer();
  if (options.recover) {
    recovering_ = true;
    restart_recovery();
  }
}

std::optional<Entry>& MultiPaxosReplica::slot(uint64_t s) {
  if (last_slot() < s) log_.resize(s - base_);
  return log_[s - base_ - 1];
}

void MultiPaxosReplica::reset_election_timer() {
  last_heard_ = now_;
  elect_now_ = false;
  std::uniform_int_distribution<uint64_t> d(0, options_.election_timeout_ms);
  election_timeout_ = options_.election_timeout_ms + d(rng_);
}

void MultiPaxosReplica::open_votes(uint64_t s) {
  // Slots are opened in order, each once per ballot (votes_ is cleared
  // with every change of role).
  if (votes_.empty()) votes_first_ = s;
  votes_.push_back(1u << id_);
}

void MultiPaxosReplica::become_follower(uint64_t ballot) {
  ballot_ = ballot;
  role_ = Role::kFollower;
  pending_.clear();
  proposed_.clear();
  votes_.clear();
  promises_.clear();
  promise_parts_.clear();
  reset_election_timer();
}

void MultiPaxosReplica::start_election(Outbox& out) {
  // The smallest ballot above every one seen that this replica leads.
  uint64_t b = ballot_ + 1;
  while (b % config_.replicas != id_) ++b;
  ballot_ = b;
  role_ = Role::kCandidate;
  ++elections_;
  promises_.clear();
  promise_parts_.clear();
  pending_.clear();
  proposed_.clear();
  votes_.clear();
  reset_election_timer();
  // Its own promise: every entry above its commit index.
  Message self;
  self.type = MsgType::kPromise;
  self.from = id_;
  self.view = b;
  self.a = commit_;
  for (uint64_t s = commit_ + 1; s <= last_slot(); ++s)
    if (at(s)) self.entries.push_back(*at(s));
  self.b = 1;
  promises_[id_] = self;
  promise_parts_[id_] = {0};
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    Message m;
    m.type = MsgType::kPrepare;
    m.from = id_;
    m.to = r;
    m.view = b;
    m.a = commit_;
    out.push_back(m);
  }
  if (config_.majority() <= 1) become_leader(out);
}

void MultiPaxosReplica::become_leader(Outbox& out) {
  // Per slot above our commit index: a value some promiser knows is
  // committed, else the one accepted in the highest ballot, else a no-op.
  // Paxos guarantees this is the chosen value wherever one was chosen.
  std::map<uint64_t, Entry> best;
  for (const auto& [from, p] : promises_) {
    for (const Entry& e : p.entries) {
      if (e.slot <= commit_) continue;
      auto it = best.find(e.slot);
      if (it == best.end() || (e.committed && !it->second.committed) ||
          (!it->second.committed && e.ballot > it->second.ballot))
        best[e.slot] = e;
    }
  }
  uint64_t last = best.empty() ? commit_ : best.rbegin()->first;
  last = std::max<uint64_t>(last, commit_);
  role_ = Role::kLeader;
  promises_.clear();
  promise_parts_.clear();
  for (uint64_t s = commit_ + 1; s <= last; ++s) {
    Entry e;
    auto it = best.find(s);
    if (it != best.end()) e = it->second;
    e.slot = s;
    e.ballot = ballot_;
    e.committed = false;
    slot(s) = e;
    changed(s);
    open_votes(s);
    if (!e.cmd.is_noop()) proposed_.insert({e.cmd.client, e.cmd.seq});
  }
  log_.resize(last - base_);
  last_heartbeat_ = now_;
  send_accept(commit_ + 1, last, out);
  advance_commit(out);
  announce(out);
}

void MultiPaxosReplica::announce(Outbox& out) {
  // Every client the replicated state knows of (each with a command that
  // took effect, or one in the log above it) may be waiting on the old
  // leader: telling them who leads now lets them resend at once instead of
  // after their retry timeout. A client the state does not know yet finds
  // the leader by its retry.
  std::set<uint32_t> clients = store_.client_nodes(config_.client_id(0));
  for (const auto& [client, seq] : proposed_)
    if (client_node(client) >= config_.client_id(0)) clients.insert(client_node(client));
  for (const uint32_t c : clients) {
    Message m;
    m.type = MsgType::kLeader;
    m.from = id_;
    m.to = c;
    m.view = ballot_;
    out.push_back(std::move(m));
  }
}

void MultiPaxosReplica::send_accept(uint64_t first, uint64_t last, Outbox& out) {
  // In messages of at most max_resend slots and about kMaxBatchBytes (a new
  // leader re-proposes every slot above its commit index at once).
  last = std::min(last, last_slot());
  uint64_t s = first;
  do {
    Message m;
    m.type = MsgType::kAccept;
    m.from = id_;
    m.view = ballot_;
    m.a = s;
    m.b = commit_;
    size_t bytes = 0;
    for (; s <= last && m.entries.size() < options_.max_resend; ++s) {
      bytes += kEntryBytes + wire_bytes(at(s)->cmd);
      if (bytes > kMaxBatchBytes && !m.entries.empty()) break;
      m.entries.push_back(*at(s));
    }
    for (uint32_t r = 0; r < config_.replicas; ++r) {
      if (r == id_) continue;
      m.to = r;
      out.push_back(m);
    }
  } while (s <= last);
}

void MultiPaxosReplica::propose_batch(Outbox& out) {
  if (pending_.empty()) return;
  size_t n = std::min(pending_.size(), options_.max_batch);
  uint64_t first = last_slot() + 1;
  for (size_t i = 0; i < n; ++i) {
    Entry e;
    e.slot = first + i;
    e.ballot = ballot_;
    e.cmd = pending_[i];
    slot(e.slot) = e;
    changed(e.slot);
    open_votes(e.slot);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
  send_accept(first, last_slot(), out);
  advance_commit(out);
}

void MultiPaxosReplica::advance_commit(Outbox& out) {
  if (role_ == Role::kLeader) {
    for (size_t i = 0; i < votes_.size(); ++i) {
      uint32_t& mask = votes_[i];
      if (mask == kChosen || static_cast<uint32_t>(std::popcount(mask)) < config_.majority())
        continue;
      const uint64_t s = votes_first_ + i;
      if (at(s)) at(s)->committed = true;
      mask = kChosen;
    }
    while (!votes_.empty() && votes_.front() == kChosen) {
      votes_.pop_front();
      ++votes_first_;
    }
  }
  while (commit_ < last_slot() && at(commit_ + 1) && at(commit_ + 1)->committed) ++commit_;
  ReplyBatch replies(out, id_, ballot_);
  while (applied_ < commit_) {
    const Entry& e = *at(applied_ + 1);
    ++applied_;
    Applied how;
    Result r = store_.apply(e.cmd, &how);
    if (how == Applied::kExecuted && counted_run_ != 0 &&
        client_run(e.cmd.client) == counted_run_) {
      ++run_executed_;
      run_executed_sum_ += identity_hash(e.cmd.client, e.cmd.seq);
    }
    if (role_ == Role::kLeader && !e.cmd.is_noop()) proposed_.erase({e.cmd.client, e.cmd.seq});
    if (role_ == Role::kLeader && (how == Applied::kExecuted || how == Applied::kDuplicate))
      replies.add(e.cmd.client, e.cmd.seq, r);
  }
  if (options_.snapshot_every > 0 && applied_ >= snapshot_slot_ + options_.snapshot_every) {
    // message.h, Snapshots: a new snapshot, and the log kept from the last.
    const uint64_t previous = snapshot_slot_;
    snapshot_ = store_.snapshot();
    snapshot_slot_ = applied_;
    ++snapshots_taken_;
    rewrite_ = true;
    if (previous > base_) {
      log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(previous - base_));
      base_ = previous;
    }
  }
}

void MultiPaxosReplica::on_request(const Message& m, Outbox& out) {
  if (role_ != Role::kLeader) return;
  ReplyBatch replies(out, id_, ballot_);
  for (const Command& c : m.cmds) {
    Result r;
    if (store_.already_applied(c.client, c.seq, &r)) {
      replies.add(c.client, c.seq, r);
      continue;
    }
    // Took effect so long ago that its client no longer waits for it.
    if (c.seq <= store_.last_seq(c.client)) continue;
    if (!proposed_.insert({c.client, c.seq}).second) continue;  // already in the log
    pending_.push_back(c);
  }
  while (pending_.size() >= options_.max_batch) propose_batch(out);
}

void MultiPaxosReplica::on_prepare(const Message& m, Outbox& out) {
  if (m.view < ballot_ ||
      (m.view == ballot_ && (role_ != Role::kFollower || m.from != ballot_ % config_.replicas))) {
    Message rej;
    rej.type = MsgType::kReject;
    rej.from = id_;
    rej.to = m.from;
    rej.view = ballot_;
    out.push_back(rej);
    return;
  }
  if (m.view > ballot_) become_follower(m.view);
  reset_election_timer();
  Message p;
  p.type = MsgType::kPromise;
  p.from = id_;
  p.to = m.from;
  p.view = ballot_;
  p.a = commit_;
  // Slots this replica no longer keeps are chosen, but the candidate lacks
  // them: it must take them from a snapshot before it may lead (flag, c).
  p.flag = m.a < base_;
  p.c = base_;
  // The entries above the candidate's commit index, in parts of bounded
  // size: session = the part's index, b = how many parts there are. The
  // candidate counts the promise once it holds every part.
  std::vector<Message> parts(1, p);
  size_t bytes = 0;
  for (uint64_t s = std::max(m.a, base_) + 1; s <= last_slot(); ++s) {
    if (!at(s)) continue;
    bytes += kEntryBytes + wire_bytes(at(s)->cmd);
    if (bytes > kMaxBatchBytes || parts.back().entries.size() >= options_.max_resend) {
      parts.push_back(p);
      parts.back().session = parts.size() - 1;
      bytes = kEntryBytes + wire_bytes(at(s)->cmd);
    }
    parts.back().entries.push_back(*at(s));
  }
  for (Message& part : parts) {
    part.b = parts.size();
    out.push_back(std::move(part));
  }
}

void MultiPaxosReplica::on_promise(const Message& m, Outbox& out) {
  if (role_ != Role::kCandidate || m.view != ballot_ || m.from >= config_.replicas) return;
  if (m.flag && m.c > commit_) {
    // Behind the promiser's snapshot: slots up to m.c are chosen and nobody
    // may send them in a promise. Stand down and catch up from it (the
    // snapshot, then committed slots); the election timer tries again
    // later, from there.
    become_follower(ballot_);
    send_catch_up(m.from, out);
    return;
  }
  // Parts of one promise (on_prepare): gathered, counted once all are in.
  std::set<uint64_t>& got = promise_parts_[m.from];
  if (!got.insert(m.session).second) return;
  Message& p = promises_[m.from];
  if (got.size() == 1) {
    p = m;
  } else {
    p.entries.insert(p.entries.end(), m.entries.begin(), m.entries.end());
  }
  size_t complete = 0;
  uint32_t complete_mask = 0;
  for (const auto& [from, parts] : promise_parts_) {
    if (parts.size() < promises_.at(from).b) continue;
    ++complete;
    complete_mask |= 1u << from;
  }
  // (require_promises_until: every replica that restored files, too.)
  if (commit_ < full_quorum_until_ && (complete_mask & full_quorum_) != full_quorum_) return;
  if (complete >= config_.majority()) become_leader(out);
}

void MultiPaxosReplica::on_accept(const Message& m, Outbox& out) {
  if (m.view < ballot_) {
    Message rej;
    rej.type = MsgType::kReject;
    rej.from = id_;
    rej.to = m.from;
    rej.view = ballot_;
    out.push_back(rej);
    return;
  }
  if (m.view > ballot_ || role_ != Role::kFollower) become_follower(m.view);
  reset_election_timer();
  for (const Entry& e : m.entries) {
    if (e.slot <= base_) continue;  // applied long ago
    std::optional<Entry>& mine = slot(e.slot);
    // A committed entry already holds the chosen value; keep its flag.
    if (mine && mine->committed) continue;
    Entry accepted = e;
    accepted.committed = false;
    if (mine == accepted) continue;  // a resend
    mine = std::move(accepted);
    changed(e.slot);
  }
  if (!m.entries.empty()) {
    Message ack;
    ack.type = MsgType::kAccepted;
    ack.from = id_;
    ack.to = m.from;
    ack.view = m.view;
    ack.a = m.entries.front().slot;
    ack.b = m.entries.back().slot;
    out.push_back(ack);
  }
  // The leader proposes one value per slot per ballot, so an entry accepted
  // in this ballot at a slot the leader reports committed is the chosen one.
  for (uint64_t s = commit_ + 1; s <= m.b && s <= last_slot(); ++s)
    if (at(s) && at(s)->ballot == m.view) at(s)->committed = true;
  advance_commit(out);
  if (commit_ < m.b && now_ >= next_catch_up_) {
    next_catch_up_ = now_ + options_.heartbeat_ms;
    send_catch_up(m.from, out);
  }
}

void MultiPaxosReplica::on_accepted(const Message& m, Outbox& out) {
  if (role_ != Role::kLeader || m.view != ballot_ || m.from >= config_.replicas) return;
  for (uint64_t s = std::max(m.a, votes_first_); s <= m.b && s - votes_first_ < votes_.size();
       ++s) {
    uint32_t& mask = votes_[s - votes_first_];
    if (mask != kChosen) mask |= 1u << m.from;
  }
  advance_commit(out);
}

void MultiPaxosReplica::send_catch_up(uint32_t to, Outbox& out) {
  Message c;
  c.type = MsgType::kCatchUp;
  c.from = id_;
  c.to = to;
  c.view = ballot_;
  c.a = commit_ + 1;
  out.push_back(c);
}

void MultiPaxosReplica::on_catch_up(const Message& m, Outbox& out) {
  if (m.a > commit_) return;
  if (m.a <= base_) return send_snapshot(m.from, 0, 0, out);  // no longer in the log
  Message c;
  c.type = MsgType::kCommitted;
  c.from = id_;
  c.to = m.from;
  c.view = ballot_;
  c.a = m.a;
  c.b = commit_;
  size_t bytes = 0;
  for (uint64_t s = m.a; s <= commit_ && c.entries.size() < options_.max_resend; ++s) {
    bytes += kEntryBytes + wire_bytes(at(s)->cmd);
    if (bytes > kMaxBatchBytes && !c.entries.empty()) break;
    c.entries.push_back(*at(s));
  }
  out.push_back(c);
}

void MultiPaxosReplica::on_committed(const Message& m, Outbox& out) {
  // Committed entries are chosen values whoever sends them; install them
  // flagged, so a later phase 1 prefers them over any accepted value.
  for (const Entry& e : m.entries) {
    if (e.slot <= commit_) continue;
    std::optional<Entry>& mine = slot(e.slot);
    Entry chosen = e;
    chosen.committed = true;
    if (mine == chosen) continue;
    mine = std::move(chosen);
    changed(e.slot);
  }
  advance_commit(out);
  // More where these came from: ask at once rather than at the next
  // heartbeat (b: the sender's commit index).
  if (!m.entries.empty() && commit_ < m.b) {
    send_catch_up(m.from, out);
  }
}

void MultiPaxosReplica::forget_replica(uint32_t r) {
  if (r >= config_.replicas || r == id_) return;
  // A promise r forgot must not complete a quorum: r may now accept in a
  // lower ballot what this ballot's phase 1 would have had to see.
  promises_.erase(r);
  promise_parts_.erase(r);
  full_quorum_ &= ~(1u << r);
  // Nor may votes it forgot: it votes again when the resends reach it.
  for (uint32_t& mask : votes_)
    if (mask != kChosen) mask &= ~(1u << r);
}

// --- Recovery (message.h). Why it is safe: the replica that restarted made
// promises and accepted values it no longer knows. Any f + 1 other replicas
// meet every quorum that counted one of its promises, so the highest ballot
// among their answers is at least the highest ballot it helped to form (a
// quorum not yet complete when the others learnt of the restart cannot count
// its promise: forget_replica). The leader of that ballot holds every value
// chosen so far, and every entry in its log was proposed in its ballot or is
// committed. Copying that log and then acting only in that ballot or later,
// the new process says nothing the old one could have contradicted.

void MultiPaxosReplica::restart_recovery() {
  // Every attempt has its own nonce, so a late answer to an earlier one is
  // not taken for a current one; incarnations' nonces (the option) differ
  // by a million attempts.
  nonce_ = options_.nonce * 1000000 + ++attempt_;
  recovery_replies_.clear();
  recovery_leader_ = -1;
  recovery_next_ = 1;
  recovery_commit_ = 0;
  recovery_unanswered_ = 0;
  recovery_asked_ = 0;
  log_.clear();
  base_ = commit_ = applied_ = 0;
  store_ = Store(store_.options());
  snapshot_.clear();
  snapshot_slot_ = 0;
  incoming_.clear();
  rewrite_ = true;
}

void MultiPaxosReplica::ask_recovery(Outbox& out) {
  recovery_asked_ = now_;
  Message m;
  m.type = MsgType::kRecoveryRequest;
  m.from = id_;
  m.a = nonce_;
  if (recovery_leader_ >= 0) {
    m.to = static_cast<uint32_t>(recovery_leader_);
    m.b = recovery_next_;
    out.push_back(m);
    return;
  }
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (r == id_) continue;
    m.to = r;
    out.push_back(m);
  }
}

void MultiPaxosReplica::on_recovery_request(const Message& m, Outbox& out) {
  if (recovering_ || m.from >= config_.replicas || m.from == id_) return;
  Message r;
  r.type = MsgType::kRecoveryReply;
  r.from = id_;
  r.to = m.from;
  r.a = m.a;
  r.view = ballot_;
  r.flag = role_ == Role::kLeader;
  r.b = last_slot();
  r.c = commit_;
  r.session = base_;  // slots up to here come in the snapshot
  if (m.b > base_ && r.flag) {
    size_t bytes = 0;
    for (uint64_t s = m.b; s <= last_slot() && r.entries.size() < kRecoveryEntries; ++s) {
      if (!at(s)) continue;
      bytes += 64 + wire_bytes(at(s)->cmd);
      if (bytes > kMaxBatchBytes && !r.entries.empty()) break;
      r.entries.push_back(*at(s));
    }
  }
  out.push_back(r);
}

void MultiPaxosReplica::on_recovery_reply(const Message& m, Outbox& out) {
  if (!recovering_ || m.a != nonce_ || m.from >= config_.replicas) return;
  if (recovery_leader_ < 0) {
    // 1. Whose ballot is latest: f + 1 answers, the leader of the highest
    // ballot among them one of them.
    recovery_replies_[m.from] = m;
    if (recovery_replies_.size() < config_.f() + 1) return;
    uint64_t highest = 0;
    for (const auto& [from, r] : recovery_replies_) highest = std::max(highest, r.view);
    const uint32_t leader = static_cast<uint32_t>(highest % config_.replicas);
    auto it = recovery_replies_.find(leader);
    if (it == recovery_replies_.end() || !it->second.flag || it->second.view != highest) return;
    recovery_leader_ = static_cast<int>(leader);
    recovery_ballot_ = highest;
    recovery_last_ = it->second.b;
    recovery_commit_ = it->second.c;
    recovery_next_ = 1;
  } else {
    // 2. A piece of the chosen leader's log.
    if (m.from != static_cast<uint32_t>(recovery_leader_)) return;
    if (!m.flag || m.view != recovery_ballot_) {
      restart_recovery();  // it no longer leads that ballot: begin again
      ask_recovery(out);
      return;
    }
    for (const Entry& e : m.entries) {
      if (e.slot < recovery_next_) continue;
      slot(e.slot) = e;
      changed(e.slot);
      recovery_next_ = e.slot + 1;
    }
    recovery_commit_ = std::max(recovery_commit_, m.c);
    if (m.entries.empty() && m.session >= recovery_next_) {
      // The slots wanted are in the leader's snapshot now.
      recovery_unanswered_ = 0;
      return request_snapshot(m.from, incoming_.slot(), incoming_.offset(), out);
    }
    if (m.entries.empty() && m.b < recovery_next_) recovery_next_ = recovery_last_ + 1;
  }
  recovery_unanswered_ = 0;
  if (recovery_leader_ >= 0 && recovery_next_ <= recovery_last_) {
    const Message& first = recovery_replies_[static_cast<uint32_t>(recovery_leader_)];
    // Its log starts after its snapshot: that first, then the slots after.
    if (recovery_next_ <= first.session && snapshot_slot_ < first.session)
      return request_snapshot(static_cast<uint32_t>(recovery_leader_), incoming_.slot(),
                              incoming_.offset(), out);
    return ask_recovery(out);
  }
  finish_recovery(out);
}

void MultiPaxosReplica::finish_recovery(Outbox& out) {
  // 3. The leader's log up to its last slot when chosen: a follower in its
  // ballot. Slots up to its commit index are chosen; the rest were proposed
  // in its ballot, which is what this replica now accepts them in.
  recovering_ = false;
  rewrite_ = true;  // (its files said it was recovering)
  recovery_replies_.clear();
  ballot_ = recovery_ballot_;
  role_ = Role::kFollower;
  for (uint64_t s = base_ + 1; s <= recovery_commit_ && s <= last_slot(); ++s)
    if (at(s)) at(s)->committed = true;
  reset_election_timer();
  advance_commit(out);
}

// --- Snapshots (message.h).

void MultiPaxosReplica::send_snapshot(uint32_t to, uint64_t slot, uint64_t offset, Outbox& out) {
  if (snapshot_slot_ == 0) return;
  if (slot != snapshot_slot_ || offset > snapshot_.size())
    offset = 0;  // a newer one: from the start
  Message c;
  c.type = MsgType::kSnapshotChunk;
  c.from = id_;
  c.to = to;
  c.view = ballot_;
  c.a = snapshot_slot_;
  c.b = offset;
  c.c = snapshot_.size();
  c.blob = snapshot_.bytes(store_, offset, kSnapshotChunkBytes);
  out.push_back(std::move(c));
}

void MultiPaxosReplica::request_snapshot(uint32_t from, uint64_t slot, uint64_t offset,
                                         Outbox& out) {
  Message r;
  r.type = MsgType::kSnapshotRequest;
  r.from = id_;
  r.to = from;
  r.view = ballot_;
  r.a = slot;
  r.b = offset;
  out.push_back(r);
}

void MultiPaxosReplica::on_snapshot_chunk(const Message& m, Outbox& out) {
  if (recovering_ ? static_cast<int>(m.from) != recovery_leader_ : m.a <= commit_) return;
  switch (incoming_.add(m)) {
    case IncomingSnapshot::Step::kIgnored:
      return;
    case IncomingSnapshot::Step::kAskNext:
      return request_snapshot(m.from, incoming_.slot(), incoming_.offset(), out);
    case IncomingSnapshot::Step::kComplete:
      break;
  }
  // Slots up to the snapshot's are applied in it; later ones stay.
  const uint64_t s = incoming_.slot();
  if (s >= last_slot()) {
    log_.clear();
  } else if (s > base_) {
    log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(s - base_));
  }
  base_ = commit_ = applied_ = s;
  store_ = incoming_.take_store();
  snapshot_ = Snapshot(incoming_.take_bytes());
  snapshot_slot_ = s;
  ++snapshots_installed_;
  rewrite_ = true;
  if (recovering_) {
    recovery_next_ = std::max(recovery_next_, s + 1);
    recovery_commit_ = std::max(recovery_commit_, s);
    if (recovery_next_ <= recovery_last_) return ask_recovery(out);
    return finish_recovery(out);
  }
  advance_commit(out);
}

// --- Durability (--data-dir; DurableChanges).

void MultiPaxosReplica::restore(RestoredState st) {
  restored_ = true;
  role_ = Role::kFollower;
  ballot_ = durable_ballot_ = st.ballot;
  log_.clear();
  if (!st.snapshot.empty()) {
    store_ = std::move(st.store);
    snapshot_ = Snapshot(std::move(st.snapshot));
    snapshot_slot_ = st.snapshot_slot;
  }
  base_ = commit_ = applied_ = snapshot_slot_;
  for (Entry& e : st.entries)
    if (e.slot > base_) slot(e.slot) = std::move(e);
  for (uint64_t s = base_ + 1; s <= st.commit && s <= last_slot(); ++s)
    if (at(s)) at(s)->committed = true;
  dirty_lo_ = dirty_hi_ = 0;
  Outbox none;  // a follower applies without answering anyone
  advance_commit(none);
}

DurableChanges MultiPaxosReplica::durable_state() const {
  DurableChanges c;
  c.rewrite = true;
  c.ballot = ballot_;
  c.commit = commit_;
  // A replica recovering from the others keeps nothing: what it copied so
  // far is no state to vote from, and its files say so (the job recovers
  // it again after a crash instead of restoring a follower that forgot
  // what its earlier process accepted).
  c.recovering = recovering_;
  if (recovering_) return c;
  for (uint64_t s = std::max(base_, snapshot_slot_) + 1; s <= last_slot(); ++s)
    if (log_[s - base_ - 1]) c.entries.push_back(*log_[s - base_ - 1]);
  c.snapshot_slot = snapshot_slot_;
  if (snapshot_slot_ > 0) c.snapshot = snapshot_.bytes(store_, 0, snapshot_.size());
  return c;
}

bool MultiPaxosReplica::take_durable(DurableChanges* c) {
  if (recovering_ && !rewrite_) return false;  // (durable_state)
  if (rewrite_) {
    *c = durable_state();
  } else if (dirty_lo_ != 0 || ballot_ != durable_ballot_) {
    c->rewrite = false;
    c->ballot = ballot_;
    c->commit = commit_;
    c->snapshot_slot = 0;
    c->snapshot.clear();
    c->entries.clear();
    for (uint64_t s = std::max(dirty_lo_, base_ + 1);
         dirty_lo_ != 0 && s <= dirty_hi_ && s <= last_slot(); ++s)
      if (at(s)) c->entries.push_back(*at(s));
  } else {
    return false;
  }
  rewrite_ = false;
  dirty_lo_ = dirty_hi_ = 0;
  durable_ballot_ = ballot_;
  return true;
}

void MultiPaxosReplica::receive(const Message& m, Outbox& out) {
  if (recovering_) {
    // Nothing but its own recovery until it is over.
    if (m.type == MsgType::kRecoveryReply) on_recovery_reply(m, out);
    if (m.type == MsgType::kSnapshotChunk) on_snapshot_chunk(m, out);
    return;
  }
  switch (m.type) {
    case MsgType::kSnapshotRequest:
      return send_snapshot(m.from, m.a, m.b, out);
    case MsgType::kSnapshotChunk:
      return on_snapshot_chunk(m, out);
    case MsgType::kRecoveryRequest:
      return on_recovery_request(m, out);
    case MsgType::kRequest:
      return on_request(m, out);
    case MsgType::kPrepare:
      return on_prepare(m, out);
    case MsgType::kPromise:
      return on_promise(m, out);
    case MsgType::kReject:
      if (m.view > ballot_) become_follower(m.view);
      return;
    case MsgType::kAccept:
      return on_accept(m, out);
    case MsgType::kAccepted:
      return on_accepted(m, out);
    case MsgType::kCatchUp:
      return on_catch_up(m, out);
    case MsgType::kCommitted:
      return on_committed(m, out);
    default:
      return;  // NOPaxos messages are not ours
  }
}

void MultiPaxosReplica::tick(uint64_t now_ms, Outbox& out) {
  now_ = now_ms;
  if (!started_) {
    // Clocks need not start at 0 (a real one reads time since boot): the
    // leader's silence is counted from the first tick.
    started_ = true;
    last_heard_ = now_ms;
    // Restored from disk: the leader of the next ballot asks for it at
    // once, rather than after an election timeout.
    if (restored_ && !recovering_ && (ballot_ + 1) % config_.replicas == id_) {
      start_election(out);
      return;
    }
  }
  if (recovering_) {
    if (recovery_asked_ == 0 || now_ - recovery_asked_ >= options_.recovery_retry_ms) {
      // The chosen leader went silent: choose again.
      if (recovery_leader_ >= 0 && recovery_asked_ != 0 && ++recovery_unanswered_ >= 5)
        restart_recovery();
      ask_recovery(out);
    }
    return;
  }
  if (role_ == Role::kLeader) {
    propose_batch(out);
    if (now_ - last_heartbeat_ >= options_.heartbeat_ms) {
      last_heartbeat_ = now_;
      // Resend what is not committed yet (repairs lost Accepts); an empty
      // Accept is the heartbeat that carries the commit index.
      uint64_t last = std::min<uint64_t>(last_slot(), commit_ + options_.max_resend);
      send_accept(commit_ + 1, last, out);
    }
    return;
  }
  if (elect_now_ || now_ - last_heard_ >= election_timeout_) start_election(out);
}

void MultiPaxosReplica::replicas_present(uint32_t mask) {
  if (recovering_ || role_ != Role::kFollower || (mask & (1u << id_)) == 0) return;
  const uint32_t n = config_.replicas;
  if ((mask & (1u << (ballot_ % n))) != 0) return;  // its leader is there
  if (config_.next_view_led_by(mask, ballot_) % n == id_) elect_now_ = true;
}

}  // namespace kv
