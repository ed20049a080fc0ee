// The job harness (sluice/job.h): command line, exit statuses, worker pool.
#include "sluice/job.h"

#include <sluice/job_cli.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/mutex.h"

namespace sluice {

namespace {

// Thrown by StartLine::wait() when the start is called off; not a cause.
class StartCalledOff : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::optional<Transport> transport_named(const std::string& text) {
  if (text == "auto") return Transport::kAuto;
  if (text == "shm") return Transport::kShm;
  if (text == "ofi") return Transport::kOfi;
  return std::nullopt;
}

// The failure a PeerLostError reports, without what() saying "PeerLost: "
// again after "rank R was lost".
JobFailure lost_peer_failure(const PeerLostError& e) {
  std::string_view text = e.what();
  constexpr std::string_view kPrefix = "PeerLost: ";
  if (text.substr(0, kPrefix.size()) == kPrefix) text.remove_prefix(kPrefix.size());
  return JobFailure{std::string(text), LostPeer{e.rank(), ""}};
}

std::vector<uint32_t> all_ranks(const Cluster& cluster) {
  std::vector<uint32_t> ranks(cluster.world_size());
  for (uint32_t r = 0; r < ranks.size(); ++r) ranks[r] = r;
  return ranks;
}

}  // namespace

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string JobFailure::describe() const {
  if (!lost_peer) return message;
  std::string out = "rank " + std::to_string(lost_peer->rank);
  if (!lost_peer->host.empty()) out.append(" (").append(lost_peer->host).append(")");
  out.append(" was lost");
  if (!message.empty()) out.append(": ").append(message);
  return out;
}

// ---------------------------------------------------------------- StartLine

struct StartLine::State {
  Mutex mu;
  std::condition_variable_any cv;
  uint32_t arrived SLUICE_GUARDED_BY(mu) = 0;
  bool open SLUICE_GUARDED_BY(mu) = false;
  bool called_off SLUICE_GUARDED_BY(mu) = false;

