// apps/kv/store.h: the replicated state machine of sluice-kv — a key-value
// store with strings, key expiry, hashes, lists, sets and sorted sets, plus
// the client table that makes every client operation take effect exactly
// once. The commands it applies, and what each answers: command.h.
//
// Both protocols (multipaxos.h, nopaxos.h) agree on a log of Commands; every
// replica applies that log in order to its own Store. Because apply() is
// deterministic and the client table is part of the state, replicas that
// apply the same log end with the same digest() — the tests compare exactly
// that.
//
// Time is part of the log: whoever makes a Command (the RESP gateway) stamps
// it with its wall clock (Command::now_ms), relative expiries arrive as
// absolute deadlines, and a key with a deadline counts as expired for a
// command whose stamp has reached it (deadline <= now_ms). No replica reads
// a clock while applying. A command that finds its key expired removes it
// first (lazy expiry), so a later entry never sees it alive again, whatever
// its own stamp; a kSweep entry removes a bounded number of expired keys
// that nobody touches (active expiry), oldest deadline first.
//
// Thread safety: none; a Store belongs to one replica.
#pragma once

#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command.h"
#include "item_parts.h"
#include "zset.h"

namespace kv {

// What every replica of a job is configured with alike; a snapshot carries
// it, so a store restored from one behaves as the one it was taken from.
struct StoreOptions {
  // The most the data may take (Store::used_bytes; 0: no limit). A put or a
  // cas that would take it past this is refused (Result::refused); gets and
  // deletes always run, so a full store can be emptied. Deterministic: it
  // depends only on the log, so every replica refuses the same commands.
  uint64_t maxmemory = 0;
  // Keep every applied log entry's identity (Store::applied()), which the
  // end-of-job checks replay; false keeps only their count and hashes
  // (Store::summary()), so a store that runs for hours does not grow with
  // its log (a RESP gateway's job).
  bool keep_applied = true;
  // The most a transaction's results may take in all (0: no limit): a
  // transaction whose results would take more is not run (Op::kMulti's
  // error), so that every reply fits a flow's segment (flow_job.h sets it
  // to the job's max_entry_bytes). Nor may an append (alone or in a
  // transaction) make a key and its value longer than this (kTooLarge),
  // nor any command answer more (kLongReply: a read of all of a bigger
  // hash, list, set or sorted set is refused; they may grow to maxmemory).
  uint64_t max_result_bytes = 0;
  // Run a transaction of collection writes and counts in place when
  // nothing could make it refused after it ran (Store::multi_here); false:
  // every transaction on copies of its keys (the tests compare the two).
  bool multi_in_place = true;
  friend bool operator==(const StoreOptions&, const StoreOptions&) = default;
};

// What a store has applied, in constant space: equal on two replicas that
// applied the same log (count and an order-dependent hash chain over the
// identities, no-ops and skipped commands as (0, 0)), and what it executed
// (count and an order-independent sum of identity_hash), which a job
// compares with what its clients completed.
struct AppliedSummary {
  uint64_t entries = 0;
  uint64_t chain = 0;
  uint64_t executed = 0;
  uint64_t executed_sum = 0;
  friend bool operator==(const AppliedSummary&, const AppliedSummary&) = default;
};

// A key's value and its deadline (ms since the epoch; 0: none), and the
// store's version when a command last modified it (Store keeps it; the
// reference execute() leaves it 0, and items compare without it). A hash
// holds its fields (never none: a hash's last field goes with its key) and
// an empty value; a list holds its elements (never none either) and an
// empty value; a set its members (never none, in byte order) and an empty
// value; a sorted set its members and scores (zset.h; never none); a
// string holds no fields, elements or members.
struct Item {
  std::string value;
  int64_t deadline_ms = 0;
  uint64_t version = 0;
  Fields fields;
  Elements list;
  Members members;
  ZSet zset;
  bool is_hash() const { return !fields.empty(); }
  bool is_list() const { return !list.empty(); }
  bool is_set() const { return !members.empty(); }
  bool is_zset() const { return !zset.empty(); }
  // Holds some type but a string.
  bool is_aggregate() const { return is_hash() || is_list() || is_set() || is_zset(); }
  // "string", "hash", "list", "set" or "zset": TYPE's answer.
  const char* type_name() const {
    return is_hash()   ? "hash"
           : is_list() ? "list"
           : is_set()  ? "set"
           : is_zset() ? "zset"
                       : "string";
  }
  friend bool operator==(const Item& a, const Item& b) {
    return a.value == b.value && a.deadline_ms == b.deadline_ms && a.fields == b.fields &&
           a.list == b.list && a.members == b.members && a.zset == b.zset;
  }
  // (Sorted sets order by their members and scores' bits: an order, not
  // a numeric one.)
  friend std::strong_ordering operator<=>(const Item& a, const Item& b);
};
using Keyspace = std::map<std::string, Item>;

// What an item's value takes in a reply: a string's bytes, a hash's
// encode_fields (4 bytes, and 8 bytes more than its field and value each),
// a list's or a set's encode_names (4 bytes, and 4 more than each
// element or member), or a sorted set's as ZRANGE 0 -1 WITHSCORES answers
// it (4 bytes, and 8 more than each member and its score's text).
size_t item_bytes(const Item& e);
inline constexpr size_t kFieldEncoding = 8;
inline constexpr size_t kElementEncoding = 4;

// What Store::apply did with a log entry.
enum class Applied : uint8_t {
  kExecuted,   // the command took effect; the result is its own
  kDuplicate,  // (client, seq) had taken effect before; the result is that first one's
  kForgotten,  // had taken effect so long ago that its result is no longer kept
  kSkipped,    // not executed: an earlier command of its client is missing (see apply)
  kNoop,
};

class Store;

// A snapshot as the replicas keep and send it (message.h, Snapshots). Its
// bytes are those of Store::serialize(): the state, then the identities of
// the applied log. Taken from a live store (Store::snapshot), it holds the
// state alone and reads the identities, the first identities_ of that
// store's applied log, when its bytes are asked for. The applied log only
// grows and a snapshot is of applied slots, so they are still there; and
// taking a snapshot every few thousand slots then costs the state's size,
// not the whole history's (which made a long run's snapshots quadratic).
// Made from received bytes, it holds them all.
class Snapshot {
 public:
  Snapshot() = default;
  explicit Snapshot(std::string bytes) : head_(std::move(bytes)) {}
  size_t size() const { return head_.size() + kIdentityBytes * identities_; }
  bool empty() const { return head_.empty(); }
  void clear() {
    head_.clear();
    identities_ = 0;
  }
  // Bytes [offset, offset + n) of it, fewer at its end. `store` is the one
  // it was taken from (or one whose applied log begins the same way).
  std::string bytes(const Store& store, size_t offset, size_t n) const;

