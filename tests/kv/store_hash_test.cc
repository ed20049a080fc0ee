// The store's hashes (apps/kv/store_hashes.cc): every hash command's result
// as Redis answers it, WRONGTYPE both ways, the limits (maxmemory and the
// size of one entry) against a hostile client, snapshots old and new, and
// replicas that apply the same log ending identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "store.h"
#include "store_test_util.h"
#include "wire.h"

namespace kv {
namespace {

using testing::cmd;
using testing::kNow;
using testing::kWrong;

Command hset(std::string key, FieldValues pairs) {
  return cmd(Op::kHSet, std::move(key), encode_fields(pairs));
}
Command names(Op op, std::string key, std::vector<std::string> fields) {
  return cmd(op, std::move(key), encode_names(fields));
}

// Applies commands as client 1's, numbered in order.
struct HashClient : testing::SeqClient {
  FieldValues all(const std::string& key) {
    FieldValues pairs;
    const Result r = run(cmd(Op::kHGetAll, key));
    EXPECT_TRUE(r.ok);
    EXPECT_TRUE(decode_fields(r.value, &pairs));
    return pairs;
  }
};

TEST(StoreHashTest, TheHashCommandsFollowRedis) {
  Store s;
  HashClient c{s};
  // HSET answers the fields added (a field named twice: its last value).
  EXPECT_EQ(c.run(hset("h", {{"b", "2"}, {"a", "1"}, {"b", "3"}})), (Result{true, "2"}));
  EXPECT_EQ(c.run(hset("h", {{"a", "x"}, {"c", ""}})), (Result{true, "1"}));
  EXPECT_EQ(c.run(cmd(Op::kHGet, "h", "", "a")), (Result{true, "x"}));
  EXPECT_EQ(c.run(cmd(Op::kHGet, "h", "", "c")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kHGet, "h", "", "zz")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kHGet, "absent", "", "a")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kHLen, "h")), (Result{true, "3"}));
  EXPECT_EQ(c.run(cmd(Op::kHLen, "absent")), (Result{true, "0"}));
  // HGETALL in byte order of the field, whatever the order of the writes.
  EXPECT_EQ(c.all("h"), (FieldValues{{"a", "x"}, {"b", "3"}, {"c", ""}}));
  EXPECT_EQ(c.all("absent"), FieldValues{});
  std::vector<Result> got;
  const Result m = c.run(names(Op::kHMGet, "h", {"b", "nope", "a", "b"}));
  ASSERT_TRUE(m.ok);
  ASSERT_TRUE(decode_results(m.value, &got));
  EXPECT_EQ(got, (std::vector<Result>{{true, "3"}, {false, ""}, {true, "x"}, {true, "3"}}));
  // HSETNX sets only an absent field.
  EXPECT_EQ(c.run(cmd(Op::kHSetNx, "h", "new", "b")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kHSetNx, "h", "d", "d")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kHSetNx, "n", "v", "f")), (Result{true, ""}));
  EXPECT_EQ(c.all("n"), (FieldValues{{"f", "v"}}));
  // HDEL answers how many it removed; the key goes with its last field.
  EXPECT_EQ(c.run(names(Op::kHDel, "h", {"a", "nope", "a"})), (Result{true, "1"}));
  EXPECT_EQ(c.run(names(Op::kHDel, "h", {"nope"})), (Result{false, "0"}));
  EXPECT_EQ(c.run(names(Op::kHDel, "absent", {"a"})), (Result{false, "0"}));
  EXPECT_EQ(c.run(names(Op::kHDel, "h", {"b", "c", "d"})), (Result{true, "3"}));
  EXPECT_EQ(s.data().count("h"), 0u);
  EXPECT_EQ(c.run(cmd(Op::kType, "h")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kType, "n")), (Result{true, "hash"}));
}

