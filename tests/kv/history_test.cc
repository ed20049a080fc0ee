// The history sluice-kv writes for kv-porcupine (apps/kv/history.h) holds
// keys and values of any bytes: each byte is one code point in the JSON,
// so the checker gets the bytes back one for one. Two values that differ
// only in bytes of 0x80 and above stay different (written raw, a JSON
// decoder read each such byte as U+FFFD and took them for equal), and
// lengths count bytes (an APPEND's answer).
#include "history.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "client.h"
#include "support/test_support.h"

namespace kv {
namespace {

using sluice::testing::ProcessResult;

Completed op(uint64_t client, Op o, std::string key, std::string value, bool ok, std::string out,
             uint64_t call, uint64_t ret) {
  Completed c;
  c.cmd.op = o;
  c.cmd.client = client;
  c.cmd.seq = 1;
  c.cmd.key = std::move(key);
  c.cmd.value = std::move(value);
  c.result.ok = ok;
  c.result.value = std::move(out);
  c.invoked_ms = call;
  c.completed_ms = ret;
  return c;
}

// Writes the operations' history lines to a file and runs kv-porcupine on it.
ProcessResult check(const std::vector<Completed>& ops, const std::string& name) {
  const std::string path = ::testing::TempDir() + name + "-" + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream out(path);
    for (const Completed& c : ops) out << history_line(c) << "\n";
  }
  const std::string checker = SLUICE_KV_PORCUPINE;
  ProcessResult r{-1, 0, false, "no " + checker + ": run scripts/install-porcupine.sh", 0};
  if (std::filesystem::exists(checker))
    r = sluice::testing::run_process({checker, path}, {}, std::chrono::seconds(60));
  std::remove(path.c_str());
  return r;
}

TEST(HistoryTest, BytesFromOx80AreWrittenAsCodePointsAndCheckedOneForOne) {
  const std::string a = "k\x80\x81", b = "k\x80\x82";
  const std::string line = history_line(op(0, Op::kPut, "\xff", a, true, "", 0, 5));
  EXPECT_NE(line.find("\"key\":\"\\u00ff\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"value\":\"k\\u0080\\u0081\""), std::string::npos) << line;

  // A read of a value that differs in one high byte is not linearizable.
  const ProcessResult wrong = check(
      {op(0, Op::kPut, "\xff", a, true, "", 0, 5), op(1, Op::kGet, "\xff", "", true, b, 10, 20)},
      "high-bytes-wrong");
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_NE(wrong.output.find("NOT linearizable"), std::string::npos) << wrong.output;

  // The same value read back, and an APPEND's length in bytes, are.
  const ProcessResult right = check(
      {op(0, Op::kPut, "\xff", a, true, "", 0, 5), op(1, Op::kGet, "\xff", "", true, a, 10, 20),
       op(2, Op::kAppend, "\xff", "\xe9", true, "4", 30, 40)},
      "high-bytes-right");
  EXPECT_EQ(right.exit_code, 0) << right.output;
}

}  // namespace
}  // namespace kv
