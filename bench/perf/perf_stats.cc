#include "perf_stats.h"

#include <algorithm>
#include <charconv>
#include <cmath>
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

const char* kAllowedSizes =
    "8 to 64 in steps of 8, then powers of two up to 1 MiB (128, 256, ..., 512k, 1m)";

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
  // (Less a hair, so that 99.9% of 2000 is rank 1998 despite rounding.)
  const double exact = p / 100.0 * static_cast<double>(values.size()) - 1e-9;
  size_t rank = static_cast<size_t>(exact);
  if (static_cast<double>(rank) < exact) ++rank;
  if (rank < 1) rank = 1;
  return values[rank - 1];
}

std::vector<NetnsHost> parse_netns_hosts(std::string_view text, std::string_view option) {
  const char* usage = "; use NS_A=IP_A,NS_B=IP_B, e.g. perfA=198.18.200.1,perfB=198.18.200.2";
  std::vector<NetnsHost> out;
  if (trim(text).empty())
    throw std::invalid_argument(fail_prefix(option) + "no hosts given" + usage);
  for (std::string_view item : split_commas(text)) {
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw std::invalid_argument(fail_prefix(option) + "'" + std::string(item) + "' is not NS=IP" +
                                  usage);
    }
    NetnsHost h{std::string(trim(item.substr(0, eq))), std::string(trim(item.substr(eq + 1)))};
    if (h.netns.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
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
      throw std::invalid_argument(fail_prefix(option) + "'" + h.ip +
                                  "' is not a dotted IPv4 address" + usage);
    }
    out.push_back(std::move(h));
  }
  if (out.size() != 2) {
    throw std::invalid_argument(fail_prefix(option) + "exactly two hosts are needed, got " +
                                std::to_string(out.size()) + usage);
  }
  if (out[0].netns == out[1].netns) {
    throw std::invalid_argument(fail_prefix(option) + "the two hosts are the same namespace '" +
                                out[0].netns + "'");
  }
  return out;
}

std::string Shape::name() const { return std::to_string(sources) + "x" + std::to_string(targets); }

bool is_supported_record_size(uint32_t v) {
  if (v < kMinRecordBytes || v > kMaxRecordBytes) return false;
  if (v <= kSmallRecordsMax) return v % kRecordBytesStep == 0;
  return (v & (v - 1)) == 0;
}

