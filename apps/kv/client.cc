#include "client.h"

#include <algorithm>

namespace kv {

Client::Client(Config config, Protocol protocol, uint32_t index, std::vector<Command> ops,
               uint64_t retry_ms, uint32_t window, uint32_t batch)
    : config_(config),
      protocol_(protocol),
      id_(config.client_id(index)),
      identity_(id_),
      ops_(std::make_move_iterator(ops.begin()), std::make_move_iterator(ops.end())),
      ops_total_(ops.size()),
      retry_ms_(retry_ms),
      window_(static_cast<uint32_t>(std::clamp<uint64_t>(window, 1, kClientWindow))),
      batch_(batch) {
  for (size_t i = 0; i < ops_.size(); ++i) {
    ops_[i].client = identity_;
    ops_[i].seq = i + 1;
  }
}

void Client::set_run(uint32_t run, uint32_t incarnation) {
  identity_ = client_identity(id_, run, incarnation);
  for (Command& c : ops_) c.client = identity_;
}

void Client::send(const std::vector<const Command*>& cmds, Outbox& out, bool to_all) {
  // As few messages as the batch bound allows. NOPaxos: each goes to the
  // sequencer, which numbers the batch once (one log slot).
  const size_t bound = protocol_ == Protocol::kNoPaxos ? kMaxOrderedBatchBytes : kMaxBatchBytes;
  for (size_t i = 0; i < cmds.size();) {
    Message m;
    m.type = MsgType::kRequest;
    m.from = id_;
    size_t bytes = 0;
    m.cmds.reserve(std::min<size_t>(cmds.size() - i, batch_ == 0 ? cmds.size() : batch_));
    for (; i < cmds.size(); ++i) {
      const size_t more = wire_bytes(*cmds[i]);
      if (!batch_has_room(m.cmds.size(), bytes, 1, more, bound, batch_)) break;
      bytes += more;
      m.cmds.push_back(*cmds[i]);
    }
    if (protocol_ == Protocol::kNoPaxos) {
      m.to = config_.sequencer_id();
      out.push_back(std::move(m));
      continue;
    }
    if (!to_all) {
      m.to = static_cast<uint32_t>(leader_hint_ % config_.replicas);
      out.push_back(std::move(m));
      continue;
    }
    // After a timeout the leader may have changed: ask everyone; only the
    // leader of the current ballot acts on it.
    for (uint32_t r = 0; r < config_.replicas; ++r) {
      m.to = r;
      out.push_back(m);
    }
  }
}

void Client::complete(InFlight& f, const Result& r) {
  // (Never sent again: the history can have the command itself.)
  history_.push_back({std::move(op(f.seq)), r, f.invoked_ms, now_, f.invoked_us, clock_us_});
  ++completed_count_;
  completed_sum_ += identity_hash(identity_, f.seq);
  f.done = true;
  f.acks.clear();
  f.leader_results.clear();
  while (!inflight_.empty() && inflight_.front().done) inflight_.pop_front();
  // Every operation before the first one in flight has completed.
  const uint64_t keep_from = inflight_.empty() ? next_ + 1 : inflight_.front().seq;
  while (ops_base_ + 1 < keep_from) {
    ops_.pop_front();
    ++ops_base_;
  }
}

void Client::receive(const Message& m, Outbox& out) {
  if (m.type == MsgType::kLeader) return on_leader(m, out);
  if (m.type != MsgType::kReply) return;
  auto find = [&](const Command& c) -> InFlight* {
    if (c.client != identity_ || inflight_.empty() || c.seq < inflight_.front().seq) return nullptr;
    const uint64_t at = c.seq - inflight_.front().seq;
    if (at >= inflight_.size() || inflight_[at].done) return nullptr;
    return &inflight_[at];
  };
  if (protocol_ == Protocol::kMultiPaxos) {
    leader_hint_ = m.view;
    for (size_t i = 0; i < m.cmds.size() && i < m.results.size(); ++i) {
      if (InFlight* f = find(m.cmds[i])) complete(*f, m.results[i]);
    }
    return;
  }
  // NOPaxos: every replica answers for the slot (view, session, m.a); the
  // leader's answer (flag) carries the results.
  auto key = std::make_tuple(m.view, m.session, m.a);
  for (size_t i = 0; i < m.cmds.size(); ++i) {
    InFlight* f = find(m.cmds[i]);
    if (!f) continue;
    std::set<uint32_t>& acks = f->acks[key];
    acks.insert(m.from);
    if (m.flag && i < m.results.size()) f->leader_results[key] = m.results[i];
    auto leader = f->leader_results.find(key);
    if (acks.size() >= config_.f() + 1 && leader != f->leader_results.end())
      complete(*f, Result(leader->second));
  }
}

void Client::on_leader(const Message& m, Outbox& out) {
  // A newer leader than any answer or announcement named: what waits now
  // was sent to a leader that is gone (or never arrived); send it again at
  // once, in order (Multi-Paxos: to this leader; NOPaxos: to the sequencer
  // of the new view). An older announcement is stale.
  if (std::make_pair(m.view, m.session) <= std::make_pair(leader_hint_, announced_session_)) return;
  leader_hint_ = m.view;
  announced_session_ = m.session;
  // And for a retry timeout, whatever stays unanswered for kFastRetryMs
  // goes again (as after a replica's loss): a follower still joining the
  // view may miss the first resend.
  fast_until_ = now_ + retry_ms_;
  resent_to_leader_ += resend_unanswered(out, false);
}

size_t Client::resend_unanswered(Outbox& out, bool to_all) {
  std::vector<const Command*> sending;
  for (InFlight& f : inflight_) {
    if (f.done) continue;
    f.sent_ms = now_;
    sending.push_back(&op(f.seq));
  }
  send(sending, out, to_all);
  return sending.size();
}

void Client::tick(uint64_t now_ms, Outbox& out) {
  now_ = now_ms;
  std::vector<const Command*> sending;
  // The oldest unanswered operation was sent first: if it waited too long,
  // send every unanswered one again, in order (a lost predecessor makes the
  // store skip its successors, store.h).
  const uint64_t retry =
      now_ms < fast_until_ ? std::min<uint64_t>(retry_ms_, kFastRetryMs) : retry_ms_;
  if (!inflight_.empty() && now_ms - inflight_.front().sent_ms >= retry)
    retries_ += resend_unanswered(out, true);
  while (next_ < ops_total_ && inflight_.size() < window_) {
    InFlight f;
    f.seq = ++next_;
    f.invoked_ms = f.sent_ms = now_ms;
    f.invoked_us = clock_us_;
    inflight_.push_back(std::move(f));
    sending.push_back(&op(next_));
  }
  if (!sending.empty()) send(sending, out, false);
}

void Client::replicas_present(uint32_t mask) {
  if (present_ != 0 && (present_ & ~mask) != 0) fast_until_ = now_ + retry_ms_;
  present_ = mask;
}

}  // namespace kv