TEST(StoreHashTest, IncrementsFollowRedisAndAnErrorChangesNothing) {
  Store s;
  HashClient c{s};
  EXPECT_EQ(c.run(cmd(Op::kHIncrBy, "h", "5", "n")), (Result{true, "5"}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrBy, "h", "-7", "n")), (Result{true, "-2"}));
  c.run(hset("h", {{"text", "abc"}, {"big", "9223372036854775807"}, {"f", "1.5"}}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrBy, "h", "1", "text")), (Result{false, "not an integer"}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrBy, "h", "1", "big")), (Result{false, "overflow"}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrBy, "h", "1", "f")), (Result{false, "not an integer"}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrByFloat, "h", "0.1", "f")), (Result{true, "1.6"}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrByFloat, "h", "2.5", "new")), (Result{true, "2.5"}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrByFloat, "h", "1", "text")), (Result{false, "not a float"}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrByFloat, "h", "1.7e308", "f")),
            (Result{true, format_float(1.6 + 1.7e308)}));
  EXPECT_EQ(c.all("h"), (FieldValues{{"big", "9223372036854775807"},
                                     {"f", format_float(1.6 + 1.7e308)},
                                     {"n", "-2"},
                                     {"new", "2.5"},
                                     {"text", "abc"}}));
  EXPECT_EQ(c.run(cmd(Op::kHIncrByFloat, "h", "1.7e308", "f")), (Result{false, "nan or infinity"}));
  // An error makes no key.
  EXPECT_EQ(c.run(cmd(Op::kHIncrBy, "e", "x", "n")), (Result{false, "not an integer"}));
  EXPECT_EQ(s.data().count("e"), 0u);
}

