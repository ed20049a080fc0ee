// The program the combiner system tests run under `sluice run`: one combiner
// flow over deterministic inputs, checked against a single-process reference.
//
//   sluice-combiner-worker --targets all|0 --dist uniform|zipf [--slots S]
//       [--records N] [--groups G] [--local-groups L] [--same-thread] [--seed X]
//
// Every rank has S source endpoints; the targets are every rank's S slots
// (N:M, "all") or rank 0 slot 0 (N:1, "0"). Source i pushes `records`
// records whose keys are uniform over G groups or Zipf(1.1)-skewed over G
// groups, plus every 37th record in groups of its own that no other source
// has. Sources run on threads of their own and targets on others, or with
// --same-thread each slot's thread is both, through one sluice::Worker.
//
// Every rank replays every source's input to build the reference (plain
// sequential aggregates), and checks each of its targets' results against
// the reference groups that CombinerSpec::target_of routes to it: the same
// group set, integers and MIN/MAX exactly, floating SUM/AVG within the
// tolerance combiner.h documents. Rank 0 then checks that the targets hold
// every reference group between them and prints
//   VERIFIED <groups> groups, <records> records, ... <flushes> table flushes ...
// Any problem prints a line starting with FAILED and exits 1.
#include <sluice/sluice.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "combiner_reference.h"
#include "support/job_args.h"

