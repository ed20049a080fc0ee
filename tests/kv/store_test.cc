// The replicated state machine (apps/kv/store.h) and the exhaustive
// linearizability checker (apps/kv/linearizability.h), against hand-made
// cases whose answers are known.
#include "store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cluster_sim.h"
#include "linearizability.h"

namespace kv {
namespace {

Command cmd(Op op, uint64_t client, uint64_t seq, std::string key, std::string value = "",
            std::string expected = "") {
  Command c;
  c.op = op;
  c.client = client;
  c.seq = seq;
  c.key = std::move(key);
  c.value = std::move(value);
  c.expected = std::move(expected);
  return c;
}

TEST(StoreTest, PutGetDeleteAndCompareAndSetFollowTheirSpecification) {
  Store s;
  EXPECT_EQ(s.apply(cmd(Op::kGet, 1, 1, "a")), (Result{false, ""}));
  EXPECT_EQ(s.apply(cmd(Op::kPut, 1, 2, "a", "x")), (Result{true, ""}));
  EXPECT_EQ(s.apply(cmd(Op::kGet, 1, 3, "a")), (Result{true, "x"}));
  EXPECT_EQ(s.apply(cmd(Op::kCas, 1, 4, "a", "y", "wrong")), (Result{false, ""}));
  EXPECT_EQ(s.apply(cmd(Op::kCas, 1, 5, "a", "y", "x")), (Result{true, ""}));
  EXPECT_EQ(s.apply(cmd(Op::kGet, 1, 6, "a")), (Result{true, "y"}));
  EXPECT_EQ(s.apply(cmd(Op::kCas, 1, 7, "missing", "y", "")), (Result{false, ""}));
  EXPECT_EQ(s.apply(cmd(Op::kDelete, 1, 8, "a")), (Result{true, ""}));
  EXPECT_EQ(s.apply(cmd(Op::kDelete, 1, 9, "a")), (Result{false, ""}));
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.applied().size(), 9u);
}

// The operations behind Redis's string commands, with Redis's answers:
// INCRBY on an absent key counts from 0, on a value that is not a decimal
// integer as Redis prints one (" 1", "+1", "01", "1.5") or past 64 bits it
// is an error and changes nothing; APPEND answers the new length; SETNX
// sets only an absent key (else answers what it holds, for SET NX GET); SET
// XX only a present one; GETSET, GETDEL and SET XX answer the old value.
TEST(StoreTest, TheStringOperationsFollowRedis) {
  Store s;
  uint64_t seq = 0;
  auto run = [&](Op op, std::string key, std::string value = "") {
    return s.apply(cmd(op, 1, ++seq, std::move(key), std::move(value)));
  };
  EXPECT_EQ(run(Op::kIncrBy, "n", "1"), (Result{true, "1"}));
  EXPECT_EQ(run(Op::kIncrBy, "n", "-10"), (Result{true, "-9"}));
  for (const char* bad : {" 1", "+1", "01", "1.5", "", "x", "99999999999999999999"}) {
    s.apply(cmd(Op::kPut, 1, ++seq, "b", bad));
    EXPECT_EQ(run(Op::kIncrBy, "b", "1"), (Result{false, "not an integer"})) << "'" << bad << "'";
    EXPECT_EQ(s.data().at("b"), bad);
    EXPECT_EQ(run(Op::kIncrBy, "n", bad), (Result{false, "not an integer"})) << "'" << bad << "'";
  }
  EXPECT_EQ(s.data().at("n"), "-9");
  run(Op::kPut, "max", "9223372036854775807");
  EXPECT_EQ(run(Op::kIncrBy, "max", "1"), (Result{false, "overflow"}));
  EXPECT_EQ(run(Op::kIncrBy, "max", "-9223372036854775807"), (Result{true, "0"}));
  run(Op::kPut, "min", "-9223372036854775808");
  EXPECT_EQ(run(Op::kIncrBy, "min", "-1"), (Result{false, "overflow"}));
  EXPECT_EQ(run(Op::kAppend, "s", "ab"), (Result{true, "2"}));
  EXPECT_EQ(run(Op::kAppend, "s", "cde"), (Result{true, "5"}));
  EXPECT_EQ(s.data().at("s"), "abcde");
  EXPECT_EQ(run(Op::kSetNx, "s", "x"), (Result{false, "abcde"})) << "NX GET's answer";
  EXPECT_EQ(run(Op::kSetNx, "t", "x"), (Result{true, ""}));
  EXPECT_EQ(run(Op::kGetSet, "t", "y"), (Result{true, "x"}));
  EXPECT_EQ(run(Op::kGetSet, "u", "z"), (Result{false, ""}));
  EXPECT_EQ(s.data().at("u"), "z");
  EXPECT_EQ(run(Op::kGetDel, "t"), (Result{true, "y"}));
  EXPECT_EQ(run(Op::kGetDel, "t"), (Result{false, ""}));
  EXPECT_EQ(s.data().count("t"), 0u);
  EXPECT_EQ(run(Op::kSetXx, "t", "w"), (Result{false, ""})) << "SET XX of an absent key";
  EXPECT_EQ(s.data().count("t"), 0u);
  EXPECT_EQ(run(Op::kSetXx, "u", "w"), (Result{true, "z"}));
  EXPECT_EQ(s.data().at("u"), "w");
  // The same through the sequential reference the checks replay against.
  std::map<std::string, std::string> plain;
  EXPECT_EQ(execute(plain, cmd(Op::kIncrBy, 0, 0, "n", "5")), (Result{true, "5"}));
  EXPECT_EQ(plain.at("n"), "5");
}

TEST(StoreTest, ExecutesARetriedOperationOnlyOnceAndReturnsItsFirstResult) {
  Store s;
  EXPECT_TRUE(s.apply(cmd(Op::kPut, 7, 1, "a", "1")).ok);
  EXPECT_TRUE(s.apply(cmd(Op::kCas, 7, 2, "a", "2", "1")).ok);
  // The same (client, seq) again, as when a retry lands in the log twice:
  // the swap is not attempted again (it would now fail).
  EXPECT_TRUE(s.apply(cmd(Op::kCas, 7, 2, "a", "2", "1")).ok);
  Result r;
  EXPECT_TRUE(s.already_applied(7, 2, &r));
  EXPECT_TRUE(r.ok);
  EXPECT_FALSE(s.already_applied(7, 3, &r));
  EXPECT_EQ(s.data().at("a"), "2");
}

// A client with several commands in flight: they take effect in seq order
// only. One whose predecessor is missing is skipped (not executed, a (0, 0)
// entry of the applied log), and a retry of one that took effect gets its
// first result, for the client's last kClientWindow commands.
TEST(StoreTest, AClientsCommandsTakeEffectInOrderAndRetriesGetTheirFirstResult) {
  Store s;
  Applied how;
  s.apply(cmd(Op::kPut, 3, 2, "a", "second"), &how);
  EXPECT_EQ(how, Applied::kSkipped);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_TRUE(s.apply(cmd(Op::kPut, 3, 1, "a", "first"), &how).ok);
  EXPECT_EQ(how, Applied::kExecuted);
  EXPECT_TRUE(s.apply(cmd(Op::kCas, 3, 2, "a", "second", "first"), &how).ok);
  EXPECT_EQ(how, Applied::kExecuted);
  EXPECT_EQ(s.data().at("a"), "second");
  EXPECT_EQ(s.skipped(), 1u);
  EXPECT_EQ(s.applied(), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 0}, {3, 1}, {3, 2}}));
  // Retries: each gets its own first result.
  EXPECT_EQ(s.apply(cmd(Op::kPut, 3, 1, "a", "first"), &how), (Result{true, ""}));
  EXPECT_EQ(how, Applied::kDuplicate);
  EXPECT_TRUE(s.apply(cmd(Op::kCas, 3, 2, "a", "second", "first"), &how).ok);
  EXPECT_EQ(how, Applied::kDuplicate);
  EXPECT_EQ(s.data().at("a"), "second");
  // Past the window, results are forgotten (no client waits for them).
  for (uint64_t seq = 3; seq <= 2 + kClientWindow; ++seq) s.apply(cmd(Op::kGet, 3, seq, "a"));
  Result r;
  EXPECT_FALSE(s.already_applied(3, 2, &r));
  EXPECT_TRUE(s.already_applied(3, 3, &r));
  EXPECT_EQ(r, (Result{true, "second"}));
  s.apply(cmd(Op::kPut, 3, 2, "a", "x"), &how);
  EXPECT_EQ(how, Applied::kForgotten);
  EXPECT_EQ(s.data().at("a"), "second");
}

