// The RESP gateway's list commands (resp_gateway.h lists them), each one
// log entry on one key (LMOVE and RPOPLPUSH: on two, LMPOP on all its
// keys; store_lists.cc), and their answers. The blocking ones (BLPOP,
// BRPOP, BLMOVE, ...) are resp_blocking.cc's.
#include <string>
#include <vector>

#include "resp.h"
#include "resp_gateway.h"

namespace kv {

namespace {

using resp::lower;
using resp::wrong_args;

}  // namespace

bool RespGateway::list_command(Conn& c, const std::string& name,
                               const std::vector<std::string>& args, Client& client, size_t index,
                               Reply& r, int64_t now) {
  if (name.empty() || (name[0] != 'L' && name[0] != 'R')) return false;
  auto send = [&](Op op, std::string value, std::string expected, Kind kind) {
    return submit_keyed(c, name, args, client, index, r, now,
                        {op, std::move(value), std::move(expected), kind});
  };
  // Whether args[from..] are decimal integers as Redis takes them.
  auto integers = [&args](size_t from) {
    int64_t n = 0;
    for (size_t i = from; i < args.size(); ++i)
      if (!parse_integer(args[i], &n)) return false;
    return true;
  };
  const auto not_integer = [] {
    return resp::error("ERR value is not an integer or out of range");
  };
  if (name == "LPUSH" || name == "RPUSH" || name == "LPUSHX" || name == "RPUSHX") {
    if (args.size() < 3) return r.answer(wrong_args(lower(name)));
    const Op op = name == "LPUSH"    ? Op::kLPush
                  : name == "RPUSH"  ? Op::kRPush
                  : name == "LPUSHX" ? Op::kLPushX
                                     : Op::kRPushX;
    return send(op, encode_names(std::vector<std::string>(args.begin() + 2, args.end())), "",
                Kind::kHashCount);
  }
  if (name == "LPOP" || name == "RPOP") {
    if (args.size() != 2 && args.size() != 3) return r.answer(wrong_args(lower(name)));
    const Op op = name == "LPOP" ? Op::kLPop : Op::kRPop;
    if (args.size() == 2) return send(op, "", "", Kind::kGet);
    int64_t n = 0;
    if (!parse_integer(args[2], &n) || n < 0)
      return r.answer(resp::error("ERR value is out of range, must be positive"));
    return send(op, "", args[2], Kind::kListArray);
  }
  if (name == "LLEN") {
    if (args.size() != 2) return r.answer(wrong_args("llen"));
    return send(Op::kLLen, "", "", Kind::kHashCount);
  }
  if (name == "LRANGE" || name == "LTRIM") {
    if (args.size() != 4) return r.answer(wrong_args(lower(name)));
    if (!integers(2)) return r.answer(not_integer());
    return send(name == "LRANGE" ? Op::kLRange : Op::kLTrim, args[3], args[2],
                name == "LRANGE" ? Kind::kListArray : Kind::kListOk);
  }
  if (name == "LINDEX") {
    if (args.size() != 3) return r.answer(wrong_args("lindex"));
    if (!integers(2)) return r.answer(not_integer());
    return send(Op::kLIndex, "", args[2], Kind::kGet);
  }
  if (name == "LSET" || name == "LREM") {
    if (args.size() != 4) return r.answer(wrong_args(lower(name)));
    int64_t n = 0;
    if (!parse_integer(args[2], &n)) return r.answer(not_integer());
    return send(name == "LSET" ? Op::kLSet : Op::kLRem, args[3], args[2],
                name == "LSET" ? Kind::kListOk : Kind::kHashCount);
  }
  if (name == "LINSERT") {
    if (args.size() != 5) return r.answer(wrong_args("linsert"));
    const std::string where = lower(args[2]);
    if (where != "before" && where != "after") return r.answer(resp::error("ERR syntax error"));
    return send(Op::kLInsert, encode_names({args[3], args[4]}), where, Kind::kHashCount);
  }
  if (name == "LPOS") {
    if (args.size() < 3) return r.answer(wrong_args("lpos"));
    // Redis 7's options and errors, checked in the order given.
    std::string rank = "1", count, maxlen = "0";
    for (size_t i = 3; i < args.size(); i += 2) {
      const std::string opt = lower(args[i]);
      if (i + 1 >= args.size() || (opt != "rank" && opt != "count" && opt != "maxlen"))
        return r.answer(resp::error("ERR syntax error"));
      int64_t n = 0;
      const bool integer = parse_integer(args[i + 1], &n);
      if (opt == "rank") {
        if (!integer) return r.answer(not_integer());
        if (n == INT64_MIN)
          return r.answer(
              resp::error("ERR value is out of range, value must between -9223372036854775807 and "
                          "9223372036854775807"));
        if (n == 0)
          return r.answer(resp::error(
              "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
              "or use negative to start from the end of the list"));
        rank = args[i + 1];
      } else if (!integer || n < 0) {
        return r.answer(resp::error(opt == "count" ? "ERR COUNT can't be negative"
                                                   : "ERR MAXLEN can't be negative"));
      } else {
        (opt == "count" ? count : maxlen) = args[i + 1];
      }
    }
    return send(Op::kLPos, args[2], encode_names({rank, count, maxlen}),
                count.empty() ? Kind::kListPos : Kind::kListPosAll);
  }
  if (name == "LMOVE" || name == "RPOPLPUSH") {
    const bool lmove = name == "LMOVE";
    if (args.size() != (lmove ? 5u : 3u)) return r.answer(wrong_args(lower(name)));
    std::string ends = "RL";
    if (lmove) {
      if (std::string e = resp::move_ends(args, 3, &ends); !e.empty()) return r.answer(e);
    }
    return send(Op::kLMove, args[2], ends, Kind::kGet);
  }
  if (name == "LMPOP") {
    if (args.size() < 4) return r.answer(wrong_args("lmpop"));
    std::vector<std::string> sources;
    std::string end;
    int64_t count = 1;
    if (std::string e = resp::mpop_args(args, 1, "left", "right", &sources, &end, &count);
        !e.empty())
      return r.answer(e);
    // (The log entry's key is the first key; the count is no key.)
    const std::vector<std::string> keyed{args[0], sources.front()};
    if (sources.size() == 1) {
      // One key: its plain pop, which copies nothing (Reply::pop_key).
      r.pop_key = sources.front();
      return submit_keyed(
          c, name, keyed, client, index, r, now,
          {end == "left" ? Op::kLPop : Op::kRPop, "", std::to_string(count), Kind::kListMPop});
    }
    return submit_keyed(c, name, keyed, client, index, r, now,
                        {Op::kLMPop, encode_names(sources),
                         encode_names({end, std::to_string(count)}), Kind::kListMPop});
  }
  return false;
}

void RespGateway::fill_list(Reply& r, const Result& result) {
  switch (r.kind) {
    case Kind::kListArray: {
      if (!result.ok) {  // (LPOP with a count of an absent key: a null array)
        r.text = r.resp3 ? "_\r\n" : "*-1\r\n";
        return;
      }
      std::vector<std::string> values;
      if (!decode_names(result.value, &values)) {
        r.text = resp::error("ERR the store answered a malformed list reply");
        return;
      }
      r.text = resp::array_header(values.size());
      for (const std::string& v : values) r.text += resp::bulk(v);
      return;
    }
    case Kind::kListPos: {
      int64_t n = 0;
      r.text = !result.ok ? resp::null_reply(r.resp3)
               : parse_integer(result.value, &n)
                   ? resp::integer(n)
                   : resp::error("ERR the store answered a malformed lpos reply");
      return;
    }
    case Kind::kListPosAll: {
      std::vector<std::string> at;
      int64_t n = 0;
      if (!decode_names(result.value, &at)) {
        r.text = resp::error("ERR the store answered a malformed lpos reply");
        return;
      }
      r.text = resp::array_header(at.size());
      for (const std::string& i : at) r.text += resp::integer(parse_integer(i, &n) ? n : 0);
      return;
    }
    case Kind::kListOk:
      r.text = !result.ok && !result.value.empty() ? resp::error(result.value) : resp::simple("OK");
      return;
    case Kind::kBlockPop:
    case Kind::kListMPop: {
      if (!result.ok) {  // (none of its keys exists: a null array)
        r.text = !result.value.empty() ? resp::error(result.value) : r.resp3 ? "_\r\n" : "*-1\r\n";
        return;
      }
      std::vector<std::string> values, popped;
      const bool decoded = decode_names(result.value, &popped);
      // (A plain pop of one key, Reply::pop_key, answers its elements alone.)
      if (!r.pop_key.empty()) values.push_back(r.pop_key);
      values.insert(values.end(), popped.begin(), popped.end());
      if (!decoded || values.empty()) {
        r.text = resp::error("ERR the store answered a malformed list reply");
        return;
      }
      if (r.kind == Kind::kBlockPop) {  // BLPOP, BRPOP: the key and its one element
        r.text = resp::array_header(values.size());
        for (const std::string& v : values) r.text += resp::bulk(v);
        return;
      }
      r.text =
          resp::array_header(2) + resp::bulk(values[0]) + resp::array_header(values.size() - 1);
      for (size_t i = 1; i < values.size(); ++i) r.text += resp::bulk(values[i]);
      return;
    }
    default:
      return;
  }
}

}  // namespace kv
