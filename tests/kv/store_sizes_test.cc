// The byte counts that sets, hashes, lists and sorted sets keep
// (apps/kv/item_parts.h, zset.h), from which the store's limits are
// decided in O(1): after every command of a long random log, on two
// replicas and the reference, they equal a fresh walk of the data.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "store.h"
#include "store_test_util.h"

namespace kv {
namespace {

using testing::cmd;
using Strings = std::vector<std::string>;

// A random command on one of a few keys, of any type the counts concern,
// and the commands that move whole items (RENAME, the STORE forms, SMOVE,
// LMOVE, SET over an aggregate, expiry, FLUSHALL).
class RandomLog {
 public:
  explicit RandomLog(uint64_t seed) : rng_(seed) {}

  Command next(int64_t now_ms) {
    static const Op kOps[] = {
        Op::kSAdd,        Op::kSAdd,        Op::kSRem,         Op::kSPop,    Op::kSMove,
        Op::kSInterStore, Op::kSUnionStore, Op::kSDiffStore,   Op::kHSet,    Op::kHSet,
        Op::kHSetNx,      Op::kHIncrBy,     Op::kHIncrByFloat, Op::kHDel,    Op::kLPush,
        Op::kRPush,       Op::kLPushX,      Op::kRPushX,       Op::kLPop,    Op::kRPop,
        Op::kLSet,        Op::kLRem,        Op::kLTrim,        Op::kLInsert, Op::kLMove,
        Op::kZAdd,        Op::kZRem,        Op::kZPop,         Op::kPut,     Op::kSetXx,
        Op::kDelete,      Op::kRename,      Op::kRenameNx,     Op::kExpire,  Op::kExpire,
        Op::kAppend,      Op::kMulti,       Op::kMulti,        Op::kSweep,   Op::kFlushAll,
        Op::kLMPop,       Op::kLMPop,       Op::kHRandField};
    Op op = kOps[rnd(std::size(kOps))];
    if (op == Op::kFlushAll && rnd(20) != 0) op = Op::kSAdd;  // (rarely)
    if (op == Op::kMulti) {
      Transaction t;
      for (uint64_t i = 0, n = 1 + rnd(3); i < n; ++i) {
        Command sub;
        do {
          sub = one(kOps[rnd(std::size(kOps))], now_ms);
        } while (!transaction_may_hold(sub.op) || sub.op == Op::kFlushAll);
        t.cmds.push_back(sub);
      }
      Command m = cmd(Op::kMulti, "", encode_transaction(t));
      m.now_ms = now_ms;
      return m;
    }
    return one(op, now_ms);
  }

 private:
  uint64_t rnd(uint64_t n) { return rng_() % n; }
  std::string key() { return "k" + std::to_string(rnd(7)); }
  std::string name() { return "n" + std::to_string(rnd(12)) + std::string(rnd(30), 'x'); }
  Strings names(uint64_t most) {
    Strings out;
    for (uint64_t i = 0, n = 1 + rnd(most); i < n; ++i) out.push_back(name());
    return out;
  }

