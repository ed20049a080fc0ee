// What sluice-stream does with the reports of a query run (command_run.h):
// every rank's to rank 0 (ctx.gather), the verdict of --verify, the summary
// or the JSON line.
#include "command_run.h"

#include <sluice/job.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace sluice::stream::command {

namespace {

// Waits until `until` for a view that `good` accepts; nullopt if none came.
template <class Good>
std::optional<sluice::View> await_view_where(sluice::Cluster& cluster, Good good,
                                             sluice::Clock::time_point until) {
  sluice::View v = cluster.view();
  while (!good(v)) {
    sluice::Result<sluice::View> next = cluster.await_view(v.epoch, until);
    if (!next) return std::nullopt;
    v = *next;
  }
  return v;
}

}  // namespace

std::optional<sluice::View> await_members(sluice::JobContext& ctx,
                                          const std::vector<uint32_t>& ranks, double seconds) {
  return await_view_where(
      ctx.cluster(),
      [&ranks](const sluice::View& v) {
        return std::all_of(ranks.begin(), ranks.end(), [&v](uint32_t r) { return v.contains(r); });
      },
      sluice::Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
}

void Outputs::fence(const std::vector<uint32_t>& workers) {
  if (!opt_.kafka_output.empty())
    ss::KafkaSink::fence(kafka_config(opt_), opt_.kafka_output, opt_.kafka_transactional_id,
                         workers);
}

uint32_t place_in(const sluice::View& view, uint32_t rank) {
  const auto at = std::find(view.members.begin(), view.members.end(), rank);
  if (at == view.members.end()) {
    throw std::logic_error("rank " + std::to_string(rank) + " is not a member of view " +
                           std::to_string(view.epoch));
  }
  return static_cast<uint32_t>(at - view.members.begin());
}

CliSink& Outputs::place(uint32_t first) {
  if (first_ == first) return cli_;
  // (Another place only in an elastic job, whose outputs are Kafka's or
  // stdout: what the old workers wrote was committed at the savepoint.)
  first_ = first;
  const uint32_t threads = opt_.threads;
  csv_.reset();
  late_.reset();
  kafka_.reset();
  if (!opt_.csv_out.empty())
    csv_ = std::make_unique<ss::CsvSink>(opt_.csv_out, first, threads, checkpoints_);
  if (!opt_.kafka_output.empty()) {
    kafka_ = std::make_unique<ss::KafkaSink>(kafka_config(opt_), opt_.kafka_output,
                                             opt_.kafka_transactional_id, first, threads,
                                             /*per_checkpoint=*/checkpoints_,
                                             /*by_window=*/opt_.upsert);
  }
  if (!opt_.late_output.empty()) {
    late_ = std::make_unique<ss::CsvSink>(opt_.late_output, first, threads, checkpoints_,
                                          ss::CsvSink::kLateHeader);
  }
  cli_ = CliSink{csv_.get(), opt_.print_rows ? &out_ : nullptr, kafka_.get(), late_.get()};
  return cli_;
}

void check_followed(sluice::JobContext& ctx, const ss::Options& opt,
                    const std::function<std::string(uint32_t, uint32_t)>& path_of) {
  const uint32_t workers = ctx.world_size() * opt.threads;
  std::string error;
  try {
    for (uint32_t t = 0; t < opt.threads; ++t) {
      const std::string path = path_of(ctx.rank() * opt.threads + t, workers);
      if (::access(path.c_str(), R_OK) != 0)
        throw std::runtime_error("cannot follow " + path + ": " + std::strerror(errno));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  // A replacement process (a restart or a spare) joins ranks that are
  // recovering, not starting: no collective but the restore's; its own
  // files alone.
  if (replacement(ctx)) {
    if (!error.empty()) throw std::runtime_error(error);
    return;
  }
  const auto errors = ctx.cluster().allgather("stream-follow", error);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty())
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  }
}

bool needs_recovery(sluice::JobContext& ctx, const ss::Report& mine, const sluice::View& run) {
  if (!mine.failure) return false;
  // (A lost peer that was no member of the run, e.g. one lost before it,
  // is not what failed it.)
  if (mine.failure->lost_peer && run.contains(mine.failure->lost_peer->rank)) return true;
  sluice::Cluster& cluster = ctx.cluster();
  if (cluster.epoch() != run.epoch) return true;
  try {
    return cluster.await_view(run.epoch, sluice::Clock::now() + cluster.options().peer_timeout)
        .has_value();
  } catch (const sluice::Error&) {
    return false;  // the registry is gone: no view can come, nor a recovery
  }
}

std::string job_fingerprint(const ss::Options& opt) {
  // (Not the number of workers: a snapshot says how many took it, and a
  // job of another number restores it rescaled where its input allows.)
  const ss::WindowSpec w = ss::window_of(opt);
  std::string f = opt.query + " " + to_string(opt.strategy) + " window " + std::to_string(w.size) +
                  "/" + std::to_string(w.step()) + "/" + std::to_string(w.gap) + " lag " +
                  std::to_string(opt.lag) + " lateness " + std::to_string(opt.lateness) +
                  " key groups " + std::to_string(opt.key_groups) + " input ";
  if (!opt.input.empty()) return f + opt.input;
  if (!opt.kafka_input.empty()) {
    // The event time's source changes every record's time; idleness only
    // when windows fire, not what they hold.
    return f + "kafka " + opt.kafka_input +
           (opt.kafka_event_time == "timestamp" ? " event time from timestamps" : "");
  }
  const ss::GenSpec& g = opt.gen;
  return f + "generated " + std::to_string(g.records) + " records " + std::to_string(g.keys) +
         " keys zipf " + std::to_string(g.zipf) + " disorder " + std::to_string(g.disorder) +
         " rate " + std::to_string(g.rate) + " seed " + std::to_string(g.seed) + " max-price " +
         std::to_string(g.max_price) +
         (opt.partitions != 0 ? " partitions " + std::to_string(opt.partitions) : "");
}

ss::KafkaConfig kafka_config(const ss::Options& opt) {
  ss::KafkaConfig c;
  c.bootstrap = opt.kafka;
  if (opt.kafka_follow) c.stop = input_stop(opt);
  c.event_time_from_timestamp = opt.kafka_event_time == "timestamp";
  c.idle_ms = opt.kafka_idle_ms;
  return c;
}

std::string kafka_vote(ss::KafkaSink& sink, bool ok) {
  if (!ok) return "this rank's query failed";
  try {
    sink.flush();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string kafka_settle(ss::KafkaSink& sink, std::string why,
                         const std::vector<std::string>& votes) {
  for (const std::string& v : votes) {
    if (!v.empty() && why.empty()) why = "another rank failed";
  }
  if (why.empty()) {
    sink.commit();
  } else {
    sink.abort();
  }
  return why;
}

std::string settle_kafka_output(sluice::JobContext& ctx, ss::KafkaSink& sink, bool ok,
                                const sluice::View& view) {
  // Prepared: every row this rank wrote is in the broker's log (invisible
  // to read_committed) before it votes. All commit only if every member
  // of the run's view votes yes: a view that changed since (a member lost)
  // aborts. (A rank that dies between the vote and its commit leaves its
  // transactions open: the broker aborts them at their timeout.)
  std::string why = kafka_vote(sink, ok);
  sluice::kill_point("stream-kafka-before-vote");
  std::vector<std::string> votes;
  try {
    // Bounded (the setup timeout): a rank that does not come (one that went
    // to recover while this one votes) fails the vote, naming it, rather
    // than holding the job until its timeout.
    sluice::Cluster& cluster = ctx.cluster();
    sluice::Result<sluice::Gathered> all = cluster.allgather(
        view, "stream-kafka-commit", why, sluice::Clock::now() + cluster.options().setup_timeout);
    if (all) {
      votes = all->values;
    } else if (why.empty()) {
      why = "the membership changed since the run began (view " + std::to_string(view.epoch) +
            "): a member's rows may be missing";
    }
  } catch (const std::exception& e) {
    if (why.empty()) why = std::string("the vote on committing failed: ") + e.what();
  }
  return kafka_settle(sink, why, votes);
}

namespace {

// The fixed-size part of a rank's Report (copied byte for byte: every rank
// runs the same build).
struct Figures {
  uint64_t records_in, input_bytes, rows, checksum, bytes_moved, bytes_remote, epochs,
      state_entries, state_bytes, checkpoints, restored_from, resumed_at, recoveries, replayed,
      savepoint, rescaled_from, restored_state, restored_state_max, updates, checkpoint_bytes;
  double seconds, cpu_seconds;
  uint64_t lates, latencies;  // the LateCount and double elements that follow
  double checkpoint_pause_ms, checkpoint_sync_ms;
};

template <class T>
void append_bytes(std::string& out, const T* data, size_t n) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(data), n * sizeof(T));
}

}  // namespace

std::string encode_report(const Report& mine) {
  std::vector<LateCount> late;
  for (const auto& [w, n] : mine.late) late.push_back({w, n});
  const Figures f{mine.records_in,
                  mine.input_bytes,
                  mine.rows,
                  mine.checksum,
                  mine.bytes_moved,
                  mine.bytes_remote,
                  mine.epochs,
                  mine.state_entries,
                  mine.state_bytes,
                  mine.checkpoints,
                  mine.restored_from,
                  mine.resumed_at,
                  mine.recoveries,
                  mine.replayed,
                  mine.savepoint,
                  mine.rescaled_from,
                  mine.restored_state,
                  mine.restored_state_max,
                  mine.updates,
                  mine.checkpoint_bytes,
                  mine.seconds,
                  mine.cpu_seconds,
                  late.size(),
                  mine.latency_ms.size(),
                  mine.checkpoint_pause_ms,
                  mine.checkpoint_sync_ms};
  std::string out;
  append_bytes(out, &f, 1);
  append_bytes(out, late.data(), late.size());
  append_bytes(out, mine.latency_ms.data(), mine.latency_ms.size());
  return out;
}

JobTotal sum_reports(const std::vector<uint32_t>& ranks, const std::vector<std::string>& values) {
  JobTotal total;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string& v = values[i];
    Figures f{};
    if (v.size() >= sizeof(f)) std::memcpy(&f, v.data(), sizeof(f));
    if (v.size() < sizeof(f) || f.lates > v.size() || f.latencies > v.size() ||
        v.size() != sizeof(f) + f.lates * sizeof(LateCount) + f.latencies * sizeof(double)) {
      throw Error(ErrorCode::kProtocol, "rank " + std::to_string(i < ranks.size() ? ranks[i] : i) +
                                            " sent a report of " + std::to_string(v.size()) +
                                            " bytes that does not parse (another build?)");
    }
    Report one;
    one.records_in = f.records_in;
    one.input_bytes = f.input_bytes;
    one.rows = f.rows;
    one.checksum = f.checksum;
    one.bytes_moved = f.bytes_moved;
    one.bytes_remote = f.bytes_remote;
    one.epochs = f.epochs;
    one.state_entries = f.state_entries;
    one.state_bytes = f.state_bytes;
    one.checkpoints = f.checkpoints;
    one.restored_from = f.restored_from;
    one.resumed_at = f.resumed_at;
    one.recoveries = f.recoveries;
    one.replayed = f.replayed;
    one.savepoint = f.savepoint;
    one.rescaled_from = f.rescaled_from;
    one.restored_state = f.restored_state;
    one.restored_state_max = f.restored_state_max;
    one.updates = f.updates;
    one.checkpoint_bytes = f.checkpoint_bytes;
    one.seconds = f.seconds;
    one.cpu_seconds = f.cpu_seconds;
    one.checkpoint_pause_ms = f.checkpoint_pause_ms;
    one.checkpoint_sync_ms = f.checkpoint_sync_ms;
    const char* at = v.data() + sizeof(f);
    for (uint64_t k = 0; k < f.lates; ++k, at += sizeof(LateCount)) {
      LateCount l{};
      std::memcpy(&l, at, sizeof(l));
      one.late[l.window] += l.records;
    }
    one.latency_ms.resize(f.latencies);
    if (f.latencies != 0) std::memcpy(one.latency_ms.data(), at, f.latencies * sizeof(double));
    total.sum.add(one);
    ++total.ranks;
  }
  return total;
}

