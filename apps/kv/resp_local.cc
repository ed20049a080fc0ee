// The commands a RESP gateway answers itself, without the replicated store:
// what clients send when they connect (HELLO, CLIENT SETINFO/SETNAME,
// COMMAND DOCS, CONFIG GET) and what operators ask (INFO, CLIENT LIST).
// Their replies follow Redis 7's, in RESP2 or, after HELLO 3, RESP3 (the
// protocol redis-py 8 asks for first): nulls as _ and key-value replies as
// maps.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "resp.h"
#include "resp_gateway.h"

namespace kv {

namespace {

using resp::lower;
using resp::upper;
using resp::wrong_args;

// Redis's glob as CONFIG GET uses it: '*' and '?' (no classes).
bool glob(const char* p, const char* s) {
  if (*p == '\0') return *s == '\0';
  if (*p == '*') return glob(p + 1, s) || (*s != '\0' && glob(p, s + 1));
  return *s != '\0' && (*p == '?' || *p == *s) && glob(p + 1, s + 1);
}

// An aggregate reply ('*' array, '%' map) of `count` elements and the
// already-encoded items. (Appended piece by piece: GCC 12 at -O3 warns
// falsely of "literal" + std::to_string(n) here.)
std::string aggregate_of(char kind, size_t count, const std::vector<std::string>& items) {
  std::string out(1, kind);
  out += std::to_string(count);
  out += "\r\n";
  for (const std::string& i : items) out += i;
  return out;
}

// A reply array of already-encoded items.
std::string array_of(const std::vector<std::string>& items) {
  return aggregate_of('*', items.size(), items);
}

// Key-value pairs (already encoded, key then value): a RESP3 map, or in
// RESP2 the flat array Redis sends instead.
std::string map_of(const std::vector<std::string>& pairs, bool resp3) {
  return resp3 ? aggregate_of('%', pairs.size() / 2, pairs) : array_of(pairs);
}

// A client name may not hold spaces, newlines or other special characters
// (CLIENT LIST prints it space-separated).
bool valid_name(const std::string& n) {
  for (const unsigned char ch : n)
    if (ch < '!' || ch > '~') return false;
  return true;
}

uint64_t resident_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// The commands of this gateway, for COMMAND: name, arity (negative: at
// least that many arguments, the name included), flags, and where the keys
// are (first, last: -1 the last argument, step), as Redis describes them.
struct CommandInfo {
  const char* name;
  int arity;
  const char* flag;  // "write", "readonly" or "" (the gateway answers it)
  int first_key, last_key, step;
};
constexpr CommandInfo kCommands[] = {
    {"ping", -1, "", 0, 0, 0},
    {"echo", 2, "", 0, 0, 0},
    {"get", 2, "readonly", 1, 1, 1},
    {"set", -3, "write", 1, 1, 1},
    {"del", -2, "write", 1, -1, 1},
    {"exists", -2, "readonly", 1, -1, 1},
    {"cas", 4, "write", 1, 1, 1},
    {"incr", 2, "write", 1, 1, 1},
    {"incrby", 3, "write", 1, 1, 1},
    {"decr", 2, "write", 1, 1, 1},
    {"decrby", 3, "write", 1, 1, 1},
    {"append", 3, "write", 1, 1, 1},
    {"strlen", 2, "readonly", 1, 1, 1},
    {"setnx", 3, "write", 1, 1, 1},
    {"getset", 3, "write", 1, 1, 1},
    {"getdel", 2, "write", 1, 1, 1},
    {"mget", -2, "readonly", 1, -1, 1},
    {"type", 2, "readonly", 1, 1, 1},
    {"getrange", 4, "readonly", 1, 1, 1},
    {"substr", 4, "readonly", 1, 1, 1},
    {"unlink", -2, "write", 1, -1, 1},
    {"setex", 4, "write", 1, 1, 1},
    {"psetex", 4, "write", 1, 1, 1},
    {"expire", -3, "write", 1, 1, 1},
    {"pexpire", -3, "write", 1, 1, 1},
    {"expireat", -3, "write", 1, 1, 1},
    {"pexpireat", -3, "write", 1, 1, 1},
    {"ttl", 2, "readonly", 1, 1, 1},
    {"pttl", 2, "readonly", 1, 1, 1},
    {"expiretime", 2, "readonly", 1, 1, 1},
    {"pexpiretime", 2, "readonly", 1, 1, 1},
    {"persist", 2, "write", 1, 1, 1},
    {"getex", -2, "write", 1, 1, 1},
    {"mset", -3, "write", 1, -1, 2},
    {"msetnx", -3, "write", 1, -1, 2},
    {"rename", 3, "write", 1, 2, 1},
    {"renamenx", 3, "write", 1, 2, 1},
    {"flushall", -1, "write", 0, 0, 0},
    {"flushdb", -1, "write", 0, 0, 0},
    {"multi", 1, "", 0, 0, 0},
    {"exec", 1, "", 0, 0, 0},
    {"discard", 1, "", 0, 0, 0},
    {"watch", -2, "", 1, -1, 1},
    {"unwatch", 1, "", 0, 0, 0},
    {"dbsize", 1, "readonly", 0, 0, 0},
    {"keys", 2, "readonly", 0, 0, 0},
    {"scan", -2, "readonly", 0, 0, 0},
    {"touch", -2, "readonly", 1, -1, 1},
    {"incrbyfloat", 3, "write", 1, 1, 1},
    {"setrange", 4, "write", 1, 1, 1},
    {"hset", -4, "write", 1, 1, 1},
    {"hmset", -4, "write", 1, 1, 1},
    {"hsetnx", 4, "write", 1, 1, 1},
    {"hget", 3, "readonly", 1, 1, 1},
    {"hmget", -3, "readonly", 1, 1, 1},
    {"hdel", -3, "write", 1, 1, 1},
    {"hexists", 3, "readonly", 1, 1, 1},
    {"hlen", 2, "readonly", 1, 1, 1},
    {"hstrlen", 3, "readonly", 1, 1, 1},
    {"hgetall", 2, "readonly", 1, 1, 1},
    {"hkeys", 2, "readonly", 1, 1, 1},
    {"hvals", 2, "readonly", 1, 1, 1},
    {"hincrby", 4, "write", 1, 1, 1},
    {"hincrbyfloat", 4, "write", 1, 1, 1},
    {"lpush", -3, "write", 1, 1, 1},
    {"rpush", -3, "write", 1, 1, 1},
    {"lpushx", -3, "write", 1, 1, 1},
    {"rpushx", -3, "write", 1, 1, 1},
    {"lpop", -2, "write", 1, 1, 1},
    {"rpop", -2, "write", 1, 1, 1},
    {"llen", 2, "readonly", 1, 1, 1},
    {"lrange", 4, "readonly", 1, 1, 1},
    {"lindex", 3, "readonly", 1, 1, 1},
    {"lset", 4, "write", 1, 1, 1},
    {"lrem", 4, "write", 1, 1, 1},
    {"ltrim", 4, "write", 1, 1, 1},
    {"linsert", 5, "write", 1, 1, 1},
    {"lpos", -3, "readonly", 1, 1, 1},
    {"lmove", 5, "write", 1, 2, 1},
    {"rpoplpush", 3, "write", 1, 2, 1},
    {"lmpop", -4, "write", 0, 0, 0},
    {"blpop", -3, "write", 1, -2, 1},
    {"brpop", -3, "write", 1, -2, 1},
    {"blmove", 6, "write", 1, 2, 1},
    {"brpoplpush", 4, "write", 1, 2, 1},
    {"blmpop", -5, "write", 0, 0, 0},
    {"bzpopmin", -3, "write", 1, -2, 1},
    {"bzpopmax", -3, "write", 1, -2, 1},
    {"bzmpop", -5, "write", 0, 0, 0},
    {"hrandfield", -2, "readonly", 1, 1, 1},
    {"hscan", -3, "readonly", 1, 1, 1},
    {"sscan", -3, "readonly", 1, 1, 1},
    {"sadd", -3, "write", 1, 1, 1},
    {"srem", -3, "write", 1, 1, 1},
    {"scard", 2, "readonly", 1, 1, 1},
    {"sismember", 3, "readonly", 1, 1, 1},
    {"smismember", -3, "readonly", 1, 1, 1},
    {"smembers", 2, "readonly", 1, 1, 1},
    {"spop", -2, "write", 1, 1, 1},
    {"srandmember", -2, "readonly", 1, 1, 1},
    {"smove", 4, "write", 1, 2, 1},
    {"sinter", -2, "readonly", 1, -1, 1},
    {"sunion", -2, "readonly", 1, -1, 1},
    {"sdiff", -2, "readonly", 1, -1, 1},
    {"sintercard", -3, "readonly", 0, 0, 0},
    {"sinterstore", -3, "write", 1, -1, 1},
    {"sunionstore", -3, "write", 1, -1, 1},
    {"sdiffstore", -3, "write", 1, -1, 1},
    {"zadd", -4, "write", 1, 1, 1},
    {"zincrby", 4, "write", 1, 1, 1},
    {"zrem", -3, "write", 1, 1, 1},
    {"zscore", 3, "readonly", 1, 1, 1},
    {"zmscore", -3, "readonly", 1, 1, 1},
    {"zcard", 2, "readonly", 1, 1, 1},
    {"zcount", 4, "readonly", 1, 1, 1},
    {"zlexcount", 4, "readonly", 1, 1, 1},
    {"zrank", 3, "readonly", 1, 1, 1},
    {"zrevrank", 3, "readonly", 1, 1, 1},
    {"zrange", -4, "readonly", 1, 1, 1},
    {"zrangestore", -5, "write", 1, 2, 1},
    {"zrevrange", -4, "readonly", 1, 1, 1},
    {"zrangebyscore", -4, "readonly", 1, 1, 1},
    {"zrevrangebyscore", -4, "readonly", 1, 1, 1},
    {"zrangebylex", -4, "readonly", 1, 1, 1},
    {"zrevrangebylex", -4, "readonly", 1, 1, 1},
    {"zpopmin", -2, "write", 1, 1, 1},
    {"zpopmax", -2, "write", 1, 1, 1},
    {"zremrangebyscore", 4, "write", 1, 1, 1},
    {"zremrangebyrank", 4, "write", 1, 1, 1},
    {"zremrangebylex", 4, "write", 1, 1, 1},
    {"zunion", -3, "readonly", 0, 0, 0},
    {"zinter", -3, "readonly", 0, 0, 0},
    {"zdiff", -3, "readonly", 0, 0, 0},
    {"zintercard", -3, "readonly", 0, 0, 0},
    {"zunionstore", -4, "write", 1, 1, 1},
    {"zinterstore", -4, "write", 1, 1, 1},
    {"zdiffstore", -4, "write", 1, 1, 1},
    {"zscan", -3, "readonly", 1, 1, 1},
    {"zmpop", -4, "write", 0, 0, 0},
    {"zrandmember", -2, "readonly", 1, 1, 1},
    {"info", -1, "", 0, 0, 0},
    {"config", -2, "", 0, 0, 0},
    {"command", -1, "", 0, 0, 0},
    {"client", -2, "", 0, 0, 0},
    {"hello", -1, "", 0, 0, 0},
    {"select", 2, "", 0, 0, 0},
    {"auth", -2, "", 0, 0, 0},
    {"quit", -1, "", 0, 0, 0},
    {"shutdown", -1, "", 0, 0, 0},
};

// The subcommands of CLIENT, CONFIG and COMMAND as Redis 7.0 has them
// (COMMAND INFO's: name and arity, the command and subcommand included),
// and whether this gateway answers them (`here`); CLIENT SETINFO and
// NO-TOUCH are Redis 7.2's, which clients send as they connect.
struct SubcommandInfo {
  const char* command;
  const char* name;
  int arity;
  bool here;
};
constexpr SubcommandInfo kSubcommands[] = {
    {"client", "tracking", -3, false},
    {"client", "no-evict", 3, true},
    {"client", "unblock", -3, false},
    {"client", "caching", 3, false},
    {"client", "reply", 3, false},
    {"client", "help", 2, false},
    {"client", "pause", -3, false},
    {"client", "getredir", 2, false},
    {"client", "setname", 3, true},
    {"client", "getname", 2, true},
    {"client", "kill", -3, false},
    {"client", "trackinginfo", 2, false},
    {"client", "id", 2, true},
    {"client", "info", 2, true},
    {"client", "unpause", 2, false},
    {"client", "list", -2, true},
    {"client", "setinfo", 4, true},
    {"client", "no-touch", 3, true},
    {"config", "rewrite", 2, false},
    {"config", "resetstat", 2, true},
    {"config", "get", -3, true},
    {"config", "set", -4, true},
    {"config", "help", 2, false},
    {"command", "getkeys", -4, false},
    {"command", "count", 2, true},
    {"command", "info", -2, true},
    {"command", "getkeysandflags", -4, false},
    {"command", "help", 2, false},
    {"command", "docs", -2, true},
    {"command", "list", -2, true},
};

// For CLIENT, CONFIG and COMMAND with a subcommand (`command` in lower
// case): Redis 7.0's error for a subcommand it does not have or a wrong
// number of arguments by the subcommand's arity, which Redis gives before
// it runs (or queues) the command; else empty, and *here says whether this
// gateway answers the subcommand.
std::string subcommand_error(const std::string& command, const std::vector<std::string>& args,
                             bool* here) {
  *here = true;
  if (args.size() < 2) return {};
  const std::string sub = lower(args[1]);
  for (const SubcommandInfo& i : kSubcommands) {
    if (command != i.command || sub != i.name) continue;
    const auto n = static_cast<int64_t>(args.size());
    if (i.arity >= 0 ? n != i.arity : n < -i.arity) return wrong_args(command + "|" + sub);
    *here = i.here;
    return {};
  }
  return resp::error("ERR unknown subcommand '" + args[1].substr(0, 128) + "'. Try " +
                     upper(command) + " HELP.");
}

// One command's COMMAND INFO entry: name, arity, flags, first key, last
// key, step and (empty) ACL categories.
std::string command_info(const CommandInfo& c) {
  std::vector<std::string> flags;
  if (*c.flag != '\0') flags.push_back(resp::simple(c.flag));
  return array_of({resp::bulk(c.name), resp::integer(c.arity), array_of(flags),
                   resp::integer(c.first_key), resp::integer(c.last_key), resp::integer(c.step),
                   array_of({})});
}

}  // namespace

std::string RespGateway::refused_in_multi(const std::string& name,
                                          const std::vector<std::string>& args) {
  const std::string want = lower(name);
  for (const CommandInfo& i : kCommands) {
    if (want != i.name) continue;
    const auto n = static_cast<int64_t>(args.size());
    if (i.arity >= 0 ? n != i.arity : n < -i.arity) return wrong_args(want);
    // (Redis 7.0's no-multi commands among this gateway's.)
    if (want == "shutdown") return resp::error("ERR Command not allowed inside a transaction");
    if (want == "client" || want == "config" || want == "command") {
      // Redis looks its subcommand up before it queues it, as a command.
      bool here = true;
      std::string error = subcommand_error(want, args, &here);
      if (error.empty() && !here) {
        error = resp::error("ERR sluice-kv does not run " + upper(want) + " " +
                            upper(args[1]).substr(0, 32) + " (nor queue it inside MULTI)");
      }
      return error;
    }
    return {};
  }
  return resp::unknown_command(args);
}

std::string RespGateway::local_command(Conn& c, const std::string& name,
                                       const std::vector<std::string>& args, bool* handled) {
  *handled = true;
  if (name == "CLIENT" || name == "CONFIG" || name == "COMMAND") {
    // (Redis 7.0's errors for a subcommand it lacks or with a wrong number
    // of arguments.)
    bool here = true;
    if (std::string e = subcommand_error(lower(name), args, &here); !e.empty()) return e;
  }
  if (name == "HELLO") return hello(c, args);
  if (name == "ECHO") return args.size() == 2 ? resp::bulk(args[1]) : wrong_args("echo");
  if (name == "INFO") return info(args);
  if (name == "CLIENT") return client_command(c, args);
  if (name == "CONFIG") return config_command(c, args);
  if (name == "COMMAND") {
    const std::string sub = args.size() > 1 ? upper(args[1]) : "";
    if (sub == "COUNT") return resp::integer(static_cast<int64_t>(std::size(kCommands)));
    // (No documentation: clients take an empty answer as "nothing known"
    // and go on.)
    if (sub == "DOCS") return map_of({}, c.resp3);
    if (sub == "LIST") {
      std::vector<std::string> names;
      for (const CommandInfo& i : kCommands) names.push_back(resp::bulk(i.name));
      return array_of(names);
    }
    if (sub.empty() || (sub == "INFO" && args.size() == 2)) {
      std::vector<std::string> all;
      for (const CommandInfo& i : kCommands) all.push_back(command_info(i));
      return array_of(all);
    }
    if (sub == "INFO") {
      // Each named command's entry, or a null for one this gateway lacks.
      std::vector<std::string> some;
      for (size_t k = 2; k < args.size(); ++k) {
        const std::string want = lower(args[k]);
        std::string one = resp::null_reply(c.resp3);
        for (const CommandInfo& i : kCommands)
          if (want == i.name) one = command_info(i);
        some.push_back(std::move(one));
      }
      return array_of(some);
    }
    return resp::error("ERR unknown subcommand '" + args[1].substr(0, 64) + "'. Try COMMAND HELP.");
  }
  *handled = false;
  return {};
}

std::string RespGateway::hello(Conn& c, const std::vector<std::string>& args) {
  size_t i = 1;
  bool resp3 = c.resp3;
  if (args.size() > 1) {
    const std::string& v = args[1];
    if (v != "2" && v != "3") return resp::error("NOPROTO unsupported protocol version");
    resp3 = v == "3";
    i = 2;
  }
  std::string setname;
  bool authed_now = false;
  for (; i < args.size(); ++i) {
    const std::string opt = upper(args[i]);
    if (opt == "AUTH" && i + 2 < args.size()) {
      const std::string reply = auth(c, {"AUTH", args[i + 1], args[i + 2]});
      if (reply != resp::simple("OK")) return reply;
      authed_now = true;
      i += 2;
    } else if (opt == "SETNAME" && i + 1 < args.size()) {
      setname = args[++i];
      if (!valid_name(setname)) {
        return resp::error(
            "ERR Client names cannot contain spaces, newlines or special characters.");
      }
    } else {
      return resp::error("ERR Syntax error in HELLO option '" + args[i].substr(0, 64) + "'");
    }
  }
  if (!c.authenticated && !authed_now) {
    return resp::error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
        "<proto> AUTH <user> <pass> option can be used to authenticate the client and select the "
        "RESP protocol version at the same time");
  }
  if (!setname.empty()) c.name = setname;
  c.resp3 = resp3;
  return map_of(
      {resp::bulk("server"), resp::bulk("redis"), resp::bulk("version"), resp::bulk("7.0.0"),
       resp::bulk("proto"), resp::integer(resp3 ? 3 : 2), resp::bulk("id"),
       resp::integer(static_cast<int64_t>(c.id)), resp::bulk("mode"), resp::bulk("standalone"),
       resp::bulk("role"), resp::bulk("master"), resp::bulk("modules"), "*0\r\n"},
      resp3);
}

