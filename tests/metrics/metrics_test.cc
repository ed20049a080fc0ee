// Prometheus scrapes of real jobs, over shm and ofi (the ctest variants set
// SLUICE_TRANSPORT). A job of tests/system/top_job.cc (every rank pushes
// --records 16-byte records through one shuffle flow, prints what it pushed
// and consumed, and holds its endpoints until told) runs under `sluice run
// --metrics`; a real HTTP client (curl, where installed) scrapes it; the
// tests' strict parser (exposition_parser.h) reads the scrape; and the
// totals must equal exactly what each rank says it pushed and consumed.
// Garbage sent to the metrics port meanwhile changes nothing. The same with
// the standalone `sluice registry --metrics` and a rank started by hand,
// whose final counters stay served after it left.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "exposition_parser.h"
#include "http_client.h"
#include "support/test_support.h"

namespace sluice::metrics_test {
namespace {

using Clock = std::chrono::steady_clock;
using testing::bin;
using testing::run_process;

constexpr uint64_t kRecordBytes = 16;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits (at most 60 s) for `path` to name the metrics endpoint.
bool wait_for_address(const std::string& path, std::string* host, uint16_t* port) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    if (metrics_address(slurp(path), host, port)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Scrapes until every one of `ranks` reported its source and target of flow
// "ticks" as ended (at most 90 s); returns the last scrape.
Exposition scrape_until_ended(const std::string& host, uint16_t port, int ranks,
                              std::string* client) {
  Exposition x;
  const auto until = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < until) {
    const HttpResponse r = http_get(host, port, "/metrics", client);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    x = parse_exposition(r.body);
    if (x.find("sluice_endpoint_state", {{"flow", "ticks"}, {"state", "ended"}}).size() ==
        static_cast<size_t>(2 * ranks)) {
      bool all = true;
      for (const Sample& s :
           x.find("sluice_endpoint_state", {{"flow", "ticks"}, {"state", "ended"}})) {
        all = all && s.value == 1;
      }
      if (all) return x;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "the endpoints of flow 'ticks' were not all reported ended within 90 s";
  return x;
}

// What each rank printed: "rank R pushed P consumed C".
std::map<int, std::pair<uint64_t, uint64_t>> rank_lines(const std::string& output) {
  std::map<int, std::pair<uint64_t, uint64_t>> out;
  const std::regex line(R"(rank (\d+) pushed (\d+) consumed (\d+))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    out[std::stoi((*it)[1])] = {std::stoull((*it)[2]), std::stoull((*it)[3])};
  }
  return out;
}

// Every sample carries the same job label, the registry's "host:port".
void expect_one_job(const Exposition& x) {
  std::set<std::string> jobs;
  for (const auto& [name, f] : x.families) {
    for (const Sample& s : f.samples) jobs.insert(s.labels.at("job"));
  }
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_TRUE(std::regex_match(*jobs.begin(), std::regex(R"(127\.0\.0\.1:[0-9]+)")))
      << *jobs.begin();
}

std::string rank_label(int r) { return std::to_string(r); }

// Starts the top job under `sluice run --metrics 127.0.0.1:0` on a thread;
// the launcher's stderr goes to the file `err`, which the test reads while
// the job runs (the metrics address), and its result to *job.
std::thread start_job(int ranks, const std::vector<std::string>& args, const std::string& err,
                      testing::ProcessResult* job) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "f=$1; shift; exec \"$@\" 2>\"$f\"", "sh", err};
  for (const std::string& a :
       testing::job_argv(ranks, 120, "sluice-test-top-job", args, {"--metrics", "127.0.0.1:0"})) {
    argv.push_back(a);
  }
  return std::thread([argv, job] { *job = run_process(argv, {}, std::chrono::seconds(150)); });
}

TEST(SluiceRunMetricsTest, AStrictlyParsedScrapeHasTotalsEqualToWhatTheRanksPushedAndConsumed) {
  constexpr int kRanks = 3;
  constexpr uint64_t kRecords = 50000;
  const std::string base = "/tmp/sluice-metrics-test-" + std::to_string(::getpid());
  const std::string hold = base + ".hold", err = base + ".err";
  std::remove(hold.c_str());
  std::remove(err.c_str());
  testing::ProcessResult job;
  std::thread runner =
      start_job(kRanks, {"--records", std::to_string(kRecords), "--hold-until", hold}, err, &job);
  std::string host, client;
  uint16_t port = 0;
  const bool found = wait_for_address(err, &host, &port);
  Exposition x;
  if (found) {
    // Garbage first: a binary blob, a request cut off, a wrong path.
    EXPECT_EQ(parse_response(exchange(host, port, {std::string(9000, '\x01')})).status, 400);
    // A client that never finishes its request is answered 408 after 5 s;
    // scrapes go on meanwhile.
    auto stalled = std::async(std::launch::async, [&] {
      return exchange(host, port, {"GET /metr"}, std::chrono::milliseconds(0),
                      std::chrono::seconds(20));
    });
    EXPECT_EQ(http_get(host, port, "/nothing").status, 404);
    x = scrape_until_ended(host, port, kRanks, &client);
    EXPECT_EQ(parse_response(stalled.get()).status, 408);
  }
  { std::ofstream touch(hold); }
  runner.join();
  const std::string launcher_err = slurp(err);
  std::remove(hold.c_str());
  std::remove(err.c_str());
  ASSERT_TRUE(found) << "no metrics address in the launcher's stderr:\n" << launcher_err;
  ASSERT_EQ(job.exit_code, 0) << job.output << launcher_err;
  std::printf("scraped with %s\n", client.c_str());

  const auto lines = rank_lines(job.output);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kRanks)) << job.output;
  expect_one_job(x);
  uint64_t consumed_total = 0;
  for (int r = 0; r < kRanks; ++r) {
    const std::map<std::string, std::string> src = {{"rank", rank_label(r)},
                                                    {"flow", "ticks"},
                                                    {"role", "source"},
                                                    {"endpoint", "(" + std::to_string(r) + ",0)"}};
    const std::map<std::string, std::string> dst = {{"rank", rank_label(r)},
                                                    {"flow", "ticks"},
                                                    {"role", "target"},
                                                    {"endpoint", "(" + std::to_string(r) + ",0)"}};
    const auto [pushed, consumed] = lines.at(r);
    EXPECT_EQ(pushed, kRecords);
    EXPECT_EQ(x.value("sluice_records_pushed_total", src), pushed);
    EXPECT_EQ(x.value("sluice_bytes_pushed_total", src), pushed * kRecordBytes);
    EXPECT_EQ(x.value("sluice_records_consumed_total", dst), consumed);
    EXPECT_EQ(x.value("sluice_bytes_consumed_total", dst), consumed * kRecordBytes);
    // At least one segment (its END) to every target.
    EXPECT_GE(x.value("sluice_segments_published_total", src), kRanks);
    EXPECT_GE(x.value("sluice_segments_consumed_total", dst), kRanks);
    EXPECT_EQ(x.value("sluice_endpoint_peers", src), kRanks);
    // Default rings of 16 segments; a source's fill is within its ring.
    EXPECT_EQ(x.value("sluice_ring_segments", src), 16);
    EXPECT_EQ(x.value("sluice_ring_segments", dst), 16);
    EXPECT_LE(x.value("sluice_ring_fill_segments", src), 16);
    EXPECT_EQ(x.value("sluice_endpoint_state",
                      [&] {
                        auto l = dst;
                        l["state"] = "ended";
                        return l;
                      }()),
              1);
    EXPECT_EQ(x.find("sluice_endpoint_state", {{"rank", rank_label(r)}, {"state", "open"}}).size(),
              2u);
    EXPECT_GE(x.value("sluice_parks_total", src), 0);
    EXPECT_GE(x.value("sluice_credit_waits_total", src), 0);
    EXPECT_EQ(x.value("sluice_rank_state", {{"rank", rank_label(r)}, {"state", "alive"}}), 1);
    EXPECT_GE(x.value("sluice_rank_last_heartbeat_age_seconds", {{"rank", rank_label(r)}}), 0);
    EXPECT_EQ(x.value("sluice_rank_endpoints", {{"rank", rank_label(r)}}), 2);
    consumed_total += consumed;
  }
  // Exactly once: every record pushed was consumed once.
  EXPECT_EQ(consumed_total, kRanks * kRecords);
  double scraped_consumed = 0;
  for (const Sample& s : x.find("sluice_records_consumed_total", {{"flow", "ticks"}})) {
    scraped_consumed += s.value;
  }
  EXPECT_EQ(scraped_consumed, kRanks * kRecords);
  EXPECT_EQ(x.value("sluice_ranks", {{"state", "alive"}}), kRanks);
  EXPECT_EQ(x.value("sluice_ranks", {{"state", "died"}}), 0);
  EXPECT_EQ(x.value("sluice_counters_reports_rejected_total", {}), 0);
  EXPECT_GE(x.value("sluice_counters_reports_total", {}), kRanks);
  EXPECT_TRUE(x.find("sluice_endpoint_failure_info").empty());
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// Beyond the flows' totals: each target names its sources one by one (peer
// label: when each last delivered, whether it ended), ordered replicate
// sources count the numbers they took from the sequencer, and every region
// handle counts its operations and bytes.
TEST(SluiceRunMetricsTest, PeersSequencersAndRegionHandlesHaveTheirOwnSeries) {
  constexpr int kRanks = 3;
  constexpr uint64_t kRecords = 20000, kRegionOps = 40, kOrdered = 3000;
  const std::string base = "/tmp/sluice-metrics-test2-" + std::to_string(::getpid());
  const std::string hold = base + ".hold", err = base + ".err";
  std::remove(hold.c_str());
  std::remove(err.c_str());
  testing::ProcessResult job;
  std::thread runner =
      start_job(kRanks,
                {"--records", std::to_string(kRecords), "--hold-until", hold, "--region-ops",
                 std::to_string(kRegionOps), "--ordered", std::to_string(kOrdered)},
                err, &job);
  std::string host, client;
  uint16_t port = 0;
  const bool found = wait_for_address(err, &host, &port);
  Exposition x;
  if (found) {
    x = scrape_until_ended(host, port, kRanks, &client);
    // The "ticks" targets ended after the region and sequencer work was
    // done, but a report may predate the last of it: wait for every seq
    // source to be reported ended too.
    const auto seq_ended = [](const Exposition& e) {
      int n = 0;
      for (const Sample& smp : e.find("sluice_endpoint_state",
                                      {{"flow", "seq"}, {"role", "source"}, {"state", "ended"}})) {
        n += smp.value == 1;
      }
      return n;
    };
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (seq_ended(x) != kRanks && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      x = parse_exposition(http_get(host, port, "/metrics", &client).body);
    }
  }
  { std::ofstream touch(hold); }
  runner.join();
  const std::string launcher_err = slurp(err);
  std::remove(hold.c_str());
  std::remove(err.c_str());
  ASSERT_TRUE(found) << launcher_err;
  ASSERT_EQ(job.exit_code, 0) << job.output << launcher_err;
  expect_one_job(x);
  for (int r = 0; r < kRanks; ++r) {
    // The region: every rank's handle did kRegionOps fetch_adds and a read.
    EXPECT_NE(job.output.find("rank " + std::to_string(r) + " tally " +
                              std::to_string(kRanks * kRegionOps)),
              std::string::npos)
        << job.output;
    const std::map<std::string, std::string> region = {
        {"rank", rank_label(r)}, {"region", "tally"}, {"owner", "0"}};
    ASSERT_EQ(x.find("sluice_region_operations_total", region).size(), 1u) << r;
    EXPECT_EQ(x.value("sluice_region_operations_total", region), kRegionOps + 1);
    EXPECT_EQ(x.value("sluice_region_bytes_total", region), (kRegionOps + 1) * 8);
    EXPECT_EQ(x.value("sluice_region_timeouts_total", region), 0);
    EXPECT_EQ(x.value("sluice_region_failures_total", region), 0);
    // The sequencer: every numbered segment took one number; at least one
    // (its records), at most one per record.
    const std::map<std::string, std::string> seq = {
        {"rank", rank_label(r)}, {"flow", "seq"}, {"role", "source"}};
    const double numbers = x.value("sluice_sequencer_numbers_total", seq);
    EXPECT_GE(numbers, 1);
    EXPECT_LE(numbers, kOrdered);
    EXPECT_EQ(x.value("sluice_sequencer_timeouts_total", seq), 0);
    EXPECT_EQ(x.value("sluice_sequencer_failures_total", seq), 0);
    // A replicate source counts each record once per target it went to.
    EXPECT_EQ(x.value("sluice_records_pushed_total", seq), kOrdered * kRanks);
    EXPECT_EQ(x.value("sluice_records_consumed_total",
                      {{"rank", rank_label(r)}, {"flow", "seq"}, {"role", "target"}}),
              kRanks * kOrdered);
    EXPECT_NE(job.output.find("rank " + std::to_string(r) + " seq consumed " +
                              std::to_string(kRanks * kOrdered)),
              std::string::npos)
        << job.output;
    // Peers: the "ticks" target of rank r names all three sources, each
    // ended, each heard from.
    for (int p = 0; p < kRanks; ++p) {
      const std::map<std::string, std::string> peer = {{"rank", rank_label(r)},
                                                       {"flow", "ticks"},
                                                       {"role", "target"},
                                                       {"peer", "(" + std::to_string(p) + ",0)"}};
      EXPECT_EQ(x.value("sluice_peer_ended", peer), 1) << r << " " << p;
      EXPECT_GT(x.value("sluice_peer_last_heard_timestamp_seconds", peer), 1.7e9) << r << " " << p;
    }
  }
  // Sources have no peer series; region handles are not flow endpoints.
  EXPECT_TRUE(x.find("sluice_peer_ended", {{"role", "source"}}).empty());
  EXPECT_TRUE(x.find("sluice_endpoint_state", {{"flow", "tally"}}).empty());
  EXPECT_EQ(x.value("sluice_counters_reports_rejected_total", {}), 0);
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

TEST(SluiceRegistryMetricsTest, TheStandaloneRegistryKeepsServingARanksFinalCountersAfterItLeft) {
  constexpr uint64_t kRecords = 3000;
  const std::string base = "/tmp/sluice-metrics-registry-" + std::to_string(::getpid());
  const std::string hold = base + ".hold", done = base + ".done";
  for (const std::string& f : {hold, done, base + ".out", base + ".err"}) std::remove(f.c_str());
  // The registry in the background; one rank started by hand with the
  // variables it printed; the registry stopped with SIGTERM once told.
  const std::string script =
      "\"$0\" registry --bind 127.0.0.1:0 --world 1 --metrics 127.0.0.1:0 >\"$2.out\" "
      "2>\"$2.err\" & reg=$!; "
      "i=0; until grep -q SLUICE_SECRET \"$2.out\" 2>/dev/null || [ $i -ge 300 ]; do sleep 0.1; "
      "i=$((i+1)); done; "
      ". \"$2.out\"; "
      "SLUICE_RANK=0 SLUICE_WORLD_SIZE=1 SLUICE_REGISTRY=$SLUICE_REGISTRY "
      "SLUICE_SECRET=$SLUICE_SECRET \"$1\" --records $3 --hold-until \"$2.hold\"; "
      "echo \"rank exit $?\"; "
      "i=0; until [ -e \"$2.done\" ] || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done; "
      "kill -TERM $reg; wait $reg; echo \"registry exit $?\"";
  testing::ProcessResult r;
  std::thread runner([&] {
    r = run_process({"/bin/sh", "-c", script, bin("sluice"), bin("sluice-test-top-job"), base,
                     std::to_string(kRecords)},
                    {}, std::chrono::seconds(150));
  });
  std::string host, client;
  uint16_t port = 0;
  const bool found = wait_for_address(base + ".err", &host, &port);
  Exposition running, after;
  if (found) {
    running = scrape_until_ended(host, port, 1, &client);
    { std::ofstream touch(hold); }
    // The rank exits: a last report, then LEAVE.
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < until) {
      after = parse_exposition(http_get(host, port, "/metrics").body);
      if (after.value("sluice_rank_state", {{"rank", "0"}, {"state", "left"}}) == 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  { std::ofstream touch(hold); }
  { std::ofstream touch(done); }
  runner.join();
  const std::string registry_err = slurp(base + ".err");
  for (const std::string& f : {hold, done, base + ".out", base + ".err"}) std::remove(f.c_str());
  ASSERT_TRUE(found) << r.output << registry_err;
  EXPECT_NE(r.output.find("rank exit 0"), std::string::npos) << r.output << registry_err;
  EXPECT_NE(r.output.find("registry exit 0"), std::string::npos) << r.output << registry_err;
  const auto lines = rank_lines(r.output);
  ASSERT_EQ(lines.size(), 1u) << r.output;
  // One rank: it consumed all it pushed.
  EXPECT_EQ(lines.at(0), std::make_pair(kRecords, kRecords));
  const std::map<std::string, std::string> src = {{"flow", "ticks"}, {"role", "source"}};
  const std::map<std::string, std::string> dst = {{"flow", "ticks"}, {"role", "target"}};
  for (const Exposition* x : {&running, &after}) {
    expect_one_job(*x);
    EXPECT_EQ(x->value("sluice_records_pushed_total", src), kRecords);
    EXPECT_EQ(x->value("sluice_records_consumed_total", dst), kRecords);
    EXPECT_EQ(x->value("sluice_bytes_consumed_total", dst), kRecords * kRecordBytes);
  }
  EXPECT_EQ(running.value("sluice_rank_state", {{"rank", "0"}, {"state", "alive"}}), 1);
  // After it left: its final report (the endpoints destroyed, ended) stays.
  EXPECT_EQ(after.value("sluice_rank_state", {{"rank", "0"}, {"state", "left"}}), 1);
  EXPECT_EQ(after.value("sluice_ranks", {{"state", "left"}}), 1);
  auto ended = src;
  ended["state"] = "ended";
  EXPECT_EQ(after.value("sluice_endpoint_state", ended), 1);
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// --metrics binds to loopback unless told otherwise: a bare port is that
// port on 127.0.0.1 (it was read as a host name), and every interface is
// served only with a warning.
TEST(SluiceRunMetricsTest, ABarePortIsLoopbackAndEveryInterfaceWarns) {
  const std::string sluice = testing::bin("sluice");
  for (const std::string& bare : {std::string("0"), std::string(":0")}) {
    const testing::ProcessResult r =
        run_process({sluice, "run", "-n", "1", "--metrics", bare, "--", "/bin/true"}, {},
                    std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::regex_search(
        r.output, std::regex(R"(Prometheus metrics at http://127\.0\.0\.1:[0-9]+/)")))
        << bare << ": " << r.output;
    EXPECT_EQ(r.output.find("every interface"), std::string::npos) << r.output;
  }
  const testing::ProcessResult all =
      run_process({sluice, "run", "-n", "1", "--metrics", "0.0.0.0:0", "--", "/bin/true"}, {},
                  std::chrono::seconds(60));
  EXPECT_EQ(all.exit_code, 0) << all.output;
  EXPECT_NE(all.output.find("--metrics 0.0.0.0:0: the metrics endpoint listens on every interface"),
            std::string::npos)
      << all.output;
}

}  // namespace
}  // namespace sluice::metrics_test
