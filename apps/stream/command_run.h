// apps/stream/command_run.h: what sluice-stream does with one query on
// this rank (internal to the command): run it through the engine on
// generated input or on files, then hand this rank's report to report()
// (command_run.cc: gathers every rank's on rank 0, prints the summary or
// the JSON line, and --verify's verdict). Included by the two translation
// units that instantiate it for the queries (command_workloads.cc,
// command_nexmark.cc), compiled into sluice_stream_command.
#pragma once

#include <sluice/job.h>
#include <sluice/sluice.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "options.h"
#include "stream/engine.h"
#include "stream/file_source.h"
#include "stream/follow_source.h"
#include "stream/kafka.h"
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
  ss::KafkaSink* kafka = nullptr;
  ss::CsvSink* late_csv = nullptr;  // --late-output: the late records' side output
  template <class R>
  void operator()(uint32_t worker, const ss::Row<R>& row) {
    if (csv != nullptr) (*csv)(worker, row);
    if (out != nullptr) (*out)(worker, row);
    if (kafka != nullptr) (*kafka)(worker, row);
  }
  // A late record: the window it was late for, its key, its event time.
  void late(uint32_t worker, const ss::Row<int64_t>& record) {
    if (late_csv != nullptr) (*late_csv)(worker, record);
  }
  // Checkpoints (engine.h): the CSV files or the Kafka topic are the output
  // that commits with them (one of the two; stdout does not), and the late
  // records' files. The token: the late files' length, ':', the output's.
  std::string prepare(uint32_t worker, uint64_t c) {
    std::string token = late_csv != nullptr ? late_csv->prepare(worker, c) + ":" : ":";
    if (csv != nullptr) return token + csv->prepare(worker, c);
    if (kafka != nullptr) return token + kafka->prepare(worker, c);
    return token;
  }
  void committed(uint32_t worker, uint64_t c) {
    if (kafka != nullptr) kafka->committed(worker, c);
  }
  // A checkpoint taken by another number of workers (engine.h's rescaled
  // restore): each old worker's token. The CSV files are one per worker and
  // cannot be split among others; Kafka's output needs only to have
  // committed what each old worker's checkpoint held.
  void restore_rescaled(uint32_t worker,
                        const std::vector<std::pair<uint32_t, std::string>>& tokens) {
    if (csv != nullptr || late_csv != nullptr) {
      throw std::runtime_error(
          "--csv-out and --late-output are files per worker: a job restored on another number "
          "of workers writes --kafka-output (or only prints its rows)");
    }
    if (kafka != nullptr) {
      std::vector<std::pair<uint32_t, std::string>> rest;
      for (const auto& [g, token] : tokens) {
        const size_t colon = token.find(':');
        rest.emplace_back(g, colon == std::string::npos ? token : token.substr(colon + 1));
      }
      kafka->restore_rescaled(worker, rest);
    }
  }
  void restore(uint32_t worker, const std::string& token) {
    const size_t colon = token.find(':');
    const std::string late = colon == std::string::npos ? "" : token.substr(0, colon);
    const std::string rest = colon == std::string::npos ? token : token.substr(colon + 1);
    if (late_csv != nullptr) late_csv->restore(worker, late);
    if (csv != nullptr) csv->restore(worker, rest);
    if (kafka != nullptr) kafka->restore(worker, rest);
  }
};

// The engine's flow in a membership view: "stream" as launched, then one
// name per view, so that a recovery's flow is a new one on every rank (the
// replacement process's too).
inline std::string flow_name_in(uint64_t epoch) {
  return epoch == 0 ? "stream" : "stream-e" + std::to_string(epoch);
}

// Whether this process took a lost rank's place (sluice run --restarts or
// --spares): it joins ranks that recover in the running job, whose only
// collective is the restore's (engine.h), so it takes part in none of the
// collectives of a job's start (the input checks).
inline bool replacement(sluice::JobContext& ctx) {
  return ctx.cluster().incarnation(ctx.rank()) > 0;
}

// Before a run on followed files (--follow): every rank checks that each of
// its workers' files can be opened (path_of(worker, workers) names it) and
// every rank learns every rank's error, so that all fail alike, naming it.
void check_followed(sluice::JobContext& ctx, const ss::Options& opt,
                    const std::function<std::string(uint32_t, uint32_t)>& path_of);

// Whether a run that began in view `run_epoch` and ended with `mine` is
// recovered in the job (with checkpoints and --recover-within): every rank
// must decide alike, or one waits in the recovery's collectives while
// another votes on the Kafka output. So not only a failure that names a
// lost rank, but any failure while the membership changed: a rank killed
// and back (or replaced) within the run can leave a survivor's error
// naming no peer (a flow aborted under it). A failure that names no peer
// in an unchanged view waits up to the peer timeout for the registry to
// report a loss it may not have published yet.
bool needs_recovery(sluice::JobContext& ctx, const ss::Report& mine, uint64_t run_epoch);

