// The query engine's operators in one process: against hand-computed
// results, and against DuckDB running the same SQL on the same table
// (written to CSV), row for row (doubles to 1e-9 relative, averages of
// integers and decimals bit for bit, the rest exact).
#include "operators.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "batch.h"
#include "expr.h"

namespace {

using namespace sluice::query;
using namespace sluice::query::expr;

// --- Tables ---

// A deterministic table: id, grp (0..9), amount decimal(2), price double,
// d date (2020-01-01 + 0..199 days), s string(8) from a small alphabet.
Batch table_t(size_t rows) {
  Batch b(Schema({int64_field("id"), int64_field("grp"), decimal_field("amount", 2),
                  double_field("price"), date_field("d"), string_field("s", 8)}));
  uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x >> 33;
  };
  const char* words[] = {"abc", "bcd", "cafe", "delta", "echo", "fox", "golf", "hotelxyz"};
  const int32_t base = days_from_civil(2020, 1, 1);
  for (size_t i = 0; i < rows; ++i) {
    b.column(0).ints.push_back(static_cast<int64_t>(i));
    b.column(1).ints.push_back(static_cast<int64_t>(next() % 10));
    b.column(2).ints.push_back(static_cast<int64_t>(next() % 200000) - 50000);  // -500.00..1499.99
    b.column(3).reals.push_back(static_cast<double>(next() % 1000000) / 997.0);
    b.column(4).days.push_back(base + static_cast<int32_t>(next() % 200));
    b.column(5).push_string(words[next() % 8]);
  }
  b.set_rows(rows);
  return b;
}

// grp -> name, factor: grp 3 has no row, grp 4 two.
Batch table_u() {
  Batch b(Schema({int64_field("ugrp"), string_field("name", 6), decimal_field("factor", 2)}));
  const int64_t grps[] = {0, 1, 2, 4, 4, 5, 6, 7, 8, 9};
  const char* names[] = {"zero", "one", "two",   "four",  "four2",
                         "five", "six", "seven", "eight", "nine"};
  for (int i = 0; i < 10; ++i) {
    b.column(0).ints.push_back(grps[i]);
    b.column(1).push_string(names[i]);
    b.column(2).ints.push_back(100 + 25 * i);
  }
  b.set_rows(10);
  return b;
}

