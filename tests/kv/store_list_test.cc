// The store's lists (apps/kv/store_lists.cc): every list command's result
// as Redis answers it, WRONGTYPE both ways, the limits (maxmemory and the
// size of one entry) against a hostile client, snapshots old and new, and
// replicas that apply the same log ending identical.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "store.h"
#include "store_test_util.h"
#include "wire.h"

namespace kv {
namespace {

using testing::cmd;
using testing::expire_at;
using testing::kNow;
using testing::kWrong;
using Strings = std::vector<std::string>;

Command push(Op op, std::string key, const Strings& values) {
  return cmd(op, std::move(key), encode_names(values));
}
Command range(std::string key, int64_t start, int64_t stop, Op op = Op::kLRange) {
  return cmd(op, std::move(key), std::to_string(stop), std::to_string(start));
}

struct ListClient : testing::NamesClient {
  Strings all(const std::string& key) { return names(range(key, 0, -1)); }
};

TEST(StoreListTest, PushPopAndLlenFollowRedis) {
  Store s;
  ListClient c{s};
  // LPUSH puts each element at the head in turn; RPUSH at the tail.
  EXPECT_EQ(c.run(push(Op::kLPush, "l", {"a", "b", "c"})), (Result{true, "3"}));
  EXPECT_EQ(c.all("l"), (Strings{"c", "b", "a"}));
  EXPECT_EQ(c.run(push(Op::kRPush, "l", {"x", ""})), (Result{true, "5"}));
  EXPECT_EQ(c.all("l"), (Strings{"c", "b", "a", "x", ""}));
  EXPECT_EQ(c.run(cmd(Op::kLLen, "l")), (Result{true, "5"}));
  EXPECT_EQ(c.run(cmd(Op::kLLen, "absent")), (Result{true, "0"}));
  // The X forms push only onto a list that exists.
  EXPECT_EQ(c.run(push(Op::kLPushX, "absent", {"a"})), (Result{false, "0"}));
  EXPECT_EQ(c.run(push(Op::kRPushX, "absent", {"a"})), (Result{false, "0"}));
  EXPECT_EQ(s.data().count("absent"), 0u);
  EXPECT_EQ(c.run(push(Op::kLPushX, "l", {"h"})), (Result{true, "6"}));
  EXPECT_EQ(c.run(push(Op::kRPushX, "l", {"t1", "t2"})), (Result{true, "8"}));
  EXPECT_EQ(c.all("l"), (Strings{"h", "c", "b", "a", "x", "", "t1", "t2"}));
  // LPOP and RPOP without a count: one element; with one: at most that many.
  EXPECT_EQ(c.run(cmd(Op::kLPop, "l")), (Result{true, "h"}));
  EXPECT_EQ(c.run(cmd(Op::kRPop, "l")), (Result{true, "t2"}));
  EXPECT_EQ(c.names(cmd(Op::kLPop, "l", "", "2")), (Strings{"c", "b"}));
  EXPECT_EQ(c.names(cmd(Op::kRPop, "l", "", "2")), (Strings{"t1", ""}));
  EXPECT_EQ(c.names(cmd(Op::kLPop, "l", "", "0")), Strings{});
  EXPECT_EQ(c.all("l"), (Strings{"a", "x"}));
  // Past its length: what there is, and the key goes with its last element.
  EXPECT_EQ(c.names(cmd(Op::kRPop, "l", "", "10")), (Strings{"x", "a"}));
  EXPECT_EQ(s.data().count("l"), 0u);
  EXPECT_EQ(c.run(cmd(Op::kLPop, "l")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kRPop, "l", "", "3")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kLPop, "l", "", "0")), (Result{false, ""}));
  c.run(push(Op::kRPush, "one", {"v"}));
  EXPECT_EQ(c.run(cmd(Op::kLPop, "one")), (Result{true, "v"}));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.used_bytes(), 0u);
}

