// stream/workloads.h: the benchmark workloads of sluice-stream, after the
// Slash paper: record layouts, deterministic generators and the queries.
//
// YSB (Yahoo! Streaming Benchmark): 78-byte ad events; keep the views (one
//   event in three), project (campaign, time), count per campaign in a
//   tumbling event-time window.
// RO (read-only): 16-byte (key, time) records; count per key (one global
//   window unless a window is given).
// CM (cluster monitoring): 64-byte task events in the shape of the Google
//   cluster trace (synthetic: the trace itself is not reachable here); mean
//   CPU request per job in a 2 s tumbling window.
//
// Generators are deterministic and disjoint per worker: worker g of W
// generates records [0, n_g) of its own partition (n_g = N/W, the first N%W
// workers one more), every field a hash of (seed, g, i). Record i has event
// time i / rate ms (rate: records per ms of event time per worker) minus a
// uniform displacement in [0, disorder] ms (the out-of-orderness bound,
// clamped at 0), and a key drawn uniformly from [0, keys) or, with
// zipf > 0, Zipf-distributed with exponent zipf (key 0 the most frequent).
//
// Thread safety: a generator belongs to one thread; GenSpec is a value.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stream/aggregates.h"
#include "stream/csv.h"
#include "stream/query.h"
#include "stream/window.h"

namespace sluice::stream {

struct GenSpec {
  uint64_t records = 10'000'000;  // in all, over every worker
  uint64_t keys = 100;            // key cardinality (YSB: campaigns)
  double zipf = 0;                // 0: uniform keys; > 0: Zipf exponent
  int64_t disorder = 0;           // ms: largest displacement of an event time
  uint64_t rate = 1000;           // records per ms of event time, per worker
  uint64_t seed = 1;
  uint64_t max_price = 100'000'000;  // nb7, q11, nb11: bid prices in [1, max_price] (cents)
  // Throws std::invalid_argument naming a bad field.
  void validate() const;
  // Records of worker g of `workers`.
  uint64_t count_of(uint32_t g, uint32_t workers) const {
    return records / workers + (g < records % workers ? 1 : 0);
  }
};

#pragma pack(push, 1)
struct YsbEvent {
  uint64_t user_id[2];
  uint64_t page_id[2];
  uint64_t ad_id;
  uint64_t campaign_id;
  int64_t event_time;
  uint32_t ip;
  uint8_t ad_type;     // 0..4: banner, modal, sponsored-search, mail, mobile
  uint8_t event_type;  // 0 view, 1 click, 2 purchase
  uint8_t padding[16];
};
#pragma pack(pop)
static_assert(sizeof(YsbEvent) == 78, "a YSB record is 78 bytes");
inline constexpr uint8_t kYsbView = 0;

struct RoRecord {
  uint64_t key;
  int64_t time;
};
static_assert(sizeof(RoRecord) == 16);

struct CmEvent {
  int64_t time;
  uint64_t job_id;
  uint64_t task_index;
  uint64_t machine_id;
  int64_t cpu;  // CPU request in thousandths of a core (integer, so the mean is exact)
  int64_t ram;  // memory request in KiB
  int32_t event_type;
  int32_t priority;
  uint64_t user;
};
static_assert(sizeof(CmEvent) == 64);

// Zipf sampling by rejection-inversion (Hörmann and Derflinger), O(1)
// memory for any key count: ranks 1..n, P(k) ~ k^-theta.
class Zipf {
 public:
  Zipf(uint64_t n, double theta);
  // A rank in [1, n]; `next_u01()` returns uniform doubles in [0, 1).
  template <class U>
  uint64_t sample(U&& next_u01) const {
    for (;;) {
      const double u = h_integral_n_ + next_u01() * (h_integral_x1_ - h_integral_n_);
      const double x = h_integral_inverse(u);
      double kd = static_cast<double>(static_cast<int64_t>(x + 0.5));
      if (kd < 1) kd = 1;
      if (kd > static_cast<double>(n_)) kd = static_cast<double>(n_);
      if (kd - x <= s_ || u >= h_integral(kd + 0.5) - h(kd)) return static_cast<uint64_t>(kd);
    }
  }

 private:
  double h(double x) const;
  double h_integral(double x) const;
  double h_integral_inverse(double x) const;
  uint64_t n_;
  double theta_, h_integral_x1_, h_integral_n_, s_;
};

// The fields of record i of worker g, shared by the three generators.
class RecordDice {
 public:
  RecordDice(const GenSpec& spec, uint32_t worker);
  // Starts record i; then key(), time() and next() draw its fields.
  void start(uint64_t i);
  uint64_t key();
  int64_t time() const { return time_; }
  uint64_t next();

 private:
  const GenSpec spec_;
  const uint64_t worker_salt_;
  Zipf zipf_;
  uint64_t state_ = 0;
  int64_t time_ = 0;
};

// A generator: fill(out) writes the worker's next records, 0 at the end.
class YsbSource {
 public:
  YsbSource(const GenSpec& spec, uint32_t worker, uint32_t workers);
  size_t operator()(std::span<YsbEvent> out);

 private:
  RecordDice dice_;
  uint64_t next_ = 0, count_ = 0;
};
class RoSource {
 public:
  RoSource(const GenSpec& spec, uint32_t worker, uint32_t workers);
  size_t operator()(std::span<RoRecord> out);

 private:
  RecordDice dice_;
  uint64_t next_ = 0, count_ = 0;
};
class CmSource {
 public:
  CmSource(const GenSpec& spec, uint32_t worker, uint32_t workers);
  size_t operator()(std::span<CmEvent> out);

