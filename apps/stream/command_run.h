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
#include "stream/partitioned_source.h"
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
  // A checkpoint taken by another number of workers, restored by
  // `workers` (engine.h's rescaled restore): each old worker's token. The
  // CSV files are one per worker and cannot be split among others; Kafka's
  // output writes again what an old worker's checkpoint held and never
  // committed.
  void restore_rescaled(uint32_t worker, uint32_t workers,
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
      kafka->restore_rescaled(worker, workers, rest);
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
// --spares) or joined an elastic job (a vacancy's or a departed rank's
// next incarnation): it joins ranks that recover or rescale in the running
// job, whose only collectives are the restore's (engine.h) and an elastic
// job's turn, so it takes part in none of the collectives of a job's start
// (the input checks).
inline bool replacement(sluice::JobContext& ctx) {
  return ctx.cluster().incarnation(ctx.rank()) > 0;
}

// Before a run on followed files (--follow): every rank checks that each of
// its workers' files can be opened (path_of(worker, workers) names it) and
// every rank learns every rank's error, so that all fail alike, naming it.
void check_followed(sluice::JobContext& ctx, const ss::Options& opt,
                    const std::function<std::string(uint32_t, uint32_t)>& path_of);

// Whether a run that began in view `run` and ended with `mine` is
// recovered in the job (with checkpoints and --recover-within): every rank
// must decide alike, or one waits in the recovery's collectives while
// another votes on the Kafka output. So not only a failure that names a
// lost rank, but any failure while the membership changed: a rank killed
// and back (or replaced) within the run can leave a survivor's error
// naming no peer (a flow aborted under it). A failure that names no peer
// in an unchanged view waits up to the peer timeout for the registry to
// report a loss it may not have published yet.
bool needs_recovery(sluice::JobContext& ctx, const ss::Report& mine, const sluice::View& run);

// Waits up to `seconds` for a view in which every one of `ranks` is a
// member (again: a replacement took a lost one's place); nullopt if none
// came.
std::optional<sluice::View> await_members(sluice::JobContext& ctx,
                                          const std::vector<uint32_t>& ranks, double seconds);

// What a checkpoint must have been taken by to be restored into this run:
// the query and every option that changes its input or its results.
std::string job_fingerprint(const ss::Options& opt);

// What ends a followed input (files, sockets, a Kafka topic): the first
// stop signal, unless --stop-with-savepoint (or --elastic) makes it stop
// the job (or this rank) at a savepoint instead: the input then never
// ends by a signal.
inline std::function<bool()> input_stop(const ss::Options& opt) {
  if (opt.stop_with_savepoint || opt.elastic) return [] { return false; };
  return [] { return sluice::stop_requested(); };
}

// --kafka's broker and properties.
ss::KafkaConfig kafka_config(const ss::Options& opt);

// The Kafka output's vote (settle_kafka_output): flushed, every row this
// rank wrote is in the broker's log (invisible to read_committed) before
// it votes. "" if this rank votes to commit (`ok`: its query succeeded and
// the flush did), else why not.
std::string kafka_vote(ss::KafkaSink& sink, bool ok);
// Commits the sink's transactions if this rank and every other voted to
// commit (`votes`: each member's kafka_vote, "" for yes), aborts them
// otherwise. Returns "" if they were committed, else why not.
std::string kafka_settle(ss::KafkaSink& sink, std::string why,
                         const std::vector<std::string>& votes);
// Both, with the vote gathered among the members of the run's view (a
// view that changed since aborts).
std::string settle_kafka_output(sluice::JobContext& ctx, ss::KafkaSink& sink, bool ok,
                                const sluice::View& view);

// What --verify compares the job's result with: the single-threaded
// reference's figures on the same input.
struct Expected {
  uint64_t records = 0, rows = 0, checksum = 0;
  std::map<int64_t, uint64_t> late;
};

// The job's figures: every rank's report summed, and how many ranks sent
// one.
struct JobTotal {
  ss::Report sum;
  uint32_t ranks = 0;
};

// A rank's report as it travels to the one that prints the job's, and the
// sum of those of `ranks` (values[i] from ranks[i]; throws
// sluice::Error(kProtocol) naming a rank whose report is malformed).
std::string encode_report(const ss::Report& mine);
JobTotal sum_reports(const std::vector<uint32_t>& ranks, const std::vector<std::string>& values);

// Every member's report (of the current view, gathered again if it
// changes), summed, on the view's first member; nullopt elsewhere.
std::optional<JobTotal> gather_reports(sluice::JobContext& ctx, const ss::Report& mine);

// Prints the job's report where `total` is (gather_reports: on one rank),
// with --verify's verdict against `expected()` (called there only).
// Returns the exit status: 1 on a MISMATCH.
int report(const ss::Options& opt, sluice::JobContext& ctx, const std::optional<JobTotal>& total,
           const std::function<Expected()>& expected, size_t record_bytes,
           const ss::WindowSpec& window);

// This rank's outputs, for the workers of its place in a run's view: the
// CSV files, stdout, the Kafka topic and the late records' files as asked,
// made again when a rescale gives this rank other worker numbers.
class Outputs {
 public:
  Outputs(const ss::Options& opt, bool checkpoints) : opt_(opt), checkpoints_(checkpoints) {}
  // The sink of this rank's workers first .. first + threads - 1.
  CliSink& place(uint32_t first);
  CliSink& sink() { return cli_; }
  ss::CsvSink* csv() { return csv_.get(); }
  ss::CsvSink* late() { return late_.get(); }
  ss::KafkaSink* kafka() { return kafka_.get(); }
  // Fences the Kafka output's `workers` that no rank writes as any more (a
  // rescale to fewer workers after a loss: KafkaSink::fence).
  void fence(const std::vector<uint32_t>& workers);
  // Flushes and closes the files (before anyone reads them).
  void close_files() {
    csv_.reset();
    late_.reset();
  }

 private:
  const ss::Options& opt_;
  bool checkpoints_;
  std::optional<uint32_t> first_;
  std::unique_ptr<ss::CsvSink> csv_, late_;
  std::unique_ptr<ss::KafkaSink> kafka_;
  ss::StdoutSink out_;
  CliSink cli_;
};

// This rank's place in `view` (its index among the members); REQUIRES: a
// member.
uint32_t place_in(const sluice::View& view, uint32_t rank);

// An elastic job's turn (--elastic), taken by every member after each run
// and by a process that joined before its first: each says what it is
// about to do, in one allgather of the current view (taken again in the
// new one if the view changes meanwhile), with its report and its vote on
// the Kafka output:
//   "new"   a process that joined (or replaced a lost rank),
//   "stay"  stopped at a savepoint, or lost a member and goes on,
//   "leave" stopped at a savepoint because it was asked to leave (SIGTERM),
//   "done"  ran to the end of its input.
// All members decide alike: kDone if any ran to its end (the joiners then
// leave), kStopped if every member that ran was asked to leave (a stop at
// a savepoint, as --stop-with-savepoint), else kLeave for those asked to
// leave and kGoOn for the others, who wait until they have left.
enum class Turn : uint8_t { kGoOn, kLeave, kDone, kStopped };
struct ElasticTurn {
  Turn turn = Turn::kGoOn;
  std::vector<std::string> votes;  // the Kafka votes of the members that ran (kDone, kStopped)
  std::optional<JobTotal> total;   // their reports, summed, on the first of them (kDone, kStopped)
  std::string states;              // what each member said, e.g. "0 stay, 1 leave, 2 new"
  std::vector<uint32_t> ran;       // the members that ran (all but the "new"), increasing
};
ElasticTurn elastic_turn(sluice::JobContext& ctx, const std::string& state, const std::string& vote,
                         const ss::Report& mine);

// The end of a run that is the job's last, in `view`: commits or aborts
// the outputs (`votes`: every rank's Kafka vote, for an elastic job's
// turn; none: gathered here), then the report. Returns the exit status.
template <class Q>
int finish(const ss::Options& opt, sluice::JobContext& ctx, const Q& query, size_t record_bytes,
           Outputs& outputs, const ss::Report& mine, const sluice::View& view,
           const std::vector<std::string>* votes, std::optional<JobTotal> total) {
  // What the last checkpoint did not write (stopped at a savepoint: that
  // was the last, and a run restored from it writes the rest).
  const bool finished = !mine.failure && mine.savepoint == 0;
  if (outputs.csv() != nullptr && finished) outputs.csv()->commit();
  if (outputs.late() != nullptr && finished) outputs.late()->commit();
  outputs.close_files();
  if (ss::KafkaSink* kafka = outputs.kafka()) {
    const std::string why = votes != nullptr
                                ? kafka_settle(*kafka, kafka_vote(*kafka, !mine.failure), *votes)
                                : settle_kafka_output(ctx, *kafka, !mine.failure, view);
    if (!why.empty() && !mine.failure) return ctx.fail("the Kafka output was aborted: " + why);
  }
  if (mine.failure) return ctx.fail("query failed: " + mine.failure->describe());
  if (votes == nullptr) total = gather_reports(ctx, mine);
  return report(
      opt, ctx, total,
      [&] {
        // (Generated input in partitions: the reference of as many
        // workers, one partition each, each with its own watermark.)
        const uint32_t workers = opt.partitions != 0 ? opt.partitions : total->ranks * opt.threads;
        const auto ref = ss::reference(query, workers, opt.lag, opt.lateness);
        return Expected{ref.records, ref.rows.size(), ref.checksum(), ref.late};
      },
      record_bytes, query.window);
}

// An elastic job (--elastic): runs in the current view, takes a turn
// (elastic_turn) after each run, and goes on in the next view from the
// last complete checkpoint (rescaled: the savepoint it stopped at) until
// a turn ends it. `fresh`: this process joined the running job (or
// replaced a lost rank), so its first step is the turn, not a run.
// `run_in(view)` runs the query in a view. Returns the exit status.
template <class Q, class RunIn>
int run_elastic(const ss::Options& opt, sluice::JobContext& ctx, const Q& query,
                size_t record_bytes, Outputs& outputs, bool fresh, ss::EngineOptions& eo,
                RunIn& run_in) {
  sluice::Cluster& cluster = ctx.cluster();
  const uint32_t rank = ctx.rank();
  ss::Report mine;
  uint32_t went_on = 0;   // turns after which this rank went on
  uint32_t ran_with = 0;  // the workers of this rank's last run (0: none yet)
  for (bool skip_run = fresh;; skip_run = false) {
    std::string state = "new", vote;
    auto stopped = std::chrono::steady_clock::now();  // the run's end (or this process's start)
    sluice::View view;                                // the run's
    if (!skip_run) {
      view = cluster.view();
      ran_with = static_cast<uint32_t>(view.members.size()) * opt.threads;
      mine = run_in(view);
      stopped = std::chrono::steady_clock::now();
      if (mine.failure) {
        // Only a change of membership is survived (a lost member, or a
        // view that changed as the run started); any other failure ends
        // the job (the others' turn waits at most the setup timeout).
        if (!needs_recovery(ctx, mine, view))
          return ctx.fail("query failed: " + mine.failure->describe());
        // A lost member's replacement has --recover-within to come; then
        // the others go on without it.
        if (opt.recover_within_s > 0) (void)await_members(ctx, view.members, opt.recover_within_s);
        std::fprintf(stderr,
                     "sluice-stream: rank %u goes on from the last complete checkpoint after: "
                     "%s\n",
                     rank, mine.failure->describe().c_str());
        state = "stay";
      } else {
        state = mine.savepoint == 0 ? "done" : sluice::stop_requested() ? "leave" : "stay";
        if (outputs.kafka() != nullptr) vote = kafka_vote(*outputs.kafka(), true);
      }
    }
    ElasticTurn turn = elastic_turn(ctx, state, vote, mine);
    if (turn.turn == Turn::kDone || turn.turn == Turn::kStopped) {
      if (state == "new") {
        std::fprintf(
            stderr, "sluice-stream: rank %u joined a job that %s: it leaves without running\n",
            rank,
            turn.turn == Turn::kDone ? "had read its input to the end" : "stopped at a savepoint");
        return 0;
      }
      mine.recoveries = went_on;
      return finish(opt, ctx, query, record_bytes, outputs, mine, cluster.view(), &turn.votes,
                    turn.total);
    }
    if (turn.turn == Turn::kLeave) {
      // Its output is committed up to the savepoint (the sink aborts the
      // transaction begun after it, which holds nothing); the others
      // restore the savepoint without this rank once it has left.
      std::fprintf(stderr,
                   "sluice-stream: rank %u leaves the job at savepoint %" PRIu64
                   "; the others go on from it without this rank\n",
                   rank, mine.savepoint);
      return 0;
    }
    ++went_on;
    const sluice::View next = cluster.view();
    if (!skip_run && mine.failure && next.epoch == view.epoch) {
      // (needs_recovery saw the membership change: a run that failed in
      // this very view would fail again.)
      return ctx.fail("query failed and the membership did not change: " +
                      mine.failure->describe());
    }
    if (rank == next.members.front()) {
      std::string members;
      for (uint32_t r : next.members) members += (members.empty() ? "" : ",") + std::to_string(r);
      std::fprintf(
          stderr,
          "sluice-stream: the job goes on in view %" PRIu64
          " with ranks %s from the last complete checkpoint, %.1f ms after this rank's "
          "run stopped (turn: %s)\n",
          next.epoch, members.c_str(),
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - stopped)
              .count(),
          turn.states.c_str());
    }
    const auto workers = static_cast<uint32_t>(next.members.size()) * opt.threads;
    // The vanished workers' ids are dealt out among the members that ran
    // (a joiner knows nothing of the last run).
    std::vector<uint32_t> mine_to_fence;
    for (uint32_t w = workers; w < ran_with; ++w) {
      if (turn.ran[w % turn.ran.size()] == rank) mine_to_fence.push_back(w);
    }
    outputs.fence(mine_to_fence);
    eo.checkpoint.restore = true;
    eo.checkpoint.restore_from = 0;  // the savepoint, or the last complete checkpoint
  }
}

