#include "resp.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace kv::resp {

namespace {

// Where the line that starts at `at` ends (its CR); npos if no whole line
// is there yet.
size_t line_end(std::string_view in, size_t at) { return in.find("\r\n", at); }

bool parse_int(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

Parsed fail(std::string* error, const std::string& what) {
  error->assign("Protocol error: ").append(what);
  return Parsed::kError;
}

Parsed parse_inline(std::string_view in, std::vector<std::string>* args, size_t* used,
                    std::string* error) {
  const size_t nl = in.find('\n');
  if (nl == std::string_view::npos) {
    if (in.size() > kMaxInline) return fail(error, "too big inline request");
    return Parsed::kIncomplete;
  }
  if (nl > kMaxInline) return fail(error, "too big inline request");
  std::string_view line = in.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  args->clear();
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size()) break;
    std::string word;
    if (line[i] == '"') {  // a quoted argument, with \" and \\ escapes
      ++i;
      bool closed = false;
      while (i < line.size()) {
        char c = line[i++];
        if (c == '\\' && i < line.size()) {
          word.push_back(line[i++]);
        } else if (c == '"') {
          closed = true;
          break;
        } else {
          word.push_back(c);
        }
      }
      if (!closed) return fail(error, "unbalanced quotes in request");
    } else {
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') word.push_back(line[i++]);
    }
    if (args->size() == kMaxArgs) return fail(error, "too many arguments");
    args->push_back(std::move(word));
  }
  *used = nl + 1;
  return Parsed::kRequest;
}

Parsed parse_reply_at(std::string_view in, size_t at, int depth, Reply* reply, size_t* used,
                      std::string* error) {
  if (at >= in.size()) return Parsed::kIncomplete;
  const size_t end = line_end(in, at + 1);
  if (end == std::string_view::npos) {
    if (in.size() - at > kMaxInline) return fail(error, "too long a reply line");
    return Parsed::kIncomplete;
  }
  const std::string_view line = in.substr(at + 1, end - at - 1);
  const size_t next = end + 2;
  *reply = Reply{};
  switch (in[at]) {
    case '+':
    case '-':
      reply->kind = in[at] == '+' ? Reply::Kind::kSimple : Reply::Kind::kError;
      reply->text.assign(line);
      *used = next;
      return Parsed::kRequest;
    case ':':
      if (!parse_int(line, &reply->integer)) return fail(error, "invalid integer reply");
      reply->kind = Reply::Kind::kInteger;
      *used = next;
      return Parsed::kRequest;
    case '$': {
      int64_t n = 0;
      if (!parse_int(line, &n) || n < -1 || n > static_cast<int64_t>(kMaxBulk)) {
        return fail(error, "invalid bulk length");
      }
      if (n == -1) {
        reply->kind = Reply::Kind::kNull;
        *used = next;
        return Parsed::kRequest;
      }
      const size_t len = static_cast<size_t>(n);
      if (in.size() < next + len + 2) return Parsed::kIncomplete;
      if (in.substr(next + len, 2) != "\r\n") return fail(error, "a bulk string without its CRLF");
      reply->kind = Reply::Kind::kBulk;
      reply->text.assign(in.substr(next, len));
      *used = next + len + 2;
      return Parsed::kRequest;
    }
    case '*': {
      int64_t n = 0;
      if (!parse_int(line, &n) || n < -1 || n > static_cast<int64_t>(kMaxArgs)) {
        return fail(error, "invalid multibulk length");
      }
      if (n == -1) {
        reply->kind = Reply::Kind::kNull;
        *used = next;
        return Parsed::kRequest;
      }
      if (depth >= 8) return fail(error, "arrays nested too deep");
      reply->kind = Reply::Kind::kArray;
      size_t pos = next;
      for (int64_t i = 0; i < n; ++i) {
        Reply item;
        size_t item_end = 0;
        const Parsed p = parse_reply_at(in, pos, depth + 1, &item, &item_end, error);
        if (p != Parsed::kRequest) return p;
        reply->items.push_back(std::move(item));
        pos = item_end;
      }
      *used = pos;
      return Parsed::kRequest;
    }
    default:
      return fail(error, "a reply starts with '" + std::string(1, in[at]) + "'");
  }
}

}  // namespace

