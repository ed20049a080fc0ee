#include "linearizability.h"

#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace kv {
namespace {

struct Search {
  const std::vector<Completed>& ops;
  std::set<std::pair<uint64_t, Keyspace>> seen;

  bool dfs(uint64_t done, Keyspace& state) {
    uint64_t all = ops.size() == 64 ? ~0ull : (1ull << ops.size()) - 1;
    if (done == all) return true;
    if (!seen.insert({done, state}).second) return false;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (done & (1ull << i)) continue;
      // i may go next only if no other remaining op completed before it began.
      bool minimal = true;
      for (size_t j = 0; j < ops.size() && minimal; ++j)
        if (j != i && !(done & (1ull << j)) && ops[j].completed_ms < ops[i].invoked_ms)
          minimal = false;
      if (!minimal) continue;
      auto copy = state;
      if (execute(copy, ops[i].cmd) != ops[i].result) continue;
      if (dfs(done | (1ull << i), copy)) return true;
    }
    return false;
  }
};

}  // namespace

bool linearizable(const std::vector<Completed>& ops, std::string* why) {
  if (ops.size() > 62) {
    if (why)
      *why = "history of " + std::to_string(ops.size()) +
             " operations is over the 62 this checker takes";
    return false;
  }
  Search s{ops, {}};
  Keyspace state;
  bool ok = s.dfs(0, state);
  if (!ok && why)
    *why = "no order of the " + std::to_string(ops.size()) +
           " operations respects real time and the sequential results";
  return ok;
}

}  // namespace kv
