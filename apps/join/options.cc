#include "options.h"

#include <sluice/job_cli.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <string>

namespace sluice::join {

namespace {

// A flag whose value is one of `names`, stored as the matching enumerator.
template <class E>
void add_choice(CLI::App& app, const std::string& flag, E& value,
                const std::map<std::string, E>& names, const std::string& help) {
  std::vector<std::string> keys;
  for (const auto& [name, e] : names) keys.push_back(name);
  app.add_option_function<std::string>(
         flag, [&value, names](const std::string& text) { value = names.at(text); }, help)
      ->check(CLI::IsMember(keys))
      ->type_name("NAME");
}

}  // namespace

void add_data_options(CLI::App& app, DataSpec& data) {
  const std::string group = "Data (the same flags for every program, so all see the same tuples)";
  CLI::App& g = *app.add_option_group(group);
  add_number(g, "--r", data.r_tuples, "Tuples in R")->capture_default_str();
  add_number(g, "--s", data.s_tuples, "Tuples in S")->capture_default_str();
  add_number(g, "--width", data.width,
             "Bytes per tuple: 16 = 64-bit key + 64-bit payload, 8 = key only")
      ->check(CLI::IsMember({8u, 16u}))
      ->capture_default_str();
  add_choice(g, "--dist", data.dist,
             {{"uniform", KeyDist::kUniform}, {"zipf", KeyDist::kZipf}, {"equal", KeyDist::kEqual}},
             "Key distribution of S (and of R with --r-keys dist): uniform (default), zipf, or "
             "equal (every key the same)");
  g.add_option("--theta", data.theta, "Zipf exponent")
      ->check(CLI::Range(0.0, 20.0))
      ->capture_default_str();
  add_choice(g, "--r-keys", data.r_keys, {{"unique", RKeys::kUnique}, {"dist", RKeys::kDist}},
             "unique (default: row i of R has key index i mod the domain) or dist (drawn like "
             "S's)");
  add_number(g, "--domain", data.domain, "Key domain size (default: |R|)");
  g.add_option("--selectivity", data.selectivity,
               "Share of S tuples whose key comes from the domain")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  add_number(g, "--seed", data.seed, "Generator seed")->capture_default_str();
  CLI::Option* r_file =
      g.add_option("--r-file", data.r_file,
                   "Load R instead of generating it: binary, or text if the name ends .csv; "
                   "{rank} in the name names one file per rank")
          ->type_name("PATH");
  CLI::Option* s_file =
      g.add_option("--s-file", data.s_file, "Load S instead of generating it (as --r-file)")
          ->type_name("PATH");
  r_file->needs(s_file);
  s_file->needs(r_file);
}

void add_join_options(CLI::App& app, Options& options) {
  add_choice(app, "--algorithm", options.algorithm,
             {{"radix", Algorithm::kRadix},
              {"replicate", Algorithm::kReplicate},
              {"auto", Algorithm::kAuto}},
             "radix (default), replicate, or auto (picks by the relation sizes and says why)");
  add_number(app, "--segment-bytes", options.segment_bytes,
             "Flow segment payload (default: the flow default, 8192)");
  add_number(app, "--ring-segments", options.ring_segments,
             "Segments per (source, target) ring (default: the flow default, 16)");
  app.add_option("--save-r", options.save_r,
                 "Write this rank's fragment of R to this file ({rank} is replaced)")
      ->type_name("PATH");
  app.add_option("--save-s", options.save_s, "The same for S")->type_name("PATH");
  add_data_options(app, options.data);
}

void add_single_options(CLI::App& app, Options& options) {
  app.footer("Runs alone, without the launcher: sluice-join-single [options]");
  app.add_option("--method", options.method,
                 "hash (one table), radix (cache-sized partitions) or both")
      ->check(CLI::IsMember({"hash", "radix", "both"}))
      ->capture_default_str();
  add_number(app, "--repeat", options.repeat, "Run each method N times (median, min, max)")
      ->check(CLI::Range(1u, UINT32_MAX))
      ->capture_default_str();
  add_number(app, "--ranks", options.file_ranks,
             "Only to read per-rank files: how many fragments there are")
      ->check(CLI::Range(1u, UINT32_MAX))
      ->capture_default_str();
  add_data_options(app, options.data);
}

void add_mpi_options(CLI::App& app, Options& options) {
  app.footer(
      "Runs under MPI, not the sluice launcher: mpirun -np P sluice-join-mpi [options]. With P "
      "processes, rank r's fragment is sluice-join's rank r's with --threads 1.");
  add_data_options(app, options.data);
}

}  // namespace sluice::join
