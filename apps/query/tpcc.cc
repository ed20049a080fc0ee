#include "tpcc.h"

#include <sluice/hash.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "csv.h"

namespace sluice::query {

namespace {

constexpr int kDistricts = 10, kCustomers = 3000, kOrders = 3000, kFirstNewOrder = 2101;
constexpr int kItems = 100000;
constexpr int kNurandC = 123;

// A random stream for one row: splitmix64 from a key of the seed, the
// table and the row's key.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t table, uint64_t a, uint64_t b = 0, uint64_t c = 0)
      : s_(sluice::hash64(seed ^ sluice::hash64(table * 1000003 + a) ^
                          sluice::hash64((b << 32) + c + 0x9e3779b97f4a7c15ull))) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi].
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  int64_t nurand(int64_t a, int64_t x, int64_t y) {
    return (((uniform(0, a) | uniform(x, y)) + kNurandC) % (y - x + 1)) + x;
  }
  // TPC-C's a-string: random alphanumerics, lo..hi long.
  std::string astring(int lo, int hi) {
    static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string s(static_cast<size_t>(uniform(lo, hi)), ' ');
    for (char& c : s) c = kChars[next() % 62];
    return s;
  }

 private:
  uint64_t s_;
};

enum Table : uint64_t { kCustomer = 1, kOrder, kLine, kItem, kPermutation };

std::string last_name(int64_t n) {
  static const char* kSyl[] = {"BAR", "OUGHT", "ABLE",  "PRI",   "PRES",
                               "ESE", "ANTI",  "CALLY", "ATION", "EING"};
  return std::string(kSyl[n / 100]) + kSyl[(n / 10) % 10] + kSyl[n % 10];
}

const int32_t kYearStart = days_from_civil(2013, 1, 1);

}  // namespace

Schema tpcc_customer_schema() {
  return Schema({int64_field("c_id"), int64_field("c_d_id"), int64_field("c_w_id"),
                 string_field("c_last", 16), string_field("c_state", 2),
                 string_field("c_credit", 2), decimal_field("c_balance", 2)});
}
Schema tpcc_orders_schema() {
  return Schema({int64_field("o_id"), int64_field("o_d_id"), int64_field("o_w_id"),
                 int64_field("o_c_id"), date_field("o_entry_d"), int64_field("o_ol_cnt")});
}
Schema tpcc_new_order_schema() {
  return Schema({int64_field("no_o_id"), int64_field("no_d_id"), int64_field("no_w_id")});
}
Schema tpcc_order_line_schema() {
  return Schema({int64_field("ol_o_id"), int64_field("ol_d_id"), int64_field("ol_w_id"),
                 int64_field("ol_number"), int64_field("ol_i_id"), int64_field("ol_supply_w_id"),
                 date_field("ol_delivery_d"), int64_field("ol_quantity"),
                 decimal_field("ol_amount", 2), string_field("ol_dist_info", 24)});
}
Schema tpcc_item_schema() {
  return Schema({int64_field("i_id"), int64_field("i_im_id"), string_field("i_name", 24),
                 decimal_field("i_price", 2), string_field("i_data", 50)});
}

