// apps/nam/newcomer.h: sluice-nam on a process new to the running job.
//
// Thread safety: called once, by the process's main thread.
#pragma once

#include <sluice/job.h>

#include <string>
#include <vector>

#include "layout.h"
#include "options.h"
#include "run_results.h"

namespace sluice::nam {

// A process new to the running job: a compute rank started again (sluice
// run --restarts or --spares) after its first process was lost (the
// survivors recover that process's clients and go on without them), or one
// that joined an elastic job (sluice run --max-ranks --join) in a rank
// number no process held. It claims free client slots (spares.h), up to
// --clients, and runs them for what is left of the run (all of --txns, or
// until the run's --seconds are up), then writes their summaries and marks
// them done, which the reporter waits for. It takes part in no meeting: the
// first processes' meetings leave a new incarnation out. Returns the exit
// status.
int run_newcomer(JobContext& ctx, const Options& opt, const Layout& layout,
                 const std::vector<std::string>& protocols, const ResultsArea& area);

}  // namespace sluice::nam
