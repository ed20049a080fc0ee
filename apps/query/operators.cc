#include "operators.h"

#include <sluice/hash.h>

#include <algorithm>
#include <cstring>

namespace sluice::query {

namespace {

// Appends rows `sel` of `in` to `out` (resized once, then written in place).
void gather_column(const Column& in, const std::vector<uint32_t>& sel, Column* out) {
  const size_t n = sel.size();
  switch (in.type()) {
    case Type::kDouble: {
      const size_t at = out->reals.size();
      out->reals.resize(at + n);
      double* d = out->reals.data() + at;
      for (size_t k = 0; k < n; ++k) d[k] = in.reals[sel[k]];
      break;
    }
    case Type::kDate: {
      const size_t at = out->days.size();
      out->days.resize(at + n);
      int32_t* d = out->days.data() + at;
      for (size_t k = 0; k < n; ++k) d[k] = in.days[sel[k]];
      break;
    }
    case Type::kString: {
      const size_t w = in.field.width, at = out->chars.size();
      out->chars.resize(at + n * w);
      char* d = out->chars.data() + at;
      for (size_t k = 0; k < n; ++k)
        std::memcpy(d + k * w, in.chars.data() + size_t{sel[k]} * w, w);
      break;
    }
    default: {
      const size_t at = out->ints.size();
      out->ints.resize(at + n);
      int64_t* d = out->ints.data() + at;
      for (size_t k = 0; k < n; ++k) d[k] = in.ints[sel[k]];
    }
  }
}

// Appends rows [from, from + n) of `in` to `out`.
void copy_range(const Column& in, size_t from, size_t n, Column* out) {
  switch (in.type()) {
    case Type::kDouble:
      out->reals.insert(out->reals.end(), in.reals.begin() + from, in.reals.begin() + from + n);
      break;
    case Type::kDate:
      out->days.insert(out->days.end(), in.days.begin() + from, in.days.begin() + from + n);
      break;
    case Type::kString: {
      const size_t w = in.field.width;
      out->chars.insert(out->chars.end(), in.chars.begin() + from * w,
                        in.chars.begin() + (from + n) * w);
      break;
    }
    default:
      out->ints.insert(out->ints.end(), in.ints.begin() + from, in.ints.begin() + from + n);
  }
}

Schema concat(const Schema& a, const Schema& b) {
  std::vector<Field> f = a.fields();
  f.insert(f.end(), b.fields().begin(), b.fields().end());
  return Schema(std::move(f));
}

}  // namespace

void gather(const Batch& in, const std::vector<uint32_t>& sel, Batch* out) {
  for (size_t c = 0; c < in.num_columns(); ++c) gather_column(in.column(c), sel, &out->column(c));
  out->set_rows(out->rows() + sel.size());
}

// --- Scan ---

Scan::Scan(const Batch& table, size_t begin, size_t end, size_t batch_rows)
    : table_(table),
      pos_(std::min(begin, table.rows())),
      end_(std::min(end, table.rows())),
      batch_rows_(std::max<size_t>(1, batch_rows)),
      slice_(table.schema()) {
  for (size_t c = 0; c < table.num_columns(); ++c) cols_.push_back(c);
}

Scan::Scan(const Batch& table, const std::vector<std::string>& columns, size_t begin, size_t end,
           size_t batch_rows)
    : table_(table),
      pos_(std::min(begin, table.rows())),
      end_(std::min(end, table.rows())),
      batch_rows_(std::max<size_t>(1, batch_rows)) {
  std::vector<Field> fields;
  for (const std::string& name : columns) {
    cols_.push_back(table.schema().index(name));
    fields.push_back(table.schema()[cols_.back()]);
  }
  slice_ = Batch(Schema(std::move(fields)));
}

size_t Scan::step() {
  if (done_) return 0;
  if (pos_ >= end_) {
    done_ = true;
    next_->finish();
    return 0;
  }
  const size_t n = std::min(batch_rows_, end_ - pos_);
  slice_.clear();
  for (size_t k = 0; k < cols_.size(); ++k) {
    copy_range(table_.column(cols_[k]), pos_, n, &slice_.column(k));
  }
  slice_.set_rows(n);
  pos_ += n;
  next_->push(slice_);
  return n;
}

// --- Filter, Project ---

Filter::Filter(const Schema& in, ExprPtr predicate) : pred_(std::move(predicate)), out_(in) {
  bind_expr(*pred_, in, "filter");
  if (pred_->out.type != Type::kInt64) {
    throw PlanError(std::string("a filter takes a condition, not a ") + to_string(pred_->out.type));
  }
  out_schema_ = in;
}

void Filter::push(const Batch& b) {
  eval(*pred_, b, &mask_);
  sel_.clear();
  for (size_t i = 0; i < b.rows(); ++i)
    if (mask_.ints[i] != 0) sel_.push_back(static_cast<uint32_t>(i));
  if (sel_.size() == b.rows()) return emit(b);
  out_.clear();
  gather(b, sel_, &out_);
  emit(out_);
}

Project::Project(const Schema& in, std::vector<Projection> outputs) : outputs_(std::move(outputs)) {
  std::vector<Field> fields;
  for (Projection& p : outputs_) {
    bind_expr(*p.expr, in, p.name);
    fields.push_back(p.expr->out);
  }
  out_schema_ = Schema(std::move(fields));
  out_ = Batch(out_schema_);
}

void Project::push(const Batch& b) {
  out_.clear();
  for (size_t i = 0; i < outputs_.size(); ++i) eval(*outputs_[i].expr, b, &out_.column(i));
  out_.set_rows(b.rows());
  emit(out_);
}

// --- Keys ---

// Keys of no columns (a global aggregate) are one zero byte, so that key
// pointers are never null.
KeyTable::KeyTable(uint32_t key_bytes) : width_(std::max(1u, key_bytes)), slots_(64, 0) {}

uint32_t KeyTable::find(const std::byte* key, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t s = hash & mask;; s = (s + 1) & mask) {
    const uint32_t v = slots_[s];
    if (v == 0) return UINT32_MAX;
    if (hashes_[v - 1] == hash && std::memcmp(this->key(v - 1), key, width_) == 0) return v - 1;
  }
}

