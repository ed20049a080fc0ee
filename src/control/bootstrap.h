// Bootstrap: where this process stands in a job, read from the environment
// that a launcher set. Sources, in order (the first that names a rank wins):
//   1. SLUICE_RANK, SLUICE_WORLD_SIZE           (sluice run, or by hand)
//   2. SLURM_PROCID, SLURM_NTASKS               (srun)
//   3. OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (mpirun, Open MPI); else
//      PMIX_RANK with OMPI_COMM_WORLD_SIZE, or PMIX_SIZE if that is unset
//   4. RANK, WORLD_SIZE                         (torchrun, Kubernetes operators)
// The registry is SLUICE_REGISTRY ("host:port"); failing that, with torchrun
// variables, MASTER_ADDR:SLUICE_REGISTRY_PORT (default 29600). The job secret
// is SLUICE_SECRET (required). Numbers are strict decimals (no sign, spaces or
// suffix); the world size is at least 1 and the rank below it.
//
// Thread safety: pure functions of their input.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace sluice::control {

struct BootstrapInfo {
  // For a spare, kSpareRank until the registry gives it a died rank's place.
  uint32_t rank = 0;
  uint32_t world_size = 0;
  std::string registry_host;
  uint16_t registry_port = 0;
  std::string secret;
  std::string source;  // which launcher's variables were used, e.g. "SLUICE_*", "Slurm"
  // SLUICE_SPARE=1: the process waits in the job as a spare, without a rank,
  // until a rank dies; then it joins as that rank's next incarnation.
  bool spare = false;
  // SLUICE_JOIN=1: the process joins the running job as a new member, with
  // the rank number the registry gives it (an elastic job's vacancy, or a
  // rank that left), as that number's next incarnation.
  bool join = false;
  // Without a rank until the registry gives it one (a spare or a joiner).
  bool rankless() const { return spare || join; }
};

// BootstrapInfo::rank of a spare that has no rank yet.
inline constexpr uint32_t kSpareRank = 0xFFFFFFFFu;
// BootstrapInfo::rank of a joiner that has no rank yet (protocol.h's
// kJoinRank, what its HELLO says).
inline constexpr uint32_t kJoinerRank = 0xFFFFFFFEu;

// Reads `env` (name -> value). Throws Error(kBootstrap) with a message naming
// the missing or malformed variable and how to fix it (e.g. "run under
// `sluice run -n N`, or set SLUICE_RANK, SLUICE_WORLD_SIZE and SLUICE_REGISTRY").
// Overrides: fields of `override_*` that are set (>= 0 / non-empty) win.
BootstrapInfo parse_bootstrap(const std::map<std::string, std::string>& env,
                              int64_t override_rank = -1, int64_t override_world = -1,
                              const std::string& override_registry = "",
                              const std::string& override_secret = "");

// The process environment as a map (common/env.h reads it).
std::map<std::string, std::string> process_env();

// Splits "host:port" (host may be "[v6]"); throws Error(kBootstrap) naming `what`.
void parse_host_port(const std::string& text, const char* what, std::string* host, uint16_t* port);

}  // namespace sluice::control
