#include "cluster_sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>

namespace kv {

namespace {
// "c<client>-<n>": the value client `client` writes in its n-th operation.
// (Built with append: GCC 12 warns falsely on chains of string +.)
std::string written(uint64_t client, uint64_t n) {
  std::string v = "c";
  v.append(std::to_string(client));
  v.push_back('-');
  v.append(std::to_string(n));
  return v;
}
}  // namespace

// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record
// synthetic databases"), constant 0.99, over 0 .. n-1, scrambled by a hash as
// YCSB's default ScrambledZipfian is, so that the popular keys are spread.
class Zipfian {
 public:
  explicit Zipfian(uint64_t n) : n_(n) {
    for (uint64_t i = 1; i <= n; ++i) zeta_n_ += 1.0 / std::pow(static_cast<double>(i), kTheta);
    const double zeta2 = 1.0 + 1.0 / std::pow(2.0, kTheta);
    alpha_ = 1.0 / (1.0 - kTheta);
    eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n), 1.0 - kTheta)) / (1.0 - zeta2 / zeta_n_);
  }
  uint64_t next(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const double uz = u * zeta_n_;
    uint64_t item = 0;
    if (uz < 1.0) {
      item = 0;
    } else if (uz < 1.0 + std::pow(0.5, kTheta)) {
      item = 1;
    } else {
      item =
          static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
    }
    item = std::min(item, n_ - 1);
    // FNV-1a of the item's 8 bytes, as YCSB scrambles.
    uint64_t h = 14695981039346656037ull;
    for (int b = 0; b < 8; ++b) h = (h ^ ((item >> (8 * b)) & 0xff)) * 1099511628211ull;
    return h % n_;
  }

 private:
  static constexpr double kTheta = 0.99;
  uint64_t n_;
  double zeta_n_ = 0, alpha_ = 0, eta_ = 0;
};

std::vector<Command> generate_ops(const ClusterOptions& o, uint32_t index) {
  std::mt19937_64 rng(o.seed * 1000033 + index);
  uint32_t read_percent = 0;
  if (o.workload == "a") {
    read_percent = 50;
  } else if (o.workload == "b") {
    read_percent = 95;
  } else if (o.workload == "c") {
    read_percent = 100;
  } else if (o.workload != "mixed") {
    throw std::invalid_argument("unknown workload '" + o.workload + "' (mixed, a, b or c)");
  }
  std::unique_ptr<Zipfian> zipf;
  if (o.zipf) zipf = std::make_unique<Zipfian>(o.keys);
  std::vector<Command> ops;
  for (uint32_t i = 0; i < o.ops_per_client; ++i) {
    Command c;
    c.key = "k";
    c.key.append(std::to_string(zipf ? zipf->next(rng) : rng() % o.keys));
    if (o.workload != "mixed") {
      c.op = rng() % 100 < read_percent ? Op::kGet : Op::kPut;
      if (c.op == Op::kPut) {
        c.value = written(index, i + 1);
        if (c.value.size() < o.value_bytes) c.value.resize(o.value_bytes, '.');
      }
      ops.push_back(c);
      continue;
    }
    uint64_t p = rng() % 100;
    if (p < 40) {
      c.op = Op::kPut;
      c.value = written(index, i + 1);
    } else if (p < 75) {
      c.op = Op::kGet;
    } else if (p < 95) {
      c.op = Op::kCas;
      uint64_t who = rng() % o.clients;
      c.expected = written(who, 1 + rng() % (i + 1));
      c.value = written(index, i + 1);
    } else {
      c.op = Op::kDelete;
    }
    ops.push_back(c);
  }
  return ops;
}

SimCluster::SimCluster(ClusterOptions options)
    : options_(options), config_{options.replicas}, net_(options.sim) {
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (options_.protocol == Protocol::kMultiPaxos) {
      MultiPaxosOptions mo = options_.multipaxos;
      mo.seed = options_.seed;
      mp_.push_back(std::make_unique<MultiPaxosReplica>(config_, r, mo));
      net_.add(r, mp_.back().get());
    } else {
      NoPaxosOptions no = options_.nopaxos;
      no.seed = options_.seed;
      np_.push_back(std::make_unique<NoPaxosReplica>(config_, r, no));
      net_.add(r, np_.back().get());
    }
  }
  if (options_.protocol == Protocol::kNoPaxos) {
    sequencers_.push_back(std::make_unique<Sequencer>(config_, 1));
    net_.add(config_.sequencer_id(), sequencers_.back().get());
  }
  for (uint32_t c = 0; c < options_.clients; ++c) {
    clients_.push_back(std::make_unique<Client>(config_, options_.protocol, c,
                                                generate_ops(options_, c), options_.client_retry_ms,
                                                options_.client_window, options_.client_batch));
    net_.add(config_.client_id(c), clients_.back().get());
  }
}

