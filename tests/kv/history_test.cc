// The history sluice-kv writes for kv-porcupine (apps/kv/history.h) holds
// keys and values of any bytes: each byte is one code point in the JSON,
// so the checker gets the bytes back one for one. Two values that differ
// only in bytes of 0x80 and above stay different (written raw, a JSON
// decoder read each such byte as U+FFFD and took them for equal), and
// lengths count bytes (an APPEND's answer).
#include "history.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "client.h"
#include "porcupine_check.h"
#include "store.h"
#include "support/test_support.h"

namespace kv {
namespace {

using kv::testing::expect_porcupine_linearizable;
using kv::testing::porcupine;
using sluice::testing::ProcessResult;

Completed op(uint64_t client, Op o, std::string key, std::string value, bool ok, std::string out,
             uint64_t call, uint64_t ret) {
  Completed c;
  c.cmd.op = o;
  c.cmd.client = client;
  c.cmd.seq = 1;
  c.cmd.key = std::move(key);
  c.cmd.value = std::move(value);
  c.result.ok = ok;
  c.result.value = std::move(out);
  c.invoked_ms = call;
  c.completed_ms = ret;
  return c;
}

// Writes the operations' history lines to a file and runs kv-porcupine on it.
ProcessResult check(const std::vector<Completed>& ops, const std::string& name) {
  const std::string path = ::testing::TempDir() + name + "-" + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream out(path);
    for (const Completed& c : ops) out << history_line(c) << "\n";
  }
  const std::string checker = SLUICE_KV_PORCUPINE;
  ProcessResult r{-1, 0, false, "no " + checker + ": run scripts/install-porcupine.sh", 0};
  if (std::filesystem::exists(checker))
    r = sluice::testing::run_process({checker, path}, {}, std::chrono::seconds(60));
  std::remove(path.c_str());
  return r;
}

TEST(HistoryTest, BytesFromOx80AreWrittenAsCodePointsAndCheckedOneForOne) {
  const std::string a = "k\x80\x81", b = "k\x80\x82";
  const std::string line = history_line(op(0, Op::kPut, "\xff", a, true, "", 0, 5));
  EXPECT_NE(line.find("\"key\":\"\\u00ff\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"value\":\"k\\u0080\\u0081\""), std::string::npos) << line;

  // A read of a value that differs in one high byte is not linearizable.
  const ProcessResult wrong = check(
      {op(0, Op::kPut, "\xff", a, true, "", 0, 5), op(1, Op::kGet, "\xff", "", true, b, 10, 20)},
      "high-bytes-wrong");
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_NE(wrong.output.find("NOT linearizable"), std::string::npos) << wrong.output;

  // The same value read back, and an APPEND's length in bytes, are.
  const ProcessResult right = check(
      {op(0, Op::kPut, "\xff", a, true, "", 0, 5), op(1, Op::kGet, "\xff", "", true, a, 10, 20),
       op(2, Op::kAppend, "\xff", "\xe9", true, "4", 30, 40)},
      "high-bytes-right");
  EXPECT_EQ(right.exit_code, 0) << right.output;
}

ProcessResult check_fixture(const std::string& name) {
  const std::string checker = SLUICE_KV_PORCUPINE;
  if (!std::filesystem::exists(checker))
    return ProcessResult{-1, 0, false, "no " + checker + ": run scripts/install-porcupine.sh", 0};
  return sluice::testing::run_process({checker, std::string(SLUICE_KV_FIXTURES) + "/" + name}, {},
                                      std::chrono::seconds(60));
}

// The fixture `ok` is linearizable, and kv-porcupine's verdict names
// `summary`; each of `rejected` is not.
void expect_fixture_verdicts(const std::string& ok, const std::string& summary,
                             std::initializer_list<const char*> rejected) {
  const ProcessResult r = check_fixture(ok);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(summary), std::string::npos) << r.output;
  for (const char* name : rejected) {
    const ProcessResult p = check_fixture(name);
    EXPECT_EQ(p.exit_code, 1) << name << "\n" << p.output;
    EXPECT_NE(p.output.find("NOT linearizable"), std::string::npos) << name << "\n" << p.output;
  }
}

