// ClusterOptions: the SLUICE_* variables parsed into typed fields, checked,
// and printed. The table below is the single list of variables.
#include "sluice/options.h"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "sluice/errors.h"

namespace sluice {
namespace {

using Env = std::map<std::string, std::string>;

// Every SLUICE_* name the library or its launchers read; others are warned
// about (typos). The bootstrap names are read by join() (control/bootstrap),
// the test switches only by test builds (common/test_hooks).
const std::set<std::string>& known_variables() {
  static const std::set<std::string> names = {
      "SLUICE_RANK",
      "SLUICE_SPARE",
      "SLUICE_JOIN",
      "SLUICE_WORLD_SIZE",
      "SLUICE_REGISTRY",
      "SLUICE_REGISTRY_PORT",
      "SLUICE_SECRET",
      "SLUICE_LOG",
      "SLUICE_PEER_TIMEOUT_MS",
      "SLUICE_SETUP_TIMEOUT_MS",
      "SLUICE_FENCE",
      "SLUICE_SPIN",
      "SLUICE_SIGUSR1",
      "SLUICE_TRANSPORT",
      "SLUICE_OFI_PROVIDER",
      "SLUICE_OFI_RMA",
      "SLUICE_OFI_ATOMIC",
      "SLUICE_OFI_TEST_UNORDERED",
      "SLUICE_TEST_DIE_AFTER_SEQUENCE",
      "SLUICE_TEST_OFI_EAGAIN_EVERY",
      "SLUICE_TEST_OFI_CLOSE_DELAY_MS",
      "SLUICE_TEST_OFI_IMPERSONATE",
      "SLUICE_TEST_OFI_NO_WAIT_FD",
      "SLUICE_TEST_OFI_CLOSE_NO_FLUSH",
      "SLUICE_TEST_MAP_DELAY",
      "SLUICE_TEST_DESTRUCTOR_WAITS",
      "SLUICE_TEST_KILL_AT",   // sluice::kill_point (sluice/job.h), set by sluice run --kill-at
      "SLUICE_TEST_KV_HOOKS",  // apps/kv: its test switches
  };
  return names;
}

// Runs before join() sets the log level, so it honours the level these very
// options ask for: SLUICE_LOG=error silences it.
void warn_unknown_variables(const Env& env, LogLevel level) {
  if (level < LogLevel::kWarn) return;
  static std::once_flag once;
  std::call_once(once, [&env] {
    for (const auto& [name, value] : env) {
      if (name.rfind("SLUICE_", 0) != 0 || known_variables().count(name) != 0) continue;
      log::warn("ignoring unknown environment variable ", name,
                " (known: SLUICE_RANK, SLUICE_SPARE, SLUICE_WORLD_SIZE, SLUICE_REGISTRY, "
                "SLUICE_REGISTRY_PORT, "
                "SLUICE_SECRET, ",
                "SLUICE_LOG, SLUICE_PEER_TIMEOUT_MS, SLUICE_SETUP_TIMEOUT_MS, SLUICE_FENCE, "
                "SLUICE_SPIN, "
                "SLUICE_TRANSPORT, ",
                "SLUICE_OFI_PROVIDER, SLUICE_OFI_RMA, SLUICE_OFI_ATOMIC)");
    }
  });
}

// The value of `name` in `env`; nullptr if unset or empty (as unset).
const std::string* find(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

std::optional<uint64_t> parse_number(const Env& env, const char* name, uint64_t min, uint64_t max) {
  const std::string* v = find(env, name);
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != '\0' || (*v)[0] == '-' || (*v)[0] == '+' ||
      (*v)[0] == ' ' || n < min || n > max) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(name) + "='" + *v + "' is not a whole number in [" +
                    std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return n;
}

// Spellings of an enum's values, the first of each value being its name.
template <class E>
using Spellings = std::vector<std::pair<const char*, E>>;

const Spellings<Transport>& transport_names() {
  static const Spellings<Transport> s = {
      {"auto", Transport::kAuto}, {"shm", Transport::kShm}, {"ofi", Transport::kOfi}};
  return s;
}
const Spellings<OfiProvider>& provider_names() {
  static const Spellings<OfiProvider> s = {{"auto", OfiProvider::kAuto},
                                           {"tcp", OfiProvider::kTcp},
                                           {"verbs", OfiProvider::kVerbs},
                                           {"efa", OfiProvider::kEfa},
                                           {"shm", OfiProvider::kShm}};
  return s;
}
// "1" and "0" are the spellings from before the switches had three values:
// 1 meant "use it where the provider has it", which is kAuto.
const Spellings<Switch>& switch_names() {
  static const Spellings<Switch> s = {{"auto", Switch::kAuto},
                                      {"off", Switch::kOff},
                                      {"on", Switch::kOn},
                                      {"1", Switch::kAuto},
                                      {"0", Switch::kOff}};
  return s;
}
const Spellings<bool>& on_off_names() {
  static const Spellings<bool> s = {{"on", true}, {"off", false}, {"1", true}, {"0", false}};
  return s;
}
const Spellings<LogLevel>& level_names() {
  static const Spellings<LogLevel> s = {{"error", LogLevel::kError},
                                        {"warn", LogLevel::kWarn},
                                        {"info", LogLevel::kInfo},
                                        {"debug", LogLevel::kDebug}};
  return s;
}

template <class E>
std::string allowed(const Spellings<E>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i].first);
  return out;
}

