#include "options.h"

#include <sluice/job_cli.h>

#include <CLI/CLI.hpp>
#include <string>

namespace sluice::demo {

void add_options(CLI::App& app, Options& options) {
  // The harness showed --threads' default as it was when it added the flag;
  // show the one main() set since (JobFlags::threads).
  if (CLI::Option* threads = app.get_option_no_throw("--threads")) threads->capture_default_str();
  app.add_option("--tuples", options.tuples, "Tuples in the whole job")
      ->transform(whole_number())
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--segment-bytes", options.segment_bytes,
                 "Segment payload (default: the flow default, 8192)")
      ->transform(whole_number())
      ->type_name("B");
}

}  // namespace sluice::demo
