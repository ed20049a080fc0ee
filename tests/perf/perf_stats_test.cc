// Tests the pure logic of `sluice perf` (bench/perf/perf_stats.h):
// statistics, list parsing, the report's schema, ratios and goals. No
// benchmark runs here and no timing is asserted.
#include "perf_stats.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::tool::perf {
namespace {

TEST(Summarize, OddCountTakesTheMiddle) {
  Summary s = summarize({5, 1, 3});
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_EQ(s.n, 3u);
}

TEST(Summarize, EvenCountAveragesTheTwoMiddleValues) {
  Summary s = summarize({4, 1, 3, 10});
  EXPECT_DOUBLE_EQ(s.median, 3.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_EQ(s.n, 4u);
}

TEST(Summarize, SingleValueIsEverything) {
  Summary s = summarize({7.5});
  EXPECT_DOUBLE_EQ(s.median, 7.5);
  EXPECT_DOUBLE_EQ(s.min, 7.5);
  EXPECT_DOUBLE_EQ(s.max, 7.5);
  EXPECT_EQ(s.n, 1u);
}

TEST(Summarize, EmptyIsZeros) {
  Summary s = summarize({});
  EXPECT_EQ(s.n, 0u);
  EXPECT_DOUBLE_EQ(s.median, 0);
}

// The message thrown by `fn`, or "" if it did not throw invalid_argument.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ParseSizes, AcceptsACommaListWithKAndMSuffixes) {
  EXPECT_EQ(parse_sizes("8,64,256,1024"), (std::vector<uint32_t>{8, 64, 256, 1024}));
  EXPECT_EQ(parse_sizes("24"), (std::vector<uint32_t>{24}));
  EXPECT_EQ(parse_sizes(" 16 , 32 "), (std::vector<uint32_t>{16, 32}));
  EXPECT_EQ(parse_sizes("2k,64K,1m"), (std::vector<uint32_t>{2048, 65536, 1u << 20}));
  EXPECT_EQ(parse_sizes("1048576"), (std::vector<uint32_t>{1u << 20}));
}

TEST(ParseSizes, RejectsWhatIsNotANumber) {
  EXPECT_EQ(error_of([] { parse_sizes("12x"); }),
            "--sizes: '12x' is not a record size; use a comma list like 8,64,1k");
  EXPECT_NE(error_of([] { parse_sizes("-16"); }).find("'-16' is not a record size"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("16,,64"); }).find("empty item"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("k"); }).find("'k' is not a record size"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("99999999m"); }).find("is not supported"), std::string::npos);
}

TEST(ParseSizes, RejectsEmpty) {
  EXPECT_NE(error_of([] { parse_sizes(""); }).find("--sizes: no record sizes given"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("  "); }).find("no record sizes given"), std::string::npos);
}

TEST(ParseSizes, RejectsSizesThatAreNotCompiledInAndNamesTheAllowedOnes) {
  for (const char* bad : {"0", "4", "12", "20", "72", "96", "1032", "3000", "3k", "2m"}) {
    const std::string e = error_of([&] { parse_sizes(bad); });
    EXPECT_NE(e.find("is not supported"), std::string::npos) << bad;
    EXPECT_NE(e.find("8 to 64 in steps of 8, then powers of two up to 1 MiB"), std::string::npos)
        << bad;
  }
  EXPECT_TRUE(is_supported_record_size(8));
  EXPECT_TRUE(is_supported_record_size(24));
  EXPECT_TRUE(is_supported_record_size(128));
  EXPECT_TRUE(is_supported_record_size(4096));
  EXPECT_FALSE(is_supported_record_size(4104));
}

TEST(ParseSizes, RejectsDuplicatesAndNamesTheOption) {
  EXPECT_NE(error_of([] { parse_sizes("64,64"); }).find("listed twice"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("1k,1024"); }).find("listed twice"), std::string::npos);
  EXPECT_EQ(error_of([] { parse_sizes("x", "--other"); }).rfind("--other: ", 0), 0u);
}