uint32_t KeyTable::insert(const std::byte* key, uint64_t hash, bool* inserted) {
  if ((hashes_.size() + 1) * 2 > slots_.size()) grow();
  const size_t mask = slots_.size() - 1;
  for (size_t s = hash & mask;; s = (s + 1) & mask) {
    const uint32_t v = slots_[s];
    if (v == 0) {
      const uint32_t id = static_cast<uint32_t>(hashes_.size());
      hashes_.push_back(hash);
      keys_.insert(keys_.end(), key, key + width_);
      slots_[s] = id + 1;
      *inserted = true;
      return id;
    }
    if (hashes_[v - 1] == hash && std::memcmp(this->key(v - 1), key, width_) == 0) {
      *inserted = false;
      return v - 1;
    }
  }
}

void KeyTable::grow() {
  std::vector<uint32_t> slots(slots_.size() * 2, 0);
  const size_t mask = slots.size() - 1;
  for (uint32_t id = 0; id < hashes_.size(); ++id) {
    size_t s = hashes_[id] & mask;
    while (slots[s] != 0) s = (s + 1) & mask;
    slots[s] = id + 1;
  }
  slots_ = std::move(slots);
}

KeyEncoder::KeyEncoder(const Schema& in, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    cols_.push_back(in.index(k));
    bytes_ += in[cols_.back()].packed_bytes();
  }
}

uint64_t KeyEncoder::encode(const Batch& b, size_t i, std::byte* out) const {
  std::byte* p = out;
  for (size_t c : cols_) {
    const Column& col = b.column(c);
    switch (col.type()) {
      case Type::kDouble: {
        // +0.0 and -0.0 are one key.
        const double v = col.reals[i] == 0 ? 0.0 : col.reals[i];
        std::memcpy(p, &v, 8);
        p += 8;
        break;
      }
      case Type::kDate:
        std::memcpy(p, &col.days[i], 4);
        p += 4;
        break;
      case Type::kString:
        std::memcpy(p, col.chars.data() + i * col.field.width, col.field.width);
        p += col.field.width;
        break;
      default:
        std::memcpy(p, &col.ints[i], 8);
        p += 8;
    }
  }
  // Keys of one 8-byte column hash as sluice::route_key does.
  return sluice::hash_bytes(std::span<const std::byte>(out, bytes_));
}

// --- Hash join ---

HashJoinBuild::HashJoinBuild(const Schema& in, std::vector<std::string> keys)
    : enc_(in, keys), table_(enc_.bytes()), key_(std::max(1u, enc_.bytes())), rows_(in) {}

void HashJoinBuild::push(const Batch& b) {
  const uint32_t base = static_cast<uint32_t>(rows_.rows());
  rows_.append(b);
  for (size_t i = 0; i < b.rows(); ++i) {
    const uint64_t h = enc_.encode(b, i, key_.data());
    bool fresh = false;
    const uint32_t id = table_.insert(key_.data(), h, &fresh);
    if (fresh) head_.push_back(UINT32_MAX);
    next_.push_back(head_[id]);
    head_[id] = base + static_cast<uint32_t>(i);
  }
}

