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
    EXPECT_EQ(s.data().at("b").value, bad);
    EXPECT_EQ(run(Op::kIncrBy, "n", bad), (Result{false, "not an integer"})) << "'" << bad << "'";
  }
  EXPECT_EQ(s.data().at("n").value, "-9");
  run(Op::kPut, "max", "9223372036854775807");
  EXPECT_EQ(run(Op::kIncrBy, "max", "1"), (Result{false, "overflow"}));
  EXPECT_EQ(run(Op::kIncrBy, "max", "-9223372036854775807"), (Result{true, "0"}));
  run(Op::kPut, "min", "-9223372036854775808");
  EXPECT_EQ(run(Op::kIncrBy, "min", "-1"), (Result{false, "overflow"}));
  EXPECT_EQ(run(Op::kAppend, "s", "ab"), (Result{true, "2"}));
  EXPECT_EQ(run(Op::kAppend, "s", "cde"), (Result{true, "5"}));
  EXPECT_EQ(s.data().at("s").value, "abcde");
  EXPECT_EQ(run(Op::kSetNx, "s", "x"), (Result{false, "abcde"})) << "NX GET's answer";
  EXPECT_EQ(run(Op::kSetNx, "t", "x"), (Result{true, ""}));
  EXPECT_EQ(run(Op::kGetSet, "t", "y"), (Result{true, "x"}));
  EXPECT_EQ(run(Op::kGetSet, "u", "z"), (Result{false, ""}));
  EXPECT_EQ(s.data().at("u").value, "z");
  EXPECT_EQ(run(Op::kGetDel, "t"), (Result{true, "y"}));
  EXPECT_EQ(run(Op::kGetDel, "t"), (Result{false, ""}));
  EXPECT_EQ(s.data().count("t"), 0u);
  EXPECT_EQ(run(Op::kSetXx, "t", "w"), (Result{false, ""})) << "SET XX of an absent key";
  EXPECT_EQ(s.data().count("t"), 0u);
  EXPECT_EQ(run(Op::kSetXx, "u", "w"), (Result{true, "z"}));
  EXPECT_EQ(s.data().at("u").value, "w");
  // INCRBYFLOAT: IEEE doubles, printed in the fewest digits that read back.
  run(Op::kPut, "f", "10.50");
  EXPECT_EQ(run(Op::kIncrByFloat, "f", "0.1"), (Result{true, "10.6"}));
  run(Op::kPut, "f", "5.0e3");
  EXPECT_EQ(run(Op::kIncrByFloat, "f", "2.0e2"), (Result{true, "5200"}));
  EXPECT_EQ(run(Op::kIncrByFloat, "f", "-5200"), (Result{true, "0"}));
  EXPECT_EQ(run(Op::kIncrByFloat, "nf", "+.5"), (Result{true, "0.5"}));
  EXPECT_EQ(run(Op::kIncrByFloat, "nf", "0.25e1"), (Result{true, "3"}));
  for (const char* bad : {"", " 1", "1 ", "x", "inf", "nan", "0x10", "1e", ".", "1e999"}) {
    s.apply(cmd(Op::kPut, 1, ++seq, "b", bad));
    EXPECT_EQ(run(Op::kIncrByFloat, "b", "1"), (Result{false, "not a float"})) << bad;
    EXPECT_EQ(run(Op::kIncrByFloat, "nf", bad), (Result{false, "not a float"})) << bad;
  }
  run(Op::kPut, "big", "1e308");
  EXPECT_EQ(run(Op::kIncrByFloat, "big", "1e308"), (Result{false, "nan or infinity"}));
  EXPECT_EQ(s.data().at("big").value, "1e308");
  // SETRANGE: written at the offset, zero bytes up to it; nothing made by
  // an empty value.
  run(Op::kPut, "sr", "Hello World");
  EXPECT_EQ(s.apply(cmd(Op::kSetRange, 1, ++seq, "sr", "Redis", "6")), (Result{true, "11"}));
  EXPECT_EQ(s.data().at("sr").value, "Hello Redis");
  EXPECT_EQ(s.apply(cmd(Op::kSetRange, 1, ++seq, "sr2", "x", "3")), (Result{true, "4"}));
  EXPECT_EQ(s.data().at("sr2").value, std::string("\0\0\0x", 4));
  EXPECT_EQ(s.apply(cmd(Op::kSetRange, 1, ++seq, "sr3", "", "5")), (Result{true, "0"}));
  EXPECT_EQ(s.data().count("sr3"), 0u);
  EXPECT_EQ(s.apply(cmd(Op::kSetRange, 1, ++seq, "sr", "x", "-1")),
            (Result{false, "offset is out of range"}));
  // The same through the sequential reference the checks replay against.
  Keyspace plain;
  EXPECT_EQ(execute(plain, cmd(Op::kIncrBy, 0, 0, "n", "5")), (Result{true, "5"}));
  EXPECT_EQ(plain.at("n").value, "5");
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
  EXPECT_EQ(s.data().at("a").value, "2");
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
  EXPECT_EQ(s.data().at("a").value, "second");
  EXPECT_EQ(s.skipped(), 1u);
  EXPECT_EQ(s.applied(), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 0}, {3, 1}, {3, 2}}));
  // Retries: each gets its own first result.
  EXPECT_EQ(s.apply(cmd(Op::kPut, 3, 1, "a", "first"), &how), (Result{true, ""}));
  EXPECT_EQ(how, Applied::kDuplicate);
  EXPECT_TRUE(s.apply(cmd(Op::kCas, 3, 2, "a", "second", "first"), &how).ok);
  EXPECT_EQ(how, Applied::kDuplicate);
  EXPECT_EQ(s.data().at("a").value, "second");
  // Past the window, results are forgotten (no client waits for them).
  for (uint64_t seq = 3; seq <= 2 + kClientWindow; ++seq) s.apply(cmd(Op::kGet, 3, seq, "a"));
  Result r;
  EXPECT_FALSE(s.already_applied(3, 2, &r));
  EXPECT_TRUE(s.already_applied(3, 3, &r));
  EXPECT_EQ(r, (Result{true, "second"}));
  s.apply(cmd(Op::kPut, 3, 2, "a", "x"), &how);
  EXPECT_EQ(how, Applied::kForgotten);
  EXPECT_EQ(s.data().at("a").value, "second");
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
  EXPECT_EQ(b.data().at("k1").value, "x");

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
  EXPECT_EQ(s.data().at("k0").value, "short");
  EXPECT_FALSE(s.apply(cmd(Op::kCas, 1, ++seq, "k9", "x", "absent")).refused)
      << "a swap that fails anyway changes nothing and is answered as such";
  EXPECT_TRUE(s.apply(cmd(Op::kGet, 1, ++seq, "k1")).ok);
  EXPECT_TRUE(s.apply(cmd(Op::kDelete, 1, ++seq, "k1")).ok);
  EXPECT_FALSE(s.apply(cmd(Op::kPut, 1, ++seq, "k3", "x")).refused) << "room again";
  EXPECT_TRUE(s.apply(cmd(Op::kAppend, 1, ++seq, "k2", std::string(200, 'a'))).refused)
      << "an append that grows a value past the limit";
  EXPECT_EQ(s.data().at("k2").value, std::string(100, 'v'));
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