// Waits up to `seconds` for a view in which every rank of the job is a
// member again; nullopt if none came.
std::optional<sluice::View> await_all_ranks(sluice::JobContext& ctx, double seconds);

// What a checkpoint must have been taken by to be restored into this run:
// the query and every option that changes its input or its results.
std::string job_fingerprint(const ss::Options& opt);

// What ends a followed input (files, sockets, a Kafka topic): the first
// stop signal, unless --stop-with-savepoint makes it stop the job at a
// savepoint instead (the input then never ends by a signal).
inline std::function<bool()> input_stop(const ss::Options& opt) {
  if (opt.stop_with_savepoint) return [] { return false; };
  return [] { return sluice::stop_requested(); };
}

// --kafka's broker and properties.
ss::KafkaConfig kafka_config(const ss::Options& opt);

// Commits the Kafka sink's transactions once every rank's query succeeded
// and its rows are flushed (`ok`: this rank's query did); aborts them
// otherwise. Returns "" if they were committed, else why not.
std::string settle_kafka_output(sluice::JobContext& ctx, ss::KafkaSink& sink, bool ok);

// What --verify compares the job's result with: the single-threaded
// reference's figures on the same input.
struct Expected {
  uint64_t records = 0, rows = 0, checksum = 0;
  std::map<int64_t, uint64_t> late;
};

// This rank's part after its engine ran without failing (`mine`): every
// rank's report goes to rank 0, which (with --verify) compares the sum with
// `expected()` (called on rank 0 only) and prints it. Returns the exit
// status: 1 on a MISMATCH.
int report(const ss::Options& opt, sluice::JobContext& ctx, const ss::Report& mine,
           const std::function<Expected()>& expected, size_t record_bytes,
           const ss::WindowSpec& window);

template <ss::Windows kWindows, class Q>
int run_query(const ss::Options& opt, sluice::JobContext& ctx, const Q& query,
              size_t record_bytes) {
  const uint32_t rank = ctx.rank(), workers = ctx.world_size() * opt.threads;
  ss::EngineOptions eo;
  eo.strategy = opt.strategy;
  eo.threads = opt.threads;
  eo.epoch_mib = opt.epoch_mib;
  eo.lag = opt.lag;
  eo.allowed_lateness = opt.lateness;
  eo.upsert = opt.upsert;
  eo.segment_bytes = opt.segment_bytes;
  eo.throttle = opt.throttle;
  const bool checkpoints = !opt.checkpoint_dir.empty();
  if (checkpoints) {
    eo.checkpoint.dir = opt.checkpoint_dir;
    eo.checkpoint.every_ms = opt.checkpoint_every_ms;
    eo.checkpoint.restore = opt.restore || opt.restore_from != 0;
    eo.checkpoint.restore_from = opt.restore_from;
    eo.checkpoint.fingerprint = job_fingerprint(opt);
    if (opt.stop_with_savepoint) eo.checkpoint.stop_with_savepoint = sluice::stop_requested;
    if (rank == 0) {
      eo.on_checkpoint = [](uint64_t id) {
        std::fprintf(stderr, "sluice-stream: checkpoint %" PRIu64 " complete\n", id);
      };
    }
  }
  std::unique_ptr<ss::CsvSink> csv;
  if (!opt.csv_out.empty()) {
    csv = std::make_unique<ss::CsvSink>(opt.csv_out, rank * opt.threads, opt.threads,
                                        /*transactional=*/checkpoints);
  }
  ss::StdoutSink out;
  std::unique_ptr<ss::KafkaSink> kafka;
  if (!opt.kafka_output.empty()) {
    kafka = std::make_unique<ss::KafkaSink>(kafka_config(opt), opt.kafka_output,
                                            opt.kafka_transactional_id, rank * opt.threads,
                                            opt.threads, /*per_checkpoint=*/checkpoints,
                                            /*by_window=*/opt.upsert);
  }
  std::unique_ptr<ss::CsvSink> late;
  if (!opt.late_output.empty()) {
    late = std::make_unique<ss::CsvSink>(opt.late_output, rank * opt.threads, opt.threads,
                                         /*transactional=*/checkpoints, ss::CsvSink::kLateHeader);
  }
  CliSink sink{csv.get(), opt.print_rows ? &out : nullptr, kafka.get(), late.get()};

  // A replacement process (sluice run --restarts or --spares) starts from
  // the last checkpoint, as the survivors do.
  const sluice::View first = ctx.cluster().view();
  if (checkpoints && replacement(ctx)) {
    eo.checkpoint.restore = true;
    eo.checkpoint.restore_from = 0;  // the survivors' last complete one
  }
  eo.flow_name = flow_name_in(first.epoch);
  ss::Report mine = ss::run<Q, CliSink, kWindows>(ctx.cluster(), query, eo, sink);
  uint32_t recoveries = 0;
  uint64_t replayed = 0;  // records this rank ingested again after recoveries
  uint64_t run_epoch = first.epoch;
  while (checkpoints && opt.recover_within_s > 0 && needs_recovery(ctx, mine, run_epoch)) {
    // In-job recovery: wait for every rank to be back (a replacement took
    // the lost one's place), then all restore the last complete checkpoint.
    std::optional<sluice::View> all = await_all_ranks(ctx, opt.recover_within_s);
    if (!all) break;
    std::fprintf(stderr,
                 "sluice-stream: rank %u recovers from %s in view %" PRIu64
                 ", from the last complete checkpoint\n",
                 rank, mine.failure->describe().c_str(), all->epoch);
    eo.flow_name = flow_name_in(all->epoch);
    run_epoch = all->epoch;
    eo.checkpoint.restore = true;
    eo.checkpoint.restore_from = 0;
    const uint64_t before = mine.records_in;
    mine = ss::run<Q, CliSink, kWindows>(ctx.cluster(), query, eo, sink);
    replayed += before - std::min(before, mine.resumed_at);
    ++recoveries;
  }
  mine.recoveries = recoveries;
  mine.replayed = replayed;
  // What the last checkpoint did not write (stopped at a savepoint: that
  // was the last, and a run restored from it writes the rest).
  const bool finished = !mine.failure && mine.savepoint == 0;
  if (csv && finished) csv->commit();
  if (late && finished) late->commit();
  csv.reset();  // flushes the files before anyone reads them
  late.reset();
  if (kafka) {
    const std::string why = settle_kafka_output(ctx, *kafka, !mine.failure);
    if (!why.empty() && !mine.failure) return ctx.fail("the Kafka output was aborted: " + why);
  }
  if (mine.failure) return ctx.fail("query failed: " + mine.failure->describe());
  return report(
      opt, ctx, mine,
      [&] {
        const auto ref = ss::reference(query, workers, opt.lag, opt.lateness);
        return Expected{ref.records, ref.rows.size(), ref.checksum(), ref.late};
      },
      record_bytes, query.window);
}

