// The RESP gateway's command table (resp_gateway.h lists the commands):
// how each request becomes log entries (Commands, stamped with the wall
// clock) or a local answer. Connections, reading, replies and sweeps are in
// resp_gateway.cc.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "resp.h"
#include "resp_gateway.h"

namespace kv {

namespace {

using resp::lower;
using resp::upper;
using resp::wrong_args;

// An expiry argument as Redis takes it, into *deadline_ms: a number of
// seconds (or ms), from now_ms or since the epoch. SET, SETEX, PSETEX and
// GETEX refuse 0 or less (positive_only); EXPIRE and its kin take any time,
// one already passed removing the key. The error reply's text if it is not
// a time, in Redis's words.
std::optional<std::string> parse_expiry(const std::string& text, bool seconds, bool relative,
                                        bool positive_only, int64_t now_ms,
                                        const std::string& command, int64_t* deadline_ms) {
  int64_t v = 0;
  if (!parse_integer(text, &v)) return "ERR value is not an integer or out of range";
  const std::string invalid = "ERR invalid expire time in '" + command + "' command";
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (positive_only && v <= 0) return invalid;
  if (seconds) {
    if (v > kMax / 1000 || v < std::numeric_limits<int64_t>::min() / 1000) return invalid;
    v *= 1000;
  }
  if (relative) {
    if (v > kMax - now_ms) return invalid;
    v += now_ms;
  }
  *deadline_ms = v;
  return std::nullopt;
}

// Whether a request is an HTTP request's first line or a header (a web
// page's cross-protocol request): as Redis, POST and Host: as a command;
// and any request line "METHOD /path HTTP/x".
bool looks_like_http(const std::string& name, const std::vector<std::string>& args) {
  if (name == "POST" || name == "HOST:") return true;
  return args.size() == 3 && !args[1].empty() && args[1][0] == '/' &&
         args[2].rfind("HTTP/", 0) == 0;
}

}  // namespace

void RespGateway::handle(Conn& c, std::vector<std::string>& args, Client& client, size_t index) {
  if (args.empty()) return;  // an empty inline line
  const std::string name = upper(args[0]);
  if (looks_like_http(name, args)) {
    // Unanswered: a browser would show the reply, and what follows in the
    // request (its body) is the attacker's command.
    ++stats_.http_requests;
    drop(c, "possible SECURITY ATTACK: a client from " + c.peer + " sent an HTTP request ('" +
                args[0].substr(0, 16) +
                "'), as a web page's cross-protocol request would; connection closed");
    return;
  }
  ++stats_.requests;
  c.replies.emplace_back();
  Reply& r = c.replies.back();
  r.resp3 = c.resp3;
  auto local = [&r](std::string text) {
    r.text = std::move(text);
    r.ready = true;
  };
  // (Inside MULTI, AUTH is queued: transaction_command.)
  if (name == "AUTH" && !(c.queue.open && c.authenticated)) return local(auth(c, args));
  if (!c.authenticated) {
    if (name == "QUIT") {
      c.closing = true;
      return local(resp::simple("OK"));
    }
    // (HELLO may authenticate, with AUTH in it.)
    if (name != "HELLO") return local(resp::error("NOAUTH Authentication required."));
  }
  // Every command carries the time it was read at (store.h: expiry is
  // decided against it).
  const int64_t now = wall_clock_ms();
  if (transaction_command(c, name, args, client, index, r, now)) return;
  dispatch(c, name, args, client, index, r, now);
}

uint64_t RespGateway::submit(Conn& c, Client& client, size_t index, Reply& r, Command cmd) {
  if (c.queuing) {
    // (The position in the transaction stands for the seq: fill() counts
    // an MGET's keys from first_seq.)
    if (r.waiting == 0) r.first_seq = c.queue.cmds.size();
    c.queue.cmds.push_back(std::move(cmd));
    ++r.waiting;
    return 0;
  }
  const uint64_t seq = client.add(std::move(cmd));
  if (r.waiting == 0) r.first_seq = seq;
  InFlight& f = inflight_[index];
  if (f.replies.empty()) f.first = seq;
  f.replies.push_back(&r);  // (seqs are consecutive: each comes from add)
  ++inflight_count_;
  ++r.waiting;
  return seq;
}

void RespGateway::dispatch(Conn& c, const std::string& name, std::vector<std::string>& args,
                           Client& client, size_t index, Reply& r, int64_t now) {
  auto local = [&r](std::string text) {
    r.text = std::move(text);
    r.ready = true;
  };
  // A command stamped with `now`, and what it does with its key's deadline.
  auto submit = [&](Op op, const std::string& key, const std::string& value,
                    const std::string& expected, Ttl ttl = Ttl::kClear, int64_t deadline = 0,
                    uint8_t ttl_if = 0) {
    Command cmd;
    cmd.op = op;
    cmd.key = key;
    cmd.value = value;
    cmd.expected = expected;
    cmd.now_ms = now;
    cmd.ttl = ttl;
    cmd.ttl_if = ttl_if;
    if (ttl == Ttl::kSet) {
      cmd.deadline_ms = deadline;
      // (One already passed removes the key with this command.)
      if (deadline > now) expect_deadline(deadline);
    }
    this->submit(c, client, index, r, std::move(cmd));
  };
  auto refuse = [&r](std::string text) { r.refuse(std::move(text)); };
  auto fits = [&](size_t from) {
    size_t bytes = 0;
    for (size_t i = from; i < args.size(); ++i) bytes += args[i].size();
    return bytes <= options_.max_entry_bytes;
  };
  // (Made only when needed: every command passes through here.)
  auto too_big = [this] {
    return resp::error("ERR sluice-kv takes keys and values of at most " +
                       std::to_string(options_.max_entry_bytes) +
                       " bytes in all (--max-value-bytes)");
  };
  if (name == "PING") {
    if (args.size() > 2) return local(wrong_args("ping"));
    return local(args.size() == 2 ? resp::bulk(args[1]) : resp::simple("PONG"));
  }
  if (name == "GET") {
    if (args.size() != 2) return local(wrong_args("get"));
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kGet;
    return submit(Op::kGet, args[1], "", "");
  }
  if (name == "SET") {
    if (args.size() < 3) return local(wrong_args("set"));
    // Options as Redis takes them: NX or XX (set only if absent, or
    // present), GET (answer the value replaced), and one of EX, PX, EXAT,
    // PXAT (each with its time) and KEEPTTL. Without any of those the key
    // has no deadline after the SET.
    bool nx = false, xx = false, get = false;
    std::string expiry;                 // EX, PX, EXAT, PXAT, KEEPTTL or none
    const std::string* time = nullptr;  // its argument
    for (size_t i = 3; i < args.size(); ++i) {
      const std::string opt = upper(args[i]);
      if (opt == "NX" && !xx) {
        nx = true;
      } else if (opt == "XX" && !nx) {
        xx = true;
      } else if (opt == "GET") {
        get = true;
      } else if (expiry.empty() && opt == "KEEPTTL") {
        expiry = opt;
      } else if (expiry.empty() && (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") &&
                 i + 1 < args.size()) {
        expiry = opt;
        time = &args[++i];
      } else {
        return local(resp::error("ERR syntax error"));
      }
    }
    Ttl ttl = expiry == "KEEPTTL" ? Ttl::kKeep : Ttl::kClear;
    int64_t deadline = 0;
    if (time != nullptr) {
      const bool seconds = expiry == "EX" || expiry == "EXAT";
      const bool relative = expiry == "EX" || expiry == "PX";
      if (auto e = parse_expiry(*time, seconds, relative, true, now, "set", &deadline))
        return local(resp::error(*e));
      ttl = Ttl::kSet;
    }
    if (!fits(1)) return refuse(too_big());
    r.kind = get ? (nx ? Kind::kOldUnlessSet : Kind::kOld) : nx || xx ? Kind::kSetIf : Kind::kSet;
    // (XX GET reads the key first, so a hash there is WRONGTYPE: store.h.)
    return submit(nx    ? Op::kSetNx
                  : xx  ? Op::kSetXx
                  : get ? Op::kGetSet
                        : Op::kPut,
                  args[1], args[2], xx && get ? "get" : "", ttl, deadline);
  }
  if (name == "SETEX" || name == "PSETEX") {
    if (args.size() != 4) return local(wrong_args(lower(name)));
    int64_t deadline = 0;
    if (auto e = parse_expiry(args[2], name == "SETEX", true, true, now, lower(name), &deadline))
      return local(resp::error(*e));
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kSet;
    return submit(Op::kPut, args[1], args[3], "", Ttl::kSet, deadline);
  }
  if (name == "EXPIRE" || name == "PEXPIRE" || name == "EXPIREAT" || name == "PEXPIREAT") {
    if (args.size() < 3) return local(wrong_args(lower(name)));
    uint8_t ttl_if = 0;
    for (size_t i = 3; i < args.size(); ++i) {
      const std::string opt = upper(args[i]);
      if (opt == "NX") {
        ttl_if |= kIfNoDeadline;
      } else if (opt == "XX") {
        ttl_if |= kIfDeadline;
      } else if (opt == "GT") {
        ttl_if |= kIfLater;
      } else if (opt == "LT") {
        ttl_if |= kIfEarlier;
      } else {
        return local(resp::error("ERR Unsupported option " + args[i].substr(0, 64)));
      }
    }
    if ((ttl_if & kIfNoDeadline) && ttl_if != kIfNoDeadline)
      return local(
          resp::error("ERR NX and XX, GT or LT options at the same time are not compatible"));
    if ((ttl_if & kIfLater) && (ttl_if & kIfEarlier))
      return local(resp::error("ERR GT and LT options at the same time are not compatible"));
    const bool seconds = name == "EXPIRE" || name == "EXPIREAT";
    const bool relative = name == "EXPIRE" || name == "PEXPIRE";
    int64_t deadline = 0;
    if (auto e = parse_expiry(args[2], seconds, relative, false, now, lower(name), &deadline))
      return local(resp::error(*e));
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kFlag;
    return submit(Op::kExpire, args[1], "", "", Ttl::kSet, deadline, ttl_if);
  }
  if (name == "PERSIST") {
    if (args.size() != 2) return local(wrong_args("persist"));
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kFlag;
    return submit(Op::kExpire, args[1], "", "", Ttl::kClear);
  }
  if (name == "TTL" || name == "PTTL" || name == "EXPIRETIME" || name == "PEXPIRETIME") {
    if (args.size() != 2) return local(wrong_args(lower(name)));
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kTtl;
    r.ttl_ms = name[0] == 'P';
    r.ttl_abs = name.size() > 4;
    return submit(Op::kTtl, args[1], "", "");
  }
  if (name == "GETEX") {
    if (args.size() < 2) return local(wrong_args("getex"));
    // At most one option: EX, PX, EXAT, PXAT (with a time) or PERSIST.
    Ttl ttl = Ttl::kKeep;
    int64_t deadline = 0;
    std::optional<std::string> bad_time;
    for (size_t i = 2; i < args.size(); ++i) {
      const std::string opt = upper(args[i]);
      if (i == 2 && opt == "PERSIST") {
        ttl = Ttl::kClear;
      } else if (i == 2 && (opt == "EX" || opt == "PX" || opt == "EXAT" || opt == "PXAT") &&
                 args.size() == 4) {
        const bool seconds = opt == "EX" || opt == "EXAT";
        const bool relative = opt == "EX" || opt == "PX";
        bad_time = parse_expiry(args[++i], seconds, relative, true, now, "getex", &deadline);
        ttl = Ttl::kSet;
      } else {
        return local(resp::error("ERR syntax error"));
      }
    }
    if (!fits(1)) return refuse(too_big());
    if (bad_time) {
      // Redis checks the time only once it found the key, a string: an
      // absent key answers null and another type WRONGTYPE. So a read,
      // whose answer for a string is the time's error.
      r.kind = Kind::kBadTime;
      r.error = resp::error(*bad_time);
      return submit(Op::kGet, args[1], "", "");
    }
    r.kind = Kind::kGet;
    return submit(Op::kGetEx, args[1], "", "", ttl, deadline);
  }
  if (name == "DEL" || name == "UNLINK" || name == "EXISTS" || name == "TOUCH") {
    if (args.size() < 2) return local(wrong_args(lower(name)));
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i].size() > options_.max_entry_bytes) return refuse(too_big());
    }
    r.kind = Kind::kCount;
    for (size_t i = 1; i < args.size(); ++i)
      submit(name == "EXISTS" || name == "TOUCH" ? Op::kType : Op::kDelete, args[i], "", "");
    return;
  }
  if (name == "CAS") {
    if (args.size() != 4) return local(wrong_args("cas"));
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kCas;
    return submit(Op::kCas, args[1], args[3], args[2]);
  }
  if (name == "INCR" || name == "DECR" || name == "INCRBY" || name == "DECRBY") {
    const bool by = name.size() == 6;
    if (args.size() != (by ? 3u : 2u)) return local(wrong_args(lower(name)));
    int64_t n = 1;
    if (by && !parse_integer(args[2], &n))
      return local(resp::error("ERR value is not an integer or out of range"));
    if (name[0] == 'D') {
      if (n == std::numeric_limits<int64_t>::min())
        return local(resp::error("ERR decrement would overflow"));
      n = -n;
    }
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kNumber;
    return submit(Op::kIncrBy, args[1], std::to_string(n), "");
  }
  if (name == "INCRBYFLOAT") {
    if (args.size() != 3) return local(wrong_args("incrbyfloat"));
    double by = 0;
    if (!parse_float(args[2], &by)) return local(resp::error("ERR value is not a valid float"));
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kFloat;
    return submit(Op::kIncrByFloat, args[1], args[2], "");
  }
  if (name == "SETRANGE") {
    if (args.size() != 4) return local(wrong_args("setrange"));
    int64_t offset = 0;
    if (!parse_integer(args[2], &offset))
      return local(resp::error("ERR value is not an integer or out of range"));
    if (offset < 0) return local(resp::error("ERR offset is out of range"));
    // (As Redis checks proto-max-bulk-len: the value the command would make.)
    if (static_cast<uint64_t>(offset) + args[3].size() + args[1].size() > options_.max_entry_bytes)
      return local(resp::error("ERR string exceeds maximum allowed size (--max-value-bytes)"));
    r.kind = Kind::kSetRange;
    return submit(Op::kSetRange, args[1], args[3], args[2]);
  }
  if (name == "APPEND" || name == "SETNX" || name == "GETSET") {
    if (args.size() != 3) return local(wrong_args(lower(name)));
    if (!fits(1)) return refuse(too_big());
    r.kind = name == "APPEND" ? Kind::kNumber : name == "SETNX" ? Kind::kFlag : Kind::kOld;
    return submit(name == "APPEND"  ? Op::kAppend
                  : name == "SETNX" ? Op::kSetNx
                                    : Op::kGetSet,
                  args[1], args[2], "");
  }
  if (name == "STRLEN" || name == "GETDEL" || name == "TYPE") {
    if (args.size() != 2) return local(wrong_args(lower(name)));
    if (!fits(1)) return refuse(too_big());
    r.kind = name == "STRLEN" ? Kind::kLength : name == "TYPE" ? Kind::kType : Kind::kOld;
    return submit(name == "GETDEL" ? Op::kGetDel
                  : name == "TYPE" ? Op::kType
                                   : Op::kGet,
                  args[1], "", "");
  }
  if (name == "GETRANGE" || name == "SUBSTR") {
    if (args.size() != 4) return local(wrong_args(lower(name)));
    if (!parse_integer(args[2], &r.range_start) || !parse_integer(args[3], &r.range_end))
      return local(resp::error("ERR value is not an integer or out of range"));
    if (!fits(1)) return refuse(too_big());
    r.kind = Kind::kRange;
    return submit(Op::kGet, args[1], "", "");
  }
  if (name == "MGET") {
    if (args.size() < 2) return local(wrong_args("mget"));
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i].size() > options_.max_entry_bytes) return refuse(too_big());
    }
    r.kind = Kind::kArray;
    r.items.resize(args.size() - 1);
    for (size_t i = 1; i < args.size(); ++i) submit(Op::kGet, args[i], "", "");
    return;
  }
  if (keys_command(c, name, args, client, index, r, now)) return;
  if (hash_command(c, name, args, client, index, r, now)) return;
  if (list_command(c, name, args, client, index, r, now)) return;
  if (blocking_command(c, name, args, client, index, r, now)) return;
  if (set_command(c, name, args, client, index, r, now)) return;
  if (zset_command(c, name, args, client, index, r, now)) return;
  bool handled = false;
  std::string answer = local_command(c, name, args, &handled);
  if (handled) return local(std::move(answer));
  if (name == "SELECT") {
    if (args.size() == 2 && args[1] == "0") return local(resp::simple("OK"));
    return refuse(resp::error("ERR sluice-kv has one database, 0"));
  }
  if (name == "QUIT") {
    c.closing = true;
    return local(resp::simple("OK"));
  }
  if (name == "SHUTDOWN") {
    if (options_.shutdown == ShutdownFrom::kNobody ||
        (options_.shutdown == ShutdownFrom::kLocal && !c.loopback)) {
      return local(resp::error(
          options_.shutdown == ShutdownFrom::kNobody
              ? "ERR SHUTDOWN is disabled on this server (start it with --enable-shutdown local "
                "or yes)"
              : "ERR SHUTDOWN is allowed from loopback clients only (--enable-shutdown local)"));
    }
    stopping_ = true;
    return local(resp::simple("OK"));
  }
  return local(resp::unknown_command(args));
}

}  // namespace kv
