// apps/kv/resp_gateway.h: the store's Redis-protocol (RESP2) front end. A
// client rank of `sluice-kv run --resp-port P` listens on TCP port P + its
// client index and turns each request of each connection into commands of
// one of its rank's closed-loop Clients (a connection keeps to one client,
// round robin over --clients-per-rank, so its commands go through the
// replicated log one at a time, in arrival order, while other connections'
// go side by side), and each completed command into the reply, in request
// order per connection:
//
//   PING [msg]            +PONG, or msg (answered here)
//   GET key               bulk value, or null
//   SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
//                         +OK, or null if NX/XX did not set; with GET the
//                         value replaced (NX GET: the value kept), or null
//   DEL key [key ...]     :number deleted
//   EXISTS key [key ...]  :number present
//   CAS key old new       :1 if key held old and now holds new, else :0
//                         (sluice-kv's compare-and-set, not a Redis command)
//   INCR, DECR key; INCRBY, DECRBY key n   :the new number (Redis's errors
//                         for a value that is not an integer, and overflow)
//   INCRBYFLOAT key n     bulk: the new number (store.h: IEEE double,
//                         printed in the fewest digits that read back)
//   APPEND key value      :the new length; SETRANGE key offset value: the
//                         same, zero bytes padding up to the offset
//   STRLEN key            :the value's length (0: absent)
//   SETNX key value       :1 if it was absent and is now set, else :0
//   GETSET key value      bulk old value, or null; GETDEL key: the same, deleting
//   MGET key [key ...]    an array of bulk values or nulls
//   TYPE key              +string, +hash, +list, +set, +zset or +none; GETRANGE (SUBSTR) key start
//   end: the
//                         bytes, offsets as Redis takes them; UNLINK: DEL
//   SETEX key s value, PSETEX key ms value    +OK (SET with EX, PX)
//   EXPIRE, PEXPIRE key time, EXPIREAT, PEXPIREAT key unix-time [NX|XX|GT|LT]
//                         :1 if set (a time passed removes the key), :0 if
//                         the key is absent or a condition failed
//   TTL, PTTL key         the time left (s rounded, ms), :-1 no expiry, :-2 absent
//   EXPIRETIME, PEXPIRETIME key   the deadline (unix s, ms), -1, -2 as TTL
//   PERSIST key           :1 if it had a deadline and has none now, else :0
//   GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]   GET, then sets the expiry
//   (Time: each command carries the gateway's wall clock in ms, stamped as
//   it is read, and relative times become deadlines from that stamp; the
//   store decides expiry against the stamp, never its own clock (store.h).
//   The gateway also sends sweeps, which remove expired keys that nobody
//   touches: see poll().)
//   (each a single log entry on one key, as linearizable as GET and SET;
//   DEL, EXISTS and MGET of several keys are one entry per key, not atomic
//   across their keys)
//   HSET key field value [field value ...]   :fields added; HMSET: +OK
//   HSETNX key field value   :1 if the field was absent and is now set
//   HGET key field        bulk value, or null; HMGET key field [field ...]:
//                         an array of bulk values or nulls (one entry)
//   HDEL key field [field ...]   :fields removed (the key goes with its last)
//   HEXISTS key field     :1 or 0; HSTRLEN key field: the value's length
//   HLEN key              :the number of fields (0: absent)
//   HGETALL, HKEYS, HVALS key    fields and values, fields, values: in byte
//                         order of the field (store_hashes.cc)
//   HINCRBY key field n, HINCRBYFLOAT key field n   as INCRBY, INCRBYFLOAT
//   HRANDFIELD key [count [WITHVALUES]]   bulk field or null; with a count:
//                         at most count distinct fields in field order (a
//                         count < 0: that many, with repeats, in the order
//                         chosen), each followed by its value with
//                         WITHVALUES (RESP3: each pair an array); chosen by
//                         every replica alike from a seed this gateway draws
//   (Each one log entry on one key (resp_hashes.cc). A string command on a
//   hash, or a hash command on a string: -WRONGTYPE, as Redis's; SET and
//   MSET replace a hash, MGET answers null for one.)
//   LPUSH, RPUSH key element [element ...]   :the new length; LPUSHX,
//                         RPUSHX: the same, :0 if the key is absent
//   LPOP, RPOP key [count]   bulk element or null; with a count: an array
//                         of at most count, or a null array if absent
//   LLEN key              :the length (0: absent)
//   LRANGE key start stop    the elements (indices as Redis's)
//   LINDEX key index      bulk element or null; LSET key index element: +OK,
//                         -ERR no such key, -ERR index out of range
//   LREM key count element   :elements removed; LTRIM key start stop: +OK
//   LINSERT key BEFORE|AFTER pivot element   :the new length, :-1 if no
//                         pivot, :0 if the key is absent
//   LPOS key element [RANK r] [COUNT n] [MAXLEN m]   :the index or null;
//                         with COUNT: an array of indices
//   LMOVE source destination LEFT|RIGHT LEFT|RIGHT   bulk element moved,
//                         or null; RPOPLPUSH source destination: RIGHT LEFT
//                         (one entry on both keys, as SMOVE)
//   LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT n]   the first key that
//                         exists and up to n elements popped from it, or a
//                         null array (one entry on all its keys)
//   BLPOP, BRPOP key [key ...] timeout; BLMOVE, BRPOPLPUSH; BLMPOP timeout
//                         numkeys ...; BZPOPMIN, BZPOPMAX; BZMPOP: Redis
//                         7.0's answers; the non-blocking form through the
//                         log, and a connection whose try found nothing
//                         parked until a write of one of its keys or its
//                         timeout (a null array; resp_blocking.cc)
//   (Each one log entry on one key, LMOVE and LMPOP on their keys
//   (resp_lists.cc); WRONGTYPE as for hashes; the key goes with its last
//   element.)
//   SADD, SREM key member [member ...]   :members added, removed
//   SCARD key             :the number of members (0: absent)
//   SISMEMBER key member  :1 or :0; SMISMEMBER key member [member ...]: an
//                         array of :1 and :0
//   SMEMBERS key          the members in byte order (RESP3: a set, ~)
//   SPOP key [count]      bulk member or null; with a count: at most count
//                         distinct members in byte order (RESP3: a set)
//   SRANDMEMBER key [count]  the same without removing them (an array in
//                         RESP3 too); a count < 0: that many, with
//                         repeats, in the order chosen
//   SMOVE source destination member   :1 if moved, else :0
//   SSCAN key cursor [MATCH p] [COUNT n]   the next cursor and a page of
//                         members; HSCAN key cursor [MATCH p] [COUNT n]
//                         [NOVALUES]: of fields and values (or fields)
//   SINTER, SUNION, SDIFF key [key ...]   the members in byte order (RESP3:
//                         a set); SINTERSTORE, SUNIONSTORE, SDIFFSTORE
//                         destination key [key ...]: :the size stored
//   SINTERCARD numkeys key [key ...] [LIMIT limit]   :the size, at most limit
//   (Each one log entry (resp_sets.cc); WRONGTYPE as for hashes; the key
//   goes with its last member. SPOP and SRANDMEMBER carry a seed this
//   gateway draws, from which every replica chooses the same members.)
//   ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...],
//   ZINCRBY, ZREM, ZSCORE, ZMSCORE, ZCARD, ZCOUNT, ZLEXCOUNT, ZRANK,
//   ZREVRANK, ZRANGE key min max [BYSCORE|BYLEX] [REV] [LIMIT o c]
//   [WITHSCORES] and ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX,
//   ZREVRANGEBYLEX, ZREVRANGE, ZRANGESTORE, ZPOPMIN, ZPOPMAX, ZMPOP,
//   ZRANDMEMBER, ZREMRANGEBYSCORE, ZREMRANGEBYRANK, ZREMRANGEBYLEX, ZUNION,
//   ZINTER, ZDIFF, ZINTERCARD, ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE, ZSCAN
//   (resp_zsets.cc, zset.h): Redis 7.0's answers and errors byte for byte,
//   scores printed as %.17g (RESP3: doubles); each one log entry.
//   MSET key value [key value ...]    +OK; MSETNX: :1 if every key was absent
//                         and is now set, else :0 (one entry: all or none)
//   RENAME, RENAMENX key newkey    +OK (:1), :0 if newkey exists (NX), or
//                         -ERR no such key; the deadline moves with the value
//   FLUSHALL, FLUSHDB [SYNC|ASYNC]    +OK (one entry removing every key)
//   DBSIZE                :the number of keys; KEYS pattern: an array of the
//                         keys (an error past --max-value-bytes of names:
//                         use SCAN); SCAN cursor [MATCH p] [COUNT n] [TYPE t]:
//                         the next cursor (0: done) and a page of keys;
//                         TOUCH key [key ...]: as EXISTS (each one entry)
//   MULTI, then commands (+QUEUED; one unknown or with a wrong number of
//   arguments is answered at once and makes EXEC answer -EXECABORT, one
//   with another error, a syntax error, answers it in EXEC's array, as
//   Redis 7.0's), EXEC (one log entry: an array of the commands' replies,
//   or a null array if a watched key was modified),
//   DISCARD; WATCH key [key ...] (one entry per key, reading the store's
//   version: store.h, Transaction), UNWATCH    (resp_transactions.cc)
//   ECHO, INFO [section], CONFIG GET pattern (CONFIG SET: an error),
//   COMMAND [COUNT|LIST|INFO|DOCS], CLIENT SETNAME/GETNAME/ID/SETINFO/INFO/LIST,
//   HELLO [2|3 [AUTH user pass] [SETNAME name]] (3: RESP3 replies from then on),
//   SELECT 0, QUIT      (answered here: resp_local.cc)
//   AUTH [default] password   (with --requirepass; without, AUTH default x
//                         is +OK as for Redis's default user; queued in
//                         MULTI, as HELLO is, and run with EXEC)
//   SHUTDOWN              only where enabled (GatewayOptions::shutdown)
//
// Safe defaults, as Redis's:
// - It listens on 127.0.0.1 unless GatewayOptions::bind says otherwise.
// - With a password (requirepass), a connection must AUTH before any other
//   command (-NOAUTH). Without one, in protected mode (the default), only
//   loopback clients are served; others get -DENIED and are closed.
// - A request that looks like HTTP (POST, Host:, or a request line such as
//   "GET / HTTP/1.1": a web page's cross-protocol POST) closes the
//   connection at once, unanswered, and is logged.
// - Error replies are one line: CR and LF in them become spaces.
// - Every buffer a client can fill has a limit: its query buffer (a bulk
//   string over max_bulk is refused from its header, before any of its
//   bytes is read; an unfinished request over query_buffer_limit closes the
//   connection), its replies (not read from while kMaxPendingReplies
//   requests are unanswered, and from again as soon as fewer are; unsent
//   replies past output_buffer_limit close it, as Redis's, those ready
//   behind one still waiting on the log among them), the number
//   of connections (maxclients: -ERR max number of clients reached), and all
//   clients' buffers together (maxmemory_clients: the client with the most
//   buffered is closed, as Redis's client eviction does).
// - Completed commands are not kept: each is answered and forgotten, or,
//   with a history file, written to it as it completes.
//
// Keys and values: a command's key and value(s) take at most
// GatewayOptions::max_entry_bytes in all (the job's flows are sized for
// such a command: flow_job.h); a longer one gets an error reply at once. A protocol error (resp.h:
// garbage, a bulk length over the limit, ...) gets an error reply and the connection is closed; the
// gateway and the store go on. SHUTDOWN stops the gateway: it answers +OK,
// takes no more requests, finishes what is in flight, and the job then ends
// as a workload's does, with rank 0's checks.
//
// Thread safety: one thread (the rank's worker loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client.h"