// The store's answers as sluice-kv's history records them: one client's
// commands, one after another, each completed before the next is called.
struct StoreHistory {
  Store store;
  std::vector<Completed> ops;
  uint64_t t = 0, seq = 0;
  void run(Op o, std::string key, std::string value, std::string expected) {
    Completed c;
    c.cmd.op = o;
    c.cmd.client = 1;
    c.cmd.seq = ++seq;
    c.cmd.key = std::move(key);
    c.cmd.value = std::move(value);
    c.cmd.expected = std::move(expected);
    c.cmd.now_ms = 1000;
    c.result = store.apply(c.cmd);
    c.invoked_ms = ++t;
    c.completed_ms = ++t;
    ops.push_back(c);
  }
};

// The hash operations (apps/kv/porcupine/hash.go): a history of every one as
// the store answers it, WRONGTYPE both ways, a hash's last field taking its
// key, and two concurrent HINCRBYs answered in either order, is
// linearizable; an HGET that misses a completed HSET, two HINCRBYs that both
// saw the field absent, a hash that outlives its last field and an HGETALL
// out of field order are not.
TEST(HistoryTest, TheHashCommandsAreModelledAsTheStoreExecutesThem) {
  expect_fixture_verdicts(
      "hash_ops_ok.jsonl", "linearizable (26 operations on 4 keys",
      {"hget_missing_an_hset.jsonl", "lost_hash_increment.jsonl",
       "hash_kept_after_its_last_field.jsonl", "hgetall_not_in_field_order.jsonl"});
}

// The store's own answers to the hash commands, written as sluice-kv writes
// them, are what the model expects: linearizable as they are, and not with
// one HGET's answer changed.
TEST(HistoryTest, TheStoresHashAnswersAreLinearizableAndAChangedOneIsNot) {
  StoreHistory h;
  auto run = [&h](Op o, std::string key, std::string value, std::string field = "") {
    h.run(o, std::move(key), std::move(value), std::move(field));
  };
  std::vector<Completed>& ops = h.ops;
  run(Op::kHSet, "h", encode_fields({{"z", "\xff"}, {"a", "1"}, {"m", ""}}));
  run(Op::kHIncrBy, "h", "41", "a");
  run(Op::kHIncrByFloat, "h", "0.5", "f");
  run(Op::kHGet, "h", "", "a");
  run(Op::kHMGet, "h", encode_names({"m", "none", "z"}));
  run(Op::kHSetNx, "h", "x", "m");
  run(Op::kHGetAll, "h", "");
  run(Op::kHDel, "h", encode_names({"a", "none"}));
  run(Op::kHLen, "h", "");
  run(Op::kPut, "s", "v");
  run(Op::kHGet, "s", "", "f");
  run(Op::kGet, "h", "");
  run(Op::kType, "h", "");
  run(Op::kDelete, "h", "");
  run(Op::kHGetAll, "h", "");
  EXPECT_EQ(ops[3].result, (Result{true, "42"}));
  EXPECT_EQ(ops[10].result, (Result{false, kWrongType}));
  const ProcessResult right = check(ops, "hash-answers");
  EXPECT_EQ(right.exit_code, 0) << right.output;
  ops[3].result.value = "41";
  const ProcessResult wrong = check(ops, "hash-answers-changed");
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  // HSCAN (and SSCAN) pages in the store's hash order: refused as input.
  run(Op::kHScan, "h", encode_scan_request({0, 10, ""}), "*");
  const ProcessResult scan = check({ops.back()}, "hscan");
  EXPECT_EQ(scan.exit_code, 2) << scan.output;
  EXPECT_NE(scan.output.find("cursor reads"), std::string::npos) << scan.output;
}

// The list operations (apps/kv/porcupine/list.go): a history of every one as
// the store answers it (indices as Redis's, WRONGTYPE both ways, a list's
// last element taking its key, two concurrent RPUSHes seen in the order
// opposite to their calls) is linearizable; an LPOP of an element never
// pushed, an LRANGE that misses a completed RPUSH, a list that outlives its
// last element and one element popped twice are not.
TEST(HistoryTest, TheListCommandsAreModelledAsTheStoreExecutesThem) {
  expect_fixture_verdicts(
      "list_ops_ok.jsonl", "linearizable (32 operations on 4 keys",
      {"lpop_of_an_element_never_pushed.jsonl", "lrange_missing_a_push.jsonl",
       "list_kept_after_its_last_element.jsonl", "one_element_popped_twice.jsonl"});
}

