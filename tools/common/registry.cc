// `sluice registry`: a standalone registry for a job whose ranks run on
// several hosts (started there by Slurm, mpirun, ssh or by hand). It prints
// the variables every rank needs and serves until SIGINT or SIGTERM.
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "commands.h"
#include "common/log.h"
#include "control/registry_server.h"
#include "sluice/errors.h"
#include "tool_util.h"

namespace sluice::tool {
namespace {

struct RegistryCommandOptions {
  std::string bind;  // HOST[:PORT]
  int64_t world = 0;
  int64_t max_ranks = 0;        // an elastic job's rank numbers (0: world)
  std::string secret_file;      // empty: --secret, SLUICE_SECRET, else generated
  std::string secret;           // deprecated: on the command line, every user can read it
  std::string metrics;          // HOST[:PORT] of the Prometheus endpoint; empty: none
  int64_t peer_timeout_ms = 0;  // 0: SLUICE_PEER_TIMEOUT_MS, else 5000
};

template <class... Args>
void say(const Args&... args) {
  write_all(STDERR_FILENO, "sluice registry: " + log::cat(args...) + "\n");
}

// The job secret from --secret-file: its first line. Throws
// Error(kInvalidArgument) naming the file if it cannot be read or is empty.
std::string read_secret_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error(ErrorCode::kInvalidArgument,
                "--secret-file " + path + ": cannot open it: " + std::strerror(errno));
  }
  std::string secret;
  std::getline(in, secret);
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  if (secret.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "--secret-file " + path + ": its first line is empty; write the job secret there");
  }
  return secret;
}

