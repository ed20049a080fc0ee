#include "control/registry_waiters.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "common/log.h"

namespace sluice::control {
namespace {

// Parses canonical spec text ("field=value" lines) into field -> value; a
// line without '=' is a field with an empty value, so nothing is lost.
std::map<std::string, std::string> spec_fields(const std::string& text) {
  std::map<std::string, std::string> fields;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) {
      const size_t eq = line.find('=');
      if (eq == std::string::npos) {
        fields[line] = "";
      } else {
        fields[line.substr(0, eq)] = line.substr(eq + 1);
      }
    }
    pos = end + 1;
  }
  return fields;
}

std::string endpoint_text(uint64_t e) { return log::cat("(", e >> 32, ",", e & 0xffffffffu, ")"); }

}  // namespace

bool Waiters::BarrierState::has_rank(uint32_t r) const {
  for (uint64_t e : members) {
    if (e >> 32 == r) return true;
  }
  return false;
}

void Waiters::reply_error(const Waiter& w, ErrorCode code, const std::string& text, uint32_t rank) {
  host_.reply(w, MsgType::kError, encode(ErrorMsg{code, rank, text}));
}

std::string Waiters::spec_diff(const FlowDecl& flow, uint32_t rank, const std::string& canonical,
                               const std::vector<uint32_t>& participants) const {
  const auto a = spec_fields(flow.canonical);
  const auto b = spec_fields(canonical);
  std::set<std::string> names;
  for (const auto& [k, v] : a) names.insert(k);
  for (const auto& [k, v] : b) names.insert(k);
  std::string diff;
  auto add = [&](const std::string& field, const std::string& va, const std::string& vb) {
    if (!diff.empty()) diff += "; ";
    diff += log::cat(field, ": rank ", flow.first_rank, " declared ", va, ", rank ", rank,
                     " declared ", vb);
  };
  for (const std::string& name : names) {
    auto ia = a.find(name);
    auto ib = b.find(name);
    const std::string va = ia == a.end() ? "(nothing)" : ia->second;
    const std::string vb = ib == b.end() ? "(nothing)" : ib->second;
    if (ia == a.end() || ib == b.end() || va != vb) add(name, va, vb);
  }
  if (participants != flow.participants) {
    add("participants", rank_list_text(flow.participants), rank_list_text(participants));
  }
  return diff;
}

std::vector<uint32_t> Waiters::undeclared(const FlowDecl& flow) const {
  std::vector<uint32_t> missing;
  for (uint32_t p : flow.participants) {
    if (flow.declared.count(p) == 0) missing.push_back(p);
  }
  return missing;
}

void Waiters::complete_flow(FlowDecl& flow) {
  flow.complete = true;
  for (const Waiter& w : flow.waiters) host_.reply(w, MsgType::kOk, "");
  flow.waiters.clear();
}

