// CSV input that is never trusted (stream/csv.h, stream/file_source.h), in
// process: the header must name the schema's columns (read by name, in any
// order), --no-header means the schema's order, and every malformed file
// (empty, no line end, NUL bytes, a missing or extra field, a bad value)
// fails with the file, the line number, the column and the value, whichever
// worker's share of a shared file holds it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "stream/csv.h"
#include "stream/file_source.h"
#include "stream/follow_source.h"
#include "stream/nexmark.h"
#include "stream/workloads.h"

namespace ss = sluice::stream;

namespace {

class CsvInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("stream_csv_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // Every worker's part of `path` as bids, in worker order.
  static std::vector<ss::Bid> bids(const std::string& path, uint32_t workers, bool header = true) {
    ss::FileInput<ss::Bid> in(path, ss::FileFormat::kCsv, &ss::bid_csv_schema(), header);
    std::vector<ss::Bid> all;
    for (uint32_t g = 0; g < workers; ++g) {
      auto part = in.part(g, workers);
      all.insert(all.end(), part->begin(), part->end());
    }
    return all;
  }
  // The message bids() throws.
  static std::string error_of(const std::string& path, uint32_t workers = 1, bool header = true) {
    try {
      bids(path, workers, header);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "no error";
  }

  std::filesystem::path dir_;
};

bool same(const ss::Bid& b, uint64_t auction, uint64_t bidder, uint64_t price, int64_t time) {
  return b.auction == auction && b.bidder == bidder && b.price == price && b.time == time;
}

TEST_F(CsvInputTest, ColumnsAreReadByTheHeadersNamesInAnyOrder) {
  const auto in_order = bids(write("a.csv", "auction,bidder,price,time\n1,2,3,4\n5,6,7,8\n"), 1);
  ASSERT_EQ(in_order.size(), 2u);
  EXPECT_TRUE(same(in_order[0], 1, 2, 3, 4));
  EXPECT_TRUE(same(in_order[1], 5, 6, 7, 8));
  // Swapped columns, skipped columns, CRLF line ends and no final line end.
  const auto swapped =
      bids(write("b.csv", "time,seq,price,bidder,worker,auction\r\n4,0,3,2,0,1\r\n8,1,7,6,0,5"), 1);
  ASSERT_EQ(swapped.size(), 2u);
  EXPECT_TRUE(same(swapped[0], 1, 2, 3, 4));
  EXPECT_TRUE(same(swapped[1], 5, 6, 7, 8));
  // Without a header: the schema's order; blank lines are read past.
  const auto bare = bids(write("c.csv", "1,2,3,4\n\n5,6,7,-8\n"), 1, /*header=*/false);
  ASSERT_EQ(bare.size(), 2u);
  EXPECT_TRUE(same(bare[0], 1, 2, 3, 4));
  EXPECT_TRUE(same(bare[1], 5, 6, 7, -8));
}

TEST_F(CsvInputTest, AHeaderThatDoesNotNameTheSchemaIsRefusedSayingWhy) {
  const std::string cols = "the columns of bids are auction,bidder,price,time";
  std::string e = error_of(write("h1.csv", "auction,bidder,price\n1,2,3\n"));
  EXPECT_NE(e.find("h1.csv:1: the header lacks the column 'time' (" + cols), std::string::npos)
      << e;
  e = error_of(write("h2.csv", "auction,bidder,price,time,colour\n1,2,3,4,red\n"));
  EXPECT_NE(e.find("h2.csv:1: the header names a column 'colour' that is not a column of bids"),
            std::string::npos)
      << e;
  e = error_of(write("h3.csv", "auction,bidder,price,time,price\n1,2,3,4,5\n"));
  EXPECT_NE(e.find("h3.csv:1: the header names the column 'price' twice"), std::string::npos) << e;
  // A file without a header read as if it had one: the first record is not
  // silently taken for a header.
  e = error_of(write("h4.csv", "1,2,3,4\n5,6,7,8\n"));
  EXPECT_NE(e.find("h4.csv:1: the header names a column '1'"), std::string::npos) << e;
  EXPECT_NE(e.find("looks like a record: a file without a header needs --no-header"),
            std::string::npos)
      << e;
}

TEST_F(CsvInputTest, ABadLineNamesItsLineColumnAndValue) {
  const std::string header = "worker,seq,auction,bidder,price,time\n";
  std::string e = error_of(write("v1.csv", header + "0,0,1,2,3,4\n0,1,5,x6,7,8\n"));
  EXPECT_NE(e.find("v1.csv:3: column 4 (bidder): 'x6' is not an unsigned 64-bit integer"),
            std::string::npos)
      << e;
  // A sign on an unsigned column (not read as 2^64-7), a space, an overflow.
  e = error_of(write("v2.csv", header + "0,0,-7,2,3,4\n"));
  EXPECT_NE(e.find("v2.csv:2: column 3 (auction): '-7' is not an unsigned 64-bit integer"),
            std::string::npos)
      << e;
  e = error_of(write("v3.csv", header + "0,0,1,2,3, 4\n"));
  EXPECT_NE(e.find("v3.csv:2: column 6 (time): ' 4' is not a 64-bit integer"), std::string::npos)
      << e;
  e = error_of(write("v4.csv", header + "0,0,1,2,18446744073709551616,4\n"));
  EXPECT_NE(e.find("column 5 (price): '18446744073709551616' is not an unsigned 64-bit integer"),
            std::string::npos)
      << e;
  // A missing and an extra field.
  e = error_of(write("v5.csv", header + "0,0,1,2,3,4\n0,1,1,2,3\n"));
  EXPECT_NE(e.find("v5.csv:3: 5 fields where 6 are expected (the header's columns "
                   "worker,seq,auction,bidder,price,time)"),
            std::string::npos)
      << e;
  e = error_of(write("v6.csv", "1,2,3,4,5\n"), 1, /*header=*/false);
  EXPECT_NE(e.find("v6.csv:1: 5 fields where 4 are expected (without a header, the columns "
                   "auction,bidder,price,time)"),
            std::string::npos)
      << e;
  // Control bytes in a value are shown escaped.
  e = error_of(write("v7.csv", header + std::string("0,0,1,2,3,4\x01\n")));
  EXPECT_NE(e.find("column 6 (time): '4\\x01' is not a 64-bit integer"), std::string::npos) << e;
}

// In a file that workers share, the line number counts from the file's
// start, whichever worker's range holds the bad line.
TEST_F(CsvInputTest, LineNumbersCountFromTheFilesStartInEveryWorkersShare) {
  std::string text = "auction,bidder,price,time\n";
  for (int i = 0; i < 1000; ++i) {
    text += (i == 876 ? std::string("1,2,oops,4") : "1,2,3," + std::to_string(i)) + "\n";
  }
  const std::string p = write("shared.csv", text);
  for (uint32_t workers : {1u, 2u, 3u, 7u}) {
    SCOPED_TRACE(workers);
    const std::string e = error_of(p, workers);
    EXPECT_NE(e.find("shared.csv:878: column 3 (price): 'oops' is not an unsigned 64-bit integer"),
              std::string::npos)
        << e;
  }
  // Without the bad line, the workers' parts are the file in order.
  text.replace(text.find("1,2,oops,4"), 10, "1,2,3,876");
  const std::string good = write("good.csv", text);
  for (uint32_t workers : {1u, 2u, 3u, 7u}) {
    const auto all = bids(good, workers);
    ASSERT_EQ(all.size(), 1000u);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(all[i].time, i) << workers;
  }
}

TEST_F(CsvInputTest, FilesThatAreNotCsvFailFastNamingWhatTheyAre) {
  std::string e = error_of(write("empty.csv", ""));
  EXPECT_NE(e.find("empty.csv is empty: a CSV file starts with a header line naming its columns"),
            std::string::npos)
      << e;
  // 8 MiB of NUL bytes with no line end: refused after the first 64 KiB.
  const std::string nul = write("nul.csv", std::string(8 << 20, '\0'));
  e = error_of(nul);
  EXPECT_NE(e.find("nul.csv:1: no line end within 65536 bytes: not a CSV file (it holds NUL "
                   "bytes; binary records need --input-format binary)"),
            std::string::npos)
      << e;
  e = error_of(nul, 1, /*header=*/false);
  EXPECT_NE(e.find("nul.csv:1: a line longer than 65536 bytes: not a CSV file of bids"),
            std::string::npos)
      << e;
  // Shared among workers: a worker whose range starts mid-line fails too.
  e = error_of(nul, 4, /*header=*/false);
  EXPECT_NE(e.find("no line end within 65536 bytes"), std::string::npos) << e;
  // A header and no records is not an error for one file (a worker may
  // have an empty share; sluice-stream refuses an input with no record).
  EXPECT_TRUE(bids(write("header-only.csv", "auction,bidder,price,time"), 2).empty());
}

TEST_F(CsvInputTest, EveryQuerysSchemaReadsTheCsvItsGeneratorWrites) {
  // The generators' own headers are the schemas' columns plus worker,seq.
  const std::string ysb =
      "worker,seq,user_id,page_id,ad_id,campaign_id,ad_type,event_type,event_time,ip";
  EXPECT_NO_THROW(ss::CsvLayout<ss::YsbEvent>(ss::ysb_csv_schema(), ysb, true));
  EXPECT_NO_THROW(ss::CsvLayout<ss::RoRecord>(ss::ro_csv_schema(), "worker,seq,key,time", true));
  EXPECT_NO_THROW(ss::CsvLayout<ss::CmEvent>(
      ss::cm_csv_schema(),
      "worker,seq,time,job_id,task_index,machine_id,cpu,ram,event_type,priority,user", true));
  ss::CsvLayout<ss::YsbEvent> layout(ss::ysb_csv_schema(), ysb, true);
  ss::YsbEvent e{};
  EXPECT_FALSE(layout
                   .parse("0,0,ab927a555bb0dafcde5b5f032902ab50,92656647cfad51693724b6f66098439a,"
                          "588,58,2,2,1500,2145806537",
                          &e)
                   .has_value());
  EXPECT_EQ(e.user_id[0], 0xab927a555bb0dafcULL);
  EXPECT_EQ(e.user_id[1], 0xde5b5f032902ab50ULL);
  EXPECT_EQ(e.campaign_id, 58u);
  EXPECT_EQ(e.event_time, 1500);
  EXPECT_EQ(e.ip, 2145806537u);
  const auto bad = layout.parse(
      "0,0,ab927a555bb0dafcde5b5f032902ab50,92656647cfad51693724b6f66098439a,588,58,256,2,1500,1",
      &e);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->message(), "column 7 (ad_type): '256' is not an integer from 0 to 255");
}

// A Kafka input with event time from the messages' timestamps: the lines
// lack the schema's time column, which fill() sets; every schema names its
// time column.
TEST_F(CsvInputTest, ALayoutWithoutTheTimeColumnTakesItFromFill) {
  ss::CsvLayout<ss::RoRecord> layout(ss::ro_csv_schema(), "", false,
                                     ss::ro_csv_schema().time_column);
  ss::RoRecord r{};
  EXPECT_FALSE(layout.parse("5", &r).has_value());
  EXPECT_TRUE(layout.fill(1'700'000'000'123, &r));
  EXPECT_EQ(r.key, 5u);
  EXPECT_EQ(r.time, 1'700'000'000'123);
  const auto two = layout.parse("5,6", &r);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->message(), "2 fields where 1 are expected (without a header, the columns key)");
  EXPECT_THROW(ss::CsvLayout<ss::RoRecord>(ss::ro_csv_schema(), "", false, "when"),
               std::invalid_argument);
  // A layout with every column has nothing to fill.
  ss::CsvLayout<ss::RoRecord> whole(ss::ro_csv_schema(), "", false);
  EXPECT_FALSE(whole.fill(1, &r));
  EXPECT_EQ(ss::ysb_csv_schema().time_column, "event_time");
  EXPECT_EQ(ss::cm_csv_schema().time_column, "time");
  EXPECT_EQ(ss::bid_csv_schema().time_column, "time");
}

