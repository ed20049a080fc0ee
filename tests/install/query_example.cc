// A query planned outside the sluice tree on the installed engine
// (sluice::query, <sluice/query/...>): every rank scans rows of its own
// (key = i % 10, value = i), shuffles them by key, counts and sums them per
// key, and gathers the groups to rank 0, which checks them against the sums
// it can work out: 10 groups, every row counted once.
#include <sluice/query/exchange.h>
#include <sluice/query/operators.h>
#include <sluice/sluice.h>

#include <cstdio>
#include <map>
#include <thread>
#include <vector>

using namespace sluice::query;

int main() {
  sluice::Cluster cluster = sluice::Cluster::join();
  constexpr int64_t kRows = 10000;
  const Schema rows({int64_field("key"), int64_field("value")});
  Batch mine(rows);
  for (int64_t i = 0; i < kRows; ++i) {
    const int64_t global = cluster.rank() * kRows + i;
    mine.column(0).ints.push_back(global % 10);
    mine.column(1).ints.push_back(global);
  }
  mine.set_rows(kRows);
  Runtime rt(cluster, RuntimeOptions{.threads = 2});
  const ExchangeId by_key = rt.declare("by-key", ExchangeKind::kShuffle, rows, {"key"});
  const Schema groups({int64_field("key"), int64_field("n"), int64_field("sum")});
  const ExchangeId to_root = rt.declare("to-root", ExchangeKind::kGather, groups);
  std::vector<Collect> results(rt.threads(), Collect(groups));
  std::vector<std::thread> pool;
  std::vector<std::string> errors(rt.threads());
  for (uint32_t slot = 0; slot < rt.threads(); ++slot) {
    pool.emplace_back([&, slot] {
      try {
        QueryWorker w(rt, slot);
        Scan scan(mine, mine.rows() * slot / rt.threads(), mine.rows() * (slot + 1) / rt.threads());
        scan.to(w.sender(by_key));
        HashAggregate agg(
            rows, {"key"},
            {{AggKind::kCount, nullptr, "n"}, {AggKind::kSum, expr::col("value"), "sum"}});
        agg.to(w.sender(to_root));
        w.receive(by_key, &agg);
        if (w.receives(to_root)) w.receive(to_root, &results[slot]);
        w.add_local(&scan);
        w.run();
      } catch (const std::exception& e) {
        errors[slot] = e.what();
      }
    });
  }
  for (auto& t : pool) t.join();
  if (cluster.leave() != sluice::Status::kOk) {
    std::printf("FAILED: leave() did not finish cleanly\n");
    return 1;
  }
  for (const std::string& e : errors) {
    if (!e.empty()) {
      std::printf("FAILED: %s\n", e.c_str());
      return 1;
    }
  }
  if (cluster.rank() != 0) return 0;
  const Batch& got = results[0].rows();
  const int64_t total = kRows * cluster.world_size();
  std::map<int64_t, std::pair<int64_t, int64_t>> want;
  for (int64_t g = 0; g < total; ++g) {
    want[g % 10].first += 1;
    want[g % 10].second += g;
  }
  bool ok = got.rows() == want.size();
  for (size_t r = 0; ok && r < got.rows(); ++r) {
    const auto it = want.find(got.column(0).ints[r]);
    ok = it != want.end() && it->second.first == got.column(1).ints[r] &&
         it->second.second == got.column(2).ints[r];
  }
  std::printf("query: %zu groups of %lld rows: %s\n", got.rows(), static_cast<long long>(total),
              ok ? "match" : "MISMATCH");
  return ok ? 0 : 1;
}
