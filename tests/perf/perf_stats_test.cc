// Tests the pure logic of `sluice perf` (tools/sluice/perf_stats.h):
// statistics, list parsing and the report's schema. No benchmark runs here.
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

TEST(ParseSizes, AcceptsACommaList) {
  EXPECT_EQ(parse_sizes("16,64,256,1024"), (std::vector<uint32_t>{16, 64, 256, 1024}));
  EXPECT_EQ(parse_sizes("24"), (std::vector<uint32_t>{24}));
  EXPECT_EQ(parse_sizes(" 16 , 32 "), (std::vector<uint32_t>{16, 32}));
}

TEST(ParseSizes, RejectsWhatIsNotANumber) {
  EXPECT_EQ(error_of([] { parse_sizes("12x"); }),
            "--sizes: '12x' is not a record size; use a comma list like 16,64");
  EXPECT_NE(error_of([] { parse_sizes("-16"); }).find("'-16' is not a record size"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("16,,64"); }).find("empty item"), std::string::npos);
}

TEST(ParseSizes, RejectsEmpty) {
  EXPECT_NE(error_of([] { parse_sizes(""); }).find("--sizes: no record sizes given"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("  "); }).find("no record sizes given"), std::string::npos);
}

TEST(ParseSizes, RejectsSizesThatAreNotCompiledInAndNamesTheAllowedOnes) {
  for (const char* bad : {"8", "12", "20", "1032", "4096", "0"}) {
    const std::string e = error_of([&] { parse_sizes(bad); });
    EXPECT_NE(e.find("is not supported"), std::string::npos) << bad;
    EXPECT_NE(e.find("multiples of 8 from 16 to 1024"), std::string::npos) << bad;
  }
}

