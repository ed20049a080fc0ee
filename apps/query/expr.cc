#include "expr.h"

#include <algorithm>

namespace sluice::query {

namespace expr {
namespace {
ExprPtr leaf(Op op) {
  auto e = std::make_shared<Expr>();
  e->op = op;
  return e;
}
ExprPtr node(Op op, std::vector<ExprPtr> args) {
  auto e = leaf(op);
  e->args = std::move(args);
  return e;
}
}  // namespace

ExprPtr col(std::string name) {
  auto e = leaf(Op::kColumn);
  e->name = std::move(name);
  return e;
}
ExprPtr lit(int64_t v) {
  auto e = leaf(Op::kInt);
  e->ival = v;
  return e;
}
ExprPtr real(double v) {
  auto e = leaf(Op::kDouble);
  e->dval = v;
  return e;
}
ExprPtr dec(int64_t unscaled, uint32_t scale) {
  auto e = leaf(Op::kDecimal);
  e->ival = unscaled;
  e->scale = scale;
  return e;
}
ExprPtr date(int y, unsigned m, unsigned d) {
  auto e = leaf(Op::kDate);
  e->ival = days_from_civil(y, m, d);
  return e;
}
ExprPtr str(std::string s) {
  auto e = leaf(Op::kString);
  e->name = std::move(s);
  return e;
}
ExprPtr add(ExprPtr a, ExprPtr b) { return node(Op::kAdd, {std::move(a), std::move(b)}); }
ExprPtr sub(ExprPtr a, ExprPtr b) { return node(Op::kSub, {std::move(a), std::move(b)}); }
ExprPtr mul(ExprPtr a, ExprPtr b) { return node(Op::kMul, {std::move(a), std::move(b)}); }
ExprPtr div(ExprPtr a, ExprPtr b) { return node(Op::kDiv, {std::move(a), std::move(b)}); }
ExprPtr eq(ExprPtr a, ExprPtr b) { return node(Op::kEq, {std::move(a), std::move(b)}); }
ExprPtr ne(ExprPtr a, ExprPtr b) { return node(Op::kNe, {std::move(a), std::move(b)}); }
ExprPtr lt(ExprPtr a, ExprPtr b) { return node(Op::kLt, {std::move(a), std::move(b)}); }
ExprPtr le(ExprPtr a, ExprPtr b) { return node(Op::kLe, {std::move(a), std::move(b)}); }
ExprPtr gt(ExprPtr a, ExprPtr b) { return node(Op::kGt, {std::move(a), std::move(b)}); }
ExprPtr ge(ExprPtr a, ExprPtr b) { return node(Op::kGe, {std::move(a), std::move(b)}); }
ExprPtr and_(ExprPtr a, ExprPtr b) { return node(Op::kAnd, {std::move(a), std::move(b)}); }
ExprPtr or_(ExprPtr a, ExprPtr b) { return node(Op::kOr, {std::move(a), std::move(b)}); }
ExprPtr not_(ExprPtr a) { return node(Op::kNot, {std::move(a)}); }
ExprPtr starts_with(ExprPtr s, std::string prefix) {
  auto e = node(Op::kPrefix, {std::move(s)});
  e->name = std::move(prefix);
  return e;
}
ExprPtr mean(ExprPtr sum, ExprPtr count) {
  return node(Op::kMean, {std::move(sum), std::move(count)});
}
ExprPtr between(ExprPtr x, ExprPtr lo, ExprPtr hi) {
  return and_(ge(x, std::move(lo)), le(x, std::move(hi)));
}
}  // namespace expr

namespace {

bool is_int_like(Type t) { return t == Type::kInt64 || t == Type::kDecimal || t == Type::kDate; }
uint32_t scale_of(const Field& f) { return f.type == Type::kDecimal ? f.scale : 0; }
int64_t pow10(uint32_t n) {
  int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kAdd:
      return "+";
    case Op::kSub:
      return "-";
    case Op::kMul:
      return "*";
    case Op::kDiv:
      return "/";
    case Op::kEq:
      return "=";
    case Op::kNe:
      return "<>";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    case Op::kAnd:
      return "AND";
    case Op::kOr:
      return "OR";
    case Op::kNot:
      return "NOT";
    case Op::kMean:
      return "mean";
    default:
      return "leaf";
  }
}

// The field of `a op b` for arithmetic.
Field arith_field(Op op, const Field& a, const Field& b, const std::string& name) {
  if (a.type == Type::kString || b.type == Type::kString) {
    throw PlanError(std::string("'") + op_name(op) + "' on a string in expression " + name);
  }
  if (op == Op::kDiv || a.type == Type::kDouble || b.type == Type::kDouble) {
    return double_field(name);
  }
  const bool da = a.type == Type::kDate, db = b.type == Type::kDate;
  if (da || db) {
    if (op == Op::kSub && da && db) return int64_field(name);
    const Type other = da ? b.type : a.type;
    const bool date_plus_days = op == Op::kAdd && !(da && db) && other == Type::kInt64;
    const bool date_minus_days = op == Op::kSub && da && b.type == Type::kInt64;
    if (date_plus_days || date_minus_days) return date_field(name);
    throw PlanError(std::string("'") + op_name(op) + "' on dates in expression " + name);
  }
  if (a.type == Type::kDecimal || b.type == Type::kDecimal) {
    const uint32_t s =
        op == Op::kMul ? scale_of(a) + scale_of(b) : std::max(scale_of(a), scale_of(b));
    if (s > 18) throw PlanError("decimal scale above 18 in expression " + name);
    return decimal_field(name, s);
  }
  return int64_field(name);
}

}  // namespace

