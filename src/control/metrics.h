// What the registry serves to Prometheus: every rank's flow endpoint counters
// as the rank last reported them (COUNTERS, sent with its heartbeats), and
// the registry's own view of the ranks, rendered in the Prometheus text
// exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Every series carries the label job (the registry's address, as ranks and
// `sluice top` name the job). The families (docs/operations.md lists them
// with an example):
//   per rank      sluice_ranks{state}, sluice_rank_state{rank,host,state},
//                 sluice_rank_last_heartbeat_age_seconds{rank,host},
//                 sluice_rank_endpoints{rank}
//   per endpoint  labels rank, flow, role (source|target), endpoint ("(r,s)"):
//                 sluice_records_{pushed,consumed}_total (flows of fixed-size
//                 records only), sluice_bytes_{pushed,consumed}_total,
//                 sluice_segments_{published,consumed}_total,
//                 sluice_credit_waits_total, sluice_credit_wait_seconds_total,
//                 sluice_parks_total, sluice_park_seconds_total,
//                 sluice_endpoint_state{state},
//                 sluice_endpoint_failure_info{cause}, sluice_endpoint_peers,
//                 sluice_endpoint_opened_timestamp_seconds,
//                 sluice_ring_segments, sluice_ring_fill_segments (sources)
//   per peer      of a target, the labels above plus peer ("(r,s)"):
//                 sluice_peer_last_heard_timestamp_seconds, sluice_peer_ended
//   sequencer     of an ordered replicate source (endpoint labels):
//                 sluice_sequencer_{numbers,timeouts,failures}_total
//   per region    handle, labels rank, region, owner, handle:
//                 sluice_region_{operations,bytes,timeouts,failures}_total,
//                 sluice_region_failure_info{cause}
//   membership    sluice_membership_epoch, sluice_spares_waiting,
//                 sluice_membership_view_changes_total{cause}
//   registry      sluice_counters_reports_total,
//                 sluice_counters_reports_rejected_total
// A rank's series stay after it left or died, with its last report, so that
// a job's totals can be read after its ranks are gone.
//
// Thread safety: none; the registry's thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "control/protocol.h"

namespace sluice::control {

// The registry's view of one rank at the time of a scrape.
struct RankView {
  const char* state = "absent";  // "absent" (not joined), "alive", "left", "died", "vacant"
  std::string host;              // empty until it joined
  double heard_age_s = -1;       // since its last message; < 0: never joined
};

class JobMetrics {
 public:
  explicit JobMetrics(uint32_t world_size) : reports_(world_size) {}
  // A COUNTERS payload from `rank` (< world size) replaces what it reported
  // before. False, with *problem saying why, if the payload is malformed:
  // the rank's previous report stays, and the rejection is counted.
  bool report(uint32_t rank, std::string_view payload, std::string* problem);
  // The exposition text, one RankView per rank of the job.
  // `epoch`: the membership view's (the registry's count of losses,
  // departures and rejoins; 0 for the job as launched).
  // `spares`: spare processes waiting for a died rank's place.
  std::string render(const std::string& job, const std::vector<RankView>& ranks, uint64_t epoch = 0,
                     uint64_t spares = 0) const;
  // Counts a change of the membership view by its cause: "died", "left",
  // "rejoined" or "joined" (others are ignored).
  void view_changed(std::string_view cause);

 private:
  uint64_t view_changes_[4] = {0, 0, 0, 0};  // by kViewCauses
  std::vector<std::vector<EndpointCounters>> reports_;
  uint64_t accepted_ = 0;
  uint64_t rejected_ = 0;
};

// A label value escaped as the text format requires: \ as \\, " as \",
// newline as \n; bytes that are not valid UTF-8, and control characters
// other than tab and newline, become U+FFFD. Everything else passes
// unchanged.
std::string escape_label_value(std::string_view value);

}  // namespace sluice::control
