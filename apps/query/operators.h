// apps/query/operators.h: the relational operators, push-based, a batch at a time.
//
// A plan is a set of pipelines. Each pipeline starts at a LocalSource (a
// scan of this worker's partition of a table) or at an exchange input
// (exchange.h), and passes batches down a chain of operators with push();
// finish() says the input has ended. Pipeline breakers (hash join build,
// aggregate, sort) keep what they need and emit on finish().
//
//   Scan scan(orders_partition);
//   Filter f(scan.schema(), gt(col("o_ol_cnt"), lit(10)));
//   HashAggregate agg(f.schema(), {"o_d_id"}, {{AggKind::kCount, nullptr, "n"}});
//   Collect out(agg.schema());
//   scan.to(&f); f.to(&agg); agg.to(&out);
//   while (scan.step() != 0) {}
//
// Every operator is built with the schema of its input and says the schema
// of its output (schema()), so plans are checked (PlanError) before any row
// moves. Inner equi-joins only; join keys and group keys are any columns,
// compared by value (strings by their bytes).
//
// Thread safety: an operator belongs to one worker thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "batch.h"
#include "expr.h"

namespace sluice::query {

// Where batches go.
class Sink {
 public:
  virtual ~Sink() = default;
  // One batch of rows of this sink's input schema; valid during the call.
  virtual void push(const Batch& batch) = 0;
  // The input has ended (called once).
  virtual void finish() = 0;
};

// An operator with an output: a Sink that feeds another (set with to()).
class Operator : public Sink {
 public:
  const Schema& schema() const { return out_schema_; }
  void to(Sink* next) { next_ = next; }

 protected:
  void emit(const Batch& b) {
    if (b.rows() != 0) next_->push(b);
  }
  void end() { next_->finish(); }
  Schema out_schema_;
  Sink* next_ = nullptr;
};

// Local work of a worker: each step() pushes one batch down its pipeline;
// the step after the last calls finish() and returns 0 from then on.
class LocalSource {
 public:
  virtual ~LocalSource() = default;
  // Rows pushed (0 once done).
  virtual size_t step() = 0;
  virtual bool done() const = 0;
};

// Pushes rows [begin, end) of a materialised table in batches of
// `batch_rows`: every column, or only `columns` (in that order; the
// projection pushed into the scan, so that columns no operator reads are
// never copied). Throws PlanError naming an unknown column.
class Scan : public LocalSource {
 public:
  explicit Scan(const Batch& table, size_t begin = 0, size_t end = SIZE_MAX,
                size_t batch_rows = 1024);
  Scan(const Batch& table, const std::vector<std::string>& columns, size_t begin = 0,
       size_t end = SIZE_MAX, size_t batch_rows = 1024);
  const Schema& schema() const { return slice_.schema(); }
  void to(Sink* next) { next_ = next; }
  size_t step() override;
  bool done() const override { return done_; }

 private:
  const Batch& table_;
  std::vector<size_t> cols_;  // the table's column of each output column
  size_t pos_, end_, batch_rows_;
  Batch slice_;
  Sink* next_ = nullptr;
  bool done_ = false;
};

// Rows for which `predicate` (an int64 0/1 expression) is non-zero.
class Filter : public Operator {
 public:
  Filter(const Schema& in, ExprPtr predicate);
  void push(const Batch& b) override;
  void finish() override { end(); }

 private:
  ExprPtr pred_;
  Column mask_;
  std::vector<uint32_t> sel_;
  Batch out_;
};

// One output column per (name, expression).
struct Projection {
  std::string name;
  ExprPtr expr;
};
class Project : public Operator {
 public:
  Project(const Schema& in, std::vector<Projection> outputs);
  void push(const Batch& b) override;
  void finish() override { end(); }

 private:
  std::vector<Projection> outputs_;
  Batch out_;
};

// A hash table from fixed-width encoded keys to dense ids 0, 1, 2, ...
// (open addressing, linear probing). Keys are the packed bytes of the key
// columns (Batch::pack_row's layout), so equal values are equal bytes.
class KeyTable {
 public:
  explicit KeyTable(uint32_t key_bytes);
  // The id of the key, inserting it (with the next id) if new.
  uint32_t insert(const std::byte* key, uint64_t hash, bool* inserted);
  // The id of the key, or UINT32_MAX.
  uint32_t find(const std::byte* key, uint64_t hash) const;
  size_t size() const { return hashes_.size(); }
  const std::byte* key(uint32_t id) const { return keys_.data() + size_t{id} * width_; }

