// The store's sorted sets (apps/kv/store_zsets.cc): each command's result
// as Redis 7.0 answers it (tests/kv/redis_zset_diff.py compares the replies
// with redis-server itself), WRONGTYPE both ways, what modifies a key for
// WATCH, the limits (maxmemory and the size of one reply), snapshots old
// and new, and replicas that apply the same log ending identical.
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
using testing::kWrong;
using Strings = std::vector<std::string>;

// ZADD with `options` (zset.h's letters) of score and member pairs.
Command zadd(std::string key, const Strings& pairs, std::string options = "") {
  return cmd(Op::kZAdd, std::move(key), encode_names(pairs), std::move(options));
}
Command range(Op op, std::string key, ZRange q) {
  return cmd(op, std::move(key), "", encode_zrange(q));
}
ZRange by(ZRange::By kind, std::string min, std::string max, bool rev = false,
          bool with_scores = false) {
  ZRange q;
  q.by = kind;
  q.min = std::move(min);
  q.max = std::move(max);
  q.rev = rev;
  q.with_scores = with_scores;
  return q;
}

struct ZsetClient : testing::NamesClient {
  Strings all(const std::string& key) {
    return names(range(Op::kZRange, key, by(ZRange::kRank, "0", "-1", false, true)));
  }
};

TEST(StoreZsetTest, ZaddAndItsOptionsFollowRedis) {
  Store s;
  ZsetClient c{s};
  EXPECT_EQ(c.run(zadd("z", {"1", "b", "1", "a", "2", "c", "-0", "d"})), (Result{true, "4"}));
  EXPECT_EQ(c.all("z"), (Strings{"d", "0", "a", "1", "b", "1", "c", "2"}))
      << "by score, ties by bytes; -0 kept as 0";
  EXPECT_EQ(c.run(zadd("z", {"1", "a"})), (Result{false, "0"})) << "the same score: no change";
  EXPECT_EQ(c.run(zadd("z", {"5", "a", "6", "e"}, "C")), (Result{true, "2"})) << "CH";
  EXPECT_EQ(c.run(zadd("z", {"7", "a", "1", "f"}, "X")), (Result{true, "0"})) << "XX: a updated";
  EXPECT_EQ(c.run(zadd("z", {"9", "a", "1", "f"}, "N")), (Result{true, "1"})) << "NX: f added";
  EXPECT_EQ(c.run(zadd("z", {"3", "a"}, "GC")), (Result{false, "0"})) << "GT: not lower";
  EXPECT_EQ(c.run(zadd("z", {"3", "a"}, "LC")), (Result{true, "1"})) << "LT";
  EXPECT_EQ(c.run(zadd("z", {"0.1", "a"}, "I")), (Result{true, "3.1000000000000001"}));
  EXPECT_EQ(c.run(zadd("z", {"1", "a"}, "IN")), (Result{false, ""})) << "INCR NX: null";
  EXPECT_EQ(c.run(zadd("z", {"inf", "a"}, "I")), (Result{true, "inf"}));
  EXPECT_EQ(c.run(zadd("z", {"-inf", "a"}, "I")),
            (Result{false, "ERR resulting score is not a number (NaN)"}));
  EXPECT_EQ(c.run(zadd("none", {"1", "a"}, "X")), (Result{false, "0"}));
  EXPECT_EQ(s.data().count("none"), 0u) << "XX makes no key";
  EXPECT_EQ(c.names(cmd(Op::kZScore, "z", encode_names({"a", "nope", "d"}))),
            (Strings{"inf", "", "0"}));
  EXPECT_EQ(c.run(cmd(Op::kZCard, "z")), (Result{true, "6"}));
  EXPECT_EQ(c.run(cmd(Op::kZRank, "z", "", "a")), (Result{true, "5"}));
  EXPECT_EQ(c.run(cmd(Op::kZRank, "z", "rev", "a")), (Result{true, "0"}));
  EXPECT_EQ(c.run(cmd(Op::kZRank, "z", "", "nope")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kZRem, "z", encode_names({"a", "nope"}))), (Result{true, "1"}));
  EXPECT_EQ(c.run(cmd(Op::kZRem, "none", encode_names({"a"}))), (Result{false, "0"}));
}

