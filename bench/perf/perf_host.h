// What a `sluice perf` report records about where and how it ran: the host
// (name, kernel, CPU, its nominal clock), the date and the commit, the exact
// command line, and the SLUICE_* settings the ranks inherit.
//
// Thread safety: functions of the process's state; call from one thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "perf_stats.h"

namespace sluice::tool::perf {

// Host name, CPU count, kernel, CPU model and nominal GHz (0 if
// /proc/cpuinfo gives none: cycles per record are then left out), the UTC
// date, and `git rev-parse HEAD` in the cwd ("unknown" outside a work tree).
Environment environment();

// The command line exactly as this process was started, quoted for a shell.
std::string own_command();

// SLUICE_* settings the ranks inherit (e.g. SLUICE_SPIN), so a report says
// which knobs were turned; never a SLUICE_SECRET*.
nlohmann::json sluice_env();

}  // namespace sluice::tool::perf
