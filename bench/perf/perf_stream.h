// What the streaming modes (bandwidth, replicate, replicate_ordered) and the
// round-trip modes (latency, replicate_latency) share: the ranks' loops and
// the merge of their parts, parameterised by how many targets receive each
// record (1 for a shuffle flow, every target for a replicate flow).
//
// Compile time: a mode instantiates its loops once per supported record size
// (22 of them, perf_records.h), so the templates below hold only the timed
// loops and return plain structs (RankPart); the JSON, the percentiles and
// the error texts are built once, outside them. Keep it so: a JSON
// initializer list in a per-size template costs seconds of compile time per
// size.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "perf_clock.h"
#include "perf_mode.h"
#include "perf_records.h"

namespace sluice::tool::perf {

// What one rank of a flow job measured, as the loops below return it.
struct RankPart {
  bool source = false;
  uint64_t records = 0;
  uint64_t checksum = 0;  // streaming: the folded keys
  double seconds = 0;
  double cpu_seconds = 0;
  std::vector<double> rtt_us;  // round trips of a source: one per timed round trip
};

// The part as the rank sends it to rank 0 (what merge_stream and
// merge_round_trips read): role, records, seconds, cpu_seconds, and
// checksum (streaming) or rtt_us_p50/p99/p999 (a source's round trips).
inline nlohmann::json part_json(const RankPart& p, bool round_trips) {
  nlohmann::json j = {{"role", p.source ? "S" : "T"},
                      {"records", p.records},
                      {"seconds", p.seconds},
                      {"cpu_seconds", p.cpu_seconds}};
  if (!round_trips) {
    j["checksum"] = p.checksum;
  } else if (p.source) {
    j["rtt_us_p50"] = percentile(p.rtt_us, 50);
    j["rtt_us_p99"] = percentile(p.rtt_us, 99);
    j["rtt_us_p999"] = percentile(p.rtt_us, 99.9);
  }
  return j;
}

// Throws the failure of a flow call ("push: <error>"); out of line so that
// the loops carry no string building.
[[noreturn]] inline void flow_failed(const char* call, const std::string& error) {
  throw std::runtime_error(std::string(call) + ": " + error);
}

// Runs a mode's per-size `measure` (a generic lambda taking
// std::integral_constant<size_t, B>) for a runtime record size and returns
// the rank's part as JSON.
template <class Fn>
nlohmann::json run_part(uint32_t record_bytes, bool round_trips, Fn fn) {
  RankPart part;
  with_record_size(record_bytes, [&](auto b) { part = fn(b); });
  return part_json(part, round_trips);
}

// Streaming, on every rank of a declared flow `spec` (named `name`): every
// source pushes bytes / B records (keys key_of(rank * n + i)) and closes;
// every target copies each record out into scratch and folds its key into a
// checksum. Time: from the barrier to close / end-of-flow; CPU: getrusage.
template <size_t B, class Spec>
RankPart run_stream(Cluster& c, const WorkerArgs& a, const Spec& spec, const std::string& name) {
  using R = Rec<B>;
  const uint32_t rank = c.rank();
  const uint64_t n = a.bytes / B;
  // Records of up to 1 MiB: on the heap, not the stack.
  auto rec = std::make_unique<R>();
  if (rank < a.sources) {
    Source<R> out = c.source(spec, 0);
    fill_template_record(rec.get());
    const uint64_t first = uint64_t{rank} * n;
    // Runs (--push-batch): at most 256 KiB of records each, built in place.
    const size_t batch =
        std::max<size_t>(1, std::min<size_t>(a.push_batch, (size_t{256} << 10) / B));
    std::vector<R> run(batch > 1 ? batch : 0, *rec);
    c.barrier(name + "-go");
    const CpuTimer t;
    if (batch > 1) {
      for (uint64_t i = 0; i < n;) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(batch, n - i));
        for (size_t j = 0; j < k; ++j) run[j].key = key_of(first + i + j);
        if (out.push(std::span<const R>(run.data(), k)) != Status::kOk) [[unlikely]]
          flow_failed("push", out.error());
        i += k;
      }
    } else {
      for (uint64_t i = 0; i < n; ++i) {
        rec->key = key_of(first + i);
        if (out.push(*rec) != Status::kOk) [[unlikely]]
          flow_failed("push", out.error());
      }
    }
    if (out.close() != Status::kOk) flow_failed("close", out.error());
    // The checksum is computed, not accumulated: the loop does only what the ring's producer does.
    return {true, n, key_sum(first, n), t.seconds(), t.cpu_seconds(), {}};
  }
  Target<R> in = c.target(spec, 0);
  uint64_t sum = 0, count = 0;
  c.barrier(name + "-go");
  const CpuTimer t;
  while (auto batch = in.consume()) {
    for (const R& r : *batch) sum += take_record<B>(&r, rec.get());
    count += batch->size();
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  if (in.status() != Status::kEndOfFlow) flow_failed("consume", in.error());
  return {false, count, sum, seconds, cpu, {}};
}