TEST(StoreZsetTest, RangesByRankScoreAndMemberFollowRedis) {
  Store s;
  ZsetClient c{s};
  c.run(zadd("z", {"1", "a", "2", "b", "2", "c", "3", "d", "inf", "e"}));
  auto members = [&c](ZRange q) { return c.names(range(Op::kZRange, "z", q)); };
  EXPECT_EQ(members(by(ZRange::kRank, "-2", "100")), (Strings{"d", "e"}));
  EXPECT_EQ(members(by(ZRange::kRank, "0", "1", true)), (Strings{"e", "d"}));
  EXPECT_EQ(members(by(ZRange::kRank, "3", "1")), Strings{});
  EXPECT_EQ(members(by(ZRange::kScore, "(1", "2")), (Strings{"b", "c"}));
  EXPECT_EQ(members(by(ZRange::kScore, "2", "+inf", true)), (Strings{"e", "d", "c", "b"}));
  EXPECT_EQ(members(by(ZRange::kScore, "(inf", "inf")), Strings{});
  ZRange limited = by(ZRange::kScore, "-inf", "+inf");
  limited.offset = 1;
  limited.limit = 2;
  EXPECT_EQ(members(limited), (Strings{"b", "c"}));
  limited.offset = -1;
  EXPECT_EQ(members(limited), Strings{}) << "a negative offset: nothing";
  EXPECT_EQ(c.run(range(Op::kZCount, "z", by(ZRange::kScore, "2", "(3"))), (Result{true, "2"}));
  c.run(zadd("l", {"0", "a", "0", "b", "0", "c", "0", "d"}));
  EXPECT_EQ(c.names(range(Op::kZRange, "l", by(ZRange::kLex, "(a", "[c"))), (Strings{"b", "c"}));
  EXPECT_EQ(c.names(range(Op::kZRange, "l", by(ZRange::kLex, "-", "(c", true))),
            (Strings{"b", "a"}));
  EXPECT_EQ(c.run(range(Op::kZCount, "l", by(ZRange::kLex, "[b", "+"))), (Result{true, "3"}));
  EXPECT_EQ(c.run(range(Op::kZRemRange, "l", by(ZRange::kLex, "(a", "[c"))), (Result{true, "2"}));
  EXPECT_EQ(c.run(range(Op::kZRemRange, "z", by(ZRange::kRank, "0", "1"))), (Result{true, "2"}));
  EXPECT_EQ(c.run(range(Op::kZRemRange, "z", by(ZRange::kScore, "5", "6"))), (Result{false, "0"}));
  EXPECT_EQ(c.names(cmd(Op::kZPop, "z", "max", "2")), (Strings{"e", "inf", "d", "3"}));
  EXPECT_EQ(c.names(cmd(Op::kZPop, "z", "min")), (Strings{"c", "2"}));
  EXPECT_EQ(s.data().count("z"), 0u) << "the last member goes with its key";
  // ZRANGESTORE: the range replaces whatever the destination held.
  c.run(cmd(Op::kPut, "dst", "a string"));
  EXPECT_EQ(c.run(cmd(Op::kZRangeStore, "dst", encode_names({"l"}),
                      encode_zrange(by(ZRange::kRank, "0", "-1")))),
            (Result{true, "2"}));
  EXPECT_EQ(c.all("dst"), (Strings{"a", "0", "d", "0"}));
  EXPECT_EQ(c.run(cmd(Op::kZRangeStore, "dst", encode_names({"none"}),
                      encode_zrange(by(ZRange::kRank, "0", "-1")))),
            (Result{true, "0"}));
  EXPECT_EQ(s.data().count("dst"), 0u);
}

