// sluice-nam: snapshot-isolation transactions on network-attached memory
// (RSI), run through the launcher:
//
//   sluice run -n 3 -- sluice-nam --memory-servers 1 --clients 2 --products 100000 --txns 2000
//
// Ranks 0 .. M-1 are memory servers: they expose the tables (and, rank 0, the
// timestamp vector, commit logs and a results area) and then only wait. The
// other ranks run --clients transaction clients each. When all are done, the
// first surviving compute rank recovers clients that died, checks the
// workload's invariants by scanning every table, and prints the results.
#include <signal.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "layout.h"
#include "liveness.h"
#include "options.h"
#include "rsi.h"
#include "twopc.h"
#include "workload.h"

namespace sn = sluice::nam;

namespace {

constexpr int kBuckets = 160;
constexpr uint32_t kMaxClientsPerRank =
    64;  // latency histogram: bucket b holds [1.1^b, 1.1^(b+1)) us

int bucket_of(uint32_t us) {
  if (us <= 1) return 0;
  return std::min(kBuckets - 1,
                  static_cast<int>(std::log(static_cast<double>(us)) / std::log(1.1)));
}

// What each compute rank leaves in the results area on memory server 0.
struct Summary {
  uint64_t valid, clients, commits, checkouts, read_only, conflicts, too_old, out_of_stock, burned,
      forward, back, recovered, overflow_moved, overflow_hits;
  double seconds;
  uint64_t hist[kBuckets];
  uint64_t checkouts_of[kMaxClientsPerRank];  // per client of the rank
  char path[32];
};

void add(Summary& a, const sn::ClientResult& r) {
  a.clients += 1;
  a.commits += r.commits;
  a.checkouts += r.checkouts;
  a.read_only += r.read_only;
  a.conflicts += r.conflicts;
  a.too_old += r.too_old;
  a.out_of_stock += r.out_of_stock;
  a.burned += r.rsi.burned;
  a.overflow_moved += r.rsi.overflow_moved;
  a.overflow_hits += r.rsi.overflow_hits;
  a.forward += r.rsi.recovered_forward;
  a.back += r.rsi.recovered_back;
  a.recovered += r.rsi.clients_recovered;
  a.seconds = std::max(a.seconds, r.seconds);
  for (uint32_t us : r.latency_us) ++a.hist[bucket_of(us)];
}

double percentile(const Summary& s, double q) {
  uint64_t total = 0;
  for (uint64_t h : s.hist) total += h;
  if (total == 0) return 0;
  const uint64_t want = static_cast<uint64_t>(std::ceil(q * total));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += s.hist[b];
    if (seen >= want) return std::pow(1.1, b + 1);
  }
  return std::pow(1.1, kBuckets);
}

std::string transport_label(sluice::Cluster& cluster) {
  bool shm = false, ofi = false;
  for (uint32_t r = 0; r < cluster.world_size(); ++r) {
    if (r == cluster.rank() && cluster.world_size() > 1) continue;
    (cluster.transport_to(r) == sluice::Transport::kOfi ? ofi : shm) = true;
  }
  return shm && ofi ? "shm+ofi" : ofi ? "ofi" : "shm";
}

std::string phase_name(const char* what, size_t phase) {
  return std::string(what) + "-" + std::to_string(phase);
}

