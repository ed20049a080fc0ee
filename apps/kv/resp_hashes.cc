// The RESP gateway's hash commands (resp_gateway.h lists them), each one
// log entry on one key (store_hashes.cc), and their answers.
#include <string>
#include <vector>

#include "resp.h"
#include "resp_gateway.h"

namespace kv {

namespace {

using resp::lower;
using resp::wrong_args;

// HGETALL's answer: RESP3 has maps; RESP2 a flat array of fields and values.
std::string map_header(size_t pairs, bool resp3) {
  if (!resp3) return resp::array_header(2 * pairs);
  std::string out(1, '%');  // (append: GCC 12 warns falsely on chains of string +)
  return out.append(std::to_string(pairs)).append("\r\n");
}

}  // namespace

bool RespGateway::submit_keyed(Conn& c, const std::string& name,
                               const std::vector<std::string>& args, Client& client, size_t index,
                               Reply& r, int64_t now, Keyed k) {
  const size_t bytes = args[1].size() + k.value.size() + k.expected.size();
  if (bytes > options_.max_entry_bytes) {
    std::string text = "ERR sluice-kv takes keys and values of at most ";
    text.append(std::to_string(options_.max_entry_bytes))
        .append(" bytes in all in one command (--max-value-bytes); this ")
        .append(lower(name))
        .append(" takes ")
        .append(std::to_string(bytes));
    return r.refuse(resp::error(text));
  }
  Command cmd;
  cmd.op = k.op;
  cmd.key = args[1];
  cmd.value = std::move(k.value);
  cmd.expected = std::move(k.expected);
  cmd.now_ms = now;
  r.kind = k.kind;
  submit(c, client, index, r, std::move(cmd));
  return true;
}

bool RespGateway::hash_command(Conn& c, const std::string& name,
                               const std::vector<std::string>& args, Client& client, size_t index,
                               Reply& r, int64_t now) {
  if (name.empty() || name[0] != 'H') return false;
  auto send = [&](Op op, std::string value, std::string field, Kind kind) {
    return submit_keyed(c, name, args, client, index, r, now,
                        {op, std::move(value), std::move(field), kind});
  };
  auto names = [&args] {
    return encode_names(std::vector<std::string>(args.begin() + 2, args.end()));
  };
  if (name == "HSET" || name == "HMSET") {
    if (args.size() < 4 || args.size() % 2 != 0) return r.answer(wrong_args(lower(name)));
    FieldValues pairs;
    for (size_t i = 2; i + 1 < args.size(); i += 2) pairs.emplace_back(args[i], args[i + 1]);
    return send(Op::kHSet, encode_fields(pairs), "",
                name == "HSET" ? Kind::kHashCount : Kind::kMset);
  }
  if (name == "HSETNX") {
    if (args.size() != 4) return r.answer(wrong_args("hsetnx"));
    return send(Op::kHSetNx, args[3], args[2], Kind::kMsetNx);
  }
  if (name == "HGET" || name == "HEXISTS" || name == "HSTRLEN") {
    if (args.size() != 3) return r.answer(wrong_args(lower(name)));
    return send(Op::kHGet, "", args[2],
                name == "HGET"      ? Kind::kGet
                : name == "HEXISTS" ? Kind::kMsetNx
                                    : Kind::kLength);
  }
  if (name == "HMGET" || name == "HDEL") {
    if (args.size() < 3) return r.answer(wrong_args(lower(name)));
    return send(name == "HMGET" ? Op::kHMGet : Op::kHDel, names(), "",
                name == "HMGET" ? Kind::kHashArray : Kind::kHashCount);
  }
  if (name == "HLEN" || name == "HGETALL" || name == "HKEYS" || name == "HVALS") {
    if (args.size() != 2) return r.answer(wrong_args(lower(name)));
    return send(name == "HLEN" ? Op::kHLen : Op::kHGetAll, "", "",
                name == "HLEN"      ? Kind::kHashCount
                : name == "HGETALL" ? Kind::kHashAll
                : name == "HKEYS"   ? Kind::kHashKeys
                                    : Kind::kHashVals);
  }
  if (name == "HSCAN") {
    if (args.size() < 3) return r.answer(wrong_args("hscan"));
    ScanRequest q;
    std::string pattern;
    if (std::string error = scan_options(args, 2, "NOVALUES", &q, &pattern); !error.empty())
      return r.answer(std::move(error));
    return send(Op::kHScan, encode_scan_request(q), std::move(pattern), Kind::kScan);
  }
  if (name == "HINCRBY" || name == "HINCRBYFLOAT") {
    if (args.size() != 4) return r.answer(wrong_args(lower(name)));
    int64_t n = 0;
    double f = 0;
    if (name == "HINCRBY" && !parse_integer(args[3], &n))
      return r.answer(resp::error("ERR value is not an integer or out of range"));
    if (name == "HINCRBYFLOAT" && !parse_float(args[3], &f))
      return r.answer(resp::error("ERR value is not a valid float"));
    return send(name == "HINCRBY" ? Op::kHIncrBy : Op::kHIncrByFloat, args[3], args[2],
                name == "HINCRBY" ? Kind::kHashInt : Kind::kHashFloat);
  }
  if (name == "HRANDFIELD") {
    // (Redis 7.0's hrandfieldCommand: the count, then the syntax.)
    if (args.size() < 2) return r.answer(wrong_args("hrandfield"));
    // A seed for this command alone (splitmix64's step; the store mixes it).
    const std::string seed = std::to_string(seeds_ += 0x9e3779b97f4a7c15ull);
    if (args.size() == 2) return send(Op::kHRandField, seed, encode_names({"", ""}), Kind::kGet);
    int64_t n = 0;
    if (!parse_integer(args[2], &n))
      return r.answer(resp::error("ERR value is not an integer or out of range"));
    if (n == INT64_MIN)
      return r.answer(
          resp::error("ERR value is out of range, value must between "
                      "-9223372036854775807 and 9223372036854775807"));
    if (args.size() > 4 || (args.size() == 4 && lower(args[3]) != "withvalues"))
      return r.answer(resp::error("ERR syntax error"));
    const bool with_values = args.size() == 4;
    if (with_values && (n < -INT64_MAX / 2 || n > INT64_MAX / 2))
      return r.answer(resp::error("ERR value is out of range"));
    // (Each field chosen takes at least 4 bytes of the store's reply.)
    if (n < 0 && uint64_t(-n) > options_.max_entry_bytes / 4)
      return r.answer(resp::error("ERR value is out of range: sluice-kv answers at most " +
                                  std::to_string(options_.max_entry_bytes) +
                                  " bytes in one reply (--max-value-bytes)"));
    return send(Op::kHRandField, seed, encode_names({args[2], with_values ? "1" : ""}),
                with_values ? Kind::kHashRandomPairs : Kind::kHashRandom);
  }
  return false;
}

void RespGateway::fill_hash(Reply& r, const Result& result) {
  auto malformed = [&r] { r.text = resp::error("ERR the store answered a malformed hash reply"); };
  switch (r.kind) {
    case Kind::kHashCount: {
      int64_t n = 0;
      if (!parse_integer(result.value, &n)) return malformed();
      r.text = resp::integer(n);
      return;
    }
    case Kind::kHashArray: {
      std::vector<Result> values;
      if (!result.ok) {
        r.text = resp::error(result.value);
        return;
      }
      if (!decode_results(result.value, &values)) return malformed();
      r.text = resp::array_header(values.size());
      for (const Result& v : values)
        r.text += v.ok ? resp::bulk(v.value) : resp::null_reply(r.resp3);
      return;
    }
    case Kind::kHashAll:
    case Kind::kHashKeys:
    case Kind::kHashVals: {
      FieldValues pairs;
      if (!decode_fields(result.value, &pairs)) return malformed();
      r.text = r.kind == Kind::kHashAll ? map_header(pairs.size(), r.resp3)
                                        : resp::array_header(pairs.size());
      for (const auto& [f, v] : pairs) {
        if (r.kind != Kind::kHashVals) r.text += resp::bulk(f);
        if (r.kind != Kind::kHashKeys) r.text += resp::bulk(v);
      }
      return;
    }
    case Kind::kHashInt:
    case Kind::kHashFloat:
      r.text = increment_reply(result, r.kind == Kind::kHashFloat, true);
      return;
    case Kind::kHashRandom:
    case Kind::kHashRandomPairs: {
      std::vector<std::string> items;
      if (!result.ok) {  // (a reply too long)
        r.text = resp::error(result.value);
        return;
      }
      if (!decode_names(result.value, &items)) return malformed();
      // WITHVALUES: RESP2 a flat array, RESP3 an array of [field, value].
      const bool pairs = r.kind == Kind::kHashRandomPairs;
      r.text = resp::array_header(pairs && r.resp3 ? items.size() / 2 : items.size());
      for (size_t i = 0; i < items.size(); ++i) {
        if (pairs && r.resp3 && i % 2 == 0) r.text += resp::array_header(2);
        r.text += resp::bulk(items[i]);
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace kv