Command combine(Op op, std::string key, const Strings& sources, ZCombine z) {
  return cmd(op, std::move(key), encode_names(sources), encode_zcombine(z));
}
ZCombine how(ZCombine::How h, Strings weights = {}, std::string aggregate = "sum") {
  ZCombine z;
  z.how = h;
  z.weights = std::move(weights);
  z.aggregate = std::move(aggregate);
  z.with_scores = true;
  return z;
}

TEST(StoreZsetTest, UnionInterAndDiffFollowRedisWithSetsAmongTheSources) {
  Store s;
  ZsetClient c{s};
  c.run(zadd("a", {"1", "x", "2", "y", "3", "z"}));
  c.run(zadd("b", {"0", "x", "10", "y", "-5", "w"}));
  c.run(cmd(Op::kSAdd, "set", encode_names({"x", "w", "v"})));
  c.run(cmd(Op::kPut, "str", "v"));
  EXPECT_EQ(c.names(combine(Op::kZCombine, "a", {"a", "b", "set"},
                            how(ZCombine::kUnion, {"2", "1", "-1"}, "max"))),
            (Strings{"v", "-1", "w", "-1", "x", "2", "z", "6", "y", "10"}));
  EXPECT_EQ(c.names(combine(Op::kZCombine, "a", {"a", "set"}, how(ZCombine::kInter))),
            (Strings{"x", "2"}))
      << "a set's members score 1";
  EXPECT_EQ(c.names(combine(Op::kZCombine, "b", {"b"}, how(ZCombine::kUnion, {"-1"}))),
            (Strings{"y", "-10", "x", "-0", "w", "5"}))
      << "a read answers the -0 it computed";
  EXPECT_EQ(c.names(combine(Op::kZCombine, "a", {"a", "b"}, how(ZCombine::kDiff))),
            (Strings{"z", "3"}));
  ZCombine card = how(ZCombine::kInterCard);
  card.limit = 1;
  EXPECT_EQ(c.run(combine(Op::kZCombine, "a", {"a", "b"}, card)), (Result{true, "1"}));
  EXPECT_EQ(c.run(combine(Op::kZCombineStore, "str", {"a", "b"}, how(ZCombine::kInter))),
            (Result{true, "2"}))
      << "the destination's type is not looked at";
  EXPECT_EQ(c.all("str"), (Strings{"x", "1", "y", "12"}));
  EXPECT_EQ(c.run(combine(Op::kZCombineStore, "str", {"none"}, how(ZCombine::kDiff))),
            (Result{true, "0"}));
  EXPECT_EQ(s.data().count("str"), 0u) << "an empty result removes the destination";
  c.run(cmd(Op::kPut, "str", "v"));
  ZCombine bad = how(ZCombine::kUnion);
  bad.error = "ERR weight value is not a float";
  EXPECT_EQ(c.run(combine(Op::kZCombine, "a", {"a", "str"}, bad)), kWrong) << "WRONGTYPE first";
  EXPECT_EQ(c.run(combine(Op::kZCombine, "a", {"a", "b"}, bad)),
            (Result{false, "ERR weight value is not a float"}));
}

