#include "control/bootstrap.h"

#include <unistd.h>

#include <limits>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

constexpr const char* kHowToJoin =
    "run under `sluice run -n N`, or set SLUICE_RANK, SLUICE_WORLD_SIZE and SLUICE_REGISTRY";
constexpr uint16_t kDefaultTorchrunPort = 29600;

// One launcher's variable names.
struct Source {
  const char* label;
  const char* rank_var;
  std::vector<const char*> size_vars;  // the first one present is used
};

const std::vector<Source>& sources() {
  static const std::vector<Source> kSources = {
      {"SLUICE_*", "SLUICE_RANK", {"SLUICE_WORLD_SIZE"}},
      {"Slurm", "SLURM_PROCID", {"SLURM_NTASKS"}},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE"}},
      {"PMIx", "PMIX_RANK", {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"}},
      {"torchrun", "RANK", {"WORLD_SIZE"}},
  };
  return kSources;
}

const std::string* find(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// Strict decimal: digits only (no sign, spaces or suffix), at most `max`.
bool parse_uint(const std::string& text, uint64_t max, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(ch - '0');
    if (v > (max - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

uint32_t parse_count(const std::string& name, const std::string& value, const char* what) {
  uint64_t v = 0;
  if (!parse_uint(value, std::numeric_limits<int32_t>::max(), &v)) {
    throw Error(ErrorCode::kBootstrap, log::cat(name, "='", value, "' is not ", what,
                                                " (a decimal integer without sign or spaces)"));
  }
  return static_cast<uint32_t>(v);
}

}  // namespace

void parse_host_port(const std::string& text, const char* what, std::string* host, uint16_t* port) {
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCode::kBootstrap,
                log::cat(what, "='", text, "' is not host:port (", why,
                         "); expected e.g. node1:29600, 10.0.0.5:29600 or [fe80::1]:29600"));
  };
  std::string h;
  std::string p;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) fail("no ']' after the IPv6 address");
    h = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') fail("no ':port' after ']'");
    p = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) fail("no ':port'");
    h = text.substr(0, colon);
    if (h.find(':') != std::string::npos) fail("an IPv6 address must be written in brackets");
    p = text.substr(colon + 1);
  }
  if (h.empty()) fail("empty host");
  uint64_t v = 0;
  if (!parse_uint(p, 65535, &v) || v == 0) fail("the port must be a number from 1 to 65535");
  *host = h;
  *port = static_cast<uint16_t>(v);
}

