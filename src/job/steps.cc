// run_steps (sluice/job.h): steps committed once on the members of each
// view, through losses and rejoins. The registry completes a view-scoped
// gather for every member of the view or for none (kViewChanged), so a step
// is committed on all members or on none; an agreement at each new view
// brings everyone, a restarted process too, to the furthest committed step.
#include <algorithm>
#include <string>

#include "sluice/job.h"

namespace sluice {

StepsReport run_steps(Cluster& cluster, std::string_view name, uint64_t count,
                      const std::function<Result<std::string>(const View&, uint64_t)>& attempt,
                      const std::function<void(uint64_t, const Gathered&)>& commit,
                      std::chrono::milliseconds patience) {
  const std::string what = "run_steps '" + std::string(name) + "'";
  const std::string resume = std::string(name) + "/resume";
  const std::string steps = std::string(name) + "/step";
  auto until = [&] { return Clock::now() + patience; };
  StepsReport report;
  // The job as launched starts at step 0 in view 0, agreed by construction;
  // a restarted process has agreed in no view, and one whose first view is
  // later than 0 agrees in it with the others, who see that view change.
  constexpr uint64_t kNone = ~uint64_t{0};
  uint64_t agreed = cluster.incarnation(cluster.rank()) > 0 ? kNone : 0;
  uint64_t next = 0;
  while (next < count) {
    const View view = cluster.view();
    if (view.epoch != agreed) {
      const Gathered g = cluster.agree(resume, std::to_string(next), until());
      uint64_t furthest = 0;
      for (const std::string& v : g.values) furthest = std::max<uint64_t>(furthest, std::stoull(v));
      next = furthest;
      agreed = g.epoch;
      ++report.agreements;
      continue;
    }
    Result<std::string> mine = attempt(view, next);
    if (!mine) {
      if (mine.status() != Status::kViewChanged && mine.status() != Status::kPeerLost) {
        throw Error(ErrorCode::kInvalidArgument,
                    what + ": the attempt at step " + std::to_string(next) + " returned " +
                        to_string(mine.status()) +
                        "; it returns a value, kViewChanged or kPeerLost, and throws otherwise");
      }
      ++report.retries;
      // A lost peer makes the next view; wait for it rather than spin.
      if (!cluster.await_view(view.epoch, until())) {
        throw Error(ErrorCode::kTimeout, what + ": step " + std::to_string(next) +
                                             " failed in view " + std::to_string(view.epoch) +
                                             " and no next view came within " +
                                             std::to_string(patience.count()) + " ms");
      }
      continue;
    }
    // The step's number travels with the value: every member must be at
    // the same step of the same view (they agreed on it).
    Result<Gathered> all =
        cluster.allgather(view, steps, std::to_string(next) + ":" + *mine, until());
    if (!all) {
      ++report.retries;
      continue;  // kViewChanged: agree in the new view, then run the step again
    }
    const std::string prefix = std::to_string(next) + ":";
    for (size_t i = 0; i < all->values.size(); ++i) {
      std::string& v = all->values[i];
      if (v.compare(0, prefix.size(), prefix) != 0) {
        throw Error(ErrorCode::kInternal, what + ": rank " + std::to_string(all->ranks[i]) +
                                              " committed another step than " +
                                              std::to_string(next) + " in view " +
                                              std::to_string(view.epoch));
      }
      v.erase(0, prefix.size());
    }
    commit(next, *all);
    ++report.committed;
    report.epoch = all->epoch;
    ++next;
  }
  report.next = next;
  return report;
}

}  // namespace sluice
