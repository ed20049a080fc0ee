#include "history.h"

#include <cinttypes>
#include <cstdio>
#include <fstream>

namespace kv {

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

}  // namespace

std::string history_line(const Completed& h) {
  char times[96];
  std::snprintf(times, sizeof(times), ",\"call\":%" PRIu64 ",\"return\":%" PRIu64 "}", h.invoked_ms,
                h.completed_ms);
  return "{\"client\":" + std::to_string(h.cmd.client) + ",\"op\":\"" + op_name(h.cmd.op) +
         "\",\"key\":" + quoted(h.cmd.key) + ",\"value\":" + quoted(h.cmd.value) +
         ",\"expected\":" + quoted(h.cmd.expected) + ",\"ok\":" + (h.result.ok ? "true" : "false") +
         ",\"out\":" + quoted(h.result.value) + times;
}

bool write_history(const std::string& path, const std::vector<Completed>& history,
                   std::string* error) {
  std::ofstream out(path, std::ios::trunc);
  for (const Completed& h : history) out << history_line(h) << '\n';
  out.close();
  if (!out) {
    *error = "cannot write the history file '" + path + "'";
    return false;
  }
  return true;
}

}  // namespace kv