TEST(StoreHashTest, AStringCommandOnAHashAndAHashCommandOnAStringAreWrongType) {
  Store s;
  HashClient c{s};
  c.run(hset("h", {{"f", "1"}}));
  c.run(cmd(Op::kPut, "s", "1"));
  const uint64_t digest = s.digest();
  for (Op op : {Op::kGet, Op::kIncrBy, Op::kIncrByFloat, Op::kAppend, Op::kGetSet, Op::kGetDel,
                Op::kGetEx, Op::kCas, Op::kSetRange, Op::kSetNx})
    EXPECT_EQ(c.run(cmd(op, "h", "1", "0")), kWrong) << op_name(op);
  EXPECT_EQ(c.run(cmd(Op::kSetXx, "h", "v", "get")), kWrong) << "SET XX GET reads it";
  for (Op op : {Op::kHSet, Op::kHSetNx, Op::kHGet, Op::kHMGet, Op::kHDel, Op::kHLen, Op::kHGetAll,
                Op::kHIncrBy, Op::kHIncrByFloat}) {
    Command one = cmd(op, "s", "1", "f");
    if (op == Op::kHSet) one = hset("s", {{"f", "1"}});
    if (op == Op::kHMGet || op == Op::kHDel) one = names(op, "s", {"f"});
    EXPECT_EQ(c.run(one), kWrong) << op_name(op);
  }
  EXPECT_EQ(c.all("h"), (FieldValues{{"f", "1"}}));
  EXPECT_EQ(s.data().at("s").value, "1");
  // (Only the client table moved: the keys are as they were.)
  EXPECT_NE(s.digest(), digest);
  // The commands of any type: TYPE, TTL, EXPIRE, DEL; SET and SET XX
  // replace the hash with a string.
  EXPECT_EQ(c.run(cmd(Op::kType, "h")), (Result{true, "hash"}));
  EXPECT_EQ(c.run(cmd(Op::kType, "s")), (Result{true, "string"}));
  EXPECT_EQ(c.run(cmd(Op::kTtl, "h")), (Result{true, "-1"}));
  Command expire = cmd(Op::kExpire, "h");
  expire.ttl = Ttl::kSet;
  expire.deadline_ms = kNow + 100;
  EXPECT_EQ(c.run(expire), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kSetXx, "h", "now a string")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kGet, "h")), (Result{true, "now a string"}));
  c.run(hset("h2", {{"f", "1"}}));
  EXPECT_EQ(c.run(cmd(Op::kPut, "h2", "v")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kType, "h2")), (Result{true, "string"}));
  c.run(hset("h3", {{"f", "1"}}));
  EXPECT_EQ(c.run(cmd(Op::kDelete, "h3")), (Result{true, ""}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

TEST(StoreHashTest, HashesExpireRenameAndJoinTransactionsAndWatchSeesHset) {
  Store s;
  HashClient c{s};
  Command expiring = hset("h", {{"f", "1"}});
  c.run(expiring);
  Command expire = cmd(Op::kExpire, "h");
  expire.ttl = Ttl::kSet;
  expire.deadline_ms = kNow + 10;
  ASSERT_TRUE(c.run(expire).ok);
  Command late = cmd(Op::kHGet, "h", "", "f");
  late.now_ms = kNow + 10;
  EXPECT_EQ(c.run(late), (Result{false, ""})) << "expired at its deadline";
  EXPECT_EQ(s.size(), 0u);

  c.run(hset("h", {{"f", "1"}, {"g", "2"}}));
  EXPECT_TRUE(c.run(cmd(Op::kRename, "h", "moved")).ok);
  EXPECT_EQ(c.all("moved"), (FieldValues{{"f", "1"}, {"g", "2"}}));
  // WATCH, then an HSET by another client: the transaction does not run.
  const Result w = c.run(cmd(Op::kWatch, "moved"));
  Command other = hset("moved", {{"f", "2"}});
  other.client = 2;
  other.seq = 1;
  s.apply(other);
  Transaction t;
  t.conditions.push_back(TxCondition{TxCondition::kUnchanged, "moved", c.seq});
  t.cmds.push_back(hset("moved", {{"x", "y"}}));
  EXPECT_EQ(c.run(cmd(Op::kMulti, "", encode_transaction(t))), (Result{false, ""}));
  (void)w;
  // Without the HSET between, it runs: its commands' results, a WRONGTYPE
  // among them, as EXEC answers.
  t.conditions = {TxCondition{TxCondition::kUnchanged, "moved", 0}};
  c.run(cmd(Op::kWatch, "moved"));
  t.conditions[0].watch_seq = c.seq;
  t.cmds.push_back(cmd(Op::kGet, "moved"));
  t.cmds.push_back(cmd(Op::kHLen, "moved"));
  const Result r = c.run(cmd(Op::kMulti, "", encode_transaction(t)));
  std::vector<Result> results;
  ASSERT_TRUE(r.ok);
  ASSERT_TRUE(decode_results(r.value, &results));
  EXPECT_EQ(results, (std::vector<Result>{{true, "1"}, kWrong, {true, "3"}}));
}

TEST(StoreHashTest, KeysAndScanSeeHashesAndScanFiltersByType) {
  Store s;
  HashClient c{s};
  c.run(hset("h", {{"f", "1"}}));
  c.run(cmd(Op::kPut, "s", "1"));
  KeysPage page;
  for (const char* type : {"hash", "string", "list"}) {
    ScanRequest q;
    q.count = 100;
    q.type = type;
    const Result r = c.run(cmd(Op::kScan, "*", encode_scan_request(q)));
    ASSERT_TRUE(decode_keys(r.value, &page));
    EXPECT_EQ(page.keys, std::string(type) == "hash"     ? std::vector<std::string>{"h"}
                         : std::string(type) == "string" ? std::vector<std::string>{"s"}
                                                         : std::vector<std::string>{});
  }
  EXPECT_EQ(c.run(cmd(Op::kDbSize, "")), (Result{true, "2"}));
  EXPECT_EQ(c.run(cmd(Op::kFlushAll, "")), (Result{true, "2"}));
  EXPECT_EQ(s.used_bytes(), 0u);
}

TEST(StoreHashTest, AHashCountsTowardMaxmemoryAndAWritePastItIsRefusedWhole) {
  StoreOptions o;
  // One key "h" with two fields of 10 bytes (field "a" or "b", 9 bytes of
  // value): what the store counts for it.
  const uint64_t one = Store::kEntryOverhead + 1 + 2 * (Store::kFieldOverhead + 10);
  o.maxmemory = one;
  Store s(o);
  HashClient c{s};
  EXPECT_FALSE(c.run(hset("h", {{"a", std::string(9, 'x')}, {"b", std::string(9, 'x')}})).refused);
  EXPECT_EQ(s.used_bytes(), one);
  const uint64_t digest_before = s.digest();
  // One more field, or a longer value: refused, nothing changed.
  EXPECT_TRUE(c.run(hset("h", {{"a", "x"}, {"c", "y"}})).refused);
  EXPECT_TRUE(c.run(cmd(Op::kHSetNx, "h", "v", "c")).refused);
  EXPECT_TRUE(c.run(cmd(Op::kHIncrBy, "g", "1", "n")).refused);
  EXPECT_EQ(c.all("h"), (FieldValues{{"a", std::string(9, 'x')}, {"b", std::string(9, 'x')}}));
  EXPECT_EQ(s.used_bytes(), one);
  // A write that takes no more still runs, and deletes always do.
  EXPECT_EQ(c.run(hset("h", {{"a", "y"}})), (Result{true, "0"}));
  EXPECT_EQ(c.run(names(Op::kHDel, "h", {"a", "b"})), (Result{true, "2"}));
  EXPECT_EQ(s.used_bytes(), 0u);
  EXPECT_NE(s.digest(), digest_before);
}

// A hash is bounded as Redis's is: each field and value by the command
// that writes it (one log entry), the whole by maxmemory, not by what one
// reply may carry (max_result_bytes): it grows past that, and a read of
// all of it (HGETALL) is refused with an error that changes nothing, while
// its fields are still read one by one.
TEST(StoreHashTest, AHashGrowsPastOneReplyAndReadingItWholeIsRefused) {
  StoreOptions o;
  o.max_result_bytes = 64 * 1024;
  Store s(o);
  HashClient c{s};
  // 500 fields of 200 bytes each, in one HSET: more than a reply may carry.
  FieldValues many;
  for (int i = 0; i < 500; ++i) many.emplace_back("f" + std::to_string(i), std::string(200, 'v'));
  EXPECT_EQ(c.run(hset("h", many)), (Result{true, "500"}));
  // And 500 more field by field.
  for (int i = 500; i < 1000; ++i)
    EXPECT_EQ(c.run(hset("h", {{"f" + std::to_string(i), std::string(200, 'w')}})),
              (Result{true, "1"}));
  EXPECT_EQ(c.run(cmd(Op::kHLen, "h")), (Result{true, "1000"}));
  EXPECT_EQ(c.run(cmd(Op::kHGet, "h", "", "f999")), (Result{true, std::string(200, 'w')}));
  const Result all = c.run(cmd(Op::kHGetAll, "h"));
  EXPECT_FALSE(all.ok);
  EXPECT_EQ(all.value.rfind(kLongReply, 0), 0u) << all.value;
  EXPECT_NE(all.value.find("--max-value-bytes"), std::string::npos) << all.value;
  const Result m = c.run(names(Op::kHMGet, "h", std::vector<std::string>(400, "f1")));
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.value.rfind(kLongReply, 0), 0u) << m.value;
  EXPECT_EQ(c.run(cmd(Op::kHLen, "h")), (Result{true, "1000"}));
  // In a transaction: the hash grows, and a transaction whose replies
  // would pass the limit runs nothing.
  Transaction t;
  t.cmds.push_back(cmd(Op::kPut, "s", "x"));
  t.cmds.push_back(hset("h", {{"g", "1"}}));
  EXPECT_TRUE(c.run(cmd(Op::kMulti, "", encode_transaction(t))).ok);
  EXPECT_EQ(c.run(cmd(Op::kHLen, "h")), (Result{true, "1001"}));
  t.cmds.push_back(cmd(Op::kHGetAll, "h"));
  const Result r = c.run(cmd(Op::kMulti, "", encode_transaction(t)));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.value.find("nothing was run"), std::string::npos) << r.value;
  // maxmemory bounds it: a store of 256 KiB takes fields until it is full.
  StoreOptions small = o;
  small.maxmemory = 256 * 1024;
  Store f(small);
  HashClient w{f};
  size_t taken = 0;
  for (int i = 0; i < 2000; ++i) {
    if (w.run(hset("h", {{"x" + std::to_string(i), std::string(200, 'v')}})).refused) break;
    ++taken;
  }
  EXPECT_GT(taken, 500u);
  EXPECT_LT(taken, 2000u);
  EXPECT_LE(f.used_bytes(), small.maxmemory);
}