TEST(StoreZsetTest, ZmpopTakesTheFirstKeyThatExistsAndZscanPagesThroughEveryMember) {
  Store s;
  ZsetClient c{s};
  c.run(zadd("b", {"1", "x", "2", "y", "3", "z"}));
  c.run(cmd(Op::kPut, "str", "v"));
  auto mpop = [](Strings keys, std::string how, std::string count) {
    return cmd(Op::kZMPop, keys.front(), encode_names(keys), encode_names({how, count}));
  };
  EXPECT_EQ(c.names(mpop({"none", "b", "str"}, "max", "2")), (Strings{"b", "z", "3", "y", "2"}));
  EXPECT_EQ(c.run(mpop({"none"}, "min", "1")), (Result{false, ""})) << "Redis's null array";
  EXPECT_EQ(c.run(mpop({"str", "b"}, "min", "1")), kWrong) << "the first key that exists decides";
  EXPECT_EQ(c.names(mpop({"b"}, "min", "5")), (Strings{"b", "x", "1"}));
  EXPECT_EQ(s.data().count("b"), 0u);
  Strings pairs;
  for (int i = 0; i < 50; ++i) {
    pairs.push_back(std::to_string(i) + ".5");
    pairs.push_back("m" + std::to_string(i));
  }
  c.run(zadd("big", pairs));
  size_t pages = 0;
  const Strings got = testing::scan_all(c, Op::kZScan, "big", 7, "*", false, &pages);
  std::map<std::string, std::string> seen;
  for (size_t i = 0; i + 1 < got.size(); i += 2) seen.emplace(got[i], got[i + 1]);
  EXPECT_EQ(got.size(), 100u) << "each member once, with its score";
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_EQ(seen["m7"], "7.5");
  EXPECT_GT(pages, 5u);
  const Strings matched = testing::scan_all(c, Op::kZScan, "big", 100, "m4*");
  std::map<std::string, std::string> four;
  for (size_t i = 0; i + 1 < matched.size(); i += 2) four.emplace(matched[i], matched[i + 1]);
  EXPECT_EQ(matched.size(), 22u) << "MATCH: m4 and m40 .. m49, in the scan's (hash) order";
  EXPECT_EQ(four.size(), 11u);
  EXPECT_EQ(four["m45"], "45.5");
  EXPECT_EQ(c.run(cmd(Op::kZScan, "str", encode_scan_request({0, 10, ""}), "*")), kWrong);
}

// ZRANDMEMBER chooses from the seed in the entry alone, as SRANDMEMBER.
TEST(StoreZsetTest, ZrandmemberChoosesFromTheSeedAlone) {
  Store s, t;
  ZsetClient c{s}, d{t};
  for (ZsetClient* x : {&c, &d}) x->run(zadd("z", {"1", "a", "2", "b", "3", "c", "4", "d"}));
  auto rand = [](uint64_t seed, std::string count, bool scores) {
    return cmd(Op::kZRandMember, "z", std::to_string(seed),
               encode_names({std::move(count), scores ? "1" : ""}));
  };
  std::set<std::string> chosen;
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    const Strings two = c.names(rand(seed, "2", false));
    EXPECT_EQ(two, d.names(rand(seed, "2", false))) << "the same seed, the same choice";
    ASSERT_EQ(two.size(), 2u);
    EXPECT_LT(two[0], two[1]) << "distinct, in score order";
    chosen.insert(two.begin(), two.end());
    const Result one = c.run(rand(seed, "", false));
    EXPECT_TRUE(one.ok);
    chosen.insert(one.value);
  }
  EXPECT_EQ(chosen.size(), 4u) << "every member is chosen some time";
  EXPECT_EQ(c.names(rand(7, "9", true)), (Strings{"d", "4", "c", "3", "b", "2", "a", "1"}))
      << "the whole set from the highest score, as Redis 7.0 answers";
  EXPECT_EQ(c.names(rand(7, "-7", true)).size(), 14u) << "repeats";
  EXPECT_EQ(c.names(rand(7, "0", false)), Strings{});
  EXPECT_EQ(c.run(cmd(Op::kZRandMember, "none", "1", encode_names({"", ""}))), (Result{false, ""}));
  EXPECT_EQ(c.names(cmd(Op::kZRandMember, "none", "1", encode_names({"3", ""}))), Strings{});
  EXPECT_EQ(c.run(cmd(Op::kZCard, "z")), (Result{true, "4"})) << "nothing removed";
}

