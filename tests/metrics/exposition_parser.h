// A strict parser of the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), written
// for the tests from the format's description, independently of the
// registry's writer (src/control/metrics.cc). It rejects what Prometheus
// rejects, and also what the format allows but a well-behaved exporter
// never writes:
//   - text that is not UTF-8, does not end with a newline, or has a blank
//     line or a carriage return;
//   - metric names outside [a-zA-Z_:][a-zA-Z0-9_:]*, label names outside
//     [a-zA-Z_][a-zA-Z0-9_]* or starting with "__";
//   - label values with an escape other than \\, \" and \n, or unterminated;
//   - a sample value that is not a float (NaN, +Inf, -Inf allowed), or a
//     timestamp that is not an integer;
//   - a second HELP or TYPE line for a name, a TYPE after the name's first
//     sample, a TYPE other than counter, gauge, histogram, summary, untyped;
//   - a family whose samples are not contiguous, a repeated label name in a
//     sample, or a repeated series (name and label set);
//   - a sample without a TYPE (every family of ours is typed), a family
//     without HELP, a counter whose name lacks _total or whose value is
//     negative or not finite.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace sluice::metrics_test {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct Family {
  std::string type;
  std::string help;  // unescaped
  std::vector<Sample> samples;
};

struct Exposition {
  std::map<std::string, Family> families;  // by metric name

  // The samples of `name` whose labels include every pair of `match`.
  std::vector<Sample> find(const std::string& name,
                           const std::map<std::string, std::string>& match = {}) const;
  // The value of the one sample of `name` matching `match`; throws
  // std::runtime_error naming it if there is none or more than one.
  double value(const std::string& name, const std::map<std::string, std::string>& match) const;
};

// Throws std::runtime_error naming the line and what is wrong.
Exposition parse_exposition(const std::string& text);

}  // namespace sluice::metrics_test