  Command one(Op op, int64_t now_ms) {
    Command c = cmd(op, key(), name(), name());
    c.now_ms = now_ms;
    switch (op) {
      case Op::kSAdd:
      case Op::kSRem:
      case Op::kHDel:
      case Op::kLPush:
      case Op::kRPush:
      case Op::kLPushX:
      case Op::kRPushX:
      case Op::kZRem:
        c.value = encode_names(names(5));
        break;
      case Op::kSPop:
      case Op::kLPop:
      case Op::kRPop:
        c.expected = rnd(3) == 0 ? "" : std::to_string(rnd(4));
        c.value = std::to_string(rng_());  // (SPOP's seed)
        break;
      case Op::kSMove:
      case Op::kRename:
      case Op::kRenameNx:
        c.value = key();
        break;
      case Op::kSInterStore:
      case Op::kSUnionStore:
      case Op::kSDiffStore: {
        Strings keys;
        for (uint64_t i = 0, n = 1 + rnd(3); i < n; ++i) keys.push_back(key());
        c.value = encode_names(keys);
        break;
      }
      case Op::kHSet: {
        FieldValues pairs;
        for (const std::string& f : names(4)) pairs.emplace_back(f, std::string(rnd(20), 'v'));
        c.value = encode_fields(pairs);
        break;
      }
      case Op::kHIncrBy:
        c.value = std::to_string(static_cast<int64_t>(rnd(2001)) - 1000);
        break;
      case Op::kHIncrByFloat:
        c.value = std::to_string(rnd(1000)) + "." + std::to_string(rnd(100));
        break;
      case Op::kLSet:
      case Op::kLRem:
        c.expected = std::to_string(static_cast<int64_t>(rnd(9)) - 4);
        break;
      case Op::kLTrim:
        c.expected = std::to_string(static_cast<int64_t>(rnd(9)) - 4);
        c.value = std::to_string(static_cast<int64_t>(rnd(9)) - 4);
        break;
      case Op::kLInsert:
        c.value = encode_names({name(), name()});
        c.expected = rnd(2) == 0 ? "before" : "after";
        break;
      case Op::kLMove:
        c.value = key();
        c.expected = std::string(1, "LR"[rnd(2)]) + "LR"[rnd(2)];
        break;
      case Op::kZAdd: {
        const bool incr = rnd(4) == 0;  // (ZINCRBY: one member)
        Strings args;
        for (const std::string& m : incr ? Strings{name()} : names(4)) {
          args.push_back(std::to_string(static_cast<int64_t>(rnd(200)) - 100) + "." +
                         std::to_string(rnd(1000)));
          args.push_back(m);
        }
        c.value = encode_names(args);
        c.expected = incr ? "I" : "";
        break;
      }
      case Op::kLMPop: {
        Strings keys;
        for (uint64_t i = 0, n = 1 + rnd(3); i < n; ++i) keys.push_back(key());
        c.key = keys.front();
        c.value = encode_names(keys);
        c.expected = encode_names({rnd(2) == 0 ? "left" : "right", std::to_string(1 + rnd(3))});
        break;
      }
      case Op::kHRandField:
        c.value = std::to_string(rng_());
        c.expected = encode_names({std::to_string(static_cast<int64_t>(rnd(9)) - 4), ""});
        break;
      case Op::kZPop:
        c.value = rnd(2) == 0 ? "min" : "max";
        c.expected = std::to_string(1 + rnd(3));
        break;
      case Op::kSetXx:
        c.expected = "";
        break;
      case Op::kExpire:
        c.ttl = Ttl::kSet;
        c.deadline_ms = now_ms + static_cast<int64_t>(rnd(400));
        break;
      default:
        break;
    }
    return c;
  }