void bind_expr(Expr& e, const Schema& schema, const std::string& name) {
  for (auto& a : e.args) bind_expr(*a, schema, name);
  switch (e.op) {
    case Op::kColumn:
      e.column = schema.index(e.name);
      e.out = schema[e.column];
      e.out.name = name;
      return;
    case Op::kInt:
      e.out = int64_field(name);
      return;
    case Op::kDouble:
      e.out = double_field(name);
      return;
    case Op::kDecimal:
      e.out = decimal_field(name, e.scale);
      return;
    case Op::kDate:
      e.out = date_field(name);
      return;
    case Op::kString:
      e.out = string_field(name, static_cast<uint32_t>(std::max<size_t>(1, e.name.size())));
      return;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      e.out = arith_field(e.op, e.args[0]->out, e.args[1]->out, name);
      break;
    case Op::kEq:
    case Op::kNe:
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe: {
      const Type a = e.args[0]->out.type, b = e.args[1]->out.type;
      const bool ok =
          (a == Type::kString) == (b == Type::kString) &&
          ((a == Type::kDate) == (b == Type::kDate) || a == Type::kDouble || b == Type::kDouble);
      if (!ok) {
        throw PlanError(std::string("cannot compare ") + to_string(a) + " " + op_name(e.op) + " " +
                        to_string(b) + " in expression " + name);
      }
      e.out = int64_field(name);
      break;
    }
    case Op::kMean: {
      const Type sum = e.args[0]->out.type, count = e.args[1]->out.type;
      if (sum == Type::kString || sum == Type::kDate || count != Type::kInt64) {
        throw PlanError(std::string("mean takes a numeric sum and an int64 count, not ") +
                        to_string(sum) + " and " + to_string(count) + ", in expression " + name);
      }
      e.out = double_field(name);
      break;
    }
    case Op::kPrefix:
      if (e.args[0]->out.type != Type::kString) {
        throw PlanError(std::string("LIKE 'prefix%' takes a string, not ") +
                        to_string(e.args[0]->out.type) + ", in expression " + name);
      }
      e.out = int64_field(name);
      break;
    default:
      for (auto& a : e.args) {
        if (a->out.type != Type::kInt64) {
          throw PlanError(std::string(op_name(e.op)) + " takes conditions (int64 0/1), not " +
                          to_string(a->out.type) + ", in expression " + name);
        }
      }
      e.out = int64_field(name);
  }
  e.scratch.clear();
  for (auto& a : e.args) e.scratch.emplace_back(a->out);
}

namespace {

template <class Cmp>
void compare(const Column& a, const Column& b, size_t n, Cmp cmp, std::vector<int64_t>* out) {
  if (a.type() == Type::kString) {
    for (size_t i = 0; i < n; ++i) out->push_back(cmp(a.str_at(i).compare(b.str_at(i)), 0));
  } else if (a.type() == Type::kDate && b.type() == Type::kDate) {
    // A comparison with a missing date is false, as SQL's filters treat NULL.
    for (size_t i = 0; i < n; ++i) {
      const bool null = a.days[i] == kNullDate || b.days[i] == kNullDate;
      out->push_back(!null && cmp(a.days[i], b.days[i]));
    }
  } else if (is_int_like(a.type()) && is_int_like(b.type())) {
    const uint32_t s = std::max(scale_of(a.field), scale_of(b.field));
    const int64_t ma = pow10(s - scale_of(a.field)), mb = pow10(s - scale_of(b.field));
    for (size_t i = 0; i < n; ++i) out->push_back(cmp(a.int_at(i) * ma, b.int_at(i) * mb));
  } else {
    for (size_t i = 0; i < n; ++i) out->push_back(cmp(a.real_at(i), b.real_at(i)));
  }
}

void fill_leaf(const Expr& e, size_t n, Column* out) {
  switch (e.op) {
    case Op::kDouble:
      out->reals.assign(n, e.dval);
      break;
    case Op::kDate:
      out->days.assign(n, static_cast<int32_t>(e.ival));
      break;
    case Op::kString:
      for (size_t i = 0; i < n; ++i) out->push_string(e.name);
      break;
    default:
      out->ints.assign(n, e.ival);
  }
}

}  // namespace

