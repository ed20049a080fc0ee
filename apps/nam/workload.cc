#include "workload.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <thread>
#include <vector>

#include "spares.h"

namespace sluice::nam {

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
};

struct Product {
  int64_t stock;
  int64_t price;
};
struct Order {
  uint64_t client, lines, quantity;
};
struct Line {
  uint64_t order, product, quantity;
};

template <class T>
std::span<const std::byte> as_span(const T& v) {
  return std::as_bytes(std::span(&v, 1));
}
template <class T>
std::span<std::byte> as_wspan(T& v) {
  return std::as_writable_bytes(std::span(&v, 1));
}

uint64_t orders_capacity(const WorkloadOptions& w, uint32_t clients) {
  if (w.max_orders != 0) return w.max_orders;
  return w.txns != 0 ? std::max<uint64_t>(clients * w.txns, 1) : 200000;
}

using Micro =
    std::vector<std::pair<int, std::pair<uint64_t, uint64_t>>>;  // (0 read|1 append, (key, value))

void history_line(std::string& out, const char* type, uint32_t client, const Micro& ops,
                  const std::vector<std::vector<uint64_t>>* reads) {
  out += "{\"type\":\"";
  out += type;
  out += "\",\"process\":" + std::to_string(client) + ",\"value\":[";
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i) out += ',';
    const uint64_t key = ops[i].second.first;
    if (ops[i].first == 1) {
      out +=
          "[\"append\"," + std::to_string(key) + "," + std::to_string(ops[i].second.second) + "]";
      continue;
    }
    out += "[\"r\"," + std::to_string(key) + ",";
    if (reads == nullptr) {
      out += "null]";
      continue;
    }
    out += '[';
    const auto& list = (*reads)[i];
    for (size_t j = 0; j < list.size(); ++j) {
      if (j) out += ',';
      out += std::to_string(list[j]);
    }
    out += "]]";
  }
  out += "]}\n";
}

}  // namespace

Layout make_layout(const WorkloadOptions& w, uint32_t memory_servers, uint32_t clients,
                   uint32_t versions, uint64_t max_timestamps) {
  Layout l;
  l.memory_servers = memory_servers;
  l.clients = clients;
  l.versions = versions;
  l.max_timestamps = max_timestamps;
  const bool checkout = w.workload == "checkout";
  const uint64_t orders = checkout ? orders_capacity(w, clients) : 0;
  l.tables = {{"products", checkout ? w.products : 0, std::max<uint32_t>(w.record_bytes, 16)},
              {"orders", orders, sizeof(Order)},
              {"lines", 3 * orders, sizeof(Line)},
              {"lists", checkout ? 0 : w.keys, 8 + 8 * w.list_capacity}};
  return l;
}

std::vector<MemoryRegion> expose_database(Cluster& cluster, const Layout& layout,
                                          const WorkloadOptions& w, uint32_t server, bool rsi,
                                          const std::vector<uint8_t>& free) {
  std::vector<MemoryRegion> regions;
  for (uint32_t t = 0; t < layout.tables.size(); ++t) {
    regions.push_back(
        cluster.expose(layout.region_name(layout.tables[t].name), layout.region_bytes(t, server)));
    load_table(layout, w, t, server, regions.back().data());
  }
  if (!rsi) return regions;
  if (server == 0) {
    regions.push_back(cluster.expose(layout.meta_name(), layout.meta_bytes()));
    park_free_slots(layout, regions.back().data(), free);
  }
  if (layout.overflow_entries != 0) {
    for (uint32_t t = 0; t < layout.tables.size(); ++t) {
      regions.push_back(cluster.expose(layout.overflow_name(layout.tables[t].name),
                                       layout.overflow_region_bytes(t)));
    }
  }
  return regions;
}