void HashJoinBuild::finish() {
  finished_ = true;
  if (probe_ != nullptr) probe_->build_done();
}

HashJoinProbe::HashJoinProbe(const Schema& in, std::vector<std::string> keys, HashJoinBuild* build)
    : enc_(in, keys), build_(build), key_(std::max(1u, enc_.bytes())), pending_(in) {
  const KeyEncoder& other = build->enc_;
  if (other.columns().size() != enc_.columns().size()) {
    throw PlanError("a join needs as many probe keys as build keys");
  }
  for (size_t k = 0; k < enc_.columns().size(); ++k) {
    const Field& a = in[enc_.columns()[k]];
    const Field& b = build->schema()[other.columns()[k]];
    if (a.type != b.type || a.scale != b.scale || a.width != b.width) {
      throw PlanError("join key " + a.name + " (" + to_string(a.type) + ") does not match " +
                      b.name + " (" + to_string(b.type) + ")");
    }
  }
  build->probe_ = this;
  out_schema_ = concat(in, build->schema());
  out_ = Batch(out_schema_);
}

void HashJoinProbe::push(const Batch& b) {
  if (!build_->finished_) return pending_.append(b);
  probe(b);
}

void HashJoinProbe::probe(const Batch& b) {
  probe_sel_.clear();
  build_sel_.clear();
  for (size_t i = 0; i < b.rows(); ++i) {
    const uint64_t h = enc_.encode(b, i, key_.data());
    const uint32_t id = build_->table_.find(key_.data(), h);
    if (id == UINT32_MAX) continue;
    for (uint32_t r = build_->head_[id]; r != UINT32_MAX; r = build_->next_[r]) {
      probe_sel_.push_back(static_cast<uint32_t>(i));
      build_sel_.push_back(r);
    }
  }
  out_.clear();
  const size_t np = b.num_columns();
  for (size_t c = 0; c < np; ++c) gather_column(b.column(c), probe_sel_, &out_.column(c));
  for (size_t c = 0; c < build_->rows_.num_columns(); ++c) {
    gather_column(build_->rows_.column(c), build_sel_, &out_.column(np + c));
  }
  out_.set_rows(probe_sel_.size());
  emit(out_);
}

void HashJoinProbe::finish() {
  input_ended_ = true;
  if (build_->finished_) end();
}

void HashJoinProbe::build_done() {
  if (pending_.rows() != 0) probe(pending_);
  pending_.clear();
  if (input_ended_) end();
}

// --- Aggregate ---

HashAggregate::HashAggregate(const Schema& in, std::vector<std::string> keys,
                             std::vector<Aggregate> aggs)
    : enc_(in, keys),
      table_(enc_.bytes()),
      aggs_(std::move(aggs)),
      key_(std::max(1u, enc_.bytes())),
      in_(in) {
  std::vector<Field> fields;
  for (size_t c : enc_.columns()) fields.push_back(in[c]);
  for (Aggregate& a : aggs_) {
    if (a.kind == AggKind::kCount) {
      fields.push_back(int64_field(a.name));
      args_.emplace_back(int64_field(a.name));
      continue;
    }
    if (a.arg == nullptr) throw PlanError("aggregate " + a.name + " needs an argument");
    bind_expr(*a.arg, in, a.name);
    if (a.arg->out.type == Type::kString) {
      throw PlanError("aggregate " + a.name + " over a string column");
    }
    Field f = a.arg->out;
    if (a.kind == AggKind::kAvg) f = double_field(a.name);
    fields.push_back(f);
    args_.emplace_back(a.arg->out);
  }
  out_schema_ = Schema(std::move(fields));
}

void HashAggregate::push(const Batch& b) {
  for (size_t a = 0; a < aggs_.size(); ++a)
    if (aggs_[a].arg != nullptr && aggs_[a].kind != AggKind::kCount)
      eval(*aggs_[a].arg, b, &args_[a]);
  const size_t na = aggs_.size();
  for (size_t i = 0; i < b.rows(); ++i) {
    const uint64_t h = enc_.encode(b, i, key_.data());
    bool fresh = false;
    const uint32_t g = table_.insert(key_.data(), h, &fresh);
    if (fresh) acc_.resize(acc_.size() + na);
    for (size_t a = 0; a < na; ++a) {
      Acc& x = acc_[size_t{g} * na + a];
      const bool first = x.count == 0;
      ++x.count;
      if (aggs_[a].kind == AggKind::kCount) continue;
      const Column& v = args_[a];
      if (v.type() == Type::kDouble) {
        const double d = v.reals[i];
        x.dsum += d;
        x.dmin = first ? d : std::min(x.dmin, d);
        x.dmax = first ? d : std::max(x.dmax, d);
      } else {
        const int64_t n = v.int_at(i);
        x.isum += n;
        x.imin = std::min(x.imin, n);
        x.imax = std::max(x.imax, n);
      }
    }
  }
}