void eval(Expr& e, const Batch& in, Column* out) {
  const size_t n = in.rows();
  out->field = e.out;
  out->clear();
  if (e.op == Op::kColumn) {
    const Column& c = in.column(e.column);
    out->ints = c.ints;
    out->reals = c.reals;
    out->days = c.days;
    out->chars = c.chars;
    return;
  }
  if (e.args.empty()) return fill_leaf(e, n, out);
  for (size_t i = 0; i < e.args.size(); ++i) eval(*e.args[i], in, &e.scratch[i]);
  const Column& a = e.scratch[0];
  std::vector<int64_t>& o = out->ints;
  o.reserve(n);
  switch (e.op) {
    case Op::kEq:
      return compare(
          a, e.scratch[1], n, [](auto x, auto y) { return x == y; }, &o);
    case Op::kNe:
      return compare(
          a, e.scratch[1], n, [](auto x, auto y) { return x != y; }, &o);
    case Op::kLt:
      return compare(
          a, e.scratch[1], n, [](auto x, auto y) { return x < y; }, &o);
    case Op::kLe:
      return compare(
          a, e.scratch[1], n, [](auto x, auto y) { return x <= y; }, &o);
    case Op::kGt:
      return compare(
          a, e.scratch[1], n, [](auto x, auto y) { return x > y; }, &o);
    case Op::kGe:
      return compare(
          a, e.scratch[1], n, [](auto x, auto y) { return x >= y; }, &o);
    case Op::kNot:
      for (size_t i = 0; i < n; ++i) o.push_back(a.ints[i] == 0);
      return;
    case Op::kPrefix:
      for (size_t i = 0; i < n; ++i) o.push_back(a.str_at(i).starts_with(e.name));
      return;
    case Op::kAnd:
      for (size_t i = 0; i < n; ++i) o.push_back(a.ints[i] != 0 && e.scratch[1].ints[i] != 0);
      return;
    case Op::kOr:
      for (size_t i = 0; i < n; ++i) o.push_back(a.ints[i] != 0 || e.scratch[1].ints[i] != 0);
      return;
    case Op::kMean: {
      const Column& count = e.scratch[1];
      std::vector<double>& r = out->reals;
      r.reserve(n);
      if (a.type() == Type::kDouble) {
        for (size_t i = 0; i < n; ++i)
          r.push_back(count.ints[i] == 0 ? 0 : a.reals[i] / static_cast<double>(count.ints[i]));
      } else {
        for (size_t i = 0; i < n; ++i)
          r.push_back(exact_mean(a.int_at(i), count.ints[i], scale_of(a.field)));
      }
      return;
    }
    default:
      break;
  }
  // Arithmetic.
  const Column& b = e.scratch[1];
  if (e.out.type == Type::kDouble) {
    std::vector<double>& r = out->reals;
    r.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const double x = a.real_at(i), y = b.real_at(i);
      switch (e.op) {
        case Op::kAdd:
          r.push_back(x + y);
          break;
        case Op::kSub:
          r.push_back(x - y);
          break;
        case Op::kMul:
          r.push_back(x * y);
          break;
        default:
          r.push_back(x / y);
      }
    }
    return;
  }
  // Exact: align the scales for + and -, add them for *.
  int64_t ma = 1, mb = 1;
  if (e.op != Op::kMul) {
    const uint32_t s = scale_of(e.out);
    ma = pow10(s - scale_of(a.field));
    mb = pow10(s - scale_of(b.field));
  }
  auto apply = [&](auto* dst) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t x = a.int_at(i) * ma, y = b.int_at(i) * mb;
      dst->push_back(e.op == Op::kAdd ? x + y : e.op == Op::kSub ? x - y : x * y);
    }
  };
  if (e.out.type == Type::kDate) {
    o.clear();
    out->days.reserve(n);
    apply(&out->days);
  } else {
    apply(&o);
  }
}

}  // namespace sluice::query