  void arrive() {
    MutexLock lock(mu);
    ++arrived;
    cv.notify_all();
  }
};

void StartLine::wait() {
  if (arrived_) return;
  arrived_ = true;
  State& s = *state_;
  MutexLock lock(s.mu);
  ++s.arrived;
  s.cv.notify_all();
  while (!s.open && !s.called_off) s.cv.wait(lock);
  if (!s.open) throw StartCalledOff("the start was called off");
}

// ---------------------------------------------------------------- Job

Job::Job(std::string name, std::string summary, JobFlagSet flags)
    : name_(std::move(name)), cli_(std::make_unique<CLI::App>(std::move(summary), name_)) {
  cli_->footer("Run it through the launcher: sluice run -n RANKS -- " + name_ + " [options]");
  if (flags & kFlagThreads) {
    add_number(*cli_, "--threads", flags_.threads, "Worker threads per rank")
        ->check(CLI::Range(1, 1024))
        ->default_function([this] { return std::to_string(flags_.threads); })
        ->capture_default_str();
  }
  if (flags & kFlagJson)
    cli_->add_flag("--json", flags_.json, "Rank 0 prints its report as one JSON object");
  if (flags & kFlagVerify)
    cli_->add_flag("--verify", flags_.verify, "Check the result against a reference");
  if (flags & kFlagSeed)
    add_number(*cli_, "--seed", flags_.seed, "Seed of the generated input")
        ->default_function([this] { return std::to_string(flags_.seed); })
        ->capture_default_str();
  if (flags & kFlagCluster) {
    cli_->add_option_function<std::string>(
            "--transport",
            [this](const std::string& text) {
              flags_.transport = transport_named(text);
              if (!flags_.transport)
                throw CLI::ValidationError("--transport",
                                           "'" + text + "' is not one of auto, shm, ofi");
            },
            "auto, shm or ofi: the transport between ranks (default: SLUICE_TRANSPORT, else "
            "auto)")
        ->type_name("NAME");
    cli_->add_option_function<uint32_t>(
            "--setup-timeout-ms", [this](uint32_t ms) { flags_.setup_timeout_ms = ms; },
            "How long set-up calls wait for the other ranks (default: SLUICE_SETUP_TIMEOUT_MS, "
            "else 60000)")
        ->transform(whole_number())
        ->type_name("MS");
    cli_->add_option_function<uint32_t>(
            "--peer-timeout-ms", [this](uint32_t ms) { flags_.peer_timeout_ms = ms; },
            "A peer silent this long is lost (default: SLUICE_PEER_TIMEOUT_MS, else 5000)")
        ->transform(whole_number())
        ->type_name("MS");
  }
}

Job::~Job() = default;

CLI::App& Job::cli() { return *cli_; }

std::optional<int> Job::parse(int argc, const char* const* argv) {
  // --help shows the defaults the program set after adding the flags.
  for (const char* flag : {"--threads", "--seed"}) {
    if (CLI::Option* o = cli_->get_option_no_throw(flag)) o->capture_default_str();
  }
  try {
    cli_->parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli_->exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli_->exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return cli_->exit(e);
    std::fprintf(stderr, "%s: %s (--help lists the options)\n", name_.c_str(), e.what());
    return 2;
  } catch (const std::invalid_argument& e) {  // UsageError from the program's callbacks
    std::fprintf(stderr, "%s: %s (--help lists the options)\n", name_.c_str(), e.what());
    return 2;
  }
  return std::nullopt;
}

ClusterOptions Job::cluster_options() const {
  ClusterOptions options = ClusterOptions::from_env();
  // Every rank runs `threads` busy workers: the automatic spin budget must
  // count them, or spinning workers of one process steal each other's CPU.
  options.threads_per_rank = flags_.threads;
  if (flags_.transport) options.transport = *flags_.transport;
  if (flags_.setup_timeout_ms)
    options.setup_timeout = std::chrono::milliseconds(*flags_.setup_timeout_ms);
  if (flags_.peer_timeout_ms)
    options.peer_timeout = std::chrono::milliseconds(*flags_.peer_timeout_ms);
  options.validate();
  return options;
}

int Job::guarded(Cluster* cluster, const std::function<int()>& body) {
  const std::string who =
      cluster != nullptr ? name_ + ": rank " + std::to_string(cluster->rank()) : name_;
  auto say = [&](const char* what) { std::fprintf(stderr, "%s: %s\n", who.c_str(), what); };
  try {
    return body();
  } catch (const PeerLostError& e) {
    JobFailure failure = lost_peer_failure(e);
    say(failure.describe().c_str());
    return 1;
  } catch (const Error& e) {
    say(e.what());
    if (e.code() == ErrorCode::kBootstrap) return 3;
    if (e.code() == ErrorCode::kInvalidArgument) return 2;
    return 1;
  } catch (const std::invalid_argument& e) {
    say(e.what());
    return 2;
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
}

int Job::run(const std::function<int(JobContext&)>& body) {
  std::optional<Cluster> cluster;
  const int joined = guarded(nullptr, [&] {
    cluster.emplace(Cluster::join(cluster_options()));
    return 0;
  });
  if (joined != 0) return joined;
  JobContext context(*this, *cluster);
  const uint32_t me = cluster->rank(), incarnation = cluster->incarnation(me);
  int status = 0;
  if (incarnation > 0 && !rejoin_) {
    // The others lost this rank's first process: their run has failed (or
    // goes on without it), and nothing here can enter it again.
    std::fprintf(stderr,
                 "%s: rank %u: started again as incarnation %u, but %s cannot take a rank back "
                 "into a running job: this process leaves, and the others carry on as they do "
                 "after losing a rank\n",
                 name_.c_str(), me, incarnation, name_.c_str());
    status = 1;
  } else {
    status = guarded(&*cluster, [&] { return body(context); });
  }
  // The body's handles are gone: leave once what they left unfinished (the
  // last transfers of sources, flows' withdrawals) is done. After a failure
  // nothing is worth finishing, and peers may wait for this rank to be gone
  // (a survivors' barrier) before they let go of the flows it shares with
  // them: leave within a second.
  const int left = guarded(&*cluster, [&] {
    const Deadline deadline = status == 0 ? Clock::now() + cluster->options().setup_timeout
                                          : Clock::now() + std::chrono::seconds(1);
    (void)cluster->leave(deadline);
    return 0;
  });
  if (status == 0) status = left;
  std::fflush(stdout);
  return status;
}

int Job::run_local(const std::function<int()>& body) {
  const int status = guarded(nullptr, body);
  std::fflush(stdout);
  return status;
}

int Job::main(int argc, const char* const* argv, const std::function<int(JobContext&)>& body) {
  if (std::optional<int> status = parse(argc, argv)) return *status;
  return run(body);
}

// ---------------------------------------------------------------- JobContext

namespace {

// The root cause of a pool's failures (run_workers).
JobFailure root_cause(Cluster& cluster, const std::vector<uint32_t>& incarnations,
                      const std::vector<JobFailure>& failures,
                      const std::vector<std::vector<uint32_t>>& gone_when) {
  {
    // Several workers may fail, most only because a sibling's failure or a
    // lost peer ended their flows. The root cause, in this order:
    // - the first failure (in time) is this rank's own (naming no peer, or
    //   this rank: a sibling's end it saw aborted) and no rank was gone
    //   then: this rank failed first, and the others' workers, failing in
    //   turn, only echo it back (later "lost peers", even dead ones);
    // - a failure naming a rank that was gone when it was recorded;
    // - a failure recorded while some rank was gone that names another
    //   (alive then, and not known dead a moment later): the gone rank,
    //   the named one an echo of its loss (a survivor that closed its
    //   connection after its own failure);
    // - a lost peer whose rank the job knows died (or was replaced) now;
    //   else a failure of this rank's own that names no peer; else another
    //   rank named as lost.
    //
    // A flow may name the peer whose end it lost rather than the rank that
    // died (a replicate source names the target that dropped out because
    // another rank died; a rank that left after its own failure): prefer a
    // rank the job knows is gone, and one that failed to one that left.
    const uint32_t me = cluster.rank();
    const auto named = [](const JobFailure& f, const std::vector<uint32_t>& ranks) {
      return f.lost_peer && std::find(ranks.begin(), ranks.end(), f.lost_peer->rank) != ranks.end();
    };
    if ((!failures[0].lost_peer || failures[0].lost_peer->rank == me) && gone_when[0].empty()) {
      auto own = std::find_if(failures.begin(), failures.end(),
                              [](const JobFailure& f) { return !f.lost_peer; });
      return own != failures.end() ? *own : failures[0];
    }
    for (size_t i = 0; i < failures.size(); ++i) {
      if (failures[i].lost_peer && failures[i].lost_peer->rank != me &&
          named(failures[i], gone_when[i]))
        return failures[i];
    }
    auto replaced = [&](uint32_t r) { return cluster.incarnation(r) != incarnations[r]; };
    auto failed = [&](uint32_t r) {
      return replaced(r) || (!cluster.alive(r) && !cluster.left(r));
    };
    auto alive = [&](uint32_t r) { return cluster.alive(r) && !replaced(r); };
    // A flow that named a rank still alive to the job mostly saw its
    // connection break before the registry reported the death: give the
    // registry a moment (up to a second, or the peer timeout if shorter)
    // before a rank gone by then (one that failed and left first, say) is
    // taken for the cause below. (A stream fault test's survivor named the
    // other survivor for the rank the launcher killed, about one run in 25
    // under load: the registry reported that death after both had left.)
    const auto names_alive = [&] {
      return std::any_of(failures.begin(), failures.end(), [&](const JobFailure& f) {
        return f.lost_peer && f.lost_peer->rank != me && alive(f.lost_peer->rank);
      });
    };
    const auto settle = std::chrono::steady_clock::now() +
                        std::min<std::chrono::milliseconds>(cluster.options().peer_timeout,
                                                            std::chrono::seconds(1));
    while (names_alive() && std::chrono::steady_clock::now() < settle)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (size_t i = 0; i < failures.size(); ++i) {
      if (!gone_when[i].empty() && !named(failures[i], gone_when[i]) &&
          !(failures[i].lost_peer && failed(failures[i].lost_peer->rank))) {
        JobFailure f = failures[i];
        f.lost_peer = LostPeer{gone_when[i].front(), ""};
        return f;
      }
    }
    auto first = [&](auto pred) { return std::find_if(failures.begin(), failures.end(), pred); };
    auto died = [&](const JobFailure& f) {
      return f.lost_peer && f.lost_peer->rank != me && failed(f.lost_peer->rank);
    };
    auto other = [me](const JobFailure& f) { return f.lost_peer && f.lost_peer->rank != me; };
    // A rank a flow saw die may not be reported dead by the registry yet:
    // with a failure of this rank's own beside it, give the registry a
    // moment (up to a second, or the peer timeout if shorter) before taking
    // this rank's error for the cause.
    if (first(died) == failures.end() && first(other) != failures.end() &&
        first([](const JobFailure& f) { return !f.lost_peer; }) != failures.end()) {
      const auto until = std::chrono::steady_clock::now() +
                         std::min<std::chrono::milliseconds>(cluster.options().peer_timeout,
                                                             std::chrono::seconds(1));
      while (first(died) == failures.end() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    auto cause = first(died);
    if (cause == failures.end()) cause = first([](const JobFailure& f) { return !f.lost_peer; });
    if (cause == failures.end()) cause = first(other);
    JobFailure chosen = cause != failures.end() ? *cause : failures.front();
    if (!chosen.lost_peer || !failed(chosen.lost_peer->rank)) {
      std::optional<uint32_t> gone;
      for (uint32_t r = 0; r < cluster.world_size(); ++r) {
        if (r == cluster.rank() || alive(r)) continue;
        if (failed(r)) {
          gone = r;
          break;
        }
        if (!gone && (!chosen.lost_peer || alive(chosen.lost_peer->rank))) gone = r;
      }
      if (gone) chosen.lost_peer = LostPeer{*gone, ""};
    }
    return chosen;
  }
}

}  // namespace

PoolReport run_workers(Cluster& cluster, const PoolOptions& options,
                       const std::function<void(uint32_t, StartLine&)>& work) {
  const uint32_t threads = std::max(1u, options.threads);
  // The processes the pool started with: a rank that died and rejoined
  // while it ran (a restart or a spare takes a place within milliseconds) is
  // alive again by the time a failure is looked at, but is not the process
  // the pool's flows lost.
  std::vector<uint32_t> incarnations(cluster.world_size());
  for (uint32_t r = 0; r < cluster.world_size(); ++r) incarnations[r] = cluster.incarnation(r);
  const bool as_given = !options.incarnations.empty();
  if (as_given && options.incarnations.size() == incarnations.size())
    incarnations = options.incarnations;
  StartLine::State state;
  Mutex failures_mu;
  std::vector<JobFailure> failures;  // guarded by failures_mu until the workers end
  // Per failure, the other ranks the job knew were gone (dead, or replaced
  // by a new process) when it was recorded: what was cause and what echo.
  std::vector<std::vector<uint32_t>> gone_when;  // guarded by failures_mu
  auto gone_now = [&] {
    std::vector<uint32_t> gone;
    for (uint32_t r = 0; r < cluster.world_size(); ++r) {
      if (r != cluster.rank() &&
          (cluster.incarnation(r) != incarnations[r] || (!cluster.alive(r) && !cluster.left(r))))
        gone.push_back(r);
    }
    return gone;
  };
  auto record = [&](JobFailure f) {
    std::vector<uint32_t> gone = gone_now();
    MutexLock lock(failures_mu);
    failures.push_back(std::move(f));
    gone_when.push_back(std::move(gone));
  };

  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      StartLine line(state);
      try {
        work(t, line);
      } catch (const StartCalledOff&) {
      } catch (const PeerLostError& e) {
        record(lost_peer_failure(e));
      } catch (const std::exception& e) {
        record(JobFailure{e.what(), std::nullopt});
      }
      if (!line.arrived()) state.arrive();
    });
  }

  PoolReport report;
  {
    MutexLock lock(state.mu);
    while (state.arrived != threads) state.cv.wait(lock);
  }
  bool failed_setup;
  {
    MutexLock lock(failures_mu);
    failed_setup = !failures.empty();
  }
  if (!failed_setup) {
    try {
      if (options.start_without_lost) {
        std::vector<uint32_t> candidates;
        for (const Endpoint& e : options.members) candidates.push_back(e.rank);
        if (candidates.empty()) candidates = all_ranks(cluster);
        if (as_given && options.incarnations.size() != cluster.world_size()) {
          throw std::invalid_argument(
              "PoolOptions::incarnations has " + std::to_string(options.incarnations.size()) +
              " entries for a job of " + std::to_string(cluster.world_size()) + " ranks");
        }
        report.started = meet_survivors(cluster, options.name, candidates,
                                        as_given ? incarnations : std::vector<uint32_t>{});
      } else {
        if (options.members.empty()) {
          cluster.barrier(options.name);
          report.started = all_ranks(cluster);
        } else {
          cluster.barrier(options.name, options.members, 0);
          for (const Endpoint& e : options.members) report.started.push_back(e.rank);
          std::sort(report.started.begin(), report.started.end());
        }
      }
    } catch (const PeerLostError& e) {
      record(lost_peer_failure(e));
      failed_setup = true;
    } catch (const std::exception& e) {
      record(JobFailure{e.what(), std::nullopt});
      failed_setup = true;
    }
  }
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  {
    MutexLock lock(state.mu);
    (failed_setup ? state.called_off : state.open) = true;
  }
  state.cv.notify_all();
  for (std::thread& t : pool) t.join();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.cpu_seconds = process_cpu_seconds() - cpu0;

  if (!failures.empty()) {
    report.failure = root_cause(cluster, incarnations, failures, gone_when);
  }
  return report;
}

std::vector<uint32_t> meet_survivors(Cluster& cluster, std::string_view name,
                                     const std::vector<uint32_t>& candidates,
                                     const std::vector<uint32_t>& as_incarnations) {
  std::set<uint32_t> lost;
  // Each candidate as one process: one that dies and comes back as a new
  // incarnation (sluice run --restarts) is lost to this meeting, not waited
  // for.
  std::vector<uint32_t> incarnations;
  for (uint32_t r : candidates)
    incarnations.push_back(as_incarnations.empty() ? cluster.incarnation(r) : as_incarnations[r]);
  for (;;) {
    std::vector<uint32_t> members;
    std::string without;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const uint32_t r = candidates[i];
      if (r == cluster.rank() ||
          (lost.count(r) == 0 && cluster.alive(r) && cluster.incarnation(r) == incarnations[i])) {
        members.push_back(r);
      } else {
        without += (without.empty() ? "-without-" : "-") + std::to_string(r);
      }
    }
    std::sort(members.begin(), members.end());
    // A barrier's name serves one member set for the whole job: each set
    // gets its own.
    try {
      cluster.barrier(std::string(name) + without, cluster.ranks(members), 0);
      return members;
    } catch (const PeerLostError& e) {
      if (e.rank() == cluster.rank() || lost.count(e.rank()) != 0 ||
          std::find(members.begin(), members.end(), e.rank()) == members.end())
        throw;
      lost.insert(e.rank());
    }
  }
}

