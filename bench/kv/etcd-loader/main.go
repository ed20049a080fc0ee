// etcd-loader: the YCSB-style closed-loop load of `sluice-kv run` against an
// etcd cluster, the peer of bench/kv/etcd_bench.py: --clients goroutines,
// each with its own client connection, run --ops-total operations in all
// (workload A: 50% reads, 50% updates; B: 95/5; C: 100/0) on --keys keys
// chosen uniformly or by YCSB's scrambled Zipfian (0.99), with
// --value-bytes values. Reads are etcd's default linearizable (quorum) reads,
// as sluice-kv's go through its log. Every key is written once before the
// timed part. Prints one JSON line: throughput and p50/p99 latency per
// operation type, in microseconds.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// splitmix64, so that runs are repeatable.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
func (r *rng) float() float64 { return float64(r.next()>>11) / float64(uint64(1)<<53) }

// YCSB's Zipfian generator (Gray et al.), theta 0.99, scrambled by a hash
// so that the hot keys are spread over the key space.
type zipf struct {
	n                        uint64
	theta, alpha, zetan, eta float64
	half                     float64
}

func newZipf(n uint64, theta float64) *zipf {
	z := &zipf{n: n, theta: theta}
	zeta := func(m uint64) float64 {
		s := 0.0
		for i := uint64(1); i <= m; i++ {
			s += 1 / math.Pow(float64(i), theta)
		}
		return s
	}
	z.zetan = zeta(n)
	zeta2 := zeta(2)
	z.alpha = 1 / (1 - theta)
	z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/z.zetan)
	z.half = 1 + math.Pow(0.5, theta)
	return z
}

func (z *zipf) sample(r *rng) uint64 {
	u := r.float()
	uz := u * z.zetan
	var v uint64
	switch {
	case uz < 1:
		v = 0
	case uz < z.half:
		v = 1
	default:
		v = uint64(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	}
	if v >= z.n {
		v = z.n - 1
	}
	h := v * 0x9e3779b97f4a7c15
	h ^= h >> 29
	return h % z.n
}

func percentile(v []int64, p float64) int64 {
	if len(v) == 0 {
		return 0
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	i := int(math.Ceil(p/100*float64(len(v)))) - 1
	if i < 0 {
		i = 0
	}
	return v[i]
}

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "etcd client URLs, comma separated")
	clients := flag.Int("clients", 8, "closed-loop clients (one connection each)")
	opsTotal := flag.Int("ops-total", 20000, "operations in all, over every client")
	keys := flag.Int("keys", 1000, "key count")
	workload := flag.String("workload", "a", "a (50% reads), b (95%), c (100%)")
	distribution := flag.String("distribution", "zipf", "uniform or zipf (YCSB's scrambled Zipfian, 0.99)")
	valueBytes := flag.Int("value-bytes", 64, "bytes per value")
	seed := flag.Uint64("seed", 1, "seed")
	flag.Parse()
	readShare := map[string]float64{"a": 0.5, "b": 0.95, "c": 1.0}[*workload]
	if readShare == 0 || (*distribution != "uniform" && *distribution != "zipf") || *clients < 1 {
		fmt.Fprintln(os.Stderr, "etcd-loader: --workload is a, b or c; --distribution uniform or zipf; --clients >= 1")
		os.Exit(2)
	}
	eps := strings.Split(*endpoints, ",")
	dial := func() *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, "etcd-loader: cannot connect to", *endpoints, ":", err)
			os.Exit(1)
		}
		return c
	}
	value := strings.Repeat("v", *valueBytes)
	key := func(k uint64) string { return fmt.Sprintf("user%d", k) }
	{
		c := dial()
		for k := 0; k < *keys; k++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := c.Put(ctx, key(uint64(k)), value); err != nil {
				fmt.Fprintln(os.Stderr, "etcd-loader: loading:", err)
				os.Exit(1)
			}
			cancel()
		}
		c.Close()
	}
	conns := make([]*clientv3.Client, *clients)
	for i := range conns {
		conns[i] = dial()
	}
	var mu sync.Mutex
	gets, puts := []int64{}, []int64{}
	failed := 0
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < *clients; i++ {
		ops := *opsTotal / *clients
		if i < *opsTotal%*clients {
			ops++
		}
		wg.Add(1)
		go func(i, ops int) {
			defer wg.Done()
			r := &rng{s: *seed*1000003 + uint64(i)}
			z := newZipf(uint64(*keys), 0.99)
			var g, p []int64
			bad := 0
			for o := 0; o < ops; o++ {
				var k uint64
				if *distribution == "zipf" {
					k = z.sample(r)
				} else {
					k = r.next() % uint64(*keys)
				}
				read := r.float() < readShare
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				var err error
				if read {
					_, err = conns[i].Get(ctx, key(k))
				} else {
					_, err = conns[i].Put(ctx, key(k), value)
				}
				us := time.Since(t0).Microseconds()
				cancel()
				if err != nil {
					bad++
				} else if read {
					g = append(g, us)
				} else {
					p = append(p, us)
				}
			}
			mu.Lock()
			gets, puts, failed = append(gets, g...), append(puts, p...), failed+bad
			mu.Unlock()
		}(i, ops)
	}
	wg.Wait()
	seconds := time.Since(start).Seconds()
	for _, c := range conns {
		c.Close()
	}
	if failed > 0 {
		fmt.Fprintln(os.Stderr, "etcd-loader:", failed, "operations failed")
		os.Exit(1)
	}
	out := map[string]any{
		"program": "etcd-loader", "clients": *clients, "ops": len(gets) + len(puts),
		"seconds": seconds, "ops_per_s": float64(len(gets)+len(puts)) / seconds,
		"get_p50_us": percentile(gets, 50), "get_p99_us": percentile(gets, 99),
		"put_p50_us": percentile(puts, 50), "put_p99_us": percentile(puts, 99),
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