namespace kv {

// The default of GatewayOptions::max_entry_bytes (FlowJobOptions'
// max_entry_bytes, --max-value-bytes): a 64 KiB value with its key. (Every
// flow's segment holds one such command, and shared-memory rings are
// allocated whole: 512 KiB values take about 200 MB more per rank.)
inline constexpr size_t kDefaultMaxEntryBytes = 64 * 1024 + 1024;
// A connection is not read from while this many of its requests are
// unanswered (the log answers them whatever the client does, so reading
// resumes on its own). Its unsent replies are not a reason to stop reading:
// a client that writes a whole pipeline before it reads a reply (redis-py's
// pipelines) would never read them, and both ends would wait for ever.
// Redis reads on and closes a client past its output buffer limit, and so
// does the gateway (GatewayOptions::output_buffer_limit).
inline constexpr size_t kMaxPendingReplies = 4096;
// What a queued command or a watched key takes besides its bytes, as a
// transaction's body encodes it (store_multi.cc: about 23 bytes a
// command, 13 a condition) and the gateway keeps it (resp_transactions.cc).
inline constexpr size_t kQueuedOverhead = 32;
// The least time between two sweeps that found nothing more to do at once.
inline constexpr int64_t kSweepIntervalMs = 100;
// How long the gateway counts the store as full (Redis's "used memory >
// maxmemory", for the commands queued in MULTI) after the last write it
// saw refused for --maxmemory, unless a write of its own runs or a delete
// of its own frees memory first (another gateway's it does not see).
inline constexpr int64_t kFullForMs = 1000;

// Who may stop the job with SHUTDOWN.
enum class ShutdownFrom : uint8_t { kNobody, kLocal, kAnyone };

struct GatewayOptions {
  std::string bind = "127.0.0.1";                 // a numeric IPv4 or IPv6 address
  uint16_t port = 0;                              // 0: a port the kernel picks
  std::string requirepass;                        // empty: no password
  bool protected_mode = true;                     // no password: loopback clients only
  ShutdownFrom shutdown = ShutdownFrom::kNobody;  // kLocal: loopback clients only
  size_t maxclients = 10000;
  size_t max_entry_bytes = kDefaultMaxEntryBytes;  // a command's key and values
  size_t max_bulk = kDefaultMaxEntryBytes;         // one argument's bytes
  size_t query_buffer_limit = size_t{1} << 20;     // an unfinished request's bytes
  size_t output_buffer_limit = size_t{32} << 20;   // unsent replies: closed past it
  size_t maxmemory_clients = size_t{64} << 20;     // all clients' buffers; 0: no limit
  size_t max_blocked = 1024;  // connections parked by a blocking command (BLPOP ...)
  // Where each completed command goes, as a JSON line (history.h); empty:
  // nowhere.
  std::string history;
};

class RespGateway {
 public:
  // Listens on options.bind and options.port. Throws std::runtime_error
  // naming the address, the port and why if it cannot (a port in use, an
  // address not of this host), or if the history file cannot be opened.
  explicit RespGateway(GatewayOptions options);
  ~RespGateway();
  RespGateway(const RespGateway&) = delete;
  RespGateway& operator=(const RespGateway&) = delete;