// One protocol's run on a memory server: expose and load its tables, then
// wait (RSI) or serve (2PC) until the clients are done. False if it failed.
bool memory_phase(sluice::Cluster& cluster, const sn::Options& opt, const sn::Layout& layout,
                  const std::string& protocol, size_t phase,
                  const std::vector<sluice::Endpoint>& survivors) {
  const uint32_t rank = cluster.rank();
  std::vector<sluice::MemoryRegion> regions;
  for (uint32_t t = 0; t < layout.tables.size(); ++t) {
    regions.push_back(
        cluster.expose(layout.region_name(layout.tables[t].name), layout.region_bytes(t, rank)));
    sn::load_table(layout, opt.workload, t, rank, regions.back().data());
  }
  if (rank == 0 && protocol == "rsi")
    regions.push_back(cluster.expose(layout.meta_name(), layout.meta_bytes()));
  if (protocol == "rsi" && layout.overflow_entries != 0) {
    for (uint32_t t = 0; t < layout.tables.size(); ++t) {
      regions.push_back(cluster.expose(layout.overflow_name(layout.tables[t].name),
                                       layout.overflow_region_bytes(t)));
    }
  }
  // The 2PC baseline: this memory server is a resource manager.
  std::unique_ptr<sn::ResourceManager> rm;
  std::vector<sluice::DeclaredFlow> declared;
  const sn::TwoPcFlows flows = sn::two_pc_flows(cluster, layout, opt.clients);
  if (protocol == "2pc") {
    declared = sn::declare_two_pc(cluster, flows);
    std::vector<std::byte*> tables;
    for (uint32_t t = 0; t < layout.tables.size(); ++t) tables.push_back(regions[t].data());
    rm = std::make_unique<sn::ResourceManager>(cluster, layout, flows, tables);
  }
  cluster.barrier(phase_name("nam-exposed", phase));
  if (opt.test_kill_memory_server == static_cast<int64_t>(rank) && phase == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(opt.test_kill_after_ms));
    std::fprintf(stderr, "nam test hook: memory server rank %u kills itself\n", rank);
    std::fflush(stderr);
    ::raise(SIGKILL);
  }
  // RSI: passive from here on, the clients read, lock and install by
  // themselves. 2PC: serve the clients' requests until they are done.
  bool ok = true;
  if (rm) {
    try {
      rm->serve();
    } catch (const std::exception& e) {
      // Another memory server is gone (PeerLost): stop serving, but still
      // meet the survivors so that the job ends.
      std::fprintf(stderr, "sluice-nam: memory server rank %u: 2pc failed: %s\n", rank, e.what());
      ok = false;
    }
    // The reporter scans the tables only once every server has resolved
    // what clients that died left prepared.
    cluster.barrier(phase_name("nam-served", phase), survivors, 0);
  }
  cluster.barrier(phase_name("nam-done", phase), survivors, 0);
  return ok;
}

int memory_server(sluice::Cluster& cluster, const sn::Options& opt,
                  const std::vector<sn::Layout>& layouts, const std::vector<std::string>& protocols,
                  const std::vector<sluice::Endpoint>& survivors) {
  sluice::MemoryRegion results;
  if (cluster.rank() == 0) {
    const uint32_t compute = cluster.world_size() - opt.memory_servers;
    results = cluster.expose("nam-results", protocols.size() * compute * sizeof(Summary));
  }
  sn::AliveSource alive(cluster, opt.memory_servers);
  bool ok = true;
  for (size_t p = 0; p < protocols.size(); ++p)
    ok = memory_phase(cluster, opt, layouts[p], protocols[p], p, survivors) && ok;
  alive.close();
  return ok ? 0 : 1;
}

