//! Two queries of `sluice-stream` on Timely Dataflow, the peer that
//! bench/stream/compare.py runs beside it on the same processes x workers,
//! over the same generated records (apps/stream's generators, ported bit for
//! bit), so that the result's row count and order-independent checksum must
//! equal sluice-stream's:
//!   ysb  count the view events per campaign per tumbling event-time window;
//!   nb7  the bids at the highest price of each tumbling window (NEXMark Q7).
//!
//! Two strategies, as the Slash paper compares them:
//!   repartition  every record is exchanged by its key (campaign; window) to
//!                the worker that owns it (what Flink and Timely do by
//!                default; sluice-stream's `uppar`);
//!   preagg       every worker aggregates its own records per window first
//!                and exchanges its partial result per (window, key) when the
//!                window closes (local pre-aggregation).
//! Windows close by Timely's frontier: a worker advances its input's time to
//! a window as its event times reach it.
//!
//! As sluice-stream does by default, every worker generates its records into
//! memory before the timed part. Each worker prints one JSON line (its
//! timed seconds); each process one with its CPU seconds over the timed part;
//! worker 0 one with the result's rows and checksum.
//!
//! Usage: timely-peer [--query ysb|nb7] [--strategy repartition|preagg] [--records N]
//!        [--keys K] [--window-ms W] [--rate R] [--max-price P] [--seed S]
//!        -- [timely: -w T -n P -p I -h HOSTFILE]

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::{Input, Operator, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};

const GOLDEN: u64 = 0x9e3779b97f4a7c15;

/// murmur3's fmix64, as sluice::hash64.
fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    x
}

/// sluice::hash_bytes of whole 8-byte words (include/sluice/detail/hash.h).
fn hash_words(words: &[u64]) -> u64 {
    if words.len() == 1 {
        return mix64(words[0]);
    }
    let mut h = GOLDEN ^ ((words.len() as u64 * 8).wrapping_mul(0xff51afd7ed558ccd));
    for &v in words {
        h ^= mix64(v);
        h = h.rotate_left(27).wrapping_mul(GOLDEN);
    }
    mix64(h)
}

/// stream/report.h's row_hash, the value given as its 8-byte words.
fn row_hash(start_ms: i64, key: u64, value: &[u64]) -> u64 {
    let h = mix64((start_ms as u64) ^ GOLDEN);
    let h = mix64(h ^ key);
    mix64(h ^ hash_words(value))
}

/// A NEXMark bid, as apps/stream's Bid (32 bytes): auction, bidder, price
/// (cents), time (ms). A tuple, so that timely can exchange it.
type Bid = (u64, u64, u64, i64);

/// A 78-byte YSB record, as apps/stream's YsbEvent.
#[repr(C, packed)]
#[derive(Clone, Copy)]
#[allow(dead_code)]
struct YsbEvent {
    user_id: [u64; 2],
    page_id: [u64; 2],
    ad_id: u64,
    campaign_id: u64,
    event_time: i64,
    ip: u32,
    ad_type: u8,
    event_type: u8,
    padding: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<YsbEvent>() == 78);

#[derive(Clone)]
struct Spec {
    query: String,
    strategy: String,
    max_price: u64,
    records: u64,
    keys: u64,
    window_ms: i64,
    rate: u64,
    seed: u64,
}

/// apps/stream/workloads.cc's RecordDice for worker g of `workers`: how many
/// records it has, and the stream of 64-bit draws of each (uniform keys, no
/// disorder); `f(i, next)` makes record i from its draws.
fn generate_with<R>(spec: &Spec, g: u64, workers: u64, mut f: impl FnMut(u64, &mut dyn FnMut() -> u64) -> R) -> Vec<R> {
    let count = spec.records / workers + if g < spec.records % workers { 1 } else { 0 };
    let salt = mix64(spec.seed.wrapping_mul(GOLDEN).wrapping_add(g).wrapping_add(1));
    (0..count)
        .map(|i| {
            let mut state = mix64(salt ^ i.wrapping_mul(0xd6e8feb86659fd93));
            let mut next = || {
                state = state.wrapping_add(GOLDEN);
                mix64(state)
            };
            f(i, &mut next)
        })
        .collect()
}

