// What a transaction of pushes onto a big list costs in sluice-kv's store
// (docs/kv.md, "Transactions, MSET, RENAME and FLUSHALL"): 16 RPUSHes of
// one element each, as one Op::kMulti entry (a redis-py pipeline's MULTI/
// EXEC), applied to a list of 10 and of 100,000 elements, once in place
// (Store::multi_here) and once on copies of the key (StoreOptions::
// multi_in_place = false). A benchmark program, not a test:
//   cmake --build build --target sluice-bench-kv-multi && build/bin/sluice-bench-kv-multi
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "store.h"

namespace {

double transactions_per_second(bool in_place, int elements) {
  kv::StoreOptions o;
  o.multi_in_place = in_place;
  o.max_result_bytes = 512 * 1024;
  kv::Store store(o);
  uint64_t seq = 0;
  auto apply = [&](kv::Command c) {
    c.client = 1;
    c.seq = ++seq;
    c.now_ms = 1;
    return store.apply(c);
  };
  std::vector<std::string> list;
  for (int i = 0; i < elements; ++i) list.push_back("element-" + std::to_string(i));
  kv::Command fill;
  fill.op = kv::Op::kRPush;
  fill.key = "list";
  fill.value = kv::encode_names(list);
  apply(fill);
  kv::Transaction t;
  for (int i = 0; i < 16; ++i) {
    kv::Command push;
    push.op = kv::Op::kRPush;
    push.key = "list";
    push.value = kv::encode_names({"pushed-" + std::to_string(i)});
    t.cmds.push_back(push);
  }
  kv::Command multi;
  multi.op = kv::Op::kMulti;
  multi.value = kv::encode_transaction(t);
  // (The list grows by 16 per transaction: on copies, few enough that it
  // stays near its starting length, 200, or 3,200 elements more.)
  const int n = in_place ? 100'000 : 200;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (!apply(multi).ok) {
      std::fprintf(stderr, "a transaction failed\n");
      return 0;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return n / seconds;
}

}  // namespace

int main() {
  for (const int elements : {10, 100'000}) {
    for (const bool in_place : {false, true}) {
      std::printf("a list of %d elements, %s: %.0f transactions of 16 RPUSHes a second\n", elements,
                  in_place ? "in place" : "on copies", transactions_per_second(in_place, elements));
    }
  }
  return 0;
}