void Waiters::declare(const Waiter& w, DeclareMsg m) {
  const uint32_t rank = w.rank;
  std::sort(m.participants.begin(), m.participants.end());
  m.participants.erase(std::unique(m.participants.begin(), m.participants.end()),
                       m.participants.end());
  if (m.name.empty()) {
    reply_error(w, ErrorCode::kInvalidArgument, "a flow needs a name");
    return;
  }
  if (!m.participants.empty() && m.participants.back() >= world_size_) {
    reply_error(w, ErrorCode::kInvalidArgument,
                log::cat("flow '", m.name, "': participant rank ", m.participants.back(),
                         " is out of range (the job has ", world_size_, " ranks)"));
    return;
  }

  if (m.epoch != kUnscopedEpoch && m.epoch != host_.epoch_now()) {
    reply_error(w, ErrorCode::kViewChanged,
                log::cat("flow '", m.name, "': rank ", rank, " declared it in view ", m.epoch,
                         ", but the job is in view ", host_.epoch_now(), " now (members ",
                         rank_list_text(view_members()), ")"));
    return;
  }
  auto it = flows_.find(m.name);
  if (it != flows_.end() && it->second.gone.count(rank) != 0) {
    // Its previous declaration is still being destroyed by the others:
    // joining that one would hand out its keys as the new flow's. The
    // declaration waits (until its deadline) for the others to let go.
    it->second.redeclares.emplace_back(w, std::move(m));
    return;
  }
  if (it == flows_.end()) {
    FlowDecl fresh;
    fresh.first_rank = rank;
    fresh.canonical = m.canonical;
    fresh.participants = m.participants;
    fresh.epoch = m.epoch;
    it = flows_.emplace(m.name, std::move(fresh)).first;
  } else if (std::string diff = spec_diff(it->second, rank, m.canonical, m.participants);
             !diff.empty()) {
    std::string text = log::cat("flow '", m.name, "' declared differently: ", diff);
    if (it->second.complete) {
      text += log::cat(" (ranks ", rank_list_text(not_gone(it->second)),
                       " still hold an earlier declaration of the name; declare it again only "
                       "after every participant destroyed that flow)");
    }
    reply_error(w, ErrorCode::kSpecMismatch, text);
    if (!it->second.complete) {
      // Everyone waiting would otherwise wait on a declaration that can never
      // agree; forgetting the flow lets corrected declarations start over.
      for (const Waiter& pending : it->second.waiters) {
        reply_error(pending, ErrorCode::kSpecMismatch, text);
      }
      flows_.erase(it);
    }
    return;
  }
  FlowDecl& flow = it->second;
  flow.declared.insert(rank);

  const std::vector<uint32_t> missing = undeclared(flow);
  if (missing.empty()) {
    if (!flow.complete) complete_flow(flow);
    host_.reply(w, MsgType::kOk, "");
    return;
  }
  for (uint32_t p : missing) {
    // Lost, or lost and back as a new incarnation (gone): the process this
    // declaration waits for died, and its successor knows nothing of it.
    if (host_.lost(p) || flow.gone.count(p) != 0) {
      const std::string who =
          host_.lost(p)
              ? host_.describe(p)
              : log::cat("rank ", p,
                         " died before it declared it; it has since rejoined "
                         "(incarnation ",
                         host_.incarnation_of(p), "), a new process this declaration is not for");
      reply_error(w, ErrorCode::kPeerLost,
                  log::cat("flow '", m.name, "' cannot be declared by every participant: ", who),
                  p);
      return;
    }
  }
  flow.waiters.push_back(w);
}

std::vector<uint32_t> Waiters::not_gone(const FlowDecl& flow) const {
  std::vector<uint32_t> out;
  for (uint32_t p : flow.participants) {
    if (flow.gone.count(p) == 0 && !host_.lost(p)) out.push_back(p);
  }
  return out;
}

uint64_t Waiters::erase(const std::string& key, bool prefix) {
  if (!prefix) return kv_.erase(key);
  uint64_t n = 0;
  for (auto it = kv_.lower_bound(key); it != kv_.end() && it->first.starts_with(key);) {
    it = kv_.erase(it);
    ++n;
  }
  return n;
}

bool Waiters::forget_if_gone(std::map<std::string, FlowDecl>::iterator it) {
  FlowDecl& flow = it->second;
  if (flow.gone.empty() || !not_gone(flow).empty()) return false;
  // Erased before anyone hears OK: a new declaration of the name can never
  // read a key of this one.
  erase("flow/" + it->first + "/", true);
  const std::vector<Waiter> waiters = std::move(flow.undeclare_waiters);
  auto redeclares = std::move(flow.redeclares);
  flows_.erase(it);
  for (const Waiter& w : waiters) host_.reply(w, MsgType::kOk, "");
  // The name is free: the declarations that waited for it start the next one.
  for (auto& [w, m] : redeclares) declare(w, std::move(m));
  return true;
}

void Waiters::undeclare(const Waiter& w, const UndeclareMsg& m) {
  auto it = flows_.find(m.name);
  if (it == flows_.end() || !it->second.complete || it->second.declared.count(w.rank) == 0 ||
      it->second.gone.count(w.rank) != 0) {
    reply_error(w, ErrorCode::kInvalidArgument,
                log::cat("rank ", w.rank, " undeclares flow '", m.name,
                         "', which it has not declared (or already undeclared)"));
    return;
  }
  it->second.gone.insert(w.rank);
  it->second.undeclare_waiters.push_back(w);
  forget_if_gone(it);
}

void Waiters::put(std::string key, std::string value) {
  const std::string value_payload = encode(ValueMsg{value});
  std::erase_if(gets_, [&](const GetWaiter& g) {
    if (g.key != key) return false;
    host_.reply(g.waiter, MsgType::kValue, value_payload);
    return true;
  });
  kv_[std::move(key)] = std::move(value);
}