 private:
  friend class Store;
  static constexpr size_t kIdentityBytes = 16;
  std::string head_;
  uint64_t identities_ = 0;
};

class Store {
 public:
  Store() = default;
  explicit Store(StoreOptions options) : options_(options) {}
  // (A copy builds its own index of deadlines: the index views its keys.)
  Store(const Store& other);
  Store& operator=(const Store& other);
  Store(Store&&) = default;
  Store& operator=(Store&&) = default;
  const StoreOptions& options() const { return options_; }

  // Applies one log entry. A command whose (client, seq) was already applied
  // is not executed again: its first result is returned (exactly-once under
  // client retries that land in the log twice). A no-op changes nothing.
  //
  // Each client's commands take effect in seq order, one after another,
  // as a Redis connection's pipelined commands do: a command whose
  // predecessor (seq - 1) has not taken effect yet is skipped, and left
  // for the client to send again (a client with several in flight resends
  // all of them after a timeout). That happens only where a message was
  // lost: a client sends its commands in order and the transport keeps
  // them in order. Whoever answers clients must answer only kExecuted and
  // kDuplicate; *what says which it was.
  Result apply(const Command& c, Applied* what = nullptr);

  // An order-independent summary of the whole state (keys, values and the
  // client table), equal on two replicas exactly when their states are.
  uint64_t digest() const;