 private:
  void grow();
  uint32_t width_;
  std::vector<std::byte> keys_;
  std::vector<uint64_t> hashes_;
  std::vector<uint32_t> slots_;  // id + 1; 0: empty
};

// Packs the key columns of a row and hashes them.
class KeyEncoder {
 public:
  KeyEncoder(const Schema& in, const std::vector<std::string>& keys);
  uint32_t bytes() const { return bytes_; }
  const std::vector<size_t>& columns() const { return cols_; }
  // Writes row i's key to `out` (bytes() bytes) and returns its hash.
  uint64_t encode(const Batch& b, size_t i, std::byte* out) const;

 private:
  std::vector<size_t> cols_;
  uint32_t bytes_ = 0;
};

class HashJoinProbe;

// The build side of an inner hash join: keeps its input and a table of its keys.
class HashJoinBuild : public Sink {
 public:
  HashJoinBuild(const Schema& in, std::vector<std::string> keys);
  void push(const Batch& b) override;
  void finish() override;
  const Schema& schema() const { return rows_.schema(); }
  size_t rows() const { return rows_.rows(); }

 private:
  friend class HashJoinProbe;
  KeyEncoder enc_;
  KeyTable table_;
  std::vector<uint32_t> head_;  // per key id: its last row
  std::vector<uint32_t> next_;  // per row: the previous row of its key (UINT32_MAX: none)
  std::vector<std::byte> key_;
  Batch rows_;
  HashJoinProbe* probe_ = nullptr;
  bool finished_ = false;
};

// The probe side: for every probe row, one output row per matching build
// row, probe columns first. Probe batches that arrive before the build side
// has finished are kept until it has (exchanges deliver both at once).
class HashJoinProbe : public Operator {
 public:
  HashJoinProbe(const Schema& in, std::vector<std::string> keys, HashJoinBuild* build);
  void push(const Batch& b) override;
  void finish() override;

 private:
  friend class HashJoinBuild;
  void build_done();
  void probe(const Batch& b);
  KeyEncoder enc_;
  HashJoinBuild* build_;
  std::vector<std::byte> key_;
  std::vector<uint32_t> probe_sel_, build_sel_;
  Batch pending_;  // probe rows that came before the build ended
  Batch out_;
  bool input_ended_ = false;
};

enum class AggKind : uint8_t { kCount, kSum, kMin, kMax, kAvg };
struct Aggregate {
  AggKind kind;
  ExprPtr arg;  // nullptr for count(*)
  std::string name;
};

// GROUP BY keys with aggregates; on finish() emits one row per group: the
// keys, then the aggregates. count gives int64; sum the argument's type
// (decimal sums exact); min/max the argument's type (not strings); avg a
// double (of integers and decimals: exact_mean(), bit-equal to DuckDB's avg). No keys: one row even
// for no input (count 0, others 0).
class HashAggregate : public Operator {
 public:
  HashAggregate(const Schema& in, std::vector<std::string> keys, std::vector<Aggregate> aggs);
  void push(const Batch& b) override;
  void finish() override;

 private:
  struct Acc {
    int64_t count = 0;
    int64_t isum = 0, imin = INT64_MAX, imax = INT64_MIN;
    double dsum = 0, dmin = 0, dmax = 0;
  };
  KeyEncoder enc_;
  KeyTable table_;
  std::vector<Aggregate> aggs_;
  std::vector<Column> args_;
  std::vector<Acc> acc_;  // group * aggs_.size() + a
  std::vector<std::byte> key_;
  Schema in_;
};

struct SortKey {
  std::string column;
  bool descending = false;
};

// ORDER BY keys [LIMIT limit]: keeps every row (or, with a limit, the best
// `limit` seen so far, so top-N uses little memory) and emits them in order
// on finish(). Ties keep input order.
class Sort : public Operator {
 public:
  Sort(const Schema& in, std::vector<SortKey> keys, size_t limit = 0);
  void push(const Batch& b) override;
  void finish() override;

 private:
  void sort_rows();
  std::vector<std::pair<size_t, bool>> keys_;
  size_t limit_;
  Batch rows_, out_;
  std::vector<uint32_t> order_;
};

// The end of a pipeline: keeps every row.
class Collect : public Sink {
 public:
  explicit Collect(const Schema& in) : rows_(in) {}
  void push(const Batch& b) override { rows_.append(b); }
  void finish() override { finished_ = true; }
  const Batch& rows() const { return rows_; }
  bool finished() const { return finished_; }

 private:
  Batch rows_;
  bool finished_ = false;
};

// Appends the rows `sel` of `in` to `out` (same schema), a column at a time.
void gather(const Batch& in, const std::vector<uint32_t>& sel, Batch* out);

}  // namespace sluice::query