TEST(StoreZsetTest, AZsetCommandOnAnotherTypeAndTheirsOnAZsetAreWrongType) {
  Store s;
  ZsetClient c{s};
  c.run(zadd("z", {"1", "a"}));
  c.run(cmd(Op::kPut, "s", "v"));
  c.run(cmd(Op::kSAdd, "set", encode_names({"m"})));
  EXPECT_EQ(c.run(zadd("s", {"1", "a"})), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kZCard, "set")), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kZRangeStore, "d", encode_names({"s"}),
                      encode_zrange(by(ZRange::kRank, "0", "-1")))),
            kWrong);
  EXPECT_EQ(c.run(cmd(Op::kGet, "z")), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kSAdd, "z", encode_names({"m"}))), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kType, "z")), (Result{true, "zset"}));
  EXPECT_EQ(c.run(cmd(Op::kRename, "z", "y")), (Result{true, ""}));
  EXPECT_EQ(c.all("y"), (Strings{"a", "1"}));
  EXPECT_EQ(c.run(cmd(Op::kPut, "y", "v")), (Result{true, ""})) << "SET replaces a zset";
  EXPECT_EQ(c.run(cmd(Op::kType, "y")), (Result{true, "string"}));
}

TEST(StoreZsetTest, AZsetCountsTowardMaxmemoryAndOnlyLongReadsAreRefused) {
  StoreOptions o;
  const uint64_t one = Store::kEntryOverhead + 1 + 2 * (Store::kZMemberOverhead + 2 * 10);
  o.maxmemory = one;
  Store s(o);
  ZsetClient c{s};
  const std::string a(10, 'a'), b(10, 'b');
  EXPECT_FALSE(c.run(zadd("z", {"1", a, "2", b})).refused);
  EXPECT_EQ(s.used_bytes(), one);
  EXPECT_TRUE(c.run(zadd("z", {"1", "x"})).refused);
  EXPECT_TRUE(c.run(zadd("y", {"1", "x"})).refused);
  EXPECT_FALSE(c.run(zadd("z", {"5", a})).refused) << "a new score takes nothing more";
  EXPECT_TRUE(c.run(cmd(Op::kZRangeStore, "d", encode_names({"z"}),
                        encode_zrange(by(ZRange::kRank, "0", "-1"))))
                  .refused);
  EXPECT_TRUE(c.run(cmd(Op::kZPop, "z", "min", "1")).ok) << "pops always run";
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
  // A sorted set grows past one reply (bounded by maxmemory, as Redis's):
  // reading it whole and a pop of more than a reply holds answer an error
  // and change nothing; a short range and a pop of a few run.
  StoreOptions r;
  r.max_result_bytes = 4096;
  Store big(r);
  ZsetClient q{big};
  for (int i = 0; i < 100; ++i)
    EXPECT_FALSE(q.run(zadd("b", {"1", std::to_string(1000 + i) + std::string(96, 'm')})).refused);
  EXPECT_EQ(q.run(cmd(Op::kZCard, "b")), (Result{true, "100"}));
  const Result all = q.run(range(Op::kZRange, "b", by(ZRange::kRank, "0", "-1")));
  EXPECT_EQ(all.value.rfind(kLongReply, 0), 0u) << all.value.substr(0, 80);
  EXPECT_TRUE(q.run(range(Op::kZRange, "b", by(ZRange::kRank, "0", "2"))).ok);
  EXPECT_EQ(q.run(cmd(Op::kZPop, "b", "min", "60")).value.rfind(kLongReply, 0), 0u);
  EXPECT_EQ(q.run(cmd(Op::kZCard, "b")), (Result{true, "100"}));
  EXPECT_TRUE(q.run(cmd(Op::kZPop, "b", "min", "3")).ok);
  EXPECT_EQ(q.run(cmd(Op::kZCard, "b")), (Result{true, "97"}));
  EXPECT_EQ(big.used_bytes(), Store::keyspace_bytes(big.data()));
}

