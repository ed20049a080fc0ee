// A job written on the harness (sluice/job.h) alone: every worker of every
// rank shuffles records to every worker by key, counts and checksums what it
// receives, and rank 0 gathers the reports and checks exactly-once delivery:
// as many records received as sent, and the same order-independent checksum.
//
//   sluice run -n 3 -- sluice-test-job-program --threads 2 --records 100000
//   sluice run -n 3 --kill 1@0.5 -- sluice-test-job-program --seconds 30
//
// Prints "VERIFIED <n> records" on rank 0, or the harness's root cause.
//
// With --local, no flow: each worker sums its own records, and the ranks
// whose workers started agree on every rank's sum (Cluster::agree); each
// prints "STARTED rank R with ranks L" and the lowest of them "AGREED ranks
// L: every worker summed N records" (or MISMATCH). With --hold-ms each rank
// prints "SET UP rank R" and its workers wait that long before the start, so
// that the launcher can kill a rank there (--faults-after "SET UP"); with
// --start-without-lost the others then start without it.
//
// With --unnamed-failures (under sluice run --restarts 1 and a --kill), the
// program takes a rank back (Job::set_rejoin): the new process waits a few
// seconds and ends, while a survivor's worker whose flow failed waits until
// some rank has rejoined and then throws an error that names no peer (each
// rank's first worker prints "RUNNING rank R" once started); the
// harness must still name the lost rank as the cause (the process it ran
// with is gone, though the rank is alive again).
//
// With --fail-after N, worker 1 of rank 1 throws an error of its own after
// sending N records (a local failure, not a fault injected from outside):
// its sibling sees its end aborted, a "lost peer" on its own rank, and the
// harness must name the worker's error as rank 1's cause.
#include <sluice/job.h>
#include <sluice/sluice.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

struct Record {
  uint64_t key;
  uint64_t value;
};

struct Report {
  uint64_t sent = 0, received = 0, sent_sum = 0, received_sum = 0;
  double seconds = 0, cpu_seconds = 0;
};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

// Throws what a failed call's handle says, with the lost peer when there is one.
template <class Handle>
[[noreturn]] void fail(const Handle& h, sluice::Status s, const char* what) {
  const std::string message = std::string(what) + ": " + sluice::to_string(s) + ": " + h.error();
  if (auto lost = h.lost_peer()) throw sluice::PeerLostError(lost->rank, message);
  throw std::runtime_error(message);
}

// --unnamed-failures: waits (up to 30 s) until a rank other than this one
// rejoined the job, then throws `message` as an error that names no peer.
[[noreturn]] void fail_unnamed(sluice::Cluster& cluster, const std::string& message) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto rejoined = [&] {
    for (uint32_t r = 0; r < cluster.world_size(); ++r) {
      if (r != cluster.rank() && cluster.incarnation(r) > 0 && cluster.alive(r)) return true;
    }
    return false;
  };
  while (!rejoined() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error(message + " (reported without naming a peer)");
}