TEST(StoreHashTest, ASnapshotCarriesHashesAndAnOldSnapshotIsStillRead) {
  StoreOptions o;
  o.keep_applied = false;
  Store s(o);
  HashClient c{s};
  c.run(hset("h", {{"a", "1"}, {"b", std::string("\0\xff", 2)}}));
  c.run(cmd(Op::kPut, "s", "v"));
  Store back;
  std::string why;
  ASSERT_TRUE(back.restore(s.serialize(), &why)) << why;
  EXPECT_EQ(back.digest(), s.digest());
  EXPECT_EQ(back.used_bytes(), s.used_bytes());
  EXPECT_EQ(back.data(), s.data());
  // A snapshot of the version before hashes ("KVS5"): each key without its
  // fields.
  const std::string old = testing::old_snapshot(0x4b565335, 7, 1, [](wire::Writer<std::string>& w) {
    w.str("k");
    w.str("v");
    w.put<int64_t>(0);
    w.put<uint64_t>(7);
  });
  ASSERT_TRUE(back.restore(old, &why)) << why;
  EXPECT_EQ(back.data().at("k").value, "v");
  EXPECT_EQ(back.version(), 7u);
  // Older ones, and a hash that holds a value too, are refused.
  std::string older = old;
  older[0] = '4';
  EXPECT_FALSE(back.restore(older, &why));
  EXPECT_NE(why.find("magic"), std::string::npos) << why;
  std::string bytes = s.serialize();
  const std::string with_value = std::string("\x01\0\0\0h\x01\0\0\0X", 10);
  const size_t at = bytes.find(std::string("\x01\0\0\0h\0\0\0\0", 9));
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 9, with_value);
  EXPECT_FALSE(back.restore(bytes, &why));
  EXPECT_EQ(back.data().at("k").value, "v") << "unchanged";
}