/// Worker g's records (apps/stream/workloads.cc, YsbSource).
fn generate(spec: &Spec, g: u64, workers: u64) -> Vec<YsbEvent> {
    generate_with(spec, g, workers, |i, next| {
        let campaign = next() % spec.keys;
        let (a, b) = (next(), next());
        let (p0, p1) = (next(), next());
        let c = next();
        YsbEvent {
            user_id: [a, b],
            page_id: [p0, p1],
            ad_id: campaign * 10 + c % 10,
            campaign_id: campaign,
            event_time: (i / spec.rate) as i64,
            ip: (c >> 32) as u32,
            ad_type: ((c >> 8) % 5) as u8,
            event_type: ((c >> 16) % 3) as u8,
            padding: [0; 16],
        }
    })
}

/// Worker g's bids (apps/stream/nexmark.cc, BidSource keyed by auction).
fn generate_bids(spec: &Spec, g: u64, workers: u64) -> Vec<Bid> {
    generate_with(spec, g, workers, |i, next| {
        let auction = next() % spec.keys;
        let bidder = next() % 1_000_000;
        let price = 1 + next() % spec.max_price;
        (auction, bidder, price, (i / spec.rate) as i64)
    })
}

/// The process's CPU microseconds when its workers started the timed part
/// together, and when the last of them ended it.
static CPU_START_US: AtomicU64 = AtomicU64::new(0);
static CPU_END_US: AtomicU64 = AtomicU64::new(0);

fn cpu_seconds(who: libc::c_int) -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn usage(why: &str) -> ! {
    eprintln!("timely-peer: {}", why);
    eprintln!(
        "usage: timely-peer [--query ysb|nb7] [--strategy repartition|preagg] [--records N] \
         [--keys K] [--window-ms W] [--rate R] [--max-price P] [--seed S] \
         -- [-w T -n P -p I -h HOSTFILE]"
    );
    std::process::exit(2)
}

fn parse() -> (Spec, Vec<String>) {
    let mut spec = Spec {
        query: "ysb".into(),
        strategy: "repartition".into(),
        max_price: 100_000_000,
        records: 10_000_000,
        keys: 0,      // the query's default: ysb 100 campaigns, nb7 10000 auctions
        window_ms: 0, // the query's default: ysb 1000, nb7 60000
        rate: 1000,
        seed: 1,
    };
    let mut args = std::env::args().skip(1);
    let mut timely_args = vec!["timely-peer".to_string()];
    while let Some(a) = args.next() {
        if a == "--" {
            timely_args.extend(args.by_ref());
            break;
        }
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{} needs a value", a)));
        let mut number = |name: &str| -> u64 {
            let v = value();
            v.parse().unwrap_or_else(|_| usage(&format!("{} takes a number, not '{}'", name, v)))
        };
        match a.as_str() {
            "--query" => {
                spec.query = value();
                if spec.query != "ysb" && spec.query != "nb7" {
                    usage(&format!("--query is ysb or nb7, not '{}'", spec.query));
                }
            }
            "--max-price" => spec.max_price = number("--max-price").max(1),
            "--strategy" => {
                spec.strategy = value();
                if spec.strategy != "repartition" && spec.strategy != "preagg" {
                    usage(&format!("--strategy is repartition or preagg, not '{}'", spec.strategy));
                }
            }
            "--records" => spec.records = number("--records"),
            "--keys" => spec.keys = number("--keys").max(1),
            "--window-ms" => spec.window_ms = number("--window-ms").max(1) as i64,
            "--rate" => spec.rate = number("--rate").max(1),
            "--seed" => spec.seed = number("--seed"),
            "--help" => usage("sluice-stream's YSB and NB7 on Timely Dataflow"),
            _ => usage(&format!("unknown option '{}'", a)),
        }
    }
    (spec, timely_args)
}

