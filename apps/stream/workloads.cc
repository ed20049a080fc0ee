#include "stream/workloads.h"

#include <sluice/hash.h>

#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "input_csv.h"
#include "stream/file_source.h"
#include "stream/nexmark.h"

namespace sluice::stream {

void GenSpec::validate() const {
  if (keys == 0) throw std::invalid_argument("--keys must be at least 1");
  if (rate == 0) throw std::invalid_argument("--rate must be at least 1 record per ms");
  if (disorder < 0) throw std::invalid_argument("--disorder must be >= 0 ms");
  if (zipf < 0 || !std::isfinite(zipf)) throw std::invalid_argument("--zipf must be a number >= 0");
  if (max_price == 0) throw std::invalid_argument("--max-price must be at least 1");
}

// ------------------------------------------------------------------ Zipf

namespace {
double helper1(double x) {
  return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}
double helper2(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x
                             : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}
}  // namespace

Zipf::Zipf(uint64_t n, double theta) : n_(n == 0 ? 1 : n), theta_(theta <= 0 ? 1.0 : theta) {
  h_integral_x1_ = h_integral(1.5) - 1;
  h_integral_n_ = h_integral(static_cast<double>(n_) + 0.5);
  s_ = 2 - h_integral_inverse(h_integral(2.5) - h(2));
}
double Zipf::h(double x) const { return std::exp(-theta_ * std::log(x)); }
double Zipf::h_integral(double x) const {
  const double lx = std::log(x);
  return helper2((1 - theta_) * lx) * lx;
}
double Zipf::h_integral_inverse(double x) const {
  double t = x * (1 - theta_);
  if (t < -1) t = -1;
  return std::exp(helper1(t) * x);
}

// ------------------------------------------------------------- the dice

RecordDice::RecordDice(const GenSpec& spec, uint32_t worker)
    : spec_(spec),
      worker_salt_(sluice::hash64(spec.seed * 0x9e3779b97f4a7c15ULL + worker + 1)),
      zipf_(spec.keys, spec.zipf) {}

void RecordDice::start(uint64_t i) {
  state_ = sluice::hash64(worker_salt_ ^ (i * 0xd6e8feb86659fd93ULL));
  int64_t t = static_cast<int64_t>(i / spec_.rate);
  if (spec_.disorder > 0)
    t -= static_cast<int64_t>(next() % static_cast<uint64_t>(spec_.disorder + 1));
  time_ = t < 0 ? 0 : t;
}

uint64_t RecordDice::next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return sluice::hash64(state_);
}

uint64_t RecordDice::key() {
  if (spec_.zipf <= 0) return next() % spec_.keys;
  return zipf_.sample([this] { return static_cast<double>(next() >> 11) * 0x1.0p-53; }) - 1;
}

// -------------------------------------------------------- the generators

YsbSource::YsbSource(const GenSpec& spec, uint32_t worker, uint32_t workers)
    : dice_(spec, worker), count_(spec.count_of(worker, workers)) {}

size_t YsbSource::operator()(std::span<YsbEvent> out) {
  size_t n = 0;
  for (; n < out.size() && next_ < count_; ++n, ++next_) {
    dice_.start(next_);
    YsbEvent& e = out[n];
    e.campaign_id = dice_.key();
    e.event_time = dice_.time();
    const uint64_t a = dice_.next(), b = dice_.next();
    e.user_id[0] = a;
    e.user_id[1] = b;
    e.page_id[0] = dice_.next();
    e.page_id[1] = dice_.next();
    const uint64_t c = dice_.next();
    e.ad_id = e.campaign_id * 10 + c % 10;  // ten ads per campaign, as YSB has
    e.ip = static_cast<uint32_t>(c >> 32);
    e.ad_type = static_cast<uint8_t>((c >> 8) % 5);
    e.event_type = static_cast<uint8_t>((c >> 16) % 3);
    for (auto& p : e.padding) p = 0;
  }
  return n;
}

RoSource::RoSource(const GenSpec& spec, uint32_t worker, uint32_t workers)
    : dice_(spec, worker), count_(spec.count_of(worker, workers)) {}

