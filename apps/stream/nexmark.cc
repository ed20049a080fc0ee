#include "stream/nexmark.h"

#include <charconv>
#include <cinttypes>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "input_csv.h"

namespace sluice::stream {

void Bid::write_csv(FILE* f) const {
  std::fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRId64, auction, bidder, price, time);
}
void Nb8Row::write_csv(FILE* f) const {
  std::fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRId64 ",%" PRId64, person_id, auction_id,
               reserve, person_time, auction_time);
}
void Nb11Row::write_csv(FILE* f) const {
  std::fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRId64 ",%" PRId64, person_id, auction,
               price, person_time, bid_time);
}

namespace {
// Text fields: a letter per record, so records differ and cost no formatting.
template <size_t N>
void fill(char (&field)[N], uint64_t x) {
  std::memset(field, 'a' + static_cast<int>(x % 26), N - 1);
  field[N - 1] = '\0';
}
}  // namespace

BidSource::BidSource(const GenSpec& spec, uint32_t worker, uint32_t workers, bool key_is_bidder)
    : dice_(spec, worker),
      count_(spec.count_of(worker, workers)),
      max_price_(spec.max_price),
      key_is_bidder_(key_is_bidder) {}

size_t BidSource::operator()(std::span<Bid> out) {
  size_t n = 0;
  for (; n < out.size() && next_ < count_; ++n, ++next_) {
    dice_.start(next_);
    Bid& b = out[n];
    const uint64_t key = dice_.key();
    b.time = dice_.time();
    const uint64_t other = dice_.next() % 1'000'000;
    b.auction = key_is_bidder_ ? other : key;
    b.bidder = key_is_bidder_ ? key : other;
    b.price = 1 + dice_.next() % max_price_;
  }
  return n;
}

NexmarkSource::NexmarkSource(const GenSpec& spec, uint32_t worker, uint32_t workers,
                             uint8_t other_kind)
    : dice_(spec, worker),
      count_(spec.count_of(worker, workers)),
      max_price_(spec.max_price),
      worker_(worker),
      workers_(workers),
      other_(other_kind) {}

size_t NexmarkSource::operator()(std::span<NexmarkEvent> out) {
  size_t n = 0;
  for (; n < out.size() && next_ < count_; ++n, ++next_) {
    dice_.start(next_);
    NexmarkEvent& e = out[n];
    std::memset(&e, 0, sizeof(e));
    const uint64_t p = next_ / 5;
    const int64_t t = dice_.time();
    if (next_ % 5 == 0) {
      e.kind = kPersonEvent;
      Person& x = e.person;
      x.id = p * workers_ + worker_;
      x.time = t;
      const uint64_t r = dice_.next();
      fill(x.name, r);
      fill(x.email, r >> 8);
      fill(x.credit_card, r >> 16);
      fill(x.city, r >> 24);
      fill(x.state, r >> 32);
      continue;
    }
    const uint64_t back = dice_.key();
    const uint64_t ref = (back > p ? 0 : p - back) * workers_ + dice_.next() % workers_;
    const uint64_t r = dice_.next();
    if (other_ == kAuctionEvent) {
      e.kind = kAuctionEvent;
      Auction& a = e.auction;
      a.id = (next_ * workers_ + worker_);
      a.time = t;
      a.seller = ref;
      a.category = r % 20;
      a.initial_bid = 1 + (r >> 8) % 10'000;
      a.reserve = a.initial_bid + (r >> 24) % 100'000;
      a.expires = t + 10'000 + static_cast<int64_t>((r >> 40) % 100'000);
      fill(a.item_name, r);
      fill(a.description, r >> 5);
    } else {
      e.kind = kBidEvent;
      // By value: the bid sits unaligned in the packed event.
      e.bid = Bid{r % 1'000'000, ref, 1 + (r >> 20) % max_price_, t};
    }
  }
  return n;
}

void write_nexmark_csv(const std::string& query, const GenSpec& spec, uint32_t workers,
                       const std::string& dir) {
  if (query == "nb7" || query == "q11") {
    const bool by_bidder = query == "q11";
    detail::write_input_csv_files<Bid>(
        workers, dir, "worker,seq,auction,bidder,price,time\n",
        [&](uint32_t g) { return BidSource(spec, g, workers, by_bidder); },
        [](FILE* f, uint32_t g, uint64_t seq, const Bid& b) {
          std::fprintf(f, "%u,%" PRIu64 ",", g, seq);
          b.write_csv(f);
          std::fputc('\n', f);
        });
    return;
  }
  const uint8_t other = query == "nb8" ? kAuctionEvent : kBidEvent;
  detail::write_input_csv_files<NexmarkEvent>(
      workers, dir, "worker,seq,kind,id,time,ref,price\n",
      [&](uint32_t g) { return NexmarkSource(spec, g, workers, other); },
      [](FILE* f, uint32_t g, uint64_t seq, const NexmarkEvent& e) {
        uint64_t id = 0, ref = 0, price = 0;
        if (e.kind == kPersonEvent) {
          id = e.person.id;
        } else if (e.kind == kAuctionEvent) {
          id = e.auction.id, ref = e.auction.seller, price = e.auction.reserve;
        } else {
          id = e.bid.auction, ref = e.bid.bidder, price = e.bid.price;
        }
        std::fprintf(f, "%u,%" PRIu64 ",%u,%" PRIu64 ",%" PRId64 ",%" PRIu64 ",%" PRIu64 "\n", g,
                     seq, unsigned{e.kind}, id, e.time(), ref, price);
      });
}

const CsvSchema<Bid>& bid_csv_schema() {
  static const CsvSchema<Bid> schema{
      "bids",
      {SLUICE_STREAM_CSV_NUMBER(Bid, auction), SLUICE_STREAM_CSV_NUMBER(Bid, bidder),
       SLUICE_STREAM_CSV_NUMBER(Bid, price), SLUICE_STREAM_CSV_NUMBER(Bid, time)},
      {"worker", "seq"},
      "time"};
  return schema;
}

}  // namespace sluice::stream
