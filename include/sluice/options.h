/// @file
/// sluice/options.h: the settings of a Cluster, their SLUICE_* environment
/// twins, validation, and a printable summary.
///
/// Every setting the library reads is a typed field of ClusterOptions, and
/// every SLUICE_* variable the library reads is the twin of one field (the
/// table is in docs/operations.md, "Environment"). There are two ways to fill them:
///   - in code:  ClusterOptions o; o.transport = Transport::kOfi;
///               auto cluster = Cluster::join(o);
///   - from the environment: ClusterOptions::from_env() starts from the
///     defaults below and applies each SLUICE_* variable that is set.
///     Cluster::join() without arguments is join(ClusterOptions::from_env()).
///
/// from_env() is the only place the library reads its settings from the
/// environment. join(options) uses `options` as given: an explicit option
/// wins over a conflicting variable (start from from_env() and change fields
/// to honour both). The one exception is bootstrap: rank, world_size,
/// registry and secret left unset are filled at join() from the launcher's
/// environment (SLUICE_RANK..., Slurm, Open MPI/PMIx, torchrun), because they
/// describe the job, not a preference.
///
/// Validation: join() calls validate() on the options it is given, however
/// they were filled, and throws Error(kInvalidArgument) naming the field, the
/// bad value and what is allowed. from_env() throws Error(kInvalidArgument)
/// naming the variable for a malformed value, and warns (once per process)
/// about unknown SLUICE_* names, which are usually typos.
///
/// Test switches (SLUICE_TEST_DIE_AFTER_SEQUENCE, SLUICE_TEST_OFI_EAGAIN_EVERY,
/// SLUICE_OFI_TEST_UNORDERED) are not options: the installed library ignores
/// them; only the project's own test programs, which link a test-hook object,
/// honour them.
///
/// Thread safety: a plain value type; from_env() may be called from any
/// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/export.h"

SLUICE_API_BEGIN
namespace sluice {

/// Which transport carries a flow's data between two ranks.
enum class Transport : uint8_t {
  kAuto,  ///< shm between ranks on one host, ofi otherwise
  kShm,   ///< shared memory; every rank of the job must be on one host
  kOfi,   ///< libfabric everywhere, even between ranks on one host
};

/// The libfabric provider of the ofi transport.
enum class OfiProvider : uint8_t {
  kAuto,   ///< the best present, in this order: verbs, efa, tcp
  kTcp,    ///< tcp;ofi_rxm
  kVerbs,  ///< verbs;ofi_rxm
  kEfa,    ///< efa
  kShm,    ///< libfabric's own shared-memory provider (one host)
};

/// A provider capability sluice may use.
enum class Switch : uint8_t {
  kAuto,  ///< use it when the provider offers it
  kOff,   ///< never use it
  kOn,    ///< require it: creating an endpoint fails if the provider lacks it
};

/// How much sluice writes to stderr. The level is process-wide.
enum class LogLevel : uint8_t { kError, kWarn, kInfo, kDebug };

/// Lower-case names as the environment spells them ("auto", "ofi", "verbs",
/// "off", "info", ...).
///@{
const char* to_string(Transport t);
const char* to_string(OfiProvider p);
const char* to_string(Switch s);
const char* to_string(LogLevel l);
///@}

/// Settings of one Cluster. Each field says its default and its variable.
struct ClusterOptions {
  /// @name Bootstrap
  /// Where this process stands in the job. Unset (-1 / empty): join() reads
  /// them from the launcher's environment.
  /// @{

  /// This process's rank. SLUICE_RANK (or SLURM_PROCID, OMPI_COMM_WORLD_RANK,
  /// PMIX_RANK, RANK). Default -1: from the environment.
  int64_t rank = -1;
  /// Number of ranks. SLUICE_WORLD_SIZE (or SLURM_NTASKS,
  /// OMPI_COMM_WORLD_SIZE, WORLD_SIZE). Default -1: from the environment.
  int64_t world_size = -1;
  /// "host:port" of the job's registry. SLUICE_REGISTRY (under torchrun:
  /// MASTER_ADDR:SLUICE_REGISTRY_PORT, port 29600 by default).
  /// Default empty: from the environment.
  std::string registry;
  /// The job secret every rank presents. SLUICE_SECRET. Default empty: from
  /// the environment. Never printed by describe().
  std::string secret;
  /// @}