/// Counts (ysb) or partial counts (preagg's merge) per (window, campaign).
fn counting<G, P>(
    stream: &timely::dataflow::Stream<G, (u64, u64)>,
    pact: P,
    name: &str,
) -> timely::dataflow::Stream<G, (u64, u64)>
where
    G: timely::dataflow::Scope<Timestamp = u64>,
    P: timely::dataflow::channels::pact::ParallelizationContract<u64, (u64, u64)>,
{
    let mut counts: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
    let mut buffer = Vec::new();
    stream.unary_notify(pact, name, vec![], move |input, output, notificator| {
        input.for_each(|time, data| {
            data.swap(&mut buffer);
            let window = counts.entry(*time.time()).or_default();
            for (campaign, n) in buffer.drain(..) {
                *window.entry(campaign).or_insert(0) += n;
            }
            notificator.notify_at(time.retain());
        });
        notificator.for_each(|time, _, _| {
            if let Some(window) = counts.remove(time.time()) {
                output.session(&time).give_iterator(window.into_iter());
            }
        });
    })
}

/// The bids at the highest price of each window (the time is the window).
fn arg_max<G, P>(
    stream: &timely::dataflow::Stream<G, Bid>,
    pact: P,
    name: &str,
) -> timely::dataflow::Stream<G, Bid>
where
    G: timely::dataflow::Scope<Timestamp = u64>,
    P: timely::dataflow::channels::pact::ParallelizationContract<u64, Bid>,
{
    let mut best: HashMap<u64, (u64, Vec<Bid>)> = HashMap::new();
    let mut buffer = Vec::new();
    stream.unary_notify(pact, name, vec![], move |input, output, notificator| {
        input.for_each(|time, data| {
            data.swap(&mut buffer);
            let (max, bids) = best.entry(*time.time()).or_insert((0, Vec::new()));
            for b in buffer.drain(..) {
                if b.2 > *max {
                    *max = b.2;
                    bids.clear();
                }
                if b.2 == *max {
                    bids.push(b);
                }
            }
            notificator.notify_at(time.retain());
        });
        notificator.for_each(|time, _, _| {
            if let Some((_, bids)) = best.remove(time.time()) {
                output.session(&time).give_iterator(bids.into_iter());
            }
        });
    })
}