// A command stamped `now` (ms) with what it does with its key's deadline.
Command timed(Op op, uint64_t seq, std::string key, int64_t now, std::string value = "",
              Ttl ttl = Ttl::kClear, int64_t deadline = 0, uint8_t ttl_if = 0) {
  Command c = cmd(op, 1, seq, std::move(key), std::move(value));
  c.now_ms = now;
  c.ttl = ttl;
  c.deadline_ms = deadline;
  c.ttl_if = ttl_if;
  return c;
}

// Redis's expiry rules, with every decision made against the command's own
// stamp: a key is gone for a command stamped at or after its deadline; SET
// (without KEEPTTL), GETSET and CAS clear the deadline, INCRBY and APPEND
// keep it, KEEPTTL keeps it; EXPIRE's NX, XX, GT and LT (no deadline counts
// as later than any); a deadline already passed removes the key; PERSIST
// answers whether there was one; TTL answers the deadline or -1; GETEX.
TEST(StoreTest, TheExpiryOperationsFollowRedis) {
  Store s;
  uint64_t seq = 0;
  auto run = [&](Op op, const std::string& key, int64_t now, std::string value = "",
                 Ttl ttl = Ttl::kClear, int64_t deadline = 0, uint8_t ttl_if = 0) {
    return s.apply(timed(op, ++seq, key, now, std::move(value), ttl, deadline, ttl_if));
  };
  const Result absent{false, ""};
  // SET k v PX 900 at 100: alive until 999, gone at 1000.
  EXPECT_EQ(run(Op::kPut, "k", 100, "v", Ttl::kSet, 1000), (Result{true, ""}));
  EXPECT_EQ(run(Op::kTtl, "k", 500), (Result{true, "1000"}));
  EXPECT_EQ(run(Op::kGet, "k", 999), (Result{true, "v"}));
  EXPECT_EQ(run(Op::kGet, "k", 1000), absent) << "deadline <= stamp: expired";
  EXPECT_EQ(s.size(), 0u) << "the read removed it";
  EXPECT_EQ(run(Op::kTtl, "k", 1000), absent) << "TTL's -2";
  // What clears the deadline and what keeps it.
  auto with_deadline = [&](const std::string& key, const std::string& value) {
    run(Op::kPut, key, 0, value, Ttl::kSet, 5000);
  };
  with_deadline("a", "1");
  EXPECT_EQ(run(Op::kPut, "a", 10, "2"), (Result{true, ""}));
  EXPECT_EQ(run(Op::kTtl, "a", 10), (Result{true, "-1"})) << "a plain SET clears it";
  with_deadline("a", "1");
  run(Op::kPut, "a", 10, "2", Ttl::kKeep);
  EXPECT_EQ(run(Op::kTtl, "a", 10), (Result{true, "5000"})) << "KEEPTTL";
  EXPECT_EQ(run(Op::kIncrBy, "a", 10, "5"), (Result{true, "7"}));
  EXPECT_EQ(run(Op::kAppend, "a", 10, "x"), (Result{true, "2"}));
  EXPECT_EQ(run(Op::kTtl, "a", 10), (Result{true, "5000"})) << "INCRBY and APPEND keep it";
  EXPECT_EQ(run(Op::kGetSet, "a", 10, "g"), (Result{true, "7x"}));
  EXPECT_EQ(run(Op::kTtl, "a", 10), (Result{true, "-1"})) << "GETSET clears it";
  with_deadline("a", "1");
  EXPECT_EQ(run(Op::kCas, "a", 10, "2"), absent) << "(expected \"\": no swap)";
  s.apply([&] {
    Command c = timed(Op::kCas, ++seq, "a", 10, "2");
    c.expected = "1";
    return c;
  }());
  EXPECT_EQ(run(Op::kTtl, "a", 10), (Result{true, "-1"})) << "a swap is a SET: it clears it";
  with_deadline("a", "1");
  EXPECT_EQ(run(Op::kDelete, "a", 10), (Result{true, ""}));
  run(Op::kPut, "a", 10, "new");
  EXPECT_EQ(run(Op::kGet, "a", 6000), (Result{true, "new"})) << "DEL took the deadline with it";
  // SET's NX and XX with an expiry.
  EXPECT_EQ(run(Op::kSetNx, "n", 10, "1", Ttl::kSet, 100), (Result{true, ""}));
  EXPECT_EQ(run(Op::kSetNx, "n", 20, "2", Ttl::kSet, 900), (Result{false, "1"}));
  EXPECT_EQ(run(Op::kTtl, "n", 20), (Result{true, "100"})) << "an NX that did not set";
  EXPECT_EQ(run(Op::kSetXx, "n", 30, "3", Ttl::kKeep), (Result{true, "1"}));
  EXPECT_EQ(run(Op::kTtl, "n", 30), (Result{true, "100"}));
  EXPECT_EQ(run(Op::kSetXx, "n", 100, "4"), absent) << "expired at 100: XX finds no key";
  EXPECT_EQ(run(Op::kSetNx, "n", 100, "5"), (Result{true, ""})) << "and NX sets it anew";
  // A deadline already passed (SET EXAT in the past): set, then gone.
  EXPECT_EQ(run(Op::kPut, "p", 500, "v", Ttl::kSet, 400), (Result{true, ""}));
  EXPECT_EQ(s.data().count("p"), 0u);
  // EXPIRE: absent key, conditions, a time passed, PERSIST.
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kSet, 100), absent);
  run(Op::kPut, "e", 0, "v");
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kSet, 900, kIfDeadline), absent) << "XX: none";
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kSet, 900, kIfLater), absent) << "GT: none";
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kSet, 900, kIfEarlier), (Result{true, ""}))
      << "LT: none counts as later than any";
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kSet, 800, kIfNoDeadline), absent) << "NX";
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kSet, 950, kIfEarlier), absent) << "LT: later";
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kSet, 950, kIfDeadline | kIfLater),
            (Result{true, ""}));
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kSet, 950, kIfLater), absent) << "GT: equal";
  EXPECT_EQ(run(Op::kTtl, "e", 0), (Result{true, "950"}));
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kClear), (Result{true, ""})) << "PERSIST";
  EXPECT_EQ(run(Op::kExpire, "e", 0, "", Ttl::kClear), absent) << "PERSIST of none";
  EXPECT_EQ(run(Op::kTtl, "e", 0), (Result{true, "-1"}));
  EXPECT_EQ(run(Op::kExpire, "e", 300, "", Ttl::kSet, 300), (Result{true, ""}))
      << "EXPIREAT now: the key is removed";
  EXPECT_EQ(s.data().count("e"), 0u);
  // GETEX: the value, then the deadline as asked.
  run(Op::kPut, "g", 0, "v");
  EXPECT_EQ(run(Op::kGetEx, "g", 0, "", Ttl::kKeep), (Result{true, "v"}));
  EXPECT_EQ(run(Op::kGetEx, "g", 0, "", Ttl::kSet, 700), (Result{true, "v"}));
  EXPECT_EQ(run(Op::kTtl, "g", 0), (Result{true, "700"}));
  EXPECT_EQ(run(Op::kGetEx, "g", 0, "", Ttl::kClear), (Result{true, "v"}));
  EXPECT_EQ(run(Op::kTtl, "g", 0), (Result{true, "-1"}));
  EXPECT_EQ(run(Op::kGetEx, "g", 800, "", Ttl::kSet, 800), (Result{true, "v"}));
  EXPECT_EQ(s.data().count("g"), 0u) << "GETEX PXAT now: read, then removed";
  EXPECT_EQ(run(Op::kGetEx, "g", 0), absent);
}