void HashAggregate::finish() {
  const size_t na = aggs_.size();
  if (enc_.columns().empty() && table_.size() == 0) {
    bool fresh = false;
    table_.insert(key_.data(), 0, &fresh);
    acc_.resize(na);
  }
  Batch out(out_schema_);
  Batch keys(Schema([&] {
    std::vector<Field> f;
    for (size_t c : enc_.columns()) f.push_back(in_[c]);
    return f;
  }()));
  const size_t nk = enc_.columns().size();
  for (uint32_t g = 0; g < table_.size(); ++g) {
    keys.clear();
    keys.unpack_row(table_.key(g));
    for (size_t k = 0; k < nk; ++k) out.column(k).append_from(keys.column(k), 0);
    for (size_t a = 0; a < na; ++a) {
      const Acc& x = acc_[size_t{g} * na + a];
      Column& c = out.column(nk + a);
      const bool real = args_[a].type() == Type::kDouble;
      switch (aggs_[a].kind) {
        case AggKind::kCount:
          c.ints.push_back(x.count);
          break;
        case AggKind::kAvg: {
          const uint32_t scale = args_[a].type() == Type::kDecimal ? args_[a].field.scale : 0;
          c.reals.push_back(real ? (x.count == 0 ? 0 : x.dsum / static_cast<double>(x.count))
                                 : exact_mean(x.isum, x.count, scale));
          break;
        }
        default: {
          const bool empty = x.count == 0;
          if (real) {
            c.reals.push_back(empty                            ? 0
                              : aggs_[a].kind == AggKind::kSum ? x.dsum
                              : aggs_[a].kind == AggKind::kMin ? x.dmin
                                                               : x.dmax);
          } else {
            const int64_t v = empty                            ? 0
                              : aggs_[a].kind == AggKind::kSum ? x.isum
                              : aggs_[a].kind == AggKind::kMin ? x.imin
                                                               : x.imax;
            if (c.type() == Type::kDate) {
              c.days.push_back(static_cast<int32_t>(v));
            } else {
              c.ints.push_back(v);
            }
          }
        }
      }
    }
    out.set_rows(out.rows() + 1);
    if (out.rows() == 4096) {
      emit(out);
      out.clear();
    }
  }
  emit(out);
  end();
}

// --- Sort ---

Sort::Sort(const Schema& in, std::vector<SortKey> keys, size_t limit)
    : limit_(limit), rows_(in), out_(in) {
  for (const SortKey& k : keys) keys_.emplace_back(in.index(k.column), k.descending);
  out_schema_ = in;
}

void Sort::sort_rows() {
  order_.resize(rows_.rows());
  for (uint32_t i = 0; i < order_.size(); ++i) order_[i] = i;
  auto less = [&](uint32_t x, uint32_t y) {
    for (const auto& [c, desc] : keys_) {
      const Column& col = rows_.column(c);
      int cmp = 0;
      if (col.type() == Type::kString) {
        cmp = col.str_at(x).compare(col.str_at(y));
      } else if (col.type() == Type::kDouble) {
        cmp = col.reals[x] < col.reals[y] ? -1 : col.reals[x] > col.reals[y] ? 1 : 0;
      } else {
        const int64_t a = col.int_at(x), b = col.int_at(y);
        cmp = a < b ? -1 : a > b ? 1 : 0;
      }
      if (cmp != 0) return desc ? cmp > 0 : cmp < 0;
    }
    return false;
  };
  std::stable_sort(order_.begin(), order_.end(), less);
  if (limit_ != 0 && order_.size() > limit_) order_.resize(limit_);
  out_.clear();
  gather(rows_, order_, &out_);
  std::swap(rows_, out_);
}

void Sort::push(const Batch& b) {
  rows_.append(b);
  // Top-N: cut back to the best `limit` rows whenever twice as many are held.
  if (limit_ != 0 && rows_.rows() >= 2 * limit_ + 1024) sort_rows();
}

void Sort::finish() {
  sort_rows();
  for (size_t begin = 0; begin < rows_.rows(); begin += 4096) {
    std::vector<uint32_t> sel;
    for (size_t i = begin; i < std::min(rows_.rows(), begin + 4096); ++i)
      sel.push_back(static_cast<uint32_t>(i));
    out_.clear();
    gather(rows_, sel, &out_);
    emit(out_);
  }
  end();
}

}  // namespace sluice::query
