#include "perf_stats.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "sluice/version.h"

namespace sluice::tool::perf {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    out.push_back(
        trim(text.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

bool parse_u32(std::string_view s, uint32_t* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::string fail_prefix(std::string_view option) { return std::string(option) + ": "; }

const char* kAllowedSizes = "multiples of 8 from 16 to 1024 (16, 24, 32, ..., 1016, 1024)";

}  // namespace

Summary summarize(std::vector<double> values) {
  Summary s;
  s.n = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.min = values.front();
  s.max = values.back();
  const size_t mid = values.size() / 2;
  s.median = values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
  return s;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  if (p <= 0) return values.front();
  if (p >= 100) return values.back();
  // Nearest rank: ceil(p/100 * n), 1-based.
  const double exact = p / 100.0 * static_cast<double>(values.size());
  size_t rank = static_cast<size_t>(exact);
  if (static_cast<double>(rank) < exact) ++rank;
  if (rank < 1) rank = 1;
  return values[rank - 1];
}

std::vector<NetnsHost> parse_netns_hosts(std::string_view text, std::string_view option) {
  const char* usage = "; use NS_A=IP_A,NS_B=IP_B, e.g. perfA=198.18.200.1,perfB=198.18.200.2";
  std::vector<NetnsHost> out;
  if (trim(text).empty()) throw std::invalid_argument(fail_prefix(option) + "no hosts given" + usage);
  for (std::string_view item : split_commas(text)) {
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw std::invalid_argument(fail_prefix(option) + "'" + std::string(item) + "' is not NS=IP" + usage);
    }
    NetnsHost h{std::string(trim(item.substr(0, eq))), std::string(trim(item.substr(eq + 1)))};
    if (h.netns.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
        std::string::npos) {
      throw std::invalid_argument(fail_prefix(option) + "namespace name '" + h.netns +
                                  "' may only hold letters, digits, '-', '_' and '.'");
    }
    // Dotted IPv4: four numbers 0..255.
    int parts = 0;
    bool ok = !h.ip.empty();
    for (std::string_view rest = h.ip; ok;) {
      const size_t dot = rest.find('.');
      uint32_t v = 0;
      ok = parse_u32(rest.substr(0, dot), &v) && v <= 255;
      ++parts;
      if (dot == std::string_view::npos) break;
      rest.remove_prefix(dot + 1);
    }
    if (!ok || parts != 4) {
      throw std::invalid_argument(fail_prefix(option) + "'" + h.ip + "' is not a dotted IPv4 address" + usage);
    }
    out.push_back(std::move(h));
  }
  if (out.size() != 2) {
    throw std::invalid_argument(fail_prefix(option) + "exactly two hosts are needed, got " +
                                std::to_string(out.size()) + usage);
  }
  if (out[0].netns == out[1].netns) {
    throw std::invalid_argument(fail_prefix(option) + "the two hosts are the same namespace '" + out[0].netns + "'");
  }
  return out;
}

double parse_fabtests_mbps(std::string_view output) {
  double result = -1;
  int column = -1;  // index of "MB/sec" in the header, once seen
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    const std::string_view line = output.substr(start, end - start);
    start = end + 1;
    std::vector<std::string_view> words;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j > i) words.push_back(line.substr(i, j - i));
      i = j;
    }
    for (size_t w = 0; w < words.size(); ++w) {
      if (words[w] == "MB/sec") column = static_cast<int>(w);
    }
    if (column < 0 || words.size() <= static_cast<size_t>(column) || words[0] == "bytes") continue;
    // A data row starts with a size ("64k", "65536", "1m") and has a number in the column.
    const char c0 = words[0].empty() ? ' ' : words[0][0];
    if (c0 < '0' || c0 > '9') continue;
    const std::string cell(words[static_cast<size_t>(column)]);
    char* endp = nullptr;
    const double v = std::strtod(cell.c_str(), &endp);
    if (endp != nullptr && *endp == '\0' && v >= 0) result = v;
  }
  return result;
}

