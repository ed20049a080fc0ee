// support/job_args.h: the command line and the failure line of the job
// programs the system tests run under `sluice run` (lifecycle, replicate,
// worker, faults). Those programs use the public API only, so this header
// uses only the standard library.
//
//   Args a;
//   sluice::testing::JobArgs(argc, argv)
//       .value("--records", &a.records)  // --records N
//       .flag("--ordered", &a.ordered)    // --ordered
//       .parse();
//   ...
//   if (s != sluice::Status::kOk) return sluice::testing::fail("push: " + out.error());
//
// Thread safety: parse() in main() before other threads start; fail() is one
// printf and may be called from any thread.
#pragma once

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::testing {

// Prints "FAILED: <what>" on stdout (the line the tests look for), flushed,
// and returns 1, the exit code of a failed job program.
inline int fail(const std::string& what) {
  std::printf("FAILED: %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

// Leaves the job cleanly (Cluster::leave(): no destructor waits for the
// network, so a program waits here for what its handles left unfinished)
// and returns `status`, or fail()'s 1 if a successful run could not leave
// cleanly. `cluster` is a sluice::Cluster (a template: this header names no
// sluice type).
template <class Cluster>
int leave_after(Cluster& cluster, int status) {
  using Status = decltype(cluster.leave());
  if (cluster.leave() != Status::kOk && status == 0) {
    return fail("leave() did not finish cleanly (see the warning above)");
  }
  return status;
}

// `--key value` options and `--key` switches, each stored into the variable
// it was declared with. parse() takes them in any order; an unknown option,
// a missing value or a value that is not a number of the variable's type
// prints "FAILED: ..." on stderr and exits with status 2. With a usage text,
// `--help` prints "usage: <program> <usage>" and exits with status 0.
class JobArgs {
 public:
  // Also makes stdout line-buffered: a job program's stdout is a pipe to
  // `sluice run`, and a rank killed on a timeout must not take the lines it
  // already printed with it.
  JobArgs(int argc, char** argv, std::string usage = "")
      : argc_(argc), argv_(argv), usage_(std::move(usage)) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
  }

  // `--key V`: V is a std::string, an integer or a double.
  template <class V>
  JobArgs& value(std::string key, V* out) {
    options_.push_back(
        {std::move(key), true, [out](const std::string& key, const std::string& v) {
           if constexpr (std::is_same_v<V, std::string>) {
             *out = v;
           } else if constexpr (std::is_floating_point_v<V>) {
             char* end = nullptr;
             *out = static_cast<V>(std::strtod(v.c_str(), &end));
             if (v.empty() || *end != '\0') bad_value(key, v);
           } else {
             static_assert(std::is_integral_v<V>, "a job option is a string, integer or double");
             const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
             if (ec != std::errc() || end != v.data() + v.size()) bad_value(key, v);
           }
         }});
    return *this;
  }
  // `--key`: sets *out to true.
  JobArgs& flag(std::string key, bool* out) {
    options_.push_back(
        {std::move(key), false, [out](const std::string&, const std::string&) { *out = true; }});
    return *this;
  }

  void parse() const {
    for (int i = 1; i < argc_; ++i) {
      const std::string key = argv_[i];
      if (key == "--help" && !usage_.empty()) {
        std::printf("usage: %s %s\n", argv_[0], usage_.c_str());
        std::exit(0);
      }
      const Option* option = nullptr;
      for (const Option& o : options_) {
        if (o.key == key) option = &o;
      }
      if (option == nullptr) usage_error("unknown option " + key);
      if (!option->takes_value) {
        option->store(key, "");
        continue;
      }
      if (i + 1 >= argc_) usage_error(key + " needs a value");
      option->store(key, argv_[++i]);
    }
  }

 private:
  struct Option {
    std::string key;
    bool takes_value;
    std::function<void(const std::string&, const std::string&)> store;
  };

  [[noreturn]] static void usage_error(const std::string& what) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    std::exit(2);
  }
  [[noreturn]] static void bad_value(const std::string& key, const std::string& v) {
    usage_error(key + ": '" + v + "' is not a valid value");
  }

  int argc_;
  char** argv_;
  std::string usage_;
  std::vector<Option> options_;
};

}  // namespace sluice::testing
