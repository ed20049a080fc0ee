// apps/stream/command_run.h: what sluice-stream does with one query on
// this rank (internal to the command): run it through the engine on
// generated input or on files, gather every rank's report, print the
// summary or the JSON line, and --verify. Included by the two translation
// units that instantiate it for the queries (command_workloads.cc,
// command_nexmark.cc), which are compiled once into sluice_stream_command
// for both the command and its test build.
#pragma once

#include <signal.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "options.h"
#include "stream/engine.h"
#include "stream/file_source.h"
#include "stream/nexmark.h"
#include "stream/reference.h"
#include "stream/sinks.h"
#include "stream/workloads.h"

namespace sluice::stream::command {

namespace ss = sluice::stream;

// The rows go to the CSV files and stdout as asked.
struct CliSink {
  ss::CsvSink* csv = nullptr;
  ss::StdoutSink* out = nullptr;
  template <class R>
  void operator()(uint32_t worker, const ss::Row<R>& row) {
    if (csv != nullptr) (*csv)(worker, row);
    if (out != nullptr) (*out)(worker, row);
  }
};

inline std::string transport_label(const sluice::Cluster& cluster) {
  bool shm = false, ofi = false;
  for (uint32_t r = 0; r < cluster.world_size(); ++r) {
    if (r == cluster.rank() && cluster.world_size() > 1) continue;
    (cluster.transport_to(r) == sluice::Transport::kOfi ? ofi : shm) = true;
  }
  return shm && ofi ? "shm+ofi" : ofi ? "ofi" : "shm";
}

inline std::string window_label(const ss::WindowSpec& w) {
  if (w.is_session()) return "sessions with a gap of " + std::to_string(w.gap) + " ms";
  if (w.is_global()) return "one global window";
  if (w.step() == w.size) return "tumbling " + std::to_string(w.size) + " ms";
  return "sliding " + std::to_string(w.size) + " ms every " + std::to_string(w.step()) + " ms";
}

inline std::string late_json(const std::map<int64_t, uint64_t>& late) {
  std::string s = "{";
  for (const auto& [w, n] : late) {
    if (s.size() > 1) s += ",";
    // (append: GCC 12 warns falsely on chains of string +)
    s.append("\"").append(std::to_string(w)).append("\":").append(std::to_string(n));
  }
  return s + "}";
}

template <class Q>
int run_query(const ss::Options& opt, sluice::Cluster& cluster, const Q& query,
              size_t record_bytes) {
  const uint32_t rank = cluster.rank(), world = cluster.world_size();
  const uint32_t workers = world * opt.threads;
  ss::EngineOptions eo;
  eo.strategy = opt.strategy;
  eo.threads = opt.threads;
  eo.epoch_mib = opt.epoch_mib;
  eo.lag = opt.lag;
  eo.allowed_lateness = opt.lateness;
  eo.segment_bytes = opt.segment_bytes;
  if (opt.test_kill_rank == static_cast<int64_t>(rank)) {
    const uint64_t after = opt.test_kill_after;
    eo.on_progress = [after](uint32_t, uint64_t records) {
      if (records >= after) {
        std::fprintf(stderr, "test hook: killing this rank after %" PRIu64 " records\n", records);
        std::fflush(stderr);
        ::raise(SIGKILL);
      }
    };
  }
  std::unique_ptr<ss::CsvSink> csv;
  if (!opt.csv_out.empty())
    csv = std::make_unique<ss::CsvSink>(opt.csv_out, rank * opt.threads, opt.threads);
  ss::StdoutSink out;
  CliSink sink{csv.get(), opt.print_rows ? &out : nullptr};

  ss::Report mine = ss::run(cluster, query, eo, sink);
  csv.reset();  // flushes the files before anyone reads them
  if (!mine.error.empty()) {
    std::fprintf(stderr, "sluice-stream: rank %u: query failed: %s\n", rank, mine.error.c_str());
    return 1;
  }
  const auto all = cluster.allgather("stream-report", mine.encode());
  if (rank != 0) return 0;
  ss::Report total;
  for (const auto& s : all) total.add(ss::Report::decode(s));

  std::string verdict = "skipped", why;
  if (opt.verify) {
    const auto ref = ss::reference(query, workers, opt.lag, opt.lateness);
    const uint64_t ref_sum = ref.checksum();
    if (ref.records != total.records_in) {
      why = "records ingested " + std::to_string(total.records_in) + ", reference read " +
            std::to_string(ref.records);
    } else if (ref.rows.size() != total.rows || ref_sum != total.checksum) {
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "rows %" PRIu64 " checksum %016" PRIx64
                    ", reference rows %zu checksum %016" PRIx64,
                    total.rows, total.checksum, ref.rows.size(), ref_sum);
      why = buf;
    } else if (ref.late != total.late) {
      why = "late counts " + late_json(total.late) + ", reference " + late_json(ref.late);
    }
    verdict = why.empty() ? "OK" : "MISMATCH";
  }