// The store decides a ZADD's limits from the members it names alone (O(k
// log n), Store::sizes_after); every decision is the one a copy of
// the whole sorted set gives.
TEST(StoreZsetTest, AZaddIsRefusedExactlyWhenTheWholeSetWouldPassMaxmemory) {
  std::mt19937_64 rng(3940);
  auto rnd = [&rng](uint64_t n) { return rng() % n; };
  const char* scores[] = {"0", "1", "-1", "2.5", "inf", "0.1", "1e300", "-0"};
  const char* options[] = {"", "", "N", "X", "G", "L", "C", "I"};
  for (const bool memory : {true, false}) {
    StoreOptions o;
    (memory ? o.maxmemory : o.max_result_bytes) = memory ? 6000 : 900;
    Store s(o);
    ZsetClient c{s};
    size_t refused = 0, applied = 0;
    for (int i = 0; i < 2000; ++i) {
      Strings pairs;
      const std::string opts = options[rnd(std::size(options))];
      for (uint64_t j = 0, n = opts == "I" ? 1 : 1 + rnd(3); j < n; ++j) {
        pairs.push_back(scores[rnd(8)]);
        pairs.push_back("m" + std::to_string(rnd(40)) + std::string(rnd(12), 'v'));
      }
      const std::string key = "k" + std::to_string(rnd(3));
      const Command add = zadd(key, pairs, opts);
      // What the whole set would become.
      Keyspace whole;
      if (auto it = s.data().find(key); it != s.data().end()) whole.emplace(*it);
      execute(whole, add);
      uint64_t after = 0, item = 0;
      if (auto it = whole.find(key); it != whole.end()) {
        after = Store::entry_bytes(it->first, it->second);
        item = key.size() + item_bytes(it->second);
      }
      const uint64_t before = s.data().count(key) ? Store::entry_bytes(key, s.data().at(key)) : 0;
      // (One reply's size bounds no sorted set: only a read of too much.)
      const bool over = memory && after > before && s.used_bytes() - before + after > o.maxmemory;
      (void)item;
      const Result r = c.run(add);
      EXPECT_EQ(r.refused, over) << i;
      refused += r.refused;
      applied += !r.refused;
      if (i % 3 == 0) c.run(cmd(Op::kZPop, key, "min", std::to_string(rnd(3))));
    }
    if (memory) {
      EXPECT_GT(refused, 100u);
    } else {
      EXPECT_EQ(refused, 0u);
    }
    EXPECT_GT(applied, 100u);
    EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
  }
}

TEST(StoreZsetTest, ASnapshotCarriesZsetsAndAnOlderSnapshotIsStillRead) {
  StoreOptions o;
  o.keep_applied = false;
  Store s(o);
  ZsetClient c{s};
  c.run(zadd("z", {"1.5", "a", "-inf", std::string("\0\xff", 2), "1.5", "", "3", "c"}));
  c.run(cmd(Op::kSAdd, "set", encode_names({"a"})));
  Store back;
  std::string why;
  ASSERT_TRUE(back.restore(s.serialize(), &why)) << why;
  EXPECT_EQ(back.digest(), s.digest());
  EXPECT_EQ(back.used_bytes(), s.used_bytes());
  EXPECT_EQ(back.data(), s.data());
  // The digest covers the scores.
  Store other(o);
  ZsetClient e{other};
  e.run(zadd("z", {"1.5", "a", "-inf", std::string("\0\xff", 2), "1.5", "", "4", "c"}));
  e.run(cmd(Op::kSAdd, "set", encode_names({"a"})));
  EXPECT_NE(other.digest(), s.digest());
  // A snapshot of the version before sorted sets ("KVS8").
  const std::string old = testing::old_snapshot(0x4b565338, 7, 1, [](wire::Writer<std::string>& w) {
    testing::old_item(w, "set", 7);
    w.put<uint32_t>(0);
    w.put<uint32_t>(0);
    w.put<uint32_t>(1);
    w.str("m");
  });
  ASSERT_TRUE(back.restore(old, &why)) << why;
  EXPECT_EQ(*back.data().at("set").members.begin(), "m");
  // A member twice is refused, the store unchanged.
  std::string bytes = s.serialize();
  const size_t at = bytes.find(std::string("\x01\0\0\0c", 5));
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, std::string("\x01\0\0\0a", 5));
  EXPECT_FALSE(back.restore(bytes, &why));
  EXPECT_EQ(*back.data().at("set").members.begin(), "m") << "unchanged";
}