std::vector<std::string> JobContext::gather_bytes(std::string_view name, std::string_view mine) {
  std::vector<std::string> all = cluster_->allgather(name, mine);
  if (rank() != 0) all.clear();
  return all;
}

void JobContext::bad_gather(std::string_view name, size_t rank, size_t got, size_t want) {
  throw Error(ErrorCode::kProtocol, "gather '" + std::string(name) + "': rank " +
                                        std::to_string(rank) + " sent " + std::to_string(got) +
                                        " bytes where " + std::to_string(want) +
                                        " were expected (ranks built from different sources?)");
}

int JobContext::fail(const JobFailure& failure) { return fail(failure.describe()); }

int JobContext::fail(std::string_view message) {
  std::fprintf(stderr, "%s: rank %u: %.*s\n", job_->name().c_str(), rank(),
               static_cast<int>(message.size()), message.data());
  return 1;
}

std::string JobContext::transport_label() const {
  bool shm = false, ofi = false;
  for (uint32_t r = 0; r < world_size(); ++r) {
    if (r == cluster_->rank() && world_size() > 1) continue;
    // A rank that left, or an elastic job's vacancy (which never said
    // which host it is on), is not reached over either.
    if (cluster_->left(r)) continue;
    (cluster_->transport_to(r) == Transport::kOfi ? ofi : shm) = true;
  }
  return shm && ofi ? "shm+ofi" : ofi ? "ofi" : "shm";
}

}  // namespace sluice