void SimCluster::restart(uint32_t r) {
  net_.purge(r);
  ++restarts_;
  for (uint32_t i = 0; i < config_.replicas; ++i) {
    if (i == r) continue;
    if (options_.protocol == Protocol::kMultiPaxos) {
      mp_[i]->forget_replica(r);
    } else {
      np_[i]->forget_replica(r);
    }
  }
  if (options_.protocol == Protocol::kMultiPaxos) {
    MultiPaxosOptions mo = options_.multipaxos;
    mo.seed = options_.seed + restarts_;
    mo.recover = true;
    mo.nonce = restarts_;
    auto fresh = std::make_unique<MultiPaxosReplica>(config_, r, mo);
    net_.replace(r, fresh.get());
    mp_[r] = std::move(fresh);
  } else {
    NoPaxosOptions no = options_.nopaxos;
    no.seed = options_.seed + restarts_;
    no.recover = true;
    no.nonce = restarts_;
    auto fresh = std::make_unique<NoPaxosReplica>(config_, r, no);
    net_.replace(r, fresh.get());
    np_[r] = std::move(fresh);
  }
  net_.restore(r);
}

void SimCluster::restart_all_from_disk() {
  ++restarts_;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    net_.purge(r);
    // What its files would give back (replica_disk.cc): the rewrite's
    // numbers, entries and snapshot, the store read from the snapshot.
    DurableChanges kept = np_[r]->durable_state();
    RestoredState st;
    st.ballot = kept.ballot;
    st.commit = kept.commit;
    st.session = kept.session;
    st.normal_view = kept.normal_view;
    st.normal_session = kept.normal_session;
    st.entries = std::move(kept.entries);
    st.snapshot_slot = kept.snapshot_slot;
    st.snapshot_entry = kept.snapshot_entry;
    if (kept.snapshot_slot > 0) {
      std::string why;
      if (!st.store.restore(kept.snapshot, &why))
        throw std::logic_error("replica " + std::to_string(r) + "'s snapshot: " + why);
      st.snapshot = std::move(kept.snapshot);
    }
    NoPaxosOptions no = options_.nopaxos;
    no.seed = options_.seed + restarts_;
    auto fresh = std::make_unique<NoPaxosReplica>(config_, r, no);
    fresh->restore(std::move(st));
    net_.replace(r, fresh.get());
    np_[r] = std::move(fresh);
  }
  new_sequencer();
}

bool SimCluster::recovering(uint32_t r) const {
  return options_.protocol == Protocol::kMultiPaxos ? mp_[r]->recovering() : np_[r]->recovering();
}

const Store& SimCluster::store(uint32_t i) const {
  return options_.protocol == Protocol::kMultiPaxos ? mp_[i]->store() : np_[i]->store();
}

int SimCluster::leader() const {
  int found = -1;
  uint64_t best = 0;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (net_.is_down(r)) continue;
    if (options_.protocol == Protocol::kMultiPaxos) {
      if (mp_[r]->is_leader() && (found < 0 || mp_[r]->ballot() > best)) {
        found = static_cast<int>(r);
        best = mp_[r]->ballot();
      }
    } else if (np_[r]->is_leader() && (found < 0 || np_[r]->view() > best)) {
      found = static_cast<int>(r);
      best = np_[r]->view();
    }
  }
  return found;
}

bool SimCluster::clients_done() const {
  for (const auto& c : clients_)
    if (!c->done()) return false;
  return true;
}

bool SimCluster::run_until_done(uint64_t deadline_ms) {
  return net_.run(deadline_ms, [&] { return clients_done(); });
}

void SimCluster::new_sequencer() {
  uint64_t session = sequencers_.back()->session() + 1;
  sequencers_.push_back(std::make_unique<Sequencer>(config_, session));
  net_.replace(config_.sequencer_id(), sequencers_.back().get());
}