  /// @name Failure detection and setup
  /// @{

  /// A peer silent for this long is reported lost. SLUICE_PEER_TIMEOUT_MS,
  /// 100..3600000. Default 5000 ms.
  std::chrono::milliseconds peer_timeout{5000};
  /// How long join() keeps retrying the registry, and how long setup calls
  /// (declare, barrier) wait for the other ranks. SLUICE_SETUP_TIMEOUT_MS,
  /// 100..86400000. Default 60000 ms.
  std::chrono::milliseconds setup_timeout{60000};
  /// Fence a rank the registry declared lost before moving to the view
  /// without it: if its process still runs on this host (stopped and
  /// resumed, or too busy to heartbeat), kill it with SIGKILL and wait for
  /// it to exit, so that it writes nothing more into the shared memory of
  /// this host's flows and regions (docs/architecture.md, "Fencing").
  /// SLUICE_FENCE: on (or 1) or off (or 0). Default true.
  bool fence_lost_ranks = true;
  /// @}

  /// @name Waiting
  /// @{

  /// Busy-wait iterations before a blocked push/consume yields and then parks.
  /// SLUICE_SPIN: 0..2^30, or "auto". Default -1 (auto): 4000 (a few
  /// microseconds) when this host's ranks of the flow times threads_per_rank
  /// is less than its CPUs (for an Optimize::kLatency flow: at most its
  /// CPUs), else 0 (spinning would only steal the CPU from the peer being
  /// waited for).
  int64_t spin_iterations = -1;
  /// How many threads of each rank push or consume at once (worker threads):
  /// only the automatic spin budget uses it. No variable. 1..65536; default 1.
  uint32_t threads_per_rank = 1;
  /// @}

  /// @name Transport
  /// @{

  /// Which transport carries flows and memory regions. SLUICE_TRANSPORT:
  /// auto, shm or ofi. Default kAuto. Every rank of a flow must agree
  /// (declare() checks).
  Transport transport = Transport::kAuto;
  /// The libfabric provider. SLUICE_OFI_PROVIDER: auto, tcp, verbs, efa or
  /// shm. Default kAuto.
  OfiProvider ofi_provider = OfiProvider::kAuto;
  /// Move segments (and region data) by RMA writes and reads where the
  /// provider has them; kOff: tagged messages instead (the path EFA takes).
  /// SLUICE_OFI_RMA: auto (or 1), off (or 0), on. Default kAuto. Every rank
  /// must agree (declare() checks).
  Switch ofi_rma = Switch::kAuto;
  /// Use the provider's 64-bit atomics for memory regions; kOff: regions use
  /// their emulated atomics. SLUICE_OFI_ATOMIC: auto (or 1), off (or 0), on.
  /// Default kAuto. kOn requires ofi_rma other than kOff.
  Switch ofi_atomic = Switch::kAuto;
  /// @}

  /// @name Diagnostics
  /// @{

  /// join() sets the process's log level to this (the level is process-wide:
  /// with several Clusters in one process, the latest join() sets it). At
  /// kInfo or above, join() logs describe() once. SLUICE_LOG: error, warn,
  /// info or debug. Default kWarn. (Before any join(), sluice logs warnings
  /// and errors; from_env() itself warns only if this is warn or above. The
  /// sluice tools, which never join, set the level from SLUICE_LOG at start;
  /// `sluice run -n N --print-options` prints what the ranks would get.)
  LogLevel log_level = LogLevel::kWarn;
  /// @}

  /// The defaults with every SLUICE_* variable that is set applied. Throws
  /// Error(kInvalidArgument) naming the variable, its value and what is
  /// allowed if a value is malformed; warns once per process about unknown
  /// SLUICE_* names. Does not read the bootstrap variables (join() does, for
  /// the fields left unset).
  static ClusterOptions from_env();

  /// Throws Error(kInvalidArgument) naming the first field whose value is out
  /// of range or inconsistent with another, the value, and what is allowed.
  void validate() const;

  /// One "name = value" line per field, in declaration order (the secret
  /// shows as "(set)" or "(unset)"), for logs and diagnostics.
  std::string describe() const;
};

}  // namespace sluice
SLUICE_API_END