// The store's own answers to the list commands, written as sluice-kv writes
// them, are what the model expects: linearizable as they are, and not with
// one LPOP's answer changed.
TEST(HistoryTest, TheStoresListAnswersAreLinearizableAndAChangedOneIsNot) {
  StoreHistory h;
  auto run = [&h](Op o, std::string key, std::string value, std::string expected = "") {
    h.run(o, std::move(key), std::move(value), std::move(expected));
  };
  std::vector<Completed>& ops = h.ops;
  run(Op::kLPush, "l", encode_names({"a", "b", "\xff"}));
  run(Op::kRPush, "l", encode_names({"x", "", "x"}));
  run(Op::kLRange, "l", "-2", "1");
  run(Op::kLPop, "l", "");
  run(Op::kRPop, "l", "", "2");
  run(Op::kLIndex, "l", "", "-1");
  run(Op::kLSet, "l", "B", "0");
  run(Op::kLSet, "l", "B", "10");
  run(Op::kLRem, "l", "x", "0");
  run(Op::kLPushX, "none", encode_names({"v"}));
  run(Op::kRPushX, "l", encode_names({"t"}));
  run(Op::kLTrim, "l", "-1", "1");
  run(Op::kLLen, "l", "");
  run(Op::kPut, "s", "v");
  run(Op::kLPush, "s", encode_names({"v"}));
  run(Op::kGet, "l", "");
  run(Op::kType, "l", "");
  run(Op::kLPop, "l", "", "5");
  run(Op::kLLen, "l", "");
  run(Op::kRPush, "p", encode_names({"a", "c", "b", "c"}));
  run(Op::kLInsert, "p", encode_names({"c", "x"}), "after");
  run(Op::kLInsert, "p", encode_names({"none", "x"}), "before");
  run(Op::kLInsert, "none", encode_names({"a", "x"}), "before");
  run(Op::kLPos, "p", "c", encode_names({"-1", "", "0"}));
  run(Op::kLPos, "p", "c", encode_names({"1", "0", "0"}));
  run(Op::kLPos, "p", "zz", encode_names({"1", "", "0"}));
  run(Op::kLInsert, "s", encode_names({"v", "x"}), "before");
  EXPECT_EQ(ops[3].result, (Result{true, "\xff"}));
  EXPECT_EQ(ops[14].result, (Result{false, kWrongType}));
  EXPECT_EQ(ops[17].result, (Result{true, encode_names({"a", "t"})}));
  EXPECT_EQ(ops[23].result, (Result{true, "4"}));
  EXPECT_EQ(ops[24].result, (Result{true, encode_names({"1", "4"})}));
  const ProcessResult right = check(ops, "list-answers");
  EXPECT_EQ(right.exit_code, 0) << right.output;
  ops[3].result.value = "b";
  const ProcessResult wrong = check(ops, "list-answers-changed");
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  // An LPOS answering the first match for the last, or missing the
  // element LINSERT put after its pivot, is not what the store does.
  ops[3].result.value = "\xff";
  ops[23].result.value = "1";
  EXPECT_EQ(check(ops, "lpos-changed").exit_code, 1);
  ops[23].result.value = "4";
  ops[24].result.value = encode_names({"1", "3"});
  EXPECT_EQ(check(ops, "lpos-count-changed").exit_code, 1);
  ops[24].result.value = encode_names({"1", "4"});
  // LMOVE acts on two keys: refused as input.
  run(Op::kLMove, "p", "q", "RL");
  const ProcessResult several = check({ops.back()}, "lmove-two-keys");
  EXPECT_EQ(several.exit_code, 2) << several.output;
  EXPECT_NE(several.output.find("several keys"), std::string::npos) << several.output;
}

