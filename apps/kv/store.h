// apps/kv/store.h: the replicated state machine of sluice-kv — a key-value
// store with put, get, delete and compare-and-set, key expiry, hashes
// (store_hashes.cc), plus the client table that makes every client
// operation take effect exactly once.
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

#include "item_parts.h"
#include "zset.h"

namespace kv {

// The operations of the store (Redis's string commands map onto them):
// put, get, delete and compare-and-set; incrby (INCR, INCRBY, DECR, DECRBY:
// `value` the signed decimal to add), append, setnx (put if absent), getset
// (put, returning the value it replaced), getdel (delete, returning it) and
// setxx (put if present, returning the value it replaced); incrbyfloat
// (INCRBYFLOAT: `value` the decimal to add) and setrange (SETRANGE:
// `value` written at the offset `expected`, in decimal). Reads of the
// keyspace (store_keyspace.cc): dbsize, keys (`key` a glob pattern) and
// scan (ScanRequest). Several keys at
// once, each one log entry applied atomically (store_multi.cc): multi (a
// transaction: Command::value holds a Transaction, its commands run one
// after another, all or none), rename and renamenx (`key` to `value`, with
// its deadline), flushall (every key), and watch (reads the store's version,
// which a transaction's conditions compare with; see Transaction).
// type (TYPE, EXISTS, TOUCH): ok = the key exists, value "string",
// "hash" or "list". Hashes (store_hashes.cc; a key holds a string, a hash
// or a list, only one): hset (HSET, HMSET: `value` the pairs, encode_fields), hsetnx
// (`expected` the field, `value` its value), hget (HGET, HEXISTS, HSTRLEN:
// `expected` the field), hmget (`value` the fields, encode_names), hdel
// (`value` the fields), hlen, hgetall (HGETALL, HKEYS, HVALS), hincrby and
// hincrbyfloat (`expected` the field, `value` the increment). Lists
// (store_lists.cc): lpush, rpush, lpushx, rpushx (`value` the elements,
// encode_names), lpop, rpop (`expected` the count in decimal, or empty for
// none), llen, lrange and ltrim (`expected` the start, `value` the stop, in
// decimal), lindex (`expected` the index), lset (`expected` the index,
// `value` the element), lrem (`expected` the count, `value` the element),
// linsert (`expected` "before" or "after", `value` the pivot and the
// element, encode_names) and lpos (`value` the element, `expected` the
// rank, the count ("" for none) and the maxlen, encode_names); lmove, on
// two keys, run on copies of them as rename is (store_multi.cc): `key` the
// source, `value` the destination, `expected` the ends, "LL", "LR", "RL"
// or "RR" (RPOPLPUSH: "RL"); lmpop (LMPOP), on several keys as zmpop is
// (zset.h): `key` the first key, `value` the keys, `expected` "left" or
// "right" and the count, encode_names. hrandfield (HRANDFIELD): `value`
// the seed the gateway stamped, `expected` the count ("" for none) and "1"
// for WITHVALUES, encode_names. hscan and sscan (HSCAN, SSCAN: `value` a
// ScanRequest, its type "novalues" for HSCAN's NOVALUES, `expected` the
// MATCH pattern) page through one hash's fields or one set's members as
// scan pages through the keys.
// Sets (store_sets.cc): sadd, srem, smismember (`value` the members,
// encode_names), scard, sismember (`expected` the member), smembers, spop
// and srandmember (`expected` the count in decimal, or empty for none;
// `value` the seed the gateway stamped, in decimal: store_sets.cc), and the
// commands on several keys, each run on copies of its keys as rename is
// (store_multi.cc): smove (`key` the source, `value` the destination,
// `expected` the member), sinter, sunion, sdiff and sintercard (`value` the
// keys, encode_names, `key` the first of them; sintercard: `expected` the
// limit, 0 none) and sinterstore, sunionstore, sdiffstore (`key` the
// destination, `value` the source keys).
// Sorted sets: zadd ... zrandmember, their arguments as zset.h says.
enum class Op : uint8_t {
  kNoop,
  kPut,
  kGet,
  kDelete,
  kCas,
  kIncrBy,
  kAppend,
  kSetNx,
  kGetSet,
  kGetDel,
  kSetXx,
  kExpire,
  kTtl,
  kGetEx,
  kSweep,
  kMulti,
  kRename,
  kRenameNx,
  kFlushAll,
  kWatch,
  kDbSize,
  kKeys,
  kScan,
  kIncrByFloat,
  kSetRange,
  kType,
  kHSet,
  kHSetNx,
  kHGet,
  kHMGet,
  kHDel,
  kHLen,
  kHGetAll,
  kHIncrBy,
  kHIncrByFloat,
  kLPush,
  kRPush,
  kLPushX,
  kRPushX,
  kLPop,
  kRPop,
  kLLen,
  kLRange,
  kLIndex,
  kLSet,
  kLRem,
  kLTrim,
  kSAdd,
  kSRem,
  kSCard,
  kSIsMember,
  kSMIsMember,
  kSMembers,
  kSPop,
  kSRandMember,
  kSMove,
  kSInter,
  kSUnion,
  kSDiff,
  kSInterCard,
  kSInterStore,
  kSUnionStore,
  kSDiffStore,
  kLInsert,
  kLPos,
  kLMove,
  kHScan,
  kSScan,
  kZAdd,
  kZRem,
  kZScore,
  kZCard,
  kZCount,
  kZRank,
  kZRange,
  kZRemRange,
  kZPop,
  kZRangeStore,
  kZCombine,
  kZCombineStore,
  kZScan,
  kZMPop,
  kZRandMember,
  kLMPop,
  kHRandField,
};
inline constexpr Op kLastOp = Op::kHRandField;

// What a command does with its key's deadline (Command::ttl). Only put,
// setnx, setxx, getset, expire and getex look at it; cas clears the
// deadline of the key it swaps (it is a conditional SET), incrby and append
// keep it (as Redis's INCR and APPEND do), getdel and delete remove it with
// the key.
enum class Ttl : uint8_t {
  kClear,  // none from now on: SET, GETSET; expire: PERSIST; getex: PERSIST
  kKeep,   // as it was: SET ... KEEPTTL, GETEX without options
  kSet,    // Command::deadline_ms (at or before now_ms: the key is removed)
};
inline constexpr Ttl kLastTtl = Ttl::kSet;
// Conditions of an expire with Ttl::kSet (Command::ttl_if, bits; EXPIRE's
// NX, XX, GT, LT). A key without a deadline counts as one later than any.
inline constexpr uint8_t kIfNoDeadline = 1;  // NX: only a key without one
inline constexpr uint8_t kIfDeadline = 2;    // XX: only a key with one
inline constexpr uint8_t kIfLater = 4;       // GT: only a later one
inline constexpr uint8_t kIfEarlier = 8;     // LT: only an earlier one
inline constexpr uint8_t kAllTtlIf = 15;

// A sweep removes at most this many keys, and stops before a key that would
// take the keys it removed past kSweepBytes (it always takes its first):
// its result lists them (sweep_result) and stays small.
inline constexpr size_t kSweepKeys = 64;
inline constexpr size_t kSweepBytes = 8 * 1024;

const char* op_name(Op op);

// How many operations one client may have outstanding at once (client.h's
// window): the store remembers the results of each client's last
// kClientWindow operations, so that any retry it can still be waiting for
// is answered with its first result.
inline constexpr uint64_t kClientWindow = 256;

// One client operation. (client, seq) names it uniquely: a client numbers its
// operations 1, 2, 3, ... and has at most kClientWindow of them outstanding,
// so a retry of seq carries the same (client, seq).
struct Command {
  Op op = Op::kNoop;
  uint64_t client = 0;
  uint64_t seq = 0;
  std::string key;
  std::string value;     // put: the value; cas: the new value
  std::string expected;  // cas: the value the key must hold for the swap
  // The wall-clock time (ms since the epoch) its maker stamped it with: the
  // "now" every expiry decision of this command is made against.
  int64_t now_ms = 0;
  // Ttl::kSet: the absolute deadline (ms since the epoch); a relative expiry
  // (EX, PX, EXPIRE) is now_ms plus it, added by the command's maker.
  int64_t deadline_ms = 0;
  Ttl ttl = Ttl::kClear;
  uint8_t ttl_if = 0;  // expire: kIfNoDeadline | kIfDeadline | kIfLater | kIfEarlier

