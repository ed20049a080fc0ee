#include "history.h"

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>

namespace kv {

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch >= 0x80) {
      // Every byte as one code point (U+0000..U+00FF), so that the JSON is
      // valid and kv-porcupine gets the bytes back one for one: written raw,
      // a byte of 0x80 and above is not UTF-8, and a JSON decoder turns
      // each into U+FFFD, so that two different values read as equal.
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
  const bool fine = h.completed_us != 0 || h.invoked_us != 0;
  const uint64_t call = fine ? h.invoked_us : h.invoked_ms;
  if (h.unknown) {
    std::snprintf(times, sizeof(times), ",\"unknown\":true,\"call\":%" PRIu64 "}", call);
  } else {
    std::snprintf(times, sizeof(times), ",\"call\":%" PRIu64 ",\"return\":%" PRIu64 "}", call,
                  fine ? h.completed_us : h.completed_ms);
  }
  std::string line = "{\"client\":" + std::to_string(h.cmd.client) + ",\"op\":\"" +
                     op_name(h.cmd.op) + "\",\"key\":" + quoted(h.cmd.key) +
                     ",\"value\":" + quoted(h.cmd.value) +
                     ",\"expected\":" + quoted(h.cmd.expected);
  // Time and expiry, where the command has them: its stamp, what it does
  // with the key's deadline (absent: clears it) and the conditions.
  if (h.cmd.now_ms != 0) line.append(",\"now\":").append(std::to_string(h.cmd.now_ms));
  if (h.cmd.ttl == Ttl::kKeep) line.append(",\"ttl\":\"keep\"");
  if (h.cmd.ttl == Ttl::kSet) {
    line.append(",\"ttl\":\"set\",\"deadline\":").append(std::to_string(h.cmd.deadline_ms));
  }
  if (h.cmd.ttl_if != 0) line.append(",\"if\":").append(std::to_string(h.cmd.ttl_if));
  if (!h.unknown) {
    if (h.result.refused) line.append(",\"refused\":true");
    line.append(",\"ok\":").append(h.result.ok ? "true" : "false");
    Swept swept;
    if (h.cmd.op == Op::kSweep && parse_sweep_result(h.result.value, &swept)) {
      // The keys it removed, each an operation on its key for the checker.
      line.append(",\"out\":\"\",\"keys\":[");
      for (size_t i = 0; i < swept.keys.size(); ++i)
        line.append(i == 0 ? "" : ",").append(quoted(swept.keys[i]));
      line.append("]");
    } else {
      line.append(",\"out\":").append(quoted(h.result.value));
    }
  }
  return line.append(times);
}

std::vector<std::string> latency_report(const std::vector<Completed>& history) {
  std::vector<std::string> lines;
  std::map<std::string, std::vector<uint64_t>> by_op;
  uint64_t first = UINT64_MAX, last = 0;
  for (const Completed& h : history) {
    if (h.unknown) continue;  // (no completion time)
    if (h.completed_us == 0) return lines;
    by_op[op_name(h.cmd.op)].push_back(h.completed_us - h.invoked_us);
    first = std::min(first, h.invoked_us);
    last = std::max(last, h.completed_us);
  }
  if (by_op.empty()) return lines;
  size_t known = 0;
  for (const auto& [op, us] : by_op) known += us.size();
  const double seconds = static_cast<double>(last - first) / 1e6;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "throughput: %zu operations in %.3f s = %.0f ops/s", known,
                seconds, seconds > 0 ? static_cast<double>(known) / seconds : 0.0);
  lines.emplace_back(buf);
  for (auto& [op, us] : by_op) {
    std::sort(us.begin(), us.end());
    auto at = [&](double q) {
      return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))];
    };
    std::snprintf(buf, sizeof(buf),
                  "latency %s: %zu operations, p50 %" PRIu64 " us, p99 %" PRIu64 " us, max %" PRIu64
                  " us",
                  op.c_str(), us.size(), at(0.5), at(0.99), us.back());
    lines.emplace_back(buf);
  }
  return lines;
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