namespace {

using sluice::combiner_test::check_count;
using sluice::combiner_test::check_field;
using sluice::combiner_test::RefField;
using sluice::combiner_test::SplitMix;
using sluice::combiner_test::Zipf;
namespace agg = sluice::detail;

struct Sale {
  uint64_t region;  // the group key
  int64_t qty;      // sum min max avg
  uint64_t big;     // sum (wraps: values near 2^62..2^63) max
  double price;     // sum min max avg, both signs
  uint32_t units;   // sum min
  int32_t delta;    // sum min max
  float weight;     // sum max
  uint32_t pad;
};

constexpr uint8_t kQty = agg::kAggSum | agg::kAggMin | agg::kAggMax | agg::kAggAvg;
constexpr uint8_t kBig = agg::kAggSum | agg::kAggMax;
constexpr uint8_t kPrice = agg::kAggSum | agg::kAggMin | agg::kAggMax | agg::kAggAvg;
constexpr uint8_t kUnits = agg::kAggSum | agg::kAggMin;
constexpr uint8_t kDelta = agg::kAggSum | agg::kAggMin | agg::kAggMax;
constexpr uint8_t kWeight = agg::kAggSum | agg::kAggMax;

constexpr uint64_t kPrivateBase = uint64_t{1} << 40;  // keys of one source only

struct Args {
  bool all_targets = true;
  bool zipf = false;
  uint32_t slots = 2;
  uint64_t records = 100000;  // per source
  uint64_t groups = 5000;
  uint32_t local_groups = 256;
  bool same_thread = false;
  uint64_t seed = 42;
};

[[noreturn]] void usage(const std::string& why) {
  std::printf("FAILED: %s\n", why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  std::string targets = "all";
  std::string dist = "uniform";
  sluice::testing::JobArgs(argc, argv,
                           "--targets all|0 --dist uniform|zipf [--slots S] [--records N] "
                           "[--groups G] [--local-groups L] [--same-thread] [--seed X]")
      .value("--targets", &targets)
      .value("--dist", &dist)
      .value("--slots", &a.slots)
      .value("--records", &a.records)
      .value("--groups", &a.groups)
      .value("--local-groups", &a.local_groups)
      .flag("--same-thread", &a.same_thread)
      .value("--seed", &a.seed)
      .parse();
  if (targets != "all" && targets != "0") usage("--targets is all or 0");
  a.all_targets = targets == "all";
  if (dist != "uniform" && dist != "zipf") usage("--dist is uniform or zipf");
  a.zipf = dist == "zipf";
  if (a.same_thread && !a.all_targets) usage("--same-thread needs --targets all");
  return a;
}

// Replays source `source`'s input, calling fn(const Sale&) for each record.
class Inputs {
 public:
  explicit Inputs(const Args& a) : a_(a), zipf_(a.zipf ? a.groups : 1, 1.1) {}
  template <class F>
  void replay(uint32_t source, F&& fn) const {
    SplitMix rng(a_.seed * 0x100000001b3ULL + source);
    for (uint64_t i = 0; i < a_.records; ++i) {
      const uint64_t x = rng(), y = rng(), z = rng();
      Sale s{};
      if (i % 37 == 0)
        s.region = kPrivateBase + uint64_t{source} * 1000 + x % 50;
      else
        s.region = a_.zipf ? zipf_(x) : x % a_.groups;
      s.qty = static_cast<int64_t>(y % 2001) - 1000;
      s.big = (uint64_t{1} << 62) + (z >> 2);
      s.price = static_cast<double>(static_cast<int64_t>(z % 2000000) - 500000) / 100.0;
      s.units = static_cast<uint32_t>(y >> 40);
      s.delta = static_cast<int32_t>(static_cast<int64_t>((y >> 20) % 100001) - 50000);
      s.weight = static_cast<float>(x >> 52) / 7.0f;
      fn(s);
    }
  }

 private:
  const Args& a_;
  Zipf zipf_;
};

struct RefGroup {
  RefField<int64_t> qty;
  RefField<uint64_t> big;
  RefField<double> price;
  RefField<uint32_t> units;
  RefField<int32_t> delta;
  RefField<float> weight;
  void add(const Sale& s) {
    qty.add(s.qty), big.add(s.big), price.add(s.price), units.add(s.units), delta.add(s.delta),
        weight.add(s.weight);
  }
};

std::string diff(const sluice::Group& g, const RefGroup& ref) {
  std::string why;
  check_count(g, ref.qty.count, &why);
  check_field(g, &Sale::qty, "qty", kQty, ref.qty, &why);
  check_field(g, &Sale::big, "big", kBig, ref.big, &why);
  check_field(g, &Sale::price, "price", kPrice, ref.price, &why);
  check_field(g, &Sale::units, "units", kUnits, ref.units, &why);
  check_field(g, &Sale::delta, "delta", kDelta, ref.delta, &why);
  check_field(g, &Sale::weight, "weight", kWeight, ref.weight, &why);
  return why;
}

struct Shared {
  std::mutex mu;
  std::vector<std::string> errors;
  uint64_t table_flushes = 0;
  uint64_t partials_sent = 0;
  uint64_t partials_merged = 0;
  std::vector<std::pair<uint32_t, sluice::CombinerResult>> results;  // (target index, result)
  void error(const std::string& e) {
    std::lock_guard<std::mutex> l(mu);
    errors.push_back(e);
  }
};

using Spec = sluice::CombinerSpec<Sale>;
constexpr auto kCollectLimit = std::chrono::seconds(150);

void source_done(const sluice::Source<sluice::Combined<Sale>>& src, Shared* sh) {
  std::lock_guard<std::mutex> l(sh->mu);
  sh->table_flushes += src.table_flushes();
  sh->partials_sent += src.partials_sent();
}

void target_done(uint32_t index, sluice::Target<sluice::Combined<Sale>>& dst, Shared* sh) {
  std::lock_guard<std::mutex> l(sh->mu);
  sh->partials_merged += dst.partials_merged();
  sh->results.emplace_back(index, dst.take_result());
}

void run_source(sluice::Cluster& c, const Spec& spec, const Inputs& in, uint32_t slot,
                uint32_t index, Shared* sh) {
  auto src = c.source(spec, slot);
  sluice::Status st = sluice::Status::kOk;
  in.replay(index, [&](const Sale& s) {
    if (st == sluice::Status::kOk) st = src.push(s);
  });
  if (st == sluice::Status::kOk) st = src.close();
  if (st != sluice::Status::kOk)
    return sh->error(std::string("source: ") + sluice::to_string(st) + ": " + src.error());
  source_done(src, sh);
}

void run_target(sluice::Cluster& c, const Spec& spec, uint32_t slot, uint32_t index, Shared* sh) {
  auto dst = c.target(spec, slot);
  const sluice::Status st = dst.collect(sluice::Clock::now() + kCollectLimit);
  if (st != sluice::Status::kOk)
    return sh->error(std::string("collect: ") + sluice::to_string(st) + ": " + dst.error());
  target_done(index, dst, sh);
}

// One thread that is a source and a target of the flow: its Worker merges
// the partials reaching its target while its own pushes and close wait.
void run_both(sluice::Cluster& c, const Spec& spec, const Inputs& in, uint32_t slot, uint32_t index,
              Shared* sh) {
  auto src = c.source(spec, slot);
  sluice::CombinerResult result;
  sluice::Worker w;
  w.add(c.target(spec, slot), [&](sluice::CombinerResult r) { result = std::move(r); });
  std::string failed;
  sluice::Status st = sluice::Status::kOk;
  in.replay(index, [&](const Sale& s) {
    if (st == sluice::Status::kOk) st = w.push(src, s);
  });
  if (st != sluice::Status::kOk)
    failed = std::string("push: ") + sluice::to_string(st) + ": " + src.error();
  if (failed.empty() && (st = w.close(src)) != sluice::Status::kOk)
    failed = std::string("close: ") + sluice::to_string(st) + ": " + src.error();
  if (failed.empty() &&
      (st = w.run(sluice::Clock::now() + kCollectLimit)) != sluice::Status::kEndOfFlow) {
    failed = std::string("run: ") + sluice::to_string(st) + ": " + w.error(w.reported());
  }
  if (!failed.empty()) {
    src.abort();
    return sh->error(failed);
  }
  source_done(src, sh);
  std::lock_guard<std::mutex> l(sh->mu);
  sh->partials_merged += result.partials();
  sh->results.emplace_back(index, std::move(result));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  try {
    auto c = sluice::Cluster::join();
    const auto sources = c.all_ranks(a.slots);
    const auto targets = a.all_targets ? c.all_ranks(a.slots) : c.ranks({0});
    auto spec = sluice::combiner<Sale>("sales")
                    .sources(sources)
                    .targets(targets)
                    .group_by(&Sale::region)
                    .sum(&Sale::qty)
                    .min(&Sale::qty)
                    .max(&Sale::qty)
                    .avg(&Sale::qty)
                    .sum(&Sale::big)
                    .max(&Sale::big)
                    .sum(&Sale::price)
                    .min(&Sale::price)
                    .max(&Sale::price)
                    .avg(&Sale::price)
                    .sum(&Sale::units)
                    .min(&Sale::units)
                    .sum(&Sale::delta)
                    .min(&Sale::delta)
                    .max(&Sale::delta)
                    .sum(&Sale::weight)
                    .max(&Sale::weight)
                    .count()
                    .local_groups(a.local_groups);
    auto flow = c.declare(spec);
    const Inputs inputs(a);

    Shared sh;
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < sources.size(); ++i) {
      if (sources[i].rank != c.rank()) continue;
      if (a.same_thread) {
        // all_ranks lists sources and targets alike, so index i is both.
        threads.emplace_back(run_both, std::ref(c), std::cref(spec), std::cref(inputs),
                             sources[i].slot, i, &sh);
      } else {
        threads.emplace_back(run_source, std::ref(c), std::cref(spec), std::cref(inputs),
                             sources[i].slot, i, &sh);
      }
    }
    for (uint32_t i = 0; i < targets.size() && !a.same_thread; ++i) {
      if (targets[i].rank != c.rank()) continue;
      threads.emplace_back(run_target, std::ref(c), std::cref(spec), targets[i].slot, i, &sh);
    }
    for (auto& t : threads) t.join();
    const double flow_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // The single-process reference, from every source's replayed input.
    std::unordered_map<uint64_t, RefGroup> ref;
    for (uint32_t s = 0; s < sources.size(); ++s)
      inputs.replay(s, [&](const Sale& r) { ref[r.region].add(r); });

    uint64_t verified = 0, private_groups = 0;
    for (const auto& [index, result] : sh.results) {
      uint64_t expected = 0;
      for (const auto& [key, g] : ref) expected += spec.target_of(key) == index;
      if (result.size() != expected) {
        sh.errors.push_back("target " + std::to_string(index) + " holds " +
                            std::to_string(result.size()) + " groups, the reference routes " +
                            std::to_string(expected) + " to it");
      }
      std::string why;
      for (const sluice::Group& g : result.groups()) {
        auto it = ref.find(g.key);
        if (it == ref.end()) {
          why += "group " + std::to_string(g.key) + " is in no input\n";
        } else if (spec.target_of(g.key) != index) {
          why += "group " + std::to_string(g.key) + " belongs to target " +
                 std::to_string(spec.target_of(g.key)) + "\n";
        } else {
          why += diff(g, it->second);
        }
        ++verified;
        private_groups += g.key >= kPrivateBase;
        if (why.size() > 2000) break;
      }
      if (!why.empty()) sh.errors.push_back("target " + std::to_string(index) + ":\n" + why);
    }
    for (const auto& e : sh.errors) std::printf("FAILED: rank %u: %s\n", c.rank(), e.c_str());

    const std::string mine =
        std::to_string(sh.errors.empty() ? 1 : 0) + " " + std::to_string(verified) + " " +
        std::to_string(private_groups) + " " + std::to_string(sh.table_flushes) + " " +
        std::to_string(sh.partials_sent) + " " + std::to_string(sh.partials_merged);
    const auto all = c.allgather("combiner-result", mine);
    if (c.leave() != sluice::Status::kOk) {
      std::printf("FAILED: rank %u: leave() did not finish cleanly\n", c.rank());
      return 1;
    }
    if (c.rank() == 0) {
      bool ok = true;
      uint64_t groups = 0, privates = 0, flushes = 0, sent = 0, merged = 0;
      for (const auto& s : all) {
        unsigned long long v[6] = {};
        if (std::sscanf(s.c_str(), "%llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                        &v[4], &v[5]) != 6)
          ok = false;
        ok &= v[0] == 1;
        groups += v[1], privates += v[2], flushes += v[3], sent += v[4], merged += v[5];
      }
      if (groups != ref.size()) {
        std::printf("FAILED: the targets hold %" PRIu64
                    " groups between them, the reference has %zu\n",
                    groups, ref.size());
        ok = false;
      }
      if (sent != merged) {
        std::printf("FAILED: sources sent %" PRIu64 " partials, targets merged %" PRIu64 "\n", sent,
                    merged);
        ok = false;
      }
      if (!ok) return 1;
      std::printf("VERIFIED %" PRIu64 " groups (%" PRIu64 " on one source only), %" PRIu64
                  " records, %zu sources, "
                  "%zu targets, %" PRIu64 " table flushes, %" PRIu64 " partials, flow %.2f s\n",
                  groups, privates, a.records * sources.size(), sources.size(), targets.size(),
                  flushes, sent, flow_seconds);
    }
    return sh.errors.empty() ? 0 : 1;
  } catch (const sluice::Error& e) {
    std::printf("FAILED: %s\n", e.what());
    return 3;
  }
}