// The set operations (apps/kv/porcupine/set.go): a history of every one on
// one key as the store answers it (WRONGTYPE both ways, SPOP and
// SRANDMEMBER choosing any members, two concurrent SPOPs, an SPOP of
// unknown outcome that removed a member a later SMEMBERS misses) is
// linearizable; an SPOP of a member never added, an SMEMBERS that misses a
// completed SADD, one member popped twice and a set that outlives its last
// member are not.
TEST(HistoryTest, TheSetCommandsAreModelledAsTheStoreExecutesThem) {
  expect_fixture_verdicts(
      "set_ops_ok.jsonl", "linearizable (33 operations on 4 keys, 1 of unknown outcome",
      {"spop_of_a_member_never_added.jsonl", "smembers_missing_an_sadd.jsonl",
       "one_member_popped_twice.jsonl", "set_kept_after_its_last_member.jsonl"});
}

// The store's own answers to the set commands, written as sluice-kv writes
// them (SPOP's and SRANDMEMBER's choices the store's, from their seeds), are
// what the model expects: linearizable as they are, not with one SPOP's
// answer a member the set never held, nor with an SMEMBERS after it still
// holding what it popped; a command on several sets is refused as input.
TEST(HistoryTest, TheStoresSetAnswersAreLinearizableAndAChangedOneIsNot) {
  StoreHistory h;
  auto run = [&h](Op o, std::string key, std::string value, std::string expected = "") {
    h.run(o, std::move(key), std::move(value), std::move(expected));
  };
  std::vector<Completed>& ops = h.ops;
  run(Op::kSAdd, "s", encode_names({"a", "b", "\xff", "", "c"}));
  run(Op::kSRem, "s", encode_names({"c", "z"}));
  run(Op::kSMIsMember, "s", encode_names({"a", "c"}));
  run(Op::kSRandMember, "s", "11", "-6");
  run(Op::kSRandMember, "s", "12", "3");
  run(Op::kSPop, "s", "13");
  run(Op::kSMembers, "s", "");
  run(Op::kSPop, "s", "14", "2");
  run(Op::kSInter, "s", encode_names({"s"}));
  run(Op::kSInterCard, "s", encode_names({"s"}), "5");
  run(Op::kPut, "str", "v");
  run(Op::kSAdd, "str", encode_names({"v"}));
  run(Op::kType, "s", "");
  run(Op::kSPop, "s", "15", "9");
  run(Op::kSCard, "s", "");
  EXPECT_EQ(ops[2].result, (Result{true, "10"}));
  EXPECT_EQ(ops[11].result, (Result{false, kWrongType}));
  EXPECT_EQ(ops[14].result, (Result{true, "0"}));
  const ProcessResult right = check(ops, "set-answers");
  EXPECT_EQ(right.exit_code, 0) << right.output;
  const std::string popped = ops[5].result.value;
  ops[5].result.value = "never added";
  const ProcessResult wrong = check(ops, "set-answers-changed");
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  ops[5].result.value = popped;
  std::vector<std::string> members;
  ASSERT_TRUE(decode_names(ops[6].result.value, &members));
  members.push_back(popped);
  std::sort(members.begin(), members.end());
  ops[6].result.value = encode_names(members);
  const ProcessResult kept = check(ops, "set-answers-kept");
  EXPECT_EQ(kept.exit_code, 1) << kept.output;
  ops[6].result.value = encode_names({});
  run(Op::kSUnion, "s", encode_names({"s", "t"}));
  const ProcessResult several = check({ops.back()}, "set-several-keys");
  EXPECT_EQ(several.exit_code, 2) << several.output;
  EXPECT_NE(several.output.find("names several keys"), std::string::npos) << several.output;
}