TEST(StoreTest, DigestsAgreeExactlyWhenStatesAgree) {
  Store a, b, c;
  for (Store* s : {&a, &b}) {
    s->apply(cmd(Op::kPut, 1, 1, "k1", "v"));
    s->apply(noop_command());
    s->apply(cmd(Op::kPut, 2, 1, "k2", "w"));
  }
  c.apply(cmd(Op::kPut, 1, 1, "k1", "v"));
  c.apply(cmd(Op::kPut, 2, 1, "k2", "other"));
  EXPECT_EQ(a.digest(), b.digest());
  EXPECT_NE(a.digest(), c.digest());
}

// A snapshot taken from a live store holds its state and reads the applied
// log's identities from the store when its bytes are asked for, so taking
// it does not copy the whole history; the store may go on applying
// meanwhile. Its bytes, read in pieces of any size, are those serialize()
// gave when it was taken, and they restore that store.
TEST(StoreTest, ASnapshotReadsItsIdentitiesFromTheStoreWhenItsBytesAreRead) {
  Store a;
  for (uint64_t seq = 1; seq <= 100; ++seq)
    a.apply(cmd(Op::kPut, 1 + seq % 3, seq / 3 + 1, "k", "v"));
  const std::string then = a.serialize();
  const uint64_t digest = a.digest();
  const auto applied = a.applied();
  const Snapshot snap = a.snapshot();
  ASSERT_EQ(snap.size(), then.size());
  for (uint64_t seq = 40; seq <= 90; ++seq) a.apply(cmd(Op::kPut, 7, seq - 39, "later", "w"));
  for (size_t piece : {size_t{1}, size_t{7}, size_t{16}, size_t{4096}}) {
    std::string read;
    for (size_t at = 0; at < snap.size(); at += piece) read += snap.bytes(a, at, piece);
    EXPECT_EQ(read, then) << "pieces of " << piece;
  }
  EXPECT_TRUE(snap.bytes(a, snap.size(), 10).empty());
  Store b;
  std::string why;
  ASSERT_TRUE(b.restore(snap.bytes(a, 0, snap.size()), &why)) << why;
  EXPECT_EQ(b.digest(), digest);
  EXPECT_EQ(b.applied(), applied);
  // Made from received bytes it holds them all, and needs no store.
  const Snapshot received(then);
  EXPECT_EQ(received.bytes(Store(), 0, received.size()), then);
}

