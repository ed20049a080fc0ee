#include "client.h"

namespace kv {

Client::Client(Config config, Protocol protocol, uint32_t index, std::vector<Command> ops,
               uint64_t retry_ms)
    : config_(config),
      protocol_(protocol),
      id_(config.client_id(index)),
      ops_(std::move(ops)),
      retry_ms_(retry_ms) {
  for (size_t i = 0; i < ops_.size(); ++i) {
    ops_[i].client = id_;
    ops_[i].seq = i + 1;
  }
}

void Client::send(Outbox& out, bool to_all) {
  Message m;
  m.type = MsgType::kRequest;
  m.from = id_;
  m.cmd = ops_[next_ - 1];
  if (protocol_ == Protocol::kNoPaxos) {
    m.to = config_.sequencer_id();
    out.push_back(m);
    return;
  }
  if (!to_all) {
    m.to = static_cast<uint32_t>(leader_hint_ % config_.replicas);
    out.push_back(m);
    return;
  }
  // After a timeout the leader may have changed: ask everyone; only the
  // leader of the current ballot acts on it.
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    m.to = r;
    out.push_back(m);
  }
}

void Client::complete(const Result& r) {
  history_.push_back({ops_[next_ - 1], r, invoked_ms_, now_, invoked_us_, clock_us_});
  outstanding_ = false;
  acks_.clear();
  leader_results_.clear();
}

void Client::receive(const Message& m, Outbox&) {
  if (m.type != MsgType::kReply || !outstanding_ || m.cmd.client != id_ ||
      m.cmd.seq != ops_[next_ - 1].seq)
    return;
  if (protocol_ == Protocol::kMultiPaxos) {
    leader_hint_ = m.view;
    complete(m.result);
    return;
  }
  auto key = std::make_tuple(m.view, m.session, m.a);
  acks_[key].insert(m.from);
  if (m.flag) leader_results_[key] = m.result;
  if (acks_[key].size() >= config_.f() + 1 && leader_results_.count(key))
    complete(leader_results_[key]);
}

void Client::tick(uint64_t now_ms, Outbox& out) {
  now_ = now_ms;
  if (!outstanding_) {
    if (next_ == ops_.size()) return;
    ++next_;
    outstanding_ = true;
    invoked_ms_ = sent_ms_ = now_ms;
    invoked_us_ = clock_us_;
    send(out, false);
    return;
  }
  if (now_ms - sent_ms_ >= retry_ms_) {
    ++retries_;
    sent_ms_ = now_ms;
    send(out, true);
  }
}

}  // namespace kv