// The sorted-set operations (apps/kv/porcupine/zset.go) against the store's
// own answers: 3,000 seeded random commands on two sorted sets and a string
// (ZADD with every option and ZINCRBY, NaN from an increment, scores that
// overflow or underflow, -0, infinities; ranges by rank, score and member,
// REV, LIMIT, WITHSCORES; pops, ZRANDMEMBER's counts, WRONGTYPE both ways,
// TYPE and DEL), written as sluice-kv writes them, are what the model
// expects; a changed ZRANGE answer, a changed score and a member missing
// from a ZRANDMEMBER's choice are not. (The store answers as redis-server
// 7.0 does: redis_zset_diff.py in kv.resp_keys_test.)
TEST(HistoryTest, TheStoresSortedSetAnswersAreLinearizableAndAChangedOneIsNot) {
  StoreHistory h;
  std::mt19937_64 rng(20261207);
  auto pick = [&rng](const std::vector<std::string>& from) {
    return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
  };
  auto chance = [&rng](int percent) {
    return std::uniform_int_distribution<int>(0, 99)(rng) < percent;
  };
  const std::vector<std::string> keys{"z1", "z2", "str"};
  const std::vector<std::string> members{"a", "b", "c", "d", "e", "", "\xff"};
  const std::vector<std::string> scores{"0",  "1",  "-1", "2.5",    "1e3",   "inf",   "-inf",
                                        "-0", "+3", ".5", "1.",     "0.1",   "7",     "7",
                                        "2",  "-2", "3",  "1e-320", "1e400", "1e-400"};
  const std::vector<std::string> score_bounds{"-inf", "+inf", "(1", "1",  "(0", "2.5", "(inf",
                                              "-1",   "",     "(",  " 3", "7",  "(7",  "1e400"};
  const std::vector<std::string> lex_bounds{"-", "+", "[a", "(b", "[", "(", "[\xff", "[c", "(e"};
  const std::vector<std::string> ranks{"-1", "0", "1", "2", "-3", "5", "-100"};
  size_t zrange_at = 0, zscore_at = 0, zrand_at = 0;
  for (int n = 0; n < 3000; ++n) {
    const std::string key = chance(8) ? "str" : pick({"z1", "z2"});
    const int what = std::uniform_int_distribution<int>(0, 13)(rng);
    auto range = [&](bool rank_ok) {
      ZRange q;
      q.by = static_cast<ZRange::By>(std::uniform_int_distribution<int>(rank_ok ? 0 : 1, 2)(rng));
      q.rev = chance(30);
      const std::vector<std::string>& b = q.by == ZRange::kRank    ? ranks
                                          : q.by == ZRange::kScore ? score_bounds
                                                                   : lex_bounds;
      q.min = pick(b);
      q.max = pick(b);
      if (q.by != ZRange::kRank && chance(30)) {
        q.offset = std::uniform_int_distribution<int>(-1, 3)(rng);
        q.limit = std::uniform_int_distribution<int>(-1, 3)(rng);
      }
      q.with_scores = chance(50);
      return encode_zrange(q);
    };
    if (what <= 3) {  // ZADD, ZINCRBY
      std::string flags;
      for (const char f : {kZAddNx, kZAddXx, kZAddGt, kZAddLt, kZAddCh})
        if (chance(15)) flags += f;
      const bool incr = chance(25);
      if (incr) flags += kZAddIncr;
      std::vector<std::string> args;
      for (int k = incr ? 1 : std::uniform_int_distribution<int>(1, 3)(rng); k > 0; --k) {
        args.push_back(incr && chance(40) ? pick({"inf", "-inf"}) : pick(scores));
        args.push_back(pick(members));
      }
      h.run(Op::kZAdd, key, encode_names(args), flags);
    } else if (what == 4) {
      h.run(Op::kZRem, key, encode_names({pick(members), pick(members)}), "");
    } else if (what == 5) {
      if (zscore_at == 0) zscore_at = h.ops.size();
      h.run(Op::kZScore, key, encode_names({pick(members), pick(members)}), "");
    } else if (what == 6) {
      h.run(chance(50) ? Op::kZCard : Op::kZCount, key, "", range(false));
    } else if (what == 7) {
      h.run(Op::kZRank, key, chance(50) ? "rev" : "", pick(members));
    } else if (what == 8 || what == 9) {
      h.run(Op::kZRange, key, "", range(true));
    } else if (what == 10) {
      h.run(Op::kZRemRange, key, "", range(true));
    } else if (what == 11) {
      h.run(Op::kZPop, key, chance(50) ? "max" : "min", pick({"", "0", "1", "2", "3"}));
    } else if (what == 12) {
      h.run(Op::kZRandMember, key, std::to_string(rng() % 1000),
            encode_names({pick({"", "-3", "-1", "0", "1", "2", "4", "9"}), chance(50) ? "1" : ""}));
    } else {
      // (The string key is made a string again; the others are emptied.)
      const Op o = chance(40) ? Op::kType : key == "str" ? Op::kPut : Op::kDelete;
      h.run(o, key, "v", "");
    }
    const Completed& last = h.ops.back();
    if (last.cmd.op == Op::kZRange && zrange_at == 0 && last.result.ok &&
        last.result.value.size() > 20)
      zrange_at = h.ops.size() - 1;
    if (last.cmd.op == Op::kZRandMember && zrand_at == 0 && last.result.ok &&
        last.cmd.expected == encode_names({"2", ""}) && last.result.value.size() > 4)
      zrand_at = h.ops.size() - 1;
  }
  std::vector<Completed>& ops = h.ops;
  size_t errors = 0, wrong = 0, nan = 0;
  for (const Completed& c : ops) {
    errors += !c.result.ok && c.result.value.rfind("ERR", 0) == 0;
    wrong += c.result.value == kWrongType;
    nan += c.result.value.find("NaN") != std::string::npos;
  }
  EXPECT_GT(wrong, 10u);
  EXPECT_GT(nan, 0u) << "an increment that makes NaN";
  EXPECT_GT(errors, nan) << "malformed scores";
  const ProcessResult right = check(ops, "zset-answers");
  EXPECT_EQ(right.exit_code, 0) << right.output;
  EXPECT_NE(right.output.find("linearizable (3000 operations on 3 keys"), std::string::npos)
      << right.output;
  // A changed answer: a ZRANGE's members, a score, a ZRANDMEMBER's choice.
  ASSERT_NE(zrange_at, 0u);
  std::vector<std::string> names;
  ASSERT_TRUE(decode_names(ops[zrange_at].result.value, &names));
  std::swap(names.front(), names.back());
  const std::string kept = std::exchange(ops[zrange_at].result.value, encode_names(names));
  EXPECT_EQ(check(ops, "zset-range-changed").exit_code, 1);
  ops[zrange_at].result.value = kept;
  ASSERT_NE(zscore_at, 0u);
  ops[zscore_at].result = Result{true, encode_names({"0.25", ""})};
  EXPECT_EQ(check({ops.begin(), ops.begin() + zscore_at + 1}, "zset-score-changed").exit_code, 1);
  ASSERT_NE(zrand_at, 0u);
  ASSERT_TRUE(decode_names(ops[zrand_at].result.value, &names));
  ops[zrand_at].result.value = encode_names({names[0], "never"});
  EXPECT_EQ(check({ops.begin(), ops.begin() + zrand_at + 1}, "zrandmember-changed").exit_code, 1);
}