BootstrapInfo parse_bootstrap(const std::map<std::string, std::string>& env, int64_t override_rank,
                              int64_t override_world, const std::string& override_registry,
                              const std::string& override_secret) {
  BootstrapInfo info;
  if (const std::string* spare = find(env, "SLUICE_SPARE"); spare != nullptr) {
    if (*spare != "0" && *spare != "1") {
      throw Error(ErrorCode::kBootstrap,
                  log::cat("SLUICE_SPARE='", *spare, "' is not 0 or 1 (1: wait as a spare)"));
    }
    info.spare = *spare == "1";
  }
  if (const std::string* join = find(env, "SLUICE_JOIN"); join != nullptr) {
    if (*join != "0" && *join != "1") {
      throw Error(ErrorCode::kBootstrap,
                  log::cat("SLUICE_JOIN='", *join,
                           "' is not 0 or 1 (1: join the running job as a new member)"));
    }
    info.join = *join == "1";
  }
  if (info.spare && info.join) {
    throw Error(ErrorCode::kBootstrap,
                "SLUICE_SPARE=1 and SLUICE_JOIN=1 are both set: a spare waits for a died rank's "
                "place, a joiner takes a free rank number at once; give one or the other");
  }
  const Source* source = nullptr;
  for (const Source& s : sources()) {
    // A spare's world size is SLUICE_WORLD_SIZE's: a launcher's own count
    // (SLURM_NTASKS, ...) would include the spares.
    if (info.rankless() ? &s == &sources().front() && find(env, s.size_vars.front()) != nullptr
                        : find(env, s.rank_var) != nullptr) {
      source = &s;
      break;
    }
  }
  if (info.rankless() && (override_rank >= 0 || find(env, "SLUICE_RANK") != nullptr)) {
    throw Error(ErrorCode::kBootstrap,
                log::cat(info.spare ? "SLUICE_SPARE=1" : "SLUICE_JOIN=1", " and a rank (",
                         override_rank >= 0 ? std::string("in the options")
                                            : "SLUICE_RANK=" + *find(env, "SLUICE_RANK"),
                         ") are both given: a ",
                         info.spare ? "spare has no rank until it takes a died rank's place"
                                    : "joiner has no rank until the registry gives it one",
                         "; give one or the other"));
  }

  // Rank and world size: the options win over the environment, field by field.
  std::string rank_from = "the options";
  std::string world_from = "the options";
  if (info.spare) {
    info.rank = kSpareRank;
    rank_from = "SLUICE_SPARE";
  } else if (info.join) {
    info.rank = kJoinerRank;
    rank_from = "SLUICE_JOIN";
  } else if (override_rank >= 0) {
    if (override_rank > std::numeric_limits<int32_t>::max()) {
      throw Error(ErrorCode::kBootstrap,
                  log::cat("rank ", override_rank, " (from the options) is too large"));
    }
    info.rank = static_cast<uint32_t>(override_rank);
  } else if (source != nullptr) {
    info.rank = parse_count(source->rank_var, *find(env, source->rank_var), "a rank");
    rank_from = source->rank_var;
  } else {
    throw Error(ErrorCode::kBootstrap,
                log::cat("this process does not know its rank: no SLUICE_RANK, SLURM_PROCID, "
                         "OMPI_COMM_WORLD_RANK, PMIX_RANK or RANK is set; ",
                         kHowToJoin));
  }
  if (override_world >= 0) {
    if (override_world > std::numeric_limits<int32_t>::max()) {
      throw Error(ErrorCode::kBootstrap,
                  log::cat("world size ", override_world, " (from the options) is too large"));
    }
    info.world_size = static_cast<uint32_t>(override_world);
  } else if (source != nullptr) {
    const std::string* value = nullptr;
    for (const char* var : source->size_vars) {
      if ((value = find(env, var)) != nullptr) {
        world_from = var;
        break;
      }
    }
    if (value == nullptr) {
      std::string names;
      for (const char* var : source->size_vars)
        names += (names.empty() ? "" : " or ") + std::string(var);
      throw Error(ErrorCode::kBootstrap,
                  log::cat(source->rank_var, " is set but ", names,
                           " is not, so the world size is unknown; set it, or ", kHowToJoin));
    }
    info.world_size = parse_count(world_from, *value, "a world size");
  } else if (info.rankless()) {
    throw Error(ErrorCode::kBootstrap,
                log::cat(info.spare ? "SLUICE_SPARE=1" : "SLUICE_JOIN=1",
                         " but SLUICE_WORLD_SIZE is not set: a ", info.spare ? "spare" : "joiner",
                         " must know the job's world size (its rank numbers, spares not "
                         "counted)"));
  } else {
    throw Error(ErrorCode::kBootstrap,
                log::cat("the rank is given in the options but the world size is not, and no "
                         "launcher variables are set; ",
                         kHowToJoin));
  }
  if (info.world_size < 1) {
    throw Error(ErrorCode::kBootstrap, log::cat("world size 0 (from ", world_from,
                                                ") is invalid: a job has at least one rank"));
  }
  if (!info.rankless() && info.rank >= info.world_size) {
    throw Error(ErrorCode::kBootstrap,
                log::cat("rank ", info.rank, " (from ", rank_from, ") is not below the world size ",
                         info.world_size, " (from ", world_from, ")"));
  }
  info.source =
      source != nullptr && (override_rank < 0 || override_world < 0) ? source->label : "options";

  // Registry address.
  if (!override_registry.empty()) {
    parse_host_port(override_registry, "the registry address in the options", &info.registry_host,
                    &info.registry_port);
  } else if (const std::string* reg = find(env, "SLUICE_REGISTRY"); reg != nullptr) {
    parse_host_port(*reg, "SLUICE_REGISTRY", &info.registry_host, &info.registry_port);
  } else if (const std::string* master = find(env, "MASTER_ADDR");
             master != nullptr && source != nullptr && std::string(source->label) == "torchrun") {
    if (master->empty()) throw Error(ErrorCode::kBootstrap, "MASTER_ADDR is set but empty");
    info.registry_host = *master;
    info.registry_port = kDefaultTorchrunPort;
    if (const std::string* port = find(env, "SLUICE_REGISTRY_PORT"); port != nullptr) {
      uint64_t v = 0;
      if (!parse_uint(*port, 65535, &v) || v == 0) {
        throw Error(ErrorCode::kBootstrap, log::cat("SLUICE_REGISTRY_PORT='", *port,
                                                    "' is not a port number from 1 to 65535"));
      }
      info.registry_port = static_cast<uint16_t>(v);
    }
  } else {
    throw Error(ErrorCode::kBootstrap,
                log::cat("SLUICE_REGISTRY is not set, so this process cannot find the job's "
                         "registry; ",
                         kHowToJoin, " (host:port of `sluice registry`)"));
  }

  // Secret.
  if (!override_secret.empty()) {
    info.secret = override_secret;
  } else if (const std::string* secret = find(env, "SLUICE_SECRET");
             secret != nullptr && !secret->empty()) {
    info.secret = *secret;
  } else {
    throw Error(ErrorCode::kBootstrap,
                "SLUICE_SECRET is not set: the registry admits only processes that present the "
                "job secret; `sluice run` sets it, otherwise give every rank and the registry the "
                "same SLUICE_SECRET");
  }
  return info;
}

std::map<std::string, std::string> process_env() { return detail::env::snapshot(); }

}  // namespace sluice::control