TEST(StoreHashTest, ReplicasApplyingTheSameHashCommandsEndIdentical) {
  StoreOptions o;
  o.maxmemory = 3000;
  o.max_result_bytes = 300;
  std::mt19937_64 rng(777);  // (its sequence is the standard's: the same everywhere)
  auto rnd = [&rng](uint64_t n) { return rng() % n; };
  const Op ops[] = {Op::kHSet,         Op::kHSet,   Op::kHSet,  Op::kHSetNx,  Op::kHGet,
                    Op::kHMGet,        Op::kHDel,   Op::kHLen,  Op::kHGetAll, Op::kHIncrBy,
                    Op::kHIncrByFloat, Op::kPut,    Op::kGet,   Op::kDelete,  Op::kType,
                    Op::kIncrBy,       Op::kAppend, Op::kRename};
  std::vector<Command> log;
  for (uint64_t seq = 1; seq <= 4000; ++seq) {
    const Op op = ops[rnd(std::size(ops))];
    Command c =
        cmd(op, "k" + std::to_string(rnd(6)), std::to_string(rnd(4)), "f" + std::to_string(rnd(5)));
    if (op == Op::kHSet) {
      FieldValues pairs;
      for (uint64_t i = 0, n = 1 + rnd(4); i < n; ++i)
        pairs.emplace_back("f" + std::to_string(rnd(8)), std::string(rnd(120), 'v'));
      c.value = encode_fields(pairs);
    } else if (op == Op::kHMGet || op == Op::kHDel) {
      c.value = encode_names({"f" + std::to_string(rnd(8)), "f" + std::to_string(rnd(8))});
    } else if (op == Op::kRename) {
      c.value = "k" + std::to_string(rnd(6));
    }
    c.client = 1;
    c.seq = seq;
    log.push_back(c);
  }
  EXPECT_GT(testing::expect_replicas_identical(o, log), 10u) << "the limits were reached";
}