TEST(StoreListTest, LrangeLindexAndLsetTakeIndicesAsRedis) {
  Store s;
  ListClient c{s};
  c.run(push(Op::kRPush, "l", {"0", "1", "2", "3", "4"}));
  EXPECT_EQ(c.names(range("l", 1, 3)), (Strings{"1", "2", "3"}));
  EXPECT_EQ(c.names(range("l", -2, -1)), (Strings{"3", "4"}));
  EXPECT_EQ(c.names(range("l", -100, 1)), (Strings{"0", "1"}));
  EXPECT_EQ(c.names(range("l", 3, 100)), (Strings{"3", "4"}));
  EXPECT_EQ(c.names(range("l", 3, 2)), Strings{});
  EXPECT_EQ(c.names(range("l", 5, 10)), Strings{});
  EXPECT_EQ(c.names(range("l", -1, -2)), Strings{});
  EXPECT_EQ(c.names(range("l", INT64_MIN, INT64_MAX)), (Strings{"0", "1", "2", "3", "4"}));
  EXPECT_EQ(c.names(range("absent", 0, -1)), Strings{});
  EXPECT_EQ(c.run(cmd(Op::kLIndex, "l", "", "0")), (Result{true, "0"}));
  EXPECT_EQ(c.run(cmd(Op::kLIndex, "l", "", "-1")), (Result{true, "4"}));
  EXPECT_EQ(c.run(cmd(Op::kLIndex, "l", "", "-5")), (Result{true, "0"}));
  EXPECT_EQ(c.run(cmd(Op::kLIndex, "l", "", "-6")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kLIndex, "l", "", "5")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kLIndex, "absent", "", "0")), (Result{false, ""}));
  EXPECT_EQ(c.run(cmd(Op::kLSet, "l", "two", "2")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kLSet, "l", "last", "-1")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kLSet, "l", "x", "5")), (Result{false, "ERR index out of range"}));
  EXPECT_EQ(c.run(cmd(Op::kLSet, "l", "x", "-6")), (Result{false, "ERR index out of range"}));
  EXPECT_EQ(c.run(cmd(Op::kLSet, "absent", "x", "0")), (Result{false, "ERR no such key"}));
  EXPECT_EQ(s.data().count("absent"), 0u);
  EXPECT_EQ(c.all("l"), (Strings{"0", "1", "two", "3", "last"}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

TEST(StoreListTest, LremAndLtrimFollowRedis) {
  Store s;
  ListClient c{s};
  const Strings start{"a", "b", "a", "c", "a", "b"};
  c.run(push(Op::kRPush, "l", start));
  // count > 0 from the head, < 0 from the tail, 0 every one.
  EXPECT_EQ(c.run(cmd(Op::kLRem, "l", "a", "2")), (Result{true, "2"}));
  EXPECT_EQ(c.all("l"), (Strings{"b", "c", "a", "b"}));
  EXPECT_EQ(c.run(cmd(Op::kLRem, "l", "b", "-1")), (Result{true, "1"}));
  EXPECT_EQ(c.all("l"), (Strings{"b", "c", "a"}));
  EXPECT_EQ(c.run(cmd(Op::kLRem, "l", "zz", "0")), (Result{false, "0"}));
  EXPECT_EQ(c.run(cmd(Op::kLRem, "absent", "a", "0")), (Result{false, "0"}));
  c.run(push(Op::kRPush, "m", {"x", "x", "x"}));
  EXPECT_EQ(c.run(cmd(Op::kLRem, "m", "x", std::to_string(INT64_MIN))), (Result{true, "3"}));
  EXPECT_EQ(s.data().count("m"), 0u) << "the key goes with its last element";
  // LTRIM keeps [start, stop], indices as LRANGE's.
  c.run(push(Op::kRPush, "t", {"0", "1", "2", "3", "4"}));
  EXPECT_EQ(c.run(range("t", 1, -2, Op::kLTrim)), (Result{true, ""}));
  EXPECT_EQ(c.all("t"), (Strings{"1", "2", "3"}));
  EXPECT_EQ(c.run(range("t", 0, 100, Op::kLTrim)), (Result{false, ""})) << "nothing removed";
  EXPECT_EQ(c.all("t"), (Strings{"1", "2", "3"}));
  EXPECT_EQ(c.run(range("t", 2, 1, Op::kLTrim)), (Result{true, ""}));
  EXPECT_EQ(s.data().count("t"), 0u) << "an empty range removes the key";
  EXPECT_EQ(c.run(range("absent", 0, 1, Op::kLTrim)), (Result{false, ""}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

Command lpos(std::string key, std::string element, std::string rank, std::string count = "",
             std::string maxlen = "0") {
  return cmd(Op::kLPos, std::move(key), std::move(element), encode_names({rank, count, maxlen}));
}
Command lmove(std::string from, std::string to, std::string ends = "RL") {
  return cmd(Op::kLMove, std::move(from), std::move(to), std::move(ends));
}

TEST(StoreListTest, LinsertAndLposFollowRedis) {
  Store s;
  ListClient c{s};
  c.run(push(Op::kRPush, "l", {"a", "b", "c", "b", "d"}));
  // LINSERT at the first pivot from the head; -1 without one, 0 without a key.
  EXPECT_EQ(c.run(cmd(Op::kLInsert, "l", encode_names({"b", "x"}), "before")), (Result{true, "6"}));
  EXPECT_EQ(c.run(cmd(Op::kLInsert, "l", encode_names({"b", "y"}), "after")), (Result{true, "7"}));
  EXPECT_EQ(c.run(cmd(Op::kLInsert, "l", encode_names({"d", "z"}), "after")), (Result{true, "8"}));
  EXPECT_EQ(c.all("l"), (Strings{"a", "x", "b", "y", "c", "b", "d", "z"}));
  EXPECT_EQ(c.run(cmd(Op::kLInsert, "l", encode_names({"none", "q"}), "before")),
            (Result{false, "-1"}));
  EXPECT_EQ(c.run(cmd(Op::kLInsert, "absent", encode_names({"a", "q"}), "before")),
            (Result{false, "0"}));
  EXPECT_EQ(s.data().count("absent"), 0u);
  // LPOS: the first match, or from the rank-th (negative: from the tail),
  // at most COUNT (0: all) among MAXLEN elements looked at; indices from
  // the head always.
  s = Store();
  c.seq = 0;
  c.run(push(Op::kRPush, "l", {"a", "b", "c", "1", "2", "3", "c", "c"}));  // Redis's own example
  EXPECT_EQ(c.run(lpos("l", "c", "1")), (Result{true, "2"}));
  EXPECT_EQ(c.run(lpos("l", "c", "2")), (Result{true, "6"}));
  EXPECT_EQ(c.run(lpos("l", "c", "-1")), (Result{true, "7"}));
  EXPECT_EQ(c.run(lpos("l", "c", "-3")), (Result{true, "2"}));
  EXPECT_EQ(c.run(lpos("l", "c", "4")), (Result{false, ""}));
  EXPECT_EQ(c.run(lpos("l", "zz", "1")), (Result{false, ""}));
  EXPECT_EQ(c.names(lpos("l", "c", "1", "2")), (Strings{"2", "6"}));
  EXPECT_EQ(c.names(lpos("l", "c", "1", "0")), (Strings{"2", "6", "7"}));
  EXPECT_EQ(c.names(lpos("l", "c", "-1", "0")), (Strings{"7", "6", "2"}));
  EXPECT_EQ(c.names(lpos("l", "c", "2", "0")), (Strings{"6", "7"}));
  EXPECT_EQ(c.names(lpos("l", "c", "1", "0", "7")), (Strings{"2", "6"}));
  EXPECT_EQ(c.names(lpos("l", "c", "-1", "0", "2")), (Strings{"7", "6"}));
  EXPECT_EQ(c.run(lpos("l", "c", "1", "", "2")), (Result{false, ""}));
  EXPECT_EQ(c.names(lpos("l", "zz", "1", "0")), Strings{});
  EXPECT_EQ(c.names(lpos("absent", "c", "1", "1")), Strings{});
  EXPECT_EQ(c.run(lpos("absent", "c", "1")), (Result{false, ""}));
  c.run(cmd(Op::kPut, "s", "c"));
  EXPECT_EQ(c.run(cmd(Op::kLInsert, "s", encode_names({"c", "q"}), "before")), kWrong);
  EXPECT_EQ(c.run(lpos("s", "c", "1")), kWrong);
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

TEST(StoreListTest, LmoveMovesOneElementBetweenTwoListsAsOneEntry) {
  Store s;
  ListClient c{s};
  c.run(push(Op::kRPush, "a", {"1", "2", "3"}));
  // RPOPLPUSH (RL), and LMOVE's other ends; a new destination is made.
  EXPECT_EQ(c.run(lmove("a", "b")), (Result{true, "3"}));
  EXPECT_EQ(c.run(lmove("a", "b", "LR")), (Result{true, "1"}));
  EXPECT_EQ(c.all("b"), (Strings{"3", "1"}));
  EXPECT_EQ(c.run(lmove("b", "b", "LR")), (Result{true, "3"})) << "one list: rotated";
  EXPECT_EQ(c.all("b"), (Strings{"1", "3"}));
  EXPECT_EQ(c.run(lmove("a", "a", "LL")), (Result{true, "2"}));
  EXPECT_EQ(c.all("a"), (Strings{"2"}));
  EXPECT_EQ(c.run(lmove("a", "b", "RR")), (Result{true, "2"}));
  EXPECT_EQ(s.data().count("a"), 0u) << "the source goes with its last element";
  EXPECT_EQ(c.all("b"), (Strings{"1", "3", "2"}));
  EXPECT_EQ(c.run(lmove("a", "b")), (Result{false, ""}));
  // WRONGTYPE both ways; an absent source answers null whatever the
  // destination holds; nothing changes.
  c.run(cmd(Op::kPut, "s", "v"));
  c.run(cmd(Op::kSAdd, "set", encode_names({"m"})));
  EXPECT_EQ(c.run(lmove("s", "b")), kWrong);
  EXPECT_EQ(c.run(lmove("b", "s")), kWrong);
  EXPECT_EQ(c.run(lmove("b", "set", "LL")), kWrong);
  EXPECT_EQ(c.run(lmove("absent", "s")), (Result{false, ""}));
  EXPECT_EQ(c.all("b"), (Strings{"1", "3", "2"}));
  // An expired source is absent; an expired destination starts anew.
  c.run(push(Op::kRPush, "old", {"o"}));
  c.run(expire_at("old", kNow + 1));
  Command later = lmove("old", "b");
  later.now_ms = kNow + 5;
  EXPECT_EQ(c.run(later), (Result{false, ""}));
  c.run(push(Op::kRPush, "gone", {"g"}));
  c.run(cmd(Op::kPut, "dst", "string"));
  c.run(expire_at("dst", kNow + 1));
  later = lmove("gone", "dst");
  later.now_ms = kNow + 5;
  EXPECT_EQ(c.run(later), (Result{true, "g"}));
  EXPECT_EQ(c.all("dst"), (Strings{"g"}));
  // In a transaction, as one of its commands.
  Transaction t;
  t.cmds.push_back(lmove("dst", "b"));
  t.cmds.push_back(lmove("b", "dst", "LL"));
  EXPECT_EQ(c.run(cmd(Op::kMulti, "", encode_transaction(t))),
            (Result{true, encode_results({{true, "g"}, {true, "g"}})}));
  EXPECT_EQ(c.all("b"), (Strings{"1", "3", "2"}));
  EXPECT_EQ(c.all("dst"), (Strings{"g"}));
  // WATCH sees the destination modified, as the source.
  c.run(cmd(Op::kWatch, "dst"));
  Transaction u;
  u.conditions.push_back({TxCondition::kUnchanged, "dst", c.seq});
  u.cmds.push_back(cmd(Op::kLLen, "dst"));
  c.run(lmove("b", "dst"));
  EXPECT_EQ(c.run(cmd(Op::kMulti, "", encode_transaction(u))), (Result{false, ""}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

TEST(StoreListTest, LinsertAndLmoveAreRefusedPastMaxmemoryAsTheOtherWrites) {
  StoreOptions o;
  const uint64_t one = Store::kEntryOverhead + 1 + 2 * (Store::kElementOverhead + 10);
  o.maxmemory = one;
  o.max_result_bytes = 60;
  Store s(o);
  ListClient c{s};
  const std::string ten(10, 'x');
  EXPECT_FALSE(c.run(push(Op::kRPush, "l", {ten, ten})).refused);
  EXPECT_TRUE(c.run(cmd(Op::kLInsert, "l", encode_names({ten, "a"}), "before")).refused);
  // Moving an element to a new key takes another key's overhead: refused.
  EXPECT_EQ(c.run(lmove("l", "m")), (Result{false, "", true}));
  EXPECT_EQ(c.all("l"), (Strings{ten, ten}));
  EXPECT_EQ(c.run(lmove("l", "l")), (Result{true, ten})) << "a rotation takes nothing more";
  // Past one reply's size (60 bytes, key included) a list still grows: only
  // reading it whole is refused.
  Store r(StoreOptions{0, true, 60});
  ListClient d{r};
  d.run(push(Op::kRPush, "a", {std::string(30, 'a')}));
  d.run(push(Op::kRPush, "b", {std::string(20, 'b')}));
  EXPECT_EQ(d.run(cmd(Op::kLInsert, "b", encode_names({std::string(20, 'b'), ten}), "after")),
            (Result{true, "2"}));
  EXPECT_EQ(d.run(lmove("a", "b")), (Result{true, std::string(30, 'a')}));
  EXPECT_EQ(d.run(cmd(Op::kLLen, "b")), (Result{true, "3"}));
  EXPECT_EQ(d.run(range("b", 0, -1)).value.rfind(kLongReply, 0), 0u);
  EXPECT_EQ(d.run(range("b", 0, 0)), (Result{true, encode_names({std::string(30, 'a')})}));
  // LPOS's indices of many short elements: refused past one reply.
  Store p(StoreOptions{0, true, 300});
  ListClient e{p};
  EXPECT_TRUE(e.run(push(Op::kRPush, "l", Strings(55, "e"))).ok);
  EXPECT_FALSE(e.run(lpos("l", "e", "1", "0")).ok);
  EXPECT_EQ(e.names(lpos("l", "e", "1", "3")), (Strings{"0", "1", "2"}));
}

TEST(StoreListTest, AStringOrHashCommandOnAListAndAListCommandOnThemAreWrongType) {
  Store s;
  ListClient c{s};
  c.run(push(Op::kRPush, "l", {"1"}));
  c.run(cmd(Op::kPut, "s", "1"));
  c.run(cmd(Op::kHSet, "h", encode_fields({{"f", "1"}})));
  for (Op op :
       {Op::kGet, Op::kIncrBy, Op::kIncrByFloat, Op::kAppend, Op::kGetSet, Op::kGetDel, Op::kGetEx,
        Op::kCas, Op::kSetRange, Op::kSetNx, Op::kHGet, Op::kHLen, Op::kHIncrBy, Op::kHGetAll})
    EXPECT_EQ(c.run(cmd(op, "l", "1", "0")), kWrong) << op_name(op);
  EXPECT_EQ(c.run(cmd(Op::kHSet, "l", encode_fields({{"f", "1"}}))), kWrong);
  EXPECT_EQ(c.run(cmd(Op::kSetXx, "l", "v", "get")), kWrong) << "SET XX GET reads it";
  for (const char* key : {"s", "h"}) {
    for (Op op : {Op::kLPush, Op::kRPush, Op::kLPushX, Op::kRPushX, Op::kLPop, Op::kRPop, Op::kLLen,
                  Op::kLRange, Op::kLIndex, Op::kLSet, Op::kLRem, Op::kLTrim}) {
      Command one = cmd(op, key, "1", "0");
      if (op == Op::kLPush || op == Op::kRPush || op == Op::kLPushX || op == Op::kRPushX)
        one = push(op, key, {"x"});
      EXPECT_EQ(c.run(one), kWrong) << op_name(op) << " on " << key;
    }
  }
  EXPECT_EQ(c.all("l"), (Strings{"1"}));
  EXPECT_EQ(s.data().at("s").value, "1");
  // TYPE, TTL, EXPIRE and DEL take any type; SET and SET XX replace a list.
  EXPECT_EQ(c.run(cmd(Op::kType, "l")), (Result{true, "list"}));
  EXPECT_EQ(c.run(cmd(Op::kTtl, "l")), (Result{true, "-1"}));
  EXPECT_EQ(c.run(cmd(Op::kSetXx, "l", "now a string")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kType, "l")), (Result{true, "string"}));
  c.run(push(Op::kRPush, "l2", {"1"}));
  EXPECT_EQ(c.run(cmd(Op::kPut, "l2", "v")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kGet, "l2")), (Result{true, "v"}));
  c.run(push(Op::kRPush, "l3", {"1"}));
  EXPECT_EQ(c.run(cmd(Op::kDelete, "l3")), (Result{true, ""}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));
}

TEST(StoreListTest, ListsExpireRenameScanAndJoinTransactionsAndWatchSeesPushAndPop) {
  Store s;
  ListClient c{s};
  c.run(push(Op::kRPush, "l", {"a"}));
  ASSERT_TRUE(c.run(testing::expire_at("l", kNow + 10)).ok);
  Command late = cmd(Op::kLLen, "l");
  late.now_ms = kNow + 10;
  EXPECT_EQ(c.run(late), (Result{true, "0"})) << "expired at its deadline";
  EXPECT_EQ(s.size(), 0u);

  c.run(push(Op::kRPush, "l", {"a", "b"}));
  EXPECT_TRUE(c.run(cmd(Op::kRename, "l", "moved")).ok);
  EXPECT_EQ(c.all("moved"), (Strings{"a", "b"}));
  c.run(cmd(Op::kPut, "s", "1"));
  for (const char* type : {"list", "string", "hash"}) {
    ScanRequest q;
    q.count = 100;
    q.type = type;
    KeysPage page;
    ASSERT_TRUE(decode_keys(c.run(cmd(Op::kScan, "*", encode_scan_request(q))).value, &page));
    EXPECT_EQ(page.keys, std::string(type) == "list"     ? Strings{"moved"}
                         : std::string(type) == "string" ? Strings{"s"}
                                                         : Strings{});
  }
  // WATCH, then an RPOP by another client: the transaction does not run.
  c.run(cmd(Op::kWatch, "moved"));
  Transaction t;
  t.conditions.push_back(TxCondition{TxCondition::kUnchanged, "moved", c.seq});
  Command other = cmd(Op::kRPop, "moved");
  other.client = 2;
  other.seq = 1;
  EXPECT_EQ(s.apply(other), (Result{true, "b"}));
  t.cmds.push_back(push(Op::kRPush, "moved", {"x"}));
  EXPECT_EQ(c.run(cmd(Op::kMulti, "", encode_transaction(t))), (Result{false, ""}));
  // An LLEN or LRANGE by another client leaves it unchanged: it runs, its
  // results (a WRONGTYPE among them) as EXEC answers.
  c.run(cmd(Op::kWatch, "moved"));
  t.conditions[0].watch_seq = c.seq;
  other = cmd(Op::kLLen, "moved");
  other.client = 2;
  other.seq = 2;
  s.apply(other);
  t.cmds.push_back(cmd(Op::kGet, "moved"));
  t.cmds.push_back(cmd(Op::kLPop, "moved", "", "5"));
  const Result r = c.run(cmd(Op::kMulti, "", encode_transaction(t)));
  std::vector<Result> results;
  ASSERT_TRUE(r.ok);
  ASSERT_TRUE(decode_results(r.value, &results));
  EXPECT_EQ(results, (std::vector<Result>{{true, "2"}, kWrong, {true, encode_names({"a", "x"})}}));
  EXPECT_EQ(s.data().count("moved"), 0u);
  EXPECT_EQ(c.run(cmd(Op::kFlushAll, "")), (Result{true, "1"}));
  EXPECT_EQ(s.used_bytes(), 0u);
}

Command lmpop(const Strings& keys, const std::string& end, int64_t count) {
  return cmd(Op::kLMPop, keys.front(), encode_names(keys),
             encode_names({end, std::to_string(count)}));
}

TEST(StoreListTest, LmpopPopsFromTheFirstOfItsKeysThatExists) {
  Store s;
  ListClient c{s};
  c.run(push(Op::kRPush, "a", {"1", "2", "3"}));
  c.run(push(Op::kRPush, "b", {"x"}));
  EXPECT_EQ(c.run(lmpop({"none", "a", "b"}, "left", 2)),
            (Result{true, encode_names({"a", "1", "2"})}));
  EXPECT_EQ(c.run(lmpop({"a", "b"}, "right", 5)), (Result{true, encode_names({"a", "3"})}))
      << "at most what there is";
  EXPECT_EQ(s.data().count("a"), 0u) << "the key went with its last element";
  EXPECT_EQ(c.run(lmpop({"none", "a"}, "left", 1)), (Result{false, ""})) << "none exists";
  // The first key that exists decides: another type is WRONGTYPE, even
  // with a list after it; a list before it is popped.
  c.run(cmd(Op::kPut, "str", "v"));
  EXPECT_EQ(c.run(lmpop({"none", "str", "b"}, "left", 1)), kWrong);
  EXPECT_EQ(c.run(lmpop({"b", "str"}, "left", 1)), (Result{true, encode_names({"b", "x"})}));
  // An expired key counts as absent (and goes).
  c.run(push(Op::kRPush, "e", {"old"}));
  c.run(push(Op::kRPush, "f", {"new"}));
  ASSERT_TRUE(c.run(expire_at("e", kNow + 10)).ok);
  Command late = lmpop({"e", "f"}, "left", 1);
  late.now_ms = kNow + 10;
  EXPECT_EQ(c.run(late), (Result{true, encode_names({"f", "new"})}));
  EXPECT_EQ(s.size(), 1u) << "e expired, f emptied; str left";
  EXPECT_EQ(c.run(cmd(Op::kLMPop, "f", encode_names({"f"}), encode_names({"up", "1"}))).value,
            "ERR malformed lmpop");

  // WATCH: an LMPOP by another client modifies the key it popped from, not
  // the others it names.
  c.run(push(Op::kRPush, "p", {"1", "2"}));
  c.run(push(Op::kRPush, "q", {"3"}));
  c.run(cmd(Op::kWatch, "q"));
  const uint64_t watch_q = c.seq;
  c.run(cmd(Op::kWatch, "p"));
  const uint64_t watch_p = c.seq;
  Command other = lmpop({"p", "q"}, "left", 1);
  other.client = 2;
  other.seq = 1;
  EXPECT_EQ(s.apply(other), (Result{true, encode_names({"p", "1"})}));
  Transaction t;
  t.conditions.push_back(TxCondition{TxCondition::kUnchanged, "q", watch_q});
  t.cmds.push_back(lmpop({"none", "q"}, "right", 1));
  t.cmds.push_back(lmpop({"q", "p"}, "right", 1));
  Result r = c.run(cmd(Op::kMulti, "", encode_transaction(t)));
  std::vector<Result> results;
  ASSERT_TRUE(r.ok) << "q was not modified";
  ASSERT_TRUE(decode_results(r.value, &results));
  EXPECT_EQ(results, (std::vector<Result>{{true, encode_names({"q", "3"})},
                                          {true, encode_names({"p", "2"})}}))
      << "in a transaction, each sees what the one before left";
  t.conditions[0] = TxCondition{TxCondition::kUnchanged, "p", watch_p};
  EXPECT_EQ(c.run(cmd(Op::kMulti, "", encode_transaction(t))), (Result{false, ""}))
      << "p was modified";
  EXPECT_TRUE(s.sizes_agree(nullptr));
}

TEST(StoreListTest, AListCountsTowardMaxmemoryAndAWritePastItIsRefusedWhole) {
  StoreOptions o;
  // One key "l" with two elements of 10 bytes: what the store counts for it.
  const uint64_t one = Store::kEntryOverhead + 1 + 2 * (Store::kElementOverhead + 10);
  o.maxmemory = one;
  Store s(o);
  ListClient c{s};
  const std::string ten(10, 'x');
  EXPECT_FALSE(c.run(push(Op::kRPush, "l", {ten, ten})).refused);
  EXPECT_EQ(s.used_bytes(), one);
  // One more element (of any size), a longer LSET, or a new list: refused,
  // nothing changed.
  const uint64_t digest = s.digest();
  EXPECT_EQ(c.run(push(Op::kLPush, "l", {""})), (Result{false, "", true}));
  EXPECT_TRUE(c.run(push(Op::kRPushX, "l", {"a", "b"})).refused);
  EXPECT_TRUE(c.run(cmd(Op::kLSet, "l", ten + "y", "0")).refused);
  EXPECT_TRUE(c.run(push(Op::kRPush, "m", {"a"})).refused);
  EXPECT_EQ(c.all("l"), (Strings{ten, ten}));
  EXPECT_EQ(s.used_bytes(), one);
  EXPECT_NE(s.digest(), digest) << "(the client table moved)";
  // A write that takes no more still runs, and pops always do.
  EXPECT_EQ(c.run(cmd(Op::kLSet, "l", "short", "0")), (Result{true, ""}));
  EXPECT_EQ(c.run(cmd(Op::kRPop, "l", "", "2")), (Result{true, encode_names({ten, "short"})}));
  EXPECT_EQ(s.used_bytes(), 0u);
}

// A list is bounded as Redis's is: each element by the command that
// pushes it (one log entry), the whole by maxmemory, not by what one reply
// may carry (max_result_bytes). Past that, reading it whole (LRANGE 0 -1)
// and a pop of more than a reply holds are refused with an error, nothing
// changed; a shorter range, LLEN, LINDEX and pops of a few still run.
TEST(StoreListTest, AListGrowsPastOneReplyToMaxmemoryAndOnlyLongReadsAreRefused) {
  StoreOptions o;
  o.max_result_bytes = 64 * 1024;
  Store s(o);
  ListClient c{s};
  // 500 elements of 200 bytes each in one RPUSH, then 8,459 short ones one
  // by one (what redis-benchmark-like clients do): all taken.
  const Strings many(500, std::string(200, 'v'));
  EXPECT_EQ(c.run(push(Op::kRPush, "l", many)), (Result{true, "500"}));
  for (int i = 0; i < 8459; ++i)
    ASSERT_EQ(c.run(push(Op::kRPush, "l", {"e" + std::to_string(i)})).value,
              std::to_string(501 + i));
  EXPECT_EQ(c.run(cmd(Op::kLLen, "l")), (Result{true, "8959"}));
  EXPECT_EQ(c.run(cmd(Op::kLIndex, "l", "", "-1")), (Result{true, "e8458"}));
  EXPECT_EQ(c.run(range("l", -2, -1)), (Result{true, encode_names({"e8457", "e8458"})}));
  const Result all = c.run(range("l", 0, -1));
  EXPECT_FALSE(all.ok);
  EXPECT_EQ(all.value.rfind(kLongReply, 0), 0u) << all.value;
  // A pop of more than a reply holds is refused before it runs; of a few, runs.
  const Result popped = c.run(cmd(Op::kLPop, "l", "", "1000"));
  EXPECT_FALSE(popped.ok);
  EXPECT_EQ(popped.value.rfind(kLongReply, 0), 0u) << popped.value;
  EXPECT_EQ(c.run(cmd(Op::kLLen, "l")), (Result{true, "8959"}));
  EXPECT_EQ(c.run(cmd(Op::kRPop, "l", "", "2")), (Result{true, encode_names({"e8458", "e8457"})}));
  EXPECT_EQ(c.run(cmd(Op::kLSet, "l", std::string(300, 'w'), "0")), (Result{true, ""}));
  // In a transaction the list grows too; one whose replies would pass the
  // limit runs nothing.
  Transaction t;
  t.cmds.push_back(cmd(Op::kPut, "s", "x"));
  t.cmds.push_back(push(Op::kRPush, "l", {std::string(200, 'v')}));
  EXPECT_TRUE(c.run(cmd(Op::kMulti, "", encode_transaction(t))).ok);
  t.cmds.push_back(range("l", 0, -1));
  const Result r = c.run(cmd(Op::kMulti, "", encode_transaction(t)));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(c.run(cmd(Op::kLLen, "l")), (Result{true, "8958"}));
  EXPECT_EQ(s.used_bytes(), Store::keyspace_bytes(s.data()));

  // Pushes past maxmemory, one after another as a pipeline sends them: each
  // refused once the next would pass it, and the store stays within it.
  StoreOptions small;
  small.maxmemory = 10'000;
  Store m(small);
  ListClient p{m};
  size_t pushed = 0, refused = 0;
  for (int i = 0; i < 1000; ++i) {
    const Result r = p.run(push(Op::kRPush, "k" + std::to_string(i % 3), {std::string(50, 'e')}));
    if (r.refused) {
      ++refused;
    } else {
      ++pushed;
    }
  }
  EXPECT_EQ(pushed + refused, 1000u);
  EXPECT_GT(refused, 900u);
  EXPECT_LE(m.used_bytes(), small.maxmemory);
  EXPECT_EQ(m.used_bytes(), Store::keyspace_bytes(m.data()));
  EXPECT_GT(m.used_bytes() + Store::kElementOverhead + 50, small.maxmemory);
}

TEST(StoreListTest, ASnapshotCarriesListsAndAnOlderSnapshotIsStillRead) {
  StoreOptions o;
  o.keep_applied = false;
  Store s(o);
  ListClient c{s};
  c.run(push(Op::kRPush, "l", {"a", std::string("\0\xff", 2), ""}));
  c.run(cmd(Op::kHSet, "h", encode_fields({{"f", "1"}})));
  c.run(cmd(Op::kPut, "s", "v"));
  Store back;
  std::string why;
  ASSERT_TRUE(back.restore(s.serialize(), &why)) << why;
  EXPECT_EQ(back.digest(), s.digest());
  EXPECT_EQ(back.used_bytes(), s.used_bytes());
  EXPECT_EQ(back.data(), s.data());
  // The digest covers a list's elements and their order.
  Store other(o);
  ListClient d{other};
  d.run(push(Op::kRPush, "l", {std::string("\0\xff", 2), "a", ""}));
  d.run(cmd(Op::kHSet, "h", encode_fields({{"f", "1"}})));
  d.run(cmd(Op::kPut, "s", "v"));
  EXPECT_NE(other.digest(), s.digest());
  // A snapshot of the version before lists ("KVS6"): each key with its
  // fields and without elements.
  const std::string old = testing::old_snapshot(0x4b565336, 7, 1, [](wire::Writer<std::string>& w) {
    w.str("h");
    w.str("");
    w.put<int64_t>(0);
    w.put<uint64_t>(7);
    w.put<uint32_t>(1);
    w.str("f");
    w.str("v");
  });
  ASSERT_TRUE(back.restore(old, &why)) << why;
  EXPECT_EQ(back.data().at("h").fields.at("f"), "v");
  EXPECT_EQ(back.version(), 7u);
  // A list that holds a value too is refused, the store unchanged.
  std::string bytes = s.serialize();
  const size_t at = bytes.find(std::string("\x01\0\0\0l\0\0\0\0", 9));
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 9, std::string("\x01\0\0\0l\x01\0\0\0X", 10));
  EXPECT_FALSE(back.restore(bytes, &why));
  EXPECT_EQ(back.data().at("h").fields.at("f"), "v") << "unchanged";
}

TEST(StoreListTest, ReplicasApplyingTheSameListCommandsEndIdentical) {
  StoreOptions o;
  o.maxmemory = 3000;
  o.max_result_bytes = 300;
  std::mt19937_64 rng(4242);  // (its sequence is the standard's: the same everywhere)
  auto rnd = [&rng](uint64_t n) { return rng() % n; };
  const Op ops[] = {Op::kLPush,  Op::kRPush, Op::kLPush,   Op::kRPush,  Op::kLPushX, Op::kRPushX,
                    Op::kLPop,   Op::kRPop,  Op::kLLen,    Op::kLRange, Op::kLIndex, Op::kLSet,
                    Op::kLRem,   Op::kLTrim, Op::kPut,     Op::kGet,    Op::kHSet,   Op::kDelete,
                    Op::kRename, Op::kType,  Op::kLInsert, Op::kLPos,   Op::kLMove,  Op::kLMove};
  std::vector<Command> log;
  for (uint64_t seq = 1; seq <= 4000; ++seq) {
    const Op op = ops[rnd(std::size(ops))];
    const int64_t a = static_cast<int64_t>(rnd(9)) - 4, b = static_cast<int64_t>(rnd(9)) - 4;
    Command c =
        cmd(op, "k" + std::to_string(rnd(6)), "e" + std::to_string(rnd(3)), std::to_string(a));
    if (op == Op::kLPush || op == Op::kRPush || op == Op::kLPushX || op == Op::kRPushX) {
      Strings values;
      for (uint64_t i = 0, n = 1 + rnd(4); i < n; ++i)
        values.push_back("e" + std::to_string(rnd(3)) + std::string(rnd(60), 'v'));
      c.value = encode_names(values);
    } else if (op == Op::kLRange || op == Op::kLTrim) {
      c.value = std::to_string(b);
    } else if (op == Op::kLPop || op == Op::kRPop) {
      c.expected = rnd(2) == 0 ? "" : std::to_string(rnd(4));
    } else if (op == Op::kHSet) {
      c.value = encode_fields({{"f", "v"}});
    } else if (op == Op::kRename) {
      c.value = "k" + std::to_string(rnd(6));
    } else if (op == Op::kLInsert) {
      c.value = encode_names({"e" + std::to_string(rnd(3)), std::string(rnd(40), 'i')});
      c.expected = rnd(2) == 0 ? "before" : "after";
    } else if (op == Op::kLPos) {
      c.expected =
          encode_names({std::to_string(a == 0 ? 1 : a), rnd(2) == 0 ? "" : std::to_string(rnd(3)),
                        std::to_string(rnd(4))});
    } else if (op == Op::kLMove) {
      c.value = "k" + std::to_string(rnd(6));
      c.expected = std::string(1, "LR"[rnd(2)]) + "LR"[rnd(2)];
    }
    c.client = 1;
    c.seq = seq;
    log.push_back(c);
  }
  const auto [refused, lists] =
      testing::refused_and_held(o, log, [](const Item& e) { return e.is_list(); });
  EXPECT_GT(refused, 10u) << "the limits were reached";
  EXPECT_GT(lists, 1000u) << "lists were there";
}

}  // namespace
}  // namespace kv