// Stamps from two gateways whose clocks differ: once a command stamped at or
// past a key's deadline has removed it, a later log entry with an earlier
// stamp finds it gone too (it never comes back to life).
TEST(StoreTest, AnExpiredKeyStaysGoneForLaterEntriesWithEarlierStamps) {
  Store s;
  s.apply(timed(Op::kPut, 1, "k", 1000, "v", Ttl::kSet, 1500));
  EXPECT_EQ(s.apply(timed(Op::kGet, 2, "k", 1400)), (Result{true, "v"}));
  EXPECT_EQ(s.apply(timed(Op::kGet, 3, "k", 1600)), (Result{false, ""}));
  EXPECT_EQ(s.apply(timed(Op::kGet, 4, "k", 1200)), (Result{false, ""})) << "a slow clock";
  EXPECT_EQ(s.apply(timed(Op::kTtl, 5, "k", 1200)), (Result{false, ""}));
  EXPECT_EQ(s.used_bytes(), 0u);
  EXPECT_EQ(s.volatile_keys(), 0u);
}

// Active expiry: a sweep removes the keys whose deadline has come, earliest
// first, at most kSweepKeys of them and kSweepBytes of keys, answers them
// and the earliest deadline left, and frees what they took; the sequential
// reference (a scan) removes the same ones.
TEST(StoreTest, ASweepRemovesExpiredKeysEarliestFirstInBoundedEntries) {
  Store s;
  Keyspace reference;
  uint64_t seq = 0;
  auto both = [&](const Command& c) {
    const Result r = s.apply(c);
    EXPECT_EQ(execute(reference, c), r) << op_name(c.op);
    return r;
  };
  // 150 keys due at 100..249 (in an order other than their names'), 10 at
  // 10,000, 5 with none.
  for (int i = 0; i < 150; ++i)
    both(timed(Op::kPut, ++seq, "due" + std::to_string(i), 0, "v", Ttl::kSet, 100 + (i * 7) % 150));
  for (int i = 0; i < 10; ++i)
    both(timed(Op::kPut, ++seq, "late" + std::to_string(i), 0, "v", Ttl::kSet, 10000));
  for (int i = 0; i < 5; ++i) both(timed(Op::kPut, ++seq, "none" + std::to_string(i), 0, "v"));
  EXPECT_EQ(s.volatile_keys(), 160u);
  const uint64_t before = s.used_bytes();
  Swept swept;
  ASSERT_TRUE(parse_sweep_result(both(timed(Op::kSweep, ++seq, "", 1000)).value, &swept));
  ASSERT_EQ(swept.keys.size(), kSweepKeys);
  EXPECT_EQ(swept.keys.front(), "due0") << "deadline 100";
  EXPECT_EQ(swept.keys[1], "due43") << "deadline 101";
  EXPECT_EQ(swept.next_deadline_ms, 164) << "the earliest left: more are due at once";
  EXPECT_EQ(s.size(), 165u - kSweepKeys);
  EXPECT_EQ(
      s.used_bytes(), before - [&] {
        uint64_t n = 0;
        for (const std::string& k : swept.keys)
          n += Store::kEntryOverhead + Store::kDeadlineOverhead + k.size() + 1;
        return n;
      }());
  ASSERT_TRUE(parse_sweep_result(both(timed(Op::kSweep, ++seq, "", 1000)).value, &swept));
  EXPECT_EQ(swept.keys.size(), kSweepKeys);
  ASSERT_TRUE(parse_sweep_result(both(timed(Op::kSweep, ++seq, "", 1000)).value, &swept));
  EXPECT_EQ(swept.keys.size(), 150u - 2 * kSweepKeys);
  EXPECT_EQ(swept.next_deadline_ms, 10000) << "nothing more due before 10,000";
  ASSERT_TRUE(parse_sweep_result(both(timed(Op::kSweep, ++seq, "", 1000)).value, &swept));
  EXPECT_TRUE(swept.keys.empty());
  EXPECT_EQ(s.size(), 15u);
  EXPECT_EQ(s.volatile_keys(), 10u);
  EXPECT_EQ(s.used_bytes(), 10 * (Store::kEntryOverhead + Store::kDeadlineOverhead + 6) +
                                5 * (Store::kEntryOverhead + 6));
  // Long keys: a sweep stops before the one that would pass kSweepBytes.
  const std::string big(3000, 'b');
  for (char c : std::string("wxyz"))
    both(timed(Op::kPut, ++seq, big + c, 0, "v", Ttl::kSet, 20000));
  ASSERT_TRUE(parse_sweep_result(both(timed(Op::kSweep, ++seq, "", 30000)).value, &swept));
  EXPECT_EQ(swept.keys.size(), 12u) << "the 10 short keys and two of 3,001 bytes";
  ASSERT_TRUE(parse_sweep_result(both(timed(Op::kSweep, ++seq, "", 30000)).value, &swept));
  EXPECT_EQ(swept.keys, (std::vector<std::string>{big + 'y', big + 'z'}));
  EXPECT_EQ(swept.next_deadline_ms, 0);
  EXPECT_FALSE(parse_sweep_result("short", &swept));
}

