// A job that lives through a rank's death on membership views alone
// (sluice/membership.h), for membership_test.cc. Every rank runs `--rounds`
// rounds; in each, the members of the current view gather their round
// number. At every view a rank has not agreed in yet (a gather that a loss or
// a rejoin interrupted failed with kViewChanged on every member, or the view
// changed between two rounds) the members agree on the furthest round any of
// them reached and go on from there. A restarted rank (incarnation > 0)
// starts with that agreement. Nobody is told which rank dies or when: the
// launcher kills it (sluice run --kill).
//
// Prints, per rank: "VIEW rank R epoch E members M" at each view change it
// reacts to, "DONE rank R incarnation I rounds C last L epoch E" and
// "AGREED epoch E ranks M values V" (the final agreement, identical on every
// member). A round seen twice, or a member at another round, prints MISMATCH.
// With --worker-watch, a Worker's on_view handler prints "WORKER rank R view
// epoch E members M" for each view it is told of. With --region, rank 0
// exposes a region and writes 42 in it, and every other first process reads
// it: "REGION rank R read V" (an elastic job's vacancies must not stop it).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include "sluice/cluster.h"
#include "sluice/memory.h"
#include "sluice/worker.h"

namespace {

std::string join_list(const std::vector<uint32_t>& v) {
  std::string s;
  for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"membership views through a rank's death (a test program)"};
  uint64_t rounds = 60;
  int interval_ms = 50;
  app.add_option("--rounds", rounds, "rounds to run")->check(CLI::PositiveNumber);
  app.add_option("--interval-ms", interval_ms, "pause between rounds")
      ->check(CLI::NonNegativeNumber);
  bool watch = false;
  app.add_flag("--watch", watch,
               "print 'PID rank R pid P' at the start and 'EPOCH rank R epoch E at_us T' "
               "(CLOCK_REALTIME) the moment each new view arrives, for measuring how fast a kill "
               "becomes a view (bench/membership_latency.py)");
  bool worker_watch = false;
  app.add_flag("--worker-watch", worker_watch,
               "also run a thread whose Worker (no inputs) reports views through on_view: "
               "'WORKER rank R view epoch E members M' per view it is told of");
  bool share_region = false;
  app.add_flag("--region", share_region,
               "rank 0 exposes a region and writes 42 in it; every other first process reads it "
               "and prints 'REGION rank R read V'");
  CLI11_PARSE(app, argc, argv);
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    const uint32_t me = cluster.rank();
    const uint32_t incarnation = cluster.incarnation(me);
    // Each call may wait this long for the others (a job may run for hours).
    const auto deadline = [] { return sluice::Clock::now() + std::chrono::seconds(90); };
    std::thread watcher;
    std::atomic<bool> done_watching{false};
    if (watch) {
      std::printf("PID rank %u pid %d\n", me, static_cast<int>(::getpid()));
      std::fflush(stdout);
      watcher = std::thread([&] {
        uint64_t seen = cluster.view().epoch;
        while (!done_watching.load()) {
          sluice::Result<sluice::View> v = sluice::Status::kTimeout;
          try {
            v = cluster.await_view(seen, sluice::Clock::now() + std::chrono::milliseconds(100));
          } catch (const std::exception& e) {  // the registry is lost: no view can follow
            std::printf("WATCH stopped: %s\n", e.what());
            std::fflush(stdout);
            return;
          }
          if (!v) continue;
          const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
          std::printf("EPOCH rank %u epoch %llu at_us %lld\n", me,
                      static_cast<unsigned long long>(v->epoch), static_cast<long long>(us));
          std::fflush(stdout);
          seen = v->epoch;
        }
      });
    }
    std::thread worker_watcher;
    if (worker_watch) {
      worker_watcher = std::thread([&] {
        sluice::Worker w(sluice::IdleStrategy{0, 0});
        w.on_view(cluster, [&](const sluice::View& v) {
          std::printf("WORKER rank %u view epoch %llu members %s\n", me,
                      static_cast<unsigned long long>(v.epoch), join_list(v.members).c_str());
          std::fflush(stdout);
        });
        while (!done_watching.load()) w.idle(w.poll());
      });
    }
    struct StopWatching {
      std::atomic<bool>& flag;
      std::thread& t;
      std::thread& t2;
      ~StopWatching() {
        flag.store(true);
        if (t.joinable()) t.join();
        if (t2.joinable()) t2.join();
      }
    } stop_watching{done_watching, watcher, worker_watcher};
    sluice::MemoryRegion region;  // kept until the end: the others read it
    if (share_region && me == 0) {
      region = cluster.expose("membership-region", 64);
      const uint64_t v = 42;
      std::memcpy(region.data(), &v, sizeof v);
    } else if (share_region && incarnation == 0) {
      sluice::RemoteRegion r = cluster.open_region("membership-region", 0, deadline());
      uint64_t v = 0;
      for (int i = 0; i < 1000 && v != 42; ++i) {
        if (r.read(0, std::as_writable_bytes(std::span(&v, 1)), deadline()) != sluice::Status::kOk)
          throw std::runtime_error("reading rank 0's region: " + r.error());
        if (v != 42) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::printf("REGION rank %u read %llu\n", me, static_cast<unsigned long long>(v));
      std::fflush(stdout);
    }
    // The view this rank last agreed in: view 0, the job as launched, for
    // every first process (one that starts in a later view agrees in it, as
    // the others do who see the change; starting from its own first view it
    // would skip the agreement they wait in).
    uint64_t epoch = 0;
    uint64_t next = 0;       // the round to run next
    uint64_t completed = 0;  // rounds this process completed
    bool mismatch = false;
    auto resume = [&] {
      const sluice::Gathered g = cluster.agree("resume", std::to_string(next), deadline());
      uint64_t furthest = 0;
      for (const std::string& v : g.values) furthest = std::max<uint64_t>(furthest, std::stoull(v));
      std::printf("VIEW rank %u epoch %llu members %s resume %llu\n", me,
                  static_cast<unsigned long long>(g.epoch), join_list(g.ranks).c_str(),
                  static_cast<unsigned long long>(furthest));
      std::fflush(stdout);
      next = furthest;
      epoch = g.epoch;
    };
    if (incarnation > 0) resume();
    while (next < rounds) {
      const sluice::View view = cluster.view();
      // A view this rank has not agreed in yet, whether a call failed on it
      // or it came between two rounds: every member comes here for it (a
      // restarted rank starts here), so the agreement meets them all.
      if (view.epoch != epoch) {
        resume();
        continue;
      }
      sluice::Result<sluice::Gathered> r =
          cluster.allgather(view, "round", std::to_string(next), deadline());
      if (r.status() == sluice::Status::kViewChanged) {
        resume();
        continue;
      }
      for (const std::string& v : r->values) {
        if (std::stoull(v) != next) {
          std::printf("MISMATCH rank %u round %llu: a member is at round %s\n", me,
                      static_cast<unsigned long long>(next), v.c_str());
          mismatch = true;
        }
      }
      ++completed;
      ++next;
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
    const sluice::Gathered done = cluster.agree("done", std::to_string(next), deadline());
    std::string values;
    for (const std::string& v : done.values) values += (values.empty() ? "" : ",") + v;
    std::printf("DONE rank %u incarnation %u rounds %llu last %llu epoch %llu\n", me, incarnation,
                static_cast<unsigned long long>(completed),
                static_cast<unsigned long long>(next - 1),
                static_cast<unsigned long long>(done.epoch));
    std::printf("AGREED epoch %llu ranks %s values %s\n",
                static_cast<unsigned long long>(done.epoch), join_list(done.ranks).c_str(),
                values.c_str());
    std::fflush(stdout);
    done_watching.store(true);  // no call on the Cluster after leave()
    if (watcher.joinable()) watcher.join();
    if (worker_watcher.joinable()) worker_watcher.join();
    region = sluice::MemoryRegion();  // its handles go before the membership does
    (void)cluster.leave(sluice::Clock::now() + std::chrono::seconds(10));
    return mismatch ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
}
