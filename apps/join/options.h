// apps/join/options.h: the command-line options of sluice-join and of the
// two baselines (sluice-join-single, sluice-join-mpi). The data flags are
// the same for all three, so that all three generate the same tuples
// (add_data_options); each program adds them and its own to its sluice::Job's
// command line (CLI11) with add_join_options, add_single_options or
// add_mpi_options. --threads, --verify, --json and the cluster flags are the
// job harness's (sluice/job.h: JobFlags).
//
// Thread safety: call from main()'s thread before parsing; `options` must
// outlive the parse (CLI11 writes the values into it).
#pragma once

#include <cstdint>
#include <string>

#include "data.h"
#include "distributed_join.h"

namespace CLI {
class App;
}

namespace sluice::join {

struct Options {
  DataSpec data;                            // the data flags (add_data_options)
  Algorithm algorithm = Algorithm::kRadix;  // --algorithm (sluice-join)
  uint32_t segment_bytes = 0;               // --segment-bytes (sluice-join); 0: the flow default
  uint32_t ring_segments = 0;               // --ring-segments (sluice-join); 0: the flow default
  std::string save_r, save_s;   // --save-r / --save-s patterns (sluice-join); empty: none
  uint32_t repeat = 1;          // --repeat (sluice-join-single)
  std::string method = "both";  // --method (sluice-join-single): hash, radix or both
  uint32_t file_ranks = 1;      // --ranks (sluice-join-single): per-rank files to read
};

// The data flags: --r, --s, --width, --dist, --theta, --r-keys, --domain,
// --selectivity, --seed, --r-file, --s-file (data.h says what they mean).
void add_data_options(CLI::App& app, DataSpec& data);
// sluice-join's own: --algorithm, --segment-bytes, --ring-segments,
// --save-r, --save-s; and the data flags.
void add_join_options(CLI::App& app, Options& options);
// sluice-join-single's own: --method, --repeat, --ranks; and the data flags.
void add_single_options(CLI::App& app, Options& options);
// sluice-join-mpi's: the data flags alone.
void add_mpi_options(CLI::App& app, Options& options);

}  // namespace sluice::join
