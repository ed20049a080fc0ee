// The pieces of the Prometheus endpoint without a network: the tests' strict
// parser refuses what it must (so that passing it means something), the
// COUNTERS report decodes only well-formed payloads and says what is wrong
// with the others, and the registry's exposition of hostile flow names and
// causes parses back to exactly those names.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "control/metrics.h"
#include "control/protocol.h"
#include "exposition_parser.h"

namespace sluice::metrics_test {
namespace {

using control::CountersMsg;
using control::EndpointCounters;
using control::JobMetrics;
using control::RankView;

const std::string kGood =
    "# HELP a_total Things.\n"
    "# TYPE a_total counter\n"
    "a_total{x=\"1\",y=\"q\\\"\\\\\\n\"} 3\n"
    "a_total{x=\"2\",} 4 1700000000000\n"
    "# a comment\n"
    "# HELP b Level.\n"
    "# TYPE b gauge\n"
    "b 1.5e3\n"
    "b{z=\"\"} -Inf\n";

TEST(ExpositionParserTest, AcceptsTheFormatAndUnescapesLabelValues) {
  const Exposition x = parse_exposition(kGood);
  ASSERT_EQ(x.families.size(), 2u);
  EXPECT_EQ(x.families.at("a_total").type, "counter");
  EXPECT_EQ(x.families.at("a_total").help, "Things.");
  EXPECT_EQ(x.value("a_total", {{"x", "1"}}), 3);
  EXPECT_EQ(x.find("a_total", {{"x", "1"}})[0].labels.at("y"), "q\"\\\n");
  EXPECT_EQ(x.value("a_total", {{"x", "2"}}), 4);
  EXPECT_EQ(x.value("b", {{"z", ""}}), -INFINITY);
  EXPECT_EQ(x.find("b").size(), 2u);
}

TEST(ExpositionParserTest, RejectsWhatPrometheusOrAWellBehavedExporterWouldNot) {
  const std::string head = "# HELP m_total M.\n# TYPE m_total counter\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"no final newline", head + "m_total 1"},
      {"blank line", head + "\nm_total 1\n"},
      {"carriage return", head + "m_total 1\r\n"},
      {"no TYPE", "# HELP m_total M.\nm_total 1\n"},
      {"no HELP", "# TYPE m_total counter\nm_total 1\n"},
      {"second TYPE", head + "# TYPE m_total counter\nm_total 1\n"},
      {"TYPE after a sample", "# HELP m_total M.\nm_total 1\n# TYPE m_total counter\n"},
      {"unknown type", "# HELP m M.\n# TYPE m thing\nm 1\n"},
      {"bad escape", head + "m_total{a=\"\\t\"} 1\n"},
      {"unterminated value", head + "m_total{a=\"x} 1\n"},
      {"bad label name", head + "m_total{1a=\"x\"} 1\n"},
      {"reserved label name", head + "m_total{__a=\"x\"} 1\n"},
      {"repeated label", head + "m_total{a=\"x\",a=\"y\"} 1\n"},
      {"repeated series", head + "m_total{a=\"x\"} 1\nm_total{a=\"x\"} 2\n"},
      {"bad value", head + "m_total 1,5\n"},
      {"two spaces", head + "m_total  1\n"},
      {"bad timestamp", head + "m_total 1 1.5\n"},
      {"negative counter", head + "m_total -1\n"},
      {"counter without _total", "# HELP m M.\n# TYPE m counter\nm 1\n"},
      {"not contiguous", head + "m_total{a=\"1\"} 1\n# HELP g G.\n# TYPE g gauge\ng 1\n"
                                "m_total{a=\"2\"} 1\n"},
      {"invalid UTF-8", head + "m_total{a=\"\xff\"} 1\n"},
      {"bad metric name", "# HELP 1m M.\n# TYPE 1m gauge\n1m 1\n"},
  };
  for (const auto& [what, text] : bad) {
    EXPECT_THROW(parse_exposition(text), std::runtime_error) << what;
  }
}

EndpointCounters endpoint(const std::string& flow, uint8_t role, uint32_t rank, uint64_t bytes) {
  EndpointCounters e;
  e.flow = flow;
  e.role = role;
  e.rank = rank;
  e.slot = 0;
  e.peers = 2;
  e.record_size = 16;
  e.state = 3;
  e.segments = 7;
  e.bytes = bytes;
  e.credit_waits = 2;
  e.credit_wait_ns = 1500000000;
  e.parks = 5;
  e.opened_ns = 1700000000123000000ULL;
  return e;
}

TEST(CountersReportTest, RoundTripsAndRejectsEveryMalformedPayloadWithAReason) {
  CountersMsg m;
  m.endpoints = {endpoint("orders", 1, 0, 160), endpoint("orders", 2, 0, 320)};
  CountersMsg back;
  std::string problem;
  ASSERT_TRUE(decode(encode(m), &back, &problem)) << problem;
  ASSERT_EQ(back.endpoints.size(), 2u);
  EXPECT_EQ(back.endpoints[1].flow, "orders");
  EXPECT_EQ(back.endpoints[1].bytes, 320u);
  EXPECT_EQ(back.endpoints[1].credit_wait_ns, 1500000000u);

  const std::string good = encode(m);
  auto with_byte = [&](size_t at, char v) {
    std::string s = good;
    s[at] = v;
    return s;
  };
  // Offsets: u16 format, u32 n, then the first entry: u32 flow length and
  // "orders" (6), u8 role at 16, four u32, u8 state at 33.
  const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
      {"empty", "", "too short"},
      {"other format", with_byte(0, 9), "format 9"},
      {"huge count", with_byte(5, 0x7f), "claims"},
      {"role 7", with_byte(16, 7), "role 7"},
      {"state 0", with_byte(33, 0), "state 0"},
      {"cut short", good.substr(0, good.size() - 3), "cut short"},
      {"trailing bytes", good + "xx", "2 bytes follow"},
      {"flow length past the end", with_byte(9, 0x7f), "flow name"},
  };
  for (const auto& [what, payload, says] : bad) {
    std::string why;
    EXPECT_FALSE(decode(payload, &back, &why)) << what;
    EXPECT_NE(why.find(says), std::string::npos) << what << ": " << why;
  }
  // A flow name longer than the limit is refused by the decoder; the
  // encoder cuts it so that what it writes always decodes.
  CountersMsg long_name;
  long_name.endpoints = {endpoint(std::string(300, 'f'), 1, 0, 16)};
  ASSERT_TRUE(decode(encode(long_name), &back, &problem)) << problem;
  EXPECT_EQ(back.endpoints[0].flow.size(), control::kMaxCountersText);
}

