// apps/kv/command.h: what sluice-kv's replicated log carries: the
// operations (Op) and what each does, a client's command (Command) and what
// it answers (Result), and the encodings of their bodies (transactions,
// hashes' fields, lists of names, scans, sweeps). store.h applies them.
//
// Thread safety: none (values, and pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
// two keys, applied atomically (store_multi.cc: in place, or on copies of
// them as rename is inside a transaction or near maxmemory): `key` the
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
// (store_multi.cc; smove outside a transaction in place, as lmove): smove
// (`key` the source, `value` the destination,
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

// What a sweep removed (its Result::value, parsed): the keys, in the order
// removed (earliest deadline first), and the earliest deadline of a key
// still holding one (0: none left), from which the sweeper times the next.
struct Swept {
  std::vector<std::string> keys;
  int64_t next_deadline_ms = 0;
};
std::string sweep_result(const Swept& s);
bool parse_sweep_result(std::string_view value, Swept* out);

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

// A client's identity (Command::client): its node id (where replies go) in
// the low 32 bits; above them the run on --data-dir (16 bits) and the
// incarnation of its process (16 bits: a RESP gateway started again by
// `sluice run --restarts` is a new client).
inline uint64_t client_identity(uint32_t id, uint32_t run, uint32_t incarnation) {
  return uint64_t{incarnation & 0xffff} << 48 | uint64_t{run & 0xffff} << 32 | id;
}
inline uint32_t client_node(uint64_t identity) { return static_cast<uint32_t>(identity); }
inline uint32_t client_run(uint64_t identity) { return (identity >> 32) & 0xffff; }
inline uint32_t client_incarnation(uint64_t identity) { return identity >> 48; }

}  // namespace kv