  uint16_t port() const { return port_; }

  // Accepts connections, reads and parses requests, hands commands to the
  // connections' clients, and writes the replies of completed ones. Never
  // blocks. Active expiry: once a deadline it knows of (one it sent, or
  // the earliest one a sweep found left in the store) has passed, it sends
  // a sweep (Op::kSweep, one log entry that removes up to kSweepKeys expired
  // keys) through its first client, one at a time and at most one per
  // kSweepIntervalMs, unless the last one found more already expired.
  // Returns how much it did (0: nothing), for the worker's idle().
  size_t poll(ClientGroup& clients);
  // Sleeps in poll(2) on the sockets for at most `timeout` (call it when the
  // client has nothing in flight, instead of the worker's idle()).
  void wait(std::chrono::milliseconds timeout);

  // SHUTDOWN was received (here, or stop() was called): no more requests
  // are taken.
  bool stopping() const { return stopping_; }
  // Stops as SHUTDOWN does: another gateway of the job received it, and the
  // whole job ends. What is in flight is still answered.
  void stop() { stopping_ = true; }
  // Stopping, and every reply written or its connection gone.
  bool finished() const;

  struct Stats {
    uint64_t connections = 0, requests = 0, protocol_errors = 0;
    uint64_t refused_clients = 0;  // maxclients, protected mode
    uint64_t http_requests = 0;    // connections closed for looking like HTTP
    uint64_t evicted = 0;          // closed for a buffer over its limit
    uint64_t auth_failures = 0;
    uint64_t sweeps = 0;        // sweep entries completed
    uint64_t expired_keys = 0;  // keys this gateway's sweeps removed
  };
  const Stats& stats() const { return stats_; }
  // Writes what the history file still buffers; false (and *why) if any
  // line could not be written.
  bool finish_history(std::string* why);