template <ss::Windows kWindows, class Q>
int run_query(const ss::Options& opt, sluice::JobContext& ctx, const Q& query,
              size_t record_bytes) {
  const uint32_t rank = ctx.rank();
  ss::EngineOptions eo;
  eo.strategy = opt.strategy;
  eo.threads = opt.threads;
  eo.key_groups = opt.key_groups;
  eo.epoch_mib = opt.epoch_mib;
  eo.lag = opt.lag;
  eo.allowed_lateness = opt.lateness;
  eo.upsert = opt.upsert;
  eo.segment_bytes = opt.segment_bytes;
  eo.throttle = opt.throttle;
  const bool checkpoints = !opt.checkpoint_dir.empty();
  uint64_t run_epoch = 0;  // the view of the run under way
  sluice::Cluster& cluster = ctx.cluster();
  if (checkpoints) {
    eo.checkpoint.dir = opt.checkpoint_dir;
    eo.checkpoint.every_ms = opt.checkpoint_every_ms;
    eo.checkpoint.full_every = opt.full_checkpoint_every;
    eo.checkpoint.restore = opt.restore || opt.restore_from != 0;
    eo.checkpoint.restore_from = opt.restore_from;
    eo.checkpoint.fingerprint = job_fingerprint(opt);
    if (opt.elastic) {
      // A signal makes this rank leave at a savepoint; a new view (a
      // process joined, a member was lost) makes every rank stop at one.
      eo.checkpoint.stop_with_savepoint = [&cluster, &run_epoch] {
        return sluice::stop_requested() || cluster.epoch() != run_epoch;
      };
    } else if (opt.stop_with_savepoint) {
      eo.checkpoint.stop_with_savepoint = sluice::stop_requested;
    }
    if (rank == 0) {
      // (With the run's size and view: a test's launcher can place a fault
      // after the first checkpoint a rescaled run took.)
      eo.on_checkpoint = [&eo, &opt](uint64_t id) {
        std::fprintf(
            stderr,
            "sluice-stream: checkpoint %" PRIu64 " complete: %zu workers in view %" PRIu64 "\n", id,
            eo.view ? eo.view->members.size() * opt.threads : 0, eo.view ? eo.view->epoch : 0);
      };
    }
  }
  Outputs outputs(opt, checkpoints);
  // A replacement process (sluice run --restarts or --spares), or one that
  // joined an elastic job, starts from the last checkpoint, as the others
  // do.
  const bool fresh = replacement(ctx);
  if (checkpoints && fresh) {
    eo.checkpoint.restore = true;
    eo.checkpoint.restore_from = 0;  // the survivors' last complete one
  }
  const auto run_in = [&](const sluice::View& view) {
    run_epoch = view.epoch;
    eo.view = view;
    eo.flow_name = flow_name_in(view.epoch);
    return ss::run<Q, CliSink, kWindows>(cluster, query, eo,
                                         outputs.place(place_in(view, rank) * opt.threads));
  };
  if (opt.elastic) return run_elastic(opt, ctx, query, record_bytes, outputs, fresh, eo, run_in);

  const sluice::View first = cluster.view();
  sluice::View last = first;  // the view of the last run
  ss::Report mine = run_in(first);
  uint32_t recoveries = 0;
  uint64_t replayed = 0;  // records this rank ingested again after recoveries
  while (checkpoints && opt.recover_within_s > 0 && needs_recovery(ctx, mine, last)) {
    // In-job recovery: wait for every rank to be back (a replacement took
    // the lost one's place), then all restore the last complete checkpoint.
    std::optional<sluice::View> all = await_members(ctx, first.members, opt.recover_within_s);
    if (!all) break;
    std::fprintf(stderr,
                 "sluice-stream: rank %u recovers from %s in view %" PRIu64
                 ", from the last complete checkpoint\n",
                 rank, mine.failure->describe().c_str(), all->epoch);
    eo.checkpoint.restore = true;
    eo.checkpoint.restore_from = 0;
    const uint64_t before = mine.records_in;
    last = *all;
    mine = run_in(last);
    replayed += before - std::min(before, mine.resumed_at);
    ++recoveries;
  }
  mine.recoveries = recoveries;
  mine.replayed = replayed;
  return finish(opt, ctx, query, record_bytes, outputs, mine, last, nullptr, std::nullopt);
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
  if (opt.partitions != 0) {
    return run_query<kWindows>(
        opt, ctx,
        build(erase_input<Rec>(ss::partitioned<Rec>(std::move(generated), opt.partitions))),
        sizeof(Rec));
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