// A snapshot restores an equal store: the same digest, applied log, skip
// count and client table (a retry still gets its first result); a snapshot
// cut short, with a byte more, or not a snapshot at all is refused and
// leaves the store as it was.
TEST(StoreTest, ASnapshotRestoresAnEqualStoreAndBadBytesAreRefused) {
  Store a;
  a.apply(cmd(Op::kPut, 1, 1, "k1", std::string("v\0\r\n", 4)));
  a.apply(noop_command());
  a.apply(cmd(Op::kCas, 2, 1, "k1", "x", std::string("v\0\r\n", 4)));
  a.apply(cmd(Op::kPut, 2, 3, "k2", "skipped: seq 2 is missing"));
  a.apply(cmd(Op::kDelete, 1, 2, "absent"));
  const std::string bytes = a.serialize();
  Store b;
  std::string why;
  ASSERT_TRUE(b.restore(bytes, &why)) << why;
  EXPECT_EQ(b.digest(), a.digest());
  EXPECT_EQ(b.applied(), a.applied());
  EXPECT_EQ(b.skipped(), 1u);
  EXPECT_EQ(b.data(), a.data());
  Result first;
  ASSERT_TRUE(b.already_applied(2, 1, &first));
  EXPECT_TRUE(first.ok);
  EXPECT_EQ(b.apply(cmd(Op::kCas, 2, 1, "k1", "y", "x")).ok, true) << "a retry: its first result";
  EXPECT_EQ(b.data().at("k1"), "x");

  Store c;
  c.apply(cmd(Op::kPut, 9, 1, "keep", "me"));
  const uint64_t before = c.digest();
  for (size_t cut : {size_t{0}, size_t{7}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_FALSE(c.restore(std::string_view(bytes).substr(0, cut), &why)) << cut;
    EXPECT_FALSE(why.empty());
  }
  EXPECT_FALSE(c.restore(bytes + "x", &why));
  EXPECT_FALSE(c.restore(std::string(64, '\xff'), &why));
  EXPECT_EQ(c.digest(), before) << "a refused snapshot changes nothing";
}

// maxmemory: a put or swap that would take the data past the limit is
// refused (no effect, Result::refused), a put that shrinks a value and every
// get and delete still run, and once deletes make room writes succeed again.
// The refusal is part of the state: a retry gets it back, and the digest and
// a snapshot carry it.
TEST(StoreTest, WritesPastMaxmemoryAreRefusedAndChangeNothing) {
  StoreOptions o;
  o.maxmemory = 3 * (Store::kEntryOverhead + 2 + 100);  // three keys "kN" of 100 bytes
  Store s(o);
  uint64_t seq = 0;
  for (int k = 0; k < 3; ++k) {
    const Result r =
        s.apply(cmd(Op::kPut, 1, ++seq, "k" + std::to_string(k), std::string(100, 'v')));
    EXPECT_TRUE(r.ok && !r.refused) << k;
  }
  EXPECT_EQ(s.used_bytes(), o.maxmemory);
  Applied how;
  const Result full = s.apply(cmd(Op::kPut, 1, ++seq, "k3", "x"), &how);
  EXPECT_EQ(how, Applied::kExecuted);
  EXPECT_TRUE(full.refused);
  EXPECT_FALSE(full.ok);
  EXPECT_EQ(s.data().count("k3"), 0u);
  EXPECT_TRUE(s.apply(cmd(Op::kPut, 1, seq, "k3", "x")).refused) << "a retry: the first result";
  EXPECT_TRUE(
      s.apply(cmd(Op::kCas, 1, ++seq, "k0", std::string(101, 'w'), std::string(100, 'v'))).refused)
      << "a swap that grows a value";
  EXPECT_FALSE(s.apply(cmd(Op::kCas, 1, ++seq, "k0", "short", std::string(100, 'v'))).refused)
      << "a swap that shrinks one";
  EXPECT_EQ(s.data().at("k0"), "short");
  EXPECT_FALSE(s.apply(cmd(Op::kCas, 1, ++seq, "k9", "x", "absent")).refused)
      << "a swap that fails anyway changes nothing and is answered as such";
  EXPECT_TRUE(s.apply(cmd(Op::kGet, 1, ++seq, "k1")).ok);
  EXPECT_TRUE(s.apply(cmd(Op::kDelete, 1, ++seq, "k1")).ok);
  EXPECT_FALSE(s.apply(cmd(Op::kPut, 1, ++seq, "k3", "x")).refused) << "room again";
  EXPECT_TRUE(s.apply(cmd(Op::kAppend, 1, ++seq, "k2", std::string(200, 'a'))).refused)
      << "an append that grows a value past the limit";
  EXPECT_EQ(s.data().at("k2"), std::string(100, 'v'));
  EXPECT_TRUE(s.apply(cmd(Op::kGetSet, 1, ++seq, "k2", std::string(300, 'g'))).refused);
  EXPECT_FALSE(s.apply(cmd(Op::kGetDel, 1, ++seq, "k2")).refused) << "a removal never is";
  // The refusal is state: a store without the refused result differs.
  Store copy;
  std::string why;
  ASSERT_TRUE(copy.restore(s.serialize(), &why)) << why;
  EXPECT_EQ(copy.digest(), s.digest());
  EXPECT_EQ(copy.options(), o) << "a snapshot carries the options";
  EXPECT_EQ(copy.used_bytes(), s.used_bytes());
  Result again;
  ASSERT_TRUE(copy.already_applied(1, 4, &again));
  EXPECT_TRUE(again.refused);
}

// Without keep_applied a store keeps no identity of what it applied, only
// its summary, which equals a keeping store's after the same log: count and
// chain over every entry, and the executed ones' count and sum. A different
// order gives a different chain; the executed sum is order-independent.
TEST(StoreTest, AStoreThatKeepsNoIdentitiesKeepsTheSameSummary) {
  StoreOptions lean;
  lean.keep_applied = false;
  Store keeping, summary_only(lean), reordered(lean);
  std::vector<Command> log;
  for (uint64_t seq = 1; seq <= 50; ++seq) {
    log.push_back(cmd(Op::kPut, 1 + seq % 2, (seq + 1) / 2, "k" + std::to_string(seq % 5), "v"));
    if (seq % 7 == 0) log.push_back(noop_command());
    if (seq % 9 == 0) log.push_back(log.front());  // a duplicate
  }
  for (const Command& c : log) {
    keeping.apply(c);
    summary_only.apply(c);
  }
  EXPECT_TRUE(summary_only.applied().empty());
  EXPECT_EQ(keeping.applied().size(), log.size());
  EXPECT_EQ(summary_only.summary(), keeping.summary());
  EXPECT_EQ(summary_only.digest(), keeping.digest());
  EXPECT_EQ(summary_only.summary().entries, log.size());
  uint64_t sum = 0, executed = 0;
  for (uint64_t client = 1; client <= 2; ++client)
    for (uint64_t seq = 1; seq <= summary_only.last_seq(client); ++seq, ++executed)
      sum += identity_hash(client, seq);
  EXPECT_EQ(summary_only.summary().executed, executed);
  EXPECT_EQ(summary_only.summary().executed_sum, sum);
  // The same commands with two of one client's swapped: one is skipped
  // (its predecessor is missing), so the logs and their chains differ.
  std::vector<Command> other = log;
  std::swap(other[0], other[2]);
  for (const Command& c : other) reordered.apply(c);
  EXPECT_NE(reordered.summary().chain, summary_only.summary().chain);
  // A snapshot of it restores the same summary, and no identities.
  Store restored;
  std::string why;
  ASSERT_TRUE(restored.restore(summary_only.serialize(), &why)) << why;
  EXPECT_EQ(restored.summary(), summary_only.summary());
  EXPECT_FALSE(restored.options().keep_applied);
  EXPECT_TRUE(restored.applied().empty());
}

Completed done(Command c, Result r, uint64_t invoked, uint64_t completed) {
  return Completed{std::move(c), std::move(r), invoked, completed};
}

TEST(LinearizabilityTest, AcceptsASequentialHistory) {
  std::vector<Completed> h = {
      done(cmd(Op::kPut, 1, 1, "a", "1"), {true, ""}, 0, 1),
      done(cmd(Op::kGet, 2, 1, "a"), {true, "1"}, 2, 3),
      done(cmd(Op::kCas, 1, 2, "a", "2", "1"), {true, ""}, 4, 5),
      done(cmd(Op::kGet, 2, 2, "a"), {true, "2"}, 6, 7),
  };
  std::string why;
  EXPECT_TRUE(linearizable(h, &why)) << why;
}

TEST(LinearizabilityTest, AcceptsConcurrentOperationsInEitherOrder) {
  // The read overlaps the write, so it may see the value or not.
  for (bool seen : {true, false}) {
    std::vector<Completed> h = {
        done(cmd(Op::kPut, 1, 1, "a", "1"), {true, ""}, 0, 10),
        done(cmd(Op::kGet, 2, 1, "a"), seen ? Result{true, "1"} : Result{false, ""}, 2, 5),
    };
    EXPECT_TRUE(linearizable(h));
  }
}

TEST(LinearizabilityTest, RejectsAStaleReadAfterACompletedWrite) {
  std::vector<Completed> h = {
      done(cmd(Op::kPut, 1, 1, "a", "1"), {true, ""}, 0, 1),
      done(cmd(Op::kGet, 2, 1, "a"), {false, ""}, 2, 3),
  };
  std::string why;
  EXPECT_FALSE(linearizable(h, &why));
  EXPECT_NE(why.find("real time"), std::string::npos);
}

TEST(LinearizabilityTest, RejectsTwoSuccessfulSwapsFromTheSameValue) {
  // Both compare-and-sets claim to have replaced "0": only one can have.
  std::vector<Completed> h = {
      done(cmd(Op::kPut, 1, 1, "a", "0"), {true, ""}, 0, 1),
      done(cmd(Op::kCas, 1, 2, "a", "1", "0"), {true, ""}, 2, 9),
      done(cmd(Op::kCas, 2, 1, "a", "2", "0"), {true, ""}, 3, 8),
  };
  EXPECT_FALSE(linearizable(h));
}

TEST(LinearizabilityTest, RejectsReadsThatSeeWritesInOppositeOrders) {
  // Two writes overlap; one reader sees 1 then 2, the other 2 then 1.
  std::vector<Completed> h = {
      done(cmd(Op::kPut, 1, 1, "a", "1"), {true, ""}, 0, 20),
      done(cmd(Op::kPut, 2, 1, "a", "2"), {true, ""}, 0, 20),
      done(cmd(Op::kGet, 3, 1, "a"), {true, "1"}, 1, 2),
      done(cmd(Op::kGet, 3, 2, "a"), {true, "2"}, 3, 4),
      done(cmd(Op::kGet, 4, 1, "a"), {true, "2"}, 5, 6),
      done(cmd(Op::kGet, 4, 2, "a"), {true, "1"}, 7, 8),
  };
  EXPECT_FALSE(linearizable(h));
}

// YCSB's core workloads: the read share, the value size, and the Zipfian
// keys' skew (YCSB's constant 0.99 over 1000 keys puts about 13% of the
// operations on the most popular key; uniform keys about 0.1%).
TEST(WorkloadTest, YcsbMixesValuesAndKeyDistributions) {
  ClusterOptions o;
  o.keys = 1000;
  o.ops_per_client = 20000;
  o.value_bytes = 64;
  for (const auto& [workload, reads] :
       std::vector<std::pair<std::string, double>>{{"a", 0.50}, {"b", 0.95}, {"c", 1.0}}) {
    o.workload = workload;
    size_t gets = 0;
    for (const Command& c : generate_ops(o, 0)) {
      ASSERT_TRUE(c.op == Op::kGet || c.op == Op::kPut) << workload;
      if (c.op == Op::kGet) ++gets;
      if (c.op == Op::kPut) {
        ASSERT_EQ(c.value.size(), 64u) << c.value;
      }
    }
    EXPECT_NEAR(static_cast<double>(gets) / o.ops_per_client, reads, 0.01) << workload;
  }
  auto top_share = [&](bool zipf) {
    o.zipf = zipf;
    std::map<std::string, size_t> count;
    for (const Command& c : generate_ops(o, 0)) ++count[c.key];
    size_t top = 0;
    for (const auto& [key, n] : count) {
      EXPECT_LT(std::stoul(key.substr(1)), 1000u) << key;
      top = std::max(top, n);
    }
    return static_cast<double>(top) / o.ops_per_client;
  };
  EXPECT_GT(top_share(true), 0.09);
  EXPECT_LT(top_share(false), 0.01);
  o.workload = "z";
  EXPECT_THROW(generate_ops(o, 0), std::invalid_argument);
}

}  // namespace
}  // namespace kv
