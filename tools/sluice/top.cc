// `sluice top`: every sluice process on this host, per rank and per flow
// endpoint, read from the counters areas the processes publish
// (src/observe/endpoint_counters.h): live, refreshing like top, or one JSON
// snapshot for scripts (--once --json).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "counters_reader.h"
#include "host_commands.h"
#include "host_facts.h"
#include "observe/endpoint_counters.h"

namespace sluice::tool {
namespace {

namespace ctr = detail::counters;

struct TopArgs {
  bool once = false;
  bool json = false;
  double interval_s = 1.0;
  int iterations = 0;  // 0: until interrupted
  int pid = 0;         // 0: every process
};

nlohmann::json to_json(const std::vector<Process>& procs) {
  nlohmann::json ps = nlohmann::json::array();
  for (const Process& p : procs) {
    nlohmann::json es = nlohmann::json::array();
    for (const Endpoint& e : p.endpoints) {
      nlohmann::json j = {{"flow", e.flow},
                          {"role", ctr::to_string(e.role)},
                          {"rank", e.rank},
                          {"slot", e.slot},
                          {"peers", e.peers},
                          {"state", ctr::to_string(e.state)},
                          {"segments", e.segments},
                          {"bytes", e.bytes},
                          {"records", e.record_size ? nlohmann::json(e.bytes / e.record_size)
                                                    : nlohmann::json(nullptr)},
                          {"credit_waits", e.credit_waits},
                          {"credit_wait_ms", static_cast<double>(e.credit_wait_ns) / 1e6},
                          {"parks", e.parks},
                          {"park_ms", static_cast<double>(e.park_ns) / 1e6},
                          {"ops", e.ops},
                          {"op_timeouts", e.op_timeouts},
                          {"op_failures", e.op_failures},
                          {"ring_segments", e.ring_segments},
                          {"ring_fill", e.role == ctr::Role::kSource ? nlohmann::json(e.ring_fill)
                                                                     : nlohmann::json(nullptr)},
                          {"opened_ns", e.opened_ns}};
      if (!e.cause.empty()) j["cause"] = e.cause;
      // A source waiting for credit now: the target whose ring is full.
      if (e.role == ctr::Role::kSource) {
        nlohmann::json w = nullptr;
        if (e.waiting_since_ns != 0) {
          w = {{"target", e.waiting_peer}, {"since_ns", e.waiting_since_ns}};
          if (e.waiting_peer < e.peer_detail.size()) {
            w["rank"] = e.peer_detail[e.waiting_peer].rank;
            w["slot"] = e.peer_detail[e.waiting_peer].slot;
          }
        }
        j["waiting_for_credit"] = std::move(w);
      }
      // The first peers one by one: who they are and, for a target, when
      // it last took a segment of each (null: never) and whether it ended.
      nlohmann::json peers = nlohmann::json::array();
      for (const ctr::PeerReading& pr : e.peer_detail) {
        nlohmann::json q = {{"rank", pr.rank}, {"slot", pr.slot}};
        if (e.role == ctr::Role::kTarget) {
          q["last_segment_ns"] =
              pr.heard_ns != 0 ? nlohmann::json(pr.heard_ns) : nlohmann::json(nullptr);
          q["ended"] = pr.ended;
          q["segments"] = pr.taken;
        }
        peers.push_back(std::move(q));
      }
      j["peer_detail"] = std::move(peers);
      es.push_back(std::move(j));
    }
    ps.push_back({{"pid", p.pid},
                  {"rank", p.rank},
                  {"spare", p.rank == ctr::kSpareRank},
                  {"job", p.job},
                  {"epoch", p.epoch},
                  {"endpoints", std::move(es)}});
  }
  return {{"time_ns", ctr::now_ns()}, {"processes", std::move(ps)}};
}

// True for an endpoint worth a second line: a source waiting for credit
// for a second or more; a target that has not ended, with a described
// source, not ended either, that delivered before and then nothing for a
// second or more, or that took nothing from anyone for a second or more.
// (A source that never sent to this target is not by itself a sign of
// trouble: in a job whose messages go to chosen targets, such as the kv
// store's, most pairs never carry a segment.)
bool quiet_source(const Endpoint& e, uint64_t now_ns) {
  constexpr uint64_t kSecond = 1000000000ULL;
  if (e.role == ctr::Role::kSource)
    return e.waiting_since_ns != 0 && now_ns > e.waiting_since_ns + kSecond;
  if (e.role != ctr::Role::kTarget || e.state == ctr::State::kEnded) return false;
  uint64_t latest = 0;
  bool open = false;
  for (const ctr::PeerReading& p : e.peer_detail) {
    latest = std::max(latest, p.heard_ns);
    if (p.ended) continue;
    open = true;
    if (p.heard_ns != 0 && now_ns > p.heard_ns + kSecond) return true;
  }
  return open && now_ns > std::max(latest, e.opened_ns) + kSecond;
}

// One screen: per endpoint, its rates since the previous screen.
void print_screen(
    const std::vector<Process>& now,
    const std::map<std::tuple<int, std::string, uint32_t, uint32_t>, Endpoint>& before,
    double seconds, bool clear) {
  if (clear) std::printf("\x1b[H\x1b[2J");
  size_t endpoints = 0;
  for (const Process& p : now) endpoints += p.endpoints.size();
  std::printf("sluice top: %zu process(es), %zu endpoint(s); rates over %.1f s\n", now.size(),
              endpoints, seconds);
  // Each job's membership view as its ranks here know it (a rank whose
  // epoch lags has not heard of the latest change yet), and its spares
  // waiting here for a lost rank's place (sluice run --spares).
  std::map<std::string, std::map<uint64_t, std::string>> views;
  std::map<std::string, std::string> spares;
  for (const Process& p : now) {
    if (p.rank == ctr::kSpareRank) {
      std::string& pids = spares[p.job];
      pids += (pids.empty() ? "pid " : ", ") + std::to_string(p.pid);
      views[p.job];  // a job may show only its spares here
    }
    if (p.rank < 0) continue;
    std::string& ranks = views[p.job][p.epoch];
    ranks += (ranks.empty() ? "" : ",") + std::to_string(p.rank);
  }
  for (const auto& [job, epochs] : views) {
    std::string line;
    for (const auto& [epoch, ranks] : epochs)
      line += (line.empty() ? "" : "; ") + ("epoch " + std::to_string(epoch) + ": ranks " + ranks);
    if (const auto s = spares.find(job); s != spares.end())
      line += (line.empty() ? "" : "; ") + ("spares waiting: " + s->second);
    std::printf("job %s view: %s\n", job.c_str(), line.c_str());
  }
  std::printf("%-22s %5s %7s %-16s %-10s %-7s %10s %10s %9s %6s %7s %6s %7s\n", "job", "rank",
              "pid", "flow", "endpoint", "state", "records", "rec/s", "MB/s", "wait%", "parks/s",
              "park%", "fill");
  for (const Process& p : now) {
    for (const Endpoint& e : p.endpoints) {
      const auto key = std::make_tuple(p.pid, e.flow, static_cast<uint32_t>(e.role), e.slot);
      const auto it = before.find(key);
      const Endpoint* b = it == before.end() ? nullptr : &it->second;
      const double db = b ? static_cast<double>(e.bytes - b->bytes) : 0;
      const double dw = b ? static_cast<double>(e.credit_wait_ns - b->credit_wait_ns) : 0;
      const double dp = b ? static_cast<double>(e.parks - b->parks) : 0;
      const double dpn = b ? static_cast<double>(e.park_ns - b->park_ns) : 0;
      char records[32] = "-", rate[32] = "-";
      if (e.role == ctr::Role::kRegion) {
        // A region handle: its operations in the records columns.
        const double dops = b ? static_cast<double>(e.ops - b->ops) : 0;
        std::snprintf(records, sizeof(records), "%llu ops", static_cast<unsigned long long>(e.ops));
        std::snprintf(rate, sizeof(rate), "%.0f", seconds > 0 ? dops / seconds : 0);
      } else if (e.record_size != 0) {
        std::snprintf(records, sizeof(records), "%llu",
                      static_cast<unsigned long long>(e.bytes / e.record_size));
        std::snprintf(rate, sizeof(rate), "%.0f", seconds > 0 ? db / e.record_size / seconds : 0);
      }
      const std::string endpoint = std::string(ctr::to_string(e.role)) + " (" +
                                   std::to_string(e.rank) + "," + std::to_string(e.slot) + ")";
      // A source's ring fill as it last looked for credit: "fill/segments".
      char fill[24] = "-";
      if (e.role == ctr::Role::kSource && e.ring_segments != 0) {
        std::snprintf(fill, sizeof(fill), "%llu/%u", static_cast<unsigned long long>(e.ring_fill),
                      e.ring_segments);
      }
      std::printf("%-22.22s %5lld %7d %-16.16s %-10s %-7s %10s %10s %9.1f %6.1f %7.0f %6.1f %7s\n",
                  p.job.c_str(), static_cast<long long>(p.rank), p.pid, e.flow.c_str(),
                  endpoint.c_str(), ctr::to_string(e.state), records, rate,
                  seconds > 0 ? db / 1e6 / seconds : 0, seconds > 0 ? dw / 1e7 / seconds : 0,
                  seconds > 0 ? dp / seconds : 0, seconds > 0 ? dpn / 1e7 / seconds : 0, fill);
      if (!e.cause.empty()) std::printf("    failed: %s\n", e.cause.c_str());
      // A target starved for a second or more: whom it waits for and how
      // long since each last delivered; a source blocked as long: on whom.
      // Busy flows stay one line per endpoint.
      if (quiet_source(e, ctr::now_ns())) {
        std::printf("    %s\n", waiting_for(e, ctr::now_ns(), {}).c_str());
      }
    }
  }
  std::fflush(stdout);
}

void run_top(const TopArgs& a) {
  if (a.once) {
    const std::vector<Process> procs = read_counters(a.pid);
    if (a.json) {
      std::printf("%s\n", to_json(procs).dump().c_str());
    } else {
      print_screen(procs, {}, 0, false);
    }
    return;
  }
  std::map<std::tuple<int, std::string, uint32_t, uint32_t>, Endpoint> before;
  auto last = std::chrono::steady_clock::now();
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  for (int i = 0; a.iterations == 0 || i < a.iterations; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::duration<double>(a.interval_s));
    const auto now_t = std::chrono::steady_clock::now();
    const std::vector<Process> procs = read_counters(a.pid);
    const double seconds = i == 0 ? 0 : std::chrono::duration<double>(now_t - last).count();
    if (a.json) {
      std::printf("%s\n", to_json(procs).dump().c_str());
      std::fflush(stdout);
    } else {
      print_screen(procs, before, seconds, tty);
    }
    before.clear();
    for (const Process& p : procs) {
      for (const Endpoint& e : p.endpoints) {
        before[std::make_tuple(p.pid, e.flow, static_cast<uint32_t>(e.role), e.slot)] = e;
      }
    }
    last = now_t;
  }
}

}  // namespace

void add_top_command(CLI::App& app) {
  auto args = std::make_shared<TopArgs>();
  CLI::App* sub = app.add_subcommand(
      "top",
      "Live view of every sluice process on this host: per rank and flow endpoint, records, rates, "
      "credit waits, parks and state (from the counters each process publishes)");
  sub->add_flag("--once", args->once, "Print one snapshot and exit");
  sub->add_flag("--json", args->json, "JSON instead of the table (one object per refresh)");
  sub->add_option("--interval", args->interval_s, "Seconds between refreshes (default 1)")
      ->check(CLI::Range(0.05, 3600.0));
  sub->add_option("--iterations", args->iterations,
                  "Refreshes before exiting (default 0: until interrupted)")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--pid", args->pid, "Only this process")->check(CLI::Range(1, 1 << 30));
  sub->callback([args] { run_top(*args); });
}

}  // namespace sluice::tool