// One protocol's run on a compute rank; the reporter sets *tps.
int compute_phase(sluice::Cluster& cluster, const sn::Options& opt, const sn::Layout& layout,
                  const std::string& protocol, size_t phase,
                  const std::vector<sluice::Endpoint>& survivors, uint32_t doomed_rank,
                  const sn::ServerWatch& watch, double* tps_out) {
  const uint32_t rank = cluster.rank(), m = opt.memory_servers;
  const sn::TwoPcFlows flows = sn::two_pc_flows(cluster, layout, opt.clients);
  std::vector<sluice::DeclaredFlow> declared;
  if (protocol == "2pc") declared = sn::declare_two_pc(cluster, flows);
  cluster.barrier(phase_name("nam-exposed", phase));
  std::vector<sn::ClientResult> results(opt.clients);
  std::vector<std::string> errors(opt.clients);
  // The client threads that start this phase: every compute rank's in the
  // first; in later ones, not the rank a test hook may have killed.
  std::vector<sluice::Endpoint> starters;
  for (uint32_t r = m; r < cluster.world_size(); ++r) {
    if (phase > 0 && r == doomed_rank) continue;
    for (uint32_t t = 0; t < opt.clients; ++t) starters.push_back(sluice::Endpoint{r, t});
  }
  std::string path;
  {
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < opt.clients; ++t) {
      threads.emplace_back([&, t] {
        const uint32_t id = (rank - m) * opt.clients + t;
        std::unique_ptr<sn::Transactions> db;
        try {
          sn::RsiOptions ro;
          ro.recovery_timeout = std::chrono::milliseconds(opt.recovery_timeout_ms);
          ro.lost_server = &watch.lost();
          if (opt.test_kill_client == static_cast<int64_t>(id)) {
            ro.test_kill = opt.test_kill_at;
            ro.test_kill_on_commit = opt.test_kill_on_commit;
          }
          if (protocol == "2pc") {
            const bool doomed = opt.test_kill_client == static_cast<int64_t>(id);
            db = std::make_unique<sn::TwoPcClient>(cluster, layout, flows, id, t,
                                                   doomed ? opt.test_kill_at : sn::KillPoint::kNone,
                                                   opt.test_kill_on_commit);
            if (t == 0) path = "flows";
          } else {
            auto rsi = std::make_unique<sn::RsiClient>(cluster, layout, id, ro);
            if (t == 0) path = rsi->path();
            db = std::move(rsi);
          }
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
        // Every client's first timestamp is pending until it begins; a client
        // still opening its regions when the others start would be taken for
        // dead after the recovery timeout. So all start together (one that
        // failed to open still arrives, so that nobody waits for it).
        try {
          cluster.barrier(phase_name("nam-ready", phase), starters, t);
        } catch (const std::exception& e) {
          if (errors[t].empty()) errors[t] = e.what();
        }
        if (!errors[t].empty()) return;
        try {
          results[t] = sn::run_client(*db, opt.workload, id, layout.clients, !opt.history.empty());
          if (!opt.history.empty()) {
            std::ofstream out(opt.history + "." + std::to_string(id) + ".jsonl");
            out << results[t].history;
            if (!out) throw sn::NamError("cannot write the history file " + opt.history);
          }
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  bool failed = false;
  for (uint32_t t = 0; t < opt.clients; ++t) {
    if (errors[t].empty()) continue;
    std::fprintf(stderr, "sluice-nam: rank %u client %u failed: %s\n", rank,
                 (rank - m) * opt.clients + t, errors[t].c_str());
    failed = true;
  }
  // A failed rank still meets the others (so that the memory servers can
  // end the job), but no results come from a run that lost data access.
  Summary mine{};
  mine.valid = failed ? 2 : 1;
  for (uint32_t t = 0; t < opt.clients; ++t) {
    add(mine, results[t]);
    mine.checkouts_of[t] = results[t].checkouts;
  }
  std::snprintf(mine.path, sizeof(mine.path), "%s", path.c_str());
  const uint32_t compute_ranks = cluster.world_size() - m;
  sluice::RemoteRegion out = cluster.open_region("nam-results", 0);
  const uint64_t base = phase * compute_ranks * sizeof(Summary);
  if (out.write(base + (rank - m) * sizeof(Summary), std::as_bytes(std::span(&mine, 1))) !=
      sluice::Status::kOk) {
    std::fprintf(stderr, "sluice-nam: rank %u: writing the results failed: %s\n", rank,
                 out.error().c_str());
    failed = true;
  }
  std::vector<sluice::Endpoint> computing;  // the surviving compute ranks
  for (const sluice::Endpoint& e : survivors) {
    if (e.rank >= m) computing.push_back(e);
  }
  cluster.barrier(phase_name("nam-ran", phase), computing, 0);
  // 2PC: the resource managers have resolved what dead clients left.
  if (protocol == "2pc") cluster.barrier(phase_name("nam-served", phase), survivors, 0);
  const uint32_t reporter = doomed_rank == m ? m + 1 : m;
  int code = 0;
  if (rank == reporter) {
    std::vector<Summary> all(compute_ranks);
    if (out.read(base, std::as_writable_bytes(std::span(all))) != sluice::Status::kOk) {
      std::fprintf(stderr, "sluice-nam: reading the results failed: %s\n", out.error().c_str());
      return 1;
    }
    bool any_failed = false;
    for (const Summary& s : all) any_failed = any_failed || s.valid == 2;
    if (any_failed) {
      std::fprintf(stderr, "sluice-nam: a client failed (see above): no results\n");
      cluster.barrier(phase_name("nam-done", phase), survivors, 0);
      return 1;
    }
    Summary total{};
    std::vector<int64_t> checkouts;  // per client; -1: died
    for (const Summary& s : all) {
      for (uint32_t t = 0; t < opt.clients; ++t) {
        checkouts.push_back(s.valid ? static_cast<int64_t>(s.checkouts_of[t]) : -1);
      }
      if (!s.valid) continue;
      total.clients += s.clients;
      total.commits += s.commits;
      total.checkouts += s.checkouts;
      total.read_only += s.read_only;
      total.conflicts += s.conflicts;
      total.too_old += s.too_old;
      total.out_of_stock += s.out_of_stock;
      total.burned += s.burned;
      total.overflow_moved += s.overflow_moved;
      total.overflow_hits += s.overflow_hits;
      total.forward += s.forward;
      total.back += s.back;
      total.recovered += s.recovered;
      total.seconds = std::max(total.seconds, s.seconds);
      for (int b = 0; b < kBuckets; ++b) total.hist[b] += s.hist[b];
    }
    // Clients that died are recovered now (every live one has retired).
    if (protocol == "rsi") {
      sn::RsiOptions sweep_options;
      sweep_options.lost_server = &watch.lost();
      sn::RsiClient sweeper(cluster, layout, (rank - m) * opt.clients, sweep_options);
      const uint32_t swept = sweeper.recover_unretired();
      total.forward += sweeper.stats().recovered_forward;
      total.back += sweeper.stats().recovered_back;
      total.recovered += swept;
    }
    const sn::CheckResult check = sn::check_invariants(cluster, layout, opt.workload, checkouts);
    if (watch.lost().load() >= 0) {
      std::fprintf(
          stderr,
          "sluice-nam: rank %u: PeerLost: memory server rank %lld is lost (%s); no results\n", rank,
          static_cast<long long>(watch.lost().load()), watch.why().c_str());
      cluster.barrier(phase_name("nam-done", phase), survivors, 0);
      return 1;
    }
    const double aborts = static_cast<double>(total.conflicts + total.too_old);
    const double abort_rate = total.commits + aborts > 0 ? aborts / (total.commits + aborts) : 0;
    const double tps = total.seconds > 0 ? total.commits / total.seconds : 0;
    *tps_out = tps;
    const double p50 = percentile(total, 0.5), p99 = percentile(total, 0.99);
    const std::string transport = transport_label(cluster);
    std::printf("sluice-nam: %s %s: %" PRIu64
                " clients on %u compute ranks, %u memory servers (%s, data path %s)\n"
                "  %" PRIu64 " committed (%" PRIu64 " checkouts, %" PRIu64
                " read-only) in %.3f s = %.0f txn/s; "
                "aborts %" PRIu64 " conflict + %" PRIu64
                " too-old = %.2f%%; latency p50 %.0f us, p99 %.0f us\n"
                "  recovery: %" PRIu64 " clients recovered, %" PRIu64
                " records rolled forward, %" PRIu64 " rolled back; %" PRIu64
                " timestamps given up\n"
                "  overflow area: %" PRIu64 " old versions moved there, %" PRIu64
                " read from there\n",
                protocol.c_str(), opt.workload.workload.c_str(), total.clients, compute_ranks, m,
                transport.c_str(), all[reporter - m].path, total.commits, total.checkouts,
                total.read_only, total.seconds, tps, total.conflicts, total.too_old,
                100 * abort_rate, p50, p99, total.recovered, total.forward, total.back,
                total.burned, total.overflow_moved, total.overflow_hits);
    if (check.ok) {
      std::printf("invariants: OK (%" PRIu64 " products, %" PRIu64 " orders, %" PRIu64
                  " lines, %" PRIu64 " locked)\n",
                  check.products, check.orders, check.lines, check.locked);
    } else {
      std::printf("invariants: FAILED\n%s", check.problems.c_str());
      code = 1;
    }
    if (opt.json) {
      std::printf(
          "{\"protocol\":\"%s\",\"workload\":\"%s\",\"transport\":\"%s\",\"path\":\"%s\","
          "\"clients\":%" PRIu64 ",\"memory_servers\":%u,\"commits\":%" PRIu64
          ",\"checkouts\":%" PRIu64 ",\"read_only\":%" PRIu64 ",\"conflicts\":%" PRIu64
          ",\"too_old\":%" PRIu64 ",\"out_of_stock\":%" PRIu64
          ",\"abort_rate\":%.6f,\"seconds\":%.6f,\"txn_per_s\":%.1f,\"latency_p50_us\":%.1f,"
          "\"latency_p99_us\":%.1f,\"clients_recovered\":%" PRIu64 ",\"rolled_forward\":%" PRIu64
          ",\"rolled_back\":%" PRIu64 ",\"orders\":%" PRIu64 ",\"lines\":%" PRIu64
          ",\"locked\":%" PRIu64 ",\"overflow_moved\":%" PRIu64 ",\"overflow_hits\":%" PRIu64
          ",\"invariants\":\"%s\"}\n",
          protocol.c_str(), opt.workload.workload.c_str(), transport.c_str(),
          all[reporter - m].path, total.clients, m, total.commits, total.checkouts, total.read_only,
          total.conflicts, total.too_old, total.out_of_stock, abort_rate, total.seconds, tps, p50,
          p99, total.recovered, total.forward, total.back, check.orders, check.lines, check.locked,
          total.overflow_moved, total.overflow_hits, check.ok ? "OK" : "FAILED");
    }
    std::fflush(stdout);
  }
  cluster.barrier(phase_name("nam-done", phase), survivors, 0);
  return failed ? 1 : code;
}

int compute(sluice::Cluster& cluster, const sn::Options& opt,
            const std::vector<sn::Layout>& layouts, const std::vector<std::string>& protocols,
            const std::vector<sluice::Endpoint>& survivors, uint32_t doomed_rank) {
  sn::ServerWatch watch(cluster, opt.memory_servers);
  std::vector<double> tps(protocols.size(), 0);
  int code = 0;
  for (size_t p = 0; p < protocols.size(); ++p) {
    const int c = compute_phase(cluster, opt, layouts[p], protocols[p], p, survivors, doomed_rank,
                                watch, &tps[p]);
    code = code != 0 ? code : c;
  }
  if (protocols.size() == 2 && tps[1] > 0) {
    std::printf("sluice-nam: rsi / 2pc throughput on the same cores: %.2f (%.0f vs %.0f txn/s)\n",
                tps[0] / tps[1], tps[0], tps[1]);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const sn::Options opt = sn::parse_options(argc, argv);
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    const uint32_t world = cluster.world_size(), m = opt.memory_servers;
    if (world <= m) {
      std::fprintf(
          stderr,
          "sluice-nam: %u ranks but %u memory servers: run at least one compute rank more\n", world,
          m);
      return 2;
    }
    const uint32_t clients = (world - m) * opt.clients;
    // `--protocol both`: RSI, then 2PC, each on its own fresh copy of the data.
    const std::vector<std::string> protocols = opt.protocol == "both"
                                                   ? std::vector<std::string>{"rsi", "2pc"}
                                                   : std::vector<std::string>{opt.protocol};
    std::vector<sn::Layout> layouts;
    for (const std::string& p : protocols) {
      layouts.push_back(
          sn::make_layout(opt.workload, m, clients, opt.versions, opt.max_timestamps));
      layouts.back().overflow_entries = opt.overflow_entries;
      if (protocols.size() > 1) layouts.back().prefix = "nam-" + p;
    }
    // The rank a test hook kills is left out of the closing barriers.
    uint32_t doomed = world;
    if (opt.test_kill_client >= 0 && opt.test_kill_client < clients)
      doomed = m + opt.test_kill_client / opt.clients;
    if (opt.test_kill_memory_server >= 0)
      doomed = static_cast<uint32_t>(opt.test_kill_memory_server);
    std::vector<sluice::Endpoint> survivors;
    for (uint32_t r = 0; r < world; ++r) {
      if (r != doomed) survivors.push_back(sluice::Endpoint{r, 0});
    }
    if (cluster.rank() < m) return memory_server(cluster, opt, layouts, protocols, survivors);
    return compute(cluster, opt, layouts, protocols, survivors, doomed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-nam: rank failed: %s\n", e.what());
    return 1;
  }
}