std::vector<uint32_t> parse_sizes(std::string_view text, std::string_view option) {
  if (trim(text).empty()) {
    throw std::invalid_argument(fail_prefix(option) +
                                "no record sizes given; use a comma list like 8,64,1k");
  }
  std::vector<uint32_t> out;
  for (std::string_view item : split_commas(text)) {
    uint32_t v = 0;
    if (item.empty()) {
      throw std::invalid_argument(fail_prefix(option) + "empty item in '" + std::string(text) +
                                  "'; use a comma list like 8,64,1k");
    }
    uint32_t unit = 1;
    std::string_view digits = item;
    const char last = item.back();
    if (last == 'k' || last == 'K') unit = 1u << 10;
    if (last == 'm' || last == 'M') unit = 1u << 20;
    if (unit != 1) digits.remove_suffix(1);
    if (!parse_u32(digits, &v)) {
      throw std::invalid_argument(fail_prefix(option) + "'" + std::string(item) +
                                  "' is not a record size; use a comma list like 8,64,1k");
    }
    // Too large for 32 bits is as unsupported as any other size over 1 MiB.
    v = uint64_t{v} * unit > kMaxRecordBytes ? kMaxRecordBytes + 1 : v * unit;
    if (!is_supported_record_size(v)) {
      throw std::invalid_argument(
          fail_prefix(option) + "a record size of " +
          (v > kMaxRecordBytes ? std::string(item) : std::to_string(v) + " bytes") +
          " is not supported; allowed: " + kAllowedSizes);
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      throw std::invalid_argument(fail_prefix(option) + "record size " + std::to_string(v) +
                                  " is listed twice");
    }
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> parse_words(std::string_view text, const std::vector<std::string>& allowed,
                                     std::string_view option) {
  std::string names;
  for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
  if (trim(text).empty())
    throw std::invalid_argument(fail_prefix(option) + "nothing given; use some of " + names);
  std::vector<std::string> out;
  for (std::string_view item : split_commas(text)) {
    const std::string w(item);
    if (std::find(allowed.begin(), allowed.end(), w) == allowed.end()) {
      throw std::invalid_argument(fail_prefix(option) + "'" + w + "' is not one of " + names);
    }
    if (std::find(out.begin(), out.end(), w) != out.end()) {
      throw std::invalid_argument(fail_prefix(option) + "'" + w + "' is listed twice");
    }
    out.push_back(w);
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

uint32_t round_trips_for(uint32_t requested, uint32_t record_bytes) {
  const uint64_t cap = (uint64_t{256} << 20) / std::max<uint32_t>(record_bytes, 1);
  return static_cast<uint32_t>(std::min<uint64_t>(requested, std::max<uint64_t>(100, cap)));
}

namespace {

double num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : -1;
}

}  // namespace

nlohmann::json derive_metrics(const nlohmann::json& s, uint32_t record_bytes, double cpu_ghz) {
  nlohmann::json m = nlohmann::json::object();
  const double records = num(s, "records");
  const double seconds = num(s, "seconds");
  const bool latency = s.contains("rtt_us_p50");
  if (records > 0 && seconds > 0) {
    m["records_per_s"] = records / seconds;
    if (!latency) m["gbytes_per_s"] = records * record_bytes / seconds / 1e9;
  }
  const double cpu = num(s, "cpu_seconds");
  if (records > 0 && cpu > 0) m["records_per_cpu_s"] = records / cpu;
  for (const char* side : {"src", "tgt"}) {
    const double c = num(s, (std::string(side) + "_cpu_seconds").c_str());
    if (records > 0 && c >= 0 && cpu_ghz > 0)
      m[std::string(side) + "_cycles_per_record"] = c * cpu_ghz * 1e9 / records;
  }
  for (const char* k : {"rtt_us_p50", "rtt_us_p99", "rtt_us_p999"}) {
    if (num(s, k) >= 0) m[k] = num(s, k);
  }
  return m;
}

nlohmann::json metrics_json(const std::vector<nlohmann::json>& samples, uint32_t record_bytes,
                            double cpu_ghz) {
  std::vector<std::string> keys;
  std::vector<nlohmann::json> derived;
  for (const nlohmann::json& s : samples) {
    derived.push_back(derive_metrics(s, record_bytes, cpu_ghz));
    for (const auto& [k, v] : derived.back().items()) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& k : keys) {
    std::vector<double> v;
    for (const nlohmann::json& d : derived)
      if (d.contains(k)) v.push_back(d[k].get<double>());
    out[k] = summary_json(summarize(v));
  }
  out["runs"] = samples;
  return out;
}

namespace {

// The primary metric of each sample (NaN where missing), in repeat order.
std::vector<double> per_sample(const Series& s, const std::string& metric, uint32_t record_bytes) {
  std::vector<double> out;
  for (const nlohmann::json& x : s.samples) {
    const nlohmann::json d = derive_metrics(x, record_bytes, 0);
    out.push_back(d.contains(metric) ? d[metric].get<double>() : std::nan(""));
  }
  return out;
}

double median_of(const Series& s, const std::string& metric, uint32_t record_bytes) {
  std::vector<double> v;
  for (double x : per_sample(s, metric, record_bytes))
    if (!std::isnan(x)) v.push_back(x);
  return v.empty() ? std::nan("") : summarize(v).median;
}

// "Flow advantage" of a over b: > 1 when a is better.
double advantage(double a, double b, bool higher_is_better) {
  if (std::isnan(a) || std::isnan(b) || a <= 0 || b <= 0) return std::nan("");
  return higher_is_better ? a / b : b / a;
}

nlohmann::json num_or_null(double v) {
  return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
}

nlohmann::json paired(const Series& flow, const Series& other, const ModeTraits& t,
                      uint32_t bytes) {
  const std::vector<double> f = per_sample(flow, t.metric, bytes);
  const std::vector<double> o = per_sample(other, t.metric, bytes);
  std::vector<double> r;
  for (size_t i = 0; i < f.size() && i < o.size(); ++i) {
    const double a = advantage(f[i], o[i], t.higher_is_better);
    if (!std::isnan(a)) r.push_back(a);
  }
  return r.empty() ? nlohmann::json(nullptr) : summary_json(summarize(r));
}

}  // namespace

nlohmann::json point_json(const Point& p, double cpu_ghz) {
  const ModeTraits& t = p.traits;
  nlohmann::json row;
  row["mode"] = t.name;
  row["transport"] = p.transport;
  row["placement"] = p.placement;
  row["shape"] = p.shape.name();
  row["sources"] = p.shape.sources;
  row["targets"] = p.shape.targets;
  row["record_bytes"] = p.record_bytes;
  row["segment_bytes"] = p.segment_bytes;
  row["ring_segments"] = p.ring_segments;
  row["metric"] = t.metric;
  row["higher_is_better"] = t.higher_is_better;
  row["flow"] = metrics_json(p.flow.samples, p.record_bytes, cpu_ghz);
  if (!p.flow.note.empty()) row["flow_note"] = p.flow.note;
  const double fm = median_of(p.flow, t.metric, p.record_bytes);
  row["peers"] = nlohmann::json::array();
  const std::string own = p.shape.name();
  // The best peer of the point's own shape, else of 1x1; the best bound of any shape.
  const Series* best[2] = {nullptr, nullptr};
  double best_adv[2] = {std::nan(""), std::nan("")};
  const Series* bound = nullptr;
  double bound_adv = std::nan("");
  for (const Series& o : p.others) {
    const std::string shape = o.shape.empty() ? own : o.shape;
    const double om = median_of(o, t.metric, p.record_bytes);
    const double adv = advantage(fm, om, t.higher_is_better);
    nlohmann::json j = {{"name", o.name},
                        {"kind", o.kind},
                        {"shape", shape},
                        {"metrics", metrics_json(o.samples, p.record_bytes, cpu_ghz)},
                        {"ratio", num_or_null(adv)},
                        {"ratio_paired", paired(p.flow, o, t, p.record_bytes)}};
    if (!o.note.empty()) j["note"] = o.note;
    if (!o.command.empty()) j["command"] = o.command;
    row["peers"].push_back(std::move(j));
    if (std::isnan(adv)) continue;
    if (o.kind == "bound") {
      if (bound == nullptr) bound = &o, bound_adv = adv;
      continue;
    }
    if (o.kind != "peer") continue;
    const int slot = shape == own ? 0 : shape == "1x1" ? 1 : -1;
    if (slot >= 0 && (best[slot] == nullptr || adv < best_adv[slot]))
      best[slot] = &o, best_adv[slot] = adv;
  }
  const int use = best[0] != nullptr ? 0 : 1;
  if (best[use] != nullptr) {
    row["best_peer"] = best[use]->name;
    row["best_peer_shape"] = use == 0 ? own : "1x1";
    row["ratio_to_best_peer"] = best_adv[use];
    row["ratio_paired_to_best_peer"] = paired(p.flow, *best[use], t, p.record_bytes);
  } else {
    row["best_peer"] = nullptr;
    row["best_peer_shape"] = nullptr;
    row["ratio_to_best_peer"] = nullptr;
    row["ratio_paired_to_best_peer"] = nullptr;
  }
  row["bound"] = bound != nullptr ? nlohmann::json(bound->name) : nlohmann::json(nullptr);
  row["ratio_to_bound"] = num_or_null(bound_adv);
  return row;
}

namespace {

double jnum(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

double flow_median(const nlohmann::json& row, const std::string& metric) {
  const nlohmann::json& f = row["flow"];
  return f.contains(metric) ? f[metric]["median"].get<double>() : std::nan("");
}

std::string point_name(const nlohmann::json& r) {
  return r["mode"].get<std::string>() + " " + r["transport"].get<std::string>() + " " +
         r["shape"].get<std::string>() + " " + std::to_string(r["record_bytes"].get<uint32_t>()) +
         " B";
}

// met over the checks: null without checks, else all of them.
nlohmann::json all_met(const nlohmann::json& checks) {
  if (checks.empty()) return nullptr;
  for (const auto& c : checks)
    if (!c["met"].get<bool>()) return false;
  return true;
}

bool loopback(const nlohmann::json& r) {
  return r["placement"].get<std::string>().rfind("loopback", 0) == 0;
}

}  // namespace

nlohmann::json goals_json(const nlohmann::json& results, uint32_t nproc) {
  nlohmann::json goals = nlohmann::json::array();

  // 1. Intra-host streaming of records <= 256 B: ahead of every peer, ZeroMQ
  //    by 10x, at least 50% of the ring bound.
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& r : results) {
    if (r["mode"] != "bandwidth" || r["transport"] != "shm" ||
        r["record_bytes"].get<uint32_t>() > 256)
      continue;
    const double best = jnum(r, "ratio_to_best_peer");
    double zmq = std::nan(""), ring = std::nan("");
    for (const auto& p : r["peers"]) {
      const double v = jnum(p, "ratio");
      const std::string n = p["name"];
      if (n.rfind("zmq", 0) == 0 && (std::isnan(zmq) || v < zmq)) zmq = v;
      if (n == "shm_ring") ring = v;
    }
    const bool met = !std::isnan(best) && best > 1 && (std::isnan(zmq) || zmq >= 10) &&
                     !std::isnan(ring) && ring >= 0.5;
    checks.push_back({{"point", point_name(r)},
                      {"best_peer", r["best_peer"]},
                      {"ratio_to_best_peer", num_or_null(best)},
                      {"ratio_to_zmq", num_or_null(zmq)},
                      {"ratio_to_ring", num_or_null(ring)},
                      {"met", met}});
  }
  goals.push_back(
      {{"goal",
        "intra-host streaming, records <= 256 B: ratio to every peer > 1, to ZeroMQ >= 10, "
        "to the shm ring bound >= 0.5"},
       {"met", all_met(checks)},
       {"checks", checks}});

  // 2. Intra-host latency, 64 B round trip: within 1.5x of the shm ping-pong
  //    bound and below every peer.
  checks = nlohmann::json::array();
  for (const auto& r : results) {
    if (r["mode"] != "latency" || r["transport"] != "shm" || r["record_bytes"] != 64 ||
        r["shape"] != "1x1")
      continue;
    const double flow = flow_median(r, "rtt_us_p50");
    double bound = std::nan("");
    for (const auto& p : r["peers"])
      if (p["name"] == "shm_pingpong" && p["metrics"].contains("rtt_us_p50"))
        bound = p["metrics"]["rtt_us_p50"]["median"].get<double>();
    const double best = jnum(r, "ratio_to_best_peer");
    const double x = flow / bound;
    const bool met = !std::isnan(x) && x <= 1.5 && !std::isnan(best) && best > 1;
    checks.push_back({{"point", point_name(r)},
                      {"rtt_us_p50", num_or_null(flow)},
                      {"bound_rtt_us_p50", num_or_null(bound)},
                      {"times_bound", num_or_null(x)},
                      {"best_peer", r["best_peer"]},
                      {"ratio_to_best_peer", num_or_null(best)},
                      {"met", met}});
  }
  goals.push_back(
      {{"goal",
        "intra-host latency, 64 B round trip (Latency mode): at most 1.5x the shm ping-pong "
        "bound, below every peer"},
       {"met", all_met(checks)},
       {"checks", checks}});

  // 3. Loopback ofi bandwidth for >= 64 KiB segments: >= 80% of kernel TCP.
  checks = nlohmann::json::array();
  for (const auto& r : results) {
    if (r["mode"] != "bandwidth" || r["transport"] != "ofi" || !loopback(r) ||
        r["segment_bytes"].get<uint32_t>() < 65536)
      continue;
    double tcp = std::nan("");
    nlohmann::json tcp_paired = nullptr;
    for (const auto& p : r["peers"])
      if (p["name"] == "tcp_stream") tcp = jnum(p, "ratio"), tcp_paired = p["ratio_paired"];
    checks.push_back({{"point", point_name(r)},
                      {"segment_bytes", r["segment_bytes"]},
                      {"ratio_to_tcp_stream", num_or_null(tcp)},
                      {"ratio_paired_to_tcp_stream", tcp_paired},
                      {"met", !std::isnan(tcp) && tcp >= 0.8}});
  }
  goals.push_back(
      {{"goal",
        "loopback ofi bandwidth, segments >= 64 KiB: at least 0.8 of the kernel TCP stream"},
       {"met", all_met(checks)},
       {"checks", checks}});

  // 4. N:M scale-out 1x1 .. 4x4: per-core efficiency relative to 1x1 holds
  //    (>= 0.8). Cores usable by a shape: min(processes, nproc).
  checks = nlohmann::json::array();
  for (const auto& base : results) {
    if (base["mode"] != "bandwidth" || base["shape"] != "1x1") continue;
    const double b = flow_median(base, "records_per_s");
    const double b_cores = std::min<double>(2, nproc > 0 ? nproc : 2);
    for (const auto& r : results) {
      if (r["mode"] != "bandwidth" || r["transport"] != base["transport"] ||
          r["placement"] != base["placement"] || r["record_bytes"] != base["record_bytes"] ||
          r["segment_bytes"] != base["segment_bytes"])
        continue;
      const uint32_t s = r["sources"], t = r["targets"];
      if (s != t || s < 2) continue;
      const double v = flow_median(r, "records_per_s");
      const double cores = std::min<double>(s + t, nproc > 0 ? nproc : s + t);
      const double eff = (v / cores) / (b / b_cores);
      checks.push_back({{"point", point_name(r)},
                        {"records_per_s", num_or_null(v)},
                        {"records_per_s_1x1", num_or_null(b)},
                        {"processes", s + t},
                        {"cores_usable", cores},
                        {"per_core_efficiency_vs_1x1", num_or_null(eff)},
                        {"records_per_cpu_s", num_or_null(flow_median(r, "records_per_cpu_s"))},
                        {"met", !std::isnan(eff) && eff >= 0.8}});
    }
  }
  goals.push_back(
      {{"goal",
        "N:M shuffle scale-out NxN (N = 2..4): aggregate records/s per usable core at least "
        "0.8 of 1x1's (cores usable = min(processes, nproc))"},
       {"met", all_met(checks)},
       {"checks", checks}});
  return goals;
}

nlohmann::json report_json(const Environment& env, const std::string& command,
                           const nlohmann::json& config, const std::vector<Point>& points,
                           const nlohmann::json& skipped) {
  nlohmann::json j;
  j["tool"] = "sluice perf";
  j["version"] = kVersion;
  j["env"] = {{"hostname", env.hostname},    {"nproc", env.nproc},     {"kernel", env.kernel},
              {"cpu_model", env.cpu_model},  {"cpu_ghz", env.cpu_ghz}, {"date", env.date},
              {"git_commit", env.git_commit}};
  j["command"] = command;
  j["config"] = config;
  j["results"] = nlohmann::json::array();
  for (const Point& p : points) j["results"].push_back(point_json(p, env.cpu_ghz));
  j["skipped"] = skipped.is_array() ? skipped : nlohmann::json::array();
  j["goals"] = goals_json(j["results"], env.nproc);
  return j;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.insert(0, w - s.size(), ' ');
  return s;
}

// "12.3 [11.9-13.0]" of a summary, scaled.
std::string med_range(const nlohmann::json& m, const std::string& key, double scale,
                      const char* f) {
  if (!m.contains(key)) return "-";
  const auto& s = m[key];
  return fmt(f, s["median"].get<double>() * scale) + " [" + fmt(f, s["min"].get<double>() * scale) +
         "-" + fmt(f, s["max"].get<double>() * scale) + "]";
}

std::string med(const nlohmann::json& m, const std::string& key, double scale, const char* f) {
  if (!m.contains(key)) return "-";
  return fmt(f, m[key]["median"].get<double>() * scale);
}

std::string ratio(const nlohmann::json& v) {
  return v.is_number() ? fmt("%.2f", v.get<double>()) : "-";
}

std::string size_name(uint32_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= 2048 && b % 1024 == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

}  // namespace

std::string report_table(const nlohmann::json& report) {
  std::string out;
  std::string last_group;
  for (const auto& r : report["results"]) {
    const bool bw = r["metric"].get<std::string>().rfind("rtt", 0) != 0;
    const std::string group = r["mode"].get<std::string>() + "/" +
                              r["transport"].get<std::string>() + "/" +
                              r["placement"].get<std::string>();
    if (group != last_group) {
      if (!last_group.empty()) out += "\n";
      out += r["mode"].get<std::string>() + " mode, transport " +
             r["transport"].get<std::string>() + " (" + r["placement"].get<std::string>() +
             "), median [min-max] over repeats\n";
      out += pad("shape", 5) + pad("bytes", 6) +
             (bw ? pad("flow GB/s", 22) + pad("Mrec/s", 9)
                 : pad("rtt us p50", 22) + pad("p99", 9) + pad("p99.9", 9)) +
             pad("cyc/rec src", 12) + pad("tgt", 8) + pad("best peer", 22) + pad("x peer", 7) +
             pad("paired", 7) + pad("bound", 14) + pad("x bound", 8) + "\n";
      last_group = group;
    }
    const auto& f = r["flow"];
    out += pad(r["shape"].get<std::string>(), 5) +
           pad(size_name(r["record_bytes"].get<uint32_t>()), 6);
    if (bw) {
      out += pad(med_range(f, "gbytes_per_s", 1, "%.2f"), 22) +
             pad(med(f, "records_per_s", 1e-6, "%.1f"), 9);
    } else {
      out += pad(med_range(f, "rtt_us_p50", 1, "%.2f"), 22) +
             pad(med(f, "rtt_us_p99", 1, "%.2f"), 9) + pad(med(f, "rtt_us_p999", 1, "%.2f"), 9);
    }
    const nlohmann::json& pp = r["ratio_paired_to_best_peer"];
    out += pad(med(f, "src_cycles_per_record", 1, "%.0f"), 12) +
           pad(med(f, "tgt_cycles_per_record", 1, "%.0f"), 8) +
           pad(r["best_peer"].is_string() ? r["best_peer"].get<std::string>() : "-", 22) +
           pad(ratio(r["ratio_to_best_peer"]), 7) +
           pad(pp.is_object() ? ratio(pp["median"]) : "-", 7) +
           pad(r["bound"].is_string() ? r["bound"].get<std::string>() : "-", 14) +
           pad(ratio(r["ratio_to_bound"]), 8) + "\n";
  }
  out +=
      "\nx peer / x bound: flow advantage over the best peer / the bound (> 1: sluice ahead; "
      "latency: their "
      "round trip / the flow's); paired: median of per-repeat ratios\n";
  if (report.contains("skipped")) {
    for (const auto& s : report["skipped"])
      out += "skipped " + s["name"].get<std::string>() + ": " + s["why"].get<std::string>() + "\n";
  }
  if (report.contains("goals")) {
    out += "\ngoals:\n";
    for (const auto& g : report["goals"]) {
      const std::string met = g["met"].is_null()     ? "not measured"
                              : g["met"].get<bool>() ? "MET"
                                                     : "MISSED";
      out += "  [" + met + "] " + g["goal"].get<std::string>() + "\n";
      for (const auto& c : g["checks"]) {
        std::string vals;
        for (const auto& [k, v] : c.items()) {
          if (k == "point" || k == "met") continue;
          vals += " " + k + "=" + (v.is_number_float() ? fmt("%.3g", v.get<double>()) : v.dump());
        }
        out += std::string("      ") + (c["met"].get<bool>() ? "ok  " : "MISS") + " " +
               c["point"].get<std::string>() + ":" + vals + "\n";
      }
    }
  }
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
