// The registry's view-scoped gathers (GATHER, protocol.h): an allgather
// among the members of one membership view that either completes for every
// member alike or fails for every member alike with kViewChanged. The
// registry's one thread orders each completion against each view change, so
// no two members can see different outcomes of the same call; that is what
// Cluster::agree builds its agreement on.
#include <algorithm>

#include "common/log.h"
#include "control/registry_waiters.h"

namespace sluice::control {

std::vector<uint32_t> Waiters::view_members() const {
  std::vector<uint32_t> members;
  for (uint32_t r = 0; r < world_size_; ++r) {
    if (!host_.lost(r)) members.push_back(r);
  }
  return members;
}

void Waiters::gather(const Waiter& w, GatherMsg m) {
  const uint64_t epoch = host_.epoch_now();
  if (m.epoch != epoch) {
    reply_error(w, ErrorCode::kViewChanged,
                log::cat("gather '", m.name, "': rank ", w.rank, " called it in view ", m.epoch,
                         ", but the job is in view ", epoch, " now (members ",
                         rank_list_text(view_members()), ")"));
    return;
  }
  GatherState& g = gathers_[m.name];
  const uint64_t calls = g.calls[w.rank];
  if (calls > 0 && g.generations.count(calls - 1) != 0 &&
      g.generations[calls - 1].count(w.rank) != 0) {
    reply_error(w, ErrorCode::kInvalidArgument,
                log::cat("gather '", m.name, "': rank ", w.rank,
                         " called it again while its previous call still waits; a rank makes one "
                         "call of a name at a time"));
    return;
  }
  g.calls[w.rank] = calls + 1;
  g.generations[calls][w.rank] = GatherCall{w, std::move(m.value)};
  complete_gather_if_all(m.name, g, calls);
}

void Waiters::complete_gather_if_all(const std::string& name, GatherState& g, uint64_t gen) {
  auto it = g.generations.find(gen);
  if (it == g.generations.end()) return;
  const std::vector<uint32_t> members = view_members();
  for (uint32_t r : members) {
    if (it->second.count(r) == 0) return;
  }
  GatheredMsg done;
  done.epoch = host_.epoch_now();
  size_t bytes = 16;
  for (uint32_t r : members) {
    done.ranks.push_back(r);
    done.values.push_back(it->second[r].value);
    bytes += 8 + done.values.back().size();
  }
  if (bytes > kMaxPayload) {
    for (const auto& [r, call] : it->second) {
      reply_error(call.waiter, ErrorCode::kInvalidArgument,
                  log::cat("gather '", name, "': the ", members.size(), " values take ", bytes,
                           " bytes together, more than a registry message holds (", kMaxPayload,
                           "); gather less, or exchange it over a flow"));
    }
  } else {
    const std::string payload = encode(done);
    for (const auto& [r, call] : it->second) host_.reply(call.waiter, MsgType::kGathered, payload);
  }
  g.generations.erase(it);
}

void Waiters::view_changed(uint64_t epoch) {
  const std::string members = rank_list_text(view_members());
  for (auto& [name, g] : gathers_) {
    for (auto& [gen, calls] : g.generations) {
      for (auto& [r, call] : calls) {
        reply_error(call.waiter, ErrorCode::kViewChanged,
                    log::cat("gather '", name, "': the job's membership changed to view ", epoch,
                             " (members ", members, ") before every member of view ", epoch - 1,
                             " called it"));
      }
    }
  }
  // Calls count from 0 again in the new view.
  gathers_.clear();
  // A flow declared in the old view that not every participant declared yet
  // fails for those that did: the others may never declare it (they moved
  // to the new view), and none will hold it. Its name (the library puts
  // the epoch in it) is not declared again.
  for (auto it = flows_.begin(); it != flows_.end();) {
    FlowDecl& flow = it->second;
    if (flow.epoch == kUnscopedEpoch || flow.epoch >= epoch) {
      ++it;
      continue;
    }
    if (flow.complete) {
      // Agreed, but its participants may still be setting it up: one that
      // waits for another's key may wait for ever, since that one may have
      // given the flow up for the new view. Every wait for one of its keys
      // fails alike; the flow stays until its participants withdraw it.
      const std::string keys = "flow/" + it->first + "/";
      std::erase_if(gets_, [&](const GetWaiter& g) {
        if (!g.key.starts_with(keys)) return false;
        reply_error(
            g.waiter, ErrorCode::kViewChanged,
            log::cat("flow '", it->first, "': the job's membership changed to view ", epoch,
                     " (members ", members, ") while it was being set up in view ", flow.epoch));
        return true;
      });
      ++it;
      continue;
    }
    for (const Waiter& w : flow.waiters) {
      reply_error(w, ErrorCode::kViewChanged,
                  log::cat("flow '", it->first, "': the job's membership changed to view ", epoch,
                           " (members ", members, ") before every participant declared it in view ",
                           flow.epoch));
    }
    it = flows_.erase(it);
  }
}

void Waiters::expire_gathers(RegistryTime now) {
  for (auto& [name, g] : gathers_) {
    for (auto it = g.generations.begin(); it != g.generations.end();) {
      auto& calls = it->second;
      std::vector<uint32_t> missing;
      for (uint32_t r : view_members()) {
        if (calls.count(r) == 0) missing.push_back(r);
      }
      for (auto c = calls.begin(); c != calls.end();) {
        if (now < c->second.waiter.deadline) {
          ++c;
          continue;
        }
        reply_error(c->second.waiter, ErrorCode::kTimeout,
                    log::cat("gather '", name, "' in view ", host_.epoch_now(),
                             " did not complete within ", c->second.waiter.timeout_ms,
                             " ms: waiting for ", host_.describe_missing(missing)));
        // A failed call does not count; one call of a name per rank at a
        // time, so it was the rank's latest.
        --g.calls[c->first];
        c = calls.erase(c);
      }
      it = calls.empty() ? g.generations.erase(it) : std::next(it);
    }
  }
}

}  // namespace sluice::control
