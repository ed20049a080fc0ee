// What `sluice run` does with a rank's output: each of its two streams
// (stdout, stderr) cut into lines that are written again with the rank's
// "[<rank>] " prefix, a batch of whole lines per write(2) so that ranks'
// lines never interleave mid-line.
//
// Thread safety: a Stream belongs to the launcher's thread.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "tool_util.h"

namespace sluice::tool {

// A "line" longer than this is cut, so that one rank printing without
// newlines cannot make the launcher buffer without bound.
inline constexpr size_t kMaxLine = 64 * 1024;

// One output stream of a rank (its stdout or its stderr), cut into lines
// that are re-emitted with the rank's prefix.
struct Stream {
  Fd fd;                // read end, non-blocking; invalid after EOF
  int out_fd = -1;      // where the prefixed lines go
  std::string prefix;   // "[<rank>] "
  std::string partial;  // bytes after the last newline seen
  // Called with every line (without its newline) before it is written
  // again; empty: none.
  std::function<void(std::string_view)> on_line;

  // Reads what is available now. Whole lines are written in one write(2)
  // per batch; at EOF the unterminated last line is flushed too.
  void pump() {
    if (!fd.valid()) return;
    char buf[65536];
    // A bounded number of reads per call keeps one chatty rank from
    // starving the others; poll() is level-triggered, so the rest follows.
    for (int i = 0; i < 16; ++i) {
      ssize_t n = ::read(fd.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {  // EOF, or an error that ends the stream just the same
        fd.reset();
        flush();
        return;
      }
      emit_lines(std::string_view(buf, static_cast<size_t>(n)));
    }
  }

  // Emits the unterminated last line, if any, ending it with a newline.
  void flush() {
    if (partial.empty()) return;
    if (on_line) on_line(partial);
    write_all(out_fd, prefix + partial + "\n");
    partial.clear();
  }

 private:
  void emit_lines(std::string_view data) {
    std::string batch;
    while (!data.empty()) {
      size_t nl = data.find('\n');
      if (nl == std::string_view::npos) {
        partial.append(data);
        break;
      }
      batch += prefix;
      const size_t line_at = batch.size();
      batch += partial;
      batch.append(data.substr(0, nl + 1));
      if (on_line) on_line(std::string_view(batch).substr(line_at, batch.size() - 1 - line_at));
      partial.clear();
      data.remove_prefix(nl + 1);
    }
    if (partial.size() >= kMaxLine) {
      if (on_line) on_line(partial);
      batch += prefix + partial + "\n";
      partial.clear();
    }
    if (!batch.empty()) write_all(out_fd, batch);
  }
};

}  // namespace sluice::tool
