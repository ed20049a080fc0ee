// A combiner flow driven by one Worker thread per rank, under `sluice run`,
// public API only. Every rank's thread 0 is a source and a target of
// combiner flow "sums" (N:M by key, every rank to every rank) and of a plain
// shuffle flow "echo" carrying the same records, and runs both through one
// sluice::Worker: it pushes every record into both flows while the Worker
// merges arriving partials and consumes echo batches. Rings are tiny and
// local tables small, so partials are back-pressured most of the time and
// only the Worker's progress lets the job finish.
//
// Checks, against a reference every rank computes on its own by replaying
// every rank's input:
// - each of this rank's groups has exactly the reference's count and sums
//   (and MIN/MAX) for its key, and belongs to this rank;
// - over the job: the targets hold every reference group, their counts add
//   up to the records pushed (each record in exactly one group), and the
//   partials merged equal the partials sent;
// - echo: every record consumed exactly once (count and an order-independent
//   checksum over the job).
// Rank 0 prints "VERIFIED ..." only if all of it holds; any failure prints
// a line starting with FAILED and exits non-zero.
//
// sluice-combiner-worker-thread [--records N] [--groups G] [--seed X]
#include <sluice/sluice.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "support/job_args.h"

namespace {

struct Obs {
  uint64_t key;
  uint64_t value;  // SUM (wraps: values near 2^62) and MAX
  int64_t delta;   // SUM and MIN, both signs
  uint32_t rank;
  uint32_t seq;
};

struct Args {
  uint64_t records = 20000;  // per rank
  uint64_t groups = 3000;
  uint64_t seed = 7;
};

Args parse(int argc, char** argv) {
  Args a;
  sluice::testing::JobArgs(argc, argv, "[--records N] [--groups G] [--seed X]")
      .value("--records", &a.records)
      .value("--groups", &a.groups)
      .value("--seed", &a.seed)
      .parse();
  if (a.groups == 0) {
    std::printf("FAILED: --groups must be at least 1\n");
    std::exit(2);
  }
  return a;
}

// sluice::hash64 (the public routing hash) of x plus an odd constant, so
// that zero inputs do not hash to zero.
uint64_t mix(uint64_t x) { return sluice::hash64(x + 0x9e3779b97f4a7c15ULL); }

// Record `seq` of rank `rank`: the same on every rank that replays it.
Obs make(const Args& a, uint32_t rank, uint32_t seq) {
  const uint64_t x = mix(a.seed ^ (uint64_t{rank} << 40) ^ seq);
  const uint64_t y = mix(x);
  return Obs{x % a.groups, (uint64_t{1} << 62) + (y >> 2),
             static_cast<int64_t>(y % 200001) - 100000, rank, seq};
}

uint64_t fingerprint(const Obs& o) { return mix(o.key ^ (uint64_t{o.rank} << 40) ^ o.seq); }

// The plain sequential aggregates of one group.
struct Ref {
  uint64_t count = 0;
  uint64_t value_sum = 0;  // wrapping, as the combiner promises
  int64_t delta_sum = 0;
  int64_t delta_min = 0;
  uint64_t value_max = 0;
  void add(const Obs& o) {
    delta_min = count == 0 ? o.delta : std::min(delta_min, o.delta);
    value_max = count == 0 ? o.value : std::max(value_max, o.value);
    ++count;
    value_sum += o.value;
    delta_sum += o.delta;
  }
};

std::string diff(const sluice::Group& g, const Ref& r) {
  std::string why;
  auto check = [&](const char* what, auto got, auto want) {
    if (got != want) {
      why += "group " + std::to_string(g.key) + " " + what + " = " + std::to_string(got) +
             ", expected " + std::to_string(want) + "\n";
    }
  };
  check("count", g.count, r.count);
  check("sum(value)", g.sum(&Obs::value), r.value_sum);
  check("max(value)", g.max(&Obs::value), r.value_max);
  check("sum(delta)", g.sum(&Obs::delta), r.delta_sum);
  check("min(delta)", g.min(&Obs::delta), r.delta_min);
  return why;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    auto c = sluice::Cluster::join();
    const auto everyone = c.all_ranks(1);
    auto sums = sluice::combiner<Obs>("sums")
                    .sources(everyone)
                    .targets(everyone)
                    .group_by(&Obs::key)
                    .sum(&Obs::value)
                    .max(&Obs::value)
                    .sum(&Obs::delta)
                    .min(&Obs::delta)
                    .local_groups(64)
                    .segment_bytes(256)
                    .ring_segments(2);
    auto echo = sluice::shuffle<Obs>("echo")
                    .sources(everyone)
                    .targets(everyone)
                    .key(&Obs::key)
                    .segment_bytes(256)
                    .ring_segments(2);
    auto sums_flow = c.declare(sums);
    auto echo_flow = c.declare(echo);

    // The one worker thread of this rank (the main thread).
    sluice::CombinerResult result;
    int handed = 0;
    uint64_t echo_count = 0, echo_sum = 0;
    sluice::Worker w;
    const auto sums_in = w.add(c.target(sums, 0), [&](sluice::CombinerResult r) {
      result = std::move(r);
      ++handed;
    });
    w.add(c.target(echo, 0), [&](std::span<const Obs> batch) {
      for (const Obs& o : batch) ++echo_count, echo_sum += fingerprint(o);
    });
    auto sums_out = c.source(sums, 0);
    auto echo_out = c.source(echo, 0);
    std::vector<std::string> errors;
    const auto deadline = sluice::Clock::now() + std::chrono::seconds(120);
    sluice::Status st = sluice::Status::kOk;
    for (uint32_t i = 0; i < a.records && st == sluice::Status::kOk; ++i) {
      const Obs o = make(a, c.rank(), i);
      st = w.push(sums_out, o, deadline);
      if (st != sluice::Status::kOk) {
        errors.push_back(std::string("push sums: ") + sluice::to_string(st) + ": " +
                         sums_out.error());
      } else if ((st = w.push(echo_out, o, deadline)) != sluice::Status::kOk) {
        errors.push_back(std::string("push echo: ") + sluice::to_string(st) + ": " +
                         echo_out.error());
      }
    }
    if (errors.empty() && (st = w.close(sums_out, deadline)) != sluice::Status::kOk)
      errors.push_back(std::string("close sums: ") + sluice::to_string(st) + ": " +
                       sums_out.error());
    if (errors.empty() && (st = w.close(echo_out, deadline)) != sluice::Status::kOk)
      errors.push_back(std::string("close echo: ") + sluice::to_string(st) + ": " +
                       echo_out.error());
    if (errors.empty() && (st = w.run(deadline)) != sluice::Status::kEndOfFlow) {
      errors.push_back(std::string("run: ") + sluice::to_string(st) + ": input " +
                       std::to_string(w.reported()) + ": " + w.error(w.reported()));
    }
    if (!errors.empty()) {
      sums_out.abort();
      echo_out.abort();
    }
    if (errors.empty() && handed != 1) {
      errors.push_back("the combiner handler ran " + std::to_string(handed) + " times, not once");
    }
    if (errors.empty() && w.status(sums_in) != sluice::Status::kEndOfFlow)
      errors.push_back("the combiner input did not end with kEndOfFlow");

    // The reference: every rank's input, replayed here.
    std::map<uint64_t, Ref> ref;
    uint64_t ref_echo_sum = 0;
    for (uint32_t r = 0; r < c.world_size(); ++r) {
      for (uint32_t i = 0; i < a.records; ++i) {
        const Obs o = make(a, r, i);
        ref[o.key].add(o);
        ref_echo_sum += fingerprint(o);
      }
    }
    uint64_t mine = 0, counted = 0;
    std::string why;
    for (const sluice::Group& g : result.groups()) {
      ++mine;
      counted += g.count;
      auto it = ref.find(g.key);
      if (it == ref.end()) {
        why += "group " + std::to_string(g.key) + " is in no input\n";
      } else if (sums.target_of(g.key) != c.rank()) {
        why += "group " + std::to_string(g.key) + " belongs to rank " +
               std::to_string(sums.target_of(g.key)) + "\n";
      } else {
        why += diff(g, it->second);
      }
      if (why.size() > 2000) break;
    }
    uint64_t routed_here = 0;
    for (const auto& [key, r] : ref) routed_here += sums.target_of(key) == c.rank();
    if (errors.empty() && mine != routed_here) {
      errors.push_back("holds " + std::to_string(mine) + " groups, the reference routes " +
                       std::to_string(routed_here) + " here");
    }
    if (!why.empty()) errors.push_back(why);
    for (const auto& e : errors) std::printf("FAILED: rank %u: %s\n", c.rank(), e.c_str());

    char line[256];
    std::snprintf(line, sizeof(line),
                  "%d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                  " %" PRIu64,
                  errors.empty() ? 1 : 0, mine, counted, sums_out.partials_sent(),
                  result.partials(), sums_out.table_flushes(), echo_count, echo_sum);
    // Every handle ends before leave() (the lifecycle's rule): the sources'
    // last confirmations over ofi are then awaited by leave() instead of
    // given up, with a warning, by destructors that run after it.
    sums_out = {};
    echo_out = {};
    const auto all = c.allgather("combiner-worker-thread", line);
    if (c.leave() != sluice::Status::kOk) errors.push_back("leave() did not finish cleanly");
    if (c.rank() != 0) return errors.empty() ? 0 : 1;
    bool ok = errors.empty();
    uint64_t groups = 0, count = 0, sent = 0, merged = 0, flushes = 0, echoed = 0, echo_total = 0;
    for (const auto& s : all) {
      int good = 0;
      unsigned long long v[7] = {};
      if (std::sscanf(s.c_str(), "%d %llu %llu %llu %llu %llu %llu %llu", &good, &v[0], &v[1],
                      &v[2], &v[3], &v[4], &v[5], &v[6]) != 8) {
        good = 0;
      }
      ok &= good == 1;
      groups += v[0], count += v[1], sent += v[2], merged += v[3], flushes += v[4];
      echoed += v[5], echo_total += v[6];
    }
    const uint64_t records = a.records * c.world_size();
    auto fail = [&](const std::string& what) {
      std::printf("FAILED: %s\n", what.c_str());
      ok = false;
    };
    if (groups != ref.size())
      fail("the targets hold " + std::to_string(groups) + " groups, the reference has " +
           std::to_string(ref.size()));
    if (count != records)
      fail("the groups count " + std::to_string(count) + " records, " + std::to_string(records) +
           " were pushed");
    if (sent != merged)
      fail("sources sent " + std::to_string(sent) + " partials, targets merged " +
           std::to_string(merged));
    if (echoed != records || echo_total != ref_echo_sum)
      fail("echo consumed " + std::to_string(echoed) + " records (checksum " +
           std::to_string(echo_total) + "), expected " + std::to_string(records) + " (" +
           std::to_string(ref_echo_sum) + ")");
    if (!ok) return 1;
    std::printf("VERIFIED %" PRIu64 " groups, %" PRIu64 " records, %" PRIu64 " partials, %" PRIu64
                " table flushes, %" PRIu64 " echo records\n",
                groups, count, sent, flushes, echoed);
    return 0;
  } catch (const sluice::Error& e) {
    std::printf("FAILED: %s\n", e.what());
    return 3;
  }
}