  // Whether (client, seq) took effect and its result is still kept (one of
  // the client's last kClientWindow); if so, *result receives it. Older
  // ones are no longer awaited: their client has moved past them.
  bool already_applied(uint64_t client, uint64_t seq, Result* result) const;
  // Calls f(client) for every client with a command that took effect
  // (the identities the client table holds).
  template <class F>
  void for_each_client(F&& f) const {
    for (const auto& [client, state] : clients_) f(client);
  }
  // The node ids (client_node, command.h) of those clients, from `first`
  // up: where a new leader announces itself.
  std::set<uint32_t> client_nodes(uint32_t first) const {
    std::set<uint32_t> nodes;
    for_each_client([&](uint64_t client) {
      if (client_node(client) >= first) nodes.insert(client_node(client));
    });
    return nodes;
  }
  // The client's last command that took effect (0: none).
  uint64_t last_seq(uint64_t client) const {
    auto it = clients_.find(client);
    return it == clients_.end() ? 0 : it->second.seq;
  }

  // Identities of every applied log entry, in order ((0, 0) for a no-op or
  // a skipped command, neither of which took effect): the "applied log"
  // the tests compare across replicas. Empty unless options().keep_applied.
  const std::vector<std::pair<uint64_t, uint64_t>>& applied() const { return applied_; }
  // The applied log in constant space (kept whatever the options).
  const AppliedSummary& summary() const { return summary_; }
  // How many log entries were applied.
  uint64_t applied_count() const { return summary_.entries; }
  size_t size() const { return data_.size(); }
  // What the data takes, as maxmemory counts it: each key's and value's
  // bytes and kEntryOverhead per key, and kDeadlineOverhead more for a key
  // with a deadline (its node in the index of deadlines); a hash's fields
  // and values, and kFieldOverhead per field (its node in the hash's map);
  // a list's elements, and kElementOverhead per element (its string in the
  // list's deque); a set's members, and kMemberOverhead per member (its node
  // in the set's tree); a sorted set's members twice (in its map and its
  // tree), and kZMemberOverhead per member (its nodes there and its score).
  // An expired key counts until a command touches it or a sweep removes it.
  uint64_t used_bytes() const { return used_bytes_; }
  static constexpr uint64_t kEntryOverhead = 144;
  static constexpr uint64_t kDeadlineOverhead = 64;
  static constexpr uint64_t kFieldOverhead = 96;
  static constexpr uint64_t kElementOverhead = 48;
  static constexpr uint64_t kMemberOverhead = 64;
  static constexpr uint64_t kZMemberOverhead = 128;
  // What one key and its item take in used_bytes().
  // O(1): the items keep their bytes counted (item_parts.h, zset.h).
  static uint64_t entry_bytes(const std::string& key, const Item& e) {
    const uint64_t parts = e.fields.size() * kFieldOverhead + e.fields.bytes() +
                           e.list.size() * kElementOverhead + e.list.bytes() +
                           e.members.size() * kMemberOverhead + e.members.bytes() +
                           e.zset.size() * kZMemberOverhead + 2 * e.zset.member_bytes();
    return kEntryOverhead + key.size() + e.value.size() + parts +
           (e.deadline_ms != 0 ? kDeadlineOverhead : 0);
  }
  // Checks for tests, O(the data): whether the byte counts every item keeps
  // (item_parts.h, zset.h), and so entry_bytes() and item_bytes(), equal a
  // fresh walk of its strings; sizes_agree() also that used_bytes() is the
  // walked sum. False with *why naming the first key that differs.
  static bool counts_agree(const Keyspace& data, std::string* why);
  bool sizes_agree(std::string* why) const;
  // What a store holding `data` counts in used_bytes().
  static uint64_t keyspace_bytes(const Keyspace& data) {
    uint64_t n = 0;
    for (const auto& [k, e] : data) n += entry_bytes(k, e);
    return n;
  }
  // (What one key takes in the store's indexes is counted in
  // kEntryOverhead: its node in data_ and in the index by hash, SCAN's.)
  // How many keys have a deadline (expired or not).
  size_t volatile_keys() const { return by_deadline_.size(); }
  // The store's version: how many log entries modified some key (see
  // Transaction for what counts).
  uint64_t version() const { return version_; }
  // How many transactions ran in place (multi_here), not on copies.
  uint64_t transactions_in_place() const { return in_place_; }
  // The most key bytes of removed keys whose versions are kept (tombstones,
  // for a transaction's conditions on absent keys); older ones are
  // dropped, and a condition on such a key fails (it may have changed).
  static constexpr size_t kTombstoneBytes = 256 * 1024;
  static constexpr size_t kTombstones = 4096;
  size_t tombstones() const { return tombstones_.size(); }
  // How many commands apply() skipped (kSkipped).
  uint64_t skipped() const { return skipped_; }
  const Keyspace& data() const { return data_; }

