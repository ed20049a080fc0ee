// The store's sets (apps/kv/store_sets.cc): every set command's result as
// Redis answers it, SPOP's and SRANDMEMBER's choices made from the seed in
// the log alone, WRONGTYPE both ways, the commands on several keys with
// WATCH, the limits (maxmemory and the size of one reply) against a hostile
// client, snapshots old and new, and replicas that apply the same log
// ending identical.
#include <gtest/gtest.h>

#include <algorithm>
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
using Strings = std::vector<std::string>;

Command members(Op op, std::string key, const Strings& names) {
  return cmd(op, std::move(key), encode_names(names));
}
// A command on several keys: sinter, ..., sintercard (`key` the first of
// `keys`), or a store form (`key` the destination).
Command keys_op(Op op, const Strings& keys, std::string dest = "", std::string limit = "") {
  const bool store = op == Op::kSInterStore || op == Op::kSUnionStore || op == Op::kSDiffStore;
  return cmd(op, store ? dest : keys.front(), encode_names(keys), std::move(limit));
}
Command choose(Op op, std::string key, uint64_t seed, std::string count = "") {
  return cmd(op, std::move(key), std::to_string(seed), std::move(count));
}

struct SetClient : testing::NamesClient {
  Strings all(const std::string& key) { return names(cmd(Op::kSMembers, key)); }
};

TEST(StoreSetTest, SaddSremScardAndMembershipFollowRedis) {
  Store s;
  SetClient c{s};
  EXPECT_EQ(c.run(members(Op::kSAdd, "s", {"b", "a", "b", ""})), (Result{true, "3"}));
  EXPECT_EQ(c.run(members(Op::kSAdd, "s", {"a", "c"})), (Result{true, "1"}));
  EXPECT_EQ(c.all("s"), (Strings{"", "a", "b", "c"})) << "byte order";
  EXPECT_EQ(c.all("absent"), Strings{});
  EXPECT_EQ(c.run(cmd(Op::kSCard, "s")), (Result{true, "4"}));
  EXPECT_EQ(c.run(cmd(Op::kSCard, "absent")), (Result{true, "0"}));
  EXPECT_EQ(c.run(cmd(Op::kSIsMember, "s", "", "a")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kSIsMember, "s", "", "z")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kSIsMember, "absent", "", "a")), (Result{false, ""}));
  EXPECT_EQ(c.run(members(Op::kSMIsMember, "s", {"a", "z", "", "a"})), (Result{true, "1011"}));
  EXPECT_EQ(c.run(members(Op::kSMIsMember, "absent", {"a"})), (Result{true, "0"}));
  EXPECT_EQ(c.run(members(Op::kSRem, "s", {"a", "z", "a"})), (Result{true, "1"}));
  EXPECT_EQ(c.run(members(Op::kSRem, "s", {"z"})), (Result{false, "0"}));
  EXPECT_EQ(c.run(members(Op::kSRem, "absent", {"z"})), (Result{false, "0"}));
  EXPECT_EQ(c.run(members(Op::kSRem, "s", {"", "b", "c"})), (Result{true, "3"}));
  EXPECT_EQ(s.size(), 0u) << "the key goes with its last member";
  EXPECT_EQ(s.used_bytes(), 0u);
}