// Deadlines are state: two stores that differ only in one have different
// digests, a snapshot and a copy carry them (and the index a sweep uses),
// and replicas applying the same log of timed commands, skewed stamps and
// sweeps included, agree with each other and with the sequential reference.
TEST(StoreTest, DeadlinesAreInTheDigestSnapshotsAndCopiesAndReplicasAgree) {
  Store a, b;
  a.apply(timed(Op::kPut, 1, "k", 0, "v", Ttl::kSet, 100));
  b.apply(timed(Op::kPut, 1, "k", 0, "v", Ttl::kSet, 101));
  EXPECT_NE(a.digest(), b.digest());

  Store replica1, replica2;
  Keyspace reference;
  std::vector<Command> log;
  uint64_t x = 12345;
  auto rnd = [&x](uint64_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (x >> 33) % n;
  };
  const Op ops[] = {Op::kPut,   Op::kGet,    Op::kDelete, Op::kIncrBy, Op::kAppend,
                    Op::kSetNx, Op::kGetSet, Op::kSetXx,  Op::kExpire, Op::kTtl,
                    Op::kGetEx, Op::kSweep,  Op::kCas,    Op::kGetDel};
  for (uint64_t seq = 1; seq <= 3000; ++seq) {
    // Two gateways' clocks, 40 ms apart, both moving forward.
    const int64_t now = static_cast<int64_t>(seq) + (rnd(2) ? 40 : 0);
    Command c = timed(ops[rnd(std::size(ops))], seq, "k" + std::to_string(rnd(12)), now,
                      std::to_string(rnd(3)));
    const uint64_t t = rnd(3);
    c.ttl = t == 0 ? Ttl::kClear : t == 1 ? Ttl::kKeep : Ttl::kSet;
    c.deadline_ms = now + static_cast<int64_t>(rnd(80)) - 10;
    c.ttl_if = static_cast<uint8_t>(rnd(2) ? 0 : 1u << rnd(4));
    c.expected = std::to_string(rnd(3));
    log.push_back(c);
  }
  Store copy;
  for (size_t i = 0; i < log.size(); ++i) {
    const Result r1 = replica1.apply(log[i]);
    EXPECT_EQ(replica2.apply(log[i]), r1) << i;
    EXPECT_EQ(execute(reference, log[i]), r1) << i << " " << op_name(log[i].op);
    if (i == log.size() / 2) {
      // Half way: a snapshot taken and restored, and a copy, go on alike.
      std::string why;
      ASSERT_TRUE(replica2.restore(replica1.serialize(), &why)) << why;
      copy = replica1;
    } else if (i > log.size() / 2) {
      EXPECT_EQ(copy.apply(log[i]), r1) << i;
    }
  }
  EXPECT_EQ(replica1.digest(), replica2.digest());
  EXPECT_EQ(copy.digest(), replica1.digest());
  EXPECT_EQ(replica1.data(), reference);
  EXPECT_EQ(replica2.volatile_keys(), replica1.volatile_keys());
  uint64_t used = 0;
  for (const auto& [k, e] : reference) used += Store::entry_bytes(k, e);
  EXPECT_EQ(replica1.used_bytes(), used);
  EXPECT_EQ(replica2.used_bytes(), used);
}