template <class E>
const char* name_of(const Spellings<E>& names, E value) {
  for (const auto& [name, v] : names) {
    if (v == value) return name;
  }
  return nullptr;
}

template <class E>
std::optional<E> parse_enum(const Env& env, const char* name, const Spellings<E>& names) {
  const std::string* v = find(env, name);
  if (v == nullptr) return std::nullopt;
  for (const auto& [spelling, value] : names) {
    if (*v == spelling) return value;
  }
  throw Error(ErrorCode::kInvalidArgument,
              std::string(name) + "='" + *v + "' is not one of " + allowed(names));
}

// For validate(): a field holding a value outside its enum (a cast).
template <class E>
void check_enum(const char* field, E value, const Spellings<E>& names) {
  if (name_of(names, value) != nullptr) return;
  throw Error(ErrorCode::kInvalidArgument, std::string("ClusterOptions::") + field + " = " +
                                               std::to_string(static_cast<int>(value)) +
                                               " is not a valid value; use one of " +
                                               allowed(names));
}

[[noreturn]] void bad_field(const char* field, const std::string& value,
                            const std::string& allowed_text) {
  throw Error(ErrorCode::kInvalidArgument, std::string("ClusterOptions::") + field + " = " + value +
                                               " is invalid: " + allowed_text);
}

ClusterOptions options_from(const Env& env) {
  ClusterOptions o;
  if (auto v = parse_enum(env, "SLUICE_LOG", level_names())) o.log_level = *v;
  warn_unknown_variables(env, o.log_level);
  if (auto v = parse_number(env, "SLUICE_PEER_TIMEOUT_MS", 100, 3600000))
    o.peer_timeout = std::chrono::milliseconds(*v);
  if (auto v = parse_number(env, "SLUICE_SETUP_TIMEOUT_MS", 100, 86400000)) {
    o.setup_timeout = std::chrono::milliseconds(*v);
  }
  if (auto v = parse_enum(env, "SLUICE_FENCE", on_off_names())) o.fence_lost_ranks = *v;
  if (const std::string* spin = find(env, "SLUICE_SPIN"); spin != nullptr && *spin == "auto") {
    o.spin_iterations = -1;
  } else if (auto v = parse_number(env, "SLUICE_SPIN", 0, uint64_t{1} << 30)) {
    o.spin_iterations = static_cast<int64_t>(*v);
  }
  if (auto v = parse_enum(env, "SLUICE_TRANSPORT", transport_names())) o.transport = *v;
  if (auto v = parse_enum(env, "SLUICE_OFI_PROVIDER", provider_names())) o.ofi_provider = *v;
  if (auto v = parse_enum(env, "SLUICE_OFI_RMA", switch_names())) o.ofi_rma = *v;
  if (auto v = parse_enum(env, "SLUICE_OFI_ATOMIC", switch_names())) o.ofi_atomic = *v;
  return o;
}

}  // namespace

