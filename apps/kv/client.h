// apps/kv/client.h: a client of the replicated store, for either protocol,
// as a deterministic Node (message.h).
//
// It keeps up to `window` operations outstanding (1: closed-loop, one at a
// time, as the workloads run), sends them in order and in batches (NOPaxos:
// the sequencer numbers a batch once, and it takes one log slot), resends every
// unanswered one after the retry timeout (same (client, seq), so the store
// executes each at most once, and in seq order: store.h), and records every
// completed operation with its invocation and completion time for the
// linearizability checks.
//
// A leader of a newer view than the client heard of announces itself
// (kLeader): the client then sends what it waits for again at once
// (Multi-Paxos: to that leader; NOPaxos: to the sequencer).
//
// Completion: Multi-Paxos — the leader's reply. NOPaxos — f + 1 replies for
// the same (view, session, log slot), one of them the leader's, which carries
// the result.
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "message.h"

namespace kv {

enum class Protocol : uint8_t { kMultiPaxos, kNoPaxos };

struct Completed {
  Command cmd;
  Result result;
  uint64_t invoked_ms = 0;
  uint64_t completed_ms = 0;
  // The same on a finer clock, where the driver keeps one (set_clock_us:
  // sluice-kv run, for latencies); 0 where it does not (the simulation).
  uint64_t invoked_us = 0;
  uint64_t completed_us = 0;
  // Its client gave up on it (kv_client.h: a deadline passed, or the
  // connection broke, after the command was sent): it may have taken
  // effect at any time after its invocation, or never. `result` and the
  // completion times mean nothing then.
  bool unknown = false;
};

class Client : public Node {
 public:
  // `ops` are the operations to run, in order; their client and seq fields
  // are filled in here. At most `window` (1 .. kClientWindow) are in flight.
  // Those sent together go in as few Requests as the batch bounds allow
  // (kMaxBatchBytes, NOPaxos kMaxOrderedBatchBytes), and at most `batch`
  // commands each (0: no bound but bytes).
  Client(Config config, Protocol protocol, uint32_t index, std::vector<Command> ops,
         uint64_t retry_ms = 40, uint32_t window = 1, uint32_t batch = 0);

  void receive(const Message& m, Outbox& out) override;
  void tick(uint64_t now_ms, Outbox& out) override;
  // A replica gone: for the next retry timeout, an operation unanswered
  // for kFastRetryMs is sent again (with every later one, to every
  // replica, as every retry is), so that they reach the new leader soon
  // after it is elected instead of a whole retry timeout later. (Not ended
  // by an answer: the old leader's last answers may still come in.)
  void replicas_present(uint32_t mask) override;
  // The same after the flows were declared anew: a request on the old ones
  // may be lost (NOPaxos: the old session's ordered flow is gone).
  void flows_renewed() override { fast_until_ = now_ + retry_ms_; }
  static constexpr uint64_t kFastRetryMs = 50;

  // Moves the clock without acting (a driver calls it before handing over
  // replies, so completions are stamped no earlier than they arrived).
  void set_now(uint64_t now_ms) { now_ = now_ms; }
  // A finer clock for the history's latencies; it drives nothing.
  void set_clock_us(uint64_t now_us) { clock_us_ = now_us; }

  bool done() const { return next_ == ops_total_ && inflight_.empty(); }
  // Appends an operation to run after the others (a front end's client,
  // constructed with none); returns its seq, which its Completed carries.
  uint64_t add(Command c) {
    c.client = identity_;
    c.seq = ++ops_total_;
    ops_.push_back(std::move(c));
    return ops_total_;
  }
  // The completed operations, in completion order, unless a driver takes
  // them (take_completed).
  const std::deque<Completed>& history() const { return history_; }
  // Hands each completed operation not taken yet to `f`, oldest first, and
  // forgets it: a front end that runs for hours holds none of them.
  template <class F>
  void take_completed(F&& f) {
    while (!history_.empty()) {
      f(history_.front());
      history_.pop_front();
    }
  }
  // How many operations completed, taken or not, and the sum of their
  // identity_hash (store.h): what a job compares with the replicas'
  // AppliedSummary::executed and executed_sum.
  uint64_t completed_count() const { return completed_count_; }
  uint64_t completed_sum() const { return completed_sum_; }
  uint32_t id() const { return id_; }
  // Stamps this client's identity with `run` (a run on --data-dir,
  // flow_job.cc, so that a store that remembers an earlier run's client of
  // the same id takes these commands as new) and the incarnation of its
  // process (a RESP gateway started again) above id(), where replies go
  // (client_identity, command.h). Before any operation is added or sent.
  void set_run(uint32_t run, uint32_t incarnation = 0);
  uint64_t identity() const { return identity_; }
  // How often an operation was sent again after a timeout.
  uint64_t retries() const { return retries_; }
  // How often one was sent again at once to a new leader that announced
  // itself (MsgType::kLeader).
  uint64_t resent_to_leader() const { return resent_to_leader_; }