  const double secs = std::max(total.seconds, 1e-9);
  const double rps = static_cast<double>(total.records_in) / secs;
  const double per_cpu = static_cast<double>(total.records_in) / std::max(total.cpu_seconds, 1e-9);
  std::vector<double> lat = total.latency_ms;
  const double p50 = ss::percentile(lat, 50), p99 = ss::percentile(lat, 99);
  const std::string transport = transport_label(cluster);
  const ss::WindowSpec window = query.window;
  if (opt.json) {
    std::printf(
        "{\"program\":\"sluice-stream\",\"query\":\"%s\",\"strategy\":\"%s\",\"ranks\":%u,"
        "\"threads\":%u,"
        "\"transport\":\"%s\",\"records\":%" PRIu64 ",\"record_bytes\":%zu,\"keys\":%" PRIu64
        ",\"zipf\":%.3f,\"disorder_ms\":%" PRId64 ",\"lag_ms\":%" PRId64
        ",\"allowed_lateness_ms\":%" PRId64 ",\"window_ms\":%" PRId64 ",\"slide_ms\":%" PRId64
        ",\"session_gap_ms\":%" PRId64 ",\"epoch_mib\":%.4g,\"seed\":%" PRIu64 ",\"rows\":%" PRIu64
        ",\"checksum\":\"%016" PRIx64
        "\",\"seconds\":%.6f,\"cpu_seconds\":%.3f,"
        "\"records_per_s\":%.0f,\"records_per_cpu_s\":%.0f,\"latency_p50_ms\":%.3f,\"latency_p99_"
        "ms\":%.3f,"
        "\"windows_triggered\":%zu,\"state_entries\":%" PRIu64 ",\"state_bytes\":%" PRIu64
        ",\"bytes_moved\":%" PRIu64 ",\"bytes_remote\":%" PRIu64 ",\"epochs\":%" PRIu64
        ",\"late_total\":%" PRIu64 ",\"late\":%s,\"verify\":\"%s\"}\n",
        opt.query.c_str(), ss::to_string(opt.strategy), world, opt.threads, transport.c_str(),
        total.records_in, record_bytes, opt.gen.keys, opt.gen.zipf, opt.gen.disorder, opt.lag,
        opt.lateness, window.size, window.step(), window.gap, opt.epoch_mib, opt.gen.seed,
        total.rows, total.checksum, secs, total.cpu_seconds, rps, per_cpu, p50, p99,
        total.latency_ms.size(), total.state_entries, total.state_bytes, total.bytes_moved,
        total.bytes_remote, total.epochs, total.late_total(), late_json(total.late).c_str(),
        verdict.c_str());
  } else {
    std::printf("sluice-stream: %s query, %s strategy, %u ranks x %u workers over %s\n",
                opt.query.c_str(), ss::to_string(opt.strategy), world, opt.threads,
                transport.c_str());
    std::printf("  data      %" PRIu64 " records of %zu B, %" PRIu64 " keys %s, disorder %" PRId64
                " ms, %" PRIu64 " records/ms/worker, seed %" PRIu64 "\n",
                total.records_in, record_bytes, opt.gen.keys,
                opt.gen.zipf > 0 ? ("zipf " + std::to_string(opt.gen.zipf)).c_str() : "uniform",
                opt.gen.disorder, opt.gen.rate, opt.gen.seed);
    std::printf("  windows   %s, watermark lag %" PRId64 " ms, allowed lateness %" PRId64
                " ms, epoch %.4g MiB\n",
                window_label(window).c_str(), opt.lag, opt.lateness, opt.epoch_mib);
    std::printf("  result    %" PRIu64 " rows, checksum %016" PRIx64 "\n", total.rows,
                total.checksum);
    std::printf(
        "  time      %.3f s (slowest rank), %.2f M records/s, %.2f M records per CPU-second (%.2f "
        "CPU-s)\n",
        secs, rps / 1e6, per_cpu / 1e6, total.cpu_seconds);
    std::printf("  latency   window output p50 %.3f ms, p99 %.3f ms over %zu window triggers\n",
                p50, p99, total.latency_ms.size());
    std::printf("  state     %" PRIu64 " (key, window) entries at peak, %.1f MB of tables\n",
                total.state_entries, static_cast<double>(total.state_bytes) / 1e6);
    std::printf("  moved     %.2f MB through flows, %.2f MB of it between ranks, %" PRIu64
                " epochs\n",
                static_cast<double>(total.bytes_moved) / 1e6,
                static_cast<double>(total.bytes_remote) / 1e6, total.epochs);
    std::printf("  late      %" PRIu64 " late records", total.late_total());
    int shown = 0;
    for (const auto& [w, n] : total.late) {
      if (shown++ == 8) {
        std::printf(" ...");
        break;
      }
      std::printf("%s window %" PRId64 ": %" PRIu64, shown == 1 ? ":" : ",", w, n);
    }
    std::printf("\n");
  }
  if (opt.verify) {
    if (verdict == "OK") {
      std::printf("verify: OK (%" PRIu64 " rows, checksum %016" PRIx64 ", %" PRIu64
                  " late records, equal to a single-threaded reference)\n",
                  total.rows, total.checksum, total.late_total());
    } else {
      std::printf("verify: MISMATCH: %s\n", why.c_str());
    }
  }
  std::fflush(stdout);
  return verdict == "MISMATCH" ? 1 : 0;
}

