#include "stream/report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>

namespace sluice::stream {

void Report::add(const Report& o) {
  records_in += o.records_in;
  input_bytes += o.input_bytes;
  rows += o.rows;
  updates += o.updates;
  checksum += o.checksum;
  bytes_moved += o.bytes_moved;
  bytes_remote += o.bytes_remote;
  epochs += o.epochs;
  state_entries += o.state_entries;
  state_bytes += o.state_bytes;
  checkpoints = std::max(checkpoints, o.checkpoints);
  checkpoint_bytes += o.checkpoint_bytes;
  checkpoint_pause_ms += o.checkpoint_pause_ms;
  checkpoint_sync_ms += o.checkpoint_sync_ms;
  restored_from = std::max(restored_from, o.restored_from);
  resumed_at += o.resumed_at;
  recoveries = std::max(recoveries, o.recoveries);
  replayed += o.replayed;
  savepoint = std::max(savepoint, o.savepoint);
  rescaled_from = std::max(rescaled_from, o.rescaled_from);
  restored_state += o.restored_state;
  restored_state_max = std::max(restored_state_max, o.restored_state_max);
  for (const auto& [w, n] : o.late) late[w] += n;
  latency_ms.insert(latency_ms.end(), o.latency_ms.begin(), o.latency_ms.end());
  seconds = std::max(seconds, o.seconds);
  cpu_seconds += o.cpu_seconds;
}

uint64_t Report::late_total() const {
  uint64_t n = 0;
  for (const auto& [w, c] : late) n += c;
  return n;
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  return v[static_cast<size_t>(std::llround(rank))];
}

}  // namespace sluice::stream