// A followed file (stream/follow_source.h): complete lines are read, a line
// without its end waits for it, the position a checkpoint keeps lets another
// source go on where the first stopped (the header read again), and once
// stop() says so the last line is read without its end and the input ends.
// A bad line is named by file and line.
TEST_F(CsvInputTest, AFollowedFileWaitsForWholeLinesAndResumesFromItsPosition) {
  const std::string p = write("follow.csv", "auction,bidder,price,time\n1,2,3,4\n5,6,7,8\n9,10,1");
  bool stop = false;
  const auto stopped = [&stop] { return stop; };
  std::vector<ss::Bid> buf(10);
  ss::FollowedCsvSource<ss::Bid> a(p, &ss::bid_csv_schema(), true, stopped);
  ASSERT_EQ(a(buf), 2u);
  EXPECT_TRUE(same(buf[0], 1, 2, 3, 4));
  EXPECT_TRUE(same(buf[1], 5, 6, 7, 8));
  EXPECT_EQ(a(buf), 0u) << "the third line has no end yet";
  EXPECT_FALSE(a.done());
  const std::string at = a.position();
  std::ofstream(p, std::ios::app) << "1,12\n13,14,15,16\n" << std::flush;
  ss::FollowedCsvSource<ss::Bid> b(p, &ss::bid_csv_schema(), true, stopped);
  b.seek(at);
  ASSERT_EQ(b(buf), 2u);
  EXPECT_TRUE(same(buf[0], 9, 10, 11, 12));
  EXPECT_TRUE(same(buf[1], 13, 14, 15, 16));
  std::ofstream(p, std::ios::app) << "17,18,19,20" << std::flush;
  EXPECT_EQ(b(buf), 0u);
  stop = true;
  ASSERT_EQ(b(buf), 1u) << "stopping reads the last line without its end";
  EXPECT_TRUE(same(buf[0], 17, 18, 19, 20));
  EXPECT_EQ(b(buf), 0u);
  EXPECT_TRUE(b.done());

  const std::string bad = write("bad-follow.csv", "auction,bidder,price,time\n1,2,3,4\n5,x,7,8\n");
  ss::FollowedCsvSource<ss::Bid> c(bad, &ss::bid_csv_schema(), true, stopped);
  try {
    c(buf);
    ADD_FAILURE() << "a bad line was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ":3: column 2 (bidder): 'x'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ss::FollowedCsvSource<ss::Bid>(p + ".none", &ss::bid_csv_schema(), true, stopped),
               std::runtime_error);
}

}  // namespace