std::string Shape::name() const { return std::to_string(sources) + "x" + std::to_string(targets); }

std::vector<uint32_t> parse_sizes(std::string_view text, std::string_view option) {
  if (trim(text).empty()) {
    throw std::invalid_argument(fail_prefix(option) +
                                "no record sizes given; use a comma list like 16,64");
  }
  std::vector<uint32_t> out;
  for (std::string_view item : split_commas(text)) {
    uint32_t v = 0;
    if (item.empty()) {
      throw std::invalid_argument(fail_prefix(option) + "empty item in '" + std::string(text) +
                                  "'; use a comma list like 16,64");
    }
    if (!parse_u32(item, &v)) {
      throw std::invalid_argument(fail_prefix(option) + "'" + std::string(item) +
                                  "' is not a record size; use a comma list like 16,64");
    }
    if (v < kMinRecordBytes || v > kMaxRecordBytes || v % kRecordBytesStep != 0) {
      throw std::invalid_argument(fail_prefix(option) + "a record size of " + std::to_string(v) +
                                  " bytes is not supported; allowed: " + kAllowedSizes);
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      throw std::invalid_argument(fail_prefix(option) + "record size " + std::to_string(v) +
                                  " is listed twice");
    }
    out.push_back(v);
  }
  return out;
}

std::vector<Shape> parse_shapes(std::string_view text, std::string_view option) {
  if (trim(text).empty()) {
    throw std::invalid_argument(fail_prefix(option) +
                                "no shapes given; use a comma list like 1x1,2x2");
  }
  std::vector<Shape> out;
  for (std::string_view item : split_commas(text)) {
    const size_t x = item.find_first_of("xX");
    Shape s;
    if (x == std::string_view::npos || !parse_u32(item.substr(0, x), &s.sources) ||
        !parse_u32(item.substr(x + 1), &s.targets)) {
      throw std::invalid_argument(
          fail_prefix(option) + "'" + std::string(item) +
          "' is not a shape; use SOURCESxTARGETS in a comma list like 1x1,2x2");
    }
    if (s.sources < 1 || s.targets < 1 || s.sources > 64 || s.targets > 64) {
      throw std::invalid_argument(fail_prefix(option) + "'" + std::string(item) +
                                  "': sources and targets must each be 1 to 64");
    }
    if (std::find(out.begin(), out.end(), s) != out.end()) {
      throw std::invalid_argument(fail_prefix(option) + "shape " + s.name() + " is listed twice");
    }
    out.push_back(s);
  }
  return out;
}

nlohmann::json summary_json(const Summary& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"n", s.n}};
}

nlohmann::json runs_json(const std::vector<Run>& runs, uint32_t record_bytes) {
  std::vector<double> rate, gbps, per_cpu;
  nlohmann::json raw = nlohmann::json::array();
  for (const Run& r : runs) {
    const double rps = r.seconds > 0 ? r.records / r.seconds : 0;
    rate.push_back(rps);
    gbps.push_back(rps * record_bytes / 1e9);
    per_cpu.push_back(r.cpu_seconds > 0 ? r.records / r.cpu_seconds : 0);
    raw.push_back({{"records", r.records}, {"seconds", r.seconds}, {"cpu_seconds", r.cpu_seconds}});
  }
  return {{"records_per_s", summary_json(summarize(rate))},
          {"gbytes_per_s", summary_json(summarize(gbps))},
          {"records_per_cpu_s", summary_json(summarize(per_cpu))},
          {"runs", raw}};
}