TEST(StoreHashTest, HscanPagesThroughTheFieldsAsScanDoesTheKeys) {
  Store s;
  testing::SeqClient c{s};
  FieldValues fields;
  for (int i = 0; i < 100; ++i)
    fields.emplace_back("f" + std::to_string(i), "v" + std::to_string(i));
  c.run(cmd(Op::kHSet, "h", encode_fields(fields)));
  // Every field once, with its value, over several pages of COUNT 7.
  size_t pages = 0;
  const std::vector<std::string> all = testing::scan_all(c, Op::kHScan, "h", 7, "*", false, &pages);
  ASSERT_EQ(all.size(), 200u);
  std::map<std::string, std::string> seen;
  for (size_t i = 0; i < all.size(); i += 2) seen[all[i]] = all[i + 1];
  EXPECT_EQ(seen, (std::map<std::string, std::string>(fields.begin(), fields.end())));
  EXPECT_GE(pages, 100u / 7);
  // NOVALUES: the fields alone; MATCH filters them.
  std::vector<std::string> names = testing::scan_all(c, Op::kHScan, "h", 1000, "*", true);
  EXPECT_EQ(names.size(), 100u);
  names = testing::scan_all(c, Op::kHScan, "h", 3, "f1?", true);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names.size(), 10u);
  EXPECT_EQ(names.front(), "f10");
  // A field there from start to end is answered though others come and go
  // between pages; the pages are the reference's (every replica's).
  int round = 0;
  names = testing::scan_all(c, Op::kHScan, "h", 5, "*", true, nullptr, [&] {
    ++round;
    c.run(cmd(Op::kHSet, "h", encode_fields({{"new" + std::to_string(round), "x"}})));
    c.run(cmd(Op::kHDel, "h", encode_names({"f" + std::to_string(50 + round % 50)})));
  });
  std::set<std::string> got(names.begin(), names.end());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(got.count("f" + std::to_string(i)), 1u) << i;
  Keyspace reference = s.data();
  const Command page = cmd(Op::kHScan, "h", encode_scan_request({0, 9, ""}), "*");
  EXPECT_EQ(c.run(page), execute(reference, page));
  // An absent key: cursor 0, no fields; a string: WRONGTYPE; a bad cursor.
  EXPECT_EQ(c.run(cmd(Op::kHScan, "none", encode_scan_request({0, 10, ""}), "*")),
            (Result{true, encode_keys({})}));
  c.run(cmd(Op::kPut, "s", "v"));
  EXPECT_EQ(c.run(cmd(Op::kHScan, "s", encode_scan_request({0, 10, ""}), "*")), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kHScan, "h", "x", "*")), (Result{false, "ERR invalid cursor"}));
}

// HRANDFIELD (`expected` the count, "" for none, and "1" for WITHVALUES).
Command hrandfield(std::string key, uint64_t seed, const std::string& count,
                   bool with_values = false) {
  return cmd(Op::kHRandField, std::move(key), std::to_string(seed),
             encode_names({count, with_values ? "1" : ""}));
}