TEST(ParseWords, AcceptsAllowedWordsOnce) {
  const std::vector<std::string> modes = {"bandwidth", "latency"};
  EXPECT_EQ(parse_words("latency,bandwidth", modes, "--modes"),
            (std::vector<std::string>{"latency", "bandwidth"}));
  EXPECT_EQ(error_of([&] { parse_words("bw", modes, "--modes"); }),
            "--modes: 'bw' is not one of bandwidth, latency");
  EXPECT_NE(
      error_of([&] { parse_words("latency,latency", modes, "--modes"); }).find("listed twice"),
      std::string::npos);
  EXPECT_NE(error_of([&] { parse_words("", modes, "--modes"); }).find("nothing given"),
            std::string::npos);
}

TEST(ParseShapes, AcceptsACommaList) {
  const std::vector<Shape> s = parse_shapes("1x1,2x2,4X1");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], (Shape{1, 1}));
  EXPECT_EQ(s[1], (Shape{2, 2}));
  EXPECT_EQ(s[2], (Shape{4, 1}));
  EXPECT_EQ(s[1].name(), "2x2");
}

TEST(ParseShapes, RejectsBadShapes) {
  for (const char* bad : {"1", "x1", "1x", "1x1x1", "ax2", "1-1"}) {
    EXPECT_NE(error_of([&] { parse_shapes(bad); }).find("is not a shape; use SOURCESxTARGETS"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of([] { parse_shapes("0x1"); }).find("must each be 1 to 64"), std::string::npos);
  EXPECT_NE(error_of([] { parse_shapes("1x65"); }).find("must each be 1 to 64"), std::string::npos);
  EXPECT_NE(error_of([] { parse_shapes(""); }).find("--shapes: no shapes given"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_shapes("1x1,1x1"); }).find("listed twice"), std::string::npos);
}

// A sample of `records` records in `seconds`, with CPU split by side.
nlohmann::json sample(double records, double seconds, double src_cpu = 0.5, double tgt_cpu = 0.5) {
  return {{"records", records},
          {"seconds", seconds},
          {"cpu_seconds", src_cpu + tgt_cpu},
          {"src_cpu_seconds", src_cpu},
          {"tgt_cpu_seconds", tgt_cpu}};
}

nlohmann::json rtt_sample(double p50) {
  nlohmann::json s = sample(1000, 1);
  s["rtt_us_p50"] = p50;
  s["rtt_us_p99"] = p50 * 2;
  s["rtt_us_p999"] = p50 * 3;
  return s;
}

Series series(std::string name, std::string kind, std::string shape,
              std::vector<nlohmann::json> samples) {
  Series s;
  s.name = std::move(name);
  s.kind = std::move(kind);
  s.shape = std::move(shape);
  s.samples = std::move(samples);
  return s;
}

const ModeTraits kBandwidth{"bandwidth", "gbytes_per_s", true};
const ModeTraits kLatency{"latency", "rtt_us_p50", false};

TEST(DeriveMetrics, RatesAndCyclesPerRecordFromCpuTime) {
  const nlohmann::json m = derive_metrics(sample(1e6, 0.5, 0.25, 0.75), 64, 2.0);
  EXPECT_DOUBLE_EQ(m["records_per_s"].get<double>(), 2e6);
  EXPECT_DOUBLE_EQ(m["gbytes_per_s"].get<double>(), 2e6 * 64 / 1e9);
  EXPECT_DOUBLE_EQ(m["records_per_cpu_s"].get<double>(), 1e6);
  EXPECT_DOUBLE_EQ(m["src_cycles_per_record"].get<double>(), 0.25 * 2e9 / 1e6);
  EXPECT_DOUBLE_EQ(m["tgt_cycles_per_record"].get<double>(), 0.75 * 2e9 / 1e6);
  // Latency samples keep their round trips and have no bandwidth.
  const nlohmann::json l = derive_metrics(rtt_sample(1.5), 64, 0);
  EXPECT_DOUBLE_EQ(l["rtt_us_p50"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(l["rtt_us_p999"].get<double>(), 4.5);
  EXPECT_FALSE(l.contains("gbytes_per_s"));
  EXPECT_FALSE(l.contains("src_cycles_per_record"));  // no clock known
}

TEST(MetricsJson, SummarizesEveryMetricOverTheRepeats) {
  const nlohmann::json m =
      metrics_json({sample(1000, 1.0), sample(1000, 2.0), sample(1000, 4.0)}, 64, 1.0);
  for (const char* k : {"records_per_s", "gbytes_per_s", "records_per_cpu_s",
                        "src_cycles_per_record", "tgt_cycles_per_record"}) {
    for (const char* f : {"median", "min", "max", "n"})
      EXPECT_TRUE(m[k].contains(f)) << k << "." << f;
  }
  EXPECT_DOUBLE_EQ(m["records_per_s"]["median"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(m["records_per_s"]["min"].get<double>(), 250);
  EXPECT_DOUBLE_EQ(m["records_per_s"]["max"].get<double>(), 1000);
  EXPECT_EQ(m["runs"].size(), 3u);
}

TEST(PointJson, RatioToTheBestPeerOfTheSameShapeAndToTheFirstBound) {
  Point p;
  p.traits = kBandwidth;
  p.shape = {2, 2};
  p.record_bytes = 64;
  p.flow = series("sluice", "flow", "2x2", {sample(1000, 1), sample(1000, 1)});
  p.others = {series("shm_ring", "bound", "1x1", {sample(2000, 1), sample(4000, 1)}),
              series("memcpy", "bound", "1x1", {sample(10000, 1), sample(10000, 1)}),
              series("zmq_ipc", "peer", "1x1", {sample(4000, 1), sample(4000, 1)}),
              series("mpi_stream", "peer", "2x2", {sample(500, 1), sample(250, 1)})};
  const nlohmann::json r = point_json(p, 0);
  EXPECT_EQ(r["best_peer"], "mpi_stream");  // same shape wins over a faster 1x1 peer
  EXPECT_EQ(r["best_peer_shape"], "2x2");
  EXPECT_DOUBLE_EQ(r["ratio_to_best_peer"].get<double>(), 1000 / 375.0);
  EXPECT_DOUBLE_EQ(r["ratio_paired_to_best_peer"]["median"].get<double>(), (2.0 + 4.0) / 2);
  EXPECT_EQ(r["bound"], "shm_ring");
  EXPECT_DOUBLE_EQ(r["ratio_to_bound"].get<double>(), 1000 / 3000.0);
  ASSERT_EQ(r["peers"].size(), 4u);
  EXPECT_EQ(r["peers"][2]["name"], "zmq_ipc");
  EXPECT_DOUBLE_EQ(r["peers"][2]["ratio"].get<double>(), 0.25);
  EXPECT_EQ(r["shape"], "2x2");
  EXPECT_EQ(r["metric"], "gbytes_per_s");
}

TEST(PointJson, FallsBackToTheBest1x1PeerAndSaysSo) {
  Point p;
  p.traits = kBandwidth;
  p.shape = {2, 1};
  p.record_bytes = 8;
  p.flow = series("sluice", "flow", "2x1", {sample(1000, 1)});
  p.others = {series("tcp_stream", "peer", "1x1", {sample(100, 1)}),
              series("ucx_posix_put_bw", "peer", "1x1", {sample(200, 1)}),
              series("mpi_stream", "peer", "4x4", {sample(900, 1)})};
  const nlohmann::json r = point_json(p, 0);
  EXPECT_EQ(r["best_peer"], "ucx_posix_put_bw");
  EXPECT_EQ(r["best_peer_shape"], "1x1");
  EXPECT_DOUBLE_EQ(r["ratio_to_best_peer"].get<double>(), 5);
  EXPECT_TRUE(r["bound"].is_null());
  EXPECT_TRUE(r["ratio_to_bound"].is_null());
}

TEST(PointJson, LatencyRatiosAreTheirRoundTripOverTheFlows) {
  Point p;
  p.traits = kLatency;
  p.shape = {1, 1};
  p.record_bytes = 64;
  p.flow = series("sluice", "flow", "1x1", {rtt_sample(2.0)});
  p.others = {series("shm_pingpong", "bound", "1x1", {rtt_sample(1.0)}),
              series("tcp_pingpong", "peer", "1x1", {rtt_sample(10.0)}),
              series("mpi_pingpong", "peer", "1x1", {rtt_sample(3.0)})};
  const nlohmann::json r = point_json(p, 0);
  EXPECT_EQ(r["best_peer"], "mpi_pingpong");
  EXPECT_DOUBLE_EQ(r["ratio_to_best_peer"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r["ratio_to_bound"].get<double>(), 0.5);
  EXPECT_FALSE(r["higher_is_better"].get<bool>());
}

TEST(PointJson, NoPeersGivesNulls) {
  Point p;
  p.shape = {1, 1};
  p.record_bytes = 64;
  p.flow = series("sluice", "flow", "1x1", {sample(1000, 1)});
  const nlohmann::json r = point_json(p, 0);
  EXPECT_TRUE(r["best_peer"].is_null());
  EXPECT_TRUE(r["ratio_to_best_peer"].is_null());
  EXPECT_TRUE(r["ratio_paired_to_best_peer"].is_null());
}

// The goal whose text starts so (a copy: goals_json returns a temporary).
nlohmann::json goal(const nlohmann::json& goals, const std::string& starts_with) {
  for (const auto& g : goals)
    if (g["goal"].get<std::string>().rfind(starts_with, 0) == 0) return g;
  return nullptr;
}

TEST(Goals, StreamingGoalNeedsEveryPeerZeroMqTenfoldAndHalfTheRing) {
  Point p;
  p.shape = {1, 1};
  p.record_bytes = 64;
  p.flow = series("sluice", "flow", "1x1", {sample(1000, 1)});
  p.others = {series("shm_ring", "bound", "1x1", {sample(1500, 1)}),
              series("zmq_ipc_push_pull", "peer", "1x1", {sample(90, 1)}),
              series("tcp_stream", "peer", "1x1", {sample(500, 1)})};
  nlohmann::json results = nlohmann::json::array({point_json(p, 0)});
  nlohmann::json g = goal(goals_json(results, 2), "intra-host streaming");
  ASSERT_FALSE(g.is_null());
  EXPECT_EQ(g["met"], true);
  EXPECT_DOUBLE_EQ(g["checks"][0]["ratio_to_ring"].get<double>(), 1000 / 1500.0);
  p.others[1] =
      series("zmq_ipc_push_pull", "peer", "1x1", {sample(200, 1)});  // only 5x ahead of ZeroMQ
  results = nlohmann::json::array({point_json(p, 0)});
  EXPECT_EQ((goal(goals_json(results, 2), "intra-host streaming"))["met"], false);
  // Records over 256 B are not part of it: nothing measured.
  p.record_bytes = 1024;
  results = nlohmann::json::array({point_json(p, 0)});
  EXPECT_TRUE((goal(goals_json(results, 2), "intra-host streaming"))["met"].is_null());
}

TEST(Goals, LatencyGoalIsWithinOneAndAHalfOfThePingPongBoundAndBelowEveryPeer) {
  Point p;
  p.traits = kLatency;
  p.shape = {1, 1};
  p.record_bytes = 64;
  p.flow = series("sluice", "flow", "1x1", {rtt_sample(1.4)});
  p.others = {series("shm_pingpong", "bound", "1x1", {rtt_sample(1.0)}),
              series("mpi_pingpong", "peer", "1x1", {rtt_sample(2.0)})};
  nlohmann::json results = nlohmann::json::array({point_json(p, 0)});
  nlohmann::json g = goal(goals_json(results, 2), "intra-host latency");
  EXPECT_EQ(g["met"], true);
  EXPECT_DOUBLE_EQ(g["checks"][0]["times_bound"].get<double>(), 1.4);
  p.flow = series("sluice", "flow", "1x1", {rtt_sample(1.6)});
  results = nlohmann::json::array({point_json(p, 0)});
  EXPECT_EQ((goal(goals_json(results, 2), "intra-host latency"))["met"], false);
}

TEST(Goals, OfiGoalComparesLoopbackSegmentsOf64KiBWithTheTcpStream) {
  Point p;
  p.transport = "ofi";
  p.placement = "loopback 127.0.0.1";
  p.shape = {1, 1};
  p.record_bytes = 1024;
  p.segment_bytes = 65536;
  p.flow = series("sluice", "flow", "1x1", {sample(850, 1)});
  p.others = {series("tcp_stream", "peer", "1x1", {sample(1000, 1)})};
  Point small = p;
  small.segment_bytes = 8192;  // not part of the goal
  small.flow = series("sluice", "flow", "1x1", {sample(100, 1)});
  const nlohmann::json results = nlohmann::json::array({point_json(p, 0), point_json(small, 0)});
  nlohmann::json g = goal(goals_json(results, 2), "loopback ofi");
  EXPECT_EQ(g["met"], true);
  ASSERT_EQ(g["checks"].size(), 1u);
  EXPECT_DOUBLE_EQ(g["checks"][0]["ratio_to_tcp_stream"].get<double>(), 0.85);
}

TEST(Goals, ScaleOutIsPerUsableCoreAgainst1x1) {
  auto point = [](Shape s, double records) {
    Point p;
    p.shape = s;
    p.record_bytes = 64;
    p.flow = series("sluice", "flow", s.name(), {sample(records, 1)});
    return point_json(p, 0);
  };
  // On 2 CPUs every shape has 2 usable cores: 4x4 must keep 80% of 1x1's rate.
  nlohmann::json results =
      nlohmann::json::array({point({1, 1}, 1000), point({2, 2}, 900), point({4, 4}, 700)});
  nlohmann::json g = goal(goals_json(results, 2), "N:M shuffle scale-out");
  ASSERT_EQ(g["checks"].size(), 2u);
  EXPECT_EQ(g["checks"][0]["met"], true);
  EXPECT_EQ(g["checks"][1]["met"], false);
  EXPECT_DOUBLE_EQ(g["checks"][1]["per_core_efficiency_vs_1x1"].get<double>(), 0.7);
  EXPECT_EQ(g["met"], false);
  // With 16 CPUs a 4x4 job has 8 cores, 1x1 has 2.
  g = goal(goals_json(results, 16), "N:M shuffle scale-out");
  EXPECT_DOUBLE_EQ(g["checks"][1]["per_core_efficiency_vs_1x1"].get<double>(),
                   (700.0 / 8) / (1000.0 / 2));
}

TEST(Report, HasTheSchemaFieldsAndATable) {
  Environment env{"host", 2, "Linux 6.1", "AMD EPYC", 2.5, "2024-01-01T00:00:00Z", "unknown"};
  Point p;
  p.shape = {1, 1};
  p.record_bytes = 64;
  p.flow = series("sluice", "flow", "1x1", {sample(1000, 1)});
  p.others = {series("shm_ring", "bound", "1x1", {sample(1500, 1)})};
  Point l = p;
  l.traits = kLatency;
  l.flow = series("sluice", "flow", "1x1", {rtt_sample(1.0)});
  l.others = {series("shm_pingpong", "bound", "1x1", {rtt_sample(0.8)}),
              series("tcp_pingpong", "peer", "1x1", {rtt_sample(10)})};
  const nlohmann::json skipped =
      nlohmann::json::array({{{"name", "fabtests"}, {"why", "not installed"}}});
  const nlohmann::json j =
      report_json(env, "sluice perf --smoke", {{"repeats", 1}}, {p, l}, skipped);
  for (const char* k :
       {"hostname", "nproc", "kernel", "cpu_model", "cpu_ghz", "date", "git_commit"}) {
    EXPECT_TRUE(j["env"].contains(k)) << k;
  }
  EXPECT_EQ(j["command"], "sluice perf --smoke");
  EXPECT_EQ(j["config"]["repeats"], 1);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][1]["mode"], "latency");
  EXPECT_EQ(j["skipped"][0]["name"], "fabtests");
  EXPECT_EQ(j["goals"].size(), 4u);
  const std::string table = report_table(j);
  EXPECT_NE(table.find("bandwidth mode, transport shm (one host)"), std::string::npos);
  EXPECT_NE(table.find("latency mode, transport shm (one host)"), std::string::npos);
  EXPECT_NE(table.find("rtt us p50"), std::string::npos);
  EXPECT_NE(table.find("skipped fabtests: not installed"), std::string::npos);
  EXPECT_NE(table.find("[MET] intra-host latency"), std::string::npos);
}

TEST(RoundTrips, CappedAt256MiBOfRecordsAndNeverBelow100) {
  EXPECT_EQ(round_trips_for(10000, 64), 10000u);
  EXPECT_EQ(round_trips_for(10000, 1u << 20), 256u);
  EXPECT_EQ(round_trips_for(50, 64), 50u);  // what was asked, if less
  EXPECT_EQ(round_trips_for(10000, 1u << 20) >= 100, true);
}

TEST(Percentile, NearestRank) {
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // 1..100, unsorted
  EXPECT_DOUBLE_EQ(percentile(v, 50), 50);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 99);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 100);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3}, 50), 2);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 99), 4);
  std::vector<double> w;
  for (int i = 1; i <= 2000; ++i) w.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(w, 99.9), 1998);
}