  bool is_noop() const { return op == Op::kNoop; }
  friend bool operator==(const Command&, const Command&) = default;
};

Command noop_command();

// The wall clock in ms since the epoch: what a command's maker stamps into
// Command::now_ms (the RESP gateway; never a replica applying the log).
int64_t wall_clock_ms();

// What an operation returned. put: ok. get: ok = the key exists, value its
// value. delete: ok = the key existed. cas: ok = the key held `expected` and
// now holds `value`. incrby: ok = the key held a decimal integer (or none:
// 0) and the sum fits 64 bits, value the new number; else nothing changed
// and value is "overflow" or "not an integer". append: ok, value the new
// length. setnx: ok = the key was absent and now holds `value`, else value
// what it holds. getset, getdel and setxx: ok = the key existed (setxx: and
// now holds `value`), value what it held. expire: ok = the key exists and
// its deadline was set (or, kClear, it had one and has none now); a
// deadline at or before now_ms removes the key. ttl: ok = the key exists,
// value its deadline in decimal ms, or "-1" for none. getex: as get. sweep:
// ok, value the keys it removed and the earliest deadline left
// (sweep_result). multi: ok = its conditions held and every command ran,
// value their results (encode_results); not ok with an empty value: a
// condition failed (EXEC's null reply, MSETNX's 0) and nothing changed; not
// ok with a value: that error text, nothing changed. rename, renamenx: ok =
// moved; else value "no such key" (the source is absent) or empty (renamenx:
// the target exists). flushall: ok, value the number of keys removed. watch:
// ok, value the store's version (decimal) once `key` is as at now_ms.
// incrbyfloat: ok = the key held a decimal number (parse_float; none: 0)
// and the sum is finite, value the sum (format_float); else nothing changed
// and value is "not a float" or "nan or infinity". setrange: ok, value the
// new length (an empty `value` changes nothing and makes no key); not ok
// with "offset is out of range" for a negative offset.
// dbsize: ok, value the number of live keys (decimal). keys: ok, value
// the live keys matching `key` (encode_keys, cursor 0); not ok with an
// error text if they would take more than max_result_bytes. scan: ok,
// value a page (encode_keys: the next cursor, and the keys).
// type: ok = the key exists, value "string", "hash", "list", "set" or "zset". hset: ok, value
// the number of fields added (decimal). hsetnx: ok = the field was absent
// and is now set. hget: ok = the field exists, value its value. hmget: ok,
// value one Result per field (encode_results: ok = present, its value).
// hdel: ok = some field was removed, value how many (decimal); the key goes
// with its last field. hlen: ok, value the number of fields (0: absent).
// hgetall: ok, value the fields and values in field order (encode_fields).
// hincrby, hincrbyfloat: as incrby and incrbyfloat on the field's value (a
// field absent counts as 0), the same error values.
// lpush, rpush: ok, value the new length (decimal); lpushx, rpushx: the
// same, or not ok with "0" if the key is absent. lpop, rpop without a
// count: ok = the key exists, value the element; with one: ok = the key
// exists, value the elements (encode_names, at most count). llen: ok, value
// the length (0: absent). lrange: ok, value the elements (encode_names;
// indices as Redis's, negative from the end). lindex: ok = the index is in
// the list, value its element. lset: ok, or not ok with "ERR no such key"
// or "ERR index out of range". lrem: ok = some were removed, value how many
// (count > 0 from the head, < 0 from the tail, 0 all). ltrim: ok = some
// element was removed. linsert: ok, value the new length; not ok with "-1"
// (no pivot) or "0" (no key). lpos without a count: ok = found, value the
// index (decimal); with one: ok, value the indices (encode_names of
// decimals; none: empty), as Redis's LPOS with its RANK, COUNT (0: all)
// and MAXLEN (0: the whole list). lmove: ok = the source exists, value the
// element moved (a source equal to the destination: rotated); the source
// absent: not ok, empty, whatever the destination holds; either holding
// another type: kWrongType. A list's last element goes with its key.
// lmpop: ok, value the key it popped from and the elements (encode_names),
// from the first of its keys that exists (kWrongType if that one is not a
// list); not ok and empty if none exists. hrandfield: as srandmember on
// the fields (with a count >= 0 distinct ones in field order, < 0 with
// repeats), each followed by its value with WITHVALUES.
// hscan, sscan: ok, value a page (encode_keys: the next cursor, and the
// fields and their values, or the members, matching the pattern), the
// cursor in the order of key_hash of the field or member, as scan's (an
// absent key: cursor 0, nothing).
// sadd: ok, value the number of members added (decimal). srem: ok = some
// were removed, value how many. scard: ok, value the number of members (0:
// absent). sismember: ok = a member. smismember: ok, value one byte per
// member named, '1' a member, '0' not. smembers: ok, value the members in
// byte order (encode_names). spop, srandmember without a count: ok = the
// key exists, value the member chosen; with one: ok = the key exists, value
// the members (encode_names; spop and a count >= 0: distinct, at most
// count, in byte order; srandmember with a count < 0: |count| of them in
// the order chosen, a member possibly more than once). smove: ok = the
// member was in the source and is now in the destination (a source equal
// to the destination: ok = a member, nothing changes). sinter, sunion,
// sdiff: ok, value the members in byte order (an absent key is an empty
// set). sintercard: ok, value the size of the intersection, at most the
// limit. sinterstore, sunionstore, sdiffstore: ok, value the size of the
// result, which replaces whatever the destination held (empty: the
// destination is removed). A set's last member goes with its key; a
// command on several keys answers kWrongType if any of its keys (but a
// store's destination) holds another type.
// The sorted-set commands: as zset.h says.
// Any command but put,
// delete, expire, ttl, type, rename and the keyspace's on a key of the other
// type: not ok, value kWrongType, nothing changed (setnx: kWrongType too,
// as the key exists; setxx with `expected` "get", as SET XX GET, too; a
// plain setxx, as SET XX, replaces the hash). The same for a list and a set.
// refused: a write that
// would have taken the store past its maxmemory (StoreOptions) and changed
// nothing (ok false); Redis's OOM error.
// Result::value of a command refused (Result::refused) because the value it
// would make is longer than one reply may carry (StoreOptions::max_result_bytes;
// an APPEND past it), not for maxmemory: Redis's "string exceeds maximum
// allowed size".
inline constexpr const char* kTooLarge = "string exceeds maximum allowed size";
// The start of Result::value (ok false) of a command whose answer would
// be longer than one reply may carry (StoreOptions::max_result_bytes): a
// read of a whole big hash, list, set or sorted set (LRANGE 0 -1 ...),
// which changed nothing, or a pop with a count that would answer as much,
// refused before it ran (long_reply_error). A gateway answers it as the
// error it is, whatever the command.
inline constexpr const char* kLongReply = "ERR the reply would take ";
std::string long_reply_error(uint64_t max_result_bytes);
// Result::value of a command on a key of the other type (not ok).
inline constexpr const char* kWrongType =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

struct Result {
  bool ok = false;
  std::string value;
  bool refused = false;
  friend bool operator==(const Result&, const Result&) = default;
};

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

// What a sweep removed (its Result::value, parsed): the keys, in the order
// removed (earliest deadline first), and the earliest deadline of a key
// still holding one (0: none left), from which the sweeper times the next.
struct Swept {
  std::vector<std::string> keys;
  int64_t next_deadline_ms = 0;
};
std::string sweep_result(const Swept& s);
bool parse_sweep_result(std::string_view value, Swept* out);

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

// The body of an Op::kMulti command (its Command::value), as the gateway
// makes it for EXEC, MSET and MSETNX. Its commands run one after another, as
// one log entry: all of them, or none (nothing changes when a condition
// fails, when the whole would take the store past maxmemory, or when the
// results would pass max_result_bytes). Each takes the transaction's
// now_ms; client and seq are the transaction's. A command may be any key
// command but multi, sweep and watch, and no read of the whole keyspace
// (dbsize, keys, scan).
//
// Conditions. kAbsent: `key` holds no value (MSETNX). kUnchanged: nothing
// modified `key` since the watch command `watch_seq` of this transaction's
// client (WATCH) read the store's version. A command modifies a key when it
// writes it (put, getset, append, and the others that report ok: cas,
// incrby, setnx, setxx, getdel, delete, expire, getex with an expiry
// option, rename's two keys), when it removes it because its deadline
// passed (lazy expiry, a sweep), and flushall modifies every key, present
// or not. A key whose deadline passes between the watch and the
// transaction's stamp counts as modified too, removed or not (Redis 6.0.9
// and later abort such an EXEC). Every replica decides alike: versions are
// part of the replicated state. Two cases decide conservatively (the
// transaction fails although Redis's would have run; a client retries it):
// the watch's result is no longer kept (more than kClientWindow commands of
// its client came between), and an absent key removed so long ago that its
// tombstone was dropped (Store keeps the last kTombstoneBytes of them).
struct TxCondition {
  enum Kind : uint8_t { kUnchanged = 0, kAbsent = 1 };
  Kind kind = kUnchanged;
  std::string key;
  uint64_t watch_seq = 0;
  friend bool operator==(const TxCondition&, const TxCondition&) = default;
};
struct Transaction {
  std::vector<TxCondition> conditions;
  std::vector<Command> cmds;
};
std::string encode_transaction(const Transaction& t);
// False if `bytes` are not a whole transaction, or hold a command that
// cannot be in one.
bool decode_transaction(std::string_view bytes, Transaction* out);
// A transaction's results, one per command (Result::value of a multi).
std::string encode_results(const std::vector<Result>& results);
bool decode_results(std::string_view bytes, std::vector<Result>* out);
// Whether `op` may be one of a transaction's commands.
bool transaction_may_hold(Op op);

// A hash's fields and values as hset carries them and hgetall answers them
// (a u32 count, then each field and its value as wire.h strings), and a
// list of fields as hmget and hdel carry them (a u32 count, each a string).
// decode_*: false if `bytes` are not exactly that.
using FieldValues = std::vector<std::pair<std::string, std::string>>;
std::string encode_fields(const FieldValues& pairs);
bool decode_fields(std::string_view bytes, FieldValues* out);
std::string encode_names(const std::vector<std::string>& names);
bool decode_names(std::string_view bytes, std::vector<std::string>* out);
// What an item's value takes in a reply: a string's bytes, a hash's
// encode_fields (4 bytes, and 8 bytes more than its field and value each),
// a list's or a set's encode_names (4 bytes, and 4 more than each
// element or member), or a sorted set's as ZRANGE 0 -1 WITHSCORES answers
// it (4 bytes, and 8 more than each member and its score's text).
size_t item_bytes(const Item& e);
inline constexpr size_t kFieldEncoding = 8;
inline constexpr size_t kElementEncoding = 4;

// SCAN's request (Command::value, "cursor count type"; the pattern is
// Command::key, "*" for none) and the pages KEYS and SCAN answer.
struct ScanRequest {
  uint64_t cursor = 0;
  uint64_t count = 10;
  std::string
      type;  // empty: any; "string", "hash", "list", "set", "zset": keys of that type; else none
};
std::string encode_scan_request(const ScanRequest& s);
bool decode_scan_request(std::string_view text, ScanRequest* out);
struct KeysPage {
  uint64_t cursor = 0;  // SCAN's next cursor (0: done)
  std::vector<std::string> keys;
};
std::string encode_keys(const KeysPage& p);
bool decode_keys(std::string_view bytes, KeysPage* out);
// SCAN's order: a 64-bit hash of the key, never 0 (a cursor of 0 ends).
uint64_t key_hash(std::string_view key);
// Redis's glob (stringmatchlen): * ? [abc] [^a] [a-z], \x a literal x.
bool glob_match(std::string_view pattern, std::string_view text);
// A SCAN page holds at most this many bytes of key names (and always the
// first run of keys of one hash).
inline constexpr size_t kScanBytes = 16 * 1024;

// A well-mixed hash of a command's identity (client, seq).
uint64_t identity_hash(uint64_t client, uint64_t seq);

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
// ones, lmove and the sorted-set ones; execute_keys), and the keys they touch.
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
