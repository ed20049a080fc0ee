// The hash operations of the model (apps/kv/store.h, store_hashes.cc):
//
//	hset         value: the fields and values (encoded as below); out the
//	             number of fields added
//	hsetnx       expected: the field, value its value; ok = set
//	hget         expected: the field; ok = present, out its value
//	hmget        value: the fields (encoded); out one result per field
//	hdel         value: the fields (encoded); ok = some removed, out how many
//	hlen         out the number of fields (0: absent)
//	hgetall      out the fields and values in byte order of the field
//	hincrby, hincrbyfloat   expected: the field, value the increment; as
//	             incrby and incrbyfloat on the field's value
//
// The encodings are the store's (apps/kv/wire.h): a u32 count, then each
// string as a u32 length and its bytes (fields and values alternating for
// hset and hgetall; a flags byte, ok | refused << 1, before each value of
// hmget's results), little-endian. A hash's state is its fields as hgetall
// answers them, so two states compare with ==, and a key's last field
// removed removes the key.
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

const wrongTypeText = "WRONGTYPE Operation against a key holding the wrong kind of value"

type wireReader struct {
	b  string
	ok bool
}

func (r *wireReader) u32() uint32 {
	if !r.ok || len(r.b) < 4 {
		r.ok = false
		return 0
	}
	v := binary.LittleEndian.Uint32([]byte(r.b[:4]))
	r.b = r.b[4:]
	return v
}