std::string RespGateway::client_command(Conn& c, const std::vector<std::string>& args) {
  if (args.size() < 2) return wrong_args("client");
  const std::string sub = upper(args[1]);
  auto describe = [this](const Conn& x) {
    return "id=" + std::to_string(x.id) + " name=" + x.name + " lib-name=" + x.lib_name +
           " lib-ver=" + x.lib_ver + " qbuf=" + std::to_string(x.in.size()) +
           " omem=" + std::to_string(x.out.size()) +
           " user=" + (options_.requirepass.empty() || x.authenticated ? "default" : "(none)");
  };
  if (sub == "SETNAME" && args.size() == 3) {
    if (!valid_name(args[2])) {
      return resp::error("ERR Client names cannot contain spaces, newlines or special characters.");
    }
    c.name = args[2];
    return resp::simple("OK");
  }
  if (sub == "GETNAME" && args.size() == 2)
    return c.name.empty() ? resp::null_reply(c.resp3) : resp::bulk(c.name);
  if (sub == "ID" && args.size() == 2) return resp::integer(static_cast<int64_t>(c.id));
  if (sub == "SETINFO" && args.size() == 4) {
    const std::string attr = upper(args[2]);
    if (!valid_name(args[3]) && !args[3].empty()) {
      return resp::error("ERR " + lower(attr) +
                         " cannot contain spaces, newlines or special characters.");
    }
    if (attr == "LIB-NAME") {
      c.lib_name = args[3];
    } else if (attr == "LIB-VER") {
      c.lib_ver = args[3];
    } else {
      return resp::error("ERR Unrecognized option '" + args[2].substr(0, 64) + "'");
    }
    return resp::simple("OK");
  }
  if (sub == "INFO" && args.size() == 2) return resp::bulk(describe(c) + "\n");
  if (sub == "LIST" && args.size() == 2) {
    std::string all;
    for (const auto& [id, x] : conns_)
      if (!x.gone) all += describe(x) + "\n";
    return resp::bulk(all);
  }
  // (CLIENT NO-EVICT and NO-TOUCH change nothing here: accepted.)
  if ((sub == "NO-EVICT" || sub == "NO-TOUCH") && args.size() == 3) return resp::simple("OK");
  return resp::error("ERR unknown subcommand or wrong number of arguments for 'CLIENT|" +
                     lower(args[1]).substr(0, 32) +
                     "' (sluice-kv: SETNAME, GETNAME, ID, SETINFO, "
                     "INFO, LIST)");
}

