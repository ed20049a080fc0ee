// sluice-nam-olap: the RDMA radix join and the RDMA aggregation on
// network-attached memory, against their shared-nothing baselines, in one
// job on the same data:
//
//   sluice run -n 3 -- sluice-nam-olap join --threads 2 --r 1000000 --selectivity 0.5
//   sluice run -n 3 -- sluice-nam-olap agg --threads 2 --rows 1000000 --groups 100000
//
// Ranks 0 .. M-1 are memory servers: they expose and load the input, expose
// one partition store per one-sided algorithm, and then only wait. The other
// ranks run --threads compute threads each through every algorithm in turn.
// The first compute rank gathers the results, computes the single-process
// reference and prints both; the exit status is 0 only if every algorithm
// matched it exactly.
#include <signal.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flow_radix.h"
#include "olap.h"
#include "olap_options.h"
#include "part_store.h"
#include "ragg.h"
#include "rrj.h"

namespace so = sluice::nam::olap;

namespace {

bool one_sided(const std::string& algorithm) { return algorithm == "rrj" || algorithm == "rdma"; }

std::string store_name(const std::string& algorithm) { return "olap-" + algorithm + "-store"; }

so::StoreLayout store_layout(const so::OlapOptions& opt, const std::string& algorithm,
                             uint32_t workers) {
  return algorithm == "rrj" ? so::rrj_layout(opt.join, opt.memory_servers, workers)
                            : so::ragg_layout(opt.agg, opt.memory_servers, workers);
}

// Exposes one input region and fills it with rows [lo, hi) of a relation.
template <class Gen>
sluice::MemoryRegion load(sluice::Cluster& cluster, const char* name, so::Range slice, Gen row) {
  sluice::MemoryRegion region =
      cluster.expose(name, std::max<uint64_t>(64, slice.size() * sizeof(so::Tuple)));
  auto* rows = reinterpret_cast<so::Tuple*>(region.data());
  for (uint64_t i = slice.lo; i < slice.hi; ++i) rows[i - slice.lo] = row(i);
  return region;
}

// After a rank is lost, the survivors meet once more before they leave, so
// that a memory server keeps its regions until no compute thread can use
// them (a compute thread then fails with PeerLost, never with "region
// destroyed").
void wind_down(sluice::Cluster& cluster, uint32_t lost) {
  std::vector<sluice::Endpoint> survivors;
  for (uint32_t r = 0; r < cluster.world_size(); ++r) {
    if (r != lost) survivors.push_back(sluice::Endpoint{r, 0});
  }
  try {
    cluster.barrier("olap-wind-down", survivors, 0,
                    sluice::Clock::now() + std::chrono::seconds(60));
  } catch (const std::exception&) {
    // Another loss: nothing more to wait for.
  }
}

int memory_server(sluice::Cluster& cluster, const so::OlapOptions& opt, uint32_t workers) {
  const uint32_t rank = cluster.rank(), m = opt.memory_servers;
  std::vector<sluice::MemoryRegion> regions;
  if (!opt.dump.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.dump, ec);
    if (ec) throw so::OlapError("--dump: cannot create " + opt.dump + ": " + ec.message());
  }
  const auto dump = [&](const sluice::MemoryRegion& region, const char* what, uint64_t rows,
                        const char* header) {
    if (opt.dump.empty()) return;
    so::dump_csv(reinterpret_cast<const so::Tuple*>(region.data()), rows, header,
                 opt.dump + "/" + what + "-" + std::to_string(rank) + ".csv");
  };
  if (opt.kind == "join") {
    const so::JoinInput& in = opt.join.input;
    const so::Range r = so::server_slice(in.r_rows, rank, m),
                    s = so::server_slice(in.s_rows, rank, m);
    regions.push_back(load(cluster, so::kRegionR, r, [&](uint64_t i) { return so::r_row(in, i); }));
    dump(regions.back(), "R", r.size(), "key,payload");
    regions.push_back(load(cluster, so::kRegionS, s, [&](uint64_t j) { return so::s_row(in, j); }));
    dump(regions.back(), "S", s.size(), "key,payload");
  } else {
    const so::AggInput& in = opt.agg.input;
    const so::Range rows = so::server_slice(in.rows, rank, m);
    regions.push_back(load(cluster, so::kRegionRows, rows, [&](uint64_t i) {
      const so::Row row = so::agg_row(in, i);
      return so::Tuple{row.key, row.value};
    }));
    dump(regions.back(), "rows", rows.size(), "key,value");
  }
  // One partition store per one-sided algorithm, so that each run starts
  // from empty lists and cursors.
  std::vector<size_t> stores;
  std::vector<std::string> store_algorithms;
  for (const std::string& a : opt.algorithms) {
    if (!one_sided(a)) continue;
    stores.push_back(regions.size());
    store_algorithms.push_back(a);
    regions.push_back(cluster.expose(store_name(a), store_layout(opt, a, workers).bytes()));
    // Allocate every page now, as an RDMA memory server registers (pins)
    // its memory up front: the runs should not pay for first touches.
    std::memset(regions.back().data(), 0, regions.back().size());
  }
  std::thread killer;
  std::atomic<bool> stop{false};
  if (opt.test_kill_memory_server == static_cast<int64_t>(rank) && !stores.empty()) {
    // Test hook: die in the middle of the first one-sided algorithm's
    // partitioning, once a quarter of its expected chunks are here.
    const sluice::MemoryRegion& store = regions[stores.front()];
    const so::StoreLayout layout = store_layout(opt, store_algorithms.front(), workers);
    const uint64_t threshold = std::max<uint64_t>(1, layout.pool_chunks / 4);
    killer = std::thread([&store, &stop, threshold] {
      auto* cursor = reinterpret_cast<uint64_t*>(store.data());
      while (std::atomic_ref<uint64_t>(*cursor).load() < threshold) {
        if (stop.load()) return;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      std::fprintf(stderr, "olap test hook: memory server kills itself\n");
      std::fflush(stderr);
      ::raise(SIGKILL);
    });
  }
  cluster.barrier("olap-ready");
  // Passive from here on: the compute ranks read and write the regions.
  for (size_t p = 0; p < opt.algorithms.size(); ++p) {
    try {
      (void)cluster.allgather("olap-run-" + std::to_string(p), "");
    } catch (const sluice::PeerLostError& e) {
      stop.store(true);
      if (killer.joinable()) killer.join();
      // Keep this server's memory for the compute ranks still running.
      wind_down(cluster, e.rank());
      std::fprintf(stderr, "sluice-nam-olap: memory server rank %u: rank %u is lost\n", rank,
                   e.rank());
      return 1;
    }
  }
  stop.store(true);
  if (killer.joinable()) killer.join();
  return 0;
}

// A rank's summary of one algorithm run, as text for allgather.
struct RankSummary {
  so::ThreadStats total;
  bool failed = false;
};

std::string encode(const RankSummary& s) {
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "%d %" PRIu64 " %" PRIu64 " %" PRIu64 " %.9f %.9f %.9f %.9f %" PRIu64 " %" PRIu64 " %" PRIu64,
      s.failed ? 1 : 0, s.total.a, s.total.b, s.total.c, s.total.seconds, s.total.fetch,
      s.total.partition, s.total.finish, s.total.remote_ops, s.total.flow_records, s.total.chunks);
  return buf;
}