// The query on records read from files (--input): every rank reads its
// workers' parts before the run, and if one cannot, every rank fails with
// its message (rather than a worker thread dying mid-start).
template <class Rec, class MakeQuery>
int run_from_files(const ss::Options& opt, sluice::Cluster& cluster, MakeQuery make_query,
                   typename ss::FileInput<Rec>::Parse parse) {
  const bool csv =
      opt.input_format.empty()
          ? opt.input.size() >= 4 && opt.input.compare(opt.input.size() - 4, 4, ".csv") == 0
          : opt.input_format == "csv";
  if (csv && parse == nullptr) {
    throw std::invalid_argument("--query " + opt.query +
                                " reads binary input only (its CSV holds only some fields)");
  }
  ss::FileInput<Rec> in(opt.input, csv ? ss::FileFormat::kCsv : ss::FileFormat::kBinary, parse);
  const uint32_t workers = cluster.world_size() * opt.threads;
  std::string error;
  try {
    for (uint32_t t = 0; t < opt.threads; ++t) in.part(cluster.rank() * opt.threads + t, workers);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const auto errors = cluster.allgather("stream-input", error);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) {
      throw std::runtime_error("rank " + std::to_string(r) +
                               " cannot read its input: " + errors[r]);
    }
  }
  return run_query(opt, cluster, make_query(in.factory()), sizeof(Rec));
}

// A worker's input, generated or read from files, as one type: the command
// builds each query once for both (each query's engine is a template that
// took about 10 s to compile, twice). One virtual call per batch of records.
template <class Rec>
class AnyInput {
 public:
  template <class Source>
  explicit AnyInput(Source source) : impl_(std::make_unique<Impl<Source>>(std::move(source))) {}
  size_t operator()(std::span<Rec> out) { return impl_->fill(out); }
  std::span<const Rec> view(size_t max) { return impl_->view(max); }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual size_t fill(std::span<Rec> out) = 0;
    virtual std::span<const Rec> view(size_t max) = 0;
  };
  template <class Source>
  struct Impl final : Base {
    explicit Impl(Source s) : source(std::move(s)) {}
    size_t fill(std::span<Rec> out) override { return source(out); }
    std::span<const Rec> view(size_t max) override { return source.view(max); }
    Source source;
  };
  std::unique_ptr<Base> impl_;
};

template <class Rec>
using AnyMake = std::function<AnyInput<Rec>(uint32_t, uint32_t)>;

template <class Rec, class Make>
AnyMake<Rec> erase_input(Make make) {
  return [make = std::move(make)](uint32_t worker, uint32_t workers) {
    return AnyInput<Rec>(make(worker, workers));
  };
}

// Runs one query on generated input (`generated`, a factory of sources) or
// on files (--input), built by `build(AnyMake<Rec>)` either way.
template <class Rec, class Build, class Generated>
int run_either(const ss::Options& opt, sluice::Cluster& cluster, Build build, Generated generated,
               typename ss::FileInput<Rec>::Parse parse) {
  if (!opt.input.empty()) {
    return run_from_files<Rec>(
        opt, cluster, [&build](auto files) { return build(erase_input<Rec>(std::move(files))); },
        parse);
  }
  return run_query(opt, cluster, build(erase_input<Rec>(std::move(generated))), sizeof(Rec));
}

// Runs the query of opt.query on this rank and returns the process's exit
// status. The two halves of the query list, each in its own translation
// unit (they are the slowest to compile: each query's engine is a template).
int run_workload_query(const ss::Options& opt, sluice::Cluster& cluster,
                       const ss::WindowSpec& window);  // ysb, ro, cm
int run_nexmark_query(const ss::Options& opt, sluice::Cluster& cluster,
                      const ss::WindowSpec& window);  // nb7, q11, nb8, nb11

}  // namespace sluice::stream::command
