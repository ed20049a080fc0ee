#include "options.h"

#include <CLI/CLI.hpp>
#include <string>

namespace sluice::demo {

namespace {

// CLI11 2.1 reads an integer with strtoull(text, base 0): "-7" as
// 2^64 - 7, "010" as 8. A whole number here is decimal digits and nothing
// else (a transform, so that leading zeros cannot make it octal).
CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
          return "needs a whole number, not '" + text + "'";
        const size_t first = text.find_first_not_of('0');
        text = first == std::string::npos ? "0" : text.substr(first);
        return {};
      },
      "", "whole number");
}

}  // namespace

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
