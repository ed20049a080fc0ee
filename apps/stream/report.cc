#include "stream/report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace sluice::stream {

void Report::add(const Report& o) {
  if (error.empty()) error = o.error;
  records_in += o.records_in;
  input_bytes += o.input_bytes;
  rows += o.rows;
  checksum += o.checksum;
  bytes_moved += o.bytes_moved;
  bytes_remote += o.bytes_remote;
  epochs += o.epochs;
  state_entries += o.state_entries;
  state_bytes += o.state_bytes;
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

// One line of space-separated fields; the error (which may hold spaces)
// comes last, after "error:".
std::string Report::encode() const {
  std::ostringstream os;
  os.precision(17);
  os << records_in << ' ' << input_bytes << ' ' << rows << ' ' << checksum << ' ' << bytes_moved
     << ' ' << bytes_remote << ' ' << epochs << ' ' << state_entries << ' ' << state_bytes << ' '
     << seconds << ' ' << cpu_seconds << ' ' << late.size();
  for (const auto& [w, n] : late) os << ' ' << w << ' ' << n;
  os << ' ' << latency_ms.size();
  for (double l : latency_ms) os << ' ' << l;
  os << " error:" << error;
  return os.str();
}

Report Report::decode(const std::string& s) {
  Report r;
  const size_t e = s.find(" error:");
  std::istringstream is(s.substr(0, e));
  size_t nlate = 0, nlat = 0;
  is >> r.records_in >> r.input_bytes >> r.rows >> r.checksum >> r.bytes_moved >> r.bytes_remote >>
      r.epochs >> r.state_entries >> r.state_bytes >> r.seconds >> r.cpu_seconds >> nlate;
  for (size_t i = 0; i < nlate && is; ++i) {
    int64_t w = 0;
    uint64_t n = 0;
    is >> w >> n;
    r.late[w] += n;
  }
  is >> nlat;
  for (size_t i = 0; i < nlat && is; ++i) {
    double l = 0;
    is >> l;
    r.latency_ms.push_back(l);
  }
  if (e != std::string::npos) r.error = s.substr(e + 7);
  return r;
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  return v[static_cast<size_t>(std::llround(rank))];
}

}  // namespace sluice::stream
