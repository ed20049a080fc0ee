// The list operations of the model (apps/kv/store.h, store_lists.cc):
//
//	lpush, rpush, lpushx, rpushx   value: the elements (encoded as hash.go's
//	             names); out the new length (the x forms on an absent key:
//	             not ok, "0", nothing made)
//	lpop, rpop   expected: the count in decimal, or empty for none; ok = the
//	             key exists, out the element, or with a count the elements
//	             (encoded)
//	llen         out the length (0: absent)
//	lrange       expected: the start, value the stop; out the elements (encoded)
//	lindex       expected: the index; ok = in the list, out its element
//	lset         expected: the index, value the element; ok, or not ok with
//	             "ERR no such key" or "ERR index out of range"
//	lrem         expected: the count, value the element; ok = some removed,
//	             out how many
//	ltrim        expected: the start, value the stop; ok = some removed
//	linsert      expected: "before" or "after", value the pivot and the
//	             element (encoded); ok, out the new length; not ok with "-1"
//	             (no pivot) or "0" (absent)
//	lpos         value: the element, expected the rank, the count ("" for
//	             none) and the maxlen (encoded); without a count ok = found,
//	             out the index; with one ok, out the indices (encoded decimals)
//
// Indices are Redis's (negative from the tail). A list's state is its
// elements as lrange 0 -1 answers them, so two states compare with ==, and
// a list's last element removed removes the key.
package main

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

func isListOp(op string) bool {
	switch op {
	case "lpush", "rpush", "lpushx", "rpushx", "lpop", "rpop", "llen", "lrange", "lindex", "lset",
		"lrem", "ltrim", "linsert", "lpos":
		return true
	}
	return false
}

// encodeNames writes strings as the store's encode_names does.
func encodeNames(names []string) string {
	var b strings.Builder
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(names)))
	b.Write(n[:])
	for _, s := range names {
		putString(&b, s)
	}
	return b.String()
}

// elementsOf reads a state's list (written by withElements: well formed).
func elementsOf(st state) []string {
	if st.list == "" {
		return nil
	}
	out, _ := decodeStrings(st.list, 1)
	return out
}

// withElements is st holding l (absent if l is empty), its deadline kept.
func withElements(st state, l []string) state {
	if len(l) == 0 {
		return state{}
	}
	return state{true, "", st.deadline, "", encodeNames(l), "", ""}
}

// listRange is Redis's [first, last] of start and stop in a list of n
// elements; false if empty.
func listRange(start, stop int64, n int64) (int64, int64, bool) {
	if start < 0 {
		start += n
	}
	if stop < 0 {
		stop += n
	}
	if start < 0 {
		start = 0
	}
	if start > stop || start >= n {
		return 0, 0, false
	}
	if stop >= n {
		stop = n - 1
	}
	return start, stop, true
}