// Format 2 adds operation counts, the peers one by one and region handles;
// a format 1 report (a rank of an older build) still reads.
TEST(CountersReportTest, FormatTwoCarriesPeersAndOperationsAndFormatOneStillReads) {
  CountersMsg m;
  EndpointCounters target = endpoint("orders", 2, 0, 320);
  target.peer_detail = {{0, 0, 1700000000123456789ULL, 1}, {1, 0, 0, 0}};
  EndpointCounters region = endpoint("accounts", 3, 0, 800);
  region.slot = 4;
  region.ops = 100;
  region.op_timeouts = 2;
  region.op_failures = 1;
  target.ring_segments = 16;
  EndpointCounters source = endpoint("orders", 1, 0, 320);
  source.ring_segments = 16;
  source.ring_fill = 5;
  source.park_ns = 2500000000;
  region.peer_detail = {{0, 0, 0, 0}};
  m.endpoints = {target, region, source};
  CountersMsg back;
  std::string problem;
  ASSERT_TRUE(decode(encode(m), &back, &problem)) << problem;
  ASSERT_EQ(back.endpoints.size(), 3u);
  EXPECT_EQ(back.endpoints[2].ring_segments, 16u);
  EXPECT_EQ(back.endpoints[2].ring_fill, 5u);
  EXPECT_EQ(back.endpoints[2].park_ns, 2500000000u);
  ASSERT_EQ(back.endpoints[0].peer_detail.size(), 2u);
  EXPECT_EQ(back.endpoints[0].peer_detail[0].heard_ns, 1700000000123456789ULL);
  EXPECT_EQ(back.endpoints[0].peer_detail[0].ended, 1);
  EXPECT_EQ(back.endpoints[0].peer_detail[1].rank, 1u);
  EXPECT_EQ(back.endpoints[1].role, 3);
  EXPECT_EQ(back.endpoints[1].ops, 100u);
  EXPECT_EQ(back.endpoints[1].op_timeouts, 2u);
  EXPECT_EQ(back.endpoints[1].op_failures, 1u);

  // Rendered: a peer series per described source of the target, and the
  // region's own families (not the flow endpoint ones).
  JobMetrics metrics(1);
  ASSERT_TRUE(metrics.report(0, encode(m), &problem)) << problem;
  metrics.view_changed("died");
  metrics.view_changed("rejoined");
  metrics.view_changed("died");
  metrics.view_changed("vanished");  // not a cause: not counted
  const Exposition x = parse_exposition(metrics.render("h:1", {RankView{"alive", "h", 0.5}}, 3, 2));
  EXPECT_EQ(x.value("sluice_membership_epoch", {}), 3);  // the view's epoch, as given
  EXPECT_EQ(x.value("sluice_spares_waiting", {}), 2);
  EXPECT_EQ(x.value("sluice_membership_view_changes_total", {{"cause", "died"}}), 2);
  EXPECT_EQ(x.value("sluice_membership_view_changes_total", {{"cause", "left"}}), 0);
  EXPECT_EQ(x.value("sluice_membership_view_changes_total", {{"cause", "rejoined"}}), 1);
  EXPECT_TRUE(x.find("sluice_membership_view_changes_total", {{"cause", "vanished"}}).empty());
  EXPECT_EQ(x.value("sluice_peer_ended", {{"peer", "(0,0)"}}), 1);
  EXPECT_EQ(x.value("sluice_peer_ended", {{"peer", "(1,0)"}}), 0);
  EXPECT_NEAR(x.value("sluice_peer_last_heard_timestamp_seconds", {{"peer", "(0,0)"}}),
              1700000000.123, 0.001);
  EXPECT_TRUE(x.find("sluice_peer_last_heard_timestamp_seconds", {{"peer", "(1,0)"}}).empty());
  const std::map<std::string, std::string> r = {
      {"region", "accounts"}, {"owner", "0"}, {"handle", "4"}};
  EXPECT_EQ(x.value("sluice_region_operations_total", r), 100);
  EXPECT_EQ(x.value("sluice_region_bytes_total", r), 800);
  EXPECT_EQ(x.value("sluice_region_timeouts_total", r), 2);
  EXPECT_EQ(x.value("sluice_region_failures_total", r), 1);
  EXPECT_TRUE(x.find("sluice_endpoint_state", {{"flow", "accounts"}}).empty());
  EXPECT_EQ(x.find("sluice_endpoint_state", {{"state", "open"}}).size(), 2u);
  // Ring size for both flow endpoints, the fill for the source only.
  EXPECT_EQ(x.find("sluice_ring_segments").size(), 2u);
  EXPECT_EQ(x.value("sluice_ring_fill_segments", {{"role", "source"}}), 5);
  EXPECT_EQ(x.value("sluice_park_seconds_total", {{"role", "source"}}), 2.5);
  EXPECT_TRUE(x.find("sluice_ring_fill_segments", {{"role", "target"}}).empty());

  // Format 1: the same report without the format 2 fields, and no role 3.
  CountersMsg old;
  old.format = 1;
  old.endpoints = {endpoint("orders", 1, 0, 160)};
  old.endpoints[0].ops = 7;  // not written in format 1
  ASSERT_TRUE(decode(encode(old), &back, &problem)) << problem;
  EXPECT_EQ(back.format, 1);
  EXPECT_EQ(back.endpoints[0].bytes, 160u);
  EXPECT_EQ(back.endpoints[0].ops, 0u);
  old.endpoints[0].role = 3;
  EXPECT_FALSE(decode(encode(old), &back, &problem));
  EXPECT_NE(problem.find("role 3"), std::string::npos) << problem;

  // Too many peers, or an ended flag that is not 0 or 1, is malformed.
  const std::string good = encode(m);
  // The first entry ends with: u8 peer count, then 2 peers of 17 bytes.
  const size_t first_peers = 2 + 4 + (4 + 6) + 1 + 4 * 4 + 1 + 4 + 6 * 8 + 3 * 8 + 4 + 8 + 8;
  ASSERT_EQ(static_cast<uint8_t>(good[first_peers]), 2);
  std::string many = good;
  many[first_peers] = 17;
  EXPECT_FALSE(decode(many, &back, &problem));
  EXPECT_NE(problem.find("more than 16 peers"), std::string::npos) << problem;
  std::string bad_flag = good;
  bad_flag[first_peers + 1 + 16] = 2;
  EXPECT_FALSE(decode(bad_flag, &back, &problem));
  EXPECT_NE(problem.find("neither 0 nor 1"), std::string::npos) << problem;
}

