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
// With --protocol 2pc the memory servers serve the clients' requests
// instead (twopc.h). A process new to the running job (a rank started
// again, or one that joins) runs free client slots: newcomer.h. What the
// clients report: run_results.h. The options are in options.cc
// (`sluice-nam --help`); the harness (sluice/job.h) runs main() and the
// client threads.
#include <sluice/job.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "layout.h"
#include "liveness.h"
#include "newcomer.h"
#include "options.h"
#include "rsi.h"
#include "run_results.h"
#include "spares.h"
#include "twopc.h"
#include "workload.h"

namespace sn = sluice::nam;

namespace {

using sn::kFencedClient;
using sn::kTimelineSlots;
using sn::ResultsArea;
using sn::Summary;
using sn::unix_ns;

std::string phase_name(const char* what, size_t phase) {
  return std::string(what) + "-" + std::to_string(phase);
}

// The ranks of those of `ranks` that are alive meet (meet_survivors). The
// meetings are among the job's first processes (every rank as its
// incarnation 0): a rank started again (--restarts, --spares) runs spare
// clients by itself (run_newcomer()) and meets no one, so a meeting that
// begins after its return must leave it out, not wait for it.
std::vector<uint32_t> meet(sluice::Cluster& cluster, const std::string& name,
                           const std::vector<uint32_t>& ranks) {
  return sluice::meet_survivors(cluster, name, ranks,
                                std::vector<uint32_t>(cluster.world_size(), 0));
}

// The ranks of a phase: the memory servers and compute ranks that met at
// its start (every rank in the first; those that are left in later ones).
// A rank lost meanwhile (sluice run --kill, or a crash) is found out at the
// closing meetings (meet), which no rank needs to know of in advance.
std::vector<uint32_t> compute_ranks_of(const std::vector<uint32_t>& ranks, uint32_t m) {
  std::vector<uint32_t> out;
  for (uint32_t r : ranks)
    if (r >= m) out.push_back(r);
  return out;
}

// One protocol's run on a memory server: expose and load its tables, then
// wait (RSI) or serve (2PC) until the clients are done. `ranks`: the ranks
// that start the phase, then those that end it. False if serving failed.
bool memory_phase(sluice::Cluster& cluster, const sn::Options& opt, const sn::Layout& layout,
                  const std::string& protocol, size_t phase, std::byte* claims,
                  sluice::RemoteRegion* results, uint64_t claims_offset,
                  std::vector<uint32_t>* ranks) {
  const uint32_t rank = cluster.rank();
  // Memory server 0 lays the run out: which client slots no first process
  // runs (spares.h), free in the claim words (and under RSI parked in the
  // metadata) before any client begins.
  const std::vector<uint8_t> free = rank == 0 ? sn::free_slots(cluster, layout, opt.clients)
                                              : std::vector<uint8_t>(layout.clients, 0);
  if (claims != nullptr) sn::init_claims(claims, free);
  const std::vector<sluice::MemoryRegion> regions =
      sn::expose_database(cluster, layout, opt.workload, rank, protocol == "rsi", free);
  // The 2PC baseline: this memory server is a resource manager.
  std::unique_ptr<sn::ResourceManager> rm;
  std::vector<sluice::DeclaredFlow> declared;
  const sn::TwoPcFlows flows = sn::two_pc_flows(cluster, layout, opt.clients);
  if (protocol == "2pc") {
    std::vector<std::string> lost_at_setup;
    declared = sn::declare_two_pc(cluster, flows, &lost_at_setup);
    std::vector<std::byte*> tables;
    for (uint32_t t = 0; t < layout.tables.size(); ++t) tables.push_back(regions[t].data());
    // Memory server 0 admits the free slots that processes new to the job
    // claim, and closes the rest before it stops serving.
    sn::FreeSlotWatch watch;
    if (claims != nullptr) watch = sn::FreeSlotWatch{claims, results, claims_offset, free};
    rm = std::make_unique<sn::ResourceManager>(cluster, layout, flows, tables,
                                               std::move(lost_at_setup), std::move(watch),
                                               !opt.no_recovery);
  }
  *ranks = meet(cluster, phase_name("nam-exposed", phase), *ranks);
  if (compute_ranks_of(*ranks, opt.memory_servers).empty()) {
    // An elastic job launched with its memory servers only (sluice run -n
    // M --max-ranks N), or every compute rank lost at the start: no client
    // would run, and no one would report.
    std::fprintf(stderr,
                 "sluice-nam: memory server rank %u: no compute rank is in the job to run "
                 "clients (start more ranks than --memory-servers %u): no results\n",
                 rank, opt.memory_servers);
    return false;
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
    *ranks = meet(cluster, phase_name("nam-served", phase), *ranks);
  }
  *ranks = meet(cluster, phase_name("nam-done", phase), *ranks);
  if (compute_ranks_of(*ranks, opt.memory_servers).empty()) {
    // Every compute rank left (or was lost) before the run's end: nobody
    // reported.
    std::fprintf(stderr,
                 "sluice-nam: memory server rank %u: no compute rank stayed to the end of the "
                 "run: no results\n",
                 rank);
    return false;
  }
  return ok;
}

int memory_server(sluice::Cluster& cluster, const sn::Options& opt,
                  const std::vector<sn::Layout>& layouts, const std::vector<std::string>& protocols,
                  const ResultsArea& area) {
  sluice::MemoryRegion results;
  // (2PC: memory server 0 closes free slots as their claimants do, by
  // compare-and-swap through a handle to its own region.)
  sluice::RemoteRegion own;
  if (cluster.rank() == 0) {
    results = cluster.expose("nam-results", protocols.size() * area.phase_bytes());
    if (std::find(protocols.begin(), protocols.end(), "2pc") != protocols.end())
      own = cluster.open_region("nam-results", 0);
  }
  std::vector<uint32_t> ranks(cluster.world_size());
  std::iota(ranks.begin(), ranks.end(), 0u);
  bool ok = true;
  for (size_t p = 0; p < protocols.size(); ++p) {
    std::byte* claims = results ? results.data() + area.claims(p) : nullptr;
    ok = memory_phase(cluster, opt, layouts[p], protocols[p], p, claims, &own, area.claims(p),
                      &ranks) &&
         ok;
  }
  return ok ? 0 : 1;
}

// Opens client `id`'s connection to the data: RSI's one-sided client, or
// the 2PC baseline's (on thread `slot`'s endpoints of the flows).
std::unique_ptr<sn::Transactions> open_client(sluice::Cluster& cluster, const sn::Options& opt,
                                              const sn::Layout& layout, const std::string& protocol,
                                              const sn::TwoPcFlows& flows, uint32_t id,
                                              uint32_t slot, const sn::ServerWatch& watch,
                                              std::string* path) {
  if (protocol == "2pc") {
    *path = "flows";
    return std::make_unique<sn::TwoPcClient>(cluster, layout, flows, id, slot);
  }
  sn::RsiOptions ro;
  ro.recovery_timeout = std::chrono::milliseconds(opt.recovery_timeout_ms);
  ro.lost_server = &watch.lost();
  ro.recover = !opt.no_recovery;
  auto rsi = std::make_unique<sn::RsiClient>(cluster, layout, id, ro);
  *path = rsi->path();
  return rsi;
}

// The reporter (the first compute rank of `ran`, those that wrote their
// results and met): recovers the clients that died, checks the invariants
// and prints the results. Returns the exit status.
int report(sluice::JobContext& ctx, const sn::Options& opt, const sn::Layout& layout,
           const std::string& protocol, const std::vector<uint32_t>& ran,
           sluice::RemoteRegion& results, const ResultsArea& area, size_t phase,
           const sn::ServerWatch& watch, double* tps_out) {
  sluice::Cluster& cluster = ctx.cluster();
  const uint32_t rank = cluster.rank(), m = opt.memory_servers;
  const uint32_t compute_ranks = cluster.world_size() - m;
  std::vector<Summary> all(compute_ranks);
  if (results.read(area.summary(phase, 0), std::as_writable_bytes(std::span(all))) !=
      sluice::Status::kOk)
    return ctx.fail("reading the results failed: " + results.error());
  for (uint32_t r : ran) {
    if (all[r - m].valid != 1) return ctx.fail("a client failed (see above): no results");
  }
  // Which slots the first processes ran (owned) and which were free to
  // claim (spares.h), as memory server 0 laid the run out.
  std::vector<uint64_t> claims(layout.clients);
  if (results.read(area.claims(phase), std::as_writable_bytes(std::span(claims))) !=
      sluice::Status::kOk)
    return ctx.fail("reading the client slots' claim words failed: " + results.error());
  auto owned = [&](uint32_t id) {
    return sn::decode_claim(claims[id]).state == sn::SpareState::kOwned;
  };
  Summary total{};
  std::vector<int64_t> checkouts(layout.clients, -1);  // per client; -1: died
  std::set<uint32_t> ranks_run;                        // the ranks whose processes ran clients
  uint32_t ranks_left = 0;                             // of them, those that left the job early
  uint64_t left_commits = 0;
  for (uint32_t k = 0; k < compute_ranks; ++k) {
    const Summary& s = all[k];
    // A rank that did not meet after the run died (its summary may be
    // missing or half written): its clients are recovered below. One that
    // left the job when asked wrote its results first and retired its
    // clients (the meeting completed only once it had left); its summary's
    // left word, written after the rest, says so even if a joiner holds
    // its number by now.
    const bool met = std::binary_search(ran.begin(), ran.end(), m + k);
    const bool left = !met && s.valid == 1 && s.left == 1;
    for (uint32_t t = 0; t < opt.clients; ++t) {
      const uint32_t id = k * opt.clients + t;
      if ((met || left) && owned(id) && s.checkouts_of[t] != kFencedClient)
        checkouts[id] = static_cast<int64_t>(s.checkouts_of[t]);
    }
    if (met || left) {
      accumulate(total, s, false);
      ranks_run.insert(m + k);
    }
    if (left) {
      ++ranks_left;
      left_commits += s.commits;
    }
  }
  // The free slots: each closed if nobody took it, else waited for until
  // the process that runs it is done or lost (spares.h).
  uint64_t free_slots = 0, spares_run = 0, replacement_commits = 0;
  double replacement_start = 0;  // the earliest spare client's start (0: none ran)
  for (uint32_t id = 0; id < layout.clients; ++id) {
    if (owned(id)) continue;
    ++free_slots;
    if (watch.lost().load() >= 0) continue;  // a memory server is gone: no results (below)
    sn::SpareClaim claim;
    try {
      claim = sn::settle_spare(cluster, results, area.claims(phase), id);
      if (claim.state == sn::SpareState::kClosed && protocol == "rsi") {
        // It never ran: retired from its first timestamp, not recovered.
        sn::RsiOptions parked;
        parked.starts_parked = true;
        parked.lost_server = &watch.lost();
        sn::RsiClient(cluster, layout, id, parked).retire();
      }
    } catch (const std::exception& e) {
      return ctx.fail(std::string("settling spare client ") + std::to_string(id) + ": " + e.what());
    }
    if (claim.state == sn::SpareState::kClosed) {
      checkouts[id] = 0;
      continue;
    }
    if (claim.state != sn::SpareState::kDone) {
      // Its process was lost while it ran: a client that died (recovered below).
      std::fprintf(stderr,
                   "sluice-nam: spare client %u of rank %u (incarnation %u) was lost while it "
                   "ran; it counts as a client that died\n",
                   id, claim.rank, claim.incarnation);
      continue;
    }
    Summary s{};
    if (results.read(area.slot_summary(phase, id), std::as_writable_bytes(std::span(&s, 1))) !=
        sluice::Status::kOk)
      return ctx.fail("reading a spare client's results failed: " + results.error());
    if (s.valid != 1)
      return ctx.fail("spare client " + std::to_string(id) + " of rank " +
                      std::to_string(claim.rank) + " failed (see above): no results");
    if (s.checkouts_of[0] != kFencedClient) checkouts[id] = static_cast<int64_t>(s.checkouts_of[0]);
    accumulate(total, s, true);
    ranks_run.insert(claim.rank);
    ++spares_run;
    replacement_commits += s.commits;
    if (s.start_unix > 0 && (replacement_start == 0 || s.start_unix < replacement_start))
      replacement_start = s.start_unix;
  }
  // Clients that died are recovered now (every live one has retired).
  if (protocol == "rsi") {
    sn::RsiOptions sweep_options;
    sweep_options.lost_server = &watch.lost();
    sweep_options.recover = !opt.no_recovery;
    sn::RsiClient sweeper(cluster, layout, (rank - m) * opt.clients, sweep_options);
    const uint32_t swept = sweeper.recover_unretired();
    total.forward += sweeper.stats().recovered_forward;
    total.back += sweeper.stats().recovered_back;
    total.recovered += swept;
  }
  const sn::CheckResult check =
      sn::check_invariants(cluster, layout, opt.workload, checkouts, protocol == "rsi");
  if (watch.lost().load() >= 0) {
    return ctx.fail("PeerLost: memory server rank " + std::to_string(watch.lost().load()) +
                    " is lost (" + watch.why() + "); no results");
  }
  const double aborts = static_cast<double>(total.conflicts + total.too_old);
  const double abort_rate = total.commits + aborts > 0 ? aborts / (total.commits + aborts) : 0;
  const double tps = total.seconds > 0 ? total.commits / total.seconds : 0;
  *tps_out = tps;
  const double p50 = percentile(total, 0.5), p99 = percentile(total, 0.99);
  const std::string transport = ctx.transport_label();
  const char* path = all[rank - m].path;
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
              protocol.c_str(), opt.workload.workload.c_str(), total.clients,
              static_cast<uint32_t>(ranks_run.size()), m, transport.c_str(), path, total.commits,
              total.checkouts, total.read_only, total.seconds, tps, total.conflicts, total.too_old,
              100 * abort_rate, p50, p99, total.recovered, total.forward, total.back, total.burned,
              total.overflow_moved, total.overflow_hits);
  if (ranks_left != 0) {
    std::printf("  left the job early: %u compute rank%s, %" PRIu64 " commits\n", ranks_left,
                ranks_left > 1 ? "s" : "", left_commits);
  }
  if (free_slots != 0) {
    std::printf("  spare clients: %" PRIu64 " of %" PRIu64
                " ran in ranks started again or joined, %" PRIu64 " commits\n",
                spares_run, free_slots, replacement_commits);
  }
  if (check.ok) {
    std::printf("invariants: OK (%" PRIu64 " products, %" PRIu64 " orders, %" PRIu64
                " lines, %" PRIu64 " locked)\n",
                check.products, check.orders, check.lines, check.locked);
  } else {
    std::printf("invariants: FAILED\n%s", check.problems.c_str());
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
        ",\"spare_clients_run\":%" PRIu64 ",\"replacement_commits\":%" PRIu64
        ",\"ranks_left\":%u,\"left_commits\":%" PRIu64
        ",\"replacement_start_unix\":%.6f"
        ",\"invariants\":\"%s\"}\n",
        protocol.c_str(), opt.workload.workload.c_str(), transport.c_str(), path, total.clients, m,
        total.commits, total.checkouts, total.read_only, total.conflicts, total.too_old,
        total.out_of_stock, abort_rate, total.seconds, tps, p50, p99, total.recovered,
        total.forward, total.back, check.orders, check.lines, check.locked, total.overflow_moved,
        total.overflow_hits, spares_run, replacement_commits, ranks_left, left_commits,
        replacement_start, check.ok ? "OK" : "FAILED");
  }
  if (opt.timeline) {
    size_t n = kTimelineSlots;
    while (n > 0 && total.timeline[n - 1] == 0) --n;
    std::string counts;
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) counts += ',';
      counts += std::to_string(total.timeline[i]);
    }
    std::printf("timeline: {\"start_unix\":%.6f,\"interval_ms\":%u,\"commits\":[%s]}\n",
                total.start_unix, sn::kTimelineMs, counts.c_str());
  }
  std::fflush(stdout);
  return check.ok ? 0 : 1;
}