TEST(ParseNetnsHosts, AcceptsTwoHosts) {
  const auto h = parse_netns_hosts("perfA=198.18.200.1, perfB=198.18.200.2");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], (NetnsHost{"perfA", "198.18.200.1"}));
  EXPECT_EQ(h[1], (NetnsHost{"perfB", "198.18.200.2"}));
}

TEST(ParseNetnsHosts, RejectsWhatIsNotTwoNamedIpv4Hosts) {
  EXPECT_NE(error_of([] { parse_netns_hosts(""); }).find("--netns: no hosts given"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=198.18.200.1"); }).find("exactly two hosts"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_netns_hosts("a=1.2.3.4,b=1.2.3.5,c=1.2.3.6");
            }).find("exactly two hosts"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a,b=1.2.3.4"); }).find("'a' is not NS=IP"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { parse_netns_hosts("a=1.2.3,b=1.2.3.4"); }).find("'1.2.3' is not a dotted IPv4"),
      std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=1.2.3.256,b=1.2.3.4"); }).find("not a dotted IPv4"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=1.2.3.4,b=host"); }).find("not a dotted IPv4"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a b=1.2.3.4,c=1.2.3.5"); }).find("may only hold"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=1.2.3.4,a=1.2.3.5"); }).find("same namespace"),
            std::string::npos);
}

TEST(QuoteCommand, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(quote_command({"build/bin/sluice", "perf", "--sizes", "16,64"}),
            "build/bin/sluice perf --sizes 16,64");
  EXPECT_EQ(quote_command({"a b", "it's", ""}), "'a b' 'it'\\''s' ''");
}

}  // namespace
}  // namespace sluice::tool::perf
