// kv-porcupine checks a history of sluice-kv operations for linearizability
// with porcupine (github.com/anishathalye/porcupine), a checker we did not
// write. The history is what `sluice-kv run --history FILE` writes: one JSON
// object per completed operation,
//
//	{"client":3,"op":"cas","key":"k7","value":"new","expected":"old",
//	 "ok":true,"out":"","call":1200,"return":1203}
//
// with op one of put, get, delete, cas, incrby, incrbyfloat, append,
// setrange (expected: the offset), setnx, getset, getdel, setxx
// (expected "get": SET XX GET), expire, ttl, getex, sweep, type, and the
// hash ops (hash.go), the list ops (list.go), the set ops (set.go) and the
// sorted-set ops (zset.go); ok
// and out what the store
// answered (get: ok = the key exists, out its value; delete: ok = the key
// existed; cas: ok = swapped; incrby: ok = added, out the new number;
// append: out the new length; setnx: ok = set, else out the value kept;
// getset, getdel and setxx: ok = the key existed, out its old value;
// expire: ok = the deadline was set or, without "ttl", cleared; ttl: ok =
// the key exists, out its deadline or "-1"; getex: as get; see
// apps/kv/store.h); call and return the invocation and completion times
// (any unit, one clock for all clients). The model is a map from key to
// value (a string, a hash's fields, a list's elements, a set's members or a
// sorted set's members and scores)
// and deadline, checked key by key
// (porcupine's partitions). An op on a key of the other type must answer
// not ok with Redis's WRONGTYPE error as out, and changes nothing.
//
// Expiry. An operation carries the wall-clock stamp it was made with
// ("now", ms) and what it does with its key's deadline ("ttl": "set" with
// a "deadline", "keep", or absent: a write clears it; "if": EXPIRE's NX 1,
// XX 2, GT 4, LT 8). As in the store, a key whose deadline is at or before
// an operation's stamp is absent for that operation and removed by it, so a
// read of a key past its deadline that still sees the value is rejected,
// and so is a TTL answer that is not the deadline the key holds. A sweep
// ("op":"sweep", "keys": the keys it removed) becomes one operation per key,
// which must find that key present with a deadline at or before its stamp.
//
// An operation whose client gave up on it (a deadline passed) has
// "unknown":true, a call and no ok, out or return: it may have taken
// effect at any time after its call, or never. It is given a return after
// every other operation's and an output the model accepts whatever the
// state (Knossos's and porcupine's usual treatment of an indefinite
// operation: taking effect after everything else is the same as never).
//
// A write the store refused (its maxmemory was reached, Redis's OOM
// error) has "refused":true: it took no effect, and the model lets it
// leave any state as it was (the limit is over the whole store, which a
// check key by key cannot see).
//
// The commands on several keys (multi: EXEC, MSET, MSETNX; rename,
// renamenx, flushall; and those of lists, sets and sorted sets), the reads of the whole keyspace (dbsize, keys,
// scan) and watch are refused as bad input (exit 2): the model is checked
// key by key, and such a command is not an operation on one key. Their
// tests run in jobs that keep no history.
//
// Several files (a job with several RESP gateways writes one per gateway
// rank) are checked as one history: their times come from one host clock.
//
// Usage: kv-porcupine [-timeout 60s] [-html FILE] HISTORY...
// Exit status: 0 linearizable, 1 not linearizable, 2 bad input or usage,
// 3 no verdict within the timeout.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type record struct {
	Client   *int     `json:"client"`
	Op       string   `json:"op"`
	Key      *string  `json:"key"`
	Value    string   `json:"value"`
	Expected string   `json:"expected"`
	Ok       *bool    `json:"ok"`
	Out      string   `json:"out"`
	Call     *int64   `json:"call"`
	Return   *int64   `json:"return"`
	Unknown  bool     `json:"unknown"`
	Refused  bool     `json:"refused"`
	Now      int64    `json:"now"`
	TTL      string   `json:"ttl"`
	Deadline int64    `json:"deadline"`
	If       int      `json:"if"`
	Keys     []string `json:"keys"`
}