// One protocol's run on a compute rank; the reporter sets *tps. `ranks`:
// as for memory_phase. *leaves: this rank was asked to leave the job, wrote
// its results and must take part in nothing more. Returns the exit status (1
// if this rank's clients failed, once the others know).
int compute_phase(sluice::JobContext& ctx, const sn::Options& opt, const sn::Layout& layout,
                  const std::string& protocol, size_t phase, const ResultsArea& area,
                  std::vector<uint32_t>* ranks, const sn::ServerWatch& watch, double* tps_out,
                  bool* leaves) {
  sluice::Cluster& cluster = ctx.cluster();
  const uint32_t rank = cluster.rank(), m = opt.memory_servers;
  const sn::TwoPcFlows flows = sn::two_pc_flows(cluster, layout, opt.clients);
  std::vector<sluice::DeclaredFlow> declared;
  if (protocol == "2pc") declared = sn::declare_two_pc(cluster, flows);
  *ranks = meet(cluster, phase_name("nam-exposed", phase), *ranks);
  const std::vector<uint32_t> starters = compute_ranks_of(*ranks, m);

  // Every client's first timestamp is pending until it begins; a client
  // still opening its regions when the others start would be taken for
  // dead after the recovery timeout. So all start together (run_workers).
  std::vector<sn::ClientResult> results(opt.clients);
  std::vector<char> fenced(opt.clients, 0);
  std::string path;
  // The results area; a failure to open it is reported by the second try,
  // after the run (a lost memory server fails the clients anyway).
  sluice::RemoteRegion out;
  try {
    out = cluster.open_region("nam-results", 0);
  } catch (const std::exception&) {
  }
  const sluice::PoolReport run = sluice::run_workers(
      cluster,
      // A compute rank lost before the start is left out: its clients never
      // began, and the others recover what a client lost later left.
      sluice::PoolOptions{opt.clients, phase_name("nam-ready", phase), cluster.ranks(starters),
                          /*start_without_lost=*/true,
                          std::vector<uint32_t>(cluster.world_size(), 0)},
      [&](uint32_t t, sluice::StartLine& start) {
        const uint32_t id = (rank - m) * opt.clients + t;
        std::string client_path;
        std::unique_ptr<sn::Transactions> db;
        std::exception_ptr failed_to_open;
        try {
          db = open_client(cluster, opt, layout, protocol, flows, id, t, watch, &client_path);
        } catch (...) {
          failed_to_open = std::current_exception();
        }
        if (t == 0) path = client_path;
        // One that failed to open still arrives, so that nobody waits for it.
        start.wait();
        // The run's start, for a replacement that runs what is left of it
        // (the first compute rank here sets it).
        if (t == 0 && !failed_to_open && out)
          (void)out.compare_and_swap(area.start(phase), 0, unix_ns(),
                                     sluice::Clock::now() + std::chrono::seconds(10));
        // Progress for the user (and the point a fault test's
        // `sluice run --faults-after` waits for).
        if (t == 0 && rank == starters.front() && !failed_to_open) {
          std::fprintf(stderr, "sluice-nam: %s clients started on every compute rank\n",
                       protocol.c_str());
        }
        if (failed_to_open) std::rethrow_exception(failed_to_open);
        if (!run_to_end(*db, opt, opt.workload, id, layout.clients, rank, &results[t]))
          fenced[t] = 1;
      });
  // A rank whose clients failed still meets the others (it holds flows,
  // whose destruction is collective, and the memory servers wait for it),
  // but no results come from a run that lost data access.
  bool failed = run.failure.has_value();
  // Asked to leave the job (SIGTERM: sluice run --leave RANK@S, scaling
  // down): the clients stopped at their next transaction and retired; the
  // rank writes its results, saying it leaves, and leaves without meeting
  // anyone (the harness calls Cluster::leave as the body returns). The
  // others' meetings go on without it, and the reporter counts its results
  // (a rank that left, not one that died: its summary says so).
  *leaves = sluice::stop_requested();
  Summary mine{};
  mine.valid = failed ? 2 : 1;
  for (uint32_t t = 0; t < opt.clients; ++t) {
    if (fenced[t] != 0) {
      mine.checkouts_of[t] = kFencedClient;
      continue;
    }
    add(mine, results[t]);
    mine.checkouts_of[t] = results[t].checkouts;
  }
  std::snprintf(mine.path, sizeof(mine.path), "%s", path.c_str());
  if (!out) out = cluster.open_region("nam-results", 0);
  // A leaver marks its summary left only once the whole of it is written
  // (a handle's writes take effect in order), so a left summary is never a
  // torn one, whatever the rank's number holds by the report (a joiner may
  // take it).
  const uint64_t left_word = 1;
  if (out.write(area.summary(phase, rank - m), std::as_bytes(std::span(&mine, 1))) !=
          sluice::Status::kOk ||
      (*leaves && out.write(area.summary(phase, rank - m) + offsetof(Summary, left),
                            std::as_bytes(std::span(&left_word, 1))) != sluice::Status::kOk)) {
    std::fprintf(stderr, "sluice-nam: rank %u: writing the results failed: %s\n", rank,
                 out.error().c_str());
    failed = true;
  }
  if (*leaves) {
    std::fprintf(stderr,
                 "sluice-nam: rank %u: asked to leave: its clients stopped after %" PRIu64
                 " commits; it leaves the job, and the others go on\n",
                 rank, mine.commits);
    if (run.failure) return ctx.fail(*run.failure);
    return failed ? 1 : 0;
  }
  // The compute ranks that wrote their results and met: the first reports.
  const std::vector<uint32_t> ran = meet(cluster, phase_name("nam-ran", phase), starters);
  // 2PC: the resource managers have resolved what dead clients left.
  if (protocol == "2pc") *ranks = meet(cluster, phase_name("nam-served", phase), *ranks);
  const uint32_t reporter = ran.front();
  int code = 0;
  if (rank == reporter)
    code = report(ctx, opt, layout, protocol, ran, out, area, phase, watch, tps_out);
  *ranks = meet(cluster, phase_name("nam-done", phase), *ranks);
  if (std::find(ranks->begin(), ranks->end(), reporter) == ranks->end())
    throw sluice::PeerLostError(reporter, "rank " + std::to_string(reporter) +
                                              ", which reports the results, was lost before "
                                              "it said they were checked");
  if (run.failure) return ctx.fail(*run.failure);
  return failed ? 1 : code;
}

