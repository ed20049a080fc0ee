// The set operations of the model (apps/kv/store.h, store_sets.cc):
//
//	sadd         value: the members (encoded as hash.go's names); out the
//	             number added
//	srem         value: the members; ok = some removed, out how many
//	scard        out the number of members (0: absent)
//	sismember    expected: the member; ok = a member
//	smismember   value: the members; out one byte per member, '1' a member
//	smembers     out the members in byte order (encoded)
//	spop, srandmember   expected: the count in decimal, or empty for none;
//	             ok = the key exists, out the member, or with a count the
//	             members (encoded: distinct, in byte order; srandmember's
//	             count < 0: that many, repeats allowed)
//	sinter, sunion, sdiff, sintercard   on one key only (value: that key,
//	             encoded; load refuses several): as smembers, or as scard at
//	             most the limit (expected, 0: none)
//
// SPOP and SRANDMEMBER choose: the store picks from a seed the gateway drew
// (value), which the model does not follow. It accepts any choice the set
// allows, and SPOP leaves the set without exactly the members it answered.
// An SPOP of unknown outcome may have removed any of them: that one step
// has several next states, so the model is porcupine's nondeterministic
// kind (model, below), every other step having one. A set's state is its
// members as smembers answers them, so two states compare with ==, and a
// set's last member removed removes the key.
package main

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/anishathalye/porcupine"
)

func isSetOp(op string) bool {
	switch op {
	case "sadd", "srem", "scard", "sismember", "smismember", "smembers", "spop", "srandmember",
		"sinter", "sunion", "sdiff", "sintercard":
		return true
	}
	return false
}

// membersOf reads a state's set (written by withMembers: well formed).
func membersOf(st state) map[string]bool {
	m := map[string]bool{}
	if st.set != "" {
		names, _ := decodeStrings(st.set, 1)
		for _, n := range names {
			m[n] = true
		}
	}
	return m
}