  // A snapshot: the whole state (keys and values, the client table, the
  // skip count and the applied log's identities) as bytes, from which
  // restore() makes an equal Store (same digest, same applied()). The
  // protocols send it to a replica that needs slots they no longer keep.
  std::string serialize() const;
  // The same as a Snapshot, which reads the identities from this store
  // when its bytes are asked for: it costs the state's size, not the
  // history's.
  Snapshot snapshot() const;
  // Replaces this store by the one `bytes` describe; false (and *why says
  // what is wrong, the store unchanged) if they are not a whole snapshot.
  bool restore(std::string_view bytes, std::string* why);

 private:
  struct ClientState {
    uint64_t seq = 0;            // the last command that took effect
    std::deque<Result> results;  // of seq - results.size() + 1 .. seq
  };
  void record(uint64_t client, uint64_t seq, bool executed);
  // What `key` and its value take in used_bytes() (0: absent).
  uint64_t entry_bytes(const std::string& key) const;
  // Executes `c` (one key's command, or a sweep) on data_, keeping
  // used_bytes_ and by_deadline_ in step.
  Result execute_here(const Command& c);
  Result sweep(int64_t now_ms);
  // Whether `c` (a put or cas) would take the data past maxmemory.
  bool over_limit(const Command& c) const;
  // Whether `c` (an append) would make its key's string and key together
  // longer than max_result_bytes (StoreOptions): a reply must fit a flow's
  // segment. Refused with kTooLarge as its value. (A hash, a list, a set
  // or a sorted set may grow past it, up to maxmemory: a read of all of it
  // is refused instead, refuse_long_reply.)
  bool too_large(const Command& c) const;
  // Whether `c`, a pop with a count (LPOP, RPOP, SPOP, ZPOPMIN/MAX), would
  // answer more than max_result_bytes: then it does not run (its item is
  // longer than that, so the answer is tried on a copy of it).
  bool pop_too_long(const Command& c) const;
  // `c.key`'s entry alone after `c` (a write of one key) ran on a copy of
  // it; `keep_value`: copy the old value (a put replaces it). Empty: absent.
  Keyspace alone_after(const Command& c, bool keep_value) const;
  // Whether sizes_after() answers for `c`: a write that touches only the
  // members, fields or ends it names (SADD, HSET and its kin, the pushes,
  // ZADD).
  static bool sizes_by_parts(Op op);
  // What `c.key`'s entry would take after `c` (one of sizes_by_parts()), in
  // used_bytes() and in a reply (item_bytes); {0, 0}: absent. From a copy
  // of what `c` names alone (and one more member, so that the copy keeps
  // its type), not of the whole item (store_sizes.cc).
  std::pair<uint64_t, uint64_t> sizes_after(const Command& c) const;
  // Makes `r` (a read's) an error (kLongReply) if its value is longer than
  // one reply may be (max_result_bytes): LRANGE 0 -1, HGETALL, SMEMBERS or
  // ZRANGE of a big collection, HMGET naming fields many times,
  // SRANDMEMBER with a count < 0, SUNION of several sets.
  void refuse_long_reply(Result* r) const;
  // Takes `it` out of used_bytes_ and the indexes, or puts it in (count:
  // into used_bytes_ too).
  void unlink(Keyspace::iterator it);
  void link(Keyspace::iterator it, bool count = true);
  // store_keyspace.cc: dbsize, keys and scan.
  Result read_keyspace(const Command& c) const;
  // store_multi.cc: a transaction, rename or renamenx (run on copies of the
  // keys they touch, then committed or not), flushall, and watch.
  Result execute_keys(const Command& c);
  // LMOVE and SMOVE outside a transaction, run in place on their two keys
  // (no copy of either collection) when nothing could make them refused
  // after they ran (maxmemory, a reply too long); else nullopt, and
  // execute_keys runs them on copies.
  std::optional<Result> move_here(const Command& c);
  // A transaction (`t`, decoded from `c`, its conditions held) run in
  // place, no copy of any key, when each of its commands is a write of
  // the members, fields or ends it names (SADD, HSET and its kin, the
  // pushes, ZADD), an EXPIRE or a count, and neither its replies nor the
  // data could pass their limits; else nullopt, and it runs on copies.
  std::optional<Result> multi_here(const Command& c, const Transaction& t);
  Result flush_all();
  Result watch(const Command& c);
  bool condition_holds(const Command& c, const TxCondition& cond) const;
  // `key` was modified at version `v`: present, its item carries it; absent,
  // its tombstone does.
  void modified(const std::string& key, uint64_t v);
  void drop_tombstone(const std::string& key);

