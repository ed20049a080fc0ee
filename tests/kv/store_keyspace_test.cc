// The store's reads of the whole keyspace (apps/kv/store_keyspace.cc):
// Redis's glob patterns, DBSIZE and KEYS of live keys, KEYS past the reply
// limit, and SCAN's guarantee (a key present for the whole iteration is
// returned at least once while others come and go).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "store.h"
#include "store_test_util.h"

namespace kv {
namespace {

using testing::kNow;

struct KeyspaceClient {
  Store& store;
  uint64_t seq = 0;
  Result run(Op op, std::string key, std::string value = "", int64_t deadline = 0) {
    Command c;
    c.op = op;
    c.client = 1;
    c.seq = ++seq;
    c.key = std::move(key);
    c.value = std::move(value);
    c.now_ms = kNow;
    if (deadline != 0) {
      c.ttl = Ttl::kSet;
      c.deadline_ms = deadline;
    }
    return store.apply(c);
  }
  KeysPage scan(uint64_t cursor, uint64_t count, std::string pattern = "*", std::string type = "") {
    const Result r = run(Op::kScan, std::move(pattern),
                         encode_scan_request(ScanRequest{cursor, count, std::move(type)}));
    KeysPage page;
    EXPECT_TRUE(r.ok) << r.value;
    EXPECT_TRUE(decode_keys(r.value, &page));
    return page;
  }
};

TEST(StoreKeyspaceTest, GlobPatternsMatchAsRedisMatchesThem) {
  struct Case {
    const char* pattern;
    const char* text;
    bool match;
  };
  for (const Case& c : std::vector<Case>{{"*", "", true},
                                         {"*", "anything", true},
                                         {"h?llo", "hello", true},
                                         {"h?llo", "hllo", false},
                                         {"h*llo", "heeeello", true},
                                         {"h*llo", "hllo", true},
                                         {"h[ae]llo", "hallo", true},
                                         {"h[ae]llo", "hillo", false},
                                         {"h[^e]llo", "hallo", true},
                                         {"h[^e]llo", "hello", false},
                                         {"h[a-b]llo", "hbllo", true},
                                         {"h[a-b]llo", "hcllo", false},
                                         {"h[b-a]llo", "hallo", true},  // (a reversed range)
                                         {"a\\*b", "a*b", true},
                                         {"a\\*b", "axb", false},
                                         {"[\\]]", "]", true},
                                         {"user:*:name", "user:42:name", true},
                                         {"user:*:name", "user:42:mail", false},
                                         {"*a*b*c*", "xxaxxbxxcxx", true},
                                         {"*a*b*c*", "xxaxxcxxbxx", false},
                                         {"[abc", "b", true},  // (an unterminated class)
                                         {"", "", true},
                                         {"", "x", false}}) {
    EXPECT_EQ(glob_match(c.pattern, c.text), c.match) << c.pattern << " vs " << c.text;
  }
}

TEST(StoreKeyspaceTest, DbsizeAndKeysCountLiveKeysOnly) {
  Store s;
  KeyspaceClient c{s};
  c.run(Op::kPut, "user:1", "a");
  c.run(Op::kPut, "user:2", "b");
  c.run(Op::kPut, "order:1", "c");
  c.run(Op::kPut, "user:gone", "d", kNow + 1);  // (expired when the clock reaches it)
  EXPECT_EQ(c.run(Op::kDbSize, ""), (Result{true, "4"}));
  Command late;
  late.op = Op::kDbSize;
  late.client = 1;
  late.seq = ++c.seq;
  late.now_ms = kNow + 1;
  EXPECT_EQ(s.apply(late), (Result{true, "3"}));
  EXPECT_EQ(s.size(), 4u) << "a read removes no expired key (sweeps do)";
  KeysPage page;
  ASSERT_TRUE(decode_keys(c.run(Op::kKeys, "user:*").value, &page));
  EXPECT_EQ(page.keys, (std::vector<std::string>{"user:1", "user:2", "user:gone"}));
  ASSERT_TRUE(decode_keys(c.run(Op::kKeys, "*[^0-9]").value, &page));
  EXPECT_EQ(page.keys, (std::vector<std::string>{"user:gone"}));
  // The reference computes the same.
  Keyspace plain = s.data();
  Command keys;
  keys.op = Op::kKeys;
  keys.key = "user:*";
  keys.now_ms = kNow;
  EXPECT_EQ(execute(plain, keys), s.apply(Command{keys.op, 1, ++c.seq, keys.key, "", "", kNow}));
}

TEST(StoreKeyspaceTest, KeysPastTheReplyLimitIsAnErrorNamingScan) {
  StoreOptions o;
  o.max_result_bytes = 1000;
  Store s(o);
  KeyspaceClient c{s};
  for (int i = 0; i < 100; ++i) c.run(Op::kPut, "key:" + std::to_string(i), "v");
  const Result r = c.run(Op::kKeys, "*");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.value.find("use SCAN"), std::string::npos) << r.value;
  EXPECT_TRUE(c.run(Op::kKeys, "key:1?").ok);
}

// A SCAN page visits COUNT keys from the cursor in hash order (MATCH and
// TYPE filter them); the cursor is the next key's hash, 0 at the end.
TEST(StoreKeyspaceTest, ScanPagesFollowCountMatchAndType) {
  Store s;
  KeyspaceClient c{s};
  for (int i = 0; i < 100; ++i) c.run(Op::kPut, "k" + std::to_string(i), "v");
  std::set<std::string> seen;
  size_t pages = 0;
  uint64_t cursor = 0;
  do {
    const KeysPage page = c.scan(cursor, 10);
    EXPECT_LE(page.keys.size(), 10u);
    seen.insert(page.keys.begin(), page.keys.end());
    cursor = page.cursor;
    ++pages;
  } while (cursor != 0 && pages < 1000);
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(pages, 10u);
  EXPECT_EQ(c.scan(0, 1000, "k1*").keys.size(), 11u);
  EXPECT_EQ(c.scan(0, 1000, "*", "string").keys.size(), 100u);
  EXPECT_EQ(c.scan(0, 1000, "*", "list").keys.size(), 0u);
  EXPECT_EQ(c.scan(0, 1000).cursor, 0u);
  EXPECT_FALSE(c.run(Op::kScan, "*", "x 10 ").ok) << "a cursor that is not a number";
  // The same pages through the reference (a scan of every key).
  Keyspace plain = s.data();
  Command scan;
  scan.op = Op::kScan;
  scan.key = "k*";
  scan.value = encode_scan_request(ScanRequest{0, 7, ""});
  scan.now_ms = kNow;
  Command again = scan;
  again.client = 1;
  again.seq = ++c.seq;
  EXPECT_EQ(execute(plain, scan), s.apply(again));
}

// Redis's guarantee: a key present from the first call to the last is
// returned at least once, while keys are added and removed between the
// pages; pages stay bounded, and the index's memory is counted.
TEST(StoreKeyspaceTest, ScanReturnsEveryKeyPresentThroughoutWhileKeysComeAndGo) {
  Store s;
  KeyspaceClient c{s};
  std::mt19937_64 rng(7);
  std::set<std::string> stable;
  for (int i = 0; i < 2000; ++i) {
    const std::string k = "stable:" + std::to_string(i);
    c.run(Op::kPut, k, "v");
    stable.insert(k);
  }
  for (int i = 0; i < 1000; ++i) c.run(Op::kPut, "churn:" + std::to_string(i), "v");
  std::set<std::string> seen;
  uint64_t cursor = 0;
  size_t pages = 0;
  int next_churn = 1000;
  do {
    const KeysPage page = c.scan(cursor, 1 + rng() % 20);
    EXPECT_LE(page.keys.size(), 40u) << "a page holds about COUNT keys";
    seen.insert(page.keys.begin(), page.keys.end());
    cursor = page.cursor;
    ++pages;
    // Between pages: new keys, removed keys, rewritten keys.
    for (int j = 0; j < 10; ++j) {
      c.run(Op::kPut, "churn:" + std::to_string(next_churn++), "v");
      c.run(Op::kDelete, "churn:" + std::to_string(rng() % next_churn));
      c.run(Op::kPut, "stable:" + std::to_string(rng() % 2000), "rewritten");
    }
  } while (cursor != 0 && pages < 100000);
  EXPECT_EQ(cursor, 0u) << "the iteration ends";
  for (const std::string& k : stable) EXPECT_EQ(seen.count(k), 1u) << k << " was never returned";
  uint64_t exact = 0;
  for (const auto& [k, e] : s.data()) exact += Store::entry_bytes(k, e);
  EXPECT_EQ(s.used_bytes(), exact);
  // A copy and a restored snapshot rebuild the index: the same pages.
  Store copy = s;
  Store restored;
  std::string why;
  ASSERT_TRUE(restored.restore(s.serialize(), &why)) << why;
  KeyspaceClient cc{copy, c.seq}, rc{restored, c.seq};
  const KeysPage want = c.scan(0, 50);
  EXPECT_EQ(cc.scan(0, 50).keys, want.keys);
  EXPECT_EQ(rc.scan(0, 50).keys, want.keys);
}

}  // namespace
}  // namespace kv