// One sample from run_stream's parts: records = deliveries (records pushed x
// `copies`), seconds = the slowest target. Throws unless every target got
// exactly what it should (counts and key checksums).
inline nlohmann::json merge_stream(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                                   uint32_t record_bytes, uint32_t copies) {
  uint64_t pushed = 0, pushed_sum = 0, got = 0, got_sum = 0;
  double slowest_target = 0, slowest_source = 0, src_cpu = 0, tgt_cpu = 0;
  for (const nlohmann::json& p : parts) {
    const bool src = p["role"] == "S";
    (src ? pushed : got) += p["records"].get<uint64_t>();
    (src ? pushed_sum : got_sum) += p["checksum"].get<uint64_t>();
    double& slowest = src ? slowest_source : slowest_target;
    slowest = std::max(slowest, p["seconds"].get<double>());
    (src ? src_cpu : tgt_cpu) += p["cpu_seconds"].get<double>();
  }
  const uint64_t expected = uint64_t{a.sources} * (a.bytes / record_bytes);
  if (pushed != expected || got != expected * copies || pushed_sum != key_sum(0, expected) ||
      got_sum != pushed_sum * copies) {
    throw std::runtime_error("records lost or duplicated with " + std::to_string(record_bytes) +
                             " B records: sources pushed " + std::to_string(pushed) +
                             ", targets consumed " + std::to_string(got) + ", expected " +
                             std::to_string(expected * copies) +
                             (got_sum != pushed_sum * copies ? ", key checksums differ" : ""));
  }
  return {{"records", got},
          {"seconds", slowest_target},
          {"cpu_seconds", src_cpu + tgt_cpu},
          {"src_cpu_seconds", src_cpu},
          {"tgt_cpu_seconds", tgt_cpu},
          {"source_seconds", slowest_source}};
}

// Round trips, on a source rank: pushes one record on `out`, waits for it to
// come back on `in`, n + warm-up times (n = round_trips_for), and times each
// after the warm-up. Closes `out` and drains `in`.
template <size_t B>
RankPart run_round_trips(Cluster& c, const WorkerArgs& a, Source<Rec<B>>& out, Target<Rec<B>>& in,
                         const std::string& base) {
  using R = Rec<B>;
  auto rec = std::make_unique<R>();
  auto scratch = std::make_unique<R>();
  fill_template_record(rec.get());
  const uint32_t rank = c.rank();
  const uint32_t n = round_trips_for(a.round_trips, B);
  const uint32_t warmup = warmup_for(n);
  std::vector<double> rtt;
  rtt.reserve(n);
  c.barrier(base + "-go");
  const CpuTimer t;
  for (uint32_t i = 0; i < warmup + n; ++i) {
    const auto t0 = Clock::now();
    rec->key = key_of(uint64_t{rank} << 32 | i);
    if (out.push(*rec) != Status::kOk) flow_failed("push", out.error());
    auto batch = in.consume();
    if (!batch || batch->size() != 1) flow_failed("consume", in.error());
    if (take_record<B>(&(*batch)[0], scratch.get()) != rec->key)
      flow_failed("consume", "a round trip came back with another record's key");
    if (i >= warmup) rtt.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6);
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  if (out.close() != Status::kOk) flow_failed("close", out.error());
  while (in.consume()) {
  }
  if (in.status() != Status::kEndOfFlow) flow_failed("consume", in.error());
  return {true, n, 0, seconds, cpu, std::move(rtt)};
}