size_t RoSource::operator()(std::span<RoRecord> out) {
  size_t n = 0;
  for (; n < out.size() && next_ < count_; ++n, ++next_) {
    dice_.start(next_);
    out[n].key = dice_.key();
    out[n].time = dice_.time();
  }
  return n;
}

CmSource::CmSource(const GenSpec& spec, uint32_t worker, uint32_t workers)
    : dice_(spec, worker), count_(spec.count_of(worker, workers)) {}

size_t CmSource::operator()(std::span<CmEvent> out) {
  size_t n = 0;
  for (; n < out.size() && next_ < count_; ++n, ++next_) {
    dice_.start(next_);
    CmEvent& e = out[n];
    e.job_id = dice_.key();
    e.time = dice_.time();
    const uint64_t a = dice_.next(), b = dice_.next();
    e.task_index = a % 1000;
    e.machine_id = (a >> 16) % 12500;  // the trace's 12.5 K machines
    e.cpu = static_cast<int64_t>(b % 1001);
    e.ram = static_cast<int64_t>((b >> 16) % (64 * 1024 * 1024));
    e.event_type = static_cast<int32_t>((a >> 40) % 9);
    e.priority = static_cast<int32_t>((a >> 48) % 12);
    e.user = dice_.next() % 1000;
  }
  return n;
}

// ---------------------------------------------------------------- CSV

namespace {

// Worker g's input through its generator.
template <class Source, class Rec, class Line>
void write_all(const GenSpec& spec, uint32_t workers, const std::string& dir, const char* header,
               Line line) {
  detail::write_input_csv_files<Rec>(
      workers, dir, header, [&](uint32_t g) { return Source(spec, g, workers); }, line);
}

}  // namespace

void write_input_csv(const std::string& query, const GenSpec& spec, uint32_t workers,
                     const std::string& dir) {
  if (query == "ysb") {
    write_all<YsbSource, YsbEvent>(
        spec, workers, dir,
        "worker,seq,user_id,page_id,ad_id,campaign_id,ad_type,event_type,event_time,ip\n",
        [](FILE* f, uint32_t g, uint64_t seq, const YsbEvent& e) {
          std::fprintf(f,
                       "%u,%" PRIu64 ",%016" PRIx64 "%016" PRIx64 ",%016" PRIx64 "%016" PRIx64
                       ",%" PRIu64 ",%" PRIu64 ",%u,%u,%" PRId64 ",%u\n",
                       g, seq, e.user_id[0], e.user_id[1], e.page_id[0], e.page_id[1],
                       uint64_t{e.ad_id}, uint64_t{e.campaign_id}, unsigned{e.ad_type},
                       unsigned{e.event_type}, int64_t{e.event_time}, unsigned{e.ip});
        });
  } else if (query == "ro") {
    write_all<RoSource, RoRecord>(spec, workers, dir, "worker,seq,key,time\n",
                                  [](FILE* f, uint32_t g, uint64_t seq, const RoRecord& r) {
                                    std::fprintf(f, "%u,%" PRIu64 ",%" PRIu64 ",%" PRId64 "\n", g,
                                                 seq, r.key, r.time);
                                  });
  } else if (query == "cm") {
    write_all<CmSource, CmEvent>(
        spec, workers, dir,
        "worker,seq,time,job_id,task_index,machine_id,cpu,ram,event_type,priority,user\n",
        [](FILE* f, uint32_t g, uint64_t seq, const CmEvent& e) {
          std::fprintf(f,
                       "%u,%" PRIu64 ",%" PRId64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRId64
                       ",%" PRId64 ",%d,%d,%" PRIu64 "\n",
                       g, seq, e.time, e.job_id, e.task_index, e.machine_id, e.cpu, e.ram,
                       e.event_type, e.priority, e.user);
        });
  } else if (query == "nb7" || query == "q11" || query == "nb8" || query == "nb11") {
    write_nexmark_csv(query, spec, workers, dir);
  } else {
    throw std::invalid_argument("unknown query '" + query + "'");
  }
}

// ------------------------------------------------------ binary input files