TEST(JobMetricsTest, HostileNamesAndCausesParseBackExactly) {
  JobMetrics metrics(2);
  CountersMsg m;
  const std::string weird = "we\"ird\\name\nline";
  EndpointCounters failed = endpoint(weird, 2, 0, 48);
  failed.state = 4;
  failed.cause = "peer \"(1,0)\" lost\\ gone\nfor good";
  EndpointCounters bytes_flow = endpoint("raw\xff", 1, 0, 1000);
  bytes_flow.record_size = 0;  // byte records: no record count
  m.endpoints = {failed, bytes_flow};
  std::string problem;
  ASSERT_TRUE(metrics.report(0, encode(m), &problem)) << problem;
  EXPECT_FALSE(metrics.report(1, "garbage", &problem));
  EXPECT_FALSE(metrics.report(7, encode(m), &problem));

  std::vector<RankView> ranks(2);
  ranks[0] = RankView{"alive", "host\"a", 0.25};
  const std::string text = metrics.render("127.0.0.1:1", ranks);
  const Exposition x = parse_exposition(text);

  EXPECT_EQ(x.value("sluice_records_consumed_total", {{"flow", weird}, {"rank", "0"}}), 3);
  EXPECT_EQ(x.value("sluice_bytes_consumed_total", {{"flow", weird}}), 48);
  EXPECT_EQ(x.value("sluice_endpoint_state", {{"flow", weird}, {"state", "failed"}}), 1);
  EXPECT_EQ(x.value("sluice_endpoint_state", {{"flow", weird}, {"state", "ended"}}), 0);
  EXPECT_EQ(x.value("sluice_endpoint_failure_info", {{"cause", failed.cause}}), 1);
  // Invalid UTF-8 becomes U+FFFD, which Prometheus accepts.
  EXPECT_EQ(x.value("sluice_bytes_pushed_total", {{"flow", "raw\xEF\xBF\xBD"}}), 1000);
  EXPECT_TRUE(x.find("sluice_records_pushed_total").empty());
  EXPECT_EQ(x.value("sluice_credit_wait_seconds_total", {{"role", "source"}}), 1.5);
  EXPECT_EQ(x.value("sluice_endpoint_opened_timestamp_seconds", {{"role", "source"}}),
            1700000000.123);
  EXPECT_EQ(x.value("sluice_ranks", {{"state", "alive"}}), 1);
  EXPECT_EQ(x.value("sluice_ranks", {{"state", "absent"}}), 1);
  EXPECT_EQ(x.value("sluice_rank_state", {{"rank", "0"}, {"host", "host\"a"}, {"state", "alive"}}),
            1);
  EXPECT_EQ(x.value("sluice_rank_last_heartbeat_age_seconds", {{"rank", "0"}}), 0.25);
  EXPECT_TRUE(x.find("sluice_rank_last_heartbeat_age_seconds", {{"rank", "1"}}).empty());
  EXPECT_EQ(x.value("sluice_counters_reports_total", {{"job", "127.0.0.1:1"}}), 1);
  EXPECT_EQ(x.value("sluice_counters_reports_rejected_total", {}), 2);
  EXPECT_EQ(x.value("sluice_rank_endpoints", {{"rank", "0"}}), 2);
}

