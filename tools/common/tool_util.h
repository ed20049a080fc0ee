// Small helpers shared by the `sluice` subcommands and `sluice-perf`: owned fds, job secrets,
// settings read from the environment (through the library's options layer), whole-line writes and
// signal names.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "process.h"
#include "sluice/options.h"

namespace sluice::tool {

// An owned file descriptor (process.h).
using proc::Fd;

// A fresh job secret: 128 random bits from getrandom(2) as 32 lowercase hex
// digits. Throws sluice::Error(kResource) if the kernel gives no randomness.
std::string random_secret();

// What a tool takes from the environment, read and checked where the library
// reads it: `options` are ClusterOptions::from_env(), the settings the job's
// ranks get from the same environment (the registry's heartbeat timeout is
// options.peer_timeout, SLUICE_PEER_TIMEOUT_MS); `secret` is SLUICE_SECRET as
// join()'s bootstrap reads it (empty if unset).
struct ToolEnvironment {
  ClusterOptions options;
  std::string secret;
};

// Reads the ToolEnvironment and sets this process's log level from it
// (SLUICE_LOG), so that a tool logs as the ranks do. Throws
// sluice::Error(kInvalidArgument) naming a malformed variable, its value and
// what is allowed; warns once about unknown SLUICE_* names.
ToolEnvironment read_environment();

// Splits "HOST", "HOST:PORT", "[V6]" or "[V6]:PORT". A bare IPv6 address
// (more than one ':') is all host. Port defaults to `default_port`. Throws
// sluice::Error(kInvalidArgument) naming `what` on an empty host or a bad port.
void split_host_port(const std::string& text, const char* what, uint16_t default_port,
                     std::string* host, uint16_t* port);

// Parses a --metrics value: "PORT" or ":PORT" is that port on 127.0.0.1
// (a metrics endpoint binds to loopback unless told otherwise), anything
// else as split_host_port does (port 0 when none). Returns a warning for
// the caller to print when it names every interface (0.0.0.0, ::), as the
// registry's --bind warns; else "". Throws as split_host_port does.
std::string metrics_host_port(const std::string& text, std::string* host, uint16_t* port);

// Writes all of `data` to `fd` with as few write(2) calls as the kernel
// allows, so that lines written in one call never interleave mid-line with
// other writers of the same pipe (up to PIPE_BUF bytes, and with any other
// writer in this process that also writes whole lines). Retries on EINTR and
// waits on a non-blocking fd; returns false if the reader is gone (EPIPE) or
// another error stops it.
bool write_all(int fd, std::string_view data);

// "SIGKILL" for 9; "SIG<n>" for numbers without a name.
std::string signal_name(int sig);

// Strictly parses a decimal integer in [min, max]; false on anything else
// (empty, sign where none allowed, trailing characters, overflow).
bool parse_int(std::string_view text, int64_t min, int64_t max, int64_t* out);

// Opens /dev/null on any of fds 0-2 that is closed, so that pipes created
// later never land there and get clobbered when a child dup2()s its stdio.
void ensure_stdio_open();

}  // namespace sluice::tool