// Sorted sets, concurrently: two ZINCRBYs that overlap answer 1 and 2 in
// either order, a ZPOPMIN of unknown outcome may have popped before a later
// ZRANGE; two ZINCRBYs that both answer 1, a ZCARD that misses a completed
// ZADD and one member popped twice are not linearizable; a hexadecimal
// score, a command on several keys and ZSCAN are refused as input.
TEST(HistoryTest, TheSortedSetCommandsAreCheckedConcurrently) {
  auto z = [](uint64_t client, Op o, std::string value, std::string expected, bool ok,
              std::string out, uint64_t call, uint64_t ret) {
    Completed c = op(client, o, "k", std::move(value), ok, std::move(out), call, ret);
    c.cmd.expected = std::move(expected);
    return c;
  };
  const std::string incr = std::string(1, kZAddIncr);
  ZRange all;
  all.min = "0";
  all.max = "-1";
  all.with_scores = true;
  const std::vector<Completed> incrs{
      z(1, Op::kZAdd, encode_names({"1", "m"}), incr, true, "2", 0, 10),
      z(2, Op::kZAdd, encode_names({"1", "m"}), incr, true, "1", 1, 11),
      z(3, Op::kZRange, "", encode_zrange(all), true, encode_names({"m", "2"}), 12, 13)};
  EXPECT_EQ(check(incrs, "zincrby-both-orders").exit_code, 0);
  std::vector<Completed> lost = incrs;
  lost[0].result.value = "1";
  lost[2].result.value = encode_names({"m", "1"});
  const ProcessResult lost_r = check(lost, "zincrby-lost");
  EXPECT_EQ(lost_r.exit_code, 1) << lost_r.output;
  std::vector<Completed> unknown{
      z(1, Op::kZAdd, encode_names({"1", "a", "2", "b"}), "", true, "2", 0, 1),
      z(2, Op::kZPop, "min", "", true, "", 2, 0),
      z(3, Op::kZRange, "", encode_zrange(all), true, encode_names({"b", "2"}), 5, 6)};
  unknown[1].unknown = true;
  EXPECT_EQ(check(unknown, "zpopmin-unknown").exit_code, 0);
  const std::vector<Completed> missed{
      z(1, Op::kZAdd, encode_names({"1", "a"}), "", true, "1", 0, 1),
      z(2, Op::kZCard, "", "", true, "0", 2, 3)};
  EXPECT_EQ(check(missed, "zcard-missed-a-zadd").exit_code, 1);
  const std::vector<Completed> twice{
      z(1, Op::kZAdd, encode_names({"1", "a", "2", "b"}), "", true, "2", 0, 1),
      z(2, Op::kZPop, "min", "", true, encode_names({"a", "1"}), 2, 5),
      z(3, Op::kZPop, "min", "", true, encode_names({"a", "1"}), 3, 6)};
  EXPECT_EQ(check(twice, "zpopmin-twice").exit_code, 1);
  const ProcessResult hex =
      check({z(1, Op::kZAdd, encode_names({"0x10", "a"}), "", true, "1", 0, 1)}, "zadd-hex");
  EXPECT_EQ(hex.exit_code, 2) << hex.output;
  EXPECT_NE(hex.output.find("hexadecimal"), std::string::npos) << hex.output;
  for (const Op o : {Op::kZRangeStore, Op::kZMPop, Op::kZCombine, Op::kZScan}) {
    const ProcessResult p = check({z(1, o, "", "", true, "", 0, 1)}, "zset-refused");
    EXPECT_EQ(p.exit_code, 2) << op_name(o) << ": " << p.output;
  }
}