// latin1 turns a history string back into the bytes it stands for: the
// history writes each byte as one code point (apps/kv/history.h).
func latin1(s string) (string, error) {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xff {
			return "", fmt.Errorf("the string %q holds U+%04X, which stands for no byte", s, r)
		}
		b = append(b, byte(r))
	}
	return string(b), nil
}

// toBytes turns every string of r back into its bytes.
func (r *record) toBytes() error {
	var err error
	conv := func(s *string) {
		if err == nil && s != nil {
			*s, err = latin1(*s)
		}
	}
	conv(r.Key)
	conv(&r.Value)
	conv(&r.Expected)
	conv(&r.Out)
	for i := range r.Keys {
		conv(&r.Keys[i])
	}
	return err
}

type input struct {
	op, key, value, expected string
	now, deadline            int64  // the stamp; "ttl":"set"'s deadline
	ttl                      string // "", "keep" or "set"
	cond                     int    // expire's conditions ("if")
}

type output struct {
	ok      bool
	out     string
	unknown bool // the client never learnt the outcome
	refused bool // the store refused it (maxmemory): no effect
}

// parseInteger reads a decimal integer as the store takes one (Redis's
// rule): as FormatInt would print it, within 64 bits.
func parseInteger(s string) (int64, bool) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != s {
		return 0, false
	}
	return v, true
}

// The store's decimal numbers for incrbyfloat (apps/kv/store.h,
// parse_float): [+-]digits[.digits][e[+-]digits], finite, as a double; and
// printed as format_float does, the fewest digits that read back, without
// an exponent.
var floatSyntax = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

func parseFloat(s string) (float64, bool) {
	if !floatSyntax.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	if v == 0 {
		v = 0 // (no "-0")
	}
	return v, true
}

