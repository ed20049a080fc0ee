#include "newcomer.h"

#include <sluice/sluice.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <thread>

#include "liveness.h"
#include "rsi.h"
#include "spares.h"
#include "twopc.h"

namespace sluice::nam {

int run_newcomer(JobContext& ctx, const Options& opt, const Layout& layout,
                 const std::vector<std::string>& protocols, const ResultsArea& area) {
  sluice::Cluster& cluster = ctx.cluster();
  const uint32_t rank = cluster.rank(), incarnation = cluster.incarnation(rank);
  const auto leave = [&](const std::string& why, int code) {
    std::fprintf(stderr, "sluice-nam: rank %u: incarnation %u, new to the running job: %s\n", rank,
                 incarnation, why.c_str());
    return code;
  };
  if (rank < opt.memory_servers) {
    return leave(
        "a memory server cannot take its rank back (its tables were in the memory of "
        "the process that was lost): this process leaves",
        1);
  }
  if (protocols.size() != 1) {
    return leave(
        "with --protocol both a new process takes no client slot (run one protocol for a job "
        "whose ranks come and go): this process leaves, and the others carry on without this "
        "rank's clients",
        1);
  }
  const std::string& protocol = protocols[0];
  ServerWatch watch(cluster, opt.memory_servers);
  sluice::RemoteRegion results = cluster.open_region("nam-results", 0);
  // The run's start: set once the first compute rank started its clients
  // (this rank may have been lost and restarted before that).
  uint64_t start_ns = 0;
  const sluice::Deadline wait_until = sluice::Clock::now() + cluster.options().setup_timeout;
  for (;;) {
    if (results.read(area.start(0), std::as_writable_bytes(std::span(&start_ns, 1))) !=
        sluice::Status::kOk)
      return ctx.fail("reading the run's start failed: " + results.error());
    if (start_ns != 0) break;
    if (sluice::Clock::now() > wait_until)
      return leave("the run did not start within the set-up timeout: this process leaves", 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  WorkloadOptions w = opt.workload;
  if (w.txns == 0) {
    w.seconds =
        static_cast<double>(static_cast<int64_t>(start_ns) - static_cast<int64_t>(unix_ns())) /
            1e9 +
        opt.workload.seconds;
    if (w.seconds < 0.01) return leave("the run's --seconds are over: nothing to take back", 0);
  }
  bool over = false;
  const std::vector<uint32_t> slots =
      claim_spares(results, area.claims(0), layout.clients, opt.clients, rank, incarnation, &over);
  if (slots.empty()) {
    return over ? leave("the run is over: nothing to take back", 0)
                : leave("there is no free client slot to run clients in (--spare-clients " +
                            std::to_string(layout.spares) +
                            ", and every other one taken or run by its rank's first process): "
                            "this process leaves, and the others carry on without it",
                        1);
  }
  std::string ids;
  for (uint32_t s : slots) ids += (ids.empty() ? "" : ", ") + std::to_string(s);
  std::fprintf(stderr,
               "sluice-nam: rank %u: incarnation %u runs spare client%s %s for what is left of "
               "the run\n",
               rank, incarnation, slots.size() > 1 ? "s" : "", ids.c_str());
  std::vector<ClientResult> runs(slots.size());
  std::vector<char> fenced(slots.size(), 0);
  std::vector<std::string> paths(slots.size());
  // 2PC: each slot's flows (declared in its thread, as memory server 0
  // admits the slots, in an order of its own), kept until the run is over.
  std::vector<std::vector<sluice::DeclaredFlow>> declared(slots.size());
  const sluice::PoolReport run = sluice::run_workers(
      cluster,
      sluice::PoolOptions{static_cast<uint32_t>(slots.size()),
                          // (One name per process: several may start at once.)
                          "nam-spares-" + std::to_string(rank) + "-" + std::to_string(incarnation),
                          cluster.ranks({rank})},
      [&](uint32_t t, sluice::StartLine& start) {
        const uint32_t id = slots[t];
        std::unique_ptr<Transactions> db;
        std::exception_ptr failed_to_open;
        try {
          if (protocol == "2pc") {
            const SlotFlows f = slot_flows(cluster, layout, id, rank, incarnation);
            declared[t] = declare_slot(cluster, f);
            db = std::make_unique<TwoPcClient>(cluster, layout, f, id);
            paths[t] = "flows";
          } else {
            RsiOptions ro;
            ro.recovery_timeout = std::chrono::milliseconds(opt.recovery_timeout_ms);
            ro.lost_server = &watch.lost();
            ro.recover = !opt.no_recovery;
            ro.starts_parked = true;
            auto rsi = std::make_unique<RsiClient>(cluster, layout, id, ro);
            paths[t] = rsi->path();
            db = std::move(rsi);
          }
        } catch (...) {
          failed_to_open = std::current_exception();
        }
        // One that failed to open still arrives, so that nobody waits for it.
        start.wait();
        if (failed_to_open) std::rethrow_exception(failed_to_open);
        if (!run_to_end(*db, opt, w, id, layout.clients, rank, &runs[t])) fenced[t] = 1;
      });
  // Each slot's summary, then done: the reporter reads the summary once it
  // sees the slot done (a failed run's summary says so).
  for (size_t t = 0; t < slots.size(); ++t) {
    Summary mine{};
    mine.valid = run.failure ? 2 : 1;
    if (fenced[t] != 0) {
      mine.checkouts_of[0] = kFencedClient;
    } else {
      add(mine, runs[t]);
      mine.checkouts_of[0] = runs[t].checkouts;
    }
    std::snprintf(mine.path, sizeof(mine.path), "%s", paths[t].c_str());
    if (results.write(area.slot_summary(0, slots[t]), std::as_bytes(std::span(&mine, 1))) !=
        sluice::Status::kOk)
      return ctx.fail("writing a spare client's results failed: " + results.error());
    finish_spare(results, area.claims(0), slots[t], rank, incarnation);
  }
  if (run.failure) return ctx.fail(*run.failure);
  uint64_t commits = 0;
  for (const ClientResult& r : runs) commits += r.commits;
  std::fprintf(stderr,
               "sluice-nam: rank %u: incarnation %u's spare clients committed %" PRIu64
               " transactions\n",
               rank, incarnation, commits);
  return 0;
}

}  // namespace sluice::nam