Parsed parse_reply(std::string_view in, Reply* reply, size_t* used, std::string* error) {
  return parse_reply_at(in, 0, 0, reply, used, error);
}

Parsed parse_request(std::string_view in, std::vector<std::string>* args, size_t* used,
                     std::string* error, size_t max_bulk) {
  if (in.empty()) return Parsed::kIncomplete;
  if (in[0] != '*') return parse_inline(in, args, used, error);
  size_t end = line_end(in, 1);
  if (end == std::string_view::npos) {
    if (in.size() > 32) return fail(error, "invalid multibulk length");
    return Parsed::kIncomplete;
  }
  int64_t count = 0;
  if (!parse_int(in.substr(1, end - 1), &count) || count > static_cast<int64_t>(kMaxArgs))
    return fail(error, "invalid multibulk length");
  size_t at = end + 2;
  args->clear();
  for (int64_t k = 0; k < count; ++k) {
    if (at >= in.size()) return Parsed::kIncomplete;
    if (in[at] != '$') {
      std::string what = "expected '$', got '";
      what.push_back(in[at]);
      what.push_back('\'');
      return fail(error, what);
    }
    end = line_end(in, at + 1);
    if (end == std::string_view::npos) {
      if (in.size() - at > 32) return fail(error, "invalid bulk length");
      return Parsed::kIncomplete;
    }
    int64_t len = 0;
    if (!parse_int(in.substr(at + 1, end - at - 1), &len) || len < 0)
      return fail(error, "invalid bulk length");
    if (static_cast<uint64_t>(len) > max_bulk) {
      return fail(error, "invalid bulk length: " + std::to_string(len) +
                             " bytes is over the limit of " + std::to_string(max_bulk));
    }
    const size_t data = end + 2;
    if (in.size() < data + static_cast<size_t>(len) + 2) return Parsed::kIncomplete;
    if (in.substr(data + len, 2) != "\r\n") return fail(error, "bulk string not ended by CRLF");
    args->emplace_back(in.substr(data, static_cast<size_t>(len)));
    at = data + static_cast<size_t>(len) + 2;
  }
  *used = at;
  return Parsed::kRequest;
}

namespace {
// (Built with append: GCC 12 warns falsely on chains of string +.)
std::string framed(char kind, std::string_view s) {
  std::string out(1, kind);
  out.append(s);
  out.append("\r\n");
  return out;
}
std::string one_line(char kind, std::string_view s) {
  std::string out = framed(kind, s);
  for (size_t i = 1; i + 2 < out.size(); ++i)
    if (out[i] == '\r' || out[i] == '\n') out[i] = ' ';
  return out;
}
}  // namespace

std::string simple(std::string_view s) { return one_line('+', s); }
std::string error(std::string_view s) { return one_line('-', s); }
std::string integer(int64_t n) { return framed(':', std::to_string(n)); }
std::string bulk(std::string_view s) {
  std::string out = framed('$', std::to_string(s.size()));
  out.append(s);
  out.append("\r\n");
  return out;
}
std::string null_bulk() { return "$-1\r\n"; }
std::string null_reply(bool resp3) { return resp3 ? "_\r\n" : null_bulk(); }
std::string array_header(size_t n) { return framed('*', std::to_string(n)); }
std::string array(const std::vector<std::string_view>& items) {
  std::string out = array_header(items.size());
  for (std::string_view s : items) out.append(bulk(s));
  return out;
}

std::string wrong_args(std::string_view name) {
  return error("ERR wrong number of arguments for '" + std::string(name) + "' command");
}
std::string unknown_command(const std::vector<std::string>& args) {
  // As Redis's `%.*s` prints a C string: up to the first NUL, at most `max`.
  auto c_string = [](std::string_view s, size_t max) {
    return s.substr(0, std::min(s.find('\0'), max));
  };
  std::string shown;
  for (size_t i = 1; i < args.size() && shown.size() < 128; ++i) {
    const size_t room = 128 - shown.size();
    shown += '\'';
    shown += c_string(args[i], room);
    shown += "' ";
  }
  return error("ERR unknown command '" + std::string(c_string(args[0], 128)) +
               "', with args beginning with: " + shown);
}
std::string oom() { return error("OOM command not allowed when used memory > 'maxmemory'."); }
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace kv::resp
