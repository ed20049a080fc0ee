#include "control/metrics.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <set>
#include <tuple>
#include <utility>

namespace sluice::control {
namespace {

using Labels = std::vector<std::pair<const char*, std::string>>;

// Endpoint states as COUNTERS numbers them (1..5), and rank states.
constexpr const char* kEndpointStates[] = {"open", "closing", "ended", "failed", "aborted"};
constexpr const char* kRankStates[] = {"absent", "alive", "left", "died", "vacant"};
constexpr const char* kViewCauses[] = {"died", "left", "rejoined", "joined"};

// Length of the UTF-8 sequence at s[i], or 0 if it is not a valid one
// (overlong forms, surrogates and code points above U+10FFFF included).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
  }
  if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
  if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogate
  if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
  if (c == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
  return n;
}

// `s` with every byte that does not start a valid UTF-8 sequence, and
// every control character but tab and newline, replaced by U+FFFD:
// Prometheus rejects a whole scrape over one invalid byte, and a carriage
// return inside a line (which the format cannot escape) confuses readers.
std::string clean_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0 || (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// Appends one family's sample lines; HELP and TYPE come from begin().
class Exposition {
 public:
  explicit Exposition(std::string job) : job_(std::move(job)) {}

  void begin(const char* name, const char* type, const char* help) {
    name_ = name;
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;  // constant text: no backslash or newline to escape
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void sample(const Labels& labels, const std::string& value) {
    out_ += name_;
    out_ += "{job=\"";
    out_ += escape_label_value(job_);
    out_ += '"';
    for (const auto& [key, v] : labels) {
      out_ += ',';
      out_ += key;
      out_ += "=\"";
      out_ += escape_label_value(v);
      out_ += '"';
    }
    out_ += "} ";
    out_ += value;
    out_ += '\n';
  }
  std::string take() { return std::move(out_); }

 private:
  std::string job_;
  const char* name_ = "";
  std::string out_;
};

std::string number(uint64_t v) { return std::to_string(v); }
// Fixed-point, so that no exponent hides the digits a reader wants.
std::string number(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string endpoint_name(const EndpointCounters& e) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "(%u,%u)", e.rank, e.slot);
  return buf;
}

bool is_source(const EndpointCounters& e) { return e.role == 1; }
bool is_region(const EndpointCounters& e) { return e.role == 3; }

std::string peer_name(const PeerCounters& p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "(%u,%u)", p.rank, p.slot);
  return buf;
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : clean_text(value)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

bool JobMetrics::report(uint32_t rank, std::string_view payload, std::string* problem) {
  CountersMsg m;
  if (rank >= reports_.size()) {
    if (problem != nullptr) *problem = "rank out of range";
    ++rejected_;
    return false;
  }
  if (!decode(payload, &m, problem)) {
    ++rejected_;
    return false;
  }
  // One series per (flow, role, endpoint): should a process report two
  // endpoints that look alike (ranks of two jobs sharing a process), the
  // first (a live one comes before destroyed ones) wins, so that the
  // exposition never repeats a label set.
  // Names are cleaned first, as the exposition will show them: two names
  // that differ only in invalid bytes are one series there.
  std::set<std::tuple<std::string, uint8_t, uint32_t, uint32_t>> seen;
  std::vector<EndpointCounters> kept;
  kept.reserve(m.endpoints.size());
  for (EndpointCounters& e : m.endpoints) {
    e.flow = clean_text(e.flow);
    e.cause = clean_text(e.cause);
    if (seen.emplace(e.flow, e.role, e.rank, e.slot).second) kept.push_back(std::move(e));
  }
  std::sort(kept.begin(), kept.end(), [](const EndpointCounters& a, const EndpointCounters& b) {
    return std::tie(a.flow, a.role, a.rank, a.slot) < std::tie(b.flow, b.role, b.rank, b.slot);
  });
  reports_[rank] = std::move(kept);
  ++accepted_;
  return true;
}

void JobMetrics::view_changed(std::string_view cause) {
  for (size_t i = 0; i < std::size(kViewCauses); ++i)
    if (cause == kViewCauses[i]) ++view_changes_[i];
}

std::string JobMetrics::render(const std::string& job, const std::vector<RankView>& ranks,
                               uint64_t epoch, uint64_t spares) const {
  Exposition x(job);

  x.begin("sluice_membership_epoch", "gauge",
          "The membership view's epoch: 0 as launched, one more at every loss, departure, "
          "rejoin and join.");
  x.sample({}, number(epoch));
  x.begin("sluice_membership_view_changes_total", "counter",
          "Changes of the membership view by cause: a rank died (closed connection or silent "
          "past the peer timeout), left, rejoined as a new incarnation, or joined (a new "
          "member in a vacancy or a left rank's place).");
  for (size_t i = 0; i < std::size(kViewCauses); ++i)
    x.sample({{"cause", kViewCauses[i]}}, number(view_changes_[i]));

  x.begin("sluice_spares_waiting", "gauge",
          "Spare processes (SLUICE_SPARE=1) waiting to take the place of a rank that dies.");
  x.sample({}, number(spares));

  x.begin("sluice_ranks", "gauge",
          "Ranks of the job in each state (absent: not joined yet; vacant: an elastic job's "
          "number no process has held).");
  for (const char* state : kRankStates) {
    const auto n = std::count_if(ranks.begin(), ranks.end(), [&](const RankView& v) {
      return std::string_view(v.state) == state;
    });
    x.sample({{"state", state}}, number(static_cast<uint64_t>(n)));
  }
  x.begin("sluice_rank_state", "gauge", "1 for the state each rank is in, 0 for the others.");
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const char* state : kRankStates) {
      x.sample({{"rank", std::to_string(r)}, {"host", ranks[r].host}, {"state", state}},
               std::string_view(ranks[r].state) == state ? "1" : "0");
    }
  }
  x.begin("sluice_rank_last_heartbeat_age_seconds", "gauge",
          "Seconds since the registry last heard from each rank that joined.");
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].heard_age_s < 0) continue;
    x.sample({{"rank", std::to_string(r)}, {"host", ranks[r].host}},
             number(ranks[r].heard_age_s, 3));
  }
  x.begin("sluice_rank_endpoints", "gauge", "Flow endpoints in each rank's last counters report.");
  for (size_t r = 0; r < reports_.size(); ++r) {
    x.sample({{"rank", std::to_string(r)}}, number(static_cast<uint64_t>(reports_[r].size())));
  }
  x.begin("sluice_counters_reports_total", "counter",
          "Counters reports the registry accepted from the ranks.");
  x.sample({}, number(accepted_));
  x.begin("sluice_counters_reports_rejected_total", "counter",
          "Counters reports the registry could not read (malformed); see its log.");
  x.sample({}, number(rejected_));

  // One family at a time over every endpoint: the format wants a family's
  // samples together. `pick` selects the endpoints and the value.
  const auto per_endpoint = [&](const char* name, const char* type, const char* help, auto&& pick) {
    x.begin(name, type, help);
    for (size_t r = 0; r < reports_.size(); ++r) {
      for (const EndpointCounters& e : reports_[r]) {
        if (is_region(e)) continue;
        Labels labels = {{"rank", std::to_string(r)},
                         {"flow", e.flow},
                         {"role", is_source(e) ? "source" : "target"},
                         {"endpoint", endpoint_name(e)}};
        pick(e, labels);
      }
    }
  };
  const auto counter = [&](const char* name, const char* help, bool source,
                           uint64_t EndpointCounters::*field, bool records) {
    per_endpoint(name, "counter", help, [&](const EndpointCounters& e, const Labels& labels) {
      if (is_source(e) != source || (records && e.record_size == 0)) return;
      const uint64_t v = e.*field;
      x.sample(labels, number(records ? v / e.record_size : v));
    });
  };
  counter("sluice_records_pushed_total",
          "Records a source published, counting a record once per target it went to.", true,
          &EndpointCounters::bytes, true);
  counter("sluice_records_consumed_total", "Records a target consumed.", false,
          &EndpointCounters::bytes, true);
  counter("sluice_bytes_pushed_total", "Record bytes a source published.", true,
          &EndpointCounters::bytes, false);
  counter("sluice_bytes_consumed_total", "Record bytes a target consumed.", false,
          &EndpointCounters::bytes, false);
  counter("sluice_segments_published_total", "Segments a source published (over all its rings).",
          true, &EndpointCounters::segments, false);
  counter("sluice_segments_consumed_total", "Segments a target consumed.", false,
          &EndpointCounters::segments, false);
  counter("sluice_credit_waits_total", "Times a source blocked waiting for credit.", true,
          &EndpointCounters::credit_waits, false);
  per_endpoint("sluice_credit_wait_seconds_total", "counter",
               "Seconds a source spent blocked waiting for credit.",
               [&](const EndpointCounters& e, const Labels& labels) {
                 if (is_source(e)) x.sample(labels, number(e.credit_wait_ns / 1e9, 9));
               });
  per_endpoint(
      "sluice_parks_total", "counter",
      "Times an endpoint's thread slept in the kernel waiting for it.",
      [&](const EndpointCounters& e, const Labels& labels) { x.sample(labels, number(e.parks)); });
  per_endpoint("sluice_park_seconds_total", "counter",
               "Seconds an endpoint's thread spent asleep in the kernel waiting for it.",
               [&](const EndpointCounters& e, const Labels& labels) {
                 x.sample(labels, number(e.park_ns / 1e9, 9));
               });
  per_endpoint("sluice_endpoint_state", "gauge",
               "1 for the state each endpoint is in, 0 for the others.",
               [&](const EndpointCounters& e, const Labels& labels) {
                 for (uint8_t s = 1; s <= 5; ++s) {
                   Labels l = labels;
                   l.emplace_back("state", kEndpointStates[s - 1]);
                   x.sample(l, e.state == s ? "1" : "0");
                 }
               });
  per_endpoint("sluice_endpoint_failure_info", "gauge",
               "Why an endpoint failed (1 for each failed endpoint, the cause as a label).",
               [&](const EndpointCounters& e, const Labels& labels) {
                 if (e.state != 4) return;
                 Labels l = labels;
                 l.emplace_back("cause", e.cause);
                 x.sample(l, "1");
               });
  per_endpoint("sluice_endpoint_peers", "gauge",
               "Peers of an endpoint: the targets of a source, the sources of a target.",
               [&](const EndpointCounters& e, const Labels& labels) {
                 x.sample(labels, number(static_cast<uint64_t>(e.peers)));
               });
  per_endpoint("sluice_endpoint_opened_timestamp_seconds", "gauge",
               "When an endpoint was created (Unix time).",
               [&](const EndpointCounters& e, const Labels& labels) {
                 x.sample(labels, number(e.opened_ns / 1e9, 3));
               });
  per_endpoint("sluice_ring_segments", "gauge", "Segments per ring of a flow endpoint.",
               [&](const EndpointCounters& e, const Labels& labels) {
                 if (e.ring_segments != 0) x.sample(labels, number(uint64_t{e.ring_segments}));
               });
  per_endpoint("sluice_ring_fill_segments", "gauge",
               "A source's ring fill: segments published and not yet consumed, as it last "
               "looked for credit.",
               [&](const EndpointCounters& e, const Labels& labels) {
                 if (is_source(e) && e.ring_segments != 0) x.sample(labels, number(e.ring_fill));
               });
  // Per peer of a target: when it last delivered a segment, and whether its
  // END arrived (the first kMaxReportedPeers peers of each endpoint).
  per_endpoint("sluice_peer_last_heard_timestamp_seconds", "gauge",
               "When a target last took a segment from each of its sources (Unix time; "
               "absent until the first).",
               [&](const EndpointCounters& e, const Labels& labels) {
                 if (is_source(e)) return;
                 for (const PeerCounters& p : e.peer_detail) {
                   if (p.heard_ns == 0) continue;
                   Labels l = labels;
                   l.emplace_back("peer", peer_name(p));
                   x.sample(l, number(p.heard_ns / 1e9, 3));
                 }
               });
  per_endpoint("sluice_peer_ended", "gauge",
               "1 once a target got the END of that source, 0 before.",
               [&](const EndpointCounters& e, const Labels& labels) {
                 if (is_source(e)) return;
                 for (const PeerCounters& p : e.peer_detail) {
                   Labels l = labels;
                   l.emplace_back("peer", peer_name(p));
                   x.sample(l, p.ended != 0 ? "1" : "0");
                 }
               });
  // The sequencer of an ordered replicate flow, as each source uses it.
  const auto sequencer = [&](const char* name, const char* help,
                             uint64_t EndpointCounters::*field) {
    per_endpoint(name, "counter", help, [&](const EndpointCounters& e, const Labels& labels) {
      if (is_source(e) && e.ops != 0) x.sample(labels, number(e.*field));
    });
  };
  sequencer("sluice_sequencer_numbers_total",
            "Sequence numbers an ordered replicate source asked its flow's sequencer for.",
            &EndpointCounters::ops);
  sequencer("sluice_sequencer_timeouts_total", "Of those, the requests that timed out.",
            &EndpointCounters::op_timeouts);
  sequencer("sluice_sequencer_failures_total",
            "Of those, the requests that failed otherwise (sequencer lost).",
            &EndpointCounters::op_failures);

  // Region handles (RemoteRegion): labels rank (that opened it), region,
  // owner and handle (its number in its process).
  const auto per_region = [&](const char* name, const char* type, const char* help, auto&& pick) {
    x.begin(name, type, help);
    for (size_t r = 0; r < reports_.size(); ++r) {
      for (const EndpointCounters& e : reports_[r]) {
        if (!is_region(e)) continue;
        Labels labels = {{"rank", std::to_string(r)},
                         {"region", e.flow},
                         {"owner", e.peer_detail.empty() ? std::string("?")
                                                         : std::to_string(e.peer_detail[0].rank)},
                         {"handle", std::to_string(e.slot)}};
        pick(e, labels);
      }
    }
  };
  const auto region_counter = [&](const char* name, const char* help,
                                  uint64_t EndpointCounters::*field) {
    per_region(name, "counter", help, [&](const EndpointCounters& e, const Labels& labels) {
      x.sample(labels, number(e.*field));
    });
  };
  region_counter("sluice_region_operations_total",
                 "Reads, writes and atomics issued on a region handle.", &EndpointCounters::ops);
  region_counter("sluice_region_bytes_total",
                 "Bytes read and written by a region handle's operations that succeeded.",
                 &EndpointCounters::bytes);
  region_counter("sluice_region_timeouts_total",
                 "A region handle's operations that reached their deadline.",
                 &EndpointCounters::op_timeouts);
  region_counter("sluice_region_failures_total",
                 "A region handle's operations that failed otherwise (owner lost, revoked, out "
                 "of bounds).",
                 &EndpointCounters::op_failures);
  per_region("sluice_region_failure_info", "gauge",
             "Why a region handle became unusable (1, the cause as a label).",
             [&](const EndpointCounters& e, const Labels& labels) {
               if (e.state != 4) return;
               Labels l = labels;
               l.emplace_back("cause", e.cause);
               x.sample(l, "1");
             });
  return x.take();
}

}  // namespace sluice::control
