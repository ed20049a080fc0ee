#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "sluice/errors.h"

namespace sluice::detail {

uint64_t random_u64() {
  uint64_t v = 0;
  auto* p = reinterpret_cast<unsigned char*>(&v);
  size_t got = 0;
  while (got < sizeof(v)) {
    const ssize_t n = ::getrandom(p + got, sizeof(v) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::kResource, std::string("getrandom failed: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  return v;
}

}  // namespace sluice::detail