 private:
  // How a request's answer is made from its commands' results: kNumber an
  // integer the store computed (INCR..., APPEND), kLength a value's length
  // (STRLEN), kFlag 1 or 0 (SETNX), kOld a value replaced or removed
  // (GETSET, GETDEL, SET ... [XX] GET), kOldUnlessSet the value an NX kept
  // (SET ... NX GET: null if it set), kSetIf +OK or null (SET ... NX|XX),
  // kType +string or +none (TYPE), kRange a GETRANGE's bytes, kArray one
  // bulk per key (MGET), kTtl a time left or a deadline (TTL, PTTL,
  // EXPIRETIME, PEXPIRETIME: Reply::ttl_ms, ttl_abs), kSweep this gateway's
  // own sweep (no connection's).
  enum class Kind : uint8_t {
    kLocal,
    kGet,
    kSet,
    kCount,
    kCas,
    kNumber,
    kLength,
    kFlag,
    kOld,
    kOldUnlessSet,
    kSetIf,
    kType,
    kRange,
    kArray,
    kTtl,
    kSweep,
    kExec,      // EXEC: Reply::subs, one per queued command
    kMset,      // MSET: +OK (FLUSHALL, HMSET too)
    kMsetNx,    // MSETNX: 1 or 0 (HSETNX, HEXISTS too)
    kRename,    // RENAME: +OK, or no such key
    kRenameNx,  // RENAMENX: 1 or 0, or no such key
    kWatch,     // WATCH: +OK once every key's watch is in the log
    kDbSize,    // DBSIZE: the store's decimal as an integer
    kKeys,      // KEYS: an array of the keys
    kScan,      // SCAN: the next cursor and an array of keys
    kFloat,     // INCRBYFLOAT: the new number as a bulk string
    kSetRange,  // SETRANGE: the new length
    // The hash commands (resp_hashes.cc, fill_hash).
    // (HGET answers as kGet, HSTRLEN as kLength, HMSET as kMset, HSETNX
    // and HEXISTS as kMsetNx.)
    kHashCount,        // HSET, HDEL, HLEN: the store's decimal as an integer
    kHashArray,        // HMGET: a bulk or null per field
    kHashAll,          // HGETALL: fields and values (RESP3: a map)
    kHashKeys,         // HKEYS
    kHashVals,         // HVALS
    kHashInt,          // HINCRBY: the new number
    kHashFloat,        // HINCRBYFLOAT: the new number as a bulk string
    kHashRandom,       // HRANDFIELD with a count: the fields
    kHashRandomPairs,  // ... and WITHVALUES: fields and values (RESP3: each pair an array)
    // The list commands (resp_lists.cc, fill_list). (LPUSH, RPUSH, their X
    // forms, LLEN and LREM answer as kHashCount; LPOP and RPOP without a
    // count and LINDEX as kGet.)
    kListArray,   // LRANGE, LPOP/RPOP with a count: the elements (absent: a null array)
    kListOk,      // LSET, LTRIM: +OK, or the store's error
    kListPos,     // LPOS without COUNT: an integer, or null
    kListPosAll,  // LPOS with COUNT: an array of integers
    kListMPop,    // LMPOP: the key and an array of its elements, or a null array
    // The set commands (resp_sets.cc, fill_set). (SISMEMBER and SMOVE
    // answer as kMsetNx; SPOP and SRANDMEMBER without a count as kGet.)
    kSetCount,    // SADD, SREM, SCARD, the STORE forms, SINTERCARD: an integer, or the error
    kSetMembers,  // SMEMBERS, SINTER, SUNION, SDIFF, SPOP with a count (RESP3: a set)
    kSetArray,    // SRANDMEMBER with a count: the members (an array in RESP3 too)
    kSetFlags,    // SMISMEMBER: :1 or :0 per member
    // The sorted-set commands (resp_zsets.cc, fill_zset).
    kZInt,       // ZADD, ZREM, ZCARD, ZCOUNT, ZREMRANGEBY*, ZRANGESTORE: an integer
    kZDouble,    // ZINCRBY, ZADD INCR: a score (RESP3: a double), or null
    kZDoubleOf,  // ZSCORE: the one score of the store's list, or null
    kZDoubles,   // ZMSCORE: a score or null per member
    kZRank,      // ZRANK, ZREVRANK: an integer, or null
    kZArray,     // the ZRANGE family, ZPOPMIN, ZPOPMAX: members (Reply::zscores)
    kZMPop,      // ZMPOP: the key and its [member, score] pairs, or a null array
    // The blocking commands (resp_blocking.cc), from their non-blocking
    // forms' results. (BLMOVE and BRPOPLPUSH answer as kGet, BLMPOP as
    // kListMPop, BZMPOP as kZMPop.)
    kBlockPop,   // BLPOP, BRPOP: [key, element] (fill_list), or a null array
    kZBlockPop,  // BZPOPMIN, BZPOPMAX: [key, member, score] (fill_zset), or a null array
    // GETEX with a time Redis refuses (0, negative, not a number): a read,
    // answered null for an absent key and Reply::error for a string.
    kBadTime,
    // AUTH, HELLO or CLIENT queued in MULTI (Reply::args): run when EXEC
    // is, in the transaction's order, as Redis runs them
    // (transaction_command).
    kDeferred,
  };
  struct Conn;
  struct Reply {  // one request's answer, in request order
    Kind kind = Kind::kLocal;
    std::string text;                               // once ready
    uint32_t waiting = 0;                           // commands still in flight
    int64_t count = 0;                              // kCount: how many succeeded
    uint64_t first_seq = 0;                         // the client seq of its first command
    int64_t range_start = 0, range_end = 0;         // kRange: GETRANGE's offsets
    bool ttl_ms = false, ttl_abs = false;           // kTtl: in ms, a deadline
    std::vector<std::optional<std::string>> items;  // kArray: each key's value, in order
    bool ready = false;
    bool resp3 = false;  // the connection spoke RESP3 when it asked (HELLO 3)
    // kZArray: members and scores alternate; znested: in RESP3, each pair
    // is an array of its own (WITHSCORES, a ZPOPMIN with a count).
    bool zscores = false, znested = false;
    // A blocking command's (not one queued in MULTI): its connection's id
    // (Conn::id), whose entry in blocked_ tries it again until it finds
    // something or times out.
    uint64_t blocked_conn = 0;
    // LMPOP, BLPOP, BRPOP, BLMPOP, BZPOPMIN, BZPOPMAX and BZMPOP of one key
    // go into the log as a plain pop of it (LPOP, RPOP, ZPOP with a count:
    // one key's command, which copies nothing, where the commands on
    // several keys run on copies of them): that key, which their answer
    // names first.
    std::string pop_key;
    // Answers at once, without the log (a refusal, a local command): true.
    bool answer(std::string t) {
      text = std::move(t);
      ready = true;
      return true;
    }
    // sluice-kv's own refusal (a size past its limits, a command it does
    // not queue), not an error Redis would give: inside MULTI it makes EXEC
    // abort, where a command's own error (a syntax error, a bad number) is
    // queued as its reply (transaction_command).
    bool refused_here = false;
    bool refuse(std::string t) {
      refused_here = true;
      return answer(std::move(t));
    }
    // kExec: each queued command's answer, filled from its results (its
    // `waiting` commands, from first_seq, the position in the transaction).
    std::vector<Reply> subs;
    // kDeferred: the command and its arguments.
    std::vector<std::string> args;
    // kBadTime: the error reply.
    std::string error;
    // The connection it answers (set once handle() made it; none for a
    // sweep's or a queued command's), and what of it counts in the
    // connection's Conn::finished: its text once ready (count_finished()),
    // its values while it is assembled (count_assembled()).
    Conn* conn = nullptr;
    size_t counted = 0;
  };
  // A connection's MULTI: the commands queued so far, as one transaction's.
  struct Queue {
    bool open = false;
    bool failed = false;         // a command was refused when queued: EXECABORT
    std::vector<Command> cmds;   // every queued command's commands, in order
    std::vector<Reply> replies;  // each queued command's answer to be
    // What the queued commands and the connection's watches take (their
    // keys and values, and kQueuedOverhead each): at most max_entry_bytes,
    // what one entry may carry (a command past it is refused, and EXEC
    // aborts). Counted in the connection's buffers (maxmemory_clients).
    size_t bytes = 0;
    // The answers already made of queued commands (PING, ECHO, an error):
    // counted in the connection's buffers too, not in `bytes` (EXEC's
    // entry does not carry them).
    size_t answered = 0;
  };
  struct Conn {
    int fd = -1;
    bool loopback = false;                // the peer's address is a loopback one
    std::string peer;                     // the peer's address, "host:port", for the log
    bool authenticated = false;           // AUTH passed, or no password is set
    uint64_t id = 0;                      // CLIENT ID: the connection's number
    bool resp3 = false;                   // HELLO 3: replies in RESP3 (nulls and maps differ)
    std::string name, lib_name, lib_ver;  // CLIENT SETNAME, CLIENT SETINFO
    std::string in, out;
    std::deque<Reply> replies;  // (a deque keeps each Reply in place: inflight points at it)
    // The text of its replies that are ready but wait in `replies` behind
    // one that is not, and the values held by those being assembled
    // (Reply::counted each): unsent replies as much as `out`, for
    // output_buffer_limit and maxmemory_clients.
    size_t finished = 0;
    size_t accounted = 0;   // its buffered() as counted in buffered_
    bool closing = false;   // close once `out` is written (QUIT, a protocol error)
    bool gone = false;      // the peer closed or failed: replies are dropped
    bool readable = false;  // epoll said so, and it has not been read dry since
    bool writable = true;   // no send has found its buffer full since epoll said so
    uint32_t watched = 0;   // the epoll events registered for it
    Queue queue;            // MULTI ... EXEC
    bool queuing = false;   // the command being handled goes into `queue`
    // WATCH: each key and the client seq of its watch entry (EXEC's
    // conditions).
    std::vector<std::pair<std::string, uint64_t>> watches;
    size_t watched_bytes = 0;  // their keys and kQueuedOverhead each
    // `in` holds requests not parsed yet: the parse stopped at
    // kMaxPendingReplies or a blocking command, not at an unfinished
    // request (read() parses them once it may, with or without new bytes).
    bool unparsed = false;
    // An EXEC with AUTH, HELLO or CLIENT queued waits on the log: nothing after it
    // is parsed until they have run (fill_exec), as they change how the
    // connection's next commands are taken and answered.
    bool exec_pending = false;
  };
  // One client's commands in flight, in seq order from `first`: the reply
  // each goes into (nullptr once answered).
  struct InFlight {
    uint64_t first = 1;
    std::deque<Reply*> replies;
  };