void Waiters::get(const Waiter& w, const GetMsg& m) {
  if (m.owner_rank < -1 || m.owner_rank >= static_cast<int64_t>(world_size_)) {
    reply_error(w, ErrorCode::kInvalidArgument,
                log::cat("get '", m.key, "': owner rank ", m.owner_rank,
                         " is out of range (the job has ", world_size_, " ranks)"));
    return;
  }
  if (auto it = kv_.find(m.key); it != kv_.end()) {
    host_.reply(w, MsgType::kValue, encode(ValueMsg{it->second}));
    return;
  }
  if (m.owner_rank >= 0 && host_.lost(static_cast<uint32_t>(m.owner_rank))) {
    const auto owner = static_cast<uint32_t>(m.owner_rank);
    reply_error(w, ErrorCode::kPeerLost,
                log::cat("key '", m.key, "' will never be put: its owner ", host_.describe(owner)),
                owner);
    return;
  }
  if (m.owner_rank >= 0 && m.owner_incarnation != kAnyIncarnation &&
      host_.incarnation_of(static_cast<uint32_t>(m.owner_rank)) != m.owner_incarnation) {
    const auto owner = static_cast<uint32_t>(m.owner_rank);
    reply_error(w, ErrorCode::kPeerLost,
                log::cat("key '", m.key, "' will never be put: its owner rank ", owner,
                         " was incarnation ", m.owner_incarnation, ", which died; it has since ",
                         "rejoined as incarnation ", host_.incarnation_of(owner)),
                owner);
    return;
  }
  gets_.push_back(GetWaiter{w, m.key, m.owner_rank, m.owner_incarnation});
}

void Waiters::barrier(const Waiter& w, BarrierMsg m) {
  const uint32_t rank = w.rank;
  if (m.members.empty()) {
    for (uint32_t r = 0; r < world_size_; ++r) m.members.push_back(uint64_t{r} << 32);
    m.self = uint64_t{rank} << 32;
  }
  std::sort(m.members.begin(), m.members.end());
  if (std::adjacent_find(m.members.begin(), m.members.end()) != m.members.end() ||
      m.members.back() >> 32 >= world_size_ || m.self >> 32 != rank ||
      !std::binary_search(m.members.begin(), m.members.end(), m.self)) {
    reply_error(w, ErrorCode::kInvalidArgument,
                log::cat("barrier '", m.name, "': endpoint ", endpoint_text(m.self),
                         " called it with a member list that repeats an endpoint, names a rank "
                         "outside the job, or does not contain the caller (rank ",
                         rank, ")"));
    return;
  }
  BarrierState& b = barriers_[m.name];
  if (b.members.empty()) b.members = m.members;
  if (b.members != m.members) {
    reply_error(
        w, ErrorCode::kInvalidArgument,
        log::cat("barrier '", m.name, "': endpoint ", endpoint_text(m.self), " names ",
                 m.members.size(), " members, but it was first called with a different set of ",
                 b.members.size(), "; every member must pass the same endpoints"));
    return;
  }
  // A member that died is the cause; one that left has usually left
  // because of it (its own call failed first), so it is named only when no
  // member died.
  std::optional<uint32_t> gone;
  for (uint64_t e : b.members) {
    const auto r = static_cast<uint32_t>(e >> 32);
    if (host_.lost(r) && (!gone || (host_.left(*gone) && !host_.left(r)))) gone = r;
  }
  if (gone) {
    reply_error(w, ErrorCode::kPeerLost,
                log::cat("barrier '", m.name, "' cannot complete: ", host_.describe(*gone)), *gone);
    return;
  }
  const uint64_t gen = b.calls[m.self]++;
  b.generations[gen][m.self] = w;
  complete_if_all_arrived(b, gen);
}

std::string Waiters::describe_missing_endpoints(const BarrierState& b,
                                                const std::map<uint64_t, Waiter>& arrived) const {
  if (b.members.size() == world_size_ &&
      std::all_of(b.members.begin(), b.members.end(),
                  [](uint64_t e) { return (e & 0xffffffffu) == 0; })) {
    std::vector<uint32_t> missing;  // an every-rank barrier: name ranks and their hosts
    for (uint64_t e : b.members) {
      if (arrived.count(e) == 0) missing.push_back(static_cast<uint32_t>(e >> 32));
    }
    return host_.describe_missing(missing);
  }
  std::string out;
  size_t n = 0;
  for (uint64_t e : b.members) {
    if (arrived.count(e) != 0) continue;
    if (++n > 16) continue;
    if (!out.empty()) out += ", ";
    out += endpoint_text(e);
  }
  if (n > 16) out += log::cat(" and ", n - 16, " more");
  return log::cat(n == 1 ? "endpoint " : "endpoints ", out);
}