TpccTables generate_tpcc(uint32_t warehouses, uint32_t part, uint32_t parts, uint64_t seed,
                         bool every_amount) {
  TpccTables t{Batch(tpcc_customer_schema()), Batch(tpcc_orders_schema()),
               Batch(tpcc_new_order_schema()), Batch(tpcc_order_line_schema()),
               Batch(tpcc_item_schema())};
  size_t customers = 0, orders = 0, new_orders = 0, lines = 0, items = 0;
  for (int64_t w = 1; w <= warehouses; ++w) {
    if (static_cast<uint32_t>((w - 1) % parts) != part) continue;
    for (int64_t d = 1; d <= kDistricts; ++d) {
      for (int64_t c = 1; c <= kCustomers; ++c) {
        Rng r(seed, kCustomer, w, d, c);
        t.customer.column(0).ints.push_back(c);
        t.customer.column(1).ints.push_back(d);
        t.customer.column(2).ints.push_back(w);
        t.customer.column(3).push_string(last_name(c <= 1000 ? c - 1 : r.nurand(255, 0, 999)));
        std::string state = {static_cast<char>('A' + r.uniform(0, 25)),
                             static_cast<char>('A' + r.uniform(0, 25))};
        t.customer.column(4).push_string(state);
        t.customer.column(5).push_string(r.uniform(1, 10) == 1 ? "BC" : "GC");
        t.customer.column(6).ints.push_back(-1000);
        ++customers;
      }
      // o_c_id: a random permutation of the district's customers.
      std::vector<int64_t> perm(kCustomers);
      std::iota(perm.begin(), perm.end(), 1);
      Rng pr(seed, kPermutation, w, d);
      for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[pr.next() % (i + 1)]);
      for (int64_t o = 1; o <= kOrders; ++o) {
        Rng r(seed, kOrder, w, d, o);
        const int32_t entry = kYearStart + static_cast<int32_t>(r.uniform(0, 364));
        const int64_t ol_cnt = r.uniform(5, 15);
        t.orders.column(0).ints.push_back(o);
        t.orders.column(1).ints.push_back(d);
        t.orders.column(2).ints.push_back(w);
        t.orders.column(3).ints.push_back(perm[o - 1]);
        t.orders.column(4).days.push_back(entry);
        t.orders.column(5).ints.push_back(ol_cnt);
        ++orders;
        const bool delivered = o < kFirstNewOrder;
        if (!delivered) {
          t.new_order.column(0).ints.push_back(o);
          t.new_order.column(1).ints.push_back(d);
          t.new_order.column(2).ints.push_back(w);
          ++new_orders;
        }
        for (int64_t n = 1; n <= ol_cnt; ++n) {
          Rng lr(seed, kLine, w, d, o * 16 + n);
          t.order_line.column(0).ints.push_back(o);
          t.order_line.column(1).ints.push_back(d);
          t.order_line.column(2).ints.push_back(w);
          t.order_line.column(3).ints.push_back(n);
          t.order_line.column(4).ints.push_back(lr.uniform(1, kItems));
          t.order_line.column(5).ints.push_back(w);
          t.order_line.column(6).days.push_back(delivered ? entry : kNullDate);
          t.order_line.column(7).ints.push_back(5);
          // Drawn for every line, so that the flag changes nothing else.
          const int64_t amount = lr.uniform(1, 999999);
          t.order_line.column(8).ints.push_back(delivered && !every_amount ? 0 : amount);
          t.order_line.column(9).push_string(lr.astring(24, 24));
          ++lines;
        }
      }
    }
  }
  for (int64_t i = 1; i <= kItems; ++i) {
    if (static_cast<uint32_t>((i - 1) % parts) != part) continue;
    Rng r(seed, kItem, i);
    t.item.column(0).ints.push_back(i);
    t.item.column(1).ints.push_back(r.uniform(1, 10000));
    t.item.column(2).push_string(r.astring(14, 24));
    t.item.column(3).ints.push_back(r.uniform(100, 10000));
    std::string data = r.astring(26, 50);
    if (r.uniform(1, 10) == 1) {
      const size_t at = static_cast<size_t>(r.uniform(0, static_cast<int64_t>(data.size()) - 8));
      data.replace(at, 8, "ORIGINAL");
    }
    t.item.column(4).push_string(data);
    ++items;
  }
  t.customer.set_rows(customers);
  t.orders.set_rows(orders);
  t.new_order.set_rows(new_orders);
  t.order_line.set_rows(lines);
  t.item.set_rows(items);
  return t;
}

TpccTables read_tpcc(const std::string& dir, uint32_t part, uint32_t parts) {
  const std::string d = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  return TpccTables{read_csv_part(d + "customer.csv", tpcc_customer_schema(), part, parts),
                    read_csv_part(d + "orders.csv", tpcc_orders_schema(), part, parts),
                    read_csv_part(d + "new_order.csv", tpcc_new_order_schema(), part, parts),
                    read_csv_part(d + "order_line.csv", tpcc_order_line_schema(), part, parts),
                    read_csv_part(d + "item.csv", tpcc_item_schema(), part, parts)};
}

std::vector<std::pair<std::string, size_t>> write_tpcc_csv(const std::string& dir,
                                                           const TpccTables& t) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw CsvError(dir + ": cannot create: " + ec.message());
  const std::pair<const char*, const Batch*> tables[] = {{"customer", &t.customer},
                                                         {"orders", &t.orders},
                                                         {"new_order", &t.new_order},
                                                         {"order_line", &t.order_line},
                                                         {"item", &t.item}};
  std::vector<std::pair<std::string, size_t>> written;
  for (const auto& [name, b] : tables) {
    const std::string path = dir + "/" + name + ".csv";
    write_csv(path, *b);
    written.emplace_back(path, b->rows());
  }
  return written;
}

}  // namespace sluice::query
