// apps/demo/options.h: sluice-shuffle-demo's own flags, added to its
// sluice::Job's command line (CLI11) in options.cc, so that the demo's data
// path compiles apart from CLI11 (sluice_command_line_glue builds the files
// that include it at -O1). --threads and the cluster flags are the job
// harness's (sluice/job.h: JobFlags).
//
// Thread safety: call from main()'s thread before parsing; `options` must
// outlive the parse (CLI11 writes the values into it).
#pragma once

#include <cstdint>

namespace CLI {
class App;
}

namespace sluice::demo {

struct Options {
  uint64_t tuples = 100'000'000;  // --tuples: in the whole job
  uint32_t segment_bytes = 0;     // --segment-bytes: 0 is the flow default (8192)
};

// Adds --tuples and --segment-bytes to `app`. REQUIRES: the harness's flag
// defaults are set (--help shows them as they are now).
void add_options(CLI::App& app, Options& options);

}  // namespace sluice::demo