std::string list(const std::vector<uint32_t>& ranks) {
  std::string s;
  for (uint32_t r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// --local: see the top of the file.
int local_job(sluice::JobContext& ctx, uint64_t records, int hold_ms, bool without_lost) {
  sluice::Cluster& cluster = ctx.cluster();
  const uint32_t threads = ctx.flags().threads;
  std::vector<uint64_t> sums(threads, 0);
  sluice::PoolOptions options;
  options.threads = threads;
  options.start_without_lost = without_lost;
  const sluice::PoolReport run =
      sluice::run_workers(cluster, options, [&](uint32_t t, sluice::StartLine& start) {
        if (hold_ms > 0) {
          if (t == 0) {
            std::printf("SET UP rank %u\n", ctx.rank());
            std::fflush(stdout);
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
        }
        start.wait();
        for (uint64_t i = 0; i < records; ++i) sums[t] += mix(i);
      });
  if (run.failure) return ctx.fail(*run.failure);
  std::printf("STARTED rank %u with ranks %s\n", ctx.rank(), list(run.started).c_str());
  std::fflush(stdout);
  uint64_t mine = 0;
  for (uint64_t s : sums) mine += s;
  const sluice::Gathered all = cluster.agree("job-program-sums", std::to_string(mine));
  uint64_t expected = 0;
  for (uint64_t i = 0; i < records; ++i) expected += mix(i);
  expected *= threads;
  for (size_t i = 0; i < all.ranks.size(); ++i) {
    if (all.values[i] != std::to_string(expected)) {
      return ctx.fail("MISMATCH: rank " + std::to_string(all.ranks[i]) + " summed " +
                      all.values[i] + ", not " + std::to_string(expected));
    }
  }
  if (ctx.rank() == all.ranks.front()) {
    std::printf("AGREED ranks %s: every worker summed %" PRIu64 " records\n",
                list(all.ranks).c_str(), records);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::Job job("sluice-test-job-program", "Shuffles records between every worker of every rank",
                  sluice::kFlagThreads | sluice::kFlagJson | sluice::kFlagCluster);
  uint64_t records = 10000;
  double seconds = 0;
  job.cli().add_option("--records", records, "Records each worker sends")->capture_default_str();
  job.cli().add_option("--seconds", seconds,
                       "Send for this long instead of a number of records (0: use --records)");
  bool local = false, without_lost = false, unnamed = false;
  // Job::set_rejoin is set before the flags are parsed: look for the flag.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--unnamed-failures") job.set_rejoin(true);
  }
  int hold_ms = 0;
  uint64_t fail_after = 0;
  job.cli().add_flag("--local", local, "No flow: each worker sums its own records");
  job.cli().add_option("--fail-after", fail_after,
                       "Worker 1 of rank 1 throws an error of its own after sending N records");
  job.cli().add_flag("--start-without-lost", without_lost,
                     "Start without the ranks lost before the start (PoolOptions)");
  job.cli().add_flag("--unnamed-failures", unnamed,
                     "Take a restarted rank back; survivors report failures naming no peer");
  job.cli()
      .add_option("--hold-ms", hold_ms, "Print 'SET UP rank R' and wait this long before the start")
      ->check(CLI::NonNegativeNumber);
  return job.main(argc, argv, [&](sluice::JobContext& ctx) {
    sluice::Cluster& cluster = ctx.cluster();
    const uint32_t threads = ctx.flags().threads;
    if (local) return local_job(ctx, records, hold_ms, without_lost);
    if (unnamed && cluster.incarnation(ctx.rank()) > 0) {
      // The new process of a killed rank: alive while the others look at
      // their failures, then gone.
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return 0;
    }
    auto spec = sluice::shuffle<Record>("job-program")
                    .sources(cluster.all_ranks(threads))
                    .targets(cluster.all_ranks(threads))
                    .key(&Record::key);
    auto flow = cluster.declare(spec);
    std::vector<Report> per_thread(threads);
    const sluice::PoolReport run = ctx.run_workers([&](uint32_t t, sluice::StartLine& start) {
      Report& me = per_thread[t];
      sluice::Worker w;
      w.add(cluster.target(spec, t), [&](std::span<const Record> batch) {
        for (const Record& r : batch) {
          ++me.received;
          me.received_sum += mix(r.key ^ r.value);
        }
      });
      auto out = cluster.source(spec, t);
      start.wait();
      if (unnamed && t == 0) {
        std::printf("RUNNING rank %u\n", ctx.rank());  // the launcher's --faults-after marker
        std::fflush(stdout);
      }
      auto fail = [&](const auto& h, sluice::Status s, const char* what) {
        if (!unnamed) ::fail(h, s, what);
        fail_unnamed(cluster, std::string(what) + ": " + sluice::to_string(s));
      };
      const uint64_t base = (uint64_t{ctx.rank()} * threads + t) << 40;
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
      for (uint64_t i = 0;; ++i) {
        if (seconds > 0 ? i % 1024 == 0 && std::chrono::steady_clock::now() >= until : i == records)
          break;
        if (fail_after > 0 && i == fail_after && t == 1 && ctx.rank() == 1) {
          throw std::runtime_error("worker 1 of rank 1 gave up after " + std::to_string(i) +
                                   " records (--fail-after)");
        }
        const Record r{base + i, i * 7};
        if (sluice::Status s = w.push(out, r); s != sluice::Status::kOk) fail(out, s, "push");
        ++me.sent;
        me.sent_sum += mix(r.key ^ r.value);
      }
      if (sluice::Status s = w.close(out); s != sluice::Status::kOk) fail(out, s, "close");
      if (sluice::Status s = w.run(); s != sluice::Status::kEndOfFlow) {
        const std::string message =
            std::string("run: ") + sluice::to_string(s) + ": " + w.error(w.reported());
        if (unnamed) fail_unnamed(cluster, std::string("run: ") + sluice::to_string(s));
        if (auto lost = w.lost_peer(w.reported())) throw sluice::PeerLostError(lost->rank, message);
        throw std::runtime_error(message);
      }
    });
    if (run.failure) return ctx.fail(*run.failure);

    Report mine;
    for (const Report& r : per_thread) {
      mine.sent += r.sent;
      mine.received += r.received;
      mine.sent_sum += r.sent_sum;
      mine.received_sum += r.received_sum;
    }
    mine.seconds = run.seconds;
    mine.cpu_seconds = run.cpu_seconds;
    const std::vector<Report> all = ctx.gather("job-program-report", mine);
    if (ctx.rank() != 0) return 0;
    Report sum;
    for (const Report& r : all) {
      sum.sent += r.sent;
      sum.received += r.received;
      sum.sent_sum += r.sent_sum;
      sum.received_sum += r.received_sum;
      sum.seconds = std::max(sum.seconds, r.seconds);
      sum.cpu_seconds += r.cpu_seconds;
    }
    const bool ok = sum.sent == sum.received && sum.sent_sum == sum.received_sum;
    if (ctx.flags().json) {
      std::printf("{\"records\":%" PRIu64
                  ",\"seconds\":%.6f,\"cpu_seconds\":%.3f,"
                  "\"transport\":\"%s\",\"verify\":\"%s\"}\n",
                  sum.received, sum.seconds, sum.cpu_seconds, ctx.transport_label().c_str(),
                  ok ? "OK" : "MISMATCH");
    }
    if (!ok) {
      return ctx.fail("MISMATCH: sent " + std::to_string(sum.sent) + " records, received " +
                      std::to_string(sum.received));
    }
    std::printf("VERIFIED %" PRIu64 " records over %s in %.3f s\n", sum.received,
                ctx.transport_label().c_str(), sum.seconds);
    return 0;
  });
}