RankSummary decode(const std::string& text) {
  RankSummary s;
  int failed = 1;
  std::istringstream in(text);
  in >> failed >> s.total.a >> s.total.b >> s.total.c >> s.total.seconds >> s.total.fetch >>
      s.total.partition >> s.total.finish >> s.total.remote_ops >> s.total.flow_records >>
      s.total.chunks;
  s.failed = failed != 0 || !in;
  return s;
}

void add(so::ThreadStats& into, const so::ThreadStats& t) {
  into.a += t.a;
  into.b += t.b;
  into.c += t.c;
  into.seconds = std::max(into.seconds, t.seconds);
  into.fetch = std::max(into.fetch, t.fetch);
  into.partition = std::max(into.partition, t.partition);
  into.finish = std::max(into.finish, t.finish);
  into.remote_ops += t.remote_ops;
  into.flow_records += t.flow_records;
  into.chunks += t.chunks;
}

std::string transport_label(sluice::Cluster& cluster) {
  bool shm = false, ofi = false;
  for (uint32_t r = 0; r < cluster.world_size(); ++r) {
    if (r == cluster.rank() && cluster.world_size() > 1) continue;
    (cluster.transport_to(r) == sluice::Transport::kOfi ? ofi : shm) = true;
  }
  return shm && ofi ? "shm+ofi" : ofi ? "ofi" : "shm";
}