std::string RespGateway::config_command(const Conn& c, const std::vector<std::string>& args) const {
  if (args.size() < 2) return wrong_args("config");
  const std::string sub = upper(args[1]);
  if (sub == "GET") {
    if (args.size() < 3) return wrong_args("config|get");
    // What this gateway and its store run with (sluice-kv run's options);
    // the password is never shown.
    const std::vector<std::pair<std::string, std::string>> known = {
        {"bind", options_.bind},
        {"port", std::to_string(port_)},
        {"protected-mode", options_.protected_mode ? "yes" : "no"},
        {"maxclients", std::to_string(options_.maxclients)},
        {"maxmemory-clients", std::to_string(options_.maxmemory_clients)},
        {"proto-max-bulk-len", std::to_string(options_.max_bulk)},
        {"client-query-buffer-limit", std::to_string(options_.query_buffer_limit)},
        {"databases", "1"},
        {"appendonly", "no"},
        {"save", ""},
        {"maxmemory-policy", "noeviction"},
    };
    std::vector<std::string> items;
    for (const auto& [k, v] : known) {
      for (size_t i = 2; i < args.size(); ++i) {
        if (glob(lower(args[i]).c_str(), k.c_str())) {
          items.push_back(resp::bulk(k));
          items.push_back(resp::bulk(v));
          break;
        }
      }
    }
    return map_of(items, c.resp3);
  }
  if (sub == "SET") {
    return resp::error(
        "ERR CONFIG SET is not supported: sluice-kv's settings are given when the "
        "job starts (sluice-kv run --help)" +
        (args.size() > 2 ? "; '" + args[2].substr(0, 64) + "' cannot be changed" : std::string()));
  }
  if (sub == "RESETSTAT") return resp::simple("OK");
  return resp::error("ERR unknown subcommand '" + args[1].substr(0, 64) +
                     "'. Try CONFIG GET or CONFIG SET.");
}

