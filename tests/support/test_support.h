// Helpers for tests that run real programs: where the built binaries are, and
// running a command with a time limit while capturing its output.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "process.h"

namespace sluice::testing {

// Absolute path of a program built into the build tree's bin/ directory.
std::string bin(const std::string& name);

// Running a program with a time limit while capturing its output, and the
// gdb stacks of a process group that timed out: tools/common/process.h, the
// one process helper the tools and the tests share.
using proc::ProcessResult;
using proc::run_process;
using proc::stacks_of_group;

// Names of /dev/shm entries containing "sluice".
std::vector<std::string> sluice_shm_entries();

// Number of lines of `text` that contain `needle`.
int count_lines_with(const std::string& text, const std::string& needle);

}  // namespace sluice::testing