std::optional<JobTotal> gather_reports(sluice::JobContext& ctx, const Report& mine) {
  sluice::Cluster& cluster = ctx.cluster();
  const std::string value = encode_report(mine);
  for (;;) {
    sluice::Result<sluice::Gathered> all =
        cluster.allgather(cluster.view(), "stream-report", value);
    if (!all) continue;  // kViewChanged: again among the members of the new view
    if (all->ranks.empty() || all->ranks.front() != ctx.rank()) return std::nullopt;
    return sum_reports(all->ranks, all->values);
  }
}

ElasticTurn elastic_turn(sluice::JobContext& ctx, const std::string& state, const std::string& vote,
                         const Report& mine) {
  sluice::Cluster& cluster = ctx.cluster();
  const auto until = sluice::Clock::now() + cluster.options().setup_timeout;
  // state, the vote's length, the vote, the report.
  const std::string value =
      state + "\n" + std::to_string(vote.size()) + "\n" + vote + encode_report(mine);
  for (;;) {
    const sluice::View view = cluster.view();
    sluice::Result<sluice::Gathered> all = cluster.allgather(view, "stream-elastic", value, until);
    if (!all) continue;  // kViewChanged: every member takes the turn again in the new view
    std::vector<uint32_t> leaving;
    std::vector<std::string> reports;
    ElasticTurn turn;
    bool done = false, stay = false;
    std::string states;
    for (size_t i = 0; i < all->values.size(); ++i) {
      const std::string& v = all->values[i];
      const size_t a = v.find('\n'), b = a == std::string::npos ? a : v.find('\n', a + 1);
      size_t n = 0;
      if (b == std::string::npos ||
          std::sscanf(v.substr(a + 1, b - a - 1).c_str(), "%zu", &n) != 1 || b + 1 + n > v.size()) {
        throw Error(ErrorCode::kProtocol,
                    "rank " + std::to_string(all->ranks[i]) + " sent a malformed elastic turn");
      }
      const std::string s = v.substr(0, a);
      states += (states.empty() ? "" : ", ") + std::to_string(all->ranks[i]) + " " + s;
      if (s == "new") continue;
      turn.ran.push_back(all->ranks[i]);
      turn.votes.push_back(v.substr(b + 1, n));
      reports.push_back(v.substr(b + 1 + n));
      done |= s == "done";
      stay |= s == "stay";
      if (s == "leave") leaving.push_back(all->ranks[i]);
    }
    if (done && (stay || !leaving.empty())) {
      throw std::runtime_error("the ranks disagree on whether the job stopped at a savepoint (" +
                               states + "): every worker stops at a savepoint or none does");
    }
    if (done || !stay) {
      turn.turn = done ? Turn::kDone : Turn::kStopped;
      if (!turn.ran.empty() && turn.ran.front() == ctx.rank())
        turn.total = sum_reports(turn.ran, reports);
      return turn;
    }
    if (state == "leave") {
      turn.turn = Turn::kLeave;
      return turn;
    }
    // kGoOn, once those leaving have left (they leave as soon as they
    // know: the next run's collectives must not wait for them).
    const auto gone = [&leaving](const sluice::View& v) {
      return std::none_of(leaving.begin(), leaving.end(),
                          [&v](uint32_t r) { return v.contains(r); });
    };
    if (!await_view_where(cluster, gone, sluice::Clock::now() + cluster.options().setup_timeout)) {
      throw std::runtime_error("ranks that were to leave the job at its savepoint did not (" +
                               states + ")");
    }
    turn.turn = Turn::kGoOn;
    turn.states = states;
    return turn;
  }
}

