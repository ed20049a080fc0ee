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
// After each algorithm every rank gathers its summary to rank 0, which at the
// end computes the single-process reference and prints both; the exit
// status is 0 only if every algorithm matched it exactly. The options are in
// options.cc (`sluice-nam-olap --help`); the harness (sluice/job.h) runs
// main(), the compute threads and the gathers.
#include <sluice/job.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "flow_radix.h"
#include "olap.h"
#include "options.h"
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

// A rank's summary of one algorithm run, gathered to rank 0 (memory servers
// send an empty one).
struct RankSummary {
  uint64_t a = 0, b = 0, c = 0;  // so::ThreadStats's
  double seconds = 0, fetch = 0, partition = 0, finish = 0;
  uint64_t remote_ops = 0, flow_records = 0, chunks = 0;
  uint32_t failed = 0;
  char path[32] = {};  // how the one-sided operations travelled ("" for flows)
};

void add(RankSummary& into, const so::ThreadStats& t) {
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

void add(RankSummary& into, const RankSummary& s) {
  so::ThreadStats t;
  t.a = s.a;
  t.b = s.b;
  t.c = s.c;
  t.seconds = s.seconds;
  t.fetch = s.fetch;
  t.partition = s.partition;
  t.finish = s.finish;
  t.remote_ops = s.remote_ops;
  t.flow_records = s.flow_records;
  t.chunks = s.chunks;
  add(into, t);
  into.failed = into.failed || s.failed;
}

// Rank 0, once every algorithm ran: the single-process reference and the
// verdict. `results[p]`: algorithm p summed over the compute ranks; `path`:
// how the one-sided operations travelled.
int report(sluice::JobContext& ctx, const so::OlapOptions& opt,
           const std::vector<RankSummary>& results, const std::string& path) {
  const uint32_t m = opt.memory_servers;
  const uint32_t compute_ranks = ctx.world_size() - m;
  // The single-process reference, after the runs (it would compete with them).
  const bool join = opt.kind == "join";
  so::JoinResult jref;
  so::AggResult aref;
  if (join)
    jref = so::reference_join(opt.join.input);
  else
    aref = so::reference_agg(opt.agg.input);
  const std::string transport = ctx.transport_label();
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
    const RankSummary& s = results[p];
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

int memory_server(sluice::JobContext& ctx, const so::OlapOptions& opt, uint32_t workers) {
  sluice::Cluster& cluster = ctx.cluster();
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
  for (const std::string& a : opt.algorithms) {
    if (!one_sided(a)) continue;
    regions.push_back(cluster.expose(store_name(a), store_layout(opt, a, workers).bytes()));
    // Allocate every page now, as an RDMA memory server registers (pins)
    // its memory up front: the runs should not pay for first touches.
    std::memset(regions.back().data(), 0, regions.back().size());
  }
  cluster.barrier("olap-ready");
  // Passive from here on: the compute ranks read and write the regions.
  // Rank 0 gathers each algorithm's summaries and reports at the end.
  std::vector<RankSummary> results;
  std::string path = "flows";
  for (size_t p = 0; p < opt.algorithms.size(); ++p) {
    std::vector<RankSummary> all;
    try {
      all = ctx.gather("olap-run-" + std::to_string(p), RankSummary{});
    } catch (const sluice::PeerLostError& e) {
      // Keep this server's memory for the compute ranks still running.
      wind_down(cluster, e.rank());
      std::fprintf(stderr, "sluice-nam-olap: memory server rank %u: rank %u is lost\n", rank,
                   e.rank());
      return 1;
    }
    if (rank != 0) continue;
    RankSummary sum;
    for (uint32_t r = m; r < all.size(); ++r) add(sum, all[r]);
    if (one_sided(opt.algorithms[p]) && all[m].path[0] != '\0') path = all[m].path;
    results.push_back(sum);
  }
  if (rank != 0) return 0;
  for (const RankSummary& r : results) {
    if (r.failed) return ctx.fail("an algorithm failed (see above): no results");
  }
  return report(ctx, opt, results, path);
}

// Why this rank's run of an algorithm failed: the lost rank first (the
// harness's root cause), else the message.
std::string failure_text(const sluice::JobFailure& f) {
  if (!f.lost_peer) return f.message;
  return "PeerLost: rank " + std::to_string(f.lost_peer->rank) + " is lost (" + f.message + ")";
}

int compute(sluice::JobContext& ctx, const so::OlapOptions& opt,
            const std::vector<sluice::Endpoint>& workers) {
  sluice::Cluster& cluster = ctx.cluster();
  const uint32_t rank = cluster.rank(), m = opt.memory_servers;
  std::vector<uint32_t> compute_ranks;
  for (uint32_t r = m; r < cluster.world_size(); ++r) compute_ranks.push_back(r);
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
  size_t next_ghj = 0, next_hagg = 0;
  bool any_failed = false;
  for (size_t p = 0; p < opt.algorithms.size(); ++p) {
    const std::string& algorithm = opt.algorithms[p];
    const std::string tag = algorithm + "-" + std::to_string(p);
    const so::GhjFlows* g = nullptr;
    const sluice::ShuffleSpec<so::Partial>* h = nullptr;
    if (algorithm == "ghj" || algorithm == "ghj-bloom") g = &ghj[next_ghj++];
    if (algorithm == "hierarchical") h = &hagg[next_hagg++];
    std::vector<so::ThreadStats> stats(opt.threads);
    std::optional<sluice::JobFailure> failure;
    if (algorithm == "flow-radix") {
      // apps/join's run_join starts this rank's threads itself; its sums
      // come back as thread 0's.
      if (rank == m) std::fprintf(stderr, "sluice-nam-olap: %s starting\n", algorithm.c_str());
      try {
        stats[0] = so::run_flow_radix(cluster, opt.join, m, workers, opt.threads);
      } catch (const std::exception& e) {
        stats[0].error = e.what();
      }
      if (!stats[0].error.empty()) {
        failure = sluice::JobFailure{stats[0].error, std::nullopt};
        for (uint32_t r = 0; r < cluster.world_size() && !failure->lost_peer; ++r)
          if (!cluster.alive(r)) failure->lost_peer = sluice::LostPeer{r, ""};
      }
    } else {
      const sluice::PoolReport run = sluice::run_workers(
          cluster,
          sluice::PoolOptions{opt.threads, "olap-start-" + tag, cluster.ranks(compute_ranks)},
          [&](uint32_t t, sluice::StartLine& start) {
            so::Team team;
            team.cluster = &cluster;
            team.servers = m;
            team.workers = workers;
            team.index = (rank - m) * opt.threads + t;
            team.slot = t;
            start.wait();
            // Progress for the user (and the point a fault test's
            // `sluice run --faults-after` waits for).
            if (rank == m && t == 0)
              std::fprintf(stderr, "sluice-nam-olap: %s started on every compute rank\n",
                           algorithm.c_str());
            if (algorithm == "rrj") {
              stats[t] = so::run_rrj(team, opt.join, store_name(algorithm));
            } else if (algorithm == "rdma") {
              stats[t] = so::run_ragg(team, opt.agg, store_name(algorithm));
            } else if (g != nullptr) {
              stats[t] = so::run_ghj(team, opt.join, *g, algorithm == "ghj-bloom", tag);
            } else {
              stats[t] = so::run_hagg(team, opt.agg, *h, tag);
            }
            if (!stats[t].error.empty()) throw so::OlapError(stats[t].error);
          });
      failure = run.failure;
    }
    RankSummary mine;
    for (const so::ThreadStats& t : stats) add(mine, t);
    if (one_sided(algorithm))
      std::snprintf(mine.path, sizeof(mine.path), "%s", stats[0].path.c_str());
    if (failure) {
      mine.failed = 1;
      any_failed = true;
      std::fprintf(stderr, "sluice-nam-olap: rank %u: %s failed: %s\n", rank, algorithm.c_str(),
                   failure_text(*failure).c_str());
    }
    try {
      (void)ctx.gather("olap-run-" + std::to_string(p), mine);
    } catch (const sluice::PeerLostError& e) {
      std::fprintf(
          stderr,
          "sluice-nam-olap: rank %u: %s failed: PeerLost: rank %u is lost (%s); no results\n", rank,
          algorithm.c_str(), e.rank(), e.what());
      wind_down(cluster, e.rank());
      return 1;
    }
  }
  return any_failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::Job job(
      "sluice-nam-olap",
      "The RDMA radix join and aggregation on network-attached memory, against their "
      "shared-nothing baselines",
      sluice::kFlagThreads | sluice::kFlagJson | sluice::kFlagSeed | sluice::kFlagCluster);
  so::OlapOptions opt;
  so::add_olap_options(job.cli(), &opt);
  return job.main(argc, argv, [&](sluice::JobContext& ctx) {
    opt.threads = ctx.flags().threads;
    opt.json = ctx.flags().json;
    opt.join.input.seed = opt.agg.input.seed = ctx.flags().seed;
    const uint32_t world = ctx.world_size(), m = opt.memory_servers;
    if (world <= m) {
      throw sluice::UsageError(std::to_string(world) + " ranks but " + std::to_string(m) +
                               " memory servers: run at least one compute rank more");
    }
    std::vector<sluice::Endpoint> workers;
    for (uint32_t r = m; r < world; ++r) {
      for (uint32_t t = 0; t < opt.threads; ++t) workers.push_back(sluice::Endpoint{r, t});
    }
    if (ctx.rank() < m) return memory_server(ctx, opt, static_cast<uint32_t>(workers.size()));
    return compute(ctx, opt, workers);
  });
}