std::string SimCluster::check_replicas() const {
  for (uint32_t r = 0; r < config_.replicas; ++r)
    if (!net_.is_down(r) && recovering(r))
      return "replica " + std::to_string(r) + " is still recovering";
  int ref = -1;
  for (uint32_t r = 0; r < config_.replicas; ++r) {
    if (net_.is_down(r)) continue;
    if (ref < 0) {
      ref = static_cast<int>(r);
      continue;
    }
    const Store& a = store(static_cast<uint32_t>(ref));
    const Store& b = store(r);
    if (a.applied() != b.applied())
      return "replica " + std::to_string(r) + " applied " + std::to_string(b.applied().size()) +
             " entries, replica " + std::to_string(ref) + " " + std::to_string(a.applied().size()) +
             (a.applied().size() == b.applied().size() ? " (same count, different entries)" : "");
    if (a.digest() != b.digest())
      return "replica " + std::to_string(r) + " store digest differs from replica " +
             std::to_string(ref) + "'s";
  }
  return ref < 0 ? "no live replica" : "";
}

std::vector<Completed> SimCluster::history() const {
  std::vector<Completed> h;
  for (const auto& c : clients_) h.insert(h.end(), c->history().begin(), c->history().end());
  return h;
}

std::string SimCluster::check_results() const {
  int ref = -1;
  for (uint32_t r = 0; r < config_.replicas && ref < 0; ++r)
    if (!net_.is_down(r)) ref = static_cast<int>(r);
  if (ref < 0) return "no live replica";
  std::vector<Command> commands;
  for (uint32_t c = 0; c < options_.clients; ++c) {
    std::vector<Command> ops = generate_ops(options_, c);
    for (size_t i = 0; i < ops.size(); ++i) {
      ops[i].client = config_.client_id(c);
      ops[i].seq = i + 1;
      commands.push_back(ops[i]);
    }
  }
  return check_linearization(store(static_cast<uint32_t>(ref)).applied(), commands, history());
}

std::string check_linearization(const std::vector<std::pair<uint64_t, uint64_t>>& log,
                                const std::vector<Command>& command_list,
                                const std::vector<Completed>& h) {
  std::map<std::pair<uint64_t, uint64_t>, Command> commands;
  for (const Command& c : command_list) commands[{c.client, c.seq}] = c;
  // A command the store refused (maxmemory) took no effect where it stands.
  std::set<std::pair<uint64_t, uint64_t>> refused;
  for (const Completed& c : h)
    if (c.result.refused) refused.insert({c.cmd.client, c.cmd.seq});
  // Replay the applied log sequentially: the first occurrence of each
  // operation is where it takes effect.
  Keyspace data;
  std::map<std::pair<uint64_t, uint64_t>, std::pair<size_t, Result>> effect;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].first == 0) continue;  // no-op
    auto it = commands.find(log[i]);
    if (it == commands.end()) return "applied log holds an operation no client issued";
    if (effect.count(log[i])) continue;
    if (refused.count(log[i])) {
      Result r;
      r.refused = true;
      effect[log[i]] = {i, r};
      continue;
    }
    effect[log[i]] = {i, execute(data, it->second)};
  }
  std::vector<size_t> pos;
  for (const Completed& c : h) {
    auto it = effect.find({c.cmd.client, c.cmd.seq});
    if (it == effect.end())
      return "client " + std::to_string(c.cmd.client) + " op " + std::to_string(c.cmd.seq) +
             " completed but is not in the applied log";
    if (it->second.second != c.result)
      return "client " + std::to_string(c.cmd.client) + " op " + std::to_string(c.cmd.seq) + " (" +
             op_name(c.cmd.op) + ") got a result the sequential replay does not give";
    pos.push_back(it->second.first);
  }
  // Real time: sorting by completion lets one pass find a violation (an
  // operation that took effect before the latest position of everything
  // completed before it began) without comparing all pairs.
  std::vector<size_t> by_completion(h.size());
  for (size_t i = 0; i < h.size(); ++i) by_completion[i] = i;
  std::sort(by_completion.begin(), by_completion.end(),
            [&](size_t x, size_t y) { return h[x].completed_ms < h[y].completed_ms; });
  std::vector<size_t> by_invocation = by_completion;
  std::sort(by_invocation.begin(), by_invocation.end(),
            [&](size_t x, size_t y) { return h[x].invoked_ms < h[y].invoked_ms; });
  size_t k = 0;
  size_t latest = 0;
  bool any = false;
  for (size_t j : by_invocation) {
    while (k < by_completion.size() && h[by_completion[k]].completed_ms < h[j].invoked_ms) {
      latest = any ? std::max(latest, pos[by_completion[k]]) : pos[by_completion[k]];
      any = true;
      ++k;
    }
    if (any && latest > pos[j])
      return "real-time order violated: an operation completed before another began but "
             "took effect after it";
  }
  return "";
}

}  // namespace kv