  std::mt19937_64 rng_;  // (its sequence is the standard's: the same everywhere)
};

// Applies a random log of `commands` to two replicas (the second restored
// from the first's snapshot halfway) and to the reference, and checks the
// counts after every command; how many commands were refused, and how many
// sets, hashes, lists and sorted sets the first replica held after each
// command, summed over the log.
struct Tally {
  size_t refused = 0, sets = 0, hashes = 0, lists = 0, zsets = 0;
};
Tally expect_counts_agree(const StoreOptions& o, uint64_t seed, uint64_t commands) {
  Store replica1(o), replica2(o);
  Keyspace reference;
  RandomLog gen(seed);
  Tally t;
  std::string why;
  for (uint64_t seq = 1; seq <= commands; ++seq) {
    Command c = gen.next(testing::kNow + static_cast<int64_t>(seq) * 7);
    c.client = 1;
    c.seq = seq;
    const Result r = replica1.apply(c);
    EXPECT_EQ(replica2.apply(c), r) << seq << " " << op_name(c.op);
    if (r.refused) {
      ++t.refused;
    } else {
      EXPECT_EQ(execute(reference, c), r) << seq << " " << op_name(c.op);
    }
    if (!replica1.sizes_agree(&why) || !replica2.sizes_agree(&why) ||
        !Store::counts_agree(reference, &why)) {
      ADD_FAILURE() << "after command " << seq << " (" << op_name(c.op) << "): " << why;
      return t;
    }
    for (const auto& [k, e] : replica1.data()) {
      t.sets += e.is_set();
      t.hashes += e.is_hash();
      t.lists += e.is_list();
      t.zsets += e.is_zset();
    }
    if (seq == commands / 2) {
      EXPECT_TRUE(replica2.restore(replica1.serialize(), &why)) << why;
      EXPECT_TRUE(replica2.sizes_agree(&why)) << "restored: " << why;
    }
  }
  EXPECT_EQ(replica1.digest(), replica2.digest());
  EXPECT_EQ(replica1.used_bytes(), replica2.used_bytes());
  EXPECT_EQ(replica1.data(), reference);
  const Store copy(replica1);
  EXPECT_TRUE(copy.sizes_agree(&why)) << "a copy: " << why;
  return t;
}

TEST(StoreSizesTest, KeptCountsEqualAWalkAfterEveryCommandOfARandomLog) {
  // With limits that refuse writes (maxmemory, one reply), and without.
  StoreOptions limited;
  limited.maxmemory = 2'500;
  limited.max_result_bytes = 400;
  const Tally t = expect_counts_agree(limited, 2026'12'05, 6'000);
  EXPECT_GT(t.refused, 50u) << "the limits were reached";
  const Tally u = expect_counts_agree(StoreOptions{}, 5, 6'000);
  EXPECT_EQ(u.refused, 0u);
  for (const Tally& x : {t, u}) {
    EXPECT_GT(x.sets, 1'000u);
    EXPECT_GT(x.hashes, 1'000u);
    EXPECT_GT(x.lists, 1'000u);
    EXPECT_GT(x.zsets, 1'000u);
  }
}

TEST(StoreSizesTest, AnItemMovedFromOrEmptiedCountsNothing) {
  Members m;
  m.insert("abc");
  m.insert(m.end(), "de");
  EXPECT_FALSE(m.insert("abc").second);
  EXPECT_EQ(m.bytes(), 5u);
  Members moved(std::move(m));
  EXPECT_EQ(moved.bytes(), 5u);
  EXPECT_EQ(m.bytes(), 0u);  // NOLINT(bugprone-use-after-move): what it leaves is specified
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(moved.erase("abc"), 1u);
  EXPECT_EQ(moved.erase("abc"), 0u);
  EXPECT_EQ(moved.bytes(), 2u);

  Fields f;
  EXPECT_TRUE(f.insert_or_assign("f", "12345"));
  EXPECT_FALSE(f.insert_or_assign("f", "1"));
  EXPECT_FALSE(f.emplace("f", "999").second) << "emplace keeps a field's value";
  EXPECT_EQ(f.bytes(), 2u);
  Fields g;
  g = std::move(f);
  EXPECT_EQ(g.bytes(), 2u);
  EXPECT_EQ(f.bytes(), 0u);  // NOLINT(bugprone-use-after-move)

  Elements l;
  l.push_back("aa");
  l.push_front("b");
  l.insert(l.begin() + 1, "cccc");
  l.set(0, "dddddd");
  EXPECT_EQ(l.bytes(), 12u);
  EXPECT_EQ(l.pop_back(), "aa");
  l.erase(l.begin(), l.begin() + 1);
  EXPECT_EQ(l.bytes(), 4u);
  Elements::Deque all = l.release();
  EXPECT_EQ(all.size(), 1u);
  EXPECT_EQ(l.bytes(), 0u);
  EXPECT_EQ(Elements(std::move(all)).bytes(), 4u);
}

}  // namespace
}  // namespace kv
