// apps/nam's record and log layout, in one process: what lives where, and
// that a version or commit log torn by a concurrent or interrupted write is
// told apart from a whole one (the readers and recovery rely on it).
#include "layout.h"

#include <gtest/gtest.h>
#include <sluice/errors.h>

#include <cstring>
#include <vector>

namespace {

using namespace sluice::nam;

Layout small_layout() {
  Layout l;
  l.tables = {{"a", 10, 20}, {"b", 7, 8}};
  l.memory_servers = 3;
  l.clients = 4;
  l.versions = 3;
  l.max_timestamps = 1000;
  return l;
}

TEST(NamLayoutTest, RecordsAreSpreadOverTheServersInWholeSlots) {
  const Layout l = small_layout();
  EXPECT_EQ(l.version_bytes(0), 16u + 24u);  // payload rounded up to 8
  EXPECT_EQ(l.slot_bytes(0), 8u + 3 * 40u);
  EXPECT_EQ(l.server_of(7), 1u);
  EXPECT_EQ(l.slot_offset(0, 7), 2 * l.slot_bytes(0));
  // Keys 0, 3, 6, 9 on server 0; 1, 4, 7 on server 1; 2, 5, 8 on server 2.
  EXPECT_EQ(l.region_bytes(0, 0), 4 * l.slot_bytes(0));
  EXPECT_EQ(l.region_bytes(0, 1), 3 * l.slot_bytes(0));
  EXPECT_EQ(l.region_bytes(0, 2), 3 * l.slot_bytes(0));
  for (uint64_t k = 0; k < 10; ++k) {
    EXPECT_LE(l.slot_offset(0, k) + l.slot_bytes(0), l.region_bytes(0, l.server_of(k))) << k;
  }
  // The metadata: retire words, park words, then the vector, then the logs, disjoint.
  EXPECT_EQ(l.park_offset(0), 8u * 4);
  EXPECT_EQ(l.ts_offset(), 16u * 4);
  EXPECT_GE(l.log_offset(0), l.ts_offset() + 8 * l.ts_words());
  EXPECT_EQ(l.meta_bytes(), l.log_offset(3) + l.log_bytes());
  EXPECT_EQ(l.ts_owner(1), 0u);
  EXPECT_EQ(l.ts_owner(6), 1u);
  EXPECT_EQ(l.find_table("b"), 1u);
  EXPECT_THROW(l.find_table("c"), sluice::Error);
}

TEST(NamLayoutTest, TimestampStatesPackTwoBitsEach) {
  uint64_t word = 0;
  const uint64_t ts = 37;  // word 1, bits 10-11
  EXPECT_EQ(ts_word(ts), 1u);
  word |= uint64_t{kAborted} << ts_shift(ts);
  word |= uint64_t{kCommitted} << ts_shift(ts + 1);
  EXPECT_EQ(ts_state(word, ts), kAborted);
  EXPECT_EQ(ts_state(word, ts + 1), kCommitted);
  EXPECT_EQ(ts_state(word, ts - 1), kPending);
}

TEST(NamLayoutTest, ALoadedVersionIsWholeAndATornOneIsNot) {
  const Layout l = small_layout();
  std::vector<std::byte> slot(l.slot_bytes(0));
  std::vector<std::byte> payload(20);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte(i * 7 + 1);
  load_record(l, 0, 5, payload, slot.data());
  const std::byte* v = slot.data() + l.version_offset(0, 0);
  uint64_t cid, sum;
  std::memcpy(&cid, v, 8);
  std::memcpy(&sum, v + 8, 8);
  EXPECT_EQ(cid, 0u);
  EXPECT_NE(sum, 0u);
  EXPECT_EQ(sum, version_checksum(cid, 0, 5, std::span(v + 16, 20)));
  // The same bytes under another key, table or commit id do not pass.
  EXPECT_NE(sum, version_checksum(cid, 0, 6, std::span(v + 16, 20)));
  EXPECT_NE(sum, version_checksum(cid, 1, 5, std::span(v + 16, 20)));
  EXPECT_NE(sum, version_checksum(1, 0, 5, std::span(v + 16, 20)));
  // Half of a new payload over the old one (a torn install) does not pass.
  std::vector<std::byte> torn(v + 16, v + 36);
  torn[19] = std::byte(0xee);
  EXPECT_NE(sum, version_checksum(cid, 0, 5, torn));
  // A zeroed (free) version never passes: checksums are never 0.
  for (uint64_t k = 0; k < 1000; ++k) EXPECT_NE(version_checksum(k, 0, k, payload), 0u);
}

TEST(NamLayoutTest, CommitLogsRoundTripAndTornOnesAreRefused) {
  const Layout l = small_layout();
  std::vector<std::byte> log(l.log_bytes());
  const std::vector<LogEntry> entries = {{0, 3}, {1, 6}, {0, 9}};
  encode_log(42, entries, log);
  uint64_t ts = 0;
  std::vector<LogEntry> back;
  ASSERT_TRUE(decode_log(log, &ts, &back));
  EXPECT_EQ(ts, 42u);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[1].table, 1u);
  EXPECT_EQ(back[1].key, 6u);
  // A log never written, and one whose entries changed, are refused.
  std::vector<std::byte> zero(l.log_bytes());
  EXPECT_FALSE(decode_log(zero, &ts, &back));
  log[24 + 8] = std::byte(0x55);
  EXPECT_FALSE(decode_log(log, &ts, &back));
}

}  // namespace