// Round trips, on a target rank: consumes every record on `in` and, if
// `echo` is set, pushes each back to the source it came from (the echo
// flow's targets are the sources in the same order). Closes `echo`.
template <size_t B>
RankPart run_echoes(Cluster& c, Target<Rec<B>>& in, Source<Rec<B>>* echo, const std::string& base) {
  using R = Rec<B>;
  auto rec = std::make_unique<R>();
  auto scratch = std::make_unique<R>();
  fill_template_record(rec.get());
  uint64_t consumed = 0;
  c.barrier(base + "-go");
  const CpuTimer t;
  while (auto batch = in.consume()) {
    const uint32_t back = in.last_source();
    for (const R& r : *batch) {
      rec->key = take_record<B>(&r, scratch.get());
      if (echo != nullptr && echo->push_to(back, *rec) != Status::kOk)
        flow_failed("push", echo->error());
      ++consumed;
    }
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  if (in.status() != Status::kEndOfFlow) flow_failed("consume", in.error());
  if (echo != nullptr && echo->close() != Status::kOk) flow_failed("close", echo->error());
  return {false, consumed, 0, seconds, cpu, {}};
}

// The sources' side of round-trip parts: records = timed round trips of
// all sources, seconds = the slowest source's, rtt_us_p50 = the median of
// the sources' medians, p99 / p99.9 = the worst source's.
struct RoundTripSources {
  uint64_t timed = 0;
  double seconds = 0, cpu = 0, p99 = 0, p999 = 0;
  std::vector<double> p50;

  void add(const nlohmann::json& p) {
    timed += p["records"].get<uint64_t>();
    seconds = std::max(seconds, p["seconds"].get<double>());
    cpu += p["cpu_seconds"].get<double>();
    p50.push_back(p["rtt_us_p50"].get<double>());
    p99 = std::max(p99, p["rtt_us_p99"].get<double>());
    p999 = std::max(p999, p["rtt_us_p999"].get<double>());
  }
  // The sample, with the targets' CPU time beside the sources'.
  nlohmann::json sample(double tgt_cpu) const {
    return {{"records", timed},
            {"seconds", seconds},
            {"cpu_seconds", cpu + tgt_cpu},
            {"src_cpu_seconds", cpu},
            {"tgt_cpu_seconds", tgt_cpu},
            {"rtt_us_p50", summarize(p50).median},
            {"rtt_us_p99", p99},
            {"rtt_us_p999", p999}};
  }
};

// One sample from round-trip parts (RoundTripSources). Targets' parts count
// the records they consumed: every round trip's record `copies` times.
inline nlohmann::json merge_round_trips(const std::vector<nlohmann::json>& parts,
                                        const WorkerArgs& a, uint32_t record_bytes,
                                        uint32_t copies) {
  RoundTripSources sources;
  uint64_t consumed = 0;
  double tgt_cpu = 0;
  for (const nlohmann::json& p : parts) {
    if (p["role"] == "S") {
      sources.add(p);
    } else {
      consumed += p["records"].get<uint64_t>();
      tgt_cpu += p["cpu_seconds"].get<double>();
    }
  }
  const uint32_t n = round_trips_for(a.round_trips, record_bytes);
  const uint64_t expected = uint64_t{a.sources} * (n + warmup_for(n)) * copies;
  if (sources.timed != uint64_t{a.sources} * n || consumed != expected) {
    throw std::runtime_error("round trips lost with " + std::to_string(record_bytes) +
                             " B records: targets consumed " + std::to_string(consumed) + " of " +
                             std::to_string(expected));
  }
  return sources.sample(tgt_cpu);
}

}  // namespace sluice::tool::perf
