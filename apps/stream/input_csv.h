// apps/stream/input_csv.h (internal): writes every worker's generated input
// as CSV, DIR/input-<worker>.csv, a header and then one line per record with
// the worker and the record's position first. Shared by workloads.cc and
// nexmark.cc.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "stream/file_source.h"

namespace sluice::stream::detail {

// make_source(g) gives worker g's generator (size_t(std::span<Rec>));
// line(FILE*, g, seq, record) writes one record's line.
template <class Rec, class MakeSource, class Line>
void write_input_csv_files(uint32_t workers, const std::string& dir, const char* header,
                           MakeSource make_source, Line line) {
  std::vector<Rec> buf(4096);
  for (uint32_t g = 0; g < workers; ++g) {
    const std::string path = dir + "/input-" + std::to_string(g) + ".csv";
    FilePtr f(std::fopen(path.c_str(), "w"));
    if (!f) throw std::runtime_error("cannot create the input CSV file " + path);
    std::fputs(header, f.get());
    auto src = make_source(g);
    uint64_t seq = 0;
    for (size_t n; (n = src(std::span<Rec>(buf))) != 0;) {
      for (size_t i = 0; i < n; ++i) line(f.get(), g, seq++, buf[i]);
    }
    if (std::ferror(f.get())) throw std::runtime_error("writing " + path + " failed");
  }
}

}  // namespace sluice::stream::detail
