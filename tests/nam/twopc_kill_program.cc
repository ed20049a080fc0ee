// The 2PC baseline's termination protocol with the coordinator's death
// fixed at a protocol point (twopc.h): a three-rank job (nam_test.cc's
// NamTwoPcFaultTest starts it with `sluice run -n 3 --keep-going`) whose
// ranks 0 and 1 are the resource managers and rank 2 one client that runs
// checkouts and kills itself (SIGKILL, TwoPcClient's test hook) on its first
// commit that reaches the point named by the argument:
//   prepared        every participant voted yes, no COMMIT sent yet;
//   partial-commit  one participant of two committed, the other not told.
// The launcher's --kill cannot aim at such a point (it kills by time), so
// the test program does, not the command: sluice-nam has no kill switches.
// The resource managers resolve what it left (each prints a line per
// record set it rolled forward or back), meet, and rank 0 checks the
// workload's invariants by scanning the tables ("invariants: OK").
#include <sluice/sluice.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "layout.h"
#include "twopc.h"
#include "workload.h"

namespace sn = sluice::nam;

int main(int argc, char** argv) {
  const std::string at = argc > 1 ? argv[1] : "";
  if (at != "prepared" && at != "partial-commit") {
    std::fprintf(stderr, "usage: sluice run -n 3 --keep-going -- %s prepared|partial-commit\n",
                 argv[0]);
    return 2;
  }
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    const uint32_t servers = 2;
    if (cluster.world_size() != servers + 1) {
      std::fprintf(stderr, "twopc_kill_program: run it with 3 ranks\n");
      return 2;
    }
    sn::WorkloadOptions w;
    w.products = 50;
    w.record_bytes = 32;
    w.txns = 200;
    const sn::Layout layout = sn::make_layout(w, servers, 1, 2, 4096);
    const sn::TwoPcFlows flows = sn::two_pc_flows(cluster, layout, 1);
    const uint32_t rank = cluster.rank();
    if (rank >= servers) {
      std::vector<sluice::DeclaredFlow> declared = sn::declare_two_pc(cluster, flows);
      sn::TwoPcClient client(
          cluster, layout, flows, 0, 0,
          at == "prepared" ? sn::KillPoint::kPrepared : sn::KillPoint::kPartialCommit, 1);
      cluster.barrier("twopc-kill-ready");
      (void)sn::run_client(client, w, 0, layout.clients, false);
      std::fprintf(stderr, "twopc_kill_program: the client never reached %s\n", at.c_str());
      return 1;
    }
    std::vector<sluice::MemoryRegion> regions;
    std::vector<std::byte*> tables;
    for (uint32_t t = 0; t < layout.tables.size(); ++t) {
      regions.push_back(
          cluster.expose(layout.region_name(layout.tables[t].name), layout.region_bytes(t, rank)));
      sn::load_table(layout, w, t, rank, regions.back().data());
      tables.push_back(regions.back().data());
    }
    std::vector<sluice::DeclaredFlow> declared = sn::declare_two_pc(cluster, flows);
    sn::ResourceManager rm(cluster, layout, flows, tables);
    cluster.barrier("twopc-kill-ready");
    rm.serve();
    // Both have resolved the dead client's transaction: the tables are final.
    cluster.barrier("twopc-kill-resolved", cluster.ranks({0, 1}), 0);
    if (rank == 0) {
      const sn::CheckResult check = sn::check_invariants(cluster, layout, w, {-1});
      std::printf("invariants: %s (%llu orders, %llu lines, %llu locked)\n%s",
                  check.ok ? "OK" : "FAILED", static_cast<unsigned long long>(check.orders),
                  static_cast<unsigned long long>(check.lines),
                  static_cast<unsigned long long>(check.locked), check.problems.c_str());
      std::fflush(stdout);
      cluster.barrier("twopc-kill-checked", cluster.ranks({0, 1}), 0);
      return cluster.leave() == sluice::Status::kOk && check.ok ? 0 : 1;
    }
    cluster.barrier("twopc-kill-checked", cluster.ranks({0, 1}), 0);
    return cluster.leave() == sluice::Status::kOk ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "twopc_kill_program: %s\n", e.what());
    return 1;
  }
}