void Waiters::complete_if_all_arrived(BarrierState& b, uint64_t gen) {
  auto it = b.generations.find(gen);
  if (it == b.generations.end() || it->second.size() != b.members.size()) return;
  const std::string done = encode(BarrierDoneMsg{gen});
  for (const auto& [e, waiter] : it->second) host_.reply(waiter, MsgType::kOk, done);
  b.generations.erase(it);
}

void Waiters::withdraw(BarrierState& b, uint64_t e, uint64_t gen) {
  // A call that failed does not count: the endpoint's later calls (other
  // threads of its rank, still waiting) each move down one generation, so
  // that its n-th successful call still meets the others' n-th call.
  b.generations[gen].erase(e);
  uint64_t g = gen;
  for (auto it = b.generations.upper_bound(gen); it != b.generations.end(); ++it) {
    auto later = it->second.find(e);
    if (later == it->second.end()) continue;
    b.generations[g][e] = later->second;
    it->second.erase(later);
    g = it->first;
  }
  --b.calls[e];
  for (auto it = b.generations.begin(); it != b.generations.end();) {
    it = it->second.empty() ? b.generations.erase(it) : std::next(it);
  }
  // A generation that only waited for this endpoint's moved call may be whole now.
  std::vector<uint64_t> gens;
  for (const auto& [h, arrived] : b.generations) {
    if (h >= gen) gens.push_back(h);
  }
  for (uint64_t h : gens) complete_if_all_arrived(b, h);
}

void Waiters::rejoin_rank(uint32_t r) {
  // (No GET pinned to an older incarnation of r can be waiting here: one
  // asked while r was dead failed at once, one asked before failed when r
  // was lost; get() refuses one asked after.)
  // The new incarnation's next call of a barrier meets the others' next one.
  for (auto& [name, b] : barriers_) {
    if (!b.has_rank(r)) continue;
    uint64_t most = 0;
    for (const auto& [q, n] : b.calls) {
      if (static_cast<uint32_t>(q >> 32) != r) most = std::max(most, n);
    }
    for (uint64_t q : b.members) {
      if (static_cast<uint32_t>(q >> 32) == r) b.calls[q] = most;
    }
  }
}

void Waiters::lose_rank(uint32_t r, uint64_t gone_conn, const std::string& who) {
  // No barrier the rank belongs to can complete any more.
  for (auto& [name, b] : barriers_) {
    if (!b.has_rank(r)) continue;
    for (auto& [gen, arrived] : b.generations) {
      for (auto& [q, w] : arrived) {
        reply_error(w, ErrorCode::kPeerLost,
                    log::cat("barrier '", name, "' cannot complete: ", who), r);
        --b.calls[q];  // a failed call does not count (see withdraw())
      }
    }
    b.generations.clear();
  }
  for (auto it = flows_.begin(); it != flows_.end();) {
    FlowDecl& flow = it->second;
    // Done with the flow for good: should the rank join again, its new
    // incarnation knows nothing of this declaration.
    if (std::binary_search(flow.participants.begin(), flow.participants.end(), r))
      flow.gone.insert(r);
    std::erase_if(flow.undeclare_waiters, [&](const Waiter& w) { return w.conn_id == gone_conn; });
    std::erase_if(flow.redeclares, [&](const auto& d) { return d.first.conn_id == gone_conn; });
    if (flow.complete) {
      // A lost participant never undeclares: the others need not wait for it.
      const auto next = std::next(it);
      forget_if_gone(it);
      it = next;
      continue;
    }
    const std::string& name = it->first;
    ++it;
    const bool needed = std::binary_search(flow.participants.begin(), flow.participants.end(), r) &&
                        flow.declared.count(r) == 0;
    if (needed) {
      for (const Waiter& w : flow.waiters) {
        reply_error(w, ErrorCode::kPeerLost,
                    log::cat("flow '", name, "' cannot be declared by every participant: ", who),
                    r);
      }
      flow.waiters.clear();
    } else {
      std::erase_if(flow.waiters, [&](const Waiter& w) { return w.conn_id == gone_conn; });
    }
  }
  std::erase_if(gets_, [&](const GetWaiter& g) {
    if (g.waiter.conn_id == gone_conn) return true;
    if (g.owner != static_cast<int64_t>(r)) return false;
    reply_error(g.waiter, ErrorCode::kPeerLost,
                log::cat("key '", g.key, "' will never be put: its owner ", who), r);
    return true;
  });
}

