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

TEST(QuoteCommand, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(quote_command({"build/bin/sluice", "perf", "--sizes", "16,64"}),
            "build/bin/sluice perf --sizes 16,64");
  EXPECT_EQ(quote_command({"a b", "it's", ""}), "'a b' 'it'\\''s' ''");
}

}  // namespace
}  // namespace sluice::tool::perf
