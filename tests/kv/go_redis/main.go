// Command kv-go-redis-check drives a sluice-kv RESP gateway with go-redis
// (github.com/redis/go-redis/v9) as a Go program would, and checks every
// answer exactly: strings (SET with EX, NX, XX, GET and KEEPTTL, GETDEL,
// INCR and its kin, INCRBYFLOAT, APPEND, STRLEN, GETRANGE, MGET, MSET),
// keys (DEL, EXISTS, UNLINK, EXPIRE, TTL, PERSIST, TYPE, RENAME, SCAN's
// iterator with MATCH and COUNT, DBSIZE), hashes, lists, sets, a pipeline
// of many commands, TxPipelined (MULTI/EXEC), Watch (a transaction that
// fails when another client writes its key, and two goroutines incrementing
// one key through Watch, retrying on conflict, ending at the exact total)
// and errors (WRONGTYPE, a wrong arity, an unknown command) as go-redis
// reports them. The checks run once over RESP3 (go-redis's default, HELLO
// 3) and once over RESP2.
//
// Usage: kv-go-redis-check [-host 127.0.0.1] [-protocol 3|2|both] PORT
//
// Every failed check is printed on a line of its own; the last line is
// `go-redis: N checks passed` and the exit status 0, or, if any failed,
// `go-redis: F of N checks failed` and status 1. Its keys start with
// "gr2:" or "gr3:" (deleted first, so it may run again on the same store).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

type checker struct {
	tag    string
	total  int
	failed int
}

// check records one check: got must equal want (reflect.DeepEqual).
func (c *checker) check(name string, got, want any) {
	c.total++
	if !reflect.DeepEqual(got, want) {
		c.failed++
		fmt.Printf("FAIL [%s] %s: got %#v, want %#v\n", c.tag, name, got, want)
	}
}

// errText is err's text, "" for none.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// within reports whether d lies in [lo, hi].
func within(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }

func run(ctx context.Context, addr string, protocol int, c *checker) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, PoolSize: 4})
	defer rdb.Close()
	other := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol, PoolSize: 1})
	defer other.Close()
	p := fmt.Sprintf("gr%d:", protocol)
	k := func(name string) string { return p + name }

	// Start clean: this protocol's keys from an earlier run go.
	var old []string
	iter := rdb.Scan(ctx, 0, p+"*", 100).Iterator()
	for iter.Next(ctx) {
		old = append(old, iter.Val())
	}
	c.check("scan for old keys", errText(iter.Err()), "")
	if len(old) > 0 {
		rdb.Del(ctx, old...)
	}
	c.check("ping", rdb.Ping(ctx).Val(), "PONG")

	// The protocol go-redis agreed: HGETALL through Do is a map in RESP3,
	// an array in RESP2.
	rdb.HSet(ctx, k("proto"), "f", "v")
	raw, err := rdb.Do(ctx, "HGETALL", k("proto")).Result()
	c.check("do hgetall error", errText(err), "")
	if protocol == 3 {
		c.check("resp3 map reply", raw, map[interface{}]interface{}{"f": "v"})
	} else {
		c.check("resp2 array reply", raw, []interface{}{"f", "v"})
	}

	// Strings.
	c.check("set", rdb.Set(ctx, k("s"), "apple", 0).Val(), "OK")
	c.check("get", rdb.Get(ctx, k("s")).Val(), "apple")
	_, err = rdb.Get(ctx, k("none")).Result()
	c.check("get of an absent key is redis.Nil", err, redis.Nil)
	c.check("setnx on a present key", rdb.SetNX(ctx, k("s"), "x", 0).Val(), false)
	c.check("setnx on an absent key", rdb.SetNX(ctx, k("nx"), "x", 0).Val(), true)
	c.check("setxx on an absent key", rdb.SetXX(ctx, k("xx"), "x", 0).Val(), false)
	c.check("setxx on a present key", rdb.SetXX(ctx, k("nx"), "y", 0).Val(), true)
	got, err := rdb.SetArgs(ctx, k("s"), "plum", redis.SetArgs{Get: true}).Result()
	c.check("set get answers the old value", []any{got, errText(err)}, []any{"apple", ""})
	_, err = rdb.SetArgs(ctx, k("none2"), "v", redis.SetArgs{Get: true}).Result()
	c.check("set get of an absent key is redis.Nil", err, redis.Nil)
	rdb.Del(ctx, k("none2"))
	c.check("set ex", rdb.Set(ctx, k("ex"), "v", 100*time.Second).Val(), "OK")
	ttl := rdb.TTL(ctx, k("ex")).Val()
	c.check("ttl after set ex 100", within(ttl, 99*time.Second, 100*time.Second), true)
	c.check("set keepttl", rdb.SetArgs(ctx, k("ex"), "w", redis.SetArgs{KeepTTL: true}).Val(), "OK")
	ttl = rdb.TTL(ctx, k("ex")).Val()
	c.check("ttl after set keepttl", within(ttl, 98*time.Second, 100*time.Second), true)
	c.check("set without keepttl clears the deadline", rdb.Set(ctx, k("ex"), "u", 0).Val(), "OK")
	c.check("ttl of a key without a deadline", rdb.TTL(ctx, k("ex")).Val(), time.Duration(-1))
	c.check("ttl of an absent key", rdb.TTL(ctx, k("none")).Val(), time.Duration(-2))
	c.check("getdel", rdb.GetDel(ctx, k("nx")).Val(), "y")
	c.check("getdel removed it", rdb.Exists(ctx, k("nx")).Val(), int64(0))
	c.check("incr of an absent key", rdb.Incr(ctx, k("n")).Val(), int64(1))
	c.check("incrby", rdb.IncrBy(ctx, k("n"), 41).Val(), int64(42))
	c.check("decr", rdb.Decr(ctx, k("n")).Val(), int64(41))
	c.check("decrby", rdb.DecrBy(ctx, k("n"), 50).Val(), int64(-9))
	rdb.Set(ctx, k("f"), "10.50", 0)
	c.check("incrbyfloat", rdb.IncrByFloat(ctx, k("f"), 0.1).Val(), 10.6)
	c.check("incr of a string that is not a number", errText(rdb.Incr(ctx, k("s")).Err()),
		"ERR value is not an integer or out of range")
	c.check("append to an absent key", rdb.Append(ctx, k("a"), "Hello").Val(), int64(5))
	c.check("append", rdb.Append(ctx, k("a"), " World").Val(), int64(11))
	c.check("strlen", rdb.StrLen(ctx, k("a")).Val(), int64(11))
	c.check("getrange", rdb.GetRange(ctx, k("a"), 0, 4).Val(), "Hello")
	c.check("getrange from the end", rdb.GetRange(ctx, k("a"), -5, -1).Val(), "World")
	c.check("mset", rdb.MSet(ctx, k("m1"), "1", k("m2"), "2").Val(), "OK")
	c.check("mget", rdb.MGet(ctx, k("m1"), k("none"), k("m2")).Val(), []interface{}{"1", nil, "2"})
	c.check("mset with a map", rdb.MSet(ctx, map[string]interface{}{k("m3"): "3"}).Val(), "OK")
	c.check("get after mset", rdb.Get(ctx, k("m3")).Val(), "3")

	// Keys.
	c.check("exists of several", rdb.Exists(ctx, k("m1"), k("m2"), k("none")).Val(), int64(2))
	c.check("del of several", rdb.Del(ctx, k("m1"), k("none")).Val(), int64(1))
	c.check("unlink", rdb.Unlink(ctx, k("m2"), k("m3")).Val(), int64(2))
	c.check("expire", rdb.Expire(ctx, k("s"), 50*time.Second).Val(), true)
	ttl = rdb.TTL(ctx, k("s")).Val()
	c.check("ttl after expire 50", within(ttl, 49*time.Second, 50*time.Second), true)
	c.check("expire of an absent key", rdb.Expire(ctx, k("none"), time.Second).Val(), false)
	c.check("persist", rdb.Persist(ctx, k("s")).Val(), true)
	c.check("persist of a key without a deadline", rdb.Persist(ctx, k("s")).Val(), false)
	c.check("ttl after persist", rdb.TTL(ctx, k("s")).Val(), time.Duration(-1))
	c.check("type string", rdb.Type(ctx, k("s")).Val(), "string")
	c.check("type none", rdb.Type(ctx, k("none")).Val(), "none")
	c.check("rename", rdb.Rename(ctx, k("s"), k("s2")).Val(), "OK")
	c.check("rename moved the value", []string{rdb.Get(ctx, k("s2")).Val(), rdb.Type(ctx, k("s")).Val()},
		[]string{"plum", "none"})
	c.check("rename of an absent key", errText(rdb.Rename(ctx, k("none"), k("x")).Err()), "ERR no such key")
	before := rdb.DBSize(ctx).Val()
	var want []string
	for i := 0; i < 30; i++ {
		want = append(want, k("scan:"+strconv.Itoa(i)))
		rdb.Set(ctx, want[i], "v", 0)
	}
	c.check("dbsize counts the keys added", rdb.DBSize(ctx).Val()-before, int64(30))
	var seen []string
	iter = rdb.Scan(ctx, 0, p+"scan:*", 7).Iterator()
	for iter.Next(ctx) {
		seen = append(seen, iter.Val())
	}
	c.check("scan iterator error", errText(iter.Err()), "")
	c.check("scan iterator with match and count", sorted(seen), sorted(want))
	keys, cursor, err := rdb.Scan(ctx, 0, p+"scan:1*", 1000).Result()
	c.check("scan page", []any{len(keys), cursor, errText(err)}, []any{11, uint64(0), ""})

	// Hashes.
	h := k("h")
	c.check("hset with a map", rdb.HSet(ctx, h, map[string]interface{}{"a": "1", "b": 2, "c": "x"}).Val(),
		int64(3))
	c.check("hgetall", rdb.HGetAll(ctx, h).Val(), map[string]string{"a": "1", "b": "2", "c": "x"})
	c.check("hgetall of an absent key", rdb.HGetAll(ctx, k("none")).Val(), map[string]string{})
	c.check("hincrby", rdb.HIncrBy(ctx, h, "b", 5).Val(), int64(7))
	c.check("hincrby of a new field", rdb.HIncrBy(ctx, h, "d", -3).Val(), int64(-3))
	c.check("hincrby of a non-number", errText(rdb.HIncrBy(ctx, h, "c", 1).Err()),
		"ERR hash value is not an integer")
	c.check("hdel", rdb.HDel(ctx, h, "a", "zz").Val(), int64(1))
	c.check("hget", rdb.HGet(ctx, h, "b").Val(), "7")
	c.check("hlen", rdb.HLen(ctx, h).Val(), int64(3))
	c.check("type hash", rdb.Type(ctx, h).Val(), "hash")

	// Lists.
	l := k("l")
	c.check("lpush", rdb.LPush(ctx, l, "b", "a").Val(), int64(2))
	c.check("rpush", rdb.RPush(ctx, l, "c", "d", "e").Val(), int64(5))
	c.check("lrange", rdb.LRange(ctx, l, 0, -1).Val(), []string{"a", "b", "c", "d", "e"})
	c.check("lrange part", rdb.LRange(ctx, l, 1, 2).Val(), []string{"b", "c"})
	c.check("lpop with a count", rdb.LPopCount(ctx, l, 2).Val(), []string{"a", "b"})
	c.check("lpop", rdb.LPop(ctx, l).Val(), "c")
	c.check("ltrim", rdb.LTrim(ctx, l, 1, -1).Val(), "OK")
	c.check("lrange after ltrim", rdb.LRange(ctx, l, 0, -1).Val(), []string{"e"})
	c.check("rpop", rdb.RPop(ctx, l).Val(), "e")
	c.check("the last element's pop removes the key", rdb.Exists(ctx, l).Val(), int64(0))
	_, err = rdb.LPop(ctx, l).Result()
	c.check("lpop of an absent key is redis.Nil", err, redis.Nil)
	_, err = rdb.LPopCount(ctx, l, 3).Result()
	c.check("lpop with a count of an absent key is redis.Nil", err, redis.Nil)

	// Sets.
	s, t := k("set"), k("set2")
	c.check("sadd", rdb.SAdd(ctx, s, "x", "y", "z", "x").Val(), int64(3))
	c.check("smembers", sorted(rdb.SMembers(ctx, s).Val()), []string{"x", "y", "z"})
	c.check("sismember", []bool{rdb.SIsMember(ctx, s, "x").Val(), rdb.SIsMember(ctx, s, "q").Val()},
		[]bool{true, false})
	rdb.SAdd(ctx, t, "y", "z", "w")
	c.check("sinter", sorted(rdb.SInter(ctx, s, t).Val()), []string{"y", "z"})
	popped := rdb.SPop(ctx, s).Val()
	c.check("spop answers a member", popped == "x" || popped == "y" || popped == "z", true)
	c.check("spop removed it", []any{rdb.SIsMember(ctx, s, popped).Val(), rdb.SCard(ctx, s).Val()},
		[]any{false, int64(2)})
	c.check("spop with a count", len(rdb.SPopN(ctx, s, 5).Val()), 2)
	_, err = rdb.SPop(ctx, s).Result()
	c.check("spop of an absent key is redis.Nil", err, redis.Nil)
	c.check("type set", rdb.Type(ctx, t).Val(), "set")

	// A pipeline of many commands: one round trip, answers in order.
	cmds, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := 0; i < 100; i++ {
			pipe.Incr(ctx, k("pipe"))
		}
		pipe.Set(ctx, k("pipe:s"), "v", 0)
		pipe.Get(ctx, k("pipe:s"))
		pipe.Get(ctx, k("none"))
		return nil
	})
	c.check("pipeline error (the redis.Nil of its last GET)", err, redis.Nil)
	c.check("pipeline length", len(cmds), 103)
	inOrder := len(cmds) == 103
	for i := 0; inOrder && i < 100; i++ {
		inOrder = cmds[i].(*redis.IntCmd).Val() == int64(i+1)
	}
	c.check("pipeline incrs answered in order", inOrder, true)
	if len(cmds) == 103 {
		c.check("pipeline set and get",
			[]any{cmds[100].(*redis.StatusCmd).Val(), cmds[101].(*redis.StringCmd).Val(), cmds[102].Err()},
			[]any{"OK", "v", redis.Nil})
	}

	// MULTI/EXEC.
	var incr *redis.IntCmd
	var get *redis.StringCmd
	cmds, err = rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		incr = pipe.IncrBy(ctx, k("tx"), 5)
		pipe.Set(ctx, k("tx:s"), "in", 0)
		get = pipe.Get(ctx, k("tx:s"))
		return nil
	})
	c.check("txpipelined", []any{errText(err), len(cmds), incr.Val(), get.Val()}, []any{"", 3, int64(5), "in"})
	// A queued command's error fails only that command.
	cmds, err = rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Incr(ctx, k("tx"))
		pipe.LPush(ctx, k("tx:s"), "x")
		pipe.Incr(ctx, k("tx"))
		return nil
	})
	c.check("txpipelined with a wrongtype among it", errText(err), wrongType)
	if len(cmds) == 3 {
		c.check("txpipelined's other commands ran",
			[]any{cmds[0].(*redis.IntCmd).Val(), cmds[2].(*redis.IntCmd).Val()}, []any{int64(6), int64(7)})
	}

	// Watch: another client's write between WATCH and EXEC fails the
	// transaction with redis.TxFailedErr and changes nothing.
	w := k("w")
	rdb.Set(ctx, w, "0", 0)
	err = rdb.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Get(ctx, w).Int()
		if err != nil {
			return err
		}
		other.Set(ctx, w, "100", 0)
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, w, n+1, 0)
			return nil
		})
		return err
	}, w)
	c.check("watch then another client's write", err, redis.TxFailedErr)
	c.check("the failed transaction changed nothing", rdb.Get(ctx, w).Val(), "100")

	// Two goroutines add 1 to one key through Watch, 40 times each,
	// retrying on conflict: the key ends at exactly 80.
	counter := k("counter")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	retries := 0
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				for {
					err := rdb.Watch(ctx, func(tx *redis.Tx) error {
						n, err := tx.Get(ctx, counter).Int()
						if err != nil && err != redis.Nil {
							return err
						}
						_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
							pipe.Set(ctx, counter, n+1, 0)
							return nil
						})
						return err
					}, counter)
					if err == redis.TxFailedErr {
						mu.Lock()
						retries++
						mu.Unlock()
						continue
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err.Error())
						mu.Unlock()
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	c.check("watch increments' errors", errs, []string(nil))
	c.check("two goroutines incrementing through watch", rdb.Get(ctx, counter).Val(), "80")
	fmt.Printf("go-redis [%s]: watch increments retried %d times\n", c.tag, retries)

	// Errors as go-redis reports them.
	rdb.Set(ctx, k("str"), "v", 0)
	c.check("wrongtype lpush on a string", errText(rdb.LPush(ctx, k("str"), "x").Err()), wrongType)
	c.check("wrongtype get on a hash", errText(rdb.Get(ctx, h).Err()), wrongType)
	c.check("wrongtype hgetall on a string", errText(rdb.HGetAll(ctx, k("str")).Err()), wrongType)
	c.check("wrongtype sadd on a list", errText(rdb.SAdd(ctx, k("str"), "x").Err()), wrongType)
	var rerr redis.Error
	c.check("a reply error is a redis.Error", errors.As(rdb.LPush(ctx, k("str"), "x").Err(), &rerr), true)
	c.check("wrong arity", errText(rdb.Do(ctx, "GET").Err()), "ERR wrong number of arguments for 'get' command")
	c.check("wrong arity of a set", errText(rdb.Do(ctx, "SET", k("x")).Err()),
		"ERR wrong number of arguments for 'set' command")
	c.check("unknown command", errText(rdb.Do(ctx, "FOO", "a", "b").Err()),
		"ERR unknown command 'FOO', with args beginning with: 'a' 'b' ")
	c.check("the connection goes on after errors", rdb.Get(ctx, k("str")).Val(), "v")
}