// Runs `table` through the chain first..last (already linked) and returns what reached `out`.
const Batch& drain(const Batch& table, Sink* first, Collect* out, size_t batch_rows = 100) {
  Scan scan(table, 0, SIZE_MAX, batch_rows);
  scan.to(first);
  while (!scan.done()) scan.step();
  EXPECT_TRUE(out->finished());
  return out->rows();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// --- DuckDB ---

std::string python() { return SLUICE_QUERY_PYTHON; }
bool have_duckdb() { return std::filesystem::exists(python()); }

const char* sql_type(const Field& f, std::string* buf) {
  switch (f.type) {
    case Type::kInt64:
      return "BIGINT";
    case Type::kDouble:
      return "DOUBLE";
    case Type::kDate:
      return "DATE";
    case Type::kString:
      return "VARCHAR";
    case Type::kDecimal:
      *buf = "DECIMAL(18," + std::to_string(f.scale) + ")";
      return buf->c_str();
  }
  return "?";
}

class DuckDb {
 public:
  DuckDb()
      : dir_(std::filesystem::temp_directory_path() / ("query_test_" + std::to_string(getpid()))) {
    std::filesystem::create_directories(dir_);
  }
  ~DuckDb() { std::filesystem::remove_all(dir_); }

  void add(const std::string& name, const Batch& b) {
    const auto path = dir_ / (name + ".csv");
    std::ofstream f(path);
    for (size_t c = 0; c < b.num_columns(); ++c) f << (c ? "," : "") << b.schema()[c].name;
    f << "\n" << b.to_text(',');
    std::string cols, buf;
    for (size_t c = 0; c < b.num_columns(); ++c) {
      cols += (c ? ", '" : "'") + b.schema()[c].name + "': '" + sql_type(b.schema()[c], &buf) + "'";
    }
    setup_ += "con.execute(\"CREATE TABLE " + name + " AS SELECT * FROM read_csv('" +
              path.string() + "', header=true, columns={" + cols + "})\")\n";
  }

  // The result rows of `sql`, one line each, values as Column::format writes them.
  std::vector<std::string> query(const std::string& sql) {
    const auto script = dir_ / "q.py";
    std::ofstream(script)
        << "import duckdb, datetime\ncon = duckdb.connect()\n"
        << setup_ << "for r in con.execute(\"\"\"" << sql << "\"\"\").fetchall():\n"
        << "    print(','.join(v.isoformat() if isinstance(v, datetime.date)\n"
        << "                   else repr(v) if isinstance(v, float) else str(v) for v in r))\n";
    const std::string cmd = python() + " " + script.string() + " 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    while (p != nullptr && fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int rc = p != nullptr ? pclose(p) : -1;
    EXPECT_EQ(rc, 0) << out;
    return lines(out);
  }

 private:
  std::filesystem::path dir_;
  std::string setup_;
};

// Row for row: double columns within 1e-9 relative (those in `bit_equal`
// exactly), everything else exact.
void expect_same_rows(const Batch& ours, const std::vector<std::string>& theirs,
                      const std::vector<size_t>& bit_equal = {}) {
  const std::vector<std::string> mine = lines(ours.to_text(','));
  ASSERT_EQ(mine.size(), theirs.size()) << ours.to_text(',');
  ASSERT_FALSE(mine.empty()) << "a comparison of empty results checks nothing";
  for (size_t r = 0; r < mine.size(); ++r) {
    std::vector<std::string> a, b;
    std::istringstream ia(mine[r]), ib(theirs[r]);
    for (std::string v; std::getline(ia, v, ',');) a.push_back(v);
    for (std::string v; std::getline(ib, v, ',');) b.push_back(v);
    ASSERT_EQ(a.size(), b.size()) << "row " << r << ": " << mine[r] << " vs " << theirs[r];
    for (size_t c = 0; c < a.size(); ++c) {
      if (ours.schema()[c].type == Type::kDouble &&
          std::find(bit_equal.begin(), bit_equal.end(), c) != bit_equal.end()) {
        EXPECT_EQ(std::stod(a[c]), std::stod(b[c]))
            << "row " << r << " column " << c << ": " << mine[r] << " vs " << theirs[r];
      } else if (ours.schema()[c].type == Type::kDouble) {
        const double x = std::stod(a[c]), y = std::stod(b[c]);
        EXPECT_LE(std::fabs(x - y), 1e-9 * std::max(1.0, std::fabs(y)))
            << "row " << r << " column " << c << ": " << mine[r] << " vs " << theirs[r];
      } else {
        EXPECT_EQ(a[c], b[c]) << "row " << r << " column " << c << ": " << mine[r] << " vs "
                              << theirs[r];
      }
    }
  }
}

// --- Hand-computed ---

TEST(ExprTest, DecimalAndDateArithmeticIsExact) {
  Batch b(Schema({decimal_field("a", 2), date_field("d")}));
  b.column(0).ints = {150, -225};
  b.column(1).days = {days_from_civil(2024, 2, 28), days_from_civil(1999, 12, 31)};
  b.set_rows(2);
  ExprPtr m = mul(col("a"), dec(225, 2));  // a * 2.25: scale 4
  bind_expr(*m, b.schema(), "m");
  Column out;
  eval(*m, b, &out);
  std::string s;
  out.format(0, &s);
  s += ' ';
  out.format(1, &s);
  EXPECT_EQ(s, "3.3750 -5.0625");
  ExprPtr d = add(col("d"), lit(2));
  bind_expr(*d, b.schema(), "d2");
  eval(*d, b, &out);
  EXPECT_EQ(civil_from_days(out.days[0]), "2024-03-01");
  EXPECT_EQ(civil_from_days(out.days[1]), "2000-01-02");
  ExprPtr c = and_(gt(col("a"), dec(1, 0)), lt(col("d"), date(2025, 1, 1)));
  bind_expr(*c, b.schema(), "c");
  eval(*c, b, &out);
  EXPECT_EQ(out.ints, (std::vector<int64_t>{1, 0}));
}

TEST(ExprTest, PrefixMatchAndMissingDatesFollowSql) {
  Batch b(Schema({string_field("s", 4), date_field("d")}));
  for (const char* v : {"Abc", "aBc", "A", "xA"}) b.column(0).push_string(v);
  b.column(1).days = {kNullDate, days_from_civil(2013, 7, 2), days_from_civil(2013, 6, 30),
                      kNullDate};
  b.set_rows(4);
  ExprPtr p = starts_with(col("s"), "A");
  bind_expr(*p, b.schema(), "p");
  Column out;
  eval(*p, b, &out);
  EXPECT_EQ(out.ints, (std::vector<int64_t>{1, 0, 1, 0}));
  // A comparison with a missing date is false both ways (SQL's NULL in a WHERE).
  for (auto [e, want] :
       {std::pair{gt(col("d"), date(2013, 7, 1)), std::vector<int64_t>{0, 1, 0, 0}},
        std::pair{le(col("d"), date(2013, 7, 1)), std::vector<int64_t>{0, 0, 1, 0}}}) {
    bind_expr(*e, b.schema(), "c");
    eval(*e, b, &out);
    EXPECT_EQ(out.ints, want);
  }
  std::string text;
  b.column(1).format(0, &text);
  EXPECT_EQ(text, "") << "a missing date is an empty CSV field (NULL to DuckDB)";
}

TEST(ExprTest, PlanErrorsNameTheProblem) {
  const Schema s({int64_field("x"), string_field("name", 4)});
  try {
    Filter f(s, gt(col("y"), lit(1)));
    FAIL() << "no error for an unknown column";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("no column 'y' (the input has: x, name)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Filter(s, gt(col("name"), lit(1))), PlanError);
  EXPECT_THROW(Project(s, {{"p", add(col("name"), lit(1))}}), PlanError);
}

TEST(OperatorsTest, FilterAggregateAndHavingMatchHandComputedGroups) {
  Batch t(Schema({int64_field("k"), decimal_field("v", 2)}));
  t.column(0).ints = {1, 2, 1, 3, 2, 1};
  t.column(1).ints = {100, 250, 300, -50, 1000, 5};
  t.set_rows(6);
  Filter f(t.schema(), ne(col("v"), dec(5, 2)));  // drops the 0.05 row
  HashAggregate agg(f.schema(), {"k"},
                    {{AggKind::kCount, nullptr, "n"},
                     {AggKind::kSum, col("v"), "sum"},
                     {AggKind::kMin, col("v"), "min"},
                     {AggKind::kMax, col("v"), "max"},
                     {AggKind::kAvg, col("v"), "avg"}});
  Filter having(agg.schema(), ge(col("n"), lit(2)));
  Sort sort(having.schema(), {{"k", false}});
  Collect out(sort.schema());
  f.to(&agg);
  agg.to(&having);
  having.to(&sort);
  sort.to(&out);
  const Batch& r = drain(t, &f, &out, 4);
  EXPECT_EQ(r.to_text(), "1,2,4.00,1.00,3.00,2\n2,2,12.50,2.50,10.00,6.25\n");
}

// DuckDB's avg of a decimal divides the exact sum once by count x 10^scale
// in long double. These sums and counts are ones where that differs from
// dividing in double (and from sum / 100 / count); the expected values are
// what DuckDB 1.1.3 printed for avg() of DECIMAL(6,2) rows with these sums.
TEST(ExprTest, MeanOfDecimalsIsBitEqualToDuckDbsAvg) {
  struct Case {
    int64_t cents, count;
    double duckdb;
  };
  const Case cases[] = {{1431265056, 1809, 7911.9129684908785},
                        {207512863, 1535, 1351.875328990228},
                        {131346566, 1041, 1261.734543707973},
                        {588471783, 1583, 3717.446512950095}};
  Batch b(Schema({decimal_field("sum", 2), int64_field("n")}));
  for (const Case& c : cases) {
    b.column(0).ints.push_back(c.cents);
    b.column(1).ints.push_back(c.count);
    EXPECT_EQ(exact_mean(c.cents, c.count, 2), c.duckdb) << c.cents << " / " << c.count;
  }
  b.set_rows(std::size(cases));
  ExprPtr m = mean(col("sum"), col("n"));
  bind_expr(*m, b.schema(), "avg");
  Column out;
  eval(*m, b, &out);
  ASSERT_EQ(out.reals.size(), std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i) EXPECT_EQ(out.reals[i], cases[i].duckdb) << i;
  EXPECT_EQ(exact_mean(15, 2, 0), 7.5);  // an integer sum: scale 0
  EXPECT_EQ(exact_mean(0, 0, 2), 0.0);   // no rows
  EXPECT_THROW(bind_expr(*mean(col("n"), col("sum")), b.schema(), "bad"), PlanError);
}

TEST(OperatorsTest, HashJoinEmitsEveryMatchingPairEvenWhenProbeRowsComeFirst) {
  Batch probe(Schema({int64_field("pk"), string_field("tag", 3)}));
  probe.column(0).ints = {1, 2, 3, 2, 9};
  for (const char* s : {"a", "b", "c", "d", "e"}) probe.column(1).push_string(s);
  probe.set_rows(5);
  Batch build(Schema({int64_field("bk"), int64_field("val")}));
  build.column(0).ints = {2, 1, 2, 7};
  build.column(1).ints = {20, 10, 21, 70};
  build.set_rows(4);
  HashJoinBuild hb(build.schema(), {"bk"});
  HashJoinProbe hp(probe.schema(), {"pk"}, &hb);
  Sort sort(hp.schema(), {{"tag", false}, {"val", false}});
  Collect out(sort.schema());
  hp.to(&sort);
  sort.to(&out);
  // Probe rows first (as an exchange may deliver them): kept until the build ends.
  hp.push(probe);
  hp.finish();
  EXPECT_FALSE(out.finished());
  hb.push(build);
  hb.finish();
  ASSERT_TRUE(out.finished());
  EXPECT_EQ(out.rows().to_text(), "1,a,1,10\n2,b,2,20\n2,b,2,21\n2,d,2,20\n2,d,2,21\n");
}

TEST(OperatorsTest, TopNKeepsTheBestRowsWithTiesInInputOrder) {
  Batch t(Schema({int64_field("id"), int64_field("score")}));
  for (int64_t i = 0; i < 5000; ++i) {
    t.column(0).ints.push_back(i);
    t.column(1).ints.push_back(i % 7 == 0 ? 1000 : i % 1000);
  }
  t.set_rows(5000);
  Sort top(t.schema(), {{"score", true}}, 3);
  Collect out(top.schema());
  top.to(&out);
  const Batch& r = drain(t, &top, &out, 512);
  EXPECT_EQ(r.to_text(), "0,1000\n7,1000\n14,1000\n");
}

TEST(OperatorsTest, AggregateWithoutKeysGivesOneRowEvenForNoInput) {
  Batch t(Schema({int64_field("x")}));
  HashAggregate agg(t.schema(), {},
                    {{AggKind::kCount, nullptr, "n"}, {AggKind::kSum, col("x"), "s"}});
  Collect out(agg.schema());
  agg.to(&out);
  agg.finish();
  EXPECT_EQ(out.rows().to_text(), "0,0\n");
}

// A scan of some columns passes exactly those, in the order asked, in
// batches that together are the table's rows [begin, end); an unknown
// column is a PlanError naming it.
TEST(OperatorsTest, ScanOfChosenColumnsPassesOnlyThoseInOrder) {
  const Batch t = table_u();
  Scan scan(t, {"factor", "ugrp"}, 2, 9, 3);
  ASSERT_EQ(scan.schema().size(), 2u);
  EXPECT_EQ(scan.schema()[0].name, "factor");
  EXPECT_EQ(scan.schema()[1].name, "ugrp");
  Collect out(scan.schema());
  scan.to(&out);
  size_t steps = 0;
  while (scan.step() != 0) ++steps;
  EXPECT_EQ(steps, 3u);  // 7 rows in batches of 3
  EXPECT_TRUE(out.finished());
  EXPECT_EQ(out.rows().to_text(), "1.50,2\n1.75,4\n2.00,4\n2.25,5\n2.50,6\n2.75,7\n3.00,8\n");
  try {
    Scan bad(t, {"ugrp", "nope"});
    FAIL() << "an unknown column was scanned";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
}

// --- Against DuckDB ---

class DuckDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_duckdb()) {
      GTEST_SKIP() << "no DuckDB interpreter at " << python()
                   << ": run scripts/install-deps.sh (creates .venv with duckdb)";
    }
    db.add("t", t);
    db.add("u", u);
  }
  Batch t = table_t(5000);
  Batch u = table_u();
  DuckDb db;
};

TEST_F(DuckDbTest, FilterAggregateHavingMatchesDuckDb) {
  Filter f(t.schema(), and_(ge(col("d"), date(2020, 3, 1)), ne(col("s"), str("abc"))));
  HashAggregate agg(f.schema(), {"grp", "s"},
                    {{AggKind::kCount, nullptr, "n"},
                     {AggKind::kSum, col("amount"), "total"},
                     {AggKind::kSum, mul(col("amount"), dec(3, 1)), "scaled"},
                     {AggKind::kMin, col("price"), "lo"},
                     {AggKind::kMax, col("d"), "last"},
                     {AggKind::kAvg, col("amount"), "mean"}});
  Filter having(agg.schema(), gt(col("n"), lit(45)));
  Sort sort(having.schema(), {{"grp", false}, {"s", false}});
  Collect out(sort.schema());
  f.to(&agg);
  agg.to(&having);
  having.to(&sort);
  sort.to(&out);
  expect_same_rows(
      drain(t, &f, &out),
      db.query("SELECT grp, s, count(*), sum(amount), sum(amount * 0.3), min(price), "
               "max(d), avg(amount) FROM t WHERE d >= DATE '2020-03-01' AND s <> 'abc' "
               "GROUP BY grp, s HAVING count(*) > 45 ORDER BY grp, s"),
      {7});
}

// avg of decimals and of integers over many groups, bit for bit: the sums
// are exact on both sides, and both divide once as DuckDB does.
TEST_F(DuckDbTest, AvgOfDecimalsAndIntegersIsBitEqualToDuckDb) {
  HashAggregate agg(t.schema(), {"d"},
                    {{AggKind::kAvg, col("amount"), "avg_amount"},
                     {AggKind::kAvg, col("id"), "avg_id"},
                     {AggKind::kAvg, mul(col("amount"), col("amount")), "avg_square"}});
  Sort sort(agg.schema(), {{"d", false}});
  Collect out(sort.schema());
  agg.to(&sort);
  sort.to(&out);
  const Batch& ours = drain(t, &agg, &out);
  ASSERT_EQ(ours.rows(), 200u) << "one group per day";
  expect_same_rows(ours,
                   db.query("SELECT d, avg(amount), avg(id), avg(amount * amount) FROM t "
                            "GROUP BY d ORDER BY d"),
                   {1, 2, 3});
}

TEST_F(DuckDbTest, HashJoinMatchesDuckDbRowForRow) {
  HashJoinBuild hb(u.schema(), {"ugrp"});
  Scan build(u);
  build.to(&hb);
  while (!build.done()) build.step();
  Filter f(t.schema(), lt(col("id"), lit(300)));
  HashJoinProbe hp(f.schema(), {"grp"}, &hb);
  Project p(hp.schema(),
            {{"id", col("id")}, {"name", col("name")}, {"x", mul(col("amount"), col("factor"))}});
  Sort sort(p.schema(), {{"id", false}, {"name", false}});
  Collect out(sort.schema());
  f.to(&hp);
  hp.to(&p);
  p.to(&sort);
  sort.to(&out);
  expect_same_rows(drain(t, &f, &out),
                   db.query("SELECT id, name, amount * factor FROM t JOIN u ON t.grp = u.ugrp "
                            "WHERE id < 300 ORDER BY id, name"));
}

TEST_F(DuckDbTest, JoinThenAggregateMatchesDuckDb) {
  HashJoinBuild hb(u.schema(), {"ugrp"});
  Scan build(u);
  build.to(&hb);
  while (!build.done()) build.step();
  HashJoinProbe hp(t.schema(), {"grp"}, &hb);
  HashAggregate agg(hp.schema(), {"name"},
                    {{AggKind::kCount, nullptr, "n"},
                     {AggKind::kSum, mul(col("amount"), col("factor")), "revenue"}});
  Sort sort(agg.schema(), {{"revenue", true}});
  Collect out(sort.schema());
  hp.to(&agg);
  agg.to(&sort);
  sort.to(&out);
  expect_same_rows(drain(t, &hp, &out),
                   db.query("SELECT name, count(*), sum(amount * factor) AS r FROM t JOIN u ON "
                            "t.grp = u.ugrp GROUP BY name ORDER BY r DESC"));
}

TEST_F(DuckDbTest, SortAndTopNMatchDuckDb) {
  {
    Sort top(t.schema(), {{"price", true}, {"id", false}}, 25);
    Project p(top.schema(), {{"id", col("id")}, {"price", col("price")}, {"s", col("s")}});
    Collect out(p.schema());
    top.to(&p);
    p.to(&out);
    expect_same_rows(drain(t, &top, &out, 333),
                     db.query("SELECT id, price, s FROM t ORDER BY price DESC, id LIMIT 25"));
  }
  {
    Sort all(t.schema(), {{"s", false}, {"d", true}, {"id", false}});
    Collect out(all.schema());
    all.to(&out);
    expect_same_rows(drain(t, &all, &out), db.query("SELECT * FROM t ORDER BY s, d DESC, id"));
  }
}

}  // namespace