nlohmann::json report_json(const Environment& env, const std::string& command,
                           const nlohmann::json& config, const std::vector<Result>& results,
                           const std::vector<BaselineRow>& extra_baselines) {
  nlohmann::json j;
  j["tool"] = "sluice perf";
  j["version"] = kVersion;
  j["env"] = {{"hostname", env.hostname},   {"nproc", env.nproc}, {"kernel", env.kernel},
              {"cpu_model", env.cpu_model}, {"date", env.date},   {"git_commit", env.git_commit}};
  j["command"] = command;
  j["config"] = config;
  j["results"] = nlohmann::json::array();
  for (const Result& r : results) {
    nlohmann::json row;
    row["shape"] = r.shape.name();
    row["sources"] = r.shape.sources;
    row["targets"] = r.shape.targets;
    row["record_bytes"] = r.record_bytes;
    row["transport"] = r.transport;
    row["segment_bytes"] = r.segment_bytes;
    row["ring_segments"] = r.ring_segments;
    row["peer"] = r.peer;
    row["flow"] = runs_json(r.flow, r.record_bytes);
    row["baseline"] = runs_json(r.baseline, r.record_bytes);
    if (r.peer == "shm_ring") row["baseline"]["publish_every"] = r.baseline_publish_every;
    const double fm = row["flow"]["records_per_s"]["median"].get<double>();
    const double bm = row["baseline"]["records_per_s"]["median"].get<double>();
    row["ratio"] = bm > 0 ? fm / bm : 0.0;
    std::vector<double> paired;
    for (size_t i = 0; i < r.flow.size() && i < r.baseline.size(); ++i) {
      const Run& f = r.flow[i];
      const Run& b = r.baseline[i];
      if (f.seconds > 0 && b.seconds > 0 && b.records > 0) {
        paired.push_back((f.records / f.seconds) / (b.records / b.seconds));
      }
    }
    row["ratio_paired"] = summary_json(summarize(paired));
    std::string note;
    if (r.peer == "tcp_stream") {
      const uint32_t per_write = r.segment_bytes / r.record_bytes;
      note = "baseline: kernel TCP stream (" + r.placement + "), 1 writer -> 1 reader, writes of " +
             std::to_string(per_write) + " records of " + std::to_string(r.record_bytes) + " B (" +
             std::to_string(per_write * r.record_bytes) +
             " B, one flow segment's worth), reader copies every record out";
    } else {
      note = "baseline: two-process SPSC shm ring, 1 producer -> 1 consumer, " +
             std::to_string(r.record_bytes) + " B slots, publishing every " +
             std::to_string(r.baseline_publish_every) + " slots";
    }
    if (r.shape.sources != 1 || r.shape.targets != 1) {
      note += "; the " + r.shape.name() + " flow (" +
              std::to_string(r.shape.sources + r.shape.targets) + " processes) is compared to that same 1:1 " +
              (r.peer == "tcp_stream" ? "stream" : "ring");
    }
    row["baseline_note"] = note;
    j["results"].push_back(std::move(row));
  }
  j["extra_baselines"] = nlohmann::json::array();
  for (const BaselineRow& b : extra_baselines) {
    nlohmann::json row = runs_json(b.runs, b.record_bytes);
    row["record_bytes"] = b.record_bytes;
    row["publish_every"] = b.publish_every;
    j["extra_baselines"].push_back(std::move(row));
  }
  return j;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "12.3 [11.9-13.0]" in millions of records per second.
std::string mrate(const nlohmann::json& s) {
  return fmt("%.1f", s["median"].get<double>() / 1e6) + " [" +
         fmt("%.1f", s["min"].get<double>() / 1e6) + "-" +
         fmt("%.1f", s["max"].get<double>() / 1e6) + "]";
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.insert(0, w - s.size(), ' ');
  return s;
}

}  // namespace