int compute(sluice::JobContext& ctx, const sn::Options& opt, const std::vector<sn::Layout>& layouts,
            const std::vector<std::string>& protocols, const ResultsArea& area) {
  sluice::Cluster& cluster = ctx.cluster();
  sn::ServerWatch watch(cluster, opt.memory_servers);
  std::vector<uint32_t> ranks(cluster.world_size());
  std::iota(ranks.begin(), ranks.end(), 0u);
  std::vector<double> tps(protocols.size(), 0);
  int code = 0;
  // Every phase, even after one failed: the memory servers go through all.
  // A rank asked to leave stops after its phase's results.
  for (size_t p = 0; p < protocols.size(); ++p) {
    bool leaves = false;
    const int c =
        compute_phase(ctx, opt, layouts[p], protocols[p], p, area, &ranks, watch, &tps[p], &leaves);
    code = code != 0 ? code : c;
    if (leaves) return code;
  }
  if (protocols.size() == 2 && tps[1] > 0) {
    std::printf("sluice-nam: rsi / 2pc throughput on the same cores: %.2f (%.0f vs %.0f txn/s)\n",
                tps[0] / tps[1], tps[0], tps[1]);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::Job job("sluice-nam",
                  "Snapshot-isolation transactions on network-attached memory (RSI, or 2PC)",
                  sluice::kFlagJson | sluice::kFlagSeed | sluice::kFlagCluster);
  sn::Options opt;
  sn::add_options(job.cli(), &opt);
  // A restarted or joining rank runs run_newcomer() (free client slots), not the run.
  job.set_rejoin(true);
  return job.main(argc, argv, [&](sluice::JobContext& ctx) {
    opt.json = ctx.flags().json;
    opt.workload.seed = ctx.flags().seed;
    const uint32_t world = ctx.world_size(), m = opt.memory_servers;
    if (world <= m) {
      throw sluice::UsageError(std::to_string(world) + " ranks but " + std::to_string(m) +
                               " memory servers: run at least one compute rank more");
    }
    const uint32_t clients = (world - m) * opt.clients + opt.spare_clients;
    // `--protocol both`: RSI, then 2PC, each on its own fresh copy of the data.
    const std::vector<std::string> protocols = opt.protocol == "both"
                                                   ? std::vector<std::string>{"rsi", "2pc"}
                                                   : std::vector<std::string>{opt.protocol};
    std::vector<sn::Layout> layouts;
    for (const std::string& p : protocols) {
      layouts.push_back(
          sn::make_layout(opt.workload, m, clients, opt.versions, opt.max_timestamps));
      layouts.back().overflow_entries = opt.overflow_entries;
      layouts.back().spares = opt.spare_clients;
      if (protocols.size() > 1) layouts.back().prefix = "nam-" + p;
    }
    const ResultsArea area{world - m, clients};
    if (ctx.rank() >= m) {
      // A compute rank asked to stop (SIGTERM: sluice run --leave, scaling
      // down) stops its clients and leaves the job; a memory server holds
      // the data and stays fail-stop.
      sluice::enable_stop_signals();
      opt.workload.stop = &sluice::stop_requested;
    }
    if (ctx.cluster().incarnation(ctx.rank()) > 0)
      return sn::run_newcomer(ctx, opt, layouts.front(), protocols, area);
    if (ctx.rank() < m) return memory_server(ctx.cluster(), opt, layouts, protocols, area);
    return compute(ctx, opt, layouts, protocols, area);
  });
}
