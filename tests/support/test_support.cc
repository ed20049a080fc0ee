#include "support/test_support.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <regex>
#include <sstream>

namespace sluice::testing {

std::string bin(const std::string& name) { return std::string(SLUICE_BIN_DIR) + "/" + name; }

std::vector<std::string> job_argv(int ranks, int timeout_s, const std::string& program,
                                  const std::vector<std::string>& program_args,
                                  const std::vector<std::string>& launcher_args) {
  std::vector<std::string> argv = {bin("sluice"),
                                   "run",
                                   "-n",
                                   std::to_string(ranks),
                                   "--stacks-on-timeout",
                                   "--timeout",
                                   std::to_string(timeout_s)};
  argv.insert(argv.end(), launcher_args.begin(), launcher_args.end());
  argv.push_back("--");
  argv.push_back(bin(program));
  argv.insert(argv.end(), program_args.begin(), program_args.end());
  return argv;
}

std::vector<std::string> fault_at_line(const std::string& line, int rank, double after_s,
                                       bool stop) {
  char at[64];
  std::snprintf(at, sizeof(at), stop ? "%d@%.3f:60" : "%d@%.3f", rank, after_s);
  return {"--faults-after", line, stop ? "--stop" : "--kill", at};
}

std::vector<std::string> run_argv(std::vector<std::string> args) {
  args.insert(args.begin(), {bin("sluice"), "run"});
  return args;
}

std::string describe(const ProcessResult& r) {
  std::ostringstream os;
  os << "exit " << r.exit_code << ", signal " << r.term_signal << ", " << r.seconds
     << " s, timed out " << r.timed_out << ", output:\n"
     << r.output;
  return os.str();
}

std::vector<std::string> sluice_shm_entries() {
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.find("sluice") != std::string::npos) out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

int count_lines_with_all(const std::string& text, const std::vector<std::string>& needles) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    bool all = true;
    for (const std::string& needle : needles) all = all && line.find(needle) != std::string::npos;
    n += all ? 1 : 0;
  }
  return n;
}

std::string warning_lines(const std::string& text) {
  std::istringstream in(text);
  std::string found;
  for (std::string line; std::getline(in, line);) {
    if (line.find("] warn: ") != std::string::npos || line.find("] error: ") != std::string::npos ||
        line.find("warning: ") != std::string::npos)
      found += line + "\n";
  }
  return found;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

std::string json_field(const std::string& output, const std::string& name) {
  std::smatch m;
  const std::regex re("\"" + name + "\":(\"([^\"]*)\"|([-0-9.e+]+)|(\\{[^}]*\\}))");
  if (!std::regex_search(output, m, re)) return "";
  if (m[2].matched) return m[2].str();
  if (m[3].matched) return m[3].str();
  return m[4].str();
}

uint64_t json_number(const std::string& output, const std::string& name) {
  const std::string v = json_field(output, name);
  return v.empty() ? ~uint64_t{0} : std::stoull(v);
}

bool over_ofi() {
  const char* t = std::getenv("SLUICE_TRANSPORT");
  return t != nullptr && std::string(t) == "ofi";
}

uint64_t sum_of_latest(const std::string& output, const std::string& pattern) {
  const std::regex line(pattern);
  std::map<std::string, uint64_t> latest;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    latest[(*it)[1].str()] = std::stoull((*it)[2].str());
  }
  uint64_t sum = 0;
  for (const auto& [key, n] : latest) sum += n;
  return sum;
}

BackgroundJob::BackgroundJob(std::vector<std::string> argv) {
  proc::SpawnOptions o;
  o.argv = std::move(argv);
  o.out = proc::Output::kPipe;
  o.err = proc::Output::kToStdout;
  job_ = proc::Process::spawn(o);
}

bool BackgroundJob::read_until(const std::function<bool(const std::string&)>& pred,
                               std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred(output_) && std::chrono::steady_clock::now() < end) {
    pollfd p{job_.out().get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(job_.out().get(), buf, sizeof buf);
    if (n <= 0) break;
    output_.append(buf, static_cast<size_t>(n));
  }
  return pred(output_);
}

bool BackgroundJob::stop() {
  if (::kill(job_.pid(), SIGTERM) != 0) return false;
  read_until([](const std::string&) { return false; }, std::chrono::seconds(60));
  const std::optional<proc::ExitStatus> st =
      job_.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(30));
  if (st) exit_status_ = st->shell_status();
  return st.has_value();
}

}  // namespace sluice::testing