// ------------------------------------------------ porcupine's verdicts
//
// kv-porcupine on the fixtures (tests/kv/fixtures) and on simulated runs of
// both protocols: the checker must tell a linearizable history from one
// that is not, or no later verdict on a job's history means anything.

// A file of this test's own under the test's temporary directory.
std::string history_path() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "kv-history-" + info->name() + "-" + std::to_string(getpid()) +
         ".jsonl";
}

// The checker itself: it must reject what is not linearizable. Fixtures: a
// read that misses a write completed before it began, and two swaps from the
// same value that both succeeded.
TEST(KvPorcupineTest, RejectsAStaleReadAndADoubleSwap) {
  for (const char* name :
       {"stale_read.jsonl", "double_cas.jsonl", "unknown_put_read_before_its_call.jsonl"}) {
    const ProcessResult p = porcupine(std::string(SLUICE_KV_FIXTURES) + "/" + name);
    EXPECT_EQ(p.exit_code, 1) << name << "\n" << p.output;
    EXPECT_NE(p.output.find("NOT linearizable"), std::string::npos) << name << "\n" << p.output;
  }
  const ProcessResult bad = porcupine(std::string(SLUICE_KV_FIXTURES) + "/../history_test.cc");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

// The string commands' operations (incrby, incrbyfloat, append, setrange,
// setnx, getset, getdel, setxx): histories using each as Redis answers it,
// with concurrent increments in either order and the store's errors, are
// linearizable; two increments (integer or float) that both saw the absent
// key, two GETDELs that both got the value, a SET XX that set an absent key
// and a SETRANGE that did not pad are not.
TEST(KvPorcupineTest, TheStringCommandsAreModelledAsTheStoreExecutesThem) {
  const ProcessResult ok = porcupine(std::string(SLUICE_KV_FIXTURES) + "/string_ops_ok.jsonl");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("linearizable (18 operations on 4 keys"), std::string::npos)
      << ok.output;
  const ProcessResult floats = porcupine(std::string(SLUICE_KV_FIXTURES) + "/float_ops_ok.jsonl");
  EXPECT_NE(floats.output.find("linearizable (11 operations on 3 keys"), std::string::npos)
      << floats.output;
  for (const char* name :
       {"lost_increment.jsonl", "double_getdel.jsonl", "setxx_of_an_absent_key.jsonl",
        "lost_float_increment.jsonl", "setrange_without_padding.jsonl"}) {
    const ProcessResult p = porcupine(std::string(SLUICE_KV_FIXTURES) + "/" + name);
    EXPECT_EQ(p.exit_code, 1) << name << "\n" << p.output;
    EXPECT_NE(p.output.find("NOT linearizable"), std::string::npos) << name << "\n" << p.output;
  }
}