namespace {

template <class Gen, class Rec>
void write_binary_all(const GenSpec& spec, uint32_t workers, const std::string& dir) {
  for (uint32_t g = 0; g < workers; ++g) {
    WorkloadSource<Gen, Rec> src(spec, g, workers, /*live=*/true);
    std::vector<Rec> all(spec.count_of(g, workers));
    size_t at = 0;
    while (at < all.size()) at += src(std::span<Rec>(all).subspan(at));
    write_binary<Rec>(dir + "/input-" + std::to_string(g) + ".bin", all);
  }
}

}  // namespace

void write_input_binary(const std::string& query, const GenSpec& spec, uint32_t workers,
                        const std::string& dir) {
  if (query == "ysb") return write_binary_all<YsbSource, YsbEvent>(spec, workers, dir);
  if (query == "ro") return write_binary_all<RoSource, RoRecord>(spec, workers, dir);
  if (query == "cm") return write_binary_all<CmSource, CmEvent>(spec, workers, dir);
  if (query == "nb7") return write_binary_all<BidWorkload<false>, Bid>(spec, workers, dir);
  if (query == "q11") return write_binary_all<BidWorkload<true>, Bid>(spec, workers, dir);
  if (query == "nb8") {
    return write_binary_all<NexmarkWorkload<kAuctionEvent>, NexmarkEvent>(spec, workers, dir);
  }
  if (query == "nb11") {
    return write_binary_all<NexmarkWorkload<kBidEvent>, NexmarkEvent>(spec, workers, dir);
  }
  throw std::invalid_argument("unknown query '" + query + "'");
}

// ------------------------------------------------------ reading CSV back

namespace {

// Two 64-bit words written as 32 hex digits.
bool hex128(std::string_view s, uint64_t* hi, uint64_t* lo) {
  return s.size() == 32 && csv_number(s.substr(0, 16), hi, 16) && csv_number(s.substr(16), lo, 16);
}

constexpr std::string_view kHex128 = "32 hex digits";

}  // namespace

const CsvSchema<YsbEvent>& ysb_csv_schema() {
  static const CsvSchema<YsbEvent> schema{
      "ysb records",
      {{"user_id", kHex128,
        [](std::string_view v, YsbEvent* e) { return hex128(v, &e->user_id[0], &e->user_id[1]); }},
       {"page_id", kHex128,
        [](std::string_view v, YsbEvent* e) { return hex128(v, &e->page_id[0], &e->page_id[1]); }},
       SLUICE_STREAM_CSV_NUMBER(YsbEvent, ad_id),
       SLUICE_STREAM_CSV_NUMBER(YsbEvent, campaign_id),
       SLUICE_STREAM_CSV_NUMBER(YsbEvent, ad_type),
       SLUICE_STREAM_CSV_NUMBER(YsbEvent, event_type),
       SLUICE_STREAM_CSV_NUMBER(YsbEvent, event_time),
       SLUICE_STREAM_CSV_NUMBER(YsbEvent, ip)},
      {"worker", "seq"},
      "event_time"};
  return schema;
}

const CsvSchema<RoRecord>& ro_csv_schema() {
  static const CsvSchema<RoRecord> schema{
      "ro records",
      {SLUICE_STREAM_CSV_NUMBER(RoRecord, key), SLUICE_STREAM_CSV_NUMBER(RoRecord, time)},
      {"worker", "seq"},
      "time"};
  return schema;
}

const CsvSchema<CmEvent>& cm_csv_schema() {
  static const CsvSchema<CmEvent> schema{
      "cm records",
      {SLUICE_STREAM_CSV_NUMBER(CmEvent, time), SLUICE_STREAM_CSV_NUMBER(CmEvent, job_id),
       SLUICE_STREAM_CSV_NUMBER(CmEvent, task_index), SLUICE_STREAM_CSV_NUMBER(CmEvent, machine_id),
       SLUICE_STREAM_CSV_NUMBER(CmEvent, cpu), SLUICE_STREAM_CSV_NUMBER(CmEvent, ram),
       SLUICE_STREAM_CSV_NUMBER(CmEvent, event_type), SLUICE_STREAM_CSV_NUMBER(CmEvent, priority),
       SLUICE_STREAM_CSV_NUMBER(CmEvent, user)},
      {"worker", "seq"},
      "time"};
  return schema;
}

}  // namespace sluice::stream