  // Not read from (kMaxPendingReplies, or an EXEC with AUTH, HELLO or
  // CLIENT in flight): until the log answers some.
  static bool held(const Conn& c) {
    return c.replies.size() > kMaxPendingReplies || c.exec_pending;
  }
  // What a connection's buffers take (its share of maxmemory_clients).
  static size_t buffered(const Conn& c) {
    return c.in.size() + c.out.size() + c.finished + c.queue.bytes + c.queue.answered +
           c.watched_bytes;
  }
  // `r` (in its connection's replies) has just become ready: its text
  // counts in the connection's buffers until write() moves it to `out`
  // (a gone connection's is dropped at once), in place of what counted of
  // it while it was assembled (count_assembled).
  static void count_finished(Reply& r) {
    if (r.conn == nullptr) return;
    r.conn->finished -= r.counted;
    r.counted = 0;
    if (r.conn->gone) {
      r.text.clear();
      r.text.shrink_to_fit();
      return;
    }
    r.counted = r.text.size();
    r.conn->finished += r.counted;
  }
  // `bytes` more of `r` held while it is assembled (an MGET's values, as
  // its keys' answers come): they count in the connection's buffers at
  // once (its output buffer limit, maxmemory_clients), not only when the
  // whole reply is made. False for a gone connection's (drop them).
  static bool count_assembled(Reply& r, size_t bytes) {
    if (r.conn == nullptr) return true;
    if (r.conn->gone) return false;
    r.counted += bytes;
    r.conn->finished += bytes;
    return true;
  }
  void watch(uint64_t id, Conn& c);
  size_t accept_all();
  // Refuses a new connection with `reply` and closes it.
  void refuse(int fd, const char* reply);
  size_t read(Conn& c, uint64_t id, ClientGroup& clients);
  void handle(Conn& c, std::vector<std::string>& args, Client& client, size_t index);
  // The command table (resp_commands.cc), after handle()'s checks: fills
  // `r` or sends its commands (submit).
  void dispatch(Conn& c, const std::string& name, std::vector<std::string>& args, Client& client,
                size_t index, Reply& r, int64_t now);
  // Sends `cmd` (stamped already) as one of `r`'s commands through
  // `client` (the connection's); while queuing, adds it to the connection's
  // queue instead. The client seq it got (0 while queuing).
  uint64_t submit(Conn& c, Client& client, size_t index, Reply& r, Command cmd);
  // resp_transactions.cc: MULTI, EXEC, DISCARD, WATCH, UNWATCH, and a
  // command while MULTI is open (queued); false if `name` is none of them
  // and no MULTI is open.
  // A command queued in MULTI is refused there (answered at once, and EXEC
  // aborts) for what Redis 7.0 checks before it queues: an unknown command,
  // a wrong number of arguments by the command's arity (COMMAND INFO's), a
  // subcommand of CLIENT, CONFIG or COMMAND that Redis lacks or with a
  // wrong number of arguments by its own arity, one not allowed in a
  // transaction (SHUTDOWN), and sluice-kv's own
  // refusals (Reply::refuse: a size past --max-value-bytes, a command it
  // does not queue). Any other error (a syntax error, a bad
  // option or number) is queued as that command's reply in EXEC's array,
  // and the others run. refused_in_multi (resp_local.cc, with the command
  // table): the first four's error reply (a subcommand of Redis's this
  // gateway does not run: its own refusal), or empty.
  bool transaction_command(Conn& c, const std::string& name, std::vector<std::string>& args,
                           Client& client, size_t index, Reply& r, int64_t now);
  static std::string refused_in_multi(const std::string& name,
                                      const std::vector<std::string>& args);
  // MSET, MSETNX, RENAME, RENAMENX, FLUSHALL, FLUSHDB, DBSIZE, KEYS, SCAN;
  // false if none.
  bool keys_command(Conn& c, const std::string& name, const std::vector<std::string>& args,
                    Client& client, size_t index, Reply& r, int64_t now);
  // resp_hashes.cc: HSET, HMSET, HSETNX, HGET, HMGET, HDEL, HEXISTS, HLEN,
  // HSTRLEN, HGETALL, HKEYS, HVALS, HINCRBY, HINCRBYFLOAT, HRANDFIELD;
  // false if none.
  // fill_hash: the answer of one of them (a hash Kind) from its result.
  bool hash_command(Conn& c, const std::string& name, const std::vector<std::string>& args,
                    Client& client, size_t index, Reply& r, int64_t now);
  void fill_hash(Reply& r, const Result& result);
  // resp_lists.cc: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LLEN, LRANGE,
  // LINDEX, LSET, LREM, LTRIM, LINSERT, LPOS, LMOVE, RPOPLPUSH, LMPOP; false
  // if none. fill_list: the answer of one
  // of them (a list Kind) from its result.
  bool list_command(Conn& c, const std::string& name, const std::vector<std::string>& args,
                    Client& client, size_t index, Reply& r, int64_t now);
  void fill_list(Reply& r, const Result& result);
  // resp_sets.cc: the set commands (SADD ... SINTERCARD); false if none.
  // fill_set: the answer of one of them (a set Kind) from its result.
  bool set_command(Conn& c, const std::string& name, const std::vector<std::string>& args,
                   Client& client, size_t index, Reply& r, int64_t now);
  void fill_set(Reply& r, const Result& result);
  // resp_zsets.cc: the sorted-set commands (ZADD ... ZRANGESTORE); false if
  // none. fill_zset: the answer of one of them (a sorted-set Kind).
  bool zset_command(Conn& c, const std::string& name, const std::vector<std::string>& args,
                    Client& client, size_t index, Reply& r, int64_t now);
  void fill_zset(Reply& r, const Result& result);
  // resp_blocking.cc: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN,
  // BZPOPMAX, BZMPOP; false if none. Sends the non-blocking form (LMPOP,
  // LMOVE, ZMPOP) and, outside MULTI, parks the connection (blocked_) if
  // it finds nothing.
  bool blocking_command(Conn& c, const std::string& name, const std::vector<std::string>& args,
                        Client& client, size_t index, Reply& r, int64_t now);
  // In complete(), for a blocking command's try (r.blocked_conn): true if
  // it found nothing and stays parked (r not filled), else its entry goes
  // and fill() answers.
  bool parked(Reply& r, const Result& result);
  // In complete(), for every completed command: wakes the blocked
  // connections waiting on a key it wrote.
  void wake(const Command& cmd, const Result& result);
  // In poll(): tries the woken and those due again, and answers those
  // whose time is up, whose connection is gone, or all when stopping.
  size_t retry_blocked(ClientGroup& clients);
  // A connection parked by a blocking command (blocked_, by Conn::id).
  struct Blocked {
    Conn* conn = nullptr;           // (in conns_, which keeps it while its reply waits)
    size_t index = 0;               // its client in the group
    Reply* reply = nullptr;         // in conn->replies
    Command cmd;                    // the non-blocking form, sent again for each try
    std::vector<std::string> keys;  // what it waits on
    int64_t deadline_ms = 0;        // 0: forever
    int64_t next_try_ms = 0;        // the next try if nothing wakes it before
    bool trying = false;            // a try is in the log
    bool woken = false;             // a key it waits on was written since its try
    bool parked = false;            // a try found nothing (it counts toward max_blocked)
  };
  void unblock(uint64_t id);
  // One command on the key args[1] as it goes into the log (a hash's or a
  // list's), answered here with an error if its key and encoded arguments
  // would take more than one entry may (--max-value-bytes). Always true.
  struct Keyed {
    Op op;
    std::string value;
    std::string expected;
    Kind kind;
  };
  bool submit_keyed(Conn& c, const std::string& name, const std::vector<std::string>& args,
                    Client& client, size_t index, Reply& r, int64_t now, Keyed k);
  // The answer of an increment (INCRBY, INCRBYFLOAT; `hash`: HINCRBY,
  // HINCRBYFLOAT, whose errors name the hash value): the new number, or
  // Redis's error for the store's error value.
  // SCAN's, HSCAN's and SSCAN's cursor (args[from]) and options after it
  // (resp_transactions.cc): MATCH into *pattern ("*" without), COUNT, and
  // `extra`: "TYPE" (SCAN: its value into q->type), "NOVALUES" (HSCAN: a
  // flag, "novalues" into q->type) or "" (none). The error reply, or empty.
  static std::string scan_options(const std::vector<std::string>& args, size_t from,
                                  const std::string& extra, ScanRequest* q, std::string* pattern);
  static std::string increment_reply(const Result& result, bool floating, bool hash);
  // Makes `r`'s answer from one of its commands' results (`cmd` the command,
  // with its seq the position among r's, from first_seq).
  void fill(Reply& r, const Command& cmd, const Result& result);
  void fill_exec(Reply& r, const Command& cmd, const Result& result);
  // AUTH's answer; marks the connection authenticated on success.
  std::string auth(Conn& c, const std::vector<std::string>& args);
  // The commands the gateway answers itself, without the store (resp_local.cc):
  // ECHO, INFO, CONFIG, COMMAND, CLIENT, HELLO. Sets *handled; the reply.
  std::string local_command(Conn& c, const std::string& name, const std::vector<std::string>& args,
                            bool* handled);
  std::string info(const std::vector<std::string>& args) const;
  std::string hello(Conn& c, const std::vector<std::string>& args);
  std::string client_command(Conn& c, const std::vector<std::string>& args);
  std::string config_command(const Conn& c, const std::vector<std::string>& args) const;
  void complete(ClientGroup& clients);
  void complete(Client& client, size_t index);
  // Whether the store counts as full for a command queued in MULTI now:
  // a write was refused for --maxmemory less than kFullForMs ago and
  // nothing of this gateway's ran or freed memory since. (Redis refuses
  // every command but EXEC, DISCARD and QUIT queued while its memory is
  // past maxmemory; sluice-kv's store never goes past it, and only the
  // replicas know how full it is.)
  bool store_full(int64_t now) const { return full_ms_ != 0 && now - full_ms_ < kFullForMs; }
  // In complete(): what `h` says of how full the store is.
  void note_fullness(const Completed& h);
  // Sends a sweep if one is due (see poll()).
  void maybe_sweep(ClientGroup& clients);
  // What a completed sweep found: the next one's time.
  void swept(const Completed& h);
  // A deadline a command will set: a sweep is due once it passes.
  void expect_deadline(int64_t deadline_ms) {
    if (next_sweep_ms_ == 0 || deadline_ms < next_sweep_ms_) next_sweep_ms_ = deadline_ms;
  }
  size_t write(Conn& c);
  // Closes `c` at once, replies dropped, with `why` in the log (rate-limited).
  void drop(Conn& c, const std::string& why);
  // Brings buffered_ up to date with `c`'s buffers.
  void account(Conn& c) {
    buffered_ = buffered_ - c.accounted + buffered(c);
    c.accounted = buffered(c);
  }
  // Closes the clients with the most buffered while all of them together
  // take more than maxmemory_clients.
  void evict();
  void log(const std::string& what);