func main() {
	host := flag.String("host", "127.0.0.1", "the gateway's address")
	proto := flag.String("protocol", "both", "3, 2 or both (3 first)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: kv-go-redis-check [-host ADDR] [-protocol 3|2|both] PORT\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	port, err := strconv.Atoi(flag.Arg(0))
	if err != nil || port <= 0 || port > 65535 {
		fmt.Fprintf(os.Stderr, "kv-go-redis-check: %q is not a port\n", flag.Arg(0))
		os.Exit(2)
	}
	var protocols []int
	switch *proto {
	case "3":
		protocols = []int{3}
	case "2":
		protocols = []int{2}
	case "both":
		protocols = []int{3, 2}
	default:
		fmt.Fprintf(os.Stderr, "kv-go-redis-check: -protocol is 3, 2 or both, not %q\n", *proto)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	addr := fmt.Sprintf("%s:%d", *host, port)
	total, failed := 0, 0
	for _, p := range protocols {
		c := &checker{tag: "resp" + strconv.Itoa(p)}
		run(ctx, addr, p, c)
		total += c.total
		failed += c.failed
	}
	if failed > 0 {
		fmt.Printf("go-redis: %d of %d checks failed\n", failed, total)
		os.Exit(1)
	}
	fmt.Printf("go-redis: %d checks passed\n", total)
}