TEST(StoreZsetTest, ReplicasApplyingTheSameZsetCommandsEndIdentical) {
  StoreOptions o;
  o.maxmemory = 2000;
  o.max_result_bytes = 600;
  std::mt19937_64 rng(3939);  // (its sequence is the standard's: the same everywhere)
  auto rnd = [&rng](uint64_t n) { return rng() % n; };
  const Op ops[] = {Op::kZAdd,          Op::kZAdd,      Op::kZAdd,   Op::kZRem,
                    Op::kZScore,        Op::kZCard,     Op::kZRank,  Op::kZCount,
                    Op::kZRange,        Op::kZRemRange, Op::kZPop,   Op::kPut,
                    Op::kZRangeStore,   Op::kRename,    Op::kDelete, Op::kZCombine,
                    Op::kZCombineStore, Op::kSAdd,      Op::kZMPop,  Op::kZRandMember};
  const char* scores[] = {"0", "1", "-1", "2.5", "inf", "-inf", "1e3", "-0"};
  const char* options[] = {"", "", "", "N", "X", "G", "L", "C", "I", "XGC"};
  auto key = [&rnd] { return "k" + std::to_string(rnd(5)); };
  auto member = [&rnd] { return "m" + std::to_string(rnd(10)) + std::string(rnd(20), 'v'); };
  auto a_range = [&] {
    const auto kind = static_cast<ZRange::By>(rnd(3));
    ZRange q = kind == ZRange::kRank    ? by(kind, std::to_string(int(rnd(6)) - 3), "-1")
               : kind == ZRange::kScore ? by(kind, rnd(2) ? "(0" : "-inf", scores[rnd(8)])
                                        : by(kind, rnd(2) ? "[m3" : "-", rnd(2) ? "(m7" : "+");
    q.rev = rnd(2) == 0;
    q.with_scores = rnd(2) == 0;
    if (kind != ZRange::kRank && rnd(3) == 0) q.offset = rnd(3), q.limit = rnd(4);
    return q;
  };
  std::vector<Command> log;
  for (uint64_t seq = 1; seq <= 3000; ++seq) {
    const Op op = ops[rnd(std::size(ops))];
    Command c = cmd(op, key(), "v", member());
    if (op == Op::kZAdd) {
      Strings pairs;
      const std::string opts = options[rnd(std::size(options))];
      for (uint64_t i = 0, n = opts == "I" ? 1 : 1 + rnd(3); i < n; ++i) {
        pairs.push_back(scores[rnd(8)]);
        pairs.push_back(member());
      }
      c = zadd(c.key, pairs, opts);
    } else if (op == Op::kZRem || op == Op::kZScore) {
      c.value = encode_names({member(), member()});
    } else if (op == Op::kZRank) {
      c.value = rnd(2) ? "rev" : "";
    } else if (op == Op::kZCount || op == Op::kZRange || op == Op::kZRemRange) {
      c.expected = encode_zrange(a_range());
    } else if (op == Op::kZPop) {
      c = cmd(op, c.key, rnd(2) ? "min" : "max", rnd(3) ? std::to_string(rnd(4)) : "");
    } else if (op == Op::kZRangeStore) {
      c = cmd(op, key(), encode_names({key()}), encode_zrange(a_range()));
    } else if (op == Op::kRename) {
      c.value = key();
    } else if (op == Op::kZCombine || op == Op::kZCombineStore) {
      const Strings sources{key(), key()};
      ZCombine z = how(static_cast<ZCombine::How>(rnd(4)), {}, rnd(2) ? "sum" : "max");
      if (z.how != ZCombine::kDiff && rnd(2)) z.weights = {scores[rnd(8)], scores[rnd(8)]};
      c = combine(op, op == Op::kZCombine ? sources.front() : key(), sources, z);
    } else if (op == Op::kSAdd) {
      c.value = encode_names({member()});
    } else if (op == Op::kZRandMember) {
      c = cmd(op, c.key, std::to_string(rng()),
              encode_names({rnd(3) ? std::to_string(int(rnd(7)) - 3) : "", rnd(2) ? "1" : ""}));
    } else if (op == Op::kZMPop) {
      const Strings keys{key(), key()};
      c = cmd(op, keys.front(), encode_names(keys),
              encode_names({rnd(2) ? "min" : "max", std::to_string(1 + rnd(3))}));
    }
    c.client = 1;
    c.seq = seq;
    log.push_back(c);
  }
  const auto [refused, zsets] =
      testing::refused_and_held(o, log, [](const Item& e) { return e.is_zset(); });
  EXPECT_GT(refused, 10u) << "the limits were reached";
  EXPECT_GT(zsets, 1000u) << "sorted sets were there";
}

