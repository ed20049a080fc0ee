// The RESP gateway's commands on several keys at once, each one log entry
// (store_multi.cc, store_keyspace.cc): MULTI/EXEC/DISCARD with
// WATCH/UNWATCH, MSET, MSETNX, RENAME, RENAMENX, FLUSHALL and FLUSHDB;
// DBSIZE, KEYS and SCAN; and EXEC's reply, made from its commands' results
// as each command's own reply would be.
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "resp.h"
#include "resp_gateway.h"

namespace kv {

namespace {

using resp::lower;
using resp::upper;
using resp::wrong_args;

Command stamped(Op op, std::string key, std::string value, int64_t now) {
  Command c;
  c.op = op;
  c.key = std::move(key);
  c.value = std::move(value);
  c.now_ms = now;
  return c;
}

// Commands MULTI does not queue: they act on the connection at once.
bool runs_at_once(const std::string& name) {
  return name == "EXEC" || name == "DISCARD" || name == "MULTI" || name == "WATCH" ||
         name == "QUIT";
}

}  // namespace

bool RespGateway::transaction_command(Conn& c, const std::string& name,
                                      std::vector<std::string>& args, Client& client, size_t index,
                                      Reply& r, int64_t now) {
  Queue& q = c.queue;
  // Refused before it is parsed, as Redis refuses (EXEC, MULTI and WATCH
  // too, with a wrong number of arguments): EXEC will discard the
  // transaction.
  if (q.open) {
    if (std::string refused = refused_in_multi(name, args); !refused.empty()) {
      if (name != "EXEC") {
        q.failed = true;
        return r.answer(std::move(refused));
      }
      // (An EXEC refused discards the transaction at once, saying why.)
      q = Queue{};
      c.watches.clear();
      c.watched_bytes = 0;
      const size_t from = refused.compare(0, 5, "-ERR ") == 0 ? 5 : 1;
      return r.answer(resp::error("EXECABORT Transaction discarded because of: " +
                                  refused.substr(from, refused.size() - from - 2)));
    }
    // With the store full, Redis refuses every command queued (queuing
    // takes memory) but EXEC, DISCARD and QUIT, MULTI and WATCH too.
    if (name != "EXEC" && name != "DISCARD" && name != "QUIT" && store_full(now)) {
      q.failed = true;
      return r.answer(resp::oom());
    }
  }
  if (q.open && !runs_at_once(name)) {
    if (name == "UNWATCH" && args.size() == 1 && q.replies.size() < kMaxPendingReplies) {
      // (Queued in Redis, where it changes nothing inside MULTI. Past the
      // queue's bound, refused below as any command.)
      q.answered += kQueuedOverhead;
      q.replies.emplace_back();
      q.replies.back().text = resp::simple("OK");
      q.replies.back().ready = true;
      return r.answer(resp::simple("QUEUED"));
    }
    // The command is made as it would be run, into the queue.
    const size_t before = q.cmds.size();
    size_t bytes = kQueuedOverhead;
    if (name == "AUTH" || name == "HELLO" || name == "CLIENT") {
      // (Queued whole, and run when EXEC is, as in Redis 7.0: a HELLO 3
      // makes the replies after it RESP3, in EXEC's array and after; a
      // CLIENT SETNAME discarded names nothing. Its subcommand was checked
      // above.)
      r.kind = Kind::kDeferred;
      r.args = args;
      for (const std::string& a : args) bytes += a.size();
    } else {
      c.queuing = true;
      dispatch(c, name, args, client, index, r, now);
      c.queuing = false;
    }
    const bool error = r.ready && !r.text.empty() && r.text[0] == '-';
    if (error) {
      // Its own error (a syntax error, a bad number): queued as its reply
      // in EXEC's array, where Redis answers it, unless it is one of
      // sluice-kv's own refusals (its limits, what it does not queue),
      // which the transaction cannot run without. (Nothing of it is sent:
      // EXEC fills no result into it.)
      q.cmds.resize(before);
      r.waiting = 0;
      if (r.refused_here) {
        q.failed = true;
        return true;
      }
    }
    for (size_t i = before; i < q.cmds.size(); ++i) {
      bytes += kQueuedOverhead + q.cmds[i].key.size() + q.cmds[i].value.size() +
               q.cmds[i].expected.size();
    }
    if (q.bytes + c.watched_bytes + bytes > options_.max_entry_bytes ||
        q.replies.size() >= kMaxPendingReplies) {
      // (The queue is bounded by what EXEC could send: one log entry.)
      // Answered now, and EXEC will discard the transaction, as Redis
      // does with a command refused as it is queued.
      q.cmds.resize(before);
      q.failed = true;
      r = Reply{};
      r.resp3 = c.resp3;
      return r.answer(
          resp::error("ERR the transaction would take more than one log entry may (" +
                      std::to_string(options_.max_entry_bytes) + " bytes, --max-value-bytes, or " +
                      std::to_string(kMaxPendingReplies) + " commands); EXEC will discard it"));
    }
    q.bytes += bytes;
    q.answered += r.text.size();
    q.replies.push_back(std::move(r));
    r = Reply{};
    r.resp3 = c.resp3;
    return r.answer(resp::simple("QUEUED"));
  }
  if (name == "MULTI") {
    if (args.size() != 1) return r.answer(wrong_args("multi"));
    if (q.open) return r.answer(resp::error("ERR MULTI calls can not be nested"));
    q = Queue{};
    q.open = true;
    return r.answer(resp::simple("OK"));
  }
  if (name == "DISCARD") {
    if (args.size() != 1) return r.answer(wrong_args("discard"));
    if (!q.open) return r.answer(resp::error("ERR DISCARD without MULTI"));
    q = Queue{};
    c.watches.clear();
    c.watched_bytes = 0;
    return r.answer(resp::simple("OK"));
  }
  if (name == "UNWATCH") {
    if (args.size() != 1) return r.answer(wrong_args("unwatch"));
    c.watches.clear();
    c.watched_bytes = 0;
    return r.answer(resp::simple("OK"));
  }
  if (name == "WATCH") {
    if (q.open) return r.answer(resp::error("ERR WATCH inside MULTI is not allowed"));
    if (args.size() < 2) return r.answer(wrong_args("watch"));
    size_t bytes = 0;
    for (size_t i = 1; i < args.size(); ++i) bytes += kQueuedOverhead + args[i].size();
    // (EXEC carries every watched key: bounded as its transaction is.)
    if (c.watched_bytes + bytes > options_.max_entry_bytes)
      return r.answer(resp::error("ERR the watched keys would take more than one log entry may (" +
                                  std::to_string(options_.max_entry_bytes) +
                                  " bytes, --max-value-bytes)"));
    c.watched_bytes += bytes;
    // One entry per key, each reading the store's version once the key is
    // as at `now`; EXEC names them by their seqs (store.h, Transaction).
    r.kind = Kind::kWatch;
    for (size_t i = 1; i < args.size(); ++i) {
      const uint64_t seq = submit(c, client, index, r, stamped(Op::kWatch, args[i], "", now));
      c.watches.emplace_back(args[i], seq);
    }
    return true;
  }
  if (name == "QUIT") {
    q = Queue{};
    return false;  // (answered by the table)
  }
  if (name != "EXEC") return false;
  if (args.size() != 1) return r.answer(wrong_args("exec"));
  if (!q.open) return r.answer(resp::error("ERR EXEC without MULTI"));
  Queue queued = std::move(q);
  q = Queue{};
  std::vector<std::pair<std::string, uint64_t>> watches = std::move(c.watches);
  c.watches.clear();
  c.watched_bytes = 0;
  if (queued.failed)
    return r.answer(resp::error("EXECABORT Transaction discarded because of previous errors."));
  Transaction t;
  t.cmds = std::move(queued.cmds);
  for (auto& [key, seq] : watches)
    t.conditions.push_back(TxCondition{TxCondition::kUnchanged, std::move(key), seq});
  std::string body = encode_transaction(t);
  if (body.size() > options_.max_entry_bytes) {
    return r.answer(resp::error("EXECABORT Transaction discarded: its commands take " +
                                std::to_string(body.size()) + " bytes, more than the " +
                                std::to_string(options_.max_entry_bytes) +
                                " one log entry may (--max-value-bytes)"));
  }
  r.kind = Kind::kExec;
  r.subs = std::move(queued.replies);
  for (Reply& sub : r.subs) {
    // AUTH, HELLO and CLIENT run once the store has decided EXEC
    // (fill_exec), in order, and not at all if a watched key makes it
    // fail; meanwhile the connection is not read from, so that what
    // follows EXEC sees them.
    if (sub.kind == Kind::kDeferred) c.exec_pending = true;
    sub.resp3 = c.resp3;
  }
  submit(c, client, index, r, stamped(Op::kMulti, "", std::move(body), now));
  return true;
}

bool RespGateway::keys_command(Conn& c, const std::string& name,
                               const std::vector<std::string>& args, Client& client, size_t index,
                               Reply& r, int64_t now) {
  auto too_big = [&](size_t bytes) {
    return r.refuse(resp::error("ERR sluice-kv takes keys and values of at most " +
                                std::to_string(options_.max_entry_bytes) +
                                " bytes in all in one command (--max-value-bytes); this one has " +
                                std::to_string(bytes)));
  };
  if (name == "MSET" || name == "MSETNX") {
    if (args.size() < 3 || args.size() % 2 == 0) return r.answer(wrong_args(lower(name)));
    Transaction t;
    for (size_t i = 1; i + 1 < args.size(); i += 2) {
      Command put;
      put.op = Op::kPut;
      put.key = args[i];
      put.value = args[i + 1];
      t.cmds.push_back(std::move(put));
      if (name == "MSETNX") t.conditions.push_back(TxCondition{TxCondition::kAbsent, args[i], 0});
    }
    std::string body = encode_transaction(t);
    if (body.size() > options_.max_entry_bytes) return too_big(body.size());
    r.kind = name == "MSET" ? Kind::kMset : Kind::kMsetNx;
    if (c.queuing) {
      // Inside MULTI the transaction is EXEC's: MSET's puts join it (an
      // MSETNX's conditions cannot: they would be the whole EXEC's).
      if (name == "MSETNX")
        return r.refuse(resp::error("ERR sluice-kv does not queue MSETNX inside MULTI"));
      for (Command& put : t.cmds) {
        put.now_ms = now;
        submit(c, client, index, r, std::move(put));
      }
      return true;
    }
    submit(c, client, index, r, stamped(Op::kMulti, "", std::move(body), now));
    return true;
  }
  if (name == "RENAME" || name == "RENAMENX") {
    if (args.size() != 3) return r.answer(wrong_args(lower(name)));
    if (args[1].size() + args[2].size() > options_.max_entry_bytes)
      return too_big(args[1].size() + args[2].size());
    r.kind = name == "RENAME" ? Kind::kRename : Kind::kRenameNx;
    submit(c, client, index, r,
           stamped(name == "RENAME" ? Op::kRename : Op::kRenameNx, args[1], args[2], now));
    return true;
  }
  if (name == "DBSIZE" || name == "KEYS" || name == "SCAN") {
    // Reads of the whole keyspace: one entry each, linearizable as GET.
    if (c.queuing)
      return r.refuse(resp::error("ERR sluice-kv does not queue " + name + " inside MULTI"));
    Command read = stamped(Op::kDbSize, "", "", now);
    if (name == "DBSIZE") {
      if (args.size() != 1) return r.answer(wrong_args("dbsize"));
      r.kind = Kind::kDbSize;
    } else if (name == "KEYS") {
      if (args.size() != 2) return r.answer(wrong_args("keys"));
      if (args[1].size() > options_.max_entry_bytes) return too_big(args[1].size());
      read.op = Op::kKeys;
      read.key = args[1];
      r.kind = Kind::kKeys;
    } else {
      if (args.size() < 2 || args.size() % 2 != 0) return r.answer(wrong_args("scan"));
      ScanRequest q;
      if (std::string error = scan_options(args, 1, "TYPE", &q, &read.key); !error.empty())
        return r.answer(std::move(error));
      if (read.key.size() + q.type.size() > options_.max_entry_bytes)
        return too_big(read.key.size() + q.type.size());
      read.op = Op::kScan;
      read.value = encode_scan_request(q);
      r.kind = Kind::kScan;
    }
    submit(c, client, index, r, std::move(read));
    return true;
  }
  if (name == "FLUSHALL" || name == "FLUSHDB") {
    // (SYNC and ASYNC alike: the entry removes every key when applied.)
    if (args.size() > 2) return r.answer(wrong_args(lower(name)));
    if (args.size() == 2 && upper(args[1]) != "SYNC" && upper(args[1]) != "ASYNC")
      return r.answer(resp::error("ERR syntax error"));
    r.kind = Kind::kMset;
    submit(c, client, index, r, stamped(Op::kFlushAll, "", "", now));
    return true;
  }
  return false;
}

std::string RespGateway::scan_options(const std::vector<std::string>& args, size_t from,
                                      const std::string& extra, ScanRequest* q,
                                      std::string* pattern) {
  const std::string& cursor = args[from];
  const auto [end, ec] = std::from_chars(cursor.data(), cursor.data() + cursor.size(), q->cursor);
  if (cursor.empty() || ec != std::errc() || end != cursor.data() + cursor.size())
    return resp::error("ERR invalid cursor");
  pattern->assign(1, '*');  // (no MATCH: every name)
  for (size_t i = from + 1; i < args.size(); i += 2) {
    const std::string opt = upper(args[i]);
    if (opt == extra && extra == "NOVALUES") {
      q->type = "novalues";
      --i;  // (a flag: no value follows)
      continue;
    }
    if (i + 1 >= args.size()) return resp::error("ERR syntax error");
    int64_t n = 0;
    if (opt == "MATCH") {
      *pattern = args[i + 1];
    } else if (opt == "COUNT") {
      if (!parse_integer(args[i + 1], &n))
        return resp::error("ERR value is not an integer or out of range");
      if (n < 1) return resp::error("ERR syntax error");
      q->count = static_cast<uint64_t>(n);
    } else if (opt == extra && extra == "TYPE") {
      q->type = lower(args[i + 1]);
    } else {
      return resp::error("ERR syntax error");
    }
  }
  return "";
}

void RespGateway::fill_exec(Reply& r, const Command& cmd, const Result& result) {
  Conn* const c = r.conn;
  if (!result.ok) {
    // A watched key was modified: nothing ran (a null array).
    r.text = r.resp3 ? "_\r\n" : "*-1\r\n";
    r.subs.clear();
    return;
  }
  std::vector<Result> results;
  if (!decode_results(result.value, &results)) {
    r.text = resp::error("ERR the store answered a malformed transaction result");
    r.subs.clear();
    return;
  }
  // Each queued command's answer from its own results, in order: AUTH,
  // HELLO and CLIENT run here, and those after a HELLO 3 answer in RESP3.
  size_t at = 0;
  bool resp3 = r.resp3;
  for (Reply& sub : r.subs) {
    if (sub.kind == Kind::kDeferred) {
      sub.kind = Kind::kLocal;
      if (c == nullptr || c->gone) {
        sub.answer("");  // (no one to answer: the reply is dropped)
      } else {
        // (HELLO and CLIENT through the gateway's own dispatch, as outside
        // MULTI.)
        const std::string name = upper(sub.args[0]);
        bool handled = true;
        sub.answer(name == "AUTH" ? auth(*c, sub.args)
                                  : local_command(*c, name, sub.args, &handled));
        resp3 = c->resp3;
      }
      sub.args.clear();
      continue;
    }
    sub.resp3 = resp3;
    const uint64_t first = at;
    while (sub.waiting > 0 && at < results.size()) {
      Command one;
      one.now_ms = cmd.now_ms;  // (the EXEC's stamp: TTL counts from it)
      one.seq = sub.first_seq + (at - first);
      --sub.waiting;
      fill(sub, one, results[at++]);
    }
  }
  r.text = resp::array_header(r.subs.size());
  for (const Reply& sub : r.subs) r.text += sub.text;
  r.subs.clear();
  r.subs.shrink_to_fit();
}

}  // namespace kv