  StoreOptions options_;
  Keyspace data_;
  // Every key with a deadline, by (deadline, key): the sweep's order. The
  // key is a view of data_'s own (a map's keys stay where they are).
  std::set<std::pair<int64_t, std::string_view>> by_deadline_;
  // Every key by (key_hash, key): SCAN's order (a view of data_'s key).
  std::set<std::pair<uint64_t, std::string_view>> by_hash_;
  std::map<uint64_t, ClientState> clients_;
  std::vector<std::pair<uint64_t, uint64_t>> applied_;
  AppliedSummary summary_;
  uint64_t used_bytes_ = 0;
  uint64_t skipped_ = 0;
  uint64_t in_place_ = 0;  // transactions_in_place()
  uint64_t version_ = 0;
  // Removed keys' versions, and the highest version of any dropped one (or
  // of a flushall): an absent key without a tombstone was modified at most
  // at floor_.
  std::map<std::string, uint64_t, std::less<>> tombstones_;
  std::set<std::pair<uint64_t, std::string_view>> tomb_order_;  // oldest first
  size_t tomb_bytes_ = 0;
  uint64_t floor_ = 0;
};

// Executes `c` on a plain map with no client table: the sequential reference
// the linearizability checks replay against. (It knows no maxmemory: a
// refused command is one that took no effect, which the checks allow for.)
// A key expired at c.now_ms is removed before `c` runs; a sweep looks at
// every key (the Store keeps an index instead) and removes the same ones.
// It knows no versions: a transaction's kUnchanged conditions count as held
// and watch answers "0" (only the Store decides those).
Result execute(Keyspace& data, const Command& c);

namespace detail {
// store_multi.cc: execute() of the commands on several keys (multi, rename,
// renamenx, flushall) and of watch.
Result execute_many(Keyspace& data, const Command& c);
// store_keyspace.cc: execute() of dbsize, keys and scan, by a whole scan
// (the Store keeps an index by hash instead).
Result read_keyspace(const Keyspace& data, const Command& c, uint64_t max_result_bytes);
// Whether `c`, which returned `r`, wrote its key (Transaction: what counts
// as a modification, besides a removal).
bool writes(const Command& c, const Result& r);
bool expired(const Item& e, int64_t now_ms);
// Whether Redis refuses `op` past maxmemory (its "denyoom" commands): the
// writes, not reads, deletes, EXPIRE, GETEX or sweeps.
bool denied_when_full(Op op);
// store_strings.cc: execute() of incrbyfloat and setrange.
Result execute_string(Keyspace& data, const Command& c);
// store_hashes.cc: execute() of the hash commands, on a key that is absent
// or holds a hash (execute() answers kWrongType for one of the other type).
Result execute_hash(Keyspace& data, const Command& c);
bool is_hash_op(Op op);
// store_lists.cc: execute() of the list commands, on a key that is absent
// or holds a list.
Result execute_list(Keyspace& data, const Command& c);
bool is_list_op(Op op);
// store_sets.cc: execute() of the set commands on one key, on a key that is
// absent or holds a set, and of those on several keys (is_set_keys_op:
// smove, sinter, ..., which look at their keys' types and expiry
// themselves).
Result execute_set(Keyspace& data, const Command& c);
bool is_set_op(Op op);
bool is_set_keys_op(Op op);
// The keys a set or sorted-set command on several keys touches, `c.key`
// among them.
std::vector<std::string> set_keys(const Command& c);
// The commands on several keys that run on copies of their keys (the set
// ones, lmove and the sorted-set ones; execute_keys; lmove and smove
// outside a transaction in place, Store::move_here), and the keys they touch.
bool is_keys_op(Op op);
// store_zsets.cc: execute() of the sorted-set commands on one key (on a
// key that is absent or holds a sorted set) and of those on several keys
// (is_zset_keys_op: zrangestore, zcombine and zcombinestore, which look
// at their keys' types and expiry themselves; their keys as set_keys
// gives them).
Result execute_zset(Keyspace& data, const Command& c);
bool is_zset_op(Op op);
bool is_zset_keys_op(Op op);
// store_keyspace.cc: hscan's page of `fields` or sscan's of `members`
// (null: absent), in scan's order.
Result scan_one(const Command& c, const std::map<std::string, std::string>* fields,
                const std::set<std::string>* members);
// store_lists.cc: execute() of lmove and of lmpop (they look at their
// keys' expiry and types themselves).
Result execute_list_move(Keyspace& data, const Command& c);
Result execute_list_mpop(Keyspace& data, const Command& c);
// A result with `value` (store_lists.cc), and the decimal in `text` (the
// gateway checked it; 0 for one that is not, so that a malformed command
// changes nothing dangerous).
Result result_of(std::string value, bool ok = true);
int64_t number_or_zero(const std::string& text);
// Whether `c` on a key holding `e` meets the wrong type (kWrongType).
bool wrong_type(const Command& c, const Item& e);
}  // namespace detail

// INCRBYFLOAT's numbers (store_strings.cc). Arithmetic is IEEE double,
// which every replica computes alike (Redis uses long double, whose size
// differs between machines). parse_float takes [+-]digits[.digits][e[+-]
// digits] (no spaces, hex, inf or nan) into a finite double; format_float
// prints the fewest digits that read back as the same double, without an
// exponent (std::to_chars, exactly specified: the same on every replica
// and library). So 10.5 + 0.1 is "10.6" and 5.0e3 + 2.0e2 "5200", as in
// Redis, but 0.1 + 0.2 is "0.30000000000000004" where Redis's long double
// prints "0.3".
bool parse_float(std::string_view text, double* out);
std::string format_float(double v);

// Parses a decimal integer as Redis takes one (INCRBY's argument, a value
// to increment): as it would print it, within 64 bits; false otherwise.
bool parse_integer(std::string_view text, int64_t* out);

}  // namespace kv