namespace {

std::string window_label(const WindowSpec& w) {
  if (w.is_session()) return "sessions with a gap of " + std::to_string(w.gap) + " ms";
  if (w.is_global()) return "one global window";
  if (w.step() == w.size) return "tumbling " + std::to_string(w.size) + " ms";
  return "sliding " + std::to_string(w.size) + " ms every " + std::to_string(w.step()) + " ms";
}

std::string late_json(const std::map<int64_t, uint64_t>& late) {
  std::string s = "{";
  for (const auto& [w, n] : late) {
    if (s.size() > 1) s += ",";
    // (append: GCC 12 warns falsely on chains of string +)
    s.append("\"").append(std::to_string(w)).append("\":").append(std::to_string(n));
  }
  return s + "}";
}

}  // namespace

int report(const Options& opt, sluice::JobContext& ctx, const std::optional<JobTotal>& gathered,
           const std::function<Expected()>& expected, size_t record_bytes,
           const WindowSpec& window) {
  if (!gathered) return 0;
  const Report& total = gathered->sum;
  const uint32_t world = gathered->ranks;

  // Stopped at a savepoint, the job has not produced its whole result:
  // --verify is for the run restored from it.
  std::string verdict = "skipped", why;
  if (opt.verify && total.savepoint == 0) {
    const Expected ref = expected();
    if (ref.records != total.records_in) {
      why = "records ingested " + std::to_string(total.records_in) + ", reference read " +
            std::to_string(ref.records);
    } else if (ref.rows != total.rows || ref.checksum != total.checksum) {
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "rows %" PRIu64 " checksum %016" PRIx64 ", reference rows %" PRIu64
                    " checksum %016" PRIx64,
                    total.rows, total.checksum, ref.rows, ref.checksum);
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
  const double p50 = percentile(lat, 50), p99 = percentile(lat, 99);
  const std::string transport = ctx.transport_label();
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
        ",\"late_total\":%" PRIu64 ",\"late\":%s,\"checkpoints\":%" PRIu64
        ",\"checkpoint_bytes\":%" PRIu64
        ",\"checkpoint_pause_ms\":%.1f,\"checkpoint_sync_ms\":%.1f,\"restored_from\":%" PRIu64
        ",\"resumed_at\":%" PRIu64 ",\"recoveries\":%" PRIu64 ",\"replayed\":%" PRIu64
        ",\"savepoint\":%" PRIu64 ",\"rescaled_from\":%" PRIu64
        ",\"key_groups\":%u,\"restored_state\":%" PRIu64 ",\"restored_state_max\":%" PRIu64
        ",\"updates\":%" PRIu64 ",\"verify\":\"%s\"}\n",
        opt.query.c_str(), to_string(opt.strategy), world, opt.threads, transport.c_str(),
        total.records_in, record_bytes, opt.gen.keys, opt.gen.zipf, opt.gen.disorder, opt.lag,
        opt.lateness, window.size, window.step(), window.gap, opt.epoch_mib, opt.gen.seed,
        total.rows, total.checksum, secs, total.cpu_seconds, rps, per_cpu, p50, p99,
        total.latency_ms.size(), total.state_entries, total.state_bytes, total.bytes_moved,
        total.bytes_remote, total.epochs, total.late_total(), late_json(total.late).c_str(),
        total.checkpoints, total.checkpoint_bytes, total.checkpoint_pause_ms,
        total.checkpoint_sync_ms, total.restored_from, total.resumed_at, total.recoveries,
        total.replayed, total.savepoint, total.rescaled_from, opt.key_groups, total.restored_state,
        total.restored_state_max, total.updates, verdict.c_str());
  } else {
    std::printf("sluice-stream: %s query, %s strategy, %u ranks x %u workers over %s\n",
                opt.query.c_str(), to_string(opt.strategy), world, opt.threads, transport.c_str());
    if (!opt.input.empty() || !opt.kafka_input.empty()) {
      std::printf("  data      %" PRIu64 " records of %zu B from %s%s\n", total.records_in,
                  record_bytes, opt.input.empty() ? "Kafka topic " : "",
                  opt.input.empty() ? opt.kafka_input.c_str() : opt.input.c_str());
    } else {
      std::printf("  data      %" PRIu64 " records of %zu B, %" PRIu64 " keys %s, disorder %" PRId64
                  " ms, %" PRIu64 " records/ms/worker, seed %" PRIu64 "\n",
                  total.records_in, record_bytes, opt.gen.keys,
                  opt.gen.zipf > 0 ? ("zipf " + std::to_string(opt.gen.zipf)).c_str() : "uniform",
                  opt.gen.disorder, opt.gen.rate, opt.gen.seed);
    }
    std::printf("  windows   %s, watermark lag %" PRId64 " ms, allowed lateness %" PRId64
                " ms, epoch %.4g MiB\n",
                window_label(window).c_str(), opt.lag, opt.lateness, opt.epoch_mib);
    std::printf("  result    %" PRIu64 " rows, checksum %016" PRIx64 "%s\n", total.rows,
                total.checksum,
                opt.upsert ? (" (final rows; " + std::to_string(total.updates) +
                              " rows emitted in all, early and updated)")
                                 .c_str()
                           : "");
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
    if (!opt.checkpoint_dir.empty()) {
      std::printf("  checkpoints %" PRIu64 " completed, every %" PRId64
                  " ms, in %s (%.1f MB of snapshots written; the workers paused %.0f ms for "
                  "them, %.0f ms of it taking snapshots)",
                  total.checkpoints, opt.checkpoint_every_ms, opt.checkpoint_dir.c_str(),
                  static_cast<double>(total.checkpoint_bytes) / 1e6, total.checkpoint_pause_ms,
                  total.checkpoint_sync_ms);
      if (total.restored_from != 0) {
        std::printf("; restored checkpoint %" PRIu64 " (%" PRIu64 " records had been ingested)%s",
                    total.restored_from, total.resumed_at,
                    total.recoveries > 0 ? " in the running job" : "");
        if (total.rescaled_from != 0) {
          std::printf(", taken by %" PRIu64 " workers and rescaled to %u", total.rescaled_from,
                      world * opt.threads);
        }
        std::printf(" (%" PRIu64 " state entries read, at most %" PRIu64 " by one worker)",
                    total.restored_state, total.restored_state_max);
        if (total.recoveries > 0) {
          std::printf(", %" PRIu64 " recoveries, %" PRIu64
                      " records ingested again by the survivors",
                      total.recoveries, total.replayed);
        }
      }
      std::printf("\n");
    }
    if (total.savepoint != 0) {
      std::printf("  stopped   at savepoint %" PRIu64
                  " in %s (windows not yet fired are in it); "
                  "start again from it with --restore-from %" PRIu64 "\n",
                  total.savepoint, opt.checkpoint_dir.c_str(), total.savepoint);
    }
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
  if (opt.verify && total.savepoint != 0) {
    std::printf("verify: skipped (the job stopped at savepoint %" PRIu64
                "; verify the run restored from it)\n",
                total.savepoint);
  } else if (opt.verify) {
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

}  // namespace sluice::stream::command
