// INCRBYFLOAT and SETRANGE on a plain map (store.h: Op::kIncrByFloat,
// Op::kSetRange), for execute() and so for the Store.
#include <charconv>
#include <cmath>
#include <cstring>

#include "store.h"

namespace kv {

bool parse_float(std::string_view text, double* out) {
  // A decimal number: [+-] digits [. digits] [e [+-] digits], with digits
  // on at least one side of the point; no spaces, hex, inf or nan.
  size_t i = 0;
  auto digits = [&] {
    const size_t from = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - from;
  };
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  const size_t sign = i;
  size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  if (i != text.size()) return false;
  // (from_chars takes no '+'; a '-' it reads itself.)
  const char* from = text.data() + (sign > 0 && text[0] == '+' ? 1 : 0);
  double v = 0;
  const auto [end, ec] = std::from_chars(from, text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) return false;
  *out = v == 0 ? 0.0 : v;  // (no "-0")
  return true;
}

std::string format_float(double v) {
  // The fewest digits that read back as v, without an exponent: exactly
  // specified (std::to_chars), so every replica prints the same.
  char buf[400];
  const auto [end, ec] =
      std::to_chars(buf, buf + sizeof(buf), v == 0 ? 0.0 : v, std::chars_format::fixed);
  return ec == std::errc() ? std::string(buf, end) : std::string();
}

namespace detail {

Result execute_string(Keyspace& data, const Command& c) {
  Result r;
  if (c.op == Op::kIncrByFloat) {
    auto it = data.find(c.key);
    double now = 0, by = 0;
    if ((it != data.end() && !parse_float(it->second.value, &now)) || !parse_float(c.value, &by)) {
      r.value = "not a float";
      return r;
    }
    const double sum = now + by;
    if (!std::isfinite(sum)) {
      r.value = "nan or infinity";
      return r;
    }
    r.value = format_float(sum);
    data[c.key].value = r.value;  // (keeps the deadline, as Redis's INCRBYFLOAT does)
    r.ok = true;
    return r;
  }
  if (c.op == Op::kSetRange) {
    int64_t offset = 0;
    if (!parse_integer(c.expected, &offset) || offset < 0) {
      r.value = "offset is out of range";
      return r;
    }
    auto it = data.find(c.key);
    r.ok = true;
    if (c.value.empty()) {
      // Nothing written, no key made: the length as it is.
      r.value = std::to_string(it == data.end() ? 0 : it->second.value.size());
      return r;
    }
    std::string& v = data[c.key].value;  // (keeps the deadline)
    const auto at = static_cast<size_t>(offset);
    if (v.size() < at + c.value.size()) v.resize(at + c.value.size(), '\0');
    std::memcpy(v.data() + at, c.value.data(), c.value.size());
    r.value = std::to_string(v.size());
    return r;
  }
  return r;
}

}  // namespace detail

}  // namespace kv
