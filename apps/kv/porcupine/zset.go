// The sorted-set operations of the model (apps/kv/zset.h, store_zsets.cc),
// answered as Redis 7.0 answers them:
//
//	zadd         value: scores (as the client wrote them) and members,
//	             alternating (encoded as hash.go's names); expected: the
//	             options as letters (N NX, X XX, G GT, L LT, C CH, I INCR,
//	             which ZINCRBY sends); ok = the set changed, out how many
//	             members were added (with CH: added or rescored), or with
//	             INCR the member's new score ("" if it did nothing)
//	zrem         value: the members; ok = some removed, out how many
//	zscore       value: the members (ZSCORE, ZMSCORE); ok = one of them
//	             found, out each one's score ("" if not a member), encoded
//	zcard        out how many members
//	zcount       expected: a range (below); out how many members it names
//	             (ZCOUNT, ZLEXCOUNT)
//	zrank        expected: the member, value "rev" for ZREVRANK; ok = a
//	             member, out its rank
//	zrange       expected: a range; out its members (and their scores,
//	             alternating), encoded
//	zremrange    expected: a range; ok = some removed, out how many
//	zpop         value "min" or "max", expected the count ("": one); ok =
//	             some popped, out the members and scores, alternating
//	zrandmember  value: the seed the gateway drew; expected: the count (""
//	             for none) and "1" for WITHSCORES, encoded. The store
//	             chooses from the seed, which the model does not follow: it
//	             accepts any choice the set allows (a count >= 0: that many
//	             distinct members in score order, or every member from the
//	             highest score once the count reaches the set's size; < 0:
//	             that many, repeats allowed).
//
// A range (zset.h, ZRange) is 7 strings: by (0 rank, 1 score, 2 lex), "1"
// for REV, min, max, LIMIT's offset and count, "1" for WITHSCORES. A score
// or lex range begins at the first member in it counted from the lowest
// score (REV: the highest) and runs while its members stay in it, LIMIT's
// offset skipping members without looking at them, as Redis's walk of a
// small sorted set does.
//
// Scores are doubles, printed as C's "%.17g" (inf and -inf by name), which
// reads back exactly. A sorted set's state is its members and their scores
// in Redis's order (score, then the member's bytes), encoded, so two
// states compare with ==; its last member removed removes the key. A ZADD
// keeps the key's deadline. Hexadecimal numbers (strtod's "0x...") are
// outside the model: a history with one as a score or a bound is refused
// (exit 2), as are the commands on several keys (zrangestore, zcombine,
// zcombinestore, zmpop) and zscan's pages.
package main

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

const (
	zMalformed = "ERR malformed sorted set command"
	zNaN       = "ERR resulting score is not a number (NaN)"
	// random_members' error for a negative count whose answer is too long.
	zTooLong = "ERR the reply would take more than "
)

func isZsetOp(op string) bool {
	switch op {
	case "zadd", "zrem", "zscore", "zcard", "zcount", "zrank", "zrange", "zremrange", "zpop",
		"zrandmember":
		return true
	}
	return false
}

type zmember struct {
	score float64
	name  string
}

// Redis's order: by score, then by the member's bytes.
func zless(a, b zmember) bool {
	return a.score < b.score || (a.score == b.score && a.name < b.name)
}

// formatScore prints v as the store's format_score does: C's "%.17g"
// (P = 17 significant digits; the exponent form when the exponent X is
// below -4 or at least P, else the fixed form with P - 1 - X decimals;
// trailing zeros dropped), and inf, -inf by name.
func formatScore(v float64) string {
	if math.IsInf(v, 0) {
		if v > 0 {
			return "inf"
		}
		return "-inf"
	}
	e := strconv.FormatFloat(v, 'e', 16, 64)
	k := strings.IndexByte(e, 'e')
	x, _ := strconv.Atoi(e[k+1:])
	if x < -4 || x >= 17 {
		sign := "+"
		if x < 0 {
			sign, x = "-", -x
		}
		return fmt.Sprintf("%se%s%02d", trimZeros(e[:k]), sign, x)
	}
	return trimZeros(strconv.FormatFloat(v, 'f', 16-x, 64))
}