TEST(StoreSetTest, SpopAndSrandmemberChooseFromTheSeedAloneAndSpopRemovesWhatItAnswers) {
  const Strings five{"a", "b", "c", "d", "e"};
  // Two stores given the same seeds choose the same; over many seeds every
  // member is chosen some time.
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    Store s1, s2;
    SetClient c1{s1}, c2{s2};
    c1.run(members(Op::kSAdd, "s", five));
    c2.run(members(Op::kSAdd, "s", five));
    const Result r = c1.run(choose(Op::kSPop, "s", seed));
    EXPECT_EQ(c2.run(choose(Op::kSPop, "s", seed)), r);
    ASSERT_TRUE(r.ok);
    seen.insert(r.value);
    EXPECT_EQ(c1.run(cmd(Op::kSIsMember, "s", "", r.value)), (Result{false, ""})) << "popped";
    EXPECT_EQ(c1.run(cmd(Op::kSCard, "s")), (Result{true, "4"}));
    const Result rand = c1.run(choose(Op::kSRandMember, "s", seed * 7));
    EXPECT_EQ(c2.run(choose(Op::kSRandMember, "s", seed * 7)), rand);
    EXPECT_EQ(c1.run(cmd(Op::kSIsMember, "s", "", rand.value)), (Result{true, ""})) << "kept";
    EXPECT_EQ(s1.data(), s2.data());
  }
  EXPECT_EQ(seen.size(), five.size());

  Store s;
  SetClient c{s};
  c.run(members(Op::kSAdd, "s", five));
  // With a count: distinct members in byte order, at most the set.
  const Strings three = c.names(choose(Op::kSRandMember, "s", 1, "3"));
  EXPECT_EQ(three.size(), 3u);
  EXPECT_TRUE(std::is_sorted(three.begin(), three.end()));
  EXPECT_EQ(std::set<std::string>(three.begin(), three.end()).size(), 3u);
  EXPECT_EQ(c.names(choose(Op::kSRandMember, "s", 1, "9")), five);
  EXPECT_EQ(c.names(choose(Op::kSRandMember, "s", 1, "0")), Strings{});
  // A negative count: that many, repeats allowed.
  const Strings twenty = c.names(choose(Op::kSRandMember, "s", 3, "-20"));
  EXPECT_EQ(twenty.size(), 20u);
  EXPECT_LT(std::set<std::string>(twenty.begin(), twenty.end()).size(), 20u);
  for (const std::string& m : twenty) EXPECT_TRUE(std::count(five.begin(), five.end(), m));
  const Strings two = c.names(choose(Op::kSPop, "s", 5, "2"));
  EXPECT_EQ(two.size(), 2u);
  EXPECT_EQ(c.run(cmd(Op::kSCard, "s")), (Result{true, "3"}));
  for (const std::string& m : two) EXPECT_EQ(c.run(cmd(Op::kSIsMember, "s", "", m)).ok, false);
  EXPECT_EQ(c.names(choose(Op::kSPop, "s", 5, "0")), Strings{});
  EXPECT_EQ(c.names(choose(Op::kSPop, "s", 5, "10")).size(), 3u);
  EXPECT_EQ(s.size(), 0u) << "the key goes with its last member";
  EXPECT_EQ(c.run(choose(Op::kSPop, "s", 5)), (Result{false, ""}));
  EXPECT_EQ(c.run(choose(Op::kSPop, "s", 5, "3")), (Result{false, ""}));
  EXPECT_EQ(c.run(choose(Op::kSRandMember, "s", 5, "-3")), (Result{false, ""}));
}