 private:
  // An operation sent and not yet completed; inflight_ holds consecutive
  // seqs from inflight_.front().seq (completed ones in the middle wait for
  // those before them to leave).
  struct InFlight {
    uint64_t seq = 0;
    uint64_t invoked_ms = 0, invoked_us = 0;
    uint64_t sent_ms = 0;  // last (re)sent
    bool done = false;
    // NOPaxos: replicas that answered, per (view, session, slot), and the
    // leader's result where it answered.
    std::map<std::tuple<uint64_t, uint64_t, uint64_t>, std::set<uint32_t>> acks;
    std::map<std::tuple<uint64_t, uint64_t, uint64_t>, Result> leader_results;
  };

  void send(const std::vector<const Command*>& cmds, Outbox& out, bool to_all);
  void complete(InFlight& f, const Result& r);
  void on_leader(const Message& m, Outbox& out);
  // Sends every operation not yet answered again, in order (a lost
  // predecessor makes the store skip its successors, store.h); returns how
  // many.
  size_t resend_unanswered(Outbox& out, bool to_all);

  Config config_;
  Protocol protocol_;
  uint32_t id_;
  uint64_t identity_;  // id_, and set_run's run above it
  Command& op(uint64_t seq) { return ops_[seq - 1 - ops_base_]; }

  // The operations not yet completed (seqs from ops_base_ + 1); completed
  // ones move into history_.
  std::deque<Command> ops_;
  uint64_t ops_base_ = 0;
  uint64_t ops_total_ = 0;  // the last seq added
  uint64_t retry_ms_;
  uint32_t window_;
  uint32_t batch_;
  uint64_t next_ = 0;  // the last seq sent
  std::deque<InFlight> inflight_;
  uint64_t now_ = 0;
  uint64_t clock_us_ = 0;
  uint64_t leader_hint_ = 0;        // the latest view (ballot) heard of
  uint64_t announced_session_ = 0;  // NOPaxos: the session of the latest kLeader
  uint32_t present_ = 0;            // replicas_present's last mask (0: none yet)
  uint64_t fast_until_ = 0;         // retry every kFastRetryMs until then
  uint64_t retries_ = 0;
  uint64_t resent_to_leader_ = 0;
  uint64_t completed_count_ = 0;
  uint64_t completed_sum_ = 0;
  std::deque<Completed> history_;
};

// The closed-loop clients of one rank as one Node: a message goes to the
// client it is addressed to (Message::to), a tick to every client.
class ClientGroup final : public Node {
 public:
  void add(std::unique_ptr<Client> c) { clients_.push_back(std::move(c)); }
  void receive(const Message& m, Outbox& out) override {
    for (auto& c : clients_) {
      if (c->id() == m.to) return c->receive(m, out);
    }
  }
  void tick(uint64_t now_ms, Outbox& out) override {
    for (auto& c : clients_) c->tick(now_ms, out);
  }
  void replicas_present(uint32_t mask) override {
    for (auto& c : clients_) c->replicas_present(mask);
  }
  void flows_renewed() override {
    for (auto& c : clients_) c->flows_renewed();
  }
  void set_now(uint64_t now_ms) {
    for (auto& c : clients_) c->set_now(now_ms);
  }
  void set_clock_us(uint64_t now_us) {
    for (auto& c : clients_) c->set_clock_us(now_us);
  }
  bool done() const {
    for (const auto& c : clients_) {
      if (!c->done()) return false;
    }
    return true;
  }
  uint64_t retries() const {
    uint64_t n = 0;
    for (const auto& c : clients_) n += c->retries();
    return n;
  }
  size_t completed() const {
    size_t n = 0;
    for (const auto& c : clients_) n += c->completed_count();
    return n;
  }
  size_t size() const { return clients_.size(); }
  Client& client(size_t i) { return *clients_[i]; }
  const Client& client(size_t i) const { return *clients_[i]; }

 private:
  std::vector<std::unique_ptr<Client>> clients_;
};

}  // namespace kv
