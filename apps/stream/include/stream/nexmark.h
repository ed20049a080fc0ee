// stream/nexmark.h: the NEXMark workloads of sluice-stream, after the Slash
// paper: bids (32 B), persons (206 B) and auctions (269 B), deterministic
// generators, and the queries
//
//   nb7   the bids at the highest price of each tumbling window (60 s
//         default): arg_max of the price, keyed by the window's index so
//         that successive windows are led (slash) or owned (uppar) by
//         different workers; every worker keeps its partial (max, bids at
//         the max) per window and leaders merge them commutatively.
//   nb8   persons joined with the auctions they sell (person.id =
//         auction.seller) in tumbling windows: list state (union of per-key
//         lists) keeping the whole records.
//   nb11  bids joined with the person who made them (bid.bidder =
//         person.id) in session windows of the bidder (gap: 10 s default).
//   q11   the standard NEXMark Q11: bids per bidder per session.
//
// Generators follow workloads.h (disjoint per worker, every field a hash
// of (seed, worker, i), times i / rate ms minus up to --disorder ms). For
// nb8 and nb11 one record in five is a person (the paper's 4:1 ratio of
// auctions or bids to persons): record i of worker g of W, if i % 5 == 0,
// is person p = i / 5 with id p * W + g; any other record refers to the
// person id (p - k) * W + g' with k from the key dice (uniform over
// [0, --keys) or Zipf, 0 the most recent person, clamped at person 0) and
// g' a random worker: recent persons of every worker are referred to, so
// joins cross workers.
//
// Thread safety: a generator belongs to one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "stream/query.h"
#include "stream/workloads.h"

namespace sluice::stream {

struct Bid {
  uint64_t auction;
  uint64_t bidder;
  uint64_t price;  // cents
  int64_t time;    // ms
  void write_csv(FILE* f) const;
};
static_assert(sizeof(Bid) == 32, "a NEXMark bid is 32 bytes");

#pragma pack(push, 1)
struct Person {
  uint64_t id;
  int64_t time;
  char name[32];
  char email[48];
  char credit_card[20];
  char city[40];
  char state[2];
  char extra[48];
};
struct Auction {
  uint64_t id;
  int64_t time;
  uint64_t seller;
  uint64_t category;
  uint64_t initial_bid;
  uint64_t reserve;
  int64_t expires;
  char item_name[64];
  char description[149];
};
enum : uint8_t { kPersonEvent = 0, kAuctionEvent = 1, kBidEvent = 2 };
// One record of the mixed stream of nb8 (persons and auctions) and nb11
// (persons and bids), as NEXMark's own generator produces one stream.
struct NexmarkEvent {
  uint8_t kind;
  union {
    Person person;
    Auction auction;
    Bid bid;
  };
  int64_t time() const {
    return kind == kPersonEvent ? person.time : kind == kAuctionEvent ? auction.time : bid.time;
  }
};
#pragma pack(pop)
static_assert(sizeof(Person) == 206, "a NEXMark person is 206 bytes");
static_assert(sizeof(Auction) == 269, "a NEXMark auction is 269 bytes");
static_assert(sizeof(NexmarkEvent) == 270);

// The rows of the joins (integers only: their CSV is exact).
struct Nb8Row {
  uint64_t person_id;
  uint64_t auction_id;
  uint64_t reserve;
  int64_t person_time;
  int64_t auction_time;
  void write_csv(FILE* f) const;
};
struct Nb11Row {
  uint64_t person_id;
  uint64_t auction;
  uint64_t price;
  int64_t person_time;
  int64_t bid_time;
  void write_csv(FILE* f) const;
};

// Bids; the skewed key is the auction (nb7) or the bidder (q11).
class BidSource {
 public:
  BidSource(const GenSpec& spec, uint32_t worker, uint32_t workers, bool key_is_bidder);
  size_t operator()(std::span<Bid> out);

 private:
  RecordDice dice_;
  uint64_t next_ = 0, count_ = 0, max_price_;
  bool key_is_bidder_;
};

// Persons mixed with auctions (nb8) or bids (nb11), see the top.
class NexmarkSource {
 public:
  NexmarkSource(const GenSpec& spec, uint32_t worker, uint32_t workers, uint8_t other_kind);
  size_t operator()(std::span<NexmarkEvent> out);