fn main() {
    let (mut spec, timely_args) = parse();
    let nb7 = spec.query == "nb7";
    if spec.keys == 0 {
        spec.keys = if nb7 { 10_000 } else { 100 };
    }
    if spec.window_ms == 0 {
        spec.window_ms = if nb7 { 60_000 } else { 1000 };
    }
    let config = timely::Config::from_args(timely_args.into_iter())
        .unwrap_or_else(|e| usage(&format!("timely's options: {}", e)));
    // This process's workers start the timed part together, after all have
    // generated their input, and its CPU is read then and after the last
    // one ends (so that neither generating nor freeing the input counts).
    let local = match &config.communication {
        timely::CommunicationConfig::Process(n) => *n,
        timely::CommunicationConfig::Cluster { threads, .. } => *threads,
        _ => 1,
    };
    let start_line = std::sync::Arc::new(std::sync::Barrier::new(local));
    let end_line = start_line.clone();
    let guards = timely::execute(config, move |worker| {
        let index = worker.index() as u64;
        let peers = worker.peers() as u64;
        let spec = spec.clone();
        let window_ms = spec.window_ms;
        let preagg = spec.strategy == "preagg";
        let (events, bids) = if nb7 {
            (Vec::new(), generate_bids(&spec, index, peers))
        } else {
            (generate(&spec, index, peers), Vec::new())
        };
        let mut views_in = InputHandle::<u64, (u64, u64)>::new();
        let mut bids_in = InputHandle::<u64, Bid>::new();
        let mut probe = ProbeHandle::new();
        let result = Rc::new(RefCell::new((0u64, 0u64)));
        let sink = result.clone();
        worker.dataflow::<u64, _, _>(|scope| {
            if nb7 {
                let bids = scope.input_from(&mut bids_in);
                // All bids of a window to the worker that owns the window.
                let by_window = || Exchange::new(move |b: &Bid| mix64((b.3 / window_ms) as u64));
                let best = if preagg {
                    arg_max(&arg_max(&bids, Pipeline, "LocalMax"), by_window(), "MergeMax")
                } else {
                    arg_max(&bids, by_window(), "Max")
                };
                best.unary::<(), _, _, _>(Exchange::new(|_: &Bid| 0), "Checksum", |_, _| {
                    let mut buffer = Vec::new();
                    move |input, _output| {
                        input.for_each(|time, data| {
                            data.swap(&mut buffer);
                            let w = *time.time();
                            let mut s = sink.borrow_mut();
                            for b in buffer.drain(..) {
                                let words = [b.0, b.1, b.2, b.3 as u64];
                                s.0 += 1;
                                s.1 = s.1.wrapping_add(row_hash(w as i64 * window_ms, w, &words));
                            }
                        });
                    }
                })
                .probe_with(&mut probe);
            } else {
                let views = scope.input_from(&mut views_in);
                let by_campaign = || Exchange::new(|x: &(u64, u64)| mix64(x.0));
                let totals = if preagg {
                    counting(&counting(&views, Pipeline, "PreAggregate"), by_campaign(), "Merge")
                } else {
                    counting(&views, by_campaign(), "Count")
                };
                // Every window's rows to worker 0, which sums their hashes.
                totals
                    .unary::<(), _, _, _>(Exchange::new(|_: &(u64, u64)| 0), "Checksum", |_, _| {
                        let mut buffer = Vec::new();
                        move |input, _output| {
                            input.for_each(|time, data| {
                                data.swap(&mut buffer);
                                let start = *time.time() as i64 * window_ms;
                                let mut s = sink.borrow_mut();
                                for (campaign, count) in buffer.drain(..) {
                                    s.0 += 1;
                                    s.1 = s.1.wrapping_add(row_hash(start, campaign, &[count]));
                                }
                            });
                        }
                    })
                    .probe_with(&mut probe);
            }
        });

        if start_line.wait().is_leader() {
            CPU_START_US.store((cpu_seconds(libc::RUSAGE_SELF) * 1e6) as u64, Ordering::Relaxed);
        }
        let started = Instant::now();
        let records = if nb7 { bids.len() } else { events.len() };
        let mut window = 0u64;
        for i in 0..records {
            let t = if nb7 { bids[i].3 } else { events[i].event_time };
            let w = (t / window_ms) as u64;
            if w != window {
                if nb7 {
                    bids_in.advance_to(w);
                } else {
                    views_in.advance_to(w);
                }
                window = w;
            }
            if nb7 {
                bids_in.send(bids[i]);
            } else if events[i].event_type == 0 {
                views_in.send((events[i].campaign_id, 1));
            }
            if i % 4096 == 4095 {
                worker.step();
            }
        }
        views_in.close();
        bids_in.close();
        while !probe.done() {
            worker.step();
        }
        let seconds = started.elapsed().as_secs_f64();
        if end_line.wait().is_leader() {
            CPU_END_US.store((cpu_seconds(libc::RUSAGE_SELF) * 1e6) as u64, Ordering::Relaxed);
        }
        println!(
            "{{\"program\":\"timely-peer\",\"worker\":{},\"workers\":{},\"records\":{},\"seconds\":{:.6}}}",
            index, peers, records, seconds
        );
        let r = *result.borrow();
        if index == 0 {
            println!(
                "{{\"program\":\"timely-peer\",\"query\":\"{}\",\"strategy\":\"{}\",\"rows\":{},\"checksum\":\"{:016x}\"}}",
                spec.query, spec.strategy, r.0, r.1
            );
        }
    })
    .unwrap_or_else(|e| usage(&format!("timely: {}", e)));
    drop(guards);
    // The process's CPU over the timed part: every worker and communication thread.
    let cpu = CPU_END_US.load(Ordering::Relaxed) as f64 / 1e6 - CPU_START_US.load(Ordering::Relaxed) as f64 / 1e6;
    println!("{{\"program\":\"timely-peer\",\"process_cpu_seconds\":{:.3}}}", cpu);
}
