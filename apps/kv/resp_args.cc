// The argument forms several RESP commands share (resp.h): the MPOP
// family's keys, end and count, and the move family's two ends.
#include "resp.h"
#include "store.h"

namespace kv::resp {

std::string mpop_args(const std::vector<std::string>& args, size_t first, std::string_view a,
                      std::string_view b, std::vector<std::string>* keys, std::string* end,
                      int64_t* count) {
  // (Redis 7.0's lmpopGenericCommand and zmpopGenericCommand: their order
  // of checks and their words.)
  int64_t n = 0;
  if (!parse_integer(args[first], &n) || n < 1)
    return error("ERR numkeys should be greater than 0");
  if (static_cast<uint64_t>(n) >= args.size() - (first + 1)) return error("ERR syntax error");
  const size_t where = first + 1 + static_cast<size_t>(n);
  *end = lower(args[where]);
  if (*end != a && *end != b) return error("ERR syntax error");
  *count = 1;
  bool counted = false;
  for (size_t j = where + 1; j < args.size(); ++j) {
    if (!counted && lower(args[j]) == "count" && j + 1 < args.size()) {
      counted = true;
      if (!parse_integer(args[++j], count) || *count < 1)
        return error("ERR count should be greater than 0");
    } else {
      return error("ERR syntax error");
    }
  }
  keys->assign(args.begin() + static_cast<std::ptrdiff_t>(first + 1),
               args.begin() + static_cast<std::ptrdiff_t>(where));
  return {};
}

std::string move_ends(const std::vector<std::string>& args, size_t at, std::string* ends) {
  for (size_t i = 0; i < 2; ++i) {
    const std::string word = lower(args[at + i]);
    if (word != "left" && word != "right") return error("ERR syntax error");
    (*ends)[i] = word == "left" ? 'L' : 'R';
  }
  return {};
}

}  // namespace kv::resp