 private:
  RecordDice dice_;
  uint64_t next_ = 0, count_ = 0, max_price_;
  uint32_t worker_, workers_;
  uint8_t other_;
};

template <bool kBidder>
struct BidWorkload {
  BidWorkload(const GenSpec& s, uint32_t g, uint32_t w) : src(s, g, w, kBidder) {}
  size_t operator()(std::span<Bid> out) { return src(out); }
  BidSource src;
};
template <uint8_t kOther>
struct NexmarkWorkload {
  NexmarkWorkload(const GenSpec& s, uint32_t g, uint32_t w) : src(s, g, w, kOther) {}
  size_t operator()(std::span<NexmarkEvent> out) { return src(out); }
  NexmarkSource src;
};

// Writes every worker's input as CSV (see write_input_csv):
// nb7, q11: worker,seq,auction,bidder,price,time;
// nb8, nb11: worker,seq,kind,id,time,ref,price with kind 0 a person (id),
// 1 an auction (id, ref = seller, price = reserve), 2 a bid (id = auction,
// ref = bidder, price).
void write_nexmark_csv(const std::string& query, const GenSpec& spec, uint32_t workers,
                       const std::string& dir);

// The columns of write_nexmark_csv's nb7/q11 files as FileInput
// (file_source.h) reads them back: auction,bidder,price,time (a header may
// also name worker and seq, which are not read).
const CsvSchema<Bid>& bid_csv_schema();

// NB7's key: the index of the bid's tumbling window (one key per window).
inline uint64_t nb7_key(int64_t t, const WindowSpec& w) {
  if (w.is_global() || w.is_session() || w.step() != w.size) return 0;
  return static_cast<uint64_t>(w.last_start(t) / w.size);
}

template <class MakeSource>
auto nb7_query_from(MakeSource make, WindowSpec window) {
  return from<Bid>(std::move(make))
      .window(window, &Bid::time)
      .key_by([window](const Bid& b) { return nb7_key(b.time, window); })
      .arg_max(&Bid::price);
}
// nb7's generated input: a factory of each worker's source.
inline auto nb7_input(const GenSpec& spec, bool live = false) {
  return [spec, live](uint32_t g, uint32_t w) {
    return WorkloadSource<BidWorkload<false>, Bid>(spec, g, w, live);
  };
}
inline auto nb7_query(const GenSpec& spec, WindowSpec window, bool live = false) {
  return nb7_query_from(nb7_input(spec, live), window);
}

template <class MakeSource>
auto q11_query_from(MakeSource make, WindowSpec window) {
  return from<Bid>(std::move(make))
      .window(window, &Bid::time)
      .key_by(&Bid::bidder)
      .aggregate(Count{});
}
// q11's generated input: a factory of each worker's source.
inline auto q11_input(const GenSpec& spec, bool live = false) {
  return [spec, live](uint32_t g, uint32_t w) {
    return WorkloadSource<BidWorkload<true>, Bid>(spec, g, w, live);
  };
}
inline auto q11_query(const GenSpec& spec, WindowSpec window, bool live = false) {
  return q11_query_from(q11_input(spec, live), window);
}

template <class MakeSource>
auto nb8_query_from(MakeSource make, WindowSpec window) {
  return from<NexmarkEvent>(std::move(make))
      .window(window, [](const NexmarkEvent& e) { return e.time(); })
      .key_by([](const NexmarkEvent& e) -> uint64_t {
        return e.kind == kPersonEvent ? e.person.id : e.auction.seller;
      })
      .join([](const NexmarkEvent& e) { return e.kind != kPersonEvent; },
            [](const NexmarkEvent& p, const NexmarkEvent& a) {
              return Nb8Row{p.person.id, a.auction.id, a.auction.reserve, p.person.time,
                            a.auction.time};
            });
}
// nb8's generated input: a factory of each worker's source.
inline auto nb8_input(const GenSpec& spec, bool live = false) {
  return [spec, live](uint32_t g, uint32_t w) {
    return WorkloadSource<NexmarkWorkload<kAuctionEvent>, NexmarkEvent>(spec, g, w, live);
  };
}
inline auto nb8_query(const GenSpec& spec, WindowSpec window, bool live = false) {
  return nb8_query_from(nb8_input(spec, live), window);
}

template <class MakeSource>
auto nb11_query_from(MakeSource make, WindowSpec window) {
  return from<NexmarkEvent>(std::move(make))
      .window(window, [](const NexmarkEvent& e) { return e.time(); })
      .key_by([](const NexmarkEvent& e) -> uint64_t {
        return e.kind == kPersonEvent ? e.person.id : e.bid.bidder;
      })
      .join([](const NexmarkEvent& e) { return e.kind != kPersonEvent; },
            [](const NexmarkEvent& p, const NexmarkEvent& b) {
              return Nb11Row{p.person.id, b.bid.auction, b.bid.price, p.person.time, b.bid.time};
            });
}
// nb11's generated input: a factory of each worker's source.
inline auto nb11_input(const GenSpec& spec, bool live = false) {
  return [spec, live](uint32_t g, uint32_t w) {
    return WorkloadSource<NexmarkWorkload<kBidEvent>, NexmarkEvent>(spec, g, w, live);
  };
}
inline auto nb11_query(const GenSpec& spec, WindowSpec window, bool live = false) {
  return nb11_query_from(nb11_input(spec, live), window);
}

}  // namespace sluice::stream