// Expiry, checked against each operation's own stamp ("now"): a history of
// SET PX, TTL, reads on either side of the deadline, EXPIRE GT, GETEX
// PERSIST, KEEPTTL, INCRBY keeping a deadline and a plain SET clearing it,
// and a sweep after which a read with an earlier stamp (another gateway's
// slower clock) finds the key gone, is linearizable; without that sweep's
// line it is not (the read would have had to see the value). A read past the
// deadline that sees the value, a TTL that is not the deadline, a deadline
// a plain SET should have cleared, and a sweep of a key not yet due are
// rejected.
TEST(KvPorcupineTest, ExpiryIsCheckedAgainstEachOperationsStamp) {
  const std::string ok_file = std::string(SLUICE_KV_FIXTURES) + "/expiry_ok.jsonl";
  const ProcessResult ok = porcupine(ok_file);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("linearizable (19 operations on 4 keys"), std::string::npos)
      << ok.output;
  std::ifstream in(ok_file);
  const std::string without = history_path() + ".without-sweep";
  std::ofstream out(without);
  for (std::string l; std::getline(in, l);)
    if (l.find("\"keys\":[\"s\"]") == std::string::npos) out << l << "\n";
  out.close();
  const ProcessResult no_sweep = porcupine(without);
  EXPECT_EQ(no_sweep.exit_code, 1) << no_sweep.output;
  for (const char* name : {"expired_read.jsonl", "ttl_not_the_deadline.jsonl",
                           "ttl_kept_by_a_plain_set.jsonl", "sweep_of_a_live_key.jsonl"}) {
    const ProcessResult p = porcupine(std::string(SLUICE_KV_FIXTURES) + "/" + name);
    EXPECT_EQ(p.exit_code, 1) << name << "\n" << p.output;
    EXPECT_NE(p.output.find("NOT linearizable"), std::string::npos) << name << "\n" << p.output;
  }
}

// Operations of unknown outcome (a client's deadline passed) may take effect
// at any time after their call, or never: a put whose client timed out may
// be read after its call (not before: the fixture above), or not at all,
// and a timed-out swap need never happen. Counting it as failed would reject
// the first read of "b"; counting it as done would reject the read of "a".
TEST(KvPorcupineTest, OperationsOfUnknownOutcomeMayTakeEffectLaterOrNever) {
  const ProcessResult p = porcupine(std::string(SLUICE_KV_FIXTURES) + "/unknown_outcomes_ok.jsonl");
  EXPECT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("linearizable (6 operations on 2 keys, 2 of unknown outcome)"),
            std::string::npos)
      << p.output;
}

// A simulated run with message loss and a leader crash (both protocols): its
// history is linearizable; with one read's answer changed, it is not.
TEST(KvPorcupineTest, SimulatedRunsWithLossAndALeaderCrashAndOneReadChanged) {
  for (const char* protocol : {"multipaxos", "nopaxos"}) {
    const std::string history = history_path() + "." + protocol;
    const ProcessResult r = sluice::testing::run_process(
        {std::string(SLUICE_BIN_DIR) + "/sluice-kv", "simulate", "--protocol", protocol,
         "--clients", "4", "--ops", "150", "--keys", "4", "--drop", "0.05", "--crash-leader-at",
         "300", "--history", history});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("crashing leader"), std::string::npos) << r.output;
    expect_porcupine_linearizable(history, 600);
    // Change the answer of the last read that found its key.
    std::ifstream in(history);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    const std::string found = "\"op\":\"get\"", answer = "\"ok\":true,\"out\":\"";
    size_t changed = lines.size();
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find(found) != std::string::npos && lines[i].find(answer) != std::string::npos)
        changed = i;
    }
    ASSERT_LT(changed, lines.size()) << "no read found its key";
    const size_t at = lines[changed].find(answer) + answer.size();
    lines[changed].insert(at, "never-written-");
    const std::string mutated = history + ".changed";
    std::ofstream out(mutated);
    for (const std::string& l : lines) out << l << "\n";
    out.close();
    const ProcessResult p = porcupine(mutated);
    EXPECT_EQ(p.exit_code, 1) << lines[changed] << "\n" << p.output;
  }
}

}  // namespace
}  // namespace kv
