#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "sluice/flow.h"

namespace sluice {
namespace {

std::vector<std::byte> frame(const std::vector<std::string>& recs) {
  std::vector<std::byte> out;
  for (const auto& r : recs) {
    size_t at = out.size();
    out.resize(at + detail::record_stride(r.size()));
    uint32_t len = static_cast<uint32_t>(r.size());
    std::memcpy(out.data() + at, &len, 4);
    std::memcpy(out.data() + at + 4, r.data(), r.size());
  }
  return out;
}

TEST(RecordFramingTest, StrideIsLengthPrefixPlusBytesPaddedToEight) {
  EXPECT_EQ(detail::record_stride(0), 8u);
  EXPECT_EQ(detail::record_stride(4), 8u);
  EXPECT_EQ(detail::record_stride(5), 16u);
  EXPECT_EQ(detail::record_stride(12), 16u);
  EXPECT_EQ(detail::record_stride(13), 24u);
}

TEST(RecordFramingTest, BatchIteratesRecordsInOrder) {
  std::vector<std::string> recs = {"", "a", "hello world", std::string(100, 'x'), "1234"};
  auto buf = frame(recs);
  ASSERT_TRUE(detail::validate_records(buf.data(), static_cast<uint32_t>(buf.size())));
  RecordBatch batch = detail::make_record_batch(buf.data(), static_cast<uint32_t>(buf.size()));
  size_t i = 0;
  for (std::span<const std::byte> r : batch) {
    ASSERT_LT(i, recs.size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(r.data()), r.size()), recs[i]);
    ++i;
  }
  EXPECT_EQ(i, recs.size());
}

TEST(RecordFramingTest, ValidateRejectsLengthsThatOverrun) {
  auto buf = frame({"abc", "defgh"});
  uint32_t huge = 1000;
  std::memcpy(buf.data() + 8, &huge, 4);
  EXPECT_FALSE(detail::validate_records(buf.data(), static_cast<uint32_t>(buf.size())));
  EXPECT_FALSE(detail::validate_records(buf.data(), 3));  // a torn length prefix
  auto ok = frame({"abc"});
  EXPECT_FALSE(detail::validate_records(ok.data(), 7));  // padding cut off
  uint32_t max = 0xffffffff;
  std::memcpy(ok.data(), &max, 4);
  EXPECT_FALSE(detail::validate_records(ok.data(), static_cast<uint32_t>(ok.size())));
}

TEST(RecordFramingTest, RandomBytesThatValidateNeverOverrunWhenIterated) {
  std::mt19937_64 rng(42);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    // A valid segment with one random byte changed: a flip in a payload is
    // harmless, a flip in a length must be caught.
    std::vector<std::string> recs(1 + rng() % 6);
    for (auto& r : recs) r.assign(rng() % 40, 'x');
    auto buf = frame(recs);
    buf[rng() % buf.size()] = static_cast<std::byte>(rng() % 64);
    if (!detail::validate_records(buf.data(), static_cast<uint32_t>(buf.size()))) continue;
    ++accepted;
    RecordBatch batch = detail::make_record_batch(buf.data(), static_cast<uint32_t>(buf.size()));
    for (std::span<const std::byte> r : batch) {
      ASSERT_GE(r.data(), buf.data());
      ASSERT_LE(r.data() + r.size(), buf.data() + buf.size());
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace sluice
