// tests/kv/store_test_util.h: what the store's tests of one data type
// (store_hash_test.cc, store_list_test.cc, store_set_test.cc) share: commands stamped alike, a
// client numbering its commands, a snapshot of an older version written by
// hand, and a random log applied to two replicas and the reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "store.h"
#include "wire.h"

namespace kv::testing {

inline constexpr int64_t kNow = 1'000'000;

inline Command cmd(Op op, std::string key, std::string value = "", std::string expected = "") {
  Command c;
  c.op = op;
  c.key = std::move(key);
  c.value = std::move(value);
  c.expected = std::move(expected);
  c.now_ms = kNow;
  return c;
}

// Applies commands as client 1's, numbered in order.
struct SeqClient {
  Store& store;
  uint64_t seq = 0;
  Result run(Command c) {
    c.client = 1;
    c.seq = ++seq;
    return store.apply(c);
  }
};

// ... and what a command answering encode_names answered (and that it
// was ok).
struct NamesClient : SeqClient {
  std::vector<std::string> names(Command c) {
    std::vector<std::string> out;
    const Result r = run(std::move(c));
    EXPECT_TRUE(r.ok) << r.value;
    EXPECT_TRUE(decode_names(r.value, &out)) << r.value;
    return out;
  }
};

// EXPIRE of `key` at the deadline `deadline_ms`.
inline Command expire_at(std::string key, int64_t deadline_ms) {
  Command c = cmd(Op::kExpire, std::move(key));
  c.ttl = Ttl::kSet;
  c.deadline_ms = deadline_ms;
  return c;
}

inline const Result kWrong{false, kWrongType};

// HSCAN or SSCAN (`op`) of `key` from cursor 0 until it is 0 again, COUNT
// `count`, MATCH `pattern`, NOVALUES if `novalues`: every page's names in
// order; *pages counts the pages; `between` runs after each page.
inline std::vector<std::string> scan_all(SeqClient& c, Op op, const std::string& key,
                                         uint64_t count, const std::string& pattern = "*",
                                         bool novalues = false, size_t* pages = nullptr,
                                         const std::function<void()>& between = {}) {
  std::vector<std::string> out;
  uint64_t cursor = 0;
  size_t n = 0;
  do {
    const Result r = c.run(
        cmd(op, key, encode_scan_request({cursor, count, novalues ? "novalues" : ""}), pattern));
    KeysPage page;
    EXPECT_TRUE(r.ok && decode_keys(r.value, &page)) << r.value;
    out.insert(out.end(), page.keys.begin(), page.keys.end());
    cursor = page.cursor;
    ++n;
    if (between) between();
  } while (cursor != 0 && n < 100'000);
  if (pages != nullptr) *pages = n;
  return out;
}

// A snapshot as an older version wrote it (`magic`), with no options,
// tombstones, clients or applied log: the store's version, and `items` keys
// that `write_items` writes.
inline std::string old_snapshot(
    uint32_t magic, uint64_t version, uint32_t items,
    const std::function<void(wire::Writer<std::string>&)>& write_items) {
  std::string old;
  wire::Writer<std::string> w{old};
  w.put<uint32_t>(magic);
  w.put<uint8_t>(0);
  for (uint64_t v : {uint64_t{0}, uint64_t{0}, version, uint64_t{0}})
    w.put<uint64_t>(v);  // limits, version, floor
  w.put<uint32_t>(0);    // tombstones
  w.put<uint32_t>(items);
  write_items(w);
  w.put<uint32_t>(0);                              // clients
  for (int i = 0; i < 5; ++i) w.put<uint64_t>(0);  // skipped, summary
  w.put<uint32_t>(0);                              // identities
  return old;
}

// The start of a key's item in old_snapshot: the key, an empty value, no
// deadline and `version`.
inline void old_item(wire::Writer<std::string>& w, const std::string& key, uint64_t version) {
  w.str(key);
  w.str("");
  w.put<int64_t>(0);
  w.put<uint64_t>(version);
}

// Applies `log` to two replicas with options `o` (the second restored from
// the first's snapshot halfway) and what they did not refuse to the
// reference execute(): every result equal, the replicas identical at the
// end (digest, data, used bytes) and within maxmemory. `each` sees the
// first replica after every entry. Returns how many entries were refused
// (for maxmemory, or for an answer longer than max_result_bytes).
inline size_t expect_replicas_identical(const StoreOptions& o, const std::vector<Command>& log,
                                        const std::function<void(const Store&)>& each = {}) {
  Store replica1(o), replica2(o);
  Keyspace reference;
  size_t refused = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    const Result r1 = replica1.apply(log[i]);
    EXPECT_EQ(replica2.apply(log[i]), r1) << i;
    // (A command whose answer would pass max_result_bytes, a read of all
    // of a big item or a pop of much of it, changed nothing: the
    // reference, which has no such limit, does not run it either.)
    if (r1.refused || (!r1.ok && r1.value.rfind(kLongReply, 0) == 0)) {
      ++refused;
    } else {
      EXPECT_EQ(execute(reference, log[i]), r1) << i << " " << op_name(log[i].op);
    }
    if (each) each(replica1);
    if (i == log.size() / 2) {
      std::string why;
      EXPECT_TRUE(replica2.restore(replica1.serialize(), &why)) << why;
    }
  }
  EXPECT_EQ(replica1.digest(), replica2.digest());
  EXPECT_EQ(replica1.data(), reference);
  const uint64_t used = Store::keyspace_bytes(reference);
  EXPECT_EQ(replica1.used_bytes(), used);
  EXPECT_EQ(replica2.used_bytes(), used);
  EXPECT_LE(used, o.maxmemory);
  return refused;
}

}  // namespace kv::testing

namespace kv::testing {

// expect_replicas_identical, and how many keys of the first replica `is`
// held after each entry, summed over the log: {refused, held}.
inline std::pair<size_t, size_t> refused_and_held(const StoreOptions& o,
                                                  const std::vector<Command>& log,
                                                  const std::function<bool(const Item&)>& is) {
  size_t held = 0;
  const size_t refused = expect_replicas_identical(o, log, [&](const Store& s) {
    for (const auto& [k, e] : s.data()) held += is(e) ? 1 : 0;
  });
  return {refused, held};
}

}  // namespace kv::testing