int compute(sluice::Cluster& cluster, const so::OlapOptions& opt,
            const std::vector<sluice::Endpoint>& workers) {
  const uint32_t rank = cluster.rank(), m = opt.memory_servers;
  const uint32_t compute_ranks = cluster.world_size() - m;
  // Every flow of every baseline run is declared up front by every compute rank.
  std::vector<so::GhjFlows> ghj;
  std::vector<sluice::ShuffleSpec<so::Partial>> hagg;
  std::vector<sluice::DeclaredFlow> declared;
  for (size_t p = 0; p < opt.algorithms.size(); ++p) {
    const std::string tag = opt.algorithms[p] + "-" + std::to_string(p);
    if (opt.algorithms[p] == "ghj" || opt.algorithms[p] == "ghj-bloom") {
      ghj.push_back(so::ghj_flows(workers, tag));
      declared.push_back(cluster.declare(ghj.back().r));
      declared.push_back(cluster.declare(ghj.back().s));
      if (opt.algorithms[p] == "ghj-bloom") declared.push_back(cluster.declare(ghj.back().bloom));
    } else if (opt.algorithms[p] == "hierarchical") {
      hagg.push_back(so::hagg_flow(workers, tag));
      declared.push_back(cluster.declare(hagg.back()));
    }
  }
  cluster.barrier("olap-ready");
  // Test hook: die in the middle of the first (one-sided) algorithm's
  // partitioning, once an eighth of its chunks are on memory server 0
  // (watched with one-sided reads of its pool cursor).
  struct Watcher {
    std::atomic<bool> stop{false};
    std::thread thread;
    ~Watcher() {
      stop.store(true);
      if (thread.joinable()) thread.join();
    }
  } watcher;
  if (opt.test_kill_compute_rank == static_cast<int64_t>(rank) &&
      one_sided(opt.algorithms.front())) {
    const so::StoreLayout layout =
        store_layout(opt, opt.algorithms.front(), static_cast<uint32_t>(workers.size()));
    watcher.thread =
        std::thread([&cluster, &watcher, layout, name = store_name(opt.algorithms.front())] {
          try {
            so::Remote store(cluster, name, 1);
            uint64_t cursor = 0;
            while (cursor < std::max<uint64_t>(1, layout.pool_chunks / 8)) {
              if (watcher.stop.load()) return;
              std::this_thread::sleep_for(std::chrono::microseconds(200));
              store.read(0, so::StoreLayout::kPoolCursor, &cursor, sizeof(cursor));
            }
          } catch (const std::exception&) {
            return;  // the run failed already
          }
          std::fprintf(stderr, "olap test hook: compute rank kills itself\n");
          std::fflush(stderr);
          ::raise(SIGKILL);
        });
  }
  // Test hook for the flow baselines (flow-radix, hierarchical) first: die
  // once one thread pushed a quarter of its share into the flows.
  std::function<void(uint64_t)> kill_after_pushing;
  if (opt.test_kill_compute_rank == static_cast<int64_t>(rank) &&
      (opt.algorithms.front() == "flow-radix" || opt.algorithms.front() == "hierarchical")) {
    const uint64_t share =
        opt.kind == "join"
            ? (opt.join.input.r_rows + opt.join.input.s_rows) / workers.size()
            : std::min<uint64_t>(opt.agg.input.groups, opt.agg.input.rows / workers.size());
    kill_after_pushing = [threshold = std::max<uint64_t>(4096, share / 4)](uint64_t pushed) {
      if (pushed < threshold) return;
      std::fprintf(stderr, "olap test hook: compute rank kills itself after pushing %llu tuples\n",
                   static_cast<unsigned long long>(pushed));
      std::fflush(stderr);
      ::raise(SIGKILL);
    };
  }
  const bool reporter = rank == m;
  std::vector<RankSummary> results;  // reporter: per algorithm, over all ranks
  std::string path = "flows";
  bool any_failed = false;
  size_t next_ghj = 0, next_hagg = 0;
  for (size_t p = 0; p < opt.algorithms.size(); ++p) {
    const std::string& algorithm = opt.algorithms[p];
    const std::string tag = algorithm + "-" + std::to_string(p);
    const so::GhjFlows* g = nullptr;
    const sluice::ShuffleSpec<so::Partial>* h = nullptr;
    if (algorithm == "ghj" || algorithm == "ghj-bloom") g = &ghj[next_ghj++];
    if (algorithm == "hierarchical") h = &hagg[next_hagg++];
    std::vector<so::ThreadStats> stats(opt.threads);
    std::vector<std::thread> threads;
    std::string my_path;
    if (algorithm == "flow-radix") {
      // apps/join's run_join starts this rank's threads itself; its sums
      // come back as thread 0's.
      try {
        stats[0] = so::run_flow_radix(cluster, opt.join, m, workers, opt.threads,
                                      p == 0 ? kill_after_pushing : nullptr);
      } catch (const std::exception& e) {
        stats[0].error = e.what();
      }
    }
    for (uint32_t t = 0; t < opt.threads && algorithm != "flow-radix"; ++t) {
      threads.emplace_back([&, t] {
        so::Team team;
        team.cluster = &cluster;
        team.servers = m;
        team.workers = workers;
        team.index = (rank - m) * opt.threads + t;
        team.slot = t;
        try {
          if (algorithm == "rrj") {
            stats[t] = so::run_rrj(team, opt.join, store_name(algorithm));
          } else if (algorithm == "rdma") {
            stats[t] = so::run_ragg(team, opt.agg, store_name(algorithm));
          } else if (g != nullptr) {
            stats[t] = so::run_ghj(team, opt.join, *g, algorithm == "ghj-bloom", tag);
          } else {
            stats[t] = so::run_hagg(team, opt.agg, *h, tag, p == 0 ? kill_after_pushing : nullptr);
          }
        } catch (const std::exception& e) {
          stats[t].error = e.what();
        }
      });
    }
    for (auto& th : threads) th.join();
    RankSummary mine;
    for (uint32_t t = 0; t < opt.threads; ++t) {
      add(mine.total, stats[t]);
      if (t == 0 && one_sided(algorithm)) my_path = stats[t].path;
      if (stats[t].error.empty()) continue;
      mine.failed = true;
      std::fprintf(stderr, "sluice-nam-olap: rank %u thread %u: %s failed: %s\n", rank, t,
                   algorithm.c_str(), stats[t].error.c_str());
    }
    if (!my_path.empty()) path = my_path;
    std::vector<std::string> all;
    try {
      all = cluster.allgather("olap-run-" + std::to_string(p), encode(mine));
    } catch (const sluice::PeerLostError& e) {
      std::fprintf(
          stderr,
          "sluice-nam-olap: rank %u: %s failed: PeerLost: rank %u is lost (%s); no results\n", rank,
          algorithm.c_str(), e.rank(), e.what());
      wind_down(cluster, e.rank());
      return 1;
    }
    RankSummary sum;
    for (uint32_t r = m; r < m + compute_ranks; ++r) {
      const RankSummary s = decode(all[r]);
      add(sum.total, s.total);
      sum.failed = sum.failed || s.failed;
    }
    any_failed = any_failed || sum.failed;
    results.push_back(sum);
  }
  if (!reporter) return any_failed ? 1 : 0;
  if (any_failed) {
    std::fprintf(stderr, "sluice-nam-olap: an algorithm failed (see above): no results\n");
    return 1;
  }
  // The single-process reference, after the runs (it would compete with them).
  const bool join = opt.kind == "join";
  so::JoinResult jref;
  so::AggResult aref;
  if (join)
    jref = so::reference_join(opt.join.input);
  else
    aref = so::reference_agg(opt.agg.input);
  const std::string transport = transport_label(cluster);
  if (join) {
    const so::JoinInput& in = opt.join.input;
    std::printf("sluice-nam-olap join: |R| %" PRIu64 ", |S| %" PRIu64
                ", selectivity %.2f; %u memory servers, %u compute ranks x %u threads (%s, "
                "one-sided path %s)\n",
                in.r_rows, in.s_rows, in.selectivity, m, compute_ranks, opt.threads,
                transport.c_str(), path.c_str());
    std::printf("  reference: %" PRIu64 " matches, checksum %" PRIu64
                " (apps/join's checksum %" PRIu64 ")\n",
                jref.matches, jref.checksum, jref.flow_checksum);
  } else {
    const so::AggInput& in = opt.agg.input;
    std::printf("sluice-nam-olap agg: %" PRIu64 " rows, %" PRIu64
                " distinct keys asked; %u memory servers, %u compute ranks x %u threads (%s, "
                "one-sided path %s)\n",
                in.rows, in.groups, m, compute_ranks, opt.threads, transport.c_str(), path.c_str());
    std::printf("  reference: %" PRIu64 " groups over %" PRIu64 " rows, checksum %" PRIu64 "\n",
                aref.groups, aref.rows, aref.checksum);
  }
  const double tuples = join ? static_cast<double>(opt.join.input.r_rows + opt.join.input.s_rows)
                             : static_cast<double>(opt.agg.input.rows);
  bool all_ok = true;
  std::string json = std::string("{\"kind\":\"") + opt.kind + "\",\"transport\":\"" + transport +
                     "\",\"path\":\"" + path + "\",\"memory_servers\":" + std::to_string(m) +
                     ",\"compute_ranks\":" + std::to_string(compute_ranks) +
                     ",\"threads\":" + std::to_string(opt.threads);
  if (join) {
    json += ",\"r\":" + std::to_string(opt.join.input.r_rows) +
            ",\"s\":" + std::to_string(opt.join.input.s_rows) +
            ",\"selectivity\":" + std::to_string(opt.join.input.selectivity) +
            ",\"reference_matches\":" + std::to_string(jref.matches) +
            ",\"reference_checksum\":" + std::to_string(jref.checksum) +
            ",\"reference_flow_checksum\":" + std::to_string(jref.flow_checksum);
  } else {
    json += ",\"rows\":" + std::to_string(opt.agg.input.rows) +
            ",\"groups_asked\":" + std::to_string(opt.agg.input.groups) +
            ",\"reference_groups\":" + std::to_string(aref.groups) +
            ",\"reference_checksum\":" + std::to_string(aref.checksum);
  }
  for (size_t p = 0; p < opt.algorithms.size(); ++p) {
    const std::string& a = opt.algorithms[p];
    const so::ThreadStats& s = results[p].total;
    // The flow radix join folds its pairs with apps/join's checksum.
    const uint64_t want_checksum = a == "flow-radix" ? jref.flow_checksum : jref.checksum;
    const bool ok = join ? s.a == jref.matches && s.b == want_checksum
                         : s.a == aref.groups && s.b == aref.rows && s.c == aref.checksum;
    all_ok = all_ok && ok;
    const char* second = one_sided(a) ? (join ? "join" : "post-agg") : (join ? "join" : "final");
    const char* first = one_sided(a) ? (join ? "partition" : "pre-agg+spill")
                                     : (join ? "shuffle" : "local+shuffle");
    if (join) {
      std::printf("  %-12s %" PRIu64 " matches, checksum %" PRIu64, a.c_str(), s.a, s.b);
    } else {
      std::printf("  %-12s %" PRIu64 " groups over %" PRIu64 " rows, checksum %" PRIu64, a.c_str(),
                  s.a, s.b, s.c);
    }
    std::printf("; %.4f s = %.2f M tuples/s (fetch %.4f, %s %.4f, %s %.4f); %" PRIu64
                " one-sided ops, %" PRIu64 " chunks, %" PRIu64 " records over flows; verify: %s\n",
                s.seconds, s.seconds > 0 ? tuples / s.seconds / 1e6 : 0.0, s.fetch, first,
                s.partition, second, s.finish, s.remote_ops, s.chunks, s.flow_records,
                ok ? "OK" : "MISMATCH");
    std::string k = a;
    std::replace(k.begin(), k.end(), '-', '_');
    if (join) {
      json += ",\"" + k + "_matches\":" + std::to_string(s.a) + ",\"" + k +
              "_checksum\":" + std::to_string(s.b);
    } else {
      json += ",\"" + k + "_groups\":" + std::to_string(s.a) + ",\"" + k +
              "_rows\":" + std::to_string(s.b) + ",\"" + k + "_checksum\":" + std::to_string(s.c);
    }
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  ",\"%s_seconds\":%.6f,\"%s_remote_ops\":%" PRIu64 ",\"%s_flow_records\":%" PRIu64
                  ",\"%s_verify\":\"%s\"",
                  k.c_str(), s.seconds, k.c_str(), s.remote_ops, k.c_str(), s.flow_records,
                  k.c_str(), ok ? "OK" : "MISMATCH");
    json += buf;
  }
  json += std::string(",\"verify\":\"") + (all_ok ? "OK" : "MISMATCH") + "\"}";
  std::printf("verify: %s\n", all_ok ? "OK (every algorithm matches the reference)" : "MISMATCH");
  if (opt.json) std::printf("%s\n", json.c_str());
  std::fflush(stdout);
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const so::OlapOptions opt = so::parse_olap_options(argc, argv);
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    const uint32_t world = cluster.world_size(), m = opt.memory_servers;
    if (world <= m) {
      std::fprintf(stderr,
                   "sluice-nam-olap: %u ranks but %u memory servers: run at least one compute "
                   "rank more\n",
                   world, m);
      return 2;
    }
    std::vector<sluice::Endpoint> workers;
    for (uint32_t r = m; r < world; ++r) {
      for (uint32_t t = 0; t < opt.threads; ++t) workers.push_back(sluice::Endpoint{r, t});
    }
    if (cluster.rank() < m)
      return memory_server(cluster, opt, static_cast<uint32_t>(workers.size()));
    return compute(cluster, opt, workers);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-nam-olap: rank failed: %s\n", e.what());
    return 1;
  }
}
