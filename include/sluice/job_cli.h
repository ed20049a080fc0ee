// sluice/job_cli.h: CLI11 helpers for a job command's own options (what
// Job::cli() is extended with), shared so that every sluice program reads a
// number the same way. Include it (it includes <CLI/CLI.hpp>) only in the
// file that adds the options: CLI11 is slow to compile.
//
//   sluice::add_number(job.cli(), "--records", records, "Records each worker sends");
//
// Thread safety: functions of the command line, used before any thread starts.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace sluice {

/// A CLI11 transform that accepts decimal digits and nothing else: CLI11 2.1
/// reads an integer with strtoull(text, base 0), which takes " -7" for
/// 2^64 - 7 and "010" for 8. Leading zeros are dropped so that the value
/// cannot be read as octal.
inline CLI::Validator whole_number() {
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

/// Adds an option holding a whole number (whole_number()), shown as N.
template <class T>
CLI::Option* add_number(CLI::App& app, const std::string& flag, T& value, const std::string& help) {
  return app.add_option(flag, value, help)->transform(whole_number())->type_name("N");
}

}  // namespace sluice