void Waiters::expire(RegistryTime now) {
  // Named references, not structured bindings: clang before 16 cannot
  // capture those in a lambda (and the fuzz build uses clang).
  for (auto& flow_entry : flows_) {
    const std::string& name = flow_entry.first;
    FlowDecl& flow = flow_entry.second;
    std::erase_if(flow.undeclare_waiters, [&](const Waiter& w) {
      if (now < w.deadline) return false;
      reply_error(
          w, ErrorCode::kTimeout,
          log::cat("flow '", name, "' was not destroyed by every participant within ", w.timeout_ms,
                   " ms: waiting for ", host_.describe_missing(not_gone(flow))));
      return true;
    });
    std::erase_if(flow.redeclares, [&](const auto& d) {
      const Waiter& w = d.first;
      if (now < w.deadline) return false;
      reply_error(w, ErrorCode::kTimeout,
                  log::cat("flow '", name, "' cannot be declared again by rank ", w.rank,
                           " within ", w.timeout_ms, " ms: ranks ", rank_list_text(not_gone(flow)),
                           " have not destroyed its previous declaration"));
      return true;
    });
    std::erase_if(flow.waiters, [&](const Waiter& w) {
      if (now < w.deadline) return false;
      reply_error(
          w, ErrorCode::kTimeout,
          log::cat("flow '", name, "' was not declared by every participant within ", w.timeout_ms,
                   " ms: waiting for ", host_.describe_missing(undeclared(flow))));
      return true;
    });
  }
  std::erase_if(gets_, [&](const GetWaiter& g) {
    if (now < g.waiter.deadline) return false;
    std::string owner;
    if (g.owner >= 0) {
      const auto o = static_cast<uint32_t>(g.owner);
      owner = host_.absent(o) ? log::cat(" (its owner rank ", o, " has not joined)")
                              : log::cat(" (its owner ", host_.describe(o), " but has not put it)");
    }
    reply_error(
        g.waiter, ErrorCode::kTimeout,
        log::cat("key '", g.key, "' was not put within ", g.waiter.timeout_ms, " ms", owner));
    return true;
  });
  for (auto& [name, b] : barriers_) expire_barrier(name, b, now);
  expire_gathers(now);
}

void Waiters::expire_barrier(const std::string& name, BarrierState& b, RegistryTime now) {
  struct Expired {
    uint64_t gen;
    uint64_t endpoint;
    Waiter waiter;
    std::string missing;
  };
  std::vector<Expired> expired;
  for (const auto& [gen, arrived] : b.generations) {
    for (const auto& [e, w] : arrived) {
      if (now >= w.deadline) expired.push_back({gen, e, w, describe_missing_endpoints(b, arrived)});
    }
  }
  // Latest first: withdrawing a call moves the same endpoint's later calls
  // down, which must not move a call that is itself about to be withdrawn.
  std::sort(expired.begin(), expired.end(),
            [](const Expired& x, const Expired& y) { return x.gen > y.gen; });
  for (const Expired& x : expired) {
    // A withdrawal above may have completed x's generation (a moved call
    // filled it): x was then answered OK and is gone.
    auto g = b.generations.find(x.gen);
    if (g == b.generations.end()) continue;
    auto still = g->second.find(x.endpoint);
    if (still == g->second.end() || still->second.conn_id != x.waiter.conn_id ||
        still->second.request_id != x.waiter.request_id) {
      continue;
    }
    reply_error(x.waiter, ErrorCode::kTimeout,
                log::cat("barrier '", name, "' timed out after ", x.waiter.timeout_ms,
                         " ms waiting for ", x.missing));
    withdraw(b, x.endpoint, x.gen);
  }
}

RegistryTime Waiters::next_deadline() const {
  RegistryTime next = kNever;
  for (const auto& [name, flow] : flows_) {
    for (const Waiter& w : flow.waiters) next = std::min(next, w.deadline);
    for (const Waiter& w : flow.undeclare_waiters) next = std::min(next, w.deadline);
    for (const auto& d : flow.redeclares) next = std::min(next, d.first.deadline);
  }
  for (const GetWaiter& g : gets_) next = std::min(next, g.waiter.deadline);
  for (const auto& [name, g] : gathers_) {
    for (const auto& [gen, calls] : g.generations)
      for (const auto& [r, call] : calls) next = std::min(next, call.waiter.deadline);
  }
  for (const auto& [name, b] : barriers_) {
    for (const auto& [gen, arrived] : b.generations) {
      for (const auto& [r, w] : arrived) next = std::min(next, w.deadline);
    }
  }
  return next;
}

}  // namespace sluice::control