func formatFloat(v float64) string {
	if v == 0 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// The state of one key: absent, or present with a value and a deadline
// (0: none); a hash holds its fields in `hash` (hash.go: as the store's
// HGETALL answers them, so that states compare with ==) and no value; a
// list its elements in `list` (list.go: as LRANGE 0 -1 answers them); a
// set its members in `set` (set.go: as SMEMBERS answers them); a sorted set
// its members and scores in `zset` (zset.go: in Redis's order).
type state struct {
	present  bool
	value    string
	deadline int64
	hash     string
	list     string
	set      string
	zset     string
}

// The key as an operation stamped `now` finds it: absent once its deadline
// has come (the store removes it then).
func live(st state, now int64) state {
	if st.present && st.deadline != 0 && st.deadline <= now {
		return state{}
	}
	return st
}

// A write's effect on the deadline of what it wrote (st, which holds the
// deadline the key had): cleared, kept, or set (a deadline already passed
// removes the key).
func settle(st state, i input) state {
	switch i.ttl {
	case "keep":
		return st
	case "set":
		if i.deadline <= i.now || i.deadline <= 0 {
			return state{}
		}
		st.deadline = i.deadline
		return st
	}
	st.deadline = 0
	return st
}

// Whether EXPIRE's conditions let it set `when` on a key whose deadline is
// `current` (0: none, later than any).
func expireAllowed(cond int, current, when int64) bool {
	switch {
	case cond&1 != 0 && current != 0:
		return false
	case cond&2 != 0 && current == 0:
		return false
	case cond&4 != 0 && (current == 0 || when <= current):
		return false
	case cond&8 != 0 && current != 0 && when >= current:
		return false
	}
	return true
}

// The model of one key whose every step is determined by the operation's
// output; model (set.go) adds the one step that is not, an SPOP of unknown
// outcome.
var keyModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, o := range history {
			k := o.Input.(input).key
			byKey[k] = append(byKey[k], o)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return state{} },
	Step: func(s, in, out interface{}) (bool, interface{}) {
		st, i, o := s.(state), in.(input), out.(output)
		if o.refused {
			return !o.ok, st
		}
		if i.op == "sweep" {
			// It removed this key, which must have been due at its stamp.
			return o.unknown || (st.present && st.deadline != 0 && st.deadline <= i.now), state{}
		}
		st = live(st, i.now)
		if st.present && wrongType(i, st) {
			return o.unknown || (!o.ok && o.out == wrongTypeText), st
		}
		if isHashOp(i.op) {
			return stepHash(st, i, o)
		}
		if isListOp(i.op) {
			return stepList(st, i, o)
		}
		if isSetOp(i.op) {
			return stepSet(st, i, o)
		}
		if isZsetOp(i.op) {
			return stepZset(st, i, o)
		}
		switch i.op {
		case "put":
			return o.ok || o.unknown, settle(state{true, i.value, st.deadline, "", "", "", ""}, i)
		case "get":
			if o.unknown {
				return true, st
			}
			if o.ok {
				return st.present && st.value == o.out, st
			}
			return !st.present, st
		case "delete":
			return o.unknown || o.ok == st.present, state{}
		case "cas":
			if st.present && st.value == i.expected {
				return o.ok || o.unknown, state{true, i.value, 0, "", "", "", ""}
			}
			return !o.ok || o.unknown, st
		case "incrby":
			now, nowOk := int64(0), true
			if st.present {
				now, nowOk = parseInteger(st.value)
			}
			by, byOk := parseInteger(i.value)
			sum := now + by
			if !nowOk || !byOk || (by > 0 && sum < now) || (by < 0 && sum > now) {
				return !o.ok || o.unknown, st // an error: nothing changed
			}
			out := strconv.FormatInt(sum, 10)
			return o.unknown || (o.ok && o.out == out), state{true, out, st.deadline, "", "", "", ""}
		case "incrbyfloat":
			now, nowOk := 0.0, true
			if st.present {
				now, nowOk = parseFloat(st.value)
			}
			by, byOk := parseFloat(i.value)
			sum := now + by
			if !nowOk || !byOk || math.IsInf(sum, 0) || math.IsNaN(sum) {
				return !o.ok || o.unknown, st // an error: nothing changed
			}
			out := formatFloat(sum)
			return o.unknown || (o.ok && o.out == out), state{true, out, st.deadline, "", "", "", ""}
		case "setrange":
			offset, ok := parseInteger(i.expected)
			if !ok || offset < 0 {
				return !o.ok || o.unknown, st
			}
			if i.value == "" { // nothing written, no key made
				return o.unknown || (o.ok && o.out == strconv.Itoa(len(st.value))), st
			}
			v := st.value
			if end := int(offset) + len(i.value); len(v) < end {
				v += strings.Repeat("\x00", end-len(v))
			}
			v = v[:offset] + i.value + v[int(offset)+len(i.value):]
			return o.unknown || (o.ok && o.out == strconv.Itoa(len(v))), state{true, v, st.deadline, "", "", "", ""}
		case "append":
			v := st.value + i.value
			return o.unknown || (o.ok && o.out == strconv.Itoa(len(v))), state{true, v, st.deadline, "", "", "", ""}
		case "type":
			want := "string"
			if st.hash != "" {
				want = "hash"
			}
			if st.list != "" {
				want = "list"
			}
			if st.set != "" {
				want = "set"
			}
			if st.zset != "" {
				want = "zset"
			}
			return o.unknown || (o.ok == st.present && (!st.present || o.out == want)), st
		case "setnx":
			if st.present {
				return o.unknown || (!o.ok && o.out == st.value), st
			}
			return o.ok || o.unknown, settle(state{true, i.value, 0, "", "", "", ""}, i)
		case "getset", "getdel", "setxx":
			saw := o.unknown || (o.ok == st.present && (!st.present || o.out == st.value))
			switch {
			case i.op == "getdel":
				return saw, state{}
			case i.op == "setxx" && !st.present:
				return saw, st
			}
			return saw, settle(state{true, i.value, st.deadline, "", "", "", ""}, i)
		case "expire":
			if !st.present {
				return !o.ok || o.unknown, st
			}
			if i.ttl != "set" { // PERSIST
				had := st.deadline != 0
				st.deadline = 0
				return o.unknown || o.ok == had, st
			}
			if !expireAllowed(i.cond, st.deadline, i.deadline) {
				return !o.ok || o.unknown, st
			}
			return o.ok || o.unknown, settle(st, i)
		case "ttl":
			if o.unknown {
				return true, st
			}
			if !st.present {
				return !o.ok, st
			}
			want := "-1"
			if st.deadline != 0 {
				want = strconv.FormatInt(st.deadline, 10)
			}
			return o.ok && o.out == want, st
		case "getex":
			if !st.present {
				return !o.ok || o.unknown, st
			}
			return o.unknown || (o.ok && o.out == st.value), settle(st, i)
		}
		return false, st
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(input), out.(output)
		if o.unknown {
			return fmt.Sprintf("%s(%q, %q) -> unknown", i.op, i.key, i.value)
		}
		if o.refused {
			return fmt.Sprintf("%s(%q, %q) -> refused (OOM)", i.op, i.key, i.value)
		}
		switch i.op {
		case "put":
			return fmt.Sprintf("put(%q, %q)", i.key, i.value)
		case "get":
			if !o.ok {
				return fmt.Sprintf("get(%q) -> absent", i.key)
			}
			return fmt.Sprintf("get(%q) -> %q", i.key, o.out)
		case "delete":
			return fmt.Sprintf("delete(%q) -> %v", i.key, o.ok)
		case "incrby", "incrbyfloat", "append", "setnx", "getset", "getdel", "setxx":
			return fmt.Sprintf("%s(%q, %q) -> %v %q", i.op, i.key, i.value, o.ok, o.out)
		case "setrange":
			return fmt.Sprintf("setrange(%q, %s, %q) -> %v %q", i.key, i.expected, i.value, o.ok, o.out)
		case "expire", "getex":
			return fmt.Sprintf("%s(%q, ttl %q deadline %d if %d) at %d -> %v %q", i.op, i.key, i.ttl, i.deadline, i.cond, i.now, o.ok, o.out)
		case "ttl":
			return fmt.Sprintf("ttl(%q) at %d -> %v %q", i.key, i.now, o.ok, o.out)
		case "sweep":
			return fmt.Sprintf("sweep at %d removed %q", i.now, i.key)
		case "type":
			return fmt.Sprintf("type(%q) -> %v %q", i.key, o.ok, o.out)
		case "cas":
			return fmt.Sprintf("cas(%q, %q -> %q) -> %v", i.key, i.expected, i.value, o.ok)
		default:
			if isHashOp(i.op) {
				return describeHash(i, o)
			}
			if isListOp(i.op) {
				return describeList(i, o)
			}
			if isSetOp(i.op) {
				return describeSet(i, o)
			}
			if isZsetOp(i.op) {
				return describeZset(i, o)
			}
			return fmt.Sprintf("cas(%q, %q -> %q) -> %v", i.key, i.expected, i.value, o.ok)
		}
	},
	DescribeState: func(s interface{}) string {
		st := s.(state)
		if !st.present {
			return "absent"
		}
		if st.hash != "" {
			return describeItems("hash", st.hash, 2, st.deadline)
		}
		if st.list != "" {
			return describeItems("list", st.list, 1, st.deadline)
		}
		if st.set != "" {
			return describeItems("set", st.set, 1, st.deadline)
		}
		if st.zset != "" {
			return describeItems("sorted set", st.zset, 1, st.deadline)
		}
		if st.deadline != 0 {
			return fmt.Sprintf("%q until %d", st.value, st.deadline)
		}
		return fmt.Sprintf("%q", st.value)
	},
}