// maxmemory counts a key's deadline, and an expired key until it is removed;
// EXPIRE, GETEX and sweeps are never refused (as Redis refuses none of them).
TEST(StoreTest, MaxmemoryCountsDeadlinesAndExpiredKeysUntilTheyAreRemoved) {
  StoreOptions o;
  o.maxmemory = 2 * (Store::kEntryOverhead + 2 + 10) + Store::kDeadlineOverhead;
  Store s(o);
  uint64_t seq = 0;
  EXPECT_FALSE(
      s.apply(timed(Op::kPut, ++seq, "k0", 0, std::string(10, 'v'), Ttl::kSet, 100)).refused);
  EXPECT_FALSE(s.apply(timed(Op::kPut, ++seq, "k1", 0, std::string(10, 'v'))).refused);
  EXPECT_EQ(s.used_bytes(), o.maxmemory);
  EXPECT_TRUE(s.apply(timed(Op::kPut, ++seq, "k2", 200, "x")).refused)
      << "k0 expired at 100 but still counts";
  EXPECT_FALSE(s.apply(timed(Op::kExpire, ++seq, "k1", 0, "", Ttl::kSet, 300)).refused);
  Swept swept;
  const Result r = s.apply(timed(Op::kSweep, ++seq, "", 200));
  EXPECT_FALSE(r.refused);
  ASSERT_TRUE(parse_sweep_result(r.value, &swept));
  EXPECT_EQ(swept.keys, std::vector<std::string>{"k0"});
  EXPECT_FALSE(s.apply(timed(Op::kPut, ++seq, "k2", 200, "x")).refused) << "room again";
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

// The reference knows expiry: a read stamped at or past a key's deadline
// that still sees its value is not linearizable; one that finds it gone is.
TEST(LinearizabilityTest, RejectsAReadThatSeesAKeyPastItsDeadline) {
  for (bool seen : {true, false}) {
    std::vector<Completed> h = {
        done(timed(Op::kPut, 1, "a", 100, "1", Ttl::kSet, 300), {true, ""}, 0, 1),
        done(timed(Op::kGet, 2, "a", 300), seen ? Result{true, "1"} : Result{false, ""}, 2, 3),
    };
    h[1].cmd.client = 2;
    h[1].cmd.seq = 1;
    EXPECT_EQ(linearizable(h), !seen);
  }
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