func sortedMembers(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// withMembers is st holding m (absent if m is empty), its deadline kept.
func withMembers(st state, m map[string]bool) state {
	if len(m) == 0 {
		return state{}
	}
	return state{true, "", st.deadline, "", "", encodeNames(sortedMembers(m)), ""}
}

// chosen: whether `out` is what spop or srandmember (i) may answer from the
// members m, and the members it chose.
func chosen(m map[string]bool, i input, out string) ([]string, bool) {
	if i.expected == "" {
		return []string{out}, m[out]
	}
	count, _ := parseInteger(i.expected)
	got, ok := decodeStrings(out, 1)
	if !ok {
		return nil, false
	}
	for _, g := range got {
		if !m[g] {
			return nil, false
		}
	}
	if count < 0 { // srandmember: |count| of them, repeats allowed
		return got, int64(len(got)) == -count
	}
	want := count
	if want > int64(len(m)) {
		want = int64(len(m))
	}
	return got, int64(len(got)) == want && sort.StringsAreSorted(got) && distinct(got)
}

func distinct(sorted []string) bool {
	for k := 1; k < len(sorted); k++ {
		if sorted[k] == sorted[k-1] {
			return false
		}
	}
	return true
}

// stepSet: a set op on a key that is absent or holds a set.
func stepSet(st state, i input, o output) (bool, state) {
	m := membersOf(st)
	switch i.op {
	case "sadd", "srem", "smismember":
		names, ok := decodeStrings(i.value, 1)
		if !ok || (len(names) == 0 && i.op == "sadd") {
			return !o.ok || o.unknown, st
		}
		if i.op == "smismember" {
			flags := make([]byte, len(names))
			for k, n := range names {
				flags[k] = '0'
				if m[n] {
					flags[k] = '1'
				}
			}
			return o.unknown || (o.ok && o.out == string(flags)), st
		}
		changed := 0
		for _, n := range names {
			if m[n] == (i.op == "srem") {
				changed++
			}
			if i.op == "sadd" {
				m[n] = true
			} else {
				delete(m, n)
			}
		}
		okWant := i.op == "sadd" || changed > 0
		return o.unknown || (o.ok == okWant && o.out == strconv.Itoa(changed)), withMembers(st, m)
	case "scard":
		return o.unknown || (o.ok && o.out == strconv.Itoa(len(m))), st
	case "sismember":
		return o.unknown || (o.ok == m[i.expected] && o.out == ""), st
	case "smembers", "sinter", "sunion", "sdiff":
		return o.unknown || (o.ok && o.out == encodeNames(sortedMembers(m))), st
	case "sintercard":
		n, _ := parseInteger(i.expected)
		want := int64(len(m))
		if n > 0 && n < want {
			want = n
		}
		return o.unknown || (o.ok && o.out == strconv.FormatInt(want, 10)), st
	case "spop", "srandmember":
		if o.unknown {
			return true, st // (an unknown spop: model's Step, below)
		}
		if !st.present {
			return !o.ok && o.out == "", st
		}
		got, ok := chosen(m, i, o.out)
		if !o.ok || !ok {
			return false, st
		}
		if i.op == "spop" {
			for _, g := range got {
				delete(m, g)
			}
		}
		return true, withMembers(st, m)
	}
	return false, st
}

// The most next states an SPOP of unknown outcome is given (every choice
// of its members, up to this many; beyond it the first in byte order,
// which a history with such an SPOP may be wrongly refused for).
const maxUnknownPops = 4096

// unknownPop: the states an SPOP of unknown outcome may leave st in.
func unknownPop(st state, i input) []interface{} {
	st = live(st, i.now)
	if !st.present || st.set == "" {
		return []interface{}{st} // (absent, or the other type: nothing changed)
	}
	all := sortedMembers(membersOf(st))
	k := int64(1)
	if i.expected != "" {
		k, _ = parseInteger(i.expected)
	}
	if k > int64(len(all)) {
		k = int64(len(all))
	}
	var next []interface{}
	var pick func(from int, left int64, kept map[string]bool)
	pick = func(from int, left int64, kept map[string]bool) {
		if len(next) >= maxUnknownPops {
			return
		}
		if left == 0 {
			rest := map[string]bool{}
			for n := range kept {
				rest[n] = true
			}
			next = append(next, withMembers(st, rest))
			return
		}
		for j := from; j+int(left) <= len(all); j++ {
			delete(kept, all[j])
			pick(j+1, left-1, kept)
			kept[all[j]] = true
		}
	}
	pick(0, k, membersOf(st))
	return next
}

// model: keyModel, with an SPOP of unknown outcome stepping to every state
// it may have left.
var model = (&porcupine.NondeterministicModel{
	Partition: keyModel.Partition,
	Init:      func() []interface{} { return []interface{}{keyModel.Init()} },
	Step: func(s, in, out interface{}) []interface{} {
		i, o := in.(input), out.(output)
		if i.op == "spop" && o.unknown {
			return unknownPop(s.(state), i)
		}
		if ok, next := keyModel.Step(s, in, out); ok {
			return []interface{}{next}
		}
		return nil
	},
	DescribeOperation: keyModel.DescribeOperation,
	DescribeState:     keyModel.DescribeState,
}).ToModel()

func describeSet(i input, o output) string {
	what := fmt.Sprintf("%q", i.value)
	if names, ok := decodeStrings(i.value, 1); ok && i.op != "spop" && i.op != "srandmember" {
		what = fmt.Sprintf("%q", names)
	}
	out := fmt.Sprintf("%q", o.out)
	if names, ok := decodeStrings(o.out, 1); ok && o.ok && i.op != "scard" && i.op != "sintercard" &&
		i.op != "smismember" && i.op != "srem" && i.op != "sadd" && !(i.expected == "" && (i.op == "spop" || i.op == "srandmember")) {
		out = fmt.Sprintf("%q", names)
	}
	return fmt.Sprintf("%s(%q, %q, %s) -> %v %s", i.op, i.key, i.expected, what, o.ok, out)
}