// stepList: a list op on a key that is absent or holds a list.
func stepList(st state, i input, o output) (bool, state) {
	l := elementsOf(st)
	n := int64(len(l))
	number := func(s string) int64 {
		v, _ := parseInteger(s)
		return v
	}
	switch i.op {
	case "lpush", "rpush", "lpushx", "rpushx":
		values, ok := decodeStrings(i.value, 1)
		if !ok || len(values) == 0 {
			return !o.ok || o.unknown, st
		}
		if !st.present && (i.op == "lpushx" || i.op == "rpushx") {
			return o.unknown || (!o.ok && o.out == "0"), st
		}
		next := make([]string, 0, len(l)+len(values))
		if i.op == "lpush" || i.op == "lpushx" {
			for k := len(values) - 1; k >= 0; k-- {
				next = append(next, values[k])
			}
			next = append(next, l...)
		} else {
			next = append(append(next, l...), values...)
		}
		return o.unknown || (o.ok && o.out == strconv.Itoa(len(next))), withElements(st, next)
	case "lpop", "rpop":
		if !st.present {
			return o.unknown || (!o.ok && o.out == ""), st
		}
		count := int64(1)
		if i.expected != "" {
			count = number(i.expected)
		}
		if count > n {
			count = n
		}
		var popped []string
		var rest []string
		if i.op == "lpop" {
			popped, rest = l[:count], l[count:]
		} else {
			popped = make([]string, 0, count)
			for k := n - 1; k >= n-count; k-- {
				popped = append(popped, l[k])
			}
			rest = l[:n-count]
		}
		want := ""
		if i.expected == "" {
			want = popped[0]
		} else {
			want = encodeNames(popped)
		}
		return o.unknown || (o.ok && o.out == want), withElements(st, rest)
	case "llen":
		return o.unknown || (o.ok && o.out == strconv.FormatInt(n, 10)), st
	case "lrange":
		var got []string
		if first, last, ok := listRange(number(i.expected), number(i.value), n); ok {
			got = l[first : last+1]
		}
		return o.unknown || (o.ok && o.out == encodeNames(got)), st
	case "lindex", "lset":
		k := number(i.expected)
		if k < 0 {
			k += n
		}
		if i.op == "lindex" {
			if k < 0 || k >= n {
				return o.unknown || (!o.ok && o.out == ""), st
			}
			return o.unknown || (o.ok && o.out == l[k]), st
		}
		switch {
		case !st.present:
			return o.unknown || (!o.ok && o.out == "ERR no such key"), st
		case k < 0 || k >= n:
			return o.unknown || (!o.ok && o.out == "ERR index out of range"), st
		}
		next := append([]string(nil), l...)
		next[k] = i.value
		return o.unknown || o.ok, withElements(st, next)
	case "lrem":
		want := number(i.expected)
		var kept []string
		removed := 0
		if want >= 0 {
			for _, v := range l {
				if v == i.value && (want == 0 || int64(removed) < want) {
					removed++
				} else {
					kept = append(kept, v)
				}
			}
		} else {
			kept = make([]string, len(l))
			at := len(l)
			for k := len(l) - 1; k >= 0; k-- {
				if l[k] == i.value && int64(removed) < -want {
					removed++
				} else {
					at--
					kept[at] = l[k]
				}
			}
			kept = kept[at:]
		}
		return o.unknown || (o.ok == (removed > 0) && o.out == strconv.Itoa(removed)),
			withElements(st, kept)
	case "linsert":
		pe, ok := decodeStrings(i.value, 1)
		if !ok || len(pe) != 2 {
			return !o.ok || o.unknown, st
		}
		if !st.present {
			return o.unknown || (!o.ok && o.out == "0"), st
		}
		at := -1
		for k, v := range l {
			if v == pe[0] {
				at = k
				break
			}
		}
		if at < 0 {
			return o.unknown || (!o.ok && o.out == "-1"), st
		}
		if i.expected == "after" {
			at++
		}
		next := append(append(append([]string(nil), l[:at]...), pe[1]), l[at:]...)
		return o.unknown || (o.ok && o.out == strconv.Itoa(len(next))), withElements(st, next)
	case "lpos":
		opts, ok := decodeStrings(i.expected, 1)
		if !ok || len(opts) != 3 {
			return !o.ok || o.unknown, st
		}
		rank, maxlen := number(opts[0]), number(opts[2])
		count := int64(1)
		if opts[1] != "" {
			count = number(opts[1])
		}
		var found []string
		skip := rank - 1
		if rank < 0 {
			skip = -rank - 1
		}
		for looked := int64(0); rank != 0 && looked < n && (maxlen == 0 || looked < maxlen); looked++ {
			k := looked
			if rank < 0 {
				k = n - 1 - looked
			}
			if l[k] != i.value {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			found = append(found, strconv.FormatInt(k, 10))
			if count != 0 && int64(len(found)) == count {
				break
			}
		}
		if opts[1] != "" {
			return o.unknown || (o.ok && o.out == encodeNames(found)), st
		}
		if len(found) == 0 {
			return o.unknown || (!o.ok && o.out == ""), st
		}
		return o.unknown || (o.ok && o.out == found[0]), st
	case "ltrim":
		if !st.present {
			return o.unknown || !o.ok, st
		}
		first, last, ok := listRange(number(i.expected), number(i.value), n)
		if !ok {
			return o.unknown || o.ok, state{}
		}
		changed := first > 0 || last < n-1
		return o.unknown || o.ok == changed, withElements(st, l[first:last+1])
	}
	return false, st
}

func describeList(i input, o output) string {
	what := fmt.Sprintf("%q", i.value)
	if values, ok := decodeStrings(i.value, 1); ok && strings.Contains(i.op, "push") {
		what = fmt.Sprintf("%q", values)
	}
	out := fmt.Sprintf("%q", o.out)
	if values, ok := decodeStrings(o.out, 1); ok && (i.op == "lrange" ||
		((i.op == "lpop" || i.op == "rpop") && i.expected != "")) {
		out = fmt.Sprintf("%q", values)
	}
	return fmt.Sprintf("%s(%q, %q, %s) -> %v %s", i.op, i.key, i.expected, what, o.ok, out)
}
