#include "observe/counters_report.h"

#include <cstdio>

namespace sluice::detail::counters {

std::string describe(const Reading& e) {
  if (e.role == Role::kRegion) {
    std::string s = "region '" + e.flow + "' handle " + std::to_string(e.slot) + " of rank " +
                    std::to_string(e.rank);
    if (!e.peer_detail.empty()) s += " (owner rank " + std::to_string(e.peer_detail[0].rank) + ")";
    s += std::string(" ") + to_string(e.state) + ": " + std::to_string(e.ops) + " operations, " +
         std::to_string(e.bytes) + " bytes";
    if (e.op_timeouts != 0) s += ", " + std::to_string(e.op_timeouts) + " timed out";
    if (e.op_failures != 0) s += ", " + std::to_string(e.op_failures) + " failed";
    if (!e.cause.empty()) s += "; failed: " + e.cause;
    return s;
  }
  std::string s = "flow '" + e.flow + "' " + to_string(e.role) + " (" + std::to_string(e.rank) +
                  "," + std::to_string(e.slot) + ") " + to_string(e.state) + ": ";
  if (e.record_size != 0) {
    s += std::to_string(e.bytes / e.record_size) + " records";
  } else {
    s += std::to_string(e.bytes) + " bytes";
  }
  s += " in " + std::to_string(e.segments) + " segments";
  if (e.credit_waits != 0) {
    s += ", " + std::to_string(e.credit_waits) + " credit waits (" +
         std::to_string(e.credit_wait_ns / 1000000) + " ms)";
  }
  if (e.parks != 0) s += ", " + std::to_string(e.parks) + " parks";
  if (e.ops != 0) {
    s += ", " + std::to_string(e.ops) + " sequence numbers taken";
    if (e.op_timeouts + e.op_failures != 0) {
      s += " (" + std::to_string(e.op_timeouts + e.op_failures) + " failed)";
    }
  }
  if (!e.cause.empty()) s += "; failed: " + e.cause;
  return s;
}

bool open_flow_endpoint(const Reading& e) {
  return e.role != Role::kRegion && e.state != State::kEnded && e.state != State::kDestroyed;
}

std::vector<std::string> report_lines(const std::vector<Reading>& endpoints, uint64_t now_ns,
                                      const std::function<std::string(uint32_t rank)>& host_of,
                                      bool mark_open) {
  std::vector<std::string> lines;
  for (const Reading& e : endpoints) {
    lines.push_back("  " + describe(e) +
                    (mark_open && open_flow_endpoint(e) ? "  <- not ended" : ""));
    if (std::string w = waiting_for(e, now_ns, host_of); !w.empty()) lines.push_back("    " + w);
  }
  return lines;
}

std::string waiting_for(const Reading& e, uint64_t now_ns,
                        const std::function<std::string(uint32_t rank)>& host_of) {
  if (e.role == Role::kSource && e.waiting_since_ns != 0 &&
      (e.state == State::kOpen || e.state == State::kClosing)) {
    // A source blocked on a full ring: whose, and for how long.
    const double for_s =
        now_ns > e.waiting_since_ns ? static_cast<double>(now_ns - e.waiting_since_ns) * 1e-9 : 0.0;
    char head[96];
    std::snprintf(head, sizeof(head), "waiting %.1f s for credit from target ", for_s);
    std::string s = head;
    // (Built with append: GCC 12 warns falsely on chains of string +.)
    if (e.waiting_peer < e.peer_detail.size()) {
      const PeerReading& p = e.peer_detail[e.waiting_peer];
      const std::string host = host_of ? host_of(p.rank) : "";
      s.append("(").append(std::to_string(p.rank)).append(",").append(std::to_string(p.slot));
      s.append(") on rank ").append(std::to_string(p.rank));
      if (!host.empty()) s.append(" (").append(host).append(")");
    } else {
      s.append("#").append(std::to_string(e.waiting_peer)).append(" (not described)");
    }
    s.append(": its ring of ").append(std::to_string(e.ring_segments));
    s.append(
        " segments is full (that target takes nothing, or more slowly than this source "
        "pushes)");
    return s;
  }
  if (e.role != Role::kTarget || e.state == State::kEnded) return "";
  std::string waiting, ended;
  size_t n_waiting = 0;
  for (const PeerReading& p : e.peer_detail) {
    char name[32];
    std::snprintf(name, sizeof(name), "(%u,%u)", p.rank, p.slot);
    if (p.ended) {
      if (!ended.empty()) ended += ',';
      ended += name;
      continue;
    }
    ++n_waiting;
    const std::string host = host_of ? host_of(p.rank) : "";
    char heard[64] = "no segment taken yet";
    if (p.heard_ns != 0) {
      const double ago =
          now_ns > p.heard_ns ? static_cast<double>(now_ns - p.heard_ns) * 1e-9 : 0.0;
      std::snprintf(heard, sizeof(heard), "last segment taken %.1f s ago", ago);
    }
    if (!waiting.empty()) waiting += "; ";
    waiting += std::string(name) + " on rank " + std::to_string(p.rank) +
               (host.empty() ? "" : " (" + host + ")") + ": " + heard;
  }
  std::string s = n_waiting == 0
                      ? std::string("waiting for no described source")
                      : "waiting for source" + std::string(n_waiting > 1 ? "s " : " ") + waiting;
  if (!ended.empty()) s += "; " + ended + " ended";
  if (e.peers > e.peer_detail.size()) {
    s += "; " + std::to_string(e.peers - e.peer_detail.size()) + " more sources not described";
  }
  return s;
}

}  // namespace sluice::detail::counters