func trimZeros(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// An infinity as strtod reads one (a decimal number: main.go's floatSyntax).
var infiniteNumber = regexp.MustCompile(`^(?i)[+-]?inf(inity)?$`)

const cSpace = " \t\n\v\f\r"

// isHex: whether a score or a bound's text is a hexadecimal number to
// strtod (the model does not read those).
func isHex(text string) bool {
	t := strings.TrimLeft(strings.TrimPrefix(text, "("), cSpace)
	t = strings.TrimLeft(t, "+-")
	return strings.HasPrefix(t, "0x") || strings.HasPrefix(t, "0X")
}

// strtod reads the whole of text as C's strtod would (a decimal number or
// an infinity); overflow gives an infinity and *ranged, an underflow to 0
// of a number that is not 0 *ranged.
func strtod(text string) (v float64, ok, ranged bool) {
	if infiniteNumber.MatchString(text) {
		v, _ = strconv.ParseFloat(text, 64)
		return v, true, false
	}
	if !floatSyntax.MatchString(text) {
		return 0, false, false
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil && !math.IsInf(v, 0) {
		return 0, false, false
	}
	mantissa := strings.FieldsFunc(text, func(r rune) bool { return r == 'e' || r == 'E' })[0]
	return v, true, math.IsInf(v, 0) || (v == 0 && strings.ContainsAny(mantissa, "123456789"))
}

// parseScore: a score as ZADD takes one (zset.h, parse_score): the whole
// text, no leading space, no NaN, no overflow and no underflow to 0.
func parseScore(text string) (float64, bool) {
	v, ok, ranged := strtod(text)
	return v, ok && !ranged
}

// parseScoreBound: a bound of a score range (parse_score_bound): "(" first
// for an exclusive one, the rest up to a NUL as strtod reads it after
// leading space (an empty text is 0; overflow an infinity).
func parseScoreBound(text string) (v float64, exclusive, ok bool) {
	if k := strings.IndexByte(text, 0); k >= 0 {
		text = text[:k]
	}
	exclusive = strings.HasPrefix(text, "(")
	text = strings.TrimPrefix(text, "(")
	if text == "" {
		return 0, exclusive, true
	}
	v, ok, _ = strtod(strings.TrimLeft(text, cSpace))
	return v, exclusive, ok
}

// A bound of a lexicographic range: "-" (infinite -1) below every member,
// "+" (+1) above, "[x" x inclusive, "(x" x exclusive.
type lexBound struct {
	infinite  int
	exclusive bool
	text      string
}

func parseLexBound(text string) (lexBound, bool) {
	switch {
	case text == "-":
		return lexBound{-1, true, ""}, true
	case text == "+":
		return lexBound{1, true, ""}, true
	case text != "" && (text[0] == '(' || text[0] == '['):
		return lexBound{0, text[0] == '(', text[1:]}, true
	}
	return lexBound{}, false
}

type zrange struct {
	by              int64 // 0 rank, 1 score, 2 lex
	rev, withScores bool
	min, max        string
	offset, limit   int64
	minS, maxS      float64 // score bounds
	minEx, maxEx    bool
	lexMin, lexMax  lexBound
}

func decodeZrange(s string) (zrange, bool) {
	f, ok := decodeStrings(s, 1)
	if !ok || len(f) != 7 {
		return zrange{}, false
	}
	q := zrange{rev: f[1] != "", min: f[2], max: f[3], withScores: f[6] != ""}
	var okBy, okOff, okLim bool
	q.by, okBy = parseInteger(f[0])
	q.offset, okOff = parseInteger(f[4])
	q.limit, okLim = parseInteger(f[5])
	return q, okBy && okOff && okLim && q.by >= 0 && q.by <= 2
}

// parseBounds reads a score or lex range's bounds.
func (q *zrange) parseBounds() bool {
	if q.by == 1 {
		var ok1, ok2 bool
		q.minS, q.minEx, ok1 = parseScoreBound(q.min)
		q.maxS, q.maxEx, ok2 = parseScoreBound(q.max)
		return ok1 && ok2
	}
	var ok1, ok2 bool
	q.lexMin, ok1 = parseLexBound(q.min)
	q.lexMax, ok2 = parseLexBound(q.max)
	return ok1 && ok2
}

func (q *zrange) gteMin(e zmember) bool {
	if q.by == 1 {
		if q.minEx {
			return e.score > q.minS
		}
		return e.score >= q.minS
	}
	if q.lexMin.infinite != 0 {
		return q.lexMin.infinite < 0
	}
	if q.lexMin.exclusive {
		return e.name > q.lexMin.text
	}
	return e.name >= q.lexMin.text
}

func (q *zrange) lteMax(e zmember) bool {
	if q.by == 1 {
		if q.maxEx {
			return e.score < q.maxS
		}
		return e.score <= q.maxS
	}
	if q.lexMax.infinite != 0 {
		return q.lexMax.infinite > 0
	}
	if q.lexMax.exclusive {
		return e.name < q.lexMax.text
	}
	return e.name <= q.lexMax.text
}

// mayHold: Redis's zzlIsInRange / zzlIsInLexRange: the range is not empty,
// the highest member at or above its lower bound, the lowest at or below
// its upper one.
func (q *zrange) mayHold(z []zmember) bool {
	if len(z) == 0 {
		return false
	}
	if q.by == 1 {
		if q.minS > q.maxS || (q.minS == q.maxS && (q.minEx || q.maxEx)) {
			return false
		}
	} else {
		cmp := 0
		a, b := q.lexMin, q.lexMax
		switch {
		case a.infinite != 0 && a.infinite == b.infinite:
		case a.infinite < 0 || b.infinite > 0:
			cmp = -1
		case a.infinite > 0 || b.infinite < 0:
			cmp = 1
		default:
			cmp = strings.Compare(a.text, b.text)
		}
		if cmp > 0 || (cmp == 0 && (a.exclusive || b.exclusive)) {
			return false
		}
	}
	return q.gteMin(z[len(z)-1]) && q.lteMax(z[0])
}

// selectRange: the indices (in z, which is in order) of the members q
// names, in the order it answers them; false if q is malformed.
func selectRange(z []zmember, q zrange) ([]int, bool) {
	n := int64(len(z))
	var out []int
	if q.by == 0 {
		start, ok1 := parseInteger(q.min)
		end, ok2 := parseInteger(q.max)
		if !ok1 || !ok2 {
			return nil, false
		}
		start, end, some := listRange(start, end, n) // (Redis's rule for both)
		if !some {
			return out, true
		}
		for r := start; r <= end; r++ {
			if q.rev {
				out = append(out, int(n-1-r))
			} else {
				out = append(out, int(r))
			}
		}
		return out, true
	}
	if !q.parseBounds() {
		return nil, false
	}
	if q.offset < 0 || (q.offset > 0 && q.offset >= n) || !q.mayHold(z) {
		return out, true
	}
	// The first member in range from the lowest score (REV: the highest).
	at := -1
	if q.rev {
		for k := len(z) - 1; k >= 0; k-- {
			if q.lteMax(z[k]) {
				if q.gteMin(z[k]) {
					at = k
				}
				break
			}
		}
	} else {
		for k := range z {
			if q.gteMin(z[k]) {
				if q.lteMax(z[k]) {
					at = k
				}
				break
			}
		}
	}
	if at < 0 {
		return out, true
	}
	step := 1
	if q.rev {
		step = -1
	}
	at += step * int(q.offset)
	for left := q.limit; at >= 0 && at < len(z) && left != 0; left-- {
		if (q.rev && !q.gteMin(z[at])) || (!q.rev && !q.lteMax(z[at])) {
			break
		}
		out = append(out, at)
		at += step
	}
	return out, true
}

// zsetOf reads a state's sorted set (written by withZset: well formed).
func zsetOf(st state) []zmember {
	if st.zset == "" {
		return nil
	}
	f, _ := decodeStrings(st.zset, 1)
	z := make([]zmember, 0, len(f)/2)
	for k := 0; k+1 < len(f); k += 2 {
		v, _ := strconv.ParseFloat(f[k+1], 64)
		z = append(z, zmember{v, f[k]})
	}
	return z
}

func zmap(z []zmember) map[string]float64 {
	m := make(map[string]float64, len(z))
	for _, e := range z {
		m[e.name] = e.score
	}
	return m
}

// withZset is st holding the members m (absent if none), its deadline kept.
func withZset(st state, m map[string]float64) state {
	if len(m) == 0 {
		return state{}
	}
	z := make([]zmember, 0, len(m))
	for name, score := range m {
		z = append(z, zmember{score, name})
	}
	sort.Slice(z, func(a, b int) bool { return zless(z[a], z[b]) })
	all := make([]int, len(z))
	for k := range all {
		all[k] = k
	}
	return state{true, "", st.deadline, "", "", "", encodeNames(zflat(z, all, true))}
}

// zflat: the members of z at idx, with their scores alternating if
// withScores.
func zflat(z []zmember, idx []int, withScores bool) []string {
	out := []string{}
	for _, k := range idx {
		out = append(out, z[k].name)
		if withScores {
			out = append(out, formatScore(z[k].score))
		}
	}
	return out
}

// stepZset: a sorted-set op on a key that is absent or holds a sorted set.
func stepZset(st state, i input, o output) (bool, state) {
	z := zsetOf(st)
	answer := func(ok bool, out string, next state) (bool, state) {
		return o.unknown || (o.ok == ok && o.out == out), next
	}
	switch i.op {
	case "zadd":
		return stepZadd(st, z, i, answer)
	case "zrem":
		names, ok := decodeStrings(i.value, 1)
		if !ok {
			return answer(false, zMalformed, st)
		}
		if !st.present {
			return answer(false, "0", st)
		}
		m := zmap(z)
		removed := 0
		for _, n := range names {
			if _, in := m[n]; in {
				delete(m, n)
				removed++
			}
		}
		return answer(removed > 0, strconv.Itoa(removed), withZset(st, m))
	case "zscore":
		names, ok := decodeStrings(i.value, 1)
		if !ok {
			return answer(false, zMalformed, st)
		}
		m := zmap(z)
		any := false
		for k, n := range names {
			score, in := m[n]
			names[k] = ""
			if in {
				names[k], any = formatScore(score), true
			}
		}
		return answer(any, encodeNames(names), st)
	case "zcard":
		return answer(true, strconv.Itoa(len(z)), st)
	case "zrank":
		for k, e := range z {
			if e.name == i.expected {
				if i.value == "rev" {
					k = len(z) - 1 - k
				}
				return answer(true, strconv.Itoa(k), st)
			}
		}
		return answer(false, "", st)
	case "zcount", "zrange", "zremrange":
		q, ok := decodeZrange(i.expected)
		if !ok {
			return answer(false, zMalformed, st)
		}
		if i.op == "zcount" {
			q.limit, q.offset, q.rev = -1, 0, false
		}
		idx, ok := selectRange(z, q)
		if !ok {
			return answer(false, zMalformed, st)
		}
		switch i.op {
		case "zcount":
			return answer(true, strconv.Itoa(len(idx)), st)
		case "zrange":
			return answer(true, encodeNames(zflat(z, idx, q.withScores)), st)
		}
		m := zmap(z)
		for _, k := range idx {
			delete(m, z[k].name)
		}
		return answer(len(idx) > 0, strconv.Itoa(len(idx)), withZset(st, m))
	case "zpop":
		count := int64(1)
		if i.expected != "" {
			var ok bool
			if count, ok = parseInteger(i.expected); !ok || count < 0 {
				return answer(false, zMalformed, st)
			}
		}
		if !st.present {
			return answer(false, encodeNames(nil), st)
		}
		var idx []int
		for k := int64(0); k < count && k < int64(len(z)); k++ {
			if i.value == "max" {
				idx = append(idx, len(z)-1-int(k))
			} else {
				idx = append(idx, int(k))
			}
		}
		m := zmap(z)
		for _, k := range idx {
			delete(m, z[k].name)
		}
		return answer(len(idx) > 0, encodeNames(zflat(z, idx, true)), withZset(st, m))
	case "zrandmember":
		return stepZrandmember(st, z, i, o, answer)
	}
	return false, st
}

// stepZadd: ZADD and ZINCRBY (zaddGenericCommand after its parsing).
func stepZadd(st state, z []zmember, i input,
	answer func(bool, string, state) (bool, state)) (bool, state) {
	args, ok := decodeStrings(i.value, 1)
	if !ok || len(args) == 0 || len(args)%2 != 0 {
		return answer(false, zMalformed, st)
	}
	has := func(f string) bool { return strings.Contains(i.expected, f) }
	nx, xx, gt, lt, ch, incr := has("N"), has("X"), has("G"), has("L"), has("C"), has("I")
	scores := make([]float64, len(args)/2)
	for j := range scores {
		if scores[j], ok = parseScore(args[2*j]); !ok {
			return answer(false, zMalformed, st)
		}
	}
	if !st.present && xx {
		if incr {
			return answer(false, "", st)
		}
		return answer(false, "0", st)
	}
	m := zmap(z)
	put := func(name string, s float64) {
		if s == 0 {
			s = 0 // (-0 is kept as 0)
		}
		m[name] = s
	}
	added, updated, processed := 0, 0, 0
	score := 0.0
	for j, s := range scores {
		name := args[2*j+1]
		if current, in := m[name]; in {
			if nx {
				continue
			}
			if incr {
				if s += current; math.IsNaN(s) {
					return answer(false, zNaN, withZset(st, m))
				}
			}
			if (lt && s >= current) || (gt && s <= current) {
				continue
			}
			processed++
			score = s
			if s != current {
				put(name, s)
				updated++
			}
		} else if !xx {
			put(name, s)
			added++
			processed++
			score = s
		}
	}
	next, modified := withZset(st, m), added+updated > 0
	if incr {
		if processed == 0 {
			return answer(modified, "", next)
		}
		return answer(modified, formatScore(score), next)
	}
	if ch {
		added += updated
	}
	return answer(modified, strconv.Itoa(added), next)
}

// stepZrandmember: any choice the set allows (see the file comment).
func stepZrandmember(st state, z []zmember, i input, o output,
	answer func(bool, string, state) (bool, state)) (bool, state) {
	how, ok := decodeStrings(i.expected, 1)
	count := int64(1)
	if ok && len(how) == 2 && how[0] != "" {
		count, ok = parseInteger(how[0])
	}
	if !ok || len(how) != 2 {
		return answer(false, zMalformed, st)
	}
	withScores := how[1] != ""
	if !st.present {
		if how[0] == "" {
			return answer(false, "", st)
		}
		return answer(true, encodeNames(nil), st)
	}
	if o.unknown {
		return true, st
	}
	m := zmap(z)
	if how[0] == "" {
		_, in := m[o.out]
		return o.ok && in, st
	}
	if count < 0 && !o.ok {
		return strings.HasPrefix(o.out, zTooLong), st
	}
	if count >= int64(len(z)) { // every member, from the highest score
		idx := make([]int, len(z))
		for k := range idx {
			idx[k] = len(z) - 1 - k
		}
		return answer(true, encodeNames(zflat(z, idx, withScores)), st)
	}
	got, ok := decodeStrings(o.out, 1)
	per := 1
	if withScores {
		per = 2
	}
	want := count
	if want < 0 {
		want = -want
	}
	if !o.ok || !ok || int64(len(got)) != want*int64(per) {
		return false, st
	}
	var chosen []zmember
	for k := 0; k < len(got); k += per {
		score, in := m[got[k]]
		if !in || (withScores && got[k+1] != formatScore(score)) {
			return false, st
		}
		chosen = append(chosen, zmember{score, got[k]})
	}
	if count < 0 {
		return true, st
	}
	for k := 1; k < len(chosen); k++ { // distinct, in score order
		if !zless(chosen[k-1], chosen[k]) {
			return false, st
		}
	}
	return true, st
}

func describeZset(i input, o output) string {
	what := fmt.Sprintf("%q", i.value)
	if names, ok := decodeStrings(i.value, 1); ok && i.value != "" {
		what = fmt.Sprintf("%q", names)
	}
	expected := fmt.Sprintf("%q", i.expected)
	if names, ok := decodeStrings(i.expected, 1); ok && i.expected != "" {
		expected = fmt.Sprintf("%q", names)
	}
	out := fmt.Sprintf("%q", o.out)
	if names, ok := decodeStrings(o.out, 1); ok && o.out != "" {
		out = fmt.Sprintf("%q", names)
	}
	return fmt.Sprintf("%s(%q, %s, %s) -> %v %s", i.op, i.key, expected, what, o.ok, out)
}

// zsetHexNumber: a hexadecimal score or score bound in a sorted-set op's
// value or expected ("" if none): the model does not read those.
func zsetHexNumber(op, value, expected string) string {
	switch op {
	case "zadd":
		if args, ok := decodeStrings(value, 1); ok {
			for j := 0; j+1 < len(args); j += 2 {
				if isHex(args[j]) {
					return args[j]
				}
			}
		}
	case "zcount", "zrange", "zremrange":
		if q, ok := decodeZrange(expected); ok && q.by == 1 {
			for _, b := range []string{q.min, q.max} {
				if isHex(b) {
					return b
				}
			}
		}
	}
	return ""
}