const char* to_string(Transport t) {
  const char* n = name_of(transport_names(), t);
  return n != nullptr ? n : "?";
}
const char* to_string(OfiProvider p) {
  const char* n = name_of(provider_names(), p);
  return n != nullptr ? n : "?";
}
const char* to_string(Switch s) {
  const char* n = name_of(switch_names(), s);
  return n != nullptr ? n : "?";
}
const char* to_string(LogLevel l) {
  const char* n = name_of(level_names(), l);
  return n != nullptr ? n : "?";
}

ClusterOptions ClusterOptions::from_env() { return options_from(detail::env::snapshot()); }

void ClusterOptions::validate() const {
  constexpr int64_t kMaxRanks = int64_t{1} << 32;
  if (world_size != -1 && (world_size < 1 || world_size >= kMaxRanks)) {
    bad_field("world_size", std::to_string(world_size),
              "use -1 (from the environment) or 1..2^32-1");
  }
  if (rank < -1 || rank >= kMaxRanks) {
    bad_field("rank", std::to_string(rank), "use -1 (from the environment) or 0..2^32-2");
  }
  if (rank >= 0 && world_size > 0 && rank >= world_size) {
    bad_field("rank", std::to_string(rank),
              "it must be below world_size = " + std::to_string(world_size));
  }
  if (!registry.empty() && (registry.find(':') == std::string::npos || registry.back() == ':')) {
    bad_field("registry", "'" + registry + "'",
              "use \"host:port\", or leave it empty for SLUICE_REGISTRY");
  }
  if (peer_timeout.count() < 100 || peer_timeout.count() > 3600000) {
    bad_field("peer_timeout", std::to_string(peer_timeout.count()) + " ms", "use 100..3600000 ms");
  }
  if (setup_timeout.count() < 100 || setup_timeout.count() > 86400000) {
    bad_field("setup_timeout", std::to_string(setup_timeout.count()) + " ms",
              "use 100..86400000 ms");
  }
  if (spin_iterations < -1 || spin_iterations > (int64_t{1} << 30)) {
    bad_field("spin_iterations", std::to_string(spin_iterations), "use -1 (automatic) or 0..2^30");
  }
  if (threads_per_rank < 1 || threads_per_rank > 65536) {
    bad_field("threads_per_rank", std::to_string(threads_per_rank), "use 1..65536");
  }
  check_enum("transport", transport, transport_names());
  check_enum("ofi_provider", ofi_provider, provider_names());
  check_enum("ofi_rma", ofi_rma, switch_names());
  check_enum("ofi_atomic", ofi_atomic, switch_names());
  check_enum("log_level", log_level, level_names());
  if (ofi_atomic == Switch::kOn && ofi_rma == Switch::kOff) {
    bad_field("ofi_atomic", "on",
              "provider atomics need RMA, but ofi_rma = off; set ofi_atomic to auto or off");
  }
}

std::string ClusterOptions::describe() const {
  auto or_env = [](int64_t v) {
    return v < 0 ? std::string("(from the environment at join)") : std::to_string(v);
  };
  std::ostringstream os;
  os << "rank = " << or_env(rank) << "\n"
     << "world_size = " << or_env(world_size) << "\n"
     << "registry = "
     << (registry.empty() ? std::string("(from the environment at join)") : registry) << "\n"
     << "secret = " << (secret.empty() ? "(unset)" : "(set)") << "\n"
     << "peer_timeout_ms = " << peer_timeout.count() << "\n"
     << "setup_timeout_ms = " << setup_timeout.count() << "\n"
     << "fence_lost_ranks = " << (fence_lost_ranks ? "on" : "off") << "\n"
     << "spin_iterations = "
     << (spin_iterations < 0 ? std::string("auto") : std::to_string(spin_iterations)) << "\n"
     << "threads_per_rank = " << threads_per_rank << "\n"
     << "transport = " << to_string(transport) << "\n"
     << "ofi_provider = " << to_string(ofi_provider) << "\n"
     << "ofi_rma = " << to_string(ofi_rma) << "\n"
     << "ofi_atomic = " << to_string(ofi_atomic) << "\n"
     << "log_level = " << to_string(log_level) << "\n";
  return os.str();
}

}  // namespace sluice