std::string RespGateway::info(const std::vector<std::string>& args) const {
  // Sections as Redis names them; no argument: the default set.
  std::vector<std::string> want;
  for (size_t i = 1; i < args.size(); ++i) want.push_back(lower(args[i]));
  auto wanted = [&](const char* section) {
    if (want.empty()) return true;
    for (const std::string& w : want)
      if (w == section || w == "all" || w == "everything" || w == "default") return true;
    return false;
  };
  std::string s;
  if (wanted("server")) {
    s += "# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\nsluice_kv:1\r\n"
         "tcp_port:" +
         std::to_string(port_) + "\r\nprocess_id:" + std::to_string(::getpid()) + "\r\n\r\n";
  }
  if (wanted("clients")) {
    // (blocked_clients: those a blocking command parked, resp_blocking.cc.)
    s += "# Clients\r\nconnected_clients:" + std::to_string(conns_.size()) +
         "\r\nmaxclients:" + std::to_string(options_.maxclients) +
         "\r\nblocked_clients:" + std::to_string(parked_) + "\r\n\r\n";
  }
  if (wanted("memory")) {
    const uint64_t rss = resident_bytes();
    s += "# Memory\r\nused_memory_rss:" + std::to_string(rss) +
         "\r\nmem_clients_normal:" + std::to_string(buffered_) +
         "\r\nmaxmemory_clients:" + std::to_string(options_.maxmemory_clients) + "\r\n\r\n";
  }
  if (wanted("stats")) {
    s += "# Stats\r\ntotal_connections_received:" + std::to_string(stats_.connections) +
         "\r\ntotal_commands_processed:" + std::to_string(stats_.requests) +
         "\r\nrejected_connections:" + std::to_string(stats_.refused_clients) +
         "\r\nevicted_clients:" + std::to_string(stats_.evicted) +
         "\r\ntotal_error_replies_protocol:" + std::to_string(stats_.protocol_errors) +
         "\r\nsecurity_attacks_dropped:" + std::to_string(stats_.http_requests) +
         "\r\nauth_failures:" + std::to_string(stats_.auth_failures) +
         "\r\nexpired_keys:" + std::to_string(stats_.expired_keys) +
         "\r\nexpire_sweeps:" + std::to_string(stats_.sweeps) + "\r\n\r\n";
  }
  if (wanted("replication")) s += "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n";
  return resp::bulk(s);
}

}  // namespace kv