  GatewayOptions options_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  uint16_t port_ = 0;
  bool stopping_ = false;
  uint64_t next_id_ = 0;
  std::map<uint64_t, Conn> conns_;
  std::vector<InFlight> inflight_;  // per client of the group
  size_t inflight_count_ = 0;       // commands in flight, all clients
  size_t buffered_ = 0;             // all connections' buffers (Conn::accounted)
  Stats stats_;
  std::FILE* history_ = nullptr;
  bool history_failed_ = false;
  // SPOP's, SRANDMEMBER's, ZRANDMEMBER's and HRANDFIELD's seeds, drawn here (splitmix64 from a
  // random start) and carried in the log entry: replicas choose from the seed.
  uint64_t seeds_ = 0;
  std::map<uint64_t, Blocked> blocked_;
  std::multimap<std::string, uint64_t, std::less<>> blocked_keys_;  // key -> Conn::id
  size_t parked_ = 0;  // blocked_ entries with parked set
  // When the last write refused for --maxmemory completed (0: none since a
  // write ran or a delete freed memory): see store_full().
  int64_t full_ms_ = 0;
  int64_t next_sweep_ms_ = 0;  // a sweep is due at this wall-clock time (0: none)
  int64_t last_sweep_ms_ = 0;  // when the last one was sent (0: send the next at once)
  bool sweeping_ = false;      // one is in flight (sweep_reply_)
  Reply sweep_reply_;
  std::chrono::steady_clock::time_point last_log_{};
  uint64_t unlogged_ = 0;  // events not logged since last_log_ (rate limit)
};

}  // namespace kv