// Ranks and counts in a set of thousands of members (the index keeps its
// subtrees' sizes): ZRANK, ZREVRANK, ZRANGE by rank and ZCOUNT by score
// against a sorted list of the same members, as members come, go and
// change score.
TEST(StoreZsetTest, RanksAndCountsInABigSetAreThoseOfTheSortedMembers) {
  Store s;
  ZsetClient c{s};
  std::mt19937_64 rng(11);
  std::map<std::string, double> members;
  auto sorted = [&members] {
    std::vector<ZEntry> v;
    for (const auto& [m, score] : members) v.emplace_back(score, m);
    std::sort(v.begin(), v.end(), ZOrder{});
    return v;
  };
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 1500; ++i) {
      const std::string m = "m" + std::to_string(rng() % 3000);
      if (rng() % 4 == 0 && members.count(m) != 0) {
        ASSERT_EQ(c.run(cmd(Op::kZRem, "z", encode_names({m}))), (Result{true, "1"}));
        members.erase(m);
      } else {
        const double score = static_cast<double>(rng() % 500);
        c.run(zadd("z", {std::to_string(static_cast<int>(score)), m}));
        members[m] = score;
      }
    }
    const std::vector<ZEntry> want = sorted();
    const size_t n = want.size();
    ASSERT_GT(n, round == 0 ? 900u : 1300u);
    for (int q = 0; q < 200; ++q) {
      const size_t r = rng() % n;
      ZRange rank_q = by(ZRange::kRank, std::to_string(r), std::to_string(r));
      Command rank_cmd = cmd(Op::kZRank, "z");
      rank_cmd.expected = want[r].second;
      ASSERT_EQ(c.run(rank_cmd), (Result{true, std::to_string(r)})) << want[r].second;
      rank_cmd.value = "rev";
      ASSERT_EQ(c.run(rank_cmd), (Result{true, std::to_string(n - 1 - r)}));
      ASSERT_EQ(c.names(range(Op::kZRange, "z", rank_q)), (Strings{want[r].second}));
      const int lo = static_cast<int>(rng() % 500), hi = lo + static_cast<int>(rng() % 100);
      const auto count = std::count_if(
          want.begin(), want.end(), [&](const ZEntry& e) { return e.first > lo && e.first <= hi; });
      ASSERT_EQ(c.run(range(Op::kZCount, "z",
                            by(ZRange::kScore, "(" + std::to_string(lo), std::to_string(hi)))),
                (Result{true, std::to_string(count)}))
          << lo << " " << hi;
    }
  }
}

}  // namespace
}  // namespace kv