func load(path string) ([]porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ops []porcupine.Operation
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		if err := r.toBytes(); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		missing := ""
		switch {
		case r.Client == nil:
			missing = "client"
		case r.Key == nil:
			missing = "key"
		case r.Ok == nil && !r.Unknown:
			missing = "ok"
		case r.Call == nil:
			missing = "call"
		case r.Return == nil && !r.Unknown:
			missing = "return"
		}
		if missing != "" {
			return nil, fmt.Errorf("%s:%d: no %q field", path, line, missing)
		}
		switch r.Op {
		case "put", "get", "delete", "cas", "incrby", "append", "setnx", "getset", "getdel", "setxx",
			"expire", "ttl", "getex", "sweep", "incrbyfloat", "setrange", "type", "hset", "hsetnx",
			"hget", "hmget", "hdel", "hlen", "hgetall", "hincrby", "hincrbyfloat", "lpush", "rpush",
			"lpushx", "rpushx", "lpop", "rpop", "llen", "lrange", "lindex", "lset", "lrem", "ltrim",
			"linsert", "lpos", "sadd", "srem", "scard", "sismember", "smismember", "smembers", "spop", "srandmember",
			"zadd", "zrem", "zscore", "zcard", "zcount", "zrank", "zrange", "zremrange", "zpop", "zrandmember":
			if hex := zsetHexNumber(r.Op, r.Value, r.Expected); hex != "" {
				return nil, fmt.Errorf("%s:%d: op %q holds the hexadecimal number %q: the model reads decimal scores and bounds only (docs/kv.md, Sorted sets)", path, line, r.Op, hex)
			}
		case "sinter", "sunion", "sdiff", "sintercard":
			// On one key (the history's key), a read of it; on several,
			// refused as the commands below.
			if keys, ok := decodeStrings(r.Value, 1); !ok || len(keys) != 1 || keys[0] != *r.Key {
				return nil, fmt.Errorf("%s:%d: op %q names several keys: the key-by-key model cannot check it; a checked history must not hold it (docs/kv.md, Sets)", path, line, r.Op)
			}
		case "hscan", "sscan", "zscan":
			// A page in the store's hash order: refused as scan is.
			return nil, fmt.Errorf("%s:%d: op %q pages through a key in the store's hash order: the model does not check cursor reads; a checked history must not hold it (docs/kv.md, Hashes)", path, line, r.Op)
		case "multi", "rename", "renamenx", "flushall", "watch", "dbsize", "keys", "scan", "smove",
			"lmove", "lmpop", "sinterstore", "sunionstore", "sdiffstore", "zrangestore", "zcombine",
			"zcombinestore", "zmpop":
			// Refused, not skipped: leaving them out would check a history
			// that is not the one the store ran.
			return nil, fmt.Errorf("%s:%d: op %q acts on several keys or the whole keyspace (or, watch, reads the store's version): the key-by-key model cannot check it; a checked history must not hold it (docs/kv.md, Transactions)", path, line, r.Op)
		default:
			return nil, fmt.Errorf("%s:%d: op %q is not put, get, delete, cas, incrby, incrbyfloat, append, setrange, setnx, getset, getdel, setxx, expire, ttl, getex, sweep, type, a hash op (hset, hsetnx, hget, hmget, hdel, hlen, hgetall, hincrby, hincrbyfloat), a list op (lpush, rpush, lpushx, rpushx, lpop, rpop, llen, lrange, lindex, lset, lrem, ltrim, linsert, lpos), a set op (sadd, srem, scard, sismember, smismember, smembers, spop, srandmember, sinter, sunion, sdiff, sintercard) or a sorted-set op (zadd, zrem, zscore, zcard, zcount, zrank, zrange, zremrange, zpop, zrandmember)", path, line, r.Op)
		}
		switch r.Op {
		case "get", "delete", "getdel", "expire", "ttl", "getex", "sweep", "type", "hget", "hmget",
			"hdel", "hlen", "hgetall", "lpop", "rpop", "llen", "lrange", "lindex", "lrem", "ltrim",
			"lpos", "srem", "scard", "sismember", "smismember", "smembers", "spop", "srandmember", "sinter",
			"sunion", "sdiff", "sintercard", "zscore", "zcard", "zcount", "zrank", "zrange", "zrandmember":
			if r.Refused {
				return nil, fmt.Errorf("%s:%d: a %s cannot be refused (only writes are)", path, line, r.Op)
			}
		}
		switch r.TTL {
		case "", "keep", "set":
		default:
			return nil, fmt.Errorf("%s:%d: ttl %q is not keep or set", path, line, r.TTL)
		}
		in := input{op: r.Op, key: *r.Key, value: r.Value, expected: r.Expected, now: r.Now,
			deadline: r.Deadline, ttl: r.TTL, cond: r.If}
		if r.Op == "sweep" {
			// One operation per key it removed (none: nothing to check).
			if r.Unknown || r.Return == nil || *r.Return < *r.Call {
				return nil, fmt.Errorf("%s:%d: a sweep needs a return after its call", path, line)
			}
			for _, k := range r.Keys {
				in.key = k
				ops = append(ops, porcupine.Operation{ClientId: *r.Client, Input: in, Call: *r.Call,
					Output: output{ok: *r.Ok}, Return: *r.Return})
			}
			continue
		}
		if r.Unknown {
			ops = append(ops, porcupine.Operation{
				ClientId: *r.Client,
				Input:    in,
				Call:     *r.Call,
				Output:   output{unknown: true},
				Return:   -1, // after everything, below
			})
			continue
		}
		if *r.Return < *r.Call {
			return nil, fmt.Errorf("%s:%d: returns (%d) before it is called (%d)", path, line, *r.Return, *r.Call)
		}
		ops = append(ops, porcupine.Operation{
			ClientId: *r.Client,
			Input:    in,
			Call:     *r.Call,
			Output:   output{ok: *r.Ok, out: r.Out, refused: r.Refused},
			Return:   *r.Return,
		})
	}
	// Unknown outcomes return after every time in the history.
	var last int64
	for _, o := range ops {
		if o.Call > last {
			last = o.Call
		}
		if o.Return > last {
			last = o.Return
		}
	}
	for k := range ops {
		if ops[k].Output.(output).unknown {
			ops[k].Return = last + 1
		}
	}
	return ops, sc.Err()
}