TEST(StoreSetTest, TheCommandsOnSeveralKeysFollowRedis) {
  Store s;
  SetClient c{s};
  c.run(members(Op::kSAdd, "x", {"a", "b", "c", "d"}));
  c.run(members(Op::kSAdd, "y", {"c", "d", "e"}));
  c.run(members(Op::kSAdd, "z", {"d", "z"}));
  EXPECT_EQ(c.names(keys_op(Op::kSInter, {"x", "y"})), (Strings{"c", "d"}));
  EXPECT_EQ(c.names(keys_op(Op::kSInter, {"x", "y", "z"})), (Strings{"d"}));
  EXPECT_EQ(c.names(keys_op(Op::kSInter, {"x", "absent"})), Strings{});
  EXPECT_EQ(c.names(keys_op(Op::kSUnion, {"y", "absent", "z"})), (Strings{"c", "d", "e", "z"}));
  EXPECT_EQ(c.names(keys_op(Op::kSDiff, {"x", "y"})), (Strings{"a", "b"}));
  EXPECT_EQ(c.names(keys_op(Op::kSDiff, {"x", "y", "z"})), (Strings{"a", "b"}));
  EXPECT_EQ(c.names(keys_op(Op::kSDiff, {"absent", "x"})), Strings{});
  EXPECT_EQ(c.run(keys_op(Op::kSInterCard, {"x", "y"}, "", "0")), (Result{true, "2"}));
  EXPECT_EQ(c.run(keys_op(Op::kSInterCard, {"x", "y"}, "", "1")), (Result{true, "1"}));
  // The store forms replace whatever the destination held, deadline and all.
  c.run(cmd(Op::kPut, "dest", "a string"));
  ASSERT_TRUE(c.run(testing::expire_at("dest", kNow + 1000)).ok);
  EXPECT_EQ(c.run(keys_op(Op::kSUnionStore, {"x", "y"}, "dest")), (Result{true, "5"}));
  EXPECT_EQ(c.all("dest"), (Strings{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(c.run(cmd(Op::kTtl, "dest")), (Result{true, "-1"}));
  EXPECT_EQ(c.run(keys_op(Op::kSInterStore, {"dest", "z"}, "dest")), (Result{true, "1"}));
  EXPECT_EQ(c.all("dest"), (Strings{"d"}));
  EXPECT_EQ(c.run(keys_op(Op::kSDiffStore, {"dest", "x"}, "dest")), (Result{true, "0"}));
  EXPECT_EQ(s.data().count("dest"), 0u) << "an empty result removes the destination";
  // SMOVE: from the source (which goes with its last member) to the
  // destination (made if absent).
  EXPECT_EQ(c.run(cmd(Op::kSMove, "z", "w", "z")), (Result{true, "1"}));
  EXPECT_EQ(c.run(cmd(Op::kSMove, "z", "w", "z")), (Result{false, "0"}));
  EXPECT_EQ(c.run(cmd(Op::kSMove, "z", "w", "d")), (Result{true, "1"}));
  EXPECT_EQ(s.data().count("z"), 0u);
  EXPECT_EQ(c.all("w"), (Strings{"d", "z"}));
  EXPECT_EQ(c.run(cmd(Op::kSMove, "w", "w", "d")), (Result{true, "1"}));
  EXPECT_EQ(c.run(cmd(Op::kSMove, "w", "w", "q")), (Result{false, "0"}));
  EXPECT_EQ(c.run(cmd(Op::kSMove, "absent", "w", "d")), (Result{false, "0"}));
  // Any key of another type: WRONGTYPE, nothing changed (an absent source
  // of SMOVE answers 0 first, as Redis's).
  c.run(cmd(Op::kPut, "str", "v"));
  EXPECT_EQ(c.run(keys_op(Op::kSInter, {"x", "str"})), kWrong);
  EXPECT_EQ(c.run(keys_op(Op::kSInter, {"absent", "str"})), kWrong);
  EXPECT_EQ(c.run(keys_op(Op::kSUnionStore, {"x", "str"}, "w")), kWrong);
  EXPECT_EQ(c.run(keys_op(Op::kSInterCard, {"str"}, "", "0")), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kSMove, "x", "str", "a")), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kSMove, "str", "x", "a")), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kSMove, "absent", "str", "a")), (Result{false, "0"}));
  EXPECT_EQ(c.all("w"), (Strings{"d", "z"}));
  EXPECT_EQ(c.all("x"), (Strings{"a", "b", "c", "d"}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

TEST(StoreSetTest, AStringHashOrListCommandOnASetAndASetCommandOnThemAreWrongType) {
  Store s;
  SetClient c{s};
  c.run(members(Op::kSAdd, "set", {"1"}));
  c.run(cmd(Op::kPut, "s", "1"));
  c.run(cmd(Op::kHSet, "h", encode_fields({{"f", "1"}})));
  c.run(cmd(Op::kRPush, "l", encode_names({"1"})));
  for (Op op : {Op::kGet, Op::kIncrBy, Op::kAppend, Op::kGetSet, Op::kGetDel, Op::kSetNx, Op::kHGet,
                Op::kHLen, Op::kLLen, Op::kLRange, Op::kLPop})
    EXPECT_EQ(c.run(cmd(op, "set", "1", "0")), kWrong) << op_name(op);
  EXPECT_EQ(c.run(cmd(Op::kRPush, "set", encode_names({"x"}))), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kSetXx, "set", "v", "get")), kWrong) << "SET XX GET reads it";
  for (const char* key : {"s", "h", "l"}) {
    for (Op op : {Op::kSAdd, Op::kSRem, Op::kSCard, Op::kSIsMember, Op::kSMIsMember, Op::kSMembers,
                  Op::kSPop, Op::kSRandMember}) {
      const bool named = op == Op::kSAdd || op == Op::kSRem || op == Op::kSMIsMember;
      EXPECT_EQ(c.run(named ? members(op, key, {"x"}) : cmd(op, key, "1", "x")), kWrong)
          << op_name(op) << " on " << key;
    }
  }
  EXPECT_EQ(c.all("set"), (Strings{"1"}));
  EXPECT_EQ(c.run(cmd(Op::kType, "set")), (Result{true, "set"}));
  EXPECT_EQ(c.run(cmd(Op::kTtl, "set")), (Result{true, "-1"}));
  EXPECT_EQ(c.run(cmd(Op::kPut, "set", "v")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kGet, "set")), (Result{true, "v"}));
  c.run(members(Op::kSAdd, "set2", {"1"}));
  EXPECT_EQ(c.run(cmd(Op::kDelete, "set2")), (Result{true, ""}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

TEST(StoreSetTest, SetsExpireRenameScanAndAWriteToAWatchedSetAbortsExec) {
  Store s;
  SetClient c{s};
  c.run(members(Op::kSAdd, "s", {"a"}));
  ASSERT_TRUE(c.run(testing::expire_at("s", kNow + 10)).ok);
  Command late = keys_op(Op::kSUnion, {"s"});
  late.now_ms = kNow + 10;
  EXPECT_EQ(c.run(late), (Result{true, encode_names({})})) << "expired at its deadline";
  EXPECT_EQ(s.size(), 0u);

  c.run(members(Op::kSAdd, "s", {"a", "b"}));
  EXPECT_TRUE(c.run(cmd(Op::kRename, "s", "moved")).ok);
  EXPECT_EQ(c.all("moved"), (Strings{"a", "b"}));
  c.run(cmd(Op::kPut, "str", "1"));
  ScanRequest q;
  q.count = 100;
  q.type = "set";
  KeysPage page;
  ASSERT_TRUE(decode_keys(c.run(cmd(Op::kScan, "*", encode_scan_request(q))).value, &page));
  EXPECT_EQ(page.keys, Strings{"moved"});
  // Each write of another client to a watched set makes EXEC fail: SADD of
  // a new member, SPOP, SMOVE into it, a store form onto it; a read or an
  // SADD of a member it holds does not.
  c.run(members(Op::kSAdd, "other", {"o"}));
  std::vector<Command> writes{members(Op::kSAdd, "moved", {"new"}), choose(Op::kSPop, "moved", 1),
                              cmd(Op::kSMove, "other", "moved", "o"),
                              keys_op(Op::kSUnionStore, {"other"}, "moved")};
  std::vector<Command> reads{members(Op::kSAdd, "moved", {"a"}), cmd(Op::kSMembers, "moved"),
                             keys_op(Op::kSInter, {"moved", "other"})};
  uint64_t other_seq = 0;
  auto exec_after = [&](const Command& by_other) {
    c.run(cmd(Op::kWatch, "moved"));
    Transaction t;
    t.conditions.push_back(TxCondition{TxCondition::kUnchanged, "moved", c.seq});
    Command o = by_other;
    o.client = 2;
    o.seq = ++other_seq;
    s.apply(o);
    t.cmds.push_back(cmd(Op::kSCard, "moved"));
    return c.run(cmd(Op::kMulti, "", encode_transaction(t))).ok;
  };
  for (const Command& w : writes) {
    EXPECT_FALSE(exec_after(w)) << op_name(w.op);
    c.run(members(Op::kSAdd, "moved", {"a", "b"}));
    c.run(members(Op::kSAdd, "other", {"o"}));
  }
  for (const Command& r : reads) EXPECT_TRUE(exec_after(r)) << op_name(r.op);
  // A transaction holds set commands, on several keys too.
  Transaction t;
  t.cmds.push_back(members(Op::kSAdd, "t1", {"x", "y"}));
  t.cmds.push_back(cmd(Op::kSMove, "t1", "t2", "x"));
  t.cmds.push_back(keys_op(Op::kSUnion, {"t1", "t2"}));
  const Result r = c.run(cmd(Op::kMulti, "", encode_transaction(t)));
  std::vector<Result> results;
  ASSERT_TRUE(r.ok);
  ASSERT_TRUE(decode_results(r.value, &results));
  EXPECT_EQ(results,
            (std::vector<Result>{{true, "2"}, {true, "1"}, {true, encode_names({"x", "y"})}}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

TEST(StoreSetTest, ASetCountsTowardMaxmemoryAndAHostileClientCannotPassIt) {
  StoreOptions o;
  const uint64_t one = Store::kEntryOverhead + 1 + 2 * (Store::kMemberOverhead + 10);
  o.maxmemory = one;
  Store s(o);
  SetClient c{s};
  const std::string a(10, 'a'), b(10, 'b');
  EXPECT_FALSE(c.run(members(Op::kSAdd, "s", {a, b})).refused);
  EXPECT_EQ(s.used_bytes(), one);
  EXPECT_EQ(c.run(members(Op::kSAdd, "s", {""})), (Result{false, "", true}));
  EXPECT_TRUE(c.run(members(Op::kSAdd, "t", {"x"})).refused);
  EXPECT_TRUE(c.run(keys_op(Op::kSUnionStore, {"s"}, "copy")).refused);
  EXPECT_EQ(c.run(members(Op::kSAdd, "s", {a})), (Result{true, "0"})) << "takes nothing more";
  EXPECT_EQ(c.all("s"), (Strings{a, b}));
  EXPECT_FALSE(c.run(cmd(Op::kSMove, "s", "u", a)).refused) << "SMOVE is not denied";
  EXPECT_EQ(c.run(choose(Op::kSPop, "s", 1, "5")).ok, true) << "pops always run";
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));

  // Pipelined SADDs past maxmemory: each refused once the next would pass
  // it, and the store stays within it.
  StoreOptions small;
  small.maxmemory = 10'000;
  small.max_result_bytes = 64 * 1024;
  Store m(small);
  SetClient p{m};
  size_t refused = 0;
  for (int i = 0; i < 1000; ++i) {
    const Result r = p.run(members(Op::kSAdd, "k" + std::to_string(i % 3),
                                   {std::to_string(i) + std::string(50, 'e')}));
    refused += r.refused ? 1 : 0;
  }
  EXPECT_GT(refused, 900u);
  EXPECT_LE(m.used_bytes(), small.maxmemory);
  EXPECT_EQ(m.used_bytes(), Store::keyspace_bytes(m.data()));
  // A set grows past one reply (bounded by maxmemory, as Redis's): reading
  // it whole, a union of sets larger than one reply, a pop of more than a
  // reply holds and SRANDMEMBER repeating past it answer an error and
  // change nothing; SUNIONSTORE stores such a union.
  StoreOptions r;
  r.max_result_bytes = 4096;
  Store big(r);
  SetClient q{big};
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(q.run(members(Op::kSAdd, "b", {std::to_string(1000 + i) + std::string(96, 'm')})),
              (Result{true, "1"}));
  EXPECT_EQ(q.run(cmd(Op::kSCard, "b")), (Result{true, "100"}));
  EXPECT_EQ(q.run(cmd(Op::kSMembers, "b")).value.rfind(kLongReply, 0), 0u);
  const Result pop = q.run(choose(Op::kSPop, "b", 7, "60"));
  EXPECT_FALSE(pop.ok);
  EXPECT_EQ(pop.value.rfind(kLongReply, 0), 0u) << pop.value;
  EXPECT_EQ(q.run(cmd(Op::kSCard, "b")), (Result{true, "100"}));
  EXPECT_TRUE(q.run(choose(Op::kSPop, "b", 7, "3")).ok);
  EXPECT_EQ(q.run(cmd(Op::kSCard, "b")), (Result{true, "97"}));
  for (int i = 0; i < 30; ++i)
    q.run(members(Op::kSAdd, "c", {std::to_string(i) + std::string(96, 'n')}));
  const Result u = q.run(keys_op(Op::kSUnion, {"b", "c"}));
  EXPECT_FALSE(u.ok);
  EXPECT_NE(u.value.find("ERR the reply would take"), std::string::npos) << u.value;
  EXPECT_EQ(q.run(keys_op(Op::kSUnionStore, {"b", "c"}, "d")), (Result{true, "127"}));
  EXPECT_EQ(q.run(cmd(Op::kSCard, "d")), (Result{true, "127"}));
  const Result rep = q.run(choose(Op::kSRandMember, "c", 1, "-100"));
  EXPECT_FALSE(rep.ok);
  EXPECT_EQ(big.used_bytes(), Store::keyspace_bytes(big.data()));
}

TEST(StoreSetTest, ASnapshotCarriesSetsAndAnOlderSnapshotIsStillRead) {
  StoreOptions o;
  o.keep_applied = false;
  Store s(o);
  SetClient c{s};
  c.run(members(Op::kSAdd, "set", {"zz", std::string("\0\xff", 2), ""}));
  c.run(cmd(Op::kRPush, "l", encode_names({"a"})));
  c.run(cmd(Op::kPut, "s", "v"));
  Store back;
  std::string why;
  ASSERT_TRUE(back.restore(s.serialize(), &why)) << why;
  EXPECT_EQ(back.digest(), s.digest());
  EXPECT_EQ(back.used_bytes(), s.used_bytes());
  EXPECT_EQ(back.data(), s.data());
  // The digest covers a set's members, and a set is not a list.
  Store other(o);
  SetClient d{other};
  d.run(members(Op::kSAdd, "set", {"zz", std::string("\0\xff", 2)}));
  d.run(cmd(Op::kRPush, "l", encode_names({"a"})));
  d.run(cmd(Op::kPut, "s", "v"));
  EXPECT_NE(other.digest(), s.digest());
  // A snapshot of the version before sets ("KVS7"): each key with its
  // fields and elements and without members.
  const std::string old = testing::old_snapshot(0x4b565337, 7, 1, [](wire::Writer<std::string>& w) {
    testing::old_item(w, "l", 7);
    w.put<uint32_t>(0);
    w.put<uint32_t>(1);
    w.str("e");
  });
  ASSERT_TRUE(back.restore(old, &why)) << why;
  EXPECT_EQ(back.data().at("l").list.front(), "e");
  EXPECT_EQ(back.version(), 7u);
  // Members out of byte order are refused, the store unchanged.
  std::string bytes = s.serialize();
  const size_t at = bytes.find(std::string("\x02\0\0\0zz", 6));
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 6, std::string("\x02\0\0\0\0\0", 6));
  EXPECT_FALSE(back.restore(bytes, &why));
  EXPECT_EQ(back.data().at("l").list.front(), "e") << "unchanged";
}

TEST(StoreSetTest, ReplicasApplyingTheSameSetCommandsEndIdentical) {
  StoreOptions o;
  o.maxmemory = 2500;
  o.max_result_bytes = 400;
  std::mt19937_64 rng(4343);  // (its sequence is the standard's: the same everywhere)
  auto rnd = [&rng](uint64_t n) { return rng() % n; };
  const Op ops[] = {Op::kSAdd,        Op::kSAdd,        Op::kSAdd,       Op::kSRem,
                    Op::kSCard,       Op::kSIsMember,   Op::kSMIsMember, Op::kSMembers,
                    Op::kSPop,        Op::kSRandMember, Op::kSMove,      Op::kSInter,
                    Op::kSUnion,      Op::kSDiff,       Op::kSInterCard, Op::kSInterStore,
                    Op::kSUnionStore, Op::kSDiffStore,  Op::kPut,        Op::kDelete,
                    Op::kRename,      Op::kType};
  auto key = [&rnd] { return "k" + std::to_string(rnd(6)); };
  std::vector<Command> log;
  for (uint64_t seq = 1; seq <= 3000; ++seq) {
    const Op op = ops[rnd(std::size(ops))];
    Command c = cmd(op, key(), "m" + std::to_string(rnd(8)), "m" + std::to_string(rnd(8)));
    if (op == Op::kSAdd || op == Op::kSRem || op == Op::kSMIsMember) {
      Strings names;
      for (uint64_t i = 0, n = 1 + rnd(4); i < n; ++i)
        names.push_back("m" + std::to_string(rnd(8)) + std::string(rnd(40), 'v'));
      c.value = encode_names(names);
    } else if (op == Op::kSPop || op == Op::kSRandMember) {
      const int64_t count = static_cast<int64_t>(rnd(7)) - (op == Op::kSPop ? 0 : 3);
      c = choose(op, c.key, rng(), rnd(3) == 0 ? "" : std::to_string(count));
    } else if (detail::is_set_keys_op(op) && op != Op::kSMove) {
      Strings keys;
      for (uint64_t i = 0, n = 1 + rnd(3); i < n; ++i) keys.push_back(key());
      c = keys_op(op, keys, key(), std::to_string(rnd(3)));
    } else if (op == Op::kSMove || op == Op::kRename) {
      c.value = key();
    }
    c.client = 1;
    c.seq = seq;
    log.push_back(c);
  }
  const auto [refused, sets] =
      testing::refused_and_held(o, log, [](const Item& e) { return e.is_set(); });
  EXPECT_GT(refused, 10u) << "the limits were reached";
  EXPECT_GT(sets, 1000u) << "sets were there";
}

TEST(StoreSetTest, SscanPagesThroughTheMembersAsScanDoesTheKeys) {
  Store s;
  SetClient c{s};
  Strings all;
  for (int i = 0; i < 60; ++i) all.push_back("m" + std::to_string(i));
  c.run(members(Op::kSAdd, "s", all));
  size_t pages = 0;
  Strings got = testing::scan_all(c, Op::kSScan, "s", 4, "*", false, &pages);
  std::sort(got.begin(), got.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(got, all) << "every member once";
  EXPECT_GE(pages, 60u / 4);
  got = testing::scan_all(c, Op::kSScan, "s", 10, "m5*");
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got,
            (Strings{"m5", "m50", "m51", "m52", "m53", "m54", "m55", "m56", "m57", "m58", "m59"}));
  Keyspace reference = s.data();
  const Command page = cmd(Op::kSScan, "s", encode_scan_request({0, 9, ""}), "*");
  EXPECT_EQ(c.run(page), execute(reference, page));
  EXPECT_EQ(c.run(cmd(Op::kSScan, "none", encode_scan_request({0, 10, ""}), "*")),
            (Result{true, encode_keys({})}));
  c.run(cmd(Op::kPut, "str", "v"));
  EXPECT_EQ(c.run(cmd(Op::kSScan, "str", encode_scan_request({0, 10, ""}), "*")), kWrong);
}

}  // namespace
}  // namespace kv