TEST(StoreHashTest, HrandfieldChoosesFromTheSeedAloneAsSrandmemberDoes) {
  Store s;
  HashClient c{s};
  FieldValues pairs;
  for (int i = 0; i < 20; ++i) pairs.emplace_back("f" + std::to_string(i), "v" + std::to_string(i));
  c.run(hset("h", pairs));
  const std::map<std::string, std::string> hash(pairs.begin(), pairs.end());
  Store replica;
  std::string why;
  ASSERT_TRUE(replica.restore(s.serialize(), &why)) << why;
  HashClient d{replica};
  d.seq = c.seq;
  std::set<std::string> seen;
  std::set<std::vector<std::string>> choices;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    // Every replica (one restored from a snapshot too) chooses alike.
    for (const Command& q :
         {hrandfield("h", seed, ""), hrandfield("h", seed, "5"), hrandfield("h", seed, "-7", true)})
      ASSERT_EQ(c.run(q), d.run(q)) << seed;
    const Result one = c.run(hrandfield("h", seed, ""));
    ASSERT_TRUE(one.ok);
    EXPECT_EQ(hash.count(one.value), 1u) << one.value;
    seen.insert(one.value);
    // A count >= 0: distinct fields, in field order.
    std::vector<std::string> five;
    ASSERT_TRUE(decode_names(c.run(hrandfield("h", seed, "5")).value, &five));
    ASSERT_EQ(five.size(), 5u);
    EXPECT_TRUE(std::is_sorted(five.begin(), five.end()));
    EXPECT_EQ(std::set<std::string>(five.begin(), five.end()).size(), 5u);
    for (const std::string& f : five) EXPECT_EQ(hash.count(f), 1u) << f;
    choices.insert(five);
    // A count < 0: that many, with repeats, each with its value.
    std::vector<std::string> repeats;
    ASSERT_TRUE(decode_names(c.run(hrandfield("h", seed, "-7", true)).value, &repeats));
    ASSERT_EQ(repeats.size(), 14u);
    for (size_t i = 0; i < repeats.size(); i += 2)
      EXPECT_EQ(hash.at(repeats[i]), repeats[i + 1]) << repeats[i];
  }
  EXPECT_EQ(seen.size(), hash.size()) << "every field is chosen sometimes";
  EXPECT_GT(choices.size(), 250u) << "the seed decides the choice";
  // Past the hash's size: all of it, in field order.
  std::vector<std::string> all;
  ASSERT_TRUE(decode_names(c.run(hrandfield("h", 1, "100", true)).value, &all));
  std::vector<std::string> want;
  for (const auto& [f, v] : hash) want.insert(want.end(), {f, v});
  EXPECT_EQ(all, want);
  EXPECT_EQ(c.run(hrandfield("h", 1, "0")), (Result{true, encode_names({})}));
  EXPECT_EQ(c.run(hrandfield("none", 1, "")), (Result{false, ""}));
  EXPECT_EQ(c.run(hrandfield("none", 1, "3", true)), (Result{true, encode_names({})}));
  c.run(cmd(Op::kPut, "str", "v"));
  EXPECT_EQ(c.run(hrandfield("str", 1, "")), kWrong);
  EXPECT_EQ(c.run(hrandfield("str", 1, "0")), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kHRandField, "h", "1", "x")).value, "ERR malformed hrandfield");
  // A read: it modifies nothing, and a reply longer than one may carry is
  // an error.
  const uint64_t version = s.version();
  c.run(hrandfield("h", 1, "-3"));
  EXPECT_EQ(s.version(), version);
  StoreOptions small;
  small.max_result_bytes = 200;
  Store t(small);
  HashClient e{t};
  e.run(hset("h", {{"f", "v"}}));
  EXPECT_TRUE(e.run(hrandfield("h", 1, "-20")).ok);
  const Result long_reply = e.run(hrandfield("h", 1, "-40", true));
  EXPECT_FALSE(long_reply.ok);
  EXPECT_NE(long_reply.value.find("ERR the reply would take"), std::string::npos)
      << long_reply.value;
}

}  // namespace
}  // namespace kv