func (r *wireReader) byte1() byte {
	if !r.ok || len(r.b) < 1 {
		r.ok = false
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *wireReader) str() string {
	n := r.u32()
	if !r.ok || uint64(len(r.b)) < uint64(n) {
		r.ok = false
		return ""
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// decodeStrings reads a count and that many strings (`per` of them an
// item); false unless that is exactly s.
func decodeStrings(s string, per int) ([]string, bool) {
	r := wireReader{s, true}
	n := r.u32()
	if !r.ok || uint64(n)*uint64(4*per) > uint64(len(r.b)) {
		return nil, false
	}
	out := make([]string, 0, int(n)*per)
	for k := 0; k < int(n)*per && r.ok; k++ {
		out = append(out, r.str())
	}
	return out, r.ok && len(r.b) == 0
}

func putString(b *strings.Builder, s string) {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
	b.Write(n[:])
	b.WriteString(s)
}

// encodeFields writes a hash's fields in byte order (as std::map keeps them).
func encodeFields(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	names := make([]string, 0, len(m))
	for f := range m {
		names = append(names, f)
	}
	sort.Strings(names)
	var b strings.Builder
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(names)))
	b.Write(n[:])
	for _, f := range names {
		putString(&b, f)
		putString(&b, m[f])
	}
	return b.String()
}

// fieldsOf reads a state's hash (written by encodeFields: well formed).
func fieldsOf(st state) map[string]string {
	m := map[string]string{}
	pairs, _ := decodeStrings(st.hash, 2)
	for k := 0; k+1 < len(pairs); k += 2 {
		m[pairs[k]] = pairs[k+1]
	}
	return m
}

func isHashOp(op string) bool {
	switch op {
	case "hset", "hsetnx", "hget", "hmget", "hdel", "hlen", "hgetall", "hincrby", "hincrbyfloat":
		return true
	}
	return false
}

// wrongType: whether i, on the present key st, meets the other type.
func wrongType(i input, st state) bool {
	if isHashOp(i.op) {
		return st.hash == ""
	}
	if isListOp(i.op) {
		return st.list == ""
	}
	if isSetOp(i.op) {
		return st.set == ""
	}
	if isZsetOp(i.op) {
		return st.zset == ""
	}
	collection := st.hash != "" || st.list != "" || st.set != "" || st.zset != ""
	switch i.op {
	case "put", "delete", "expire", "ttl", "type", "sweep":
		return false
	case "setxx": // SET XX replaces any type; SET XX GET reads it first
		return collection && i.expected == "get"
	}
	return collection
}

// withFields is st holding m (absent if m is empty), its deadline kept.
func withFields(st state, m map[string]string) state {
	if len(m) == 0 {
		return state{}
	}
	return state{true, "", st.deadline, encodeFields(m), "", "", ""}
}

// stepHash: a hash op on a key that is absent or holds a hash.
func stepHash(st state, i input, o output) (bool, state) {
	m := fieldsOf(st)
	switch i.op {
	case "hset":
		pairs, ok := decodeStrings(i.value, 2)
		if !ok || len(pairs) == 0 {
			return !o.ok || o.unknown, st
		}
		added := 0
		for k := 0; k+1 < len(pairs); k += 2 {
			if _, had := m[pairs[k]]; !had {
				added++
			}
			m[pairs[k]] = pairs[k+1]
		}
		return o.unknown || (o.ok && o.out == strconv.Itoa(added)), withFields(st, m)
	case "hsetnx":
		if _, had := m[i.expected]; had {
			return !o.ok || o.unknown, st
		}
		m[i.expected] = i.value
		return o.ok || o.unknown, withFields(st, m)
	case "hget":
		v, had := m[i.expected]
		return o.unknown || (o.ok == had && o.out == v), st
	case "hmget":
		if o.unknown {
			return true, st
		}
		names, ok := decodeStrings(i.value, 1)
		if !ok || !o.ok {
			// (A reply longer than one may carry is an error, nothing more.)
			return !o.ok && strings.HasPrefix(o.out, "ERR "), st
		}
		r := wireReader{o.out, true}
		if r.u32() != uint32(len(names)) {
			return false, st
		}
		for _, f := range names {
			v, had := m[f]
			flags := r.byte1()
			got := r.str()
			if !r.ok || (flags&1 != 0) != had || got != v {
				return false, st
			}
		}
		return len(r.b) == 0, st
	case "hdel":
		names, ok := decodeStrings(i.value, 1)
		if !ok {
			return !o.ok || o.unknown, st
		}
		removed := 0
		for _, f := range names {
			if _, had := m[f]; had {
				removed++
				delete(m, f)
			}
		}
		return o.unknown || (o.ok == (removed > 0) && o.out == strconv.Itoa(removed)), withFields(st, m)
	case "hlen":
		return o.unknown || (o.ok && o.out == strconv.Itoa(len(m))), st
	case "hgetall":
		want := st.hash
		if want == "" {
			want = "\x00\x00\x00\x00" // (no fields)
		}
		return o.unknown || (o.ok && o.out == want), st
	case "hincrby", "hincrbyfloat":
		v, had := m[i.expected]
		var out string
		if i.op == "hincrby" {
			now, nowOk := int64(0), true
			if had {
				now, nowOk = parseInteger(v)
			}
			by, byOk := parseInteger(i.value)
			sum := now + by
			if !nowOk || !byOk || (by > 0 && sum < now) || (by < 0 && sum > now) {
				return !o.ok || o.unknown, st
			}
			out = strconv.FormatInt(sum, 10)
		} else {
			now, nowOk := 0.0, true
			if had {
				now, nowOk = parseFloat(v)
			}
			by, byOk := parseFloat(i.value)
			sum := now + by
			if !nowOk || !byOk || math.IsInf(sum, 0) || math.IsNaN(sum) {
				return !o.ok || o.unknown, st
			}
			out = formatFloat(sum)
		}
		m[i.expected] = out
		return o.unknown || (o.ok && o.out == out), withFields(st, m)
	}
	return false, st
}

func describeHash(i input, o output) string {
	what := i.value
	if pairs, ok := decodeStrings(i.value, 2); ok && i.op == "hset" {
		what = fmt.Sprintf("%q", pairs)
	} else if names, ok := decodeStrings(i.value, 1); ok && (i.op == "hmget" || i.op == "hdel") {
		what = fmt.Sprintf("%q", names)
	}
	out := o.out
	if pairs, ok := decodeStrings(o.out, 2); ok && i.op == "hgetall" {
		out = fmt.Sprintf("%q", pairs)
	}
	return fmt.Sprintf("%s(%q, field %q, %s) -> %v %q", i.op, i.key, i.expected, what, o.ok, out)
}

// describeItems: a hash's state (kind "hash", per 2: its fields and
// values), a list's ("list", per 1: its elements) or a set's ("set", per
// 1: its members).
func describeItems(kind string, encoded string, per int, deadline int64) string {
	items, _ := decodeStrings(encoded, per)
	if deadline != 0 {
		return fmt.Sprintf("%s %q until %d", kind, items, deadline)
	}
	return fmt.Sprintf("%s %q", kind, items)
}
