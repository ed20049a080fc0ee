// What the streaming modes (bandwidth, replicate, replicate_ordered) and the
// round-trip modes (latency, replicate_latency) share: the ranks' loops and
// the merge of their parts, parameterised by how many targets receive each
// record (1 for a shuffle flow, every target for a replicate flow).
#pragma once

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "perf_clock.h"
#include "perf_mode.h"
#include "perf_records.h"

namespace sluice::tool::perf {

// Streaming, on every rank of a declared flow `spec` (named `name`): every
// source pushes bytes / B records (keys key_of(rank * n + i)) and closes;
// every target copies each record out into scratch and folds its key into a
// checksum. Time: from the barrier to close / end-of-flow; CPU: getrusage.
template <size_t B, class Spec>
nlohmann::json run_stream(Cluster& c, const WorkerArgs& a, const Spec& spec, const std::string& name) {
  using R = Rec<B>;
  const uint32_t rank = c.rank();
  const uint64_t n = a.bytes / B;
  // Records of up to 1 MiB: on the heap, not the stack.
  auto rec = std::make_unique<R>();
  if (rank < a.sources) {
    Source<R> out = c.source(spec, 0);
    fill_template_record(rec.get());
    const uint64_t first = uint64_t{rank} * n;
    c.barrier(name + "-go");
    const CpuTimer t;
    for (uint64_t i = 0; i < n; ++i) {
      rec->key = key_of(first + i);
      if (out.push(*rec) != Status::kOk) [[unlikely]]
        throw std::runtime_error("push: " + out.error());
    }
    if (out.close() != Status::kOk) throw std::runtime_error("close: " + out.error());
    // The checksum is computed, not accumulated: the loop does only what the ring's producer does.
    return {{"role", "S"}, {"records", n}, {"checksum", key_sum(first, n)},
            {"seconds", t.seconds()}, {"cpu_seconds", t.cpu_seconds()}};
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
  if (in.status() != Status::kEndOfFlow) throw std::runtime_error("consume: " + in.error());
  return {{"role", "T"}, {"records", count}, {"checksum", sum}, {"seconds", seconds}, {"cpu_seconds", cpu}};
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
                             " B records: sources pushed " + std::to_string(pushed) + ", targets consumed " +
                             std::to_string(got) + ", expected " + std::to_string(expected * copies) +
                             (got_sum != pushed_sum * copies ? ", key checksums differ" : ""));
  }
  return {{"records", got},           {"seconds", slowest_target},   {"cpu_seconds", src_cpu + tgt_cpu},
          {"src_cpu_seconds", src_cpu}, {"tgt_cpu_seconds", tgt_cpu}, {"source_seconds", slowest_source}};
}

// Round trips, on a source rank: pushes one record on `out`, waits for it to
// come back on `in`, n + warm-up times (n = round_trips_for), and times each
// after the warm-up. Closes `out` and drains `in`.
template <size_t B>
nlohmann::json run_round_trips(Cluster& c, const WorkerArgs& a, Source<Rec<B>>& out, Target<Rec<B>>& in,
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
    if (out.push(*rec) != Status::kOk) throw std::runtime_error("push: " + out.error());
    auto batch = in.consume();
    if (!batch || batch->size() != 1) throw std::runtime_error("consume: " + in.error());
    if (take_record<B>(&(*batch)[0], scratch.get()) != rec->key)
      throw std::runtime_error("a round trip came back with another record's key");
    if (i >= warmup) rtt.push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6);
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  if (out.close() != Status::kOk) throw std::runtime_error("close: " + out.error());
  while (in.consume()) {
  }
  if (in.status() != Status::kEndOfFlow) throw std::runtime_error("consume: " + in.error());
  return {{"role", "S"},
          {"records", n},
          {"seconds", seconds},
          {"cpu_seconds", cpu},
          {"rtt_us_p50", percentile(rtt, 50)},
          {"rtt_us_p99", percentile(rtt, 99)},
          {"rtt_us_p999", percentile(rtt, 99.9)}};
}

// Round trips, on a target rank: consumes every record on `in` and, if
// `echo` is set, pushes each back to the source it came from (the echo
// flow's targets are the sources in the same order). Closes `echo`.
template <size_t B>
nlohmann::json run_echoes(Cluster& c, Target<Rec<B>>& in, Source<Rec<B>>* echo, const std::string& base) {
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
        throw std::runtime_error("push: " + echo->error());
      ++consumed;
    }
  }
  const double seconds = t.seconds(), cpu = t.cpu_seconds();
  if (in.status() != Status::kEndOfFlow) throw std::runtime_error("consume: " + in.error());
  if (echo != nullptr && echo->close() != Status::kOk) throw std::runtime_error("close: " + echo->error());
  return {{"role", "T"}, {"records", consumed}, {"seconds", seconds}, {"cpu_seconds", cpu}};
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
    return {{"records", timed},       {"seconds", seconds},          {"cpu_seconds", cpu + tgt_cpu},
            {"src_cpu_seconds", cpu}, {"tgt_cpu_seconds", tgt_cpu}, {"rtt_us_p50", summarize(p50).median},
            {"rtt_us_p99", p99},      {"rtt_us_p999", p999}};
  }
};

// One sample from round-trip parts (RoundTripSources). Targets' parts count
// the records they consumed: every round trip's record `copies` times.
inline nlohmann::json merge_round_trips(const std::vector<nlohmann::json>& parts, const WorkerArgs& a,
                                        uint32_t record_bytes, uint32_t copies) {
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
    throw std::runtime_error("round trips lost with " + std::to_string(record_bytes) + " B records: targets consumed " +
                             std::to_string(consumed) + " of " + std::to_string(expected));
  }
  return sources.sample(tgt_cpu);
}

}  // namespace sluice::tool::perf
