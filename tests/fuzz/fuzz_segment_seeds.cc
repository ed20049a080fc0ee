// Writes the seed corpus of fuzz_segment: well-formed segments of each flow
// kind the target knows (see fuzz_segment.cc for the input layout).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

void put32(std::vector<uint8_t>& out, uint32_t v) {
  const size_t at = out.size();
  out.resize(at + 4);
  std::memcpy(out.data() + at, &v, 4);
}

// Byte records "a", "bc", ... packed as a segment holds them.
std::vector<uint8_t> byte_records(size_t n, size_t prefix) {
  std::vector<uint8_t> p(prefix, 0);
  for (size_t i = 1; i <= n; ++i) {
    put32(p, static_cast<uint32_t>(i));
    for (size_t j = 0; j < i; ++j) p.push_back(static_cast<uint8_t>('a' + j));
    while (p.size() % 8 != 0) p.push_back(0);
  }
  return p;
}

void write(const std::string& dir, int index, uint8_t kind, const std::vector<uint8_t>& payload,
           size_t prefix, uint32_t at, uint32_t value) {
  std::vector<uint8_t> in = {kind};
  put32(in, static_cast<uint32_t>(payload.size() - prefix));  // bytes_used after the prefix
  put32(in, 1);                                               // CONSUMABLE
  put32(in, at);
  put32(in, value);
  in.insert(in.end(), payload.begin(), payload.end());
  const std::string path = dir + "/seed" + std::to_string(index);
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(in.data(), 1, in.size(), f);
    std::fclose(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int i = 0;
  write(dir, i++, 0, byte_records(5, 0), 0, 0, 3);  // byte records, a length rewritten to 3
  write(dir, i++, 0, byte_records(9, 0), 0, 8, 0x7fffffff);  // rewritten to a huge length
  std::vector<uint8_t> fixed(64, 0x11);
  write(dir, i++, 1, fixed, 0, 0, 0);               // four 16-byte records
  write(dir, i++, 2, byte_records(4, 8), 8, 0, 1);  // ordered: 8-byte sequence prefix
  write(dir, i++, 3, byte_records(0, 0), 0, 0, 0);  // an empty segment of a tiny flow
  return 0;
}
