// The one place the library reads the process environment.
//
// ClusterOptions::from_env() (src/options.cc) reads every SLUICE_* setting
// through here, and join() reads the launchers' bootstrap variables (Slurm,
// Open MPI, torchrun) through here; nothing else in src/ calls getenv (the
// one exception: the test-hook switches in common/test_hooks.cc, compiled out
// of the installed library). The sluice tools read the environment through
// here and ClusterOptions::from_env() as well (tools/common/tool_util.h).
//
// The library changes the environment in one place: loading libfabric sets
// defaults of two ofi_rxm variables the user did not set
// (transport/ofi/fabric_lib.cc), before any provider reads them.
//
// Thread safety: both functions may be called from any thread, as long as
// no thread changes the environment (setenv) at the same time.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace sluice::detail::env {

// Every variable of the process environment, name -> value.
std::map<std::string, std::string> snapshot();

// The value of `name`; nullopt if it is unset or empty.
std::optional<std::string> get(const char* name);

}  // namespace sluice::detail::env
