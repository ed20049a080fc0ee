#include "perf_host.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <vector>

namespace sluice::tool::perf {
namespace {

// The value of the first /proc/cpuinfo line that starts with `field`, or "".
std::string cpuinfo(const char* field) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(field, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t value = line.find_first_not_of(' ', colon + 1);
    return value == std::string::npos ? "" : line.substr(value);
  }
  return "";
}

std::string git_commit() {
  FILE* p = popen("git rev-parse HEAD 2>/dev/null", "r");
  if (p == nullptr) return "unknown";
  char buf[128] = {};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  const int status = pclose(p);
  std::string s = got ? buf : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (status != 0 || s.size() < 7) return "unknown";
  return s;
}

}  // namespace

Environment environment() {
  Environment env;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  env.hostname = host;
  env.nproc = static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_ONLN));
  utsname u;
  if (uname(&u) == 0) env.kernel = std::string(u.sysname) + " " + u.release + " " + u.version;
  const std::string model = cpuinfo("model name");
  env.cpu_model = model.empty() ? "unknown" : model;
  // (A VM reports the host's nominal rate as "cpu MHz".)
  env.cpu_ghz = std::strtod(cpuinfo("cpu MHz").c_str(), nullptr) / 1e3;
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  env.date = date;
  env.git_commit = git_commit();
  return env;
}

std::string own_command() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(f, arg, '\0');) argv.push_back(arg);
  return quote_command(argv);
}

nlohmann::json sluice_env() {
  nlohmann::json j = nlohmann::json::object();
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("SLUICE_", 0) != 0) continue;
    if (kv.rfind("SLUICE_SECRET", 0) == 0) continue;  // never print a secret
    const size_t eq = kv.find('=');
    j[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  return j;
}

}  // namespace sluice::tool::perf
