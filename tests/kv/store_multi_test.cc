// The store's commands on several keys (apps/kv/store_multi.cc): a
// transaction is one log entry that takes effect whole or not at all, under
// its conditions (MSETNX's absent keys, WATCH's unchanged ones), maxmemory
// and client retries; rename moves a value with its deadline; flushall.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "store.h"
#include "store_test_util.h"

namespace kv {
namespace {

using testing::cmd;
using testing::kNow;

Command with_deadline(Command c, int64_t deadline) {
  c.ttl = Ttl::kSet;
  c.deadline_ms = deadline;
  return c;
}

Command multi(std::vector<Command> cmds, std::vector<TxCondition> conditions = {}) {
  Transaction t;
  t.cmds = std::move(cmds);
  t.conditions = std::move(conditions);
  Command c;
  c.op = Op::kMulti;
  c.value = encode_transaction(t);
  c.now_ms = kNow;
  return c;
}

// Applies commands as client 1's, numbered in order.
struct MultiClient {
  Store& store;
  uint64_t client = 1;
  uint64_t seq = 0;
  Result run(Command c, int64_t now = kNow) {
    c.client = client;
    c.seq = ++seq;
    c.now_ms = now;
    return store.apply(c);
  }
  // A transaction's results, each command's.
  std::vector<Result> results(const Result& r) {
    std::vector<Result> out;
    EXPECT_TRUE(r.ok) << r.value;
    EXPECT_TRUE(decode_results(r.value, &out));
    return out;
  }
};

TEST(StoreMultiTest, ATransactionIsOneEntryWhoseCommandsRunInOrder) {
  Store s;
  MultiClient c{s};
  c.run(cmd(Op::kPut, "text", "abc"));
  const uint64_t entries = s.applied_count();
  const Result r = c.run(multi({cmd(Op::kPut, "a", "1"), cmd(Op::kIncrBy, "a", "41"),
                                cmd(Op::kGet, "a"), cmd(Op::kIncrBy, "text", "1"),
                                cmd(Op::kAppend, "text", "d"), cmd(Op::kGet, "missing")}));
  EXPECT_EQ(s.applied_count(), entries + 1);
  // Each command's own result, a failed one (INCR of a non-integer)
  // included, as Redis's EXEC answers: the others still run.
  EXPECT_EQ(c.results(r), (std::vector<Result>{{true, ""},
                                               {true, "42"},
                                               {true, "42"},
                                               {false, "not an integer"},
                                               {true, "4"},
                                               {false, ""}}));
  EXPECT_EQ(s.data().at("a").value, "42");
  EXPECT_EQ(s.data().at("text").value, "abcd");
  // The reference the checks replay against computes the same.
  Keyspace plain{{"text", Item{"abc", 0}}};
  Command again = multi({cmd(Op::kPut, "a", "1"), cmd(Op::kIncrBy, "a", "41"), cmd(Op::kGet, "a"),
                         cmd(Op::kIncrBy, "text", "1"), cmd(Op::kAppend, "text", "d"),
                         cmd(Op::kGet, "missing")});
  EXPECT_EQ(execute(plain, again), r);
  EXPECT_EQ(plain, s.data());
}

TEST(StoreMultiTest, ARetriedTransactionTakesEffectOnce) {
  Store s;
  Command c = multi({cmd(Op::kIncrBy, "n", "1"), cmd(Op::kIncrBy, "m", "2")});
  c.client = 7;
  c.seq = 1;
  Applied how;
  const Result first = s.apply(c, &how);
  EXPECT_EQ(how, Applied::kExecuted);
  const Result retry = s.apply(c, &how);
  EXPECT_EQ(how, Applied::kDuplicate);
  EXPECT_EQ(retry, first);
  EXPECT_EQ(s.data().at("n").value, "1");
  EXPECT_EQ(s.data().at("m").value, "2");
}

TEST(StoreMultiTest, MsetNxSetsEveryKeyOrNone) {
  Store s;
  MultiClient c{s};
  auto msetnx = [](std::vector<std::pair<std::string, std::string>> kvs) {
    std::vector<Command> puts;
    std::vector<TxCondition> absent;
    for (auto& [k, v] : kvs) {
      puts.push_back(cmd(Op::kPut, k, v));
      absent.push_back(TxCondition{TxCondition::kAbsent, k, 0});
    }
    return multi(puts, absent);
  };
  EXPECT_TRUE(c.run(msetnx({{"a", "1"}, {"b", "2"}})).ok);
  const Result r = c.run(msetnx({{"c", "3"}, {"b", "x"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.value, "");
  EXPECT_EQ(s.data().count("c"), 0u) << "nothing of a failed MSETNX is set";
  EXPECT_EQ(s.data().at("b").value, "2");
  // A key past its deadline counts as absent.
  c.run(with_deadline(cmd(Op::kPut, "old", "v"), kNow + 10));
  EXPECT_TRUE(c.run(msetnx({{"old", "new"}}), kNow + 10).ok);
  EXPECT_EQ(s.data().at("old").value, "new");
}

// WATCH: the transaction runs only if nothing modified its watched keys
// since the watch read the store's version; another client's write, a
// delete, an expiry, a flushall each fail it, and it then changes nothing.
TEST(StoreMultiTest, AWatchedKeyModifiedBeforeExecFailsTheTransaction) {
  Store s;
  MultiClient one{s, 1}, other{s, 2};
  one.run(cmd(Op::kPut, "k", "0"));
  one.run(with_deadline(cmd(Op::kPut, "soon", "v"), kNow + 100));
  auto watch_then_exec = [&](const std::string& key, auto between, int64_t exec_at = kNow) {
    const uint64_t watch_seq = one.seq + 1;
    EXPECT_TRUE(one.run(cmd(Op::kWatch, key)).ok);
    between();
    return one.run(multi({cmd(Op::kPut, "k", "tx"), cmd(Op::kPut, "side", "tx")},
                         {TxCondition{TxCondition::kUnchanged, key, watch_seq}}),
                   exec_at);
  };
  const uint64_t digest = s.digest();
  Result r = watch_then_exec("k", [&] { other.run(cmd(Op::kPut, "k", "1")); });
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.value, "");
  EXPECT_EQ(s.data().at("k").value, "1");
  EXPECT_EQ(s.data().count("side"), 0u) << "a failed EXEC changes nothing";
  EXPECT_NE(s.digest(), digest);
  // The same value written again is a modification (as Redis's SET is).
  EXPECT_FALSE(watch_then_exec("k", [&] { other.run(cmd(Op::kPut, "k", "1")); }).ok);
  // A read, a failed SETNX, a write of another key: not modifications.
  EXPECT_TRUE(watch_then_exec("k", [&] {
                other.run(cmd(Op::kGet, "k"));
                other.run(cmd(Op::kSetNx, "k", "no"));
                other.run(cmd(Op::kPut, "elsewhere", "x"));
              }).ok);
  EXPECT_EQ(s.data().at("side").value, "tx");
  // A delete, then the key absent: modified; an absent key nobody touched
  // is not.
  EXPECT_FALSE(watch_then_exec("k", [&] { other.run(cmd(Op::kDelete, "k")); }).ok);
  EXPECT_TRUE(watch_then_exec("never", [] {}).ok);
  EXPECT_FALSE(watch_then_exec("never", [&] { other.run(cmd(Op::kPut, "never", "now")); }).ok);
  // A deadline that passes between the watch and the EXEC's stamp.
  EXPECT_TRUE(watch_then_exec(
                  "soon", [] {}, kNow + 99)
                  .ok);
  EXPECT_FALSE(watch_then_exec(
                   "soon", [] {}, kNow + 100)
                   .ok);
  // A failed RENAME that removed the expired target (lazy expiry): the
  // removal is a modification.
  one.run(with_deadline(cmd(Op::kPut, "target", "v"), kNow + 100));
  EXPECT_FALSE(watch_then_exec(
                   "target", [&] { other.run(cmd(Op::kRename, "nosource", "target"), kNow + 100); },
                   kNow + 100)
                   .ok);
  // FLUSHALL modifies every key, present or not.
  EXPECT_FALSE(watch_then_exec("absent", [&] { other.run(cmd(Op::kFlushAll, "")); }).ok);
  // A watch whose result is no longer kept (more than kClientWindow of the
  // client's commands since): conservatively failed.
  const uint64_t old_watch = one.seq + 1;
  one.run(cmd(Op::kWatch, "k"));
  for (uint64_t i = 0; i < kClientWindow; ++i) one.run(cmd(Op::kGet, "k"));
  EXPECT_FALSE(one.run(multi({cmd(Op::kPut, "k", "late")},
                             {TxCondition{TxCondition::kUnchanged, "k", old_watch}}))
                   .ok);
}

TEST(StoreMultiTest, TombstonesAreBoundedAndADroppedOneFailsConservatively) {
  Store s;
  MultiClient c{s};
  const uint64_t watch_seq = c.seq + 1;
  c.run(cmd(Op::kWatch, "gone"));
  c.run(cmd(Op::kPut, "gone", "v"));
  c.run(cmd(Op::kDelete, "gone"));
  for (size_t i = 0; i < Store::kTombstones + 10; ++i) {
    c.run(cmd(Op::kPut, "t" + std::to_string(i), "v"));
    c.run(cmd(Op::kDelete, "t" + std::to_string(i)));
  }
  EXPECT_LE(s.tombstones(), Store::kTombstones);
  EXPECT_FALSE(c.run(multi({cmd(Op::kPut, "x", "1")},
                           {TxCondition{TxCondition::kUnchanged, "gone", watch_seq}}))
                   .ok);
}

TEST(StoreMultiTest, MaxmemoryRefusesAWholeTransactionAndChangesNothing) {
  StoreOptions o;
  o.maxmemory = 1000;
  Store s(o);
  MultiClient c{s};
  c.run(cmd(Op::kPut, "big", std::string(500, 'x')));
  const uint64_t used = s.used_bytes();
  const uint64_t digest = s.digest();
  // Each SET alone would fit; together they pass the limit.
  const Result r = c.run(multi(
      {cmd(Op::kPut, "a", std::string(150, 'a')), cmd(Op::kPut, "b", std::string(150, 'b'))}));
  EXPECT_TRUE(r.refused);
  EXPECT_EQ(s.used_bytes(), used);
  EXPECT_EQ(s.data().count("a"), 0u);
  // (Only the client table moved on.)
  EXPECT_NE(s.digest(), digest);
  // One that frees more than it takes runs.
  const Result freed =
      c.run(multi({cmd(Op::kDelete, "big"), cmd(Op::kPut, "a", std::string(150, 'a')),
                   cmd(Op::kPut, "b", std::string(150, 'b'))}));
  EXPECT_TRUE(freed.ok);
  EXPECT_EQ(s.data().count("big"), 0u);
  uint64_t exact = 0;
  for (const auto& [k, e] : s.data()) exact += Store::entry_bytes(k, e);
  EXPECT_EQ(s.used_bytes(), exact);
}

TEST(StoreMultiTest, ATransactionWhoseRepliesWouldPassTheLimitDoesNotRun) {
  StoreOptions o;
  o.max_result_bytes = 1000;
  Store s(o);
  MultiClient c{s};
  c.run(cmd(Op::kPut, "v", std::string(400, 'v')));
  const Result r = c.run(
      multi({cmd(Op::kGet, "v"), cmd(Op::kPut, "w", "1"), cmd(Op::kGet, "v"), cmd(Op::kGet, "v")}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.value.find("ERR"), std::string::npos);
  EXPECT_EQ(s.data().count("w"), 0u);
}

// An append may not make a key and its value longer than one reply may
// carry (max_result_bytes), alone or in a transaction: refused whole,
// nothing changed (else a client could grow a value past what a flow's
// segment holds, and the job fails when the value is read).
TEST(StoreMultiTest, AnAppendPastTheLongestReplyIsRefusedAloneOrInATransaction) {
  StoreOptions o;
  o.max_result_bytes = 1000;
  Store s(o);
  MultiClient c{s};
  EXPECT_TRUE(c.run(cmd(Op::kAppend, "a", std::string(600, 'x'))).ok);
  const Result alone = c.run(cmd(Op::kAppend, "a", std::string(600, 'y')));
  EXPECT_FALSE(alone.ok);
  EXPECT_TRUE(alone.refused);
  EXPECT_EQ(alone.value, kTooLarge);
  EXPECT_EQ(s.data().at("a").value, std::string(600, 'x'));
  const Result tx =
      c.run(multi({cmd(Op::kPut, "b", "1"), cmd(Op::kAppend, "a", std::string(200, 'z')),
                   cmd(Op::kAppend, "a", std::string(200, 'z'))}));
  EXPECT_FALSE(tx.ok);
  EXPECT_NE(tx.value.find(kTooLarge), std::string::npos) << tx.value;
  EXPECT_EQ(s.data().count("b"), 0u);
  EXPECT_EQ(s.data().at("a").value.size(), 600u);
  // Up to the limit (key and value: 1 + 999 bytes) it appends.
  EXPECT_TRUE(c.run(cmd(Op::kAppend, "a", std::string(399, 'w'))).ok);
  EXPECT_EQ(s.data().at("a").value.size(), 999u);
}

TEST(StoreMultiTest, RenameMovesTheValueWithItsDeadline) {
  Store s;
  MultiClient c{s};
  c.run(with_deadline(cmd(Op::kPut, "from", "v"), kNow + 5000));
  c.run(cmd(Op::kPut, "to", "old"));
  EXPECT_TRUE(c.run(cmd(Op::kRename, "from", "to")).ok);
  EXPECT_EQ(s.data().count("from"), 0u);
  EXPECT_EQ(s.data().at("to"), (Item{"v", kNow + 5000}));
  EXPECT_EQ(s.volatile_keys(), 1u);
  EXPECT_EQ(c.run(cmd(Op::kRename, "from", "to")), (Result{false, "no such key"}));
  EXPECT_TRUE(c.run(cmd(Op::kRename, "to", "to")).ok) << "RENAME onto itself: OK";
  c.run(cmd(Op::kPut, "other", "o"));
  EXPECT_EQ(c.run(cmd(Op::kRenameNx, "to", "other")), (Result{false, ""}));
  EXPECT_EQ(s.data().at("other").value, "o");
  EXPECT_TRUE(c.run(cmd(Op::kRenameNx, "to", "free")).ok);
  EXPECT_EQ(s.data().at("free"), (Item{"v", kNow + 5000}));
  // The deadline passes: the key is gone, renamed or not.
  EXPECT_EQ(c.run(cmd(Op::kRename, "free", "x"), kNow + 5000), (Result{false, "no such key"}));
  EXPECT_EQ(s.volatile_keys(), 0u);
  uint64_t exact = 0;
  for (const auto& [k, e] : s.data()) exact += Store::entry_bytes(k, e);
  EXPECT_EQ(s.used_bytes(), exact);
}

TEST(StoreMultiTest, FlushAllRemovesEveryKeyAlsoInsideATransaction) {
  Store s;
  MultiClient c{s};
  c.run(cmd(Op::kPut, "a", "1"));
  c.run(with_deadline(cmd(Op::kPut, "b", "2"), kNow + 10));
  EXPECT_EQ(c.run(cmd(Op::kFlushAll, "")), (Result{true, "2"}));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.used_bytes(), 0u);
  EXPECT_EQ(s.volatile_keys(), 0u);
  c.run(cmd(Op::kPut, "a", "1"));
  c.run(cmd(Op::kPut, "b", "2"));
  const Result r =
      c.run(multi({cmd(Op::kPut, "a", "x"), cmd(Op::kFlushAll, ""), cmd(Op::kPut, "c", "3")}));
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.data().at("c").value, "3");
  EXPECT_EQ(s.used_bytes(), Store::entry_bytes("c", s.data().at("c")));
}

// Versions and tombstones are replicated state: a store restored from a
// snapshot decides a later WATCH as the one it was taken from.
TEST(StoreMultiTest, ASnapshotKeepsTheVersionsWatchDecidesWith) {
  Store s;
  MultiClient c{s};
  c.run(cmd(Op::kPut, "a", "1"));
  c.run(cmd(Op::kPut, "b", "1"));
  c.run(cmd(Op::kDelete, "b"));
  const uint64_t watch_seq = c.seq + 1;
  c.run(cmd(Op::kWatch, "a"));
  c.run(cmd(Op::kWatch, "b"));
  Store copy;
  std::string why;
  ASSERT_TRUE(copy.restore(s.serialize(), &why)) << why;
  EXPECT_EQ(copy.digest(), s.digest());
  EXPECT_EQ(copy.version(), s.version());
  EXPECT_EQ(copy.tombstones(), s.tombstones());
  Command tx =
      multi({cmd(Op::kPut, "a", "2")}, {TxCondition{TxCondition::kUnchanged, "a", watch_seq},
                                        TxCondition{TxCondition::kUnchanged, "b", watch_seq + 1}});
  tx.client = 1;
  tx.seq = c.seq + 1;
  EXPECT_TRUE(s.apply(tx).ok);
  EXPECT_TRUE(copy.apply(tx).ok);
  EXPECT_EQ(copy.digest(), s.digest());
}

TEST(StoreMultiTest, MalformedTransactionsAreRefusedOnDecode) {
  Transaction t;
  t.cmds.push_back(cmd(Op::kSweep, ""));
  Transaction out;
  EXPECT_FALSE(decode_transaction(encode_transaction(t), &out)) << "a sweep cannot be in one";
  t.cmds = {cmd(Op::kPut, "a", "b")};
  t.conditions = {TxCondition{TxCondition::kAbsent, "a", 0}};
  ASSERT_TRUE(decode_transaction(encode_transaction(t), &out));
  EXPECT_EQ(out.conditions, t.conditions);
  EXPECT_EQ(out.cmds.size(), 1u);
  EXPECT_EQ(out.cmds[0].value, "b");
  std::string bytes = encode_transaction(t);
  bytes.pop_back();
  EXPECT_FALSE(decode_transaction(bytes, &out));
  Store s;
  MultiClient c{s};
  Command bad = cmd(Op::kMulti, "", "garbage");
  EXPECT_EQ(c.run(bad), (Result{false, "ERR malformed transaction"}));
}

// LMOVE and SMOVE outside a transaction run in place on their two keys (no
// copy of either collection); inside one, or near maxmemory, on copies. A
// random mix of moves, pushes, pops, adds, expiries, strings and types,
// applied to a store as they come and to a store where each move is a
// transaction of its own (so on copies), answers alike, leaves the same
// data with the same versions (what WATCH decides with), the same store
// version and byte counts, and equals the sequential reference.
TEST(StoreMultiTest, MovesInPlaceAgreeWithTheSameMovesRunOnCopies) {
  for (const uint64_t maxmemory : {uint64_t{0}, uint64_t{1000}}) {
    StoreOptions o;
    o.maxmemory = maxmemory;
    Store here(o), copies(o);
    MultiClient a{here}, b{copies};
    Keyspace reference;
    uint64_t seed = 12345 + maxmemory;
    auto next = [&seed](uint64_t n) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      return (seed >> 33) % n;
    };
    const std::vector<std::string> keys = {"a", "b", "c", "d"};
    size_t moves = 0, refused = 0;
    for (int i = 0; i < 4000; ++i) {
      const std::string& k = keys[next(keys.size())];
      const std::string& other = keys[next(keys.size())];
      const std::string member = "m" + std::to_string(next(6));
      const int64_t now = kNow + i;
      Command c;
      const uint64_t what = next(100);
      if (what < 25) {
        c = cmd(Op::kLMove, k, other);
        c.expected = std::string(1, "LR"[next(2)]) + "LR"[next(2)];
      } else if (what < 40) {
        c = cmd(Op::kSMove, k, other);
        c.expected = member;
      } else if (what < 55) {
        c = cmd(next(2) ? Op::kRPush : Op::kLPush, k, encode_names({member, "v" + member}));
      } else if (what < 65) {
        c = cmd(Op::kSAdd, k, encode_names({member}));
      } else if (what < 72) {
        c = cmd(Op::kLPop, k);
      } else if (what < 78) {
        c = cmd(Op::kSRem, k, encode_names({member}));
      } else if (what < 86) {
        c = with_deadline(cmd(Op::kExpire, k), now + static_cast<int64_t>(next(20)));
      } else if (what < 90) {
        c = cmd(Op::kPut, k, "string");
      } else if (what < 95) {
        c = cmd(Op::kDelete, k);
      } else {
        c = cmd(Op::kLLen, k);
      }
      const bool move = c.op == Op::kLMove || c.op == Op::kSMove;
      moves += move;
      const Result ra = a.run(c, now);
      refused += ra.refused;
      Result rb = b.run(move ? multi({c}) : c, now);
      if (move && rb.ok) {
        std::vector<Result> one = b.results(rb);
        ASSERT_EQ(one.size(), 1u);
        rb = one[0];
      } else if (move && rb.refused) {
        rb = Result{false, "", true};
      }
      ASSERT_EQ(ra, rb) << i << " " << op_name(c.op) << " " << c.key << " " << c.value;
      Command ref = c;
      ref.now_ms = now;
      if (!ra.refused) {
        ASSERT_EQ(execute(reference, ref), ra) << i << " " << op_name(c.op);
      }
      ASSERT_EQ(here.data(), copies.data()) << i;
      for (const auto& [key, item] : here.data())
        ASSERT_EQ(item.version, copies.data().at(key).version) << i << " " << key;
      ASSERT_EQ(here.version(), copies.version()) << i;
      ASSERT_EQ(here.used_bytes(), copies.used_bytes()) << i;
    }
    EXPECT_EQ(here.data(), reference);
    std::string why;
    EXPECT_TRUE(here.sizes_agree(&why)) << why;
    EXPECT_GT(moves, 1000u);
    if (maxmemory != 0) {
      EXPECT_GT(refused, 0u) << "near maxmemory, some writes are refused";
    }
  }
}

// Transactions of collection writes, EXPIREs and counts run in place
// (multi_here): a random mix of them (and of commands that make a
// transaction run on copies: a GET, an LPOP, a SET), on strings too
// (WRONGTYPE), with keys expiring, applied to a store that runs them in
// place and to one that runs every transaction on copies, answers alike,
// leaves the same data with the same versions (what WATCH decides with),
// the same store version and byte counts; with limits on memory and on
// replies, under which some run on copies instead or are refused.
TEST(StoreMultiTest, TransactionsRunInPlaceAgreeWithTheSameRunOnCopies) {
  struct Limits {
    uint64_t maxmemory, max_result_bytes;
  };
  for (const Limits limits : {Limits{0, 0}, Limits{1500, 0}, Limits{0, 600}, Limits{2500, 700}}) {
    StoreOptions o;
    o.maxmemory = limits.maxmemory;
    o.max_result_bytes = limits.max_result_bytes;
    StoreOptions on_copies = o;
    on_copies.multi_in_place = false;
    Store here(o), copies(on_copies);
    MultiClient a{here}, b{copies};
    uint64_t seed = 777 + limits.maxmemory + limits.max_result_bytes;
    auto next = [&seed](uint64_t n) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      return (seed >> 33) % n;
    };
    const std::vector<std::string> keys = {"l", "s", "h", "z", "text"};
    size_t refused = 0;
    for (int i = 0; i < 3000; ++i) {
      const int64_t now = kNow + i;
      std::vector<Command> cmds;
      const uint64_t n = 1 + next(6);
      for (uint64_t j = 0; j < n; ++j) {
        const std::string& k = keys[next(keys.size())];
        const std::string m = "m" + std::to_string(next(8));
        const uint64_t what = next(100);
        Command c;
        if (what < 20) {
          c = cmd(next(3) == 0 ? Op::kLPushX : (next(2) ? Op::kRPush : Op::kLPush), k,
                  encode_names({m, "v" + m}));
        } else if (what < 35) {
          c = cmd(Op::kSAdd, k, encode_names({m}));
        } else if (what < 45) {
          c = cmd(Op::kHSet, k, encode_fields({{m, std::string(next(40), 'x')}}));
        } else if (what < 50) {
          c = cmd(Op::kHSetNx, k, "v");
          c.expected = m;
        } else if (what < 58) {
          c = cmd(Op::kHIncrBy, k, std::to_string(next(2000)));
          c.expected = m;
        } else if (what < 70) {
          c = cmd(Op::kZAdd, k, encode_names({std::to_string(next(50)), m}));
          if (next(3) == 0) c.expected = "I";
        } else if (what < 78) {
          c = with_deadline(cmd(Op::kExpire, k), now + static_cast<int64_t>(next(30)));
        } else if (what < 88) {
          const Op counts[] = {Op::kLLen, Op::kSCard, Op::kHLen, Op::kZCard};
          c = cmd(counts[next(4)], k);
        } else if (what < 92) {
          c = cmd(Op::kGet, k);  // (these three: the transaction runs on copies)
        } else if (what < 95) {
          c = cmd(Op::kLPop, k);
        } else {
          c = cmd(Op::kPut, k, "string");
        }
        cmds.push_back(std::move(c));
      }
      const Command t = multi(cmds);
      const Result ra = a.run(t, now), rb = b.run(t, now);
      refused += ra.refused;
      ASSERT_EQ(ra, rb) << i;
      ASSERT_EQ(here.data(), copies.data()) << i;
      for (const auto& [key, item] : here.data()) {
        ASSERT_EQ(item.version, copies.data().at(key).version) << i << " " << key;
      }
      ASSERT_EQ(here.version(), copies.version()) << i;
      ASSERT_EQ(here.used_bytes(), copies.used_bytes()) << i;
    }
    std::string why;
    EXPECT_TRUE(here.sizes_agree(&why)) << why;
    EXPECT_EQ(copies.transactions_in_place(), 0u);
    EXPECT_GT(here.transactions_in_place(), 300u)
        << "most transactions hold only in-place commands";
    if (limits.maxmemory != 0) {
      EXPECT_GT(refused, 0u) << "near maxmemory, some are refused";
    }
  }
}

}  // namespace
}  // namespace kv
