// kv-porcupine checks a history of sluice-kv operations for linearizability
// with porcupine (github.com/anishathalye/porcupine), a checker we did not
// write. The history is what `sluice-kv run --history FILE` writes: one JSON
// object per completed operation,
//
//	{"client":3,"op":"cas","key":"k7","value":"new","expected":"old",
//	 "ok":true,"out":"","call":1200,"return":1203}
//
// with op one of put, get, delete, cas, incrby, append, setnx, getset,
// getdel, setxx; ok and out what the store answered (get: ok = the key
// exists, out its value; delete: ok = the key existed; cas: ok = swapped;
// incrby: ok = added, out the new number; append: out the new length; setnx:
// ok = set, else out the value kept; getset, getdel and setxx: ok = the key
// existed, out its old value; see
// apps/kv/store.h); call and return the invocation and completion times
// (any unit, one clock for all clients). The model is a map from key to
// value, checked key by key (porcupine's partitions).
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
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
)

type record struct {
	Client   *int    `json:"client"`
	Op       string  `json:"op"`
	Key      *string `json:"key"`
	Value    string  `json:"value"`
	Expected string  `json:"expected"`
	Ok       *bool   `json:"ok"`
	Out      string  `json:"out"`
	Call     *int64  `json:"call"`
	Return   *int64  `json:"return"`
	Unknown  bool    `json:"unknown"`
	Refused  bool    `json:"refused"`
}

type input struct {
	op, key, value, expected string
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

// The state of one key: absent, or present with a value.
type state struct {
	present bool
	value   string
}

var model = porcupine.Model{
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
		switch i.op {
		case "put":
			return o.ok || o.unknown, state{true, i.value}
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
				return o.ok || o.unknown, state{true, i.value}
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
			return o.unknown || (o.ok && o.out == out), state{true, out}
		case "append":
			v := st.value + i.value
			return o.unknown || (o.ok && o.out == strconv.Itoa(len(v))), state{true, v}
		case "setnx":
			if st.present {
				return o.unknown || (!o.ok && o.out == st.value), st
			}
			return o.ok || o.unknown, state{true, i.value}
		case "getset", "getdel", "setxx":
			saw := o.unknown || (o.ok == st.present && (!st.present || o.out == st.value))
			switch {
			case i.op == "getdel":
				return saw, state{}
			case i.op == "setxx" && !st.present:
				return saw, st
			}
			return saw, state{true, i.value}
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
		case "incrby", "append", "setnx", "getset", "getdel", "setxx":
			return fmt.Sprintf("%s(%q, %q) -> %v %q", i.op, i.key, i.value, o.ok, o.out)
		default:
			return fmt.Sprintf("cas(%q, %q -> %q) -> %v", i.key, i.expected, i.value, o.ok)
		}
	},
	DescribeState: func(s interface{}) string {
		st := s.(state)
		if !st.present {
			return "absent"
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
		case "put", "get", "delete", "cas", "incrby", "append", "setnx", "getset", "getdel", "setxx":
		default:
			return nil, fmt.Errorf("%s:%d: op %q is not put, get, delete, cas, incrby, append, setnx, getset, getdel or setxx", path, line, r.Op)
		}
		if r.Refused && (r.Op == "get" || r.Op == "delete" || r.Op == "getdel") {
			return nil, fmt.Errorf("%s:%d: a %s cannot be refused (only writes are)", path, line, r.Op)
		}
		if r.Unknown {
			ops = append(ops, porcupine.Operation{
				ClientId: *r.Client,
				Input:    input{r.Op, *r.Key, r.Value, r.Expected},
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
			Input:    input{r.Op, *r.Key, r.Value, r.Expected},
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