void load_table(const Layout& layout, const WorkloadOptions& w, uint32_t table, uint32_t server,
                std::byte* data) {
  const uint64_t records = layout.tables[table].records;
  std::vector<std::byte> payload(layout.tables[table].payload_bytes);
  for (uint64_t key = server; key < records; key += layout.memory_servers) {
    std::fill(payload.begin(), payload.end(), std::byte{0});
    if (table == kProducts) {
      const Product p{w.initial_stock, static_cast<int64_t>(100 + key % 900)};
      std::memcpy(payload.data(), &p, sizeof(p));
    } else if (table != kLists) {
      continue;  // orders and lines start absent
    }
    load_record(layout, table, key, payload, data + layout.slot_offset(table, key));
  }
}

ClientResult run_client(Transactions& db, const WorkloadOptions& w, uint32_t client,
                        uint32_t clients, bool record_history) {
  ClientResult res;
  Rng rng{w.seed * 0x100000001b3ull + client * 7919 + 1};
  const auto start = Clock::now();
  res.start_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  res.timeline.reserve(static_cast<size_t>(w.seconds * 1000 / kTimelineMs) + 16);
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(w.seconds));
  res.latency_us.reserve(w.txns != 0 ? std::min<uint64_t>(w.txns, 1 << 20) : 1 << 16);
  uint64_t next_order = 0, seq = 0;
  const uint64_t pick_from =
      w.hot_products != 0 ? std::min(w.hot_products, w.products) : w.products;
  std::vector<std::byte> list_buf(8 + 8 * w.list_capacity);
  Micro ops;
  std::vector<std::vector<uint64_t>> reads;
  auto stopped = [&] { return w.stop != nullptr && w.stop(); };
  auto done = [&] {
    return stopped() ||
           (w.txns != 0 ? res.commits + res.out_of_stock >= w.txns : Clock::now() >= end);
  };
  // A run of --seconds stops retrying a transaction once its time is up:
  // a record that stays locked (a commit no recovery can resolve) must not
  // hold the run for ever. Nor does a client told to stop.
  auto time_up = [&] { return stopped() || (w.txns == 0 && Clock::now() >= end); };
  auto think = [&] {
    if (w.think_us) std::this_thread::sleep_for(std::chrono::microseconds(w.think_us));
  };
  // Order keys: this client's share of the orders table.
  const uint64_t order_share = orders_capacity(w, clients) / clients;
  while (!done()) {
    const auto t0 = Clock::now();
    Outcome outcome = Outcome::kAborted;
    if (w.workload == "checkout") {
      const bool browse = rng.below(100) < w.browse_percent;
      uint64_t p[3];
      int64_t qty[3];
      if (!browse) {
        if (next_order >= order_share) break;  // the orders table's share is full
        p[0] = rng.below(pick_from);
        do p[1] = rng.below(pick_from);
        while (p[1] == p[0] && pick_from > 1);
        do p[2] = rng.below(pick_from);
        while ((p[2] == p[0] || p[2] == p[1]) && pick_from > 2);
        for (int64_t& q : qty) q = 1 + static_cast<int64_t>(rng.below(3));
      }
      bool stop = false;
      for (;;) {
        if (time_up()) {
          stop = true;
          break;
        }
        if (browse && w.read_only_begin)
          db.begin_read_only();
        else
          db.begin();
        if (browse) {
          Product prod{};
          for (uint32_t i = 0; i < w.browse_reads; ++i)
            db.read(kProducts, rng.below(w.products), as_wspan(prod));
          think();
          outcome = db.commit();
        } else {
          Product prod[3]{};
          bool enough = true, visible = true;
          for (int i = 0; i < 3; ++i) {
            visible = db.read(kProducts, p[i], as_wspan(prod[i])) && visible;
            enough = enough && prod[i].stock >= qty[i];
          }
          if (!visible) {
            // A product's visible version was overwritten meanwhile: the
            // transaction is doomed (commit() says kTooOld), retry.
            outcome = db.commit();
            (outcome == Outcome::kTooOld ? res.too_old : res.conflicts)++;
            continue;
          }
          if (!enough) {
            db.abort();
            ++res.out_of_stock;
            stop = true;
            break;
          }
          const uint64_t order = client * order_share + next_order;
          const Order o{client, 3, static_cast<uint64_t>(qty[0] + qty[1] + qty[2])};
          db.insert(kOrders, order, as_span(o));
          for (int i = 0; i < 3; ++i) {
            const Line line{order, p[i], static_cast<uint64_t>(qty[i])};
            db.insert(kLines, 3 * order + i, as_span(line));
            prod[i].stock -= qty[i];
            db.write(kProducts, p[i], as_span(prod[i]));
          }
          think();
          outcome = db.commit();
          if (outcome == Outcome::kCommitted) ++next_order, ++res.checkouts;
        }
        if (outcome == Outcome::kCommitted) break;
        (outcome == Outcome::kTooOld ? res.too_old : res.conflicts)++;
      }
      if (stop) continue;
    } else {
      // list-append / write-skew: one attempt per history entry, each with
      // fresh values (appended values must be unique per key).
      bool stop = false;
      for (;;) {
        if (time_up()) {
          stop = true;
          break;
        }
        ops.clear();
        bool long_read = false;
        if (w.workload == "write-skew") {
          const uint64_t a = rng.below(w.keys);
          uint64_t b = rng.below(w.keys);
          while (b == a && w.keys > 1) b = rng.below(w.keys);
          ops.push_back({0, {a, 0}});
          ops.push_back({0, {b, 0}});
          ops.push_back({1, {rng.below(2) ? a : b, (uint64_t{client} << 32) | ++seq}});
        } else if (w.long_read_percent != 0 && rng.below(100) < w.long_read_percent) {
          long_read = true;
          for (uint64_t k = 0; k < w.keys; ++k) ops.push_back({0, {k, 0}});
        } else {
          const uint64_t n = 1 + rng.below(4);
          for (uint64_t i = 0; i < n; ++i) {
            const bool append = rng.below(2) == 1;
            ops.push_back({append ? 1 : 0,
                           {rng.below(w.keys), append ? (uint64_t{client} << 32) | ++seq : 0}});
          }
        }
        reads.assign(ops.size(), {});
        // A transaction of reads only (every long reader) says so up front.
        if (w.read_only_begin &&
            std::all_of(ops.begin(), ops.end(), [](const auto& op) { return op.first == 0; }))
          db.begin_read_only();
        else
          db.begin();
        for (size_t i = 0; i < ops.size(); ++i) {
          const uint64_t key = ops[i].second.first;
          std::fill(list_buf.begin(), list_buf.end(), std::byte{0});
          db.read(kLists, key, list_buf);
          uint64_t count = 0;
          std::memcpy(&count, list_buf.data(), 8);
          count = std::min<uint64_t>(count, w.list_capacity);
          if (ops[i].first == 1 && count < w.list_capacity) {
            const uint64_t v = ops[i].second.second;
            std::memcpy(list_buf.data() + 8 + 8 * count, &v, 8);
            ++count;
            std::memcpy(list_buf.data(), &count, 8);
            db.write(kLists, key, list_buf);
          } else if (ops[i].first == 1) {
            ops[i].first = 0;  // full: this append becomes a read
          }
          if (ops[i].first == 0) {
            reads[i].resize(count);
            if (count != 0) std::memcpy(reads[i].data(), list_buf.data() + 8, 8 * count);
          }
          if (long_read && w.long_read_think_us != 0)
            std::this_thread::sleep_for(std::chrono::microseconds(w.long_read_think_us));
        }
        if (w.workload == "write-skew") think();
        outcome = db.commit();
        if (record_history) {
          history_line(res.history, "invoke", client, ops, nullptr);
          history_line(res.history, outcome == Outcome::kCommitted ? "ok" : "fail", client, ops,
                       &reads);
        }
        if (outcome == Outcome::kCommitted) break;
        (outcome == Outcome::kTooOld ? res.too_old : res.conflicts)++;
      }
      if (stop) continue;
    }
    ++res.commits;
    const auto now = Clock::now();
    res.latency_us.push_back(static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(now - t0).count()));
    const auto interval = static_cast<size_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count() / kTimelineMs);
    if (res.timeline.size() <= interval) res.timeline.resize(interval + 1, 0);
    ++res.timeline[interval];
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  db.retire();
  res.rsi = db.stats();
  res.read_only = res.rsi.read_only;
  return res;
}