// loadAll reads every file as one history; client ids must not repeat
// across files (each gateway rank's clients have ids of their own).
func loadAll(paths []string) ([]porcupine.Operation, error) {
	var all []porcupine.Operation
	for _, p := range paths {
		ops, err := load(p)
		if err != nil {
			return nil, err
		}
		all = append(all, ops...)
	}
	// Unknown outcomes return after every time in the whole history.
	var last int64
	for _, o := range all {
		if !o.Output.(output).unknown {
			if o.Call > last {
				last = o.Call
			}
			if o.Return > last {
				last = o.Return
			}
		} else if o.Call > last {
			last = o.Call
		}
	}
	for k := range all {
		if all[k].Output.(output).unknown {
			all[k].Return = last + 1
		}
	}
	return all, nil
}

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "give up (exit 3) after this long")
	html := flag.String("html", "", "write porcupine's visualization of the history to this file")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: kv-porcupine [-timeout 60s] [-html FILE] HISTORY...\n"+
			"Checks a sluice-kv history (sluice-kv run --history FILE; several files are one history) for linearizability with porcupine.\n"+
			"Exit status: 0 linearizable, 1 not linearizable, 2 bad input, 3 no verdict in time.\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	ops, err := loadAll(flag.Args())
	if err != nil {
		fmt.Fprintf(os.Stderr, "kv-porcupine: %v\n", err)
		os.Exit(2)
	}
	keys := map[string]bool{}
	for _, o := range ops {
		keys[o.Input.(input).key] = true
	}
	result, info := porcupine.CheckOperationsVerbose(model, ops, *timeout)
	if *html != "" {
		if err := porcupine.VisualizePath(model, info, *html); err != nil {
			fmt.Fprintf(os.Stderr, "kv-porcupine: writing %s: %v\n", *html, err)
		}
	}
	switch result {
	case porcupine.Ok:
		unknown := 0
		for _, o := range ops {
			if o.Output.(output).unknown {
				unknown++
			}
		}
		fmt.Printf("kv-porcupine: linearizable (%d operations on %d keys, %d of unknown outcome)\n", len(ops), len(keys), unknown)
	case porcupine.Illegal:
		fmt.Printf("kv-porcupine: NOT linearizable (%d operations on %d keys)\n", len(ops), len(keys))
		os.Exit(1)
	default:
		fmt.Printf("kv-porcupine: no verdict within %v (%d operations on %d keys)\n", *timeout, len(ops), len(keys))
		os.Exit(3)
	}
}
