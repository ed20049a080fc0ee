// apps/query/expr.h: scalar expressions over a batch, evaluated a column at a time.
//
//   using namespace sluice::query::expr;
//   ExprPtr e = mul(col("ol_amount"), dec(150, 2));          // ol_amount * 1.50
//   ExprPtr p = and_(ge(col("o_entry_d"), date(2007, 1, 2)), eq(col("c_state"), str("A")));
//
// An expression is bound to the schema of its input once (bind_expr(): resolves
// columns, works out the result type, throws PlanError on a mismatch) and
// then evaluated per batch into a column. Arithmetic on integers, decimals
// and dates is exact (decimal scales are aligned as SQL does: + and - take
// the larger scale, * adds them); / gives a double, and so does mean()
// (AVG from a sum and a count). Comparisons and logic give int64 0/1.
//
// Thread safety: a bound expression keeps scratch columns; use it from one
// thread (each worker builds its own plan).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "batch.h"

namespace sluice::query {

enum class Op : uint8_t {
  kColumn,
  kInt,
  kDouble,
  kDecimal,
  kDate,
  kString,  // leaves
  kAdd,
  kSub,
  kMul,
  kDiv,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kAnd,
  kOr,
  kNot,
  kPrefix,  // s LIKE 'prefix%'
  kMean,    // AVG from a sum and a count
};

struct Expr {
  Op op = Op::kInt;
  std::string name;    // kColumn: the column; kString: the literal; kPrefix: the prefix
  int64_t ival = 0;    // kInt, kDecimal (unscaled), kDate (days)
  double dval = 0;     // kDouble
  uint32_t scale = 0;  // kDecimal
  std::vector<std::shared_ptr<Expr>> args;

  // Set by bind_expr():
  Field out;
  size_t column = 0;
  std::vector<Column> scratch;  // the children's values of the current batch
};
using ExprPtr = std::shared_ptr<Expr>;

namespace expr {
ExprPtr col(std::string name);
ExprPtr lit(int64_t v);
ExprPtr real(double v);
ExprPtr dec(int64_t unscaled, uint32_t scale);
ExprPtr date(int y, unsigned m, unsigned d);
ExprPtr str(std::string s);
ExprPtr add(ExprPtr a, ExprPtr b);
ExprPtr sub(ExprPtr a, ExprPtr b);
ExprPtr mul(ExprPtr a, ExprPtr b);
ExprPtr div(ExprPtr a, ExprPtr b);
ExprPtr eq(ExprPtr a, ExprPtr b);
ExprPtr ne(ExprPtr a, ExprPtr b);
ExprPtr lt(ExprPtr a, ExprPtr b);
ExprPtr le(ExprPtr a, ExprPtr b);
ExprPtr gt(ExprPtr a, ExprPtr b);
ExprPtr ge(ExprPtr a, ExprPtr b);
ExprPtr and_(ExprPtr a, ExprPtr b);
ExprPtr or_(ExprPtr a, ExprPtr b);
ExprPtr not_(ExprPtr a);
ExprPtr between(ExprPtr x, ExprPtr lo, ExprPtr hi);
// s LIKE 'prefix%' (s a string).
ExprPtr starts_with(ExprPtr s, std::string prefix);
// SQL's AVG of the values whose sum is `sum` and number `count` (an int64):
// a double; for an integer or decimal sum, exact_mean() (bit-equal to
// DuckDB's avg()), for a double sum, sum / count. For a plan that merges
// partial sums and counts before it averages.
ExprPtr mean(ExprPtr sum, ExprPtr count);
}  // namespace expr

// Resolves columns against `schema` and sets out (the result field, named
// `name`) throughout the tree. Throws PlanError naming what does not fit.
// (Not `bind`: with <functional> in scope, a call whose arguments include a
// std::string finds std::bind by argument-dependent lookup, a better match.)
void bind_expr(Expr& e, const Schema& schema, const std::string& name = "expr");
// Evaluates bound `e` over every row of `in` into `out` (cleared first;
// its field becomes e.out).
void eval(Expr& e, const Batch& in, Column* out);

}  // namespace sluice::query