TEST(ParseSizes, RejectsDuplicatesAndNamesTheOption) {
  EXPECT_NE(error_of([] { parse_sizes("64,64"); }).find("listed twice"), std::string::npos);
  EXPECT_EQ(error_of([] { parse_sizes("x", "--other"); }).rfind("--other: ", 0), 0u);
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

TEST(Report, HasTheSchemaFields) {
  Environment env{"host", 2, "Linux 6.1", "AMD EPYC", "2024-01-01T00:00:00Z", "unknown"};
  Result one;
  one.shape = {1, 1};
  one.record_bytes = 64;
  one.flow = {{1000, 1.0, 2.0}, {1000, 2.0, 4.0}, {1000, 4.0, 8.0}};
  one.baseline = {{1000, 0.5, 1.0}, {1000, 1.0, 2.0}, {1000, 2.0, 4.0}};
  Result two = one;
  two.shape = {2, 2};
  const nlohmann::json j = report_json(env, "sluice perf --smoke", {{"repeats", 3}}, {one, two},
                                       {BaselineRow{64, 1, {{1000, 1.0, 2.0}}}});
  for (const char* k : {"hostname", "nproc", "kernel", "cpu_model", "date", "git_commit"}) {
    EXPECT_TRUE(j["env"].contains(k)) << k;
  }
  EXPECT_EQ(j["command"], "sluice perf --smoke");
  ASSERT_EQ(j["results"].size(), 2u);
  const auto& r = j["results"][0];
  EXPECT_EQ(r["shape"], "1x1");
  EXPECT_EQ(r["record_bytes"], 64);
  for (const char* side : {"flow", "baseline"}) {
    for (const char* m : {"records_per_s", "gbytes_per_s", "records_per_cpu_s"}) {
      for (const char* f : {"median", "min", "max", "n"}) {
        EXPECT_TRUE(r[side][m].contains(f)) << side << "." << m << "." << f;
      }
    }
  }
  EXPECT_DOUBLE_EQ(r["flow"]["records_per_s"]["median"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(r["flow"]["records_per_s"]["min"].get<double>(), 250);
  EXPECT_DOUBLE_EQ(r["flow"]["gbytes_per_s"]["max"].get<double>(), 1000 * 64 / 1e9);
  EXPECT_DOUBLE_EQ(r["baseline"]["records_per_s"]["median"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(r["ratio"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["ratio_paired"]["median"].get<double>(), 0.5);
  EXPECT_TRUE(r.contains("baseline_note"));
  EXPECT_NE(j["results"][1]["baseline_note"].get<std::string>().find("same 1:1 ring"),
            std::string::npos);
  ASSERT_EQ(j["extra_baselines"].size(), 1u);
  EXPECT_EQ(j["extra_baselines"][0]["publish_every"], 1);
  EXPECT_FALSE(report_table(j).empty());
}

TEST(Report, OfiRowsNameTheirTransportSegmentAndPeer) {
  Environment env{"host", 2, "Linux 6.1", "AMD EPYC", "2024-01-01T00:00:00Z", "unknown"};
  Result r;
  r.shape = {1, 1};
  r.record_bytes = 1024;
  r.flow = {{1000, 1.0, 2.0}};
  r.baseline = {{1000, 0.8, 1.0}};
  r.transport = "ofi";
  r.segment_bytes = 65536;
  r.ring_segments = 16;
  r.peer = "tcp_stream";
  r.placement = "loopback 127.0.0.1";
  Result shm = r;
  shm.transport = "shm";
  shm.peer = "shm_ring";
  nlohmann::json j = report_json(env, "sluice perf", {}, {r, shm}, {});
  const auto& row = j["results"][0];
  EXPECT_EQ(row["transport"], "ofi");
  EXPECT_EQ(row["segment_bytes"], 65536);
  EXPECT_EQ(row["ring_segments"], 16);
  EXPECT_EQ(row["peer"], "tcp_stream");
  EXPECT_FALSE(row["baseline"].contains("publish_every"));
  EXPECT_NE(row["baseline_note"].get<std::string>().find("kernel TCP stream (loopback 127.0.0.1)"),
            std::string::npos);
  EXPECT_NE(row["baseline_note"].get<std::string>().find("writes of 64 records of 1024 B (65536 B"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(row["ratio"].get<double>(), 0.8);
  EXPECT_EQ(j["results"][1]["peer"], "shm_ring");
  EXPECT_EQ(j["results"][1]["baseline"]["publish_every"], 16);
  j["latency"] = nlohmann::json::array(
      {{{"transport", "ofi"},
        {"placement", "loopback 127.0.0.1"},
        {"flow", {{"rtt_us_median", summary_json({20, 19, 21, 3})}, {"rtt_us_p99", summary_json({30, 29, 31, 3})}}},
        {"tcp", {{"rtt_us_median", summary_json({10, 9, 11, 3})}, {"rtt_us_p99", summary_json({15, 14, 16, 3})}}},
        {"ratio", 2.0}}});
  j["fabtests"] = {{"fi_rma_bw", "not installed (Debian 12 does not package fabtests)"}};
  const std::string table = report_table(j);
  EXPECT_NE(table.find("flow transport ofi, segments of 65536 B x 16; peer tcp_stream"), std::string::npos);
  EXPECT_NE(table.find("flow transport shm"), std::string::npos);
  EXPECT_NE(table.find("tcp GB/s"), std::string::npos);
  EXPECT_NE(table.find("median 20.0 [19.0-21.0], p99 30.0"), std::string::npos);
  EXPECT_NE(table.find("fi_rma_bw: not installed"), std::string::npos);
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
}

TEST(ParseNetnsHosts, AcceptsTwoHosts) {
  const auto h = parse_netns_hosts("perfA=198.18.200.1, perfB=198.18.200.2");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], (NetnsHost{"perfA", "198.18.200.1"}));
  EXPECT_EQ(h[1], (NetnsHost{"perfB", "198.18.200.2"}));
}

TEST(ParseNetnsHosts, RejectsWhatIsNotTwoNamedIpv4Hosts) {
  EXPECT_NE(error_of([] { parse_netns_hosts(""); }).find("--netns: no hosts given"), std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=198.18.200.1"); }).find("exactly two hosts"), std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=1.2.3.4,b=1.2.3.5,c=1.2.3.6"); }).find("exactly two hosts"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a,b=1.2.3.4"); }).find("'a' is not NS=IP"), std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=1.2.3,b=1.2.3.4"); }).find("'1.2.3' is not a dotted IPv4"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=1.2.3.256,b=1.2.3.4"); }).find("not a dotted IPv4"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=1.2.3.4,b=host"); }).find("not a dotted IPv4"), std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a b=1.2.3.4,c=1.2.3.5"); }).find("may only hold"), std::string::npos);
  EXPECT_NE(error_of([] { parse_netns_hosts("a=1.2.3.4,a=1.2.3.5"); }).find("same namespace"), std::string::npos);
}

TEST(ParseFabtests, TakesTheMBPerSecColumnOfTheLastDataRow) {
  const char* out =
      "bytes   iters   total       time     MB/sec    usec/xfer   Mxfers/sec\n"
      "64k     10k     625m        0.21s    3120.45   21.00       0.05\n";
  EXPECT_DOUBLE_EQ(parse_fabtests_mbps(out), 3120.45);
  EXPECT_DOUBLE_EQ(parse_fabtests_mbps("fi_getinfo(): -61 (No data available)\n"), -1);
  EXPECT_DOUBLE_EQ(parse_fabtests_mbps(""), -1);
  EXPECT_DOUBLE_EQ(parse_fabtests_mbps("bytes iters total time MB/sec\n"), -1);
}

TEST(QuoteCommand, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(quote_command({"build/bin/sluice", "perf", "--sizes", "16,64"}),
            "build/bin/sluice perf --sizes 16,64");
  EXPECT_EQ(quote_command({"a b", "it's", ""}), "'a b' 'it'\\''s' ''");
}

}  // namespace
}  // namespace sluice::tool::perf