// The query on records read from files (--input): every rank reads its
// workers' parts before the run, and if one cannot, every rank fails with
// its message (rather than a worker thread dying mid-start).
template <class Rec, ss::Windows kWindows, class MakeQuery>
int run_from_files(const ss::Options& opt, sluice::JobContext& ctx, MakeQuery make_query,
                   const ss::CsvSchema<Rec>* schema) {
  const bool csv =
      opt.input_format.empty()
          ? opt.input.size() >= 4 && opt.input.compare(opt.input.size() - 4, 4, ".csv") == 0
          : opt.input_format == "csv";
  if (csv && schema == nullptr) {
    throw std::invalid_argument("--query " + opt.query +
                                " reads binary input only (its CSV holds only some fields)");
  }
  ss::FileInput<Rec> in(opt.input, csv ? ss::FileFormat::kCsv : ss::FileFormat::kBinary, schema,
                        !opt.no_header);
  const uint32_t workers = ctx.world_size() * opt.threads;
  std::string error;
  uint64_t records = 0;
  try {
    for (uint32_t t = 0; t < opt.threads; ++t)
      records += in.part(ctx.rank() * opt.threads + t, workers)->size();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (replacement(ctx)) {  // (no collective but the restore's: see replacement())
    if (!error.empty()) throw std::runtime_error("cannot read its input: " + error);
    return run_query<kWindows>(opt, ctx, make_query(in.factory()), sizeof(Rec));
  }
  // Every rank learns every rank's error (not only rank 0: all must stop).
  const auto errors = ctx.cluster().allgather("stream-input", error);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) {
      throw std::runtime_error("rank " + std::to_string(r) +
                               " cannot read its input: " + errors[r]);
    }
  }
  // An input of no records is a mistake (a wrong path pattern, an empty
  // export), not a query with an empty answer.
  uint64_t total = 0;
  for (const std::string& n :
       ctx.cluster().allgather("stream-input-records", std::to_string(records)))
    total += std::stoull(n);
  if (total == 0) throw std::runtime_error("the input " + opt.input + " holds no records");
  return run_query<kWindows>(opt, ctx, make_query(in.factory()), sizeof(Rec));
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
  bool done() const { return impl_->done(); }
  std::string position() const { return impl_->position(); }
  bool seek(const std::string& position) { return impl_->seek(position); }
  int lanes() const { return impl_->lanes(); }
  std::span<const uint32_t> batch_lanes() const { return impl_->batch_lanes(); }
  void idle_lanes(std::vector<char>& idle) const { impl_->idle_lanes(idle); }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual size_t fill(std::span<Rec> out) = 0;
    virtual std::span<const Rec> view(size_t max) = 0;
    virtual bool done() const = 0;
    virtual std::string position() const = 0;
    virtual bool seek(const std::string& position) = 0;
    virtual int lanes() const = 0;
    virtual std::span<const uint32_t> batch_lanes() const = 0;
    virtual void idle_lanes(std::vector<char>& idle) const = 0;
  };
  template <class Source>
  struct Impl final : Base {
    explicit Impl(Source s) : source(std::move(s)) {}
    size_t fill(std::span<Rec> out) override { return source(out); }
    std::span<const Rec> view(size_t max) override {
      if constexpr (requires { source.view(max); }) {
        return source.view(max);
      } else {  // a source that fills a buffer (Kafka): ours
        buf.resize(max);
        return std::span<const Rec>(buf.data(), source(std::span<Rec>(buf)));
      }
    }
    bool done() const override {
      if constexpr (requires { source.done(); }) {
        return source.done();
      } else {
        return true;  // a source without done() ends when it gives nothing
      }
    }
    // A source that can say where it is (Kafka: offsets per partition);
    // others are resumed by a count of records (engine.h).
    std::string position() const override {
      if constexpr (requires { source.position(); }) {
        return source.position();
      } else {
        return "";
      }
    }
    bool seek(const std::string& position) override {
      if constexpr (requires { source.seek(position); }) {
        source.seek(position);
        return true;
      } else {
        return false;
      }
    }
    // A source with a watermark per partition (Kafka; engine.h); -1: none.
    int lanes() const override {
      if constexpr (requires { source.lanes(); }) {
        return source.lanes();
      } else {
        return -1;
      }
    }
    std::span<const uint32_t> batch_lanes() const override {
      if constexpr (requires { source.batch_lanes(); }) {
        return source.batch_lanes();
      } else {
        return {};
      }
    }
    void idle_lanes(std::vector<char>& idle) const override {
      if constexpr (requires { source.idle_lanes(idle); }) source.idle_lanes(idle);
    }
    Source source;
    std::vector<Rec> buf;
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
// on files (--input), built by `build(AnyMake<Rec>)` either way; its
// windows are of kind kWindows (options.h: is_session_query).
template <class Rec, ss::Windows kWindows, class Build, class Generated>
int run_either(const ss::Options& opt, sluice::JobContext& ctx, Build build, Generated generated,
               const ss::CsvSchema<Rec>* schema) {
  if (!opt.kafka_input.empty()) {
    if (schema == nullptr) {
      throw std::invalid_argument("--query " + opt.query +
                                  " cannot read Kafka (its records have no CSV form)");
    }
    ss::KafkaInput<Rec> in(kafka_config(opt), opt.kafka_input, schema);
    in.connect();
    return run_query<kWindows>(opt, ctx, build(erase_input<Rec>(in.factory())), sizeof(Rec));
  }
  if (!opt.input_socket.empty()) {
    if (schema == nullptr) {
      throw std::invalid_argument("--query " + opt.query +
                                  " cannot read a socket (its records have no CSV form)");
    }
    ss::SocketInput<Rec> in(opt.input_socket, schema, input_stop(opt), opt.input_idle_ms);
    in.address_of(0, ctx.world_size() * opt.threads);  // one address per worker
    return run_query<kWindows>(opt, ctx, build(erase_input<Rec>(in.factory())), sizeof(Rec));
  }
  if (opt.follow) {
    if (schema == nullptr) {
      throw std::invalid_argument("--query " + opt.query +
                                  " cannot follow CSV files (its records have no CSV form)");
    }
    ss::FollowedInput<Rec> in(opt.input, schema, !opt.no_header, input_stop(opt),
                              opt.input_idle_ms);
    check_followed(ctx, opt,
                   [&in](uint32_t g, uint32_t workers) { return in.path_of(g, workers); });
    return run_query<kWindows>(opt, ctx, build(erase_input<Rec>(in.factory())), sizeof(Rec));
  }
  if (!opt.input.empty()) {
    return run_from_files<Rec, kWindows>(
        opt, ctx, [&build, &opt](auto files) { return build(erase_input<Rec>(std::move(files))); },
        schema);
  }
  return run_query<kWindows>(opt, ctx, build(erase_input<Rec>(std::move(generated))), sizeof(Rec));
}

// Runs the query of opt.query on this rank and returns the process's exit
// status. The two halves of the query list, each in its own translation
// unit (they are the slowest to compile: each query's engine is a template).
int run_workload_query(const ss::Options& opt, sluice::JobContext& ctx,
                       const ss::WindowSpec& window);  // ysb, ro, cm
int run_nexmark_query(const ss::Options& opt, sluice::JobContext& ctx,
                      const ss::WindowSpec& window);  // nb7, q11, nb8, nb11

}  // namespace sluice::stream::command