std::string report_table(const nlohmann::json& report) {
  std::string out;
  std::string last_group;
  for (const auto& r : report["results"]) {
    const std::string transport = r.value("transport", std::string("shm"));
    const std::string peer = r.value("peer", std::string("shm_ring"));
    const std::string group = transport + "/" + peer + "/" + std::to_string(r.value("segment_bytes", 0u));
    if (group != last_group) {
      const std::string p = peer == "tcp_stream" ? "tcp" : "ring";
      if (!last_group.empty()) out += "\n";
      out += "flow transport " + transport + ", segments of " + std::to_string(r.value("segment_bytes", 0u)) +
             " B x " + std::to_string(r.value("ring_segments", 0u)) + "; peer " + peer + "\n";
      out += pad("shape", 5) + pad("bytes", 6) + pad("flow Mrec/s med [min-max]", 28) + pad("flow GB/s", 10) +
             pad(p + " Mrec/s med [min-max]", 28) + pad(p + " GB/s", 10) + pad("ratio", 7) + pad("paired", 8) +
             pad("flow Mrec/cpu-s", 16) + "\n";
      last_group = group;
    }
    out += pad(r["shape"].get<std::string>(), 5) +
           pad(std::to_string(r["record_bytes"].get<uint32_t>()), 6) +
           pad(mrate(r["flow"]["records_per_s"]), 28) +
           pad(fmt("%.2f", r["flow"]["gbytes_per_s"]["median"].get<double>()), 10) +
           pad(mrate(r["baseline"]["records_per_s"]), 28) +
           pad(fmt("%.2f", r["baseline"]["gbytes_per_s"]["median"].get<double>()), 10) +
           pad(fmt("%.2f", r["ratio"].get<double>()), 7) +
           pad(fmt("%.2f", r["ratio_paired"]["median"].get<double>()), 8) +
           pad(fmt("%.1f", r["flow"]["records_per_cpu_s"]["median"].get<double>() / 1e6), 16) +
           "\n";
  }
  for (const auto& b : report["extra_baselines"]) {
    out += "ring " + std::to_string(b["record_bytes"].get<uint32_t>()) + " B publishing every " +
           std::to_string(b["publish_every"].get<uint32_t>()) +
           " slot(s): " + mrate(b["records_per_s"]) + " Mrec/s, " +
           fmt("%.2f", b["gbytes_per_s"]["median"].get<double>()) + " GB/s\n";
  }
  if (report.contains("latency")) {
    for (const auto& l : report["latency"]) {
      auto us = [](const nlohmann::json& s) {
        return fmt("%.1f", s["median"].get<double>()) + " [" + fmt("%.1f", s["min"].get<double>()) + "-" +
               fmt("%.1f", s["max"].get<double>()) + "]";
      };
      out += "latency, 64 B round trip, " + l["transport"].get<std::string>() + " (" +
             l["placement"].get<std::string>() + "), us median [min-max] of per-repeat values:\n";
      out += "  flow (Optimize::kLatency, two flows): median " + us(l["flow"]["rtt_us_median"]) + ", p99 " +
             us(l["flow"]["rtt_us_p99"]) + "\n";
      out += "  kernel TCP ping-pong (blocking, TCP_NODELAY): median " + us(l["tcp"]["rtt_us_median"]) + ", p99 " +
             us(l["tcp"]["rtt_us_p99"]) + "\n";
      out += "  flow/tcp median round trip: " + fmt("%.2f", l["ratio"].get<double>()) + "\n";
    }
  }
  if (report.contains("fabtests")) {
    for (const auto& [name, v] : report["fabtests"].items()) {
      out += name + ": " + (v.is_string() ? v.get<std::string>() : v.dump()) + "\n";
    }
  }
  out +=
      "ratio = flow median / peer median; paired = median of per-repeat flow/peer (run back to "
      "back); every shape is compared to the 1:1 peer\n";
  return out;
}

std::string quote_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./=,:+@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) {
      if (c == '\'')
        out += "'\\''";
      else
        out += c;
    }
    out += '\'';
  }
  return out;
}

void emit_json_line(const std::string& out, const nlohmann::json& line) {
  if (out == "-") {
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    return;
  }
  std::ofstream f(out, std::ios::app);
  f << line.dump() << '\n';
  if (!f.flush()) throw std::runtime_error("cannot write results to " + out);
}

}  // namespace sluice::tool::perf