TEST(JobMetricsTest, LabelValuesAreEscapedAndCleaned) {
  EXPECT_EQ(control::escape_label_value("a\\b\"c\nd\te"), "a\\\\b\\\"c\\nd\te");
  // Control characters the format cannot escape, and invalid UTF-8, become U+FFFD.
  EXPECT_EQ(control::escape_label_value(std::string("a\rb\0c\xc3", 6)),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c\xEF\xBF\xBD");
  EXPECT_EQ(control::escape_label_value("caf\xC3\xA9 \xF0\x9F\x93\x88"),
            "caf\xC3\xA9 \xF0\x9F\x93\x88");
}

TEST(JobMetricsTest, AnEndpointReportedTwiceIsOneSeries) {
  JobMetrics metrics(1);
  CountersMsg m;
  m.endpoints = {endpoint("f", 1, 0, 16), endpoint("f", 1, 0, 32)};  // live first, then retired
  std::string problem;
  ASSERT_TRUE(metrics.report(0, encode(m), &problem)) << problem;
  const Exposition x = parse_exposition(metrics.render("j", std::vector<RankView>(1)));
  EXPECT_EQ(x.value("sluice_bytes_pushed_total", {{"flow", "f"}}), 16);
}

// Random damage to a valid report (bytes changed, cut, inserted): the
// decoder never reads out of bounds (the ASan build would say), everything
// it accepts re-encodes to the same bytes, and whatever the registry
// accepts, flow names of arbitrary bytes included, renders to an
// exposition the strict parser accepts.
TEST(CountersReportTest, DamagedReportsAreRejectedOrRenderStrictlyValidText) {
  CountersMsg m;
  m.endpoints = {endpoint("orders", 1, 0, 160), endpoint("lines", 2, 1, 320),
                 endpoint("x", 1, 2, 48)};
  m.endpoints[2].state = 4;
  m.endpoints[2].cause = "lost \"(1,0)\"";
  const std::string good = encode(m);
  std::mt19937 rng(2026);
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string p = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % p.size();
      switch (rng() % 3) {
        case 0:
          p[at] = static_cast<char>(rng() & 0xff);
          break;
        case 1:
          p.resize(at);
          break;
        default:
          p.insert(at, 1, static_cast<char>(rng() & 0xff));
          break;
      }
      if (p.empty()) p.assign(1, '\x01');
    }
    CountersMsg back;
    std::string problem;
    if (!decode(p, &back, &problem)) {
      EXPECT_FALSE(problem.empty());
      continue;
    }
    ++accepted;
    ASSERT_EQ(encode(back), p) << "a decoded report re-encodes differently";
    JobMetrics metrics(3);
    ASSERT_TRUE(metrics.report(1, p, &problem)) << problem;
    const std::string text = metrics.render("127.0.0.1:1", std::vector<RankView>(3));
    ASSERT_NO_THROW(parse_exposition(text)) << text;
  }
  // Byte changes inside names and counters keep a report valid often enough
  // for the rendering half of the test to have been exercised.
  EXPECT_GT(accepted, 1000u);
}

}  // namespace
}  // namespace sluice::metrics_test