uint64_t orders_per_client(const WorkloadOptions& w, uint32_t clients) {
  return orders_capacity(w, clients) / clients;
}

CheckResult check_invariants(Cluster& cluster, const Layout& layout, const WorkloadOptions& w,
                             const std::vector<int64_t>& checkouts, bool rsi) {
  CheckResult res;
  // RSI: the timestamp vector, to tell a commit's version from junk.
  std::vector<uint64_t> vector;
  if (rsi) {
    RemoteRegion meta = cluster.open_region(layout.meta_name(), 0);
    vector.resize(layout.ts_words());
    if (meta.read(layout.ts_offset(), std::as_writable_bytes(std::span(vector))) != Status::kOk)
      throw NamError("nam: check: reading the timestamp vector: " + meta.error());
  }
  auto committed = [&](uint64_t cid) {
    // (Commit id 0: the loaded data.)
    return !rsi || cid == 0 ||
           (ts_word(cid) < vector.size() && ts_state(vector[ts_word(cid)], cid) == kCommitted);
  };
  auto problem = [&](const std::string& p) {
    res.ok = false;
    if (res.problems.size() < 4000) res.problems += p + "\n";
  };
  const bool checkout = w.workload == "checkout";
  std::vector<int64_t> stock(checkout ? w.products : 0, 0), ordered(stock.size(), 0);
  const uint64_t orders = layout.tables[kOrders].records;
  std::vector<uint8_t> order_present(orders, 0), lines_of(orders, 0);
  std::vector<uint64_t> line_order;  // orders that present lines name
  std::vector<std::byte> buf;
  for (uint32_t t = 0; t < layout.tables.size(); ++t) {
    const uint64_t slot = layout.slot_bytes(t);
    const uint32_t payload = layout.tables[t].payload_bytes;
    for (uint32_t s = 0; s < layout.memory_servers; ++s) {
      RemoteRegion r = cluster.open_region(layout.region_name(layout.tables[t].name), s);
      const uint64_t mine = layout.region_bytes(t, s) / slot;
      const uint64_t per_read = std::max<uint64_t>(1, (1 << 20) / slot);
      for (uint64_t first = 0; first < mine; first += per_read) {
        const uint64_t n = std::min(per_read, mine - first);
        buf.resize(n * slot);
        const Status st = r.read(first * slot, buf);
        if (st != Status::kOk) {
          if (st == Status::kPeerLost)
            throw PeerLostError(s, "nam: check: memory server rank " + std::to_string(s) +
                                       " is lost: " + r.error());
          throw NamError("nam: check: reading table " + layout.tables[t].name + ": " + r.error());
        }
        for (uint64_t i = 0; i < n; ++i) {
          const uint64_t key = (first + i) * layout.memory_servers + s;
          if (key >= layout.tables[t].records) continue;
          const std::byte* p = buf.data() + i * slot;
          uint64_t header;
          std::memcpy(&header, p, 8);
          const std::byte* newest = nullptr;
          uint64_t newest_cid = 0;
          for (uint32_t v = 0; v < layout.versions; ++v) {
            const std::byte* q = p + layout.version_offset(t, v);
            uint64_t cid, sum;
            std::memcpy(&cid, q, 8);
            std::memcpy(&sum, q + 8, 8);
            cid = version_cid(cid);
            if (sum == 0 || sum != version_checksum(cid, t, key, std::span(q + 16, payload)))
              continue;
            if (!committed(cid)) {
              ++res.junk;
              continue;
            }
            if (newest == nullptr || cid > newest_cid) newest = q + 16, newest_cid = cid;
          }
          const std::string where = layout.tables[t].name + "[" + std::to_string(key) + "]";
          if (header & kLockBit) {
            ++res.locked;
            problem(where + " is still locked by timestamp " + std::to_string(header & ~kLockBit));
            continue;
          }
          if (newest != nullptr && header != newest_cid) {
            problem(where + ": header names commit " + std::to_string(header) +
                    ", newest version is " + std::to_string(newest_cid) +
                    (rsi ? " (the vector says commit " + std::to_string(header) + " is " +
                               std::to_string(ts_state(vector[ts_word(header)], header)) +
                               ": 0 pending, 1 committed, 2 fenced, 3 aborted)"
                         : std::string()));
          }
          if (newest == nullptr && header != 0)
            problem(where + ": header " + std::to_string(header) + " but no version");
          if (!checkout || newest == nullptr) continue;
          if (t == kProducts) {
            Product prod;
            std::memcpy(&prod, newest, sizeof(prod));
            stock[key] = prod.stock;
            ++res.products;
          } else if (t == kOrders) {
            Order o;
            std::memcpy(&o, newest, sizeof(o));
            order_present[key] = 1;
            ++res.orders;
            if (o.lines != 3) problem(where + " says it has " + std::to_string(o.lines) + " lines");
          } else if (t == kLines) {
            Line line;
            std::memcpy(&line, newest, sizeof(line));
            ++res.lines;
            if (line.order != key / 3 || line.product >= w.products || line.quantity < 1 ||
                line.quantity > 3) {
              problem(where + " is malformed (order " + std::to_string(line.order) + ", product " +
                      std::to_string(line.product) + ", quantity " + std::to_string(line.quantity) +
                      ")");
              continue;
            }
            ordered[line.product] += static_cast<int64_t>(line.quantity);
            ++lines_of[line.order];
          }
        }
      }
    }
  }
  if (!checkout) return res;
  if (res.products != w.products)
    problem("only " + std::to_string(res.products) + " of " + std::to_string(w.products) +
            " products present");
  for (uint64_t p = 0; p < stock.size(); ++p) {
    if (stock[p] + ordered[p] != w.initial_stock) {
      problem("product " + std::to_string(p) + ": stock " + std::to_string(stock[p]) +
              " + ordered " + std::to_string(ordered[p]) +
              " != " + std::to_string(w.initial_stock));
    }
  }
  for (uint64_t o = 0; o < orders; ++o) {
    if (order_present[o] && lines_of[o] != 3)
      problem("order " + std::to_string(o) + " has " + std::to_string(lines_of[o]) + " lines");
    if (!order_present[o] && lines_of[o] != 0)
      problem("order " + std::to_string(o) + " is absent but has " + std::to_string(lines_of[o]) +
              " lines");
  }
  // Every client's orders are its first keys, as many as it reported.
  const uint64_t share = orders_per_client(w, layout.clients);
  for (uint32_t c = 0; c < checkouts.size(); ++c) {
    uint64_t n = 0;
    while (n < share && order_present[c * share + n]) ++n;
    for (uint64_t k = n; k < share; ++k) {
      if (order_present[c * share + k]) {
        problem("client " + std::to_string(c) + ": order " + std::to_string(c * share + k) +
                " exists after a missing one (" + std::to_string(c * share + n) + ")");
        break;
      }
    }
    if (checkouts[c] >= 0 && n != static_cast<uint64_t>(checkouts[c])) {
      problem("client " + std::to_string(c) + " committed " + std::to_string(checkouts[c]) +
              " checkouts, but " + std::to_string(n) + " of its orders are in the database");
    }
  }
  return res;
}

}  // namespace sluice::nam