 private:
  RecordDice dice_;
  uint64_t next_ = 0, count_ = 0;
};

// A worker's input as the queries read it: by default generated in full
// into memory when the worker starts (before the timed run, as the paper
// streams its input from main memory), so that throughput measures the
// engine and not the generator; with live = true generated while it is
// ingested.
template <class Gen, class Rec>
class WorkloadSource {
 public:
  WorkloadSource(const GenSpec& spec, uint32_t worker, uint32_t workers, bool live)
      : gen_(spec, worker, workers), live_(live) {
    if (live_) return;
    data_.resize(spec.count_of(worker, workers));
    size_t at = 0;
    while (at < data_.size()) at += gen_(std::span<Rec>(data_).subspan(at));
  }
  size_t operator()(std::span<Rec> out) {
    if (live_) return gen_(out);
    const size_t n = std::min(out.size(), data_.size() - pos_);
    std::copy_n(data_.data() + pos_, n, out.data());
    pos_ += n;
    return n;
  }
  // The next at most `max` records in place (no copy when generated
  // beforehand); valid until the next call. Empty at the end.
  std::span<const Rec> view(size_t max) {
    if (live_) {
      live_buf_.resize(max);
      return {live_buf_.data(), gen_(std::span<Rec>(live_buf_))};
    }
    const size_t n = std::min(max, data_.size() - pos_);
    const std::span<const Rec> out(data_.data() + pos_, n);
    pos_ += n;
    return out;
  }

 private:
  Gen gen_;
  bool live_;
  std::vector<Rec> data_, live_buf_;
  size_t pos_ = 0;
};

// The same input as binary records, DIR/input-<worker>.bin (file_source.h's
// kBinary format). Throws std::runtime_error naming a file it cannot write.
void write_input_binary(const std::string& query, const GenSpec& spec, uint32_t workers,
                        const std::string& dir);

// The columns of the CSV files write_input_csv writes, as FileInput
// (file_source.h) reads them back: a header may also name worker and seq,
// which are not read. Without a header: the columns listed, in order.
//   ysb: user_id,page_id (32 hex digits each),ad_id,campaign_id,ad_type,
//        event_type,event_time (ms),ip
//   ro:  key,time
//   cm:  time,job_id,task_index,machine_id,cpu,ram,event_type,priority,user
const CsvSchema<YsbEvent>& ysb_csv_schema();
const CsvSchema<RoRecord>& ro_csv_schema();
const CsvSchema<CmEvent>& cm_csv_schema();

// Writes every worker's generated input as CSV, one file per worker,
// DIR/input-<worker>.csv, with the worker and the record's position in its
// input first (the columns the SQL oracle needs to replay watermarks).
// Throws std::runtime_error naming a file it cannot write.
void write_input_csv(const std::string& query, const GenSpec& spec, uint32_t workers,
                     const std::string& dir);

// The queries. Projected records:
struct CampaignView {
  uint64_t campaign;
  int64_t time;
};
struct JobCpu {
  uint64_t job;
  int64_t time;
  int64_t cpu;
};

template <class MakeSource>
auto ysb_query_from(MakeSource make, WindowSpec window) {
  return from<YsbEvent>(std::move(make))
      .filter([](const YsbEvent& e) { return e.event_type == kYsbView; })
      .map([](const YsbEvent& e) {
        return CampaignView{e.campaign_id, e.event_time};
      })
      .window(window, &CampaignView::time)
      .key_by(&CampaignView::campaign)
      .aggregate(Count{});
}
// ysb's generated input: a factory of each worker's source.
inline auto ysb_input(const GenSpec& spec, bool live = false) {
  return [spec, live](uint32_t g, uint32_t w) {
    return WorkloadSource<YsbSource, YsbEvent>(spec, g, w, live);
  };
}
inline auto ysb_query(const GenSpec& spec, WindowSpec window, bool live = false) {
  return ysb_query_from(ysb_input(spec, live), window);
}

template <class MakeSource>
auto ro_query_from(MakeSource make, WindowSpec window) {
  return from<RoRecord>(std::move(make))
      .window(window, &RoRecord::time)
      .key_by(&RoRecord::key)
      .aggregate(Count{});
}
// ro's generated input: a factory of each worker's source.
inline auto ro_input(const GenSpec& spec, bool live = false) {
  return [spec, live](uint32_t g, uint32_t w) {
    return WorkloadSource<RoSource, RoRecord>(spec, g, w, live);
  };
}
inline auto ro_query(const GenSpec& spec, WindowSpec window, bool live = false) {
  return ro_query_from(ro_input(spec, live), window);
}

template <class MakeSource>
auto cm_query_from(MakeSource make, WindowSpec window) {
  return from<CmEvent>(std::move(make))
      .map([](const CmEvent& e) {
        return JobCpu{e.job_id, e.time, e.cpu};
      })
      .window(window, &JobCpu::time)
      .key_by(&JobCpu::job)
      .aggregate(Avg<int64_t>{}, &JobCpu::cpu);
}
// cm's generated input: a factory of each worker's source.
inline auto cm_input(const GenSpec& spec, bool live = false) {
  return [spec, live](uint32_t g, uint32_t w) {
    return WorkloadSource<CmSource, CmEvent>(spec, g, w, live);
  };
}
inline auto cm_query(const GenSpec& spec, WindowSpec window, bool live = false) {
  return cm_query_from(cm_input(spec, live), window);
}

}  // namespace sluice::stream