int serve_registry(const RegistryCommandOptions& options) {
  control::RegistryOptions registry_options;
  bool generated_secret = false;
  try {
    split_host_port(options.bind, "--bind", 0, &registry_options.bind_host, &registry_options.port);
    if (!options.metrics.empty()) {
      registry_options.metrics = true;
      const std::string warning = metrics_host_port(options.metrics, &registry_options.metrics_host,
                                                    &registry_options.metrics_port);
      if (!warning.empty()) say(warning);
    }
    if (options.world < 1 || options.world > UINT32_MAX) {
      say("--world ", options.world, ": the number of ranks in the job must be at least 1");
      return 2;
    }
    registry_options.world_size = static_cast<uint32_t>(options.world);
    if (options.max_ranks != 0) {
      if (options.max_ranks < options.world || options.max_ranks > UINT32_MAX / 2) {
        say("--max-ranks ", options.max_ranks, " is below --world ", options.world,
            ": it counts every rank number the job may have, the first --world included");
        return 2;
      }
      registry_options.world_size = static_cast<uint32_t>(options.max_ranks);
      registry_options.initial_ranks = static_cast<uint32_t>(options.world);
    }
    const ToolEnvironment env = read_environment();
    registry_options.heartbeat_timeout = env.options.peer_timeout;
    if (options.peer_timeout_ms != 0) {
      if (options.peer_timeout_ms < 100 || options.peer_timeout_ms > 3600000) {
        say("--peer-timeout-ms ", options.peer_timeout_ms, ": expected 100 to 3600000 ms");
        return 2;
      }
      registry_options.heartbeat_timeout = std::chrono::milliseconds(options.peer_timeout_ms);
    }
    if (!options.secret.empty() && !options.secret_file.empty()) {
      say("--secret and --secret-file both name the job secret; give one (better: --secret-file or "
          "SLUICE_SECRET)");
      return 2;
    }
    if (!options.secret.empty()) {
      say("warning: --secret puts the job secret on the command line, which every user of this "
          "machine can read "
          "(/proc/<pid>/cmdline, ps); pass it in SLUICE_SECRET or --secret-file FILE instead");
      registry_options.secret = options.secret;
    } else if (!options.secret_file.empty()) {
      registry_options.secret = read_secret_file(options.secret_file);
    } else {
      registry_options.secret = env.secret;
    }
    if (registry_options.secret.empty()) {
      registry_options.secret = random_secret();
      generated_secret = true;
    }
  } catch (const Error& e) {
    say(e.what());
    return 2;
  }
  log::set_tag("registry");

  // Blocked before the server thread starts so that it inherits the mask and
  // the signals arrive only through the signalfd.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  Fd signal_fd(::signalfd(-1, &stop_signals, SFD_CLOEXEC));
  // Written by the server thread if run() returns without being asked to.
  Fd done_fd(::eventfd(0, EFD_CLOEXEC));
  if (!signal_fd.valid() || !done_fd.valid()) {
    say("cannot create a signalfd or eventfd: ", std::strerror(errno));
    return 1;
  }

  std::unique_ptr<control::RegistryServer> server;
  try {
    server = std::make_unique<control::RegistryServer>(registry_options);
  } catch (const std::exception& e) {
    say("cannot start the registry on ", options.bind, ": ", e.what(),
        "; check that --bind (and --metrics) name an address of this host and that the port is "
        "free");
    return 1;
  }
  std::string failure;
  std::thread thread([&] {
    try {
      server->run();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    uint64_t one = 1;
    (void)!::write(done_fd.get(), &one, sizeof(one));
  });

  std::string lines = "SLUICE_REGISTRY=" + server->address() + "\n";
  if (registry_options.initial_ranks != 0)
    lines += "SLUICE_WORLD_SIZE=" + std::to_string(registry_options.world_size) + "\n";
  if (generated_secret) lines += "SLUICE_SECRET=" + registry_options.secret + "\n";
  write_all(STDOUT_FILENO, lines);
  if (registry_options.metrics) {
    say("Prometheus metrics at http://", server->metrics_address(), "/metrics");
  }
  if (registry_options.bind_host == "0.0.0.0" || registry_options.bind_host == "::") {
    say("listening on all interfaces; give the ranks this host's address on the job's network "
        "instead of ",
        registry_options.bind_host);
  }
  log::info("serving ", registry_options.world_size, " ranks at ", server->address(),
            "; a rank silent for ", registry_options.heartbeat_timeout.count(),
            " ms is lost; stop with SIGINT or SIGTERM");

  pollfd fds[2] = {{signal_fd.get(), POLLIN, 0}, {done_fd.get(), POLLIN, 0}};
  int status = 0;
  while (true) {
    int ready = ::poll(fds, 2, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      say("poll failed: ", std::strerror(errno), "; stopping");
      status = 1;
      break;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      if (::read(signal_fd.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        log::info("received ", signal_name(static_cast<int>(info.ssi_signo)), "; stopping");
      }
      break;
    }
    if (fds[1].revents & POLLIN) {
      say("the registry stopped on its own", failure.empty() ? "" : ": ", failure);
      status = 1;
      break;
    }
  }
  server->stop();
  thread.join();
  return status;
}

}  // namespace

void add_registry_command(CLI::App& app) {
  auto options = std::make_shared<RegistryCommandOptions>();
  CLI::App* sub = app.add_subcommand(
      "registry",
      "Serve a job's registry for ranks on several hosts; prints the variables to export");
  sub->add_option("--bind", options->bind,
                  "HOST[:PORT] to listen on: an address of this host that every rank can reach "
                  "(PORT 0 or none: any free port)")
      ->required();
  sub->add_option("--world", options->world, "Number of ranks in the job")->required();
  sub->add_option("--max-ranks", options->max_ranks,
                  "An elastic job: rank numbers up to this many (every rank's SLUICE_WORLD_SIZE); "
                  "ranks --world..M-1 start as vacancies that processes started with "
                  "SLUICE_JOIN=1 take, each as a new member")
      ->type_name("M");
  sub->add_option(
      "--secret-file", options->secret_file,
      "File whose first line is the job secret the ranks must present (default: SLUICE_SECRET, "
      "else a new random one, printed)");
  sub->add_option("--metrics", options->metrics,
                  "[HOST:]PORT: also serve the job's flow counters and rank states in the "
                  "Prometheus text format at http://HOST:PORT/metrics (PORT 0 or none: any free "
                  "port, printed)");
  sub->add_option("--peer-timeout-ms", options->peer_timeout_ms,
                  "A rank silent this long is declared lost (100..3600000; default: "
                  "SLUICE_PEER_TIMEOUT_MS, else 5000). Ranks heartbeat at a fifth of it, whatever "
                  "their own setting")
      ->type_name("MS");
  sub->add_option(
      "--secret", options->secret,
      "Deprecated (any user can read a command line): the job secret itself; prints a warning");
  sub->footer(
      "Prints SLUICE_REGISTRY=HOST:PORT (and SLUICE_SECRET=... if it made one up); export them on\n"
      "every host with SLUICE_RANK and SLUICE_WORLD_SIZE. Serves until SIGINT or SIGTERM.");
  sub->callback([options] {
    int status = serve_registry(*options);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace sluice::tool
