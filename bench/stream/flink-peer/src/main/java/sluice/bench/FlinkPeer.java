package sluice.bench;

import java.lang.management.ManagementFactory;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.RichSinkFunction;
import org.apache.flink.streaming.api.functions.source.RichParallelSourceFunction;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.time.Time;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * Two queries of sluice-stream on Apache Flink's MiniCluster (a local
 * environment of --parallelism T task slots in this JVM), the peer that
 * bench/stream/compare.py runs beside it:
 *   ysb  filter the view events, key by campaign, count per tumbling
 *        event-time window;
 *   nb7  key the bids by their window, emit the bids at the window's
 *        highest price (NEXMark Q7).
 * The records are those of apps/stream's generators (ported bit for bit;
 * worker g of T is source subtask g), so the result's rows and
 * order-independent checksum must equal sluice-stream's at 1 process x T
 * workers.
 *
 * Every source subtask generates its records into memory in open(); the
 * timed part starts once all have (a latch), as sluice-stream's does after
 * generation, and ends when the sink has every row. Prints one JSON line:
 * rows, checksum, seconds, and the JVM's CPU seconds over the timed part.
 *
 * Usage: FlinkPeer [--query ysb|nb7] [--parallelism T] [--records N] [--keys K]
 *        [--window-ms W] [--rate R] [--max-price P] [--seed S]
 */
public final class FlinkPeer {
  static final long GOLDEN = 0x9e3779b97f4a7c15L;

  static long mix64(long x) {
    x ^= x >>> 33;
    x *= 0xff51afd7ed558ccdL;
    x ^= x >>> 33;
    x *= 0xc4ceb9fe1a85ec53L;
    x ^= x >>> 33;
    return x;
  }

  // sluice::hash_bytes of whole 8-byte words (include/sluice/detail/hash.h).
  static long hashWords(long... words) {
    if (words.length == 1) return mix64(words[0]);
    long h = GOLDEN ^ ((long) words.length * 8 * 0xff51afd7ed558ccdL);
    for (long v : words) {
      h ^= mix64(v);
      h = Long.rotateLeft(h, 27) * GOLDEN;
    }
    return mix64(h);
  }

  // stream/report.h's row_hash, the value given as its 8-byte words.
  static long rowHash(long startMs, long key, long... value) {
    long h = mix64(startMs ^ GOLDEN);
    h = mix64(h ^ key);
    return mix64(h ^ hashWords(value));
  }

  // One process: the sink and the sources share these (a MiniCluster runs in this JVM).
  static CountDownLatch generated;
  static final AtomicLong START_NS = new AtomicLong(Long.MAX_VALUE);
  static final AtomicLong START_CPU_NS = new AtomicLong(0);
  static final AtomicLong END_NS = new AtomicLong(0);
  static final AtomicLong END_CPU_NS = new AtomicLong(0);
  static final AtomicLong ROWS = new AtomicLong();
  static final AtomicLong CHECKSUM = new AtomicLong();

  static long cpuNanos() {
    return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime();
  }

  /** A YSB event, as apps/stream's YsbEvent (78 bytes there). */
  public static final class Event {
    public long userId0, userId1, pageId0, pageId1, adId, campaignId, eventTime;
    public int ip;
    public byte adType, eventType;
  }

  static final class Source extends RichParallelSourceFunction<Event> {
    final long records, keys, rate, seed;
    long[] campaign, time, c0, c1, c2, c3, c4;
    volatile boolean running = true;

    Source(long records, long keys, long rate, long seed) {
      this.records = records;
      this.keys = keys;
      this.rate = rate;
      this.seed = seed;
    }

    @Override
    public void open(Configuration parameters) {
      final int g = getRuntimeContext().getIndexOfThisSubtask();
      final int workers = getRuntimeContext().getNumberOfParallelSubtasks();
      final long count = records / workers + (g < records % workers ? 1 : 0);
      final long salt = mix64(seed * GOLDEN + g + 1);
      final int n = (int) count;
      campaign = new long[n];
      time = new long[n];
      c0 = new long[n];
      c1 = new long[n];
      c2 = new long[n];
      c3 = new long[n];
      c4 = new long[n];
      for (int i = 0; i < n; ++i) {
        long state = mix64(salt ^ ((long) i * 0xd6e8feb86659fd93L));
        state += GOLDEN;
        campaign[i] = Long.remainderUnsigned(mix64(state), keys);
        time[i] = Long.divideUnsigned(i, rate);
        state += GOLDEN;
        c0[i] = mix64(state);
        state += GOLDEN;
        c1[i] = mix64(state);
        state += GOLDEN;
        c2[i] = mix64(state);
        state += GOLDEN;
        c3[i] = mix64(state);
        state += GOLDEN;
        c4[i] = mix64(state);
      }
      generated.countDown();
    }

    @Override
    public void run(SourceContext<Event> ctx) throws Exception {
      generated.await();
      START_NS.accumulateAndGet(System.nanoTime(), Math::min);
      START_CPU_NS.compareAndSet(0, cpuNanos());
      for (int i = 0; i < campaign.length && running; ++i) {
        final Event e = new Event();
        final long c = c4[i];
        e.userId0 = c0[i];
        e.userId1 = c1[i];
        e.pageId0 = c2[i];
        e.pageId1 = c3[i];
        e.campaignId = campaign[i];
        e.adId = campaign[i] * 10 + Long.remainderUnsigned(c, 10);
        e.eventTime = time[i];
        e.ip = (int) (c >>> 32);
        e.adType = (byte) Long.remainderUnsigned(c >>> 8, 5);
        e.eventType = (byte) Long.remainderUnsigned(c >>> 16, 3);
        synchronized (ctx.getCheckpointLock()) {
          ctx.collect(e);
        }
      }
    }

    @Override
    public void cancel() {
      running = false;
    }
  }

  /** A NEXMark bid, as apps/stream's Bid (32 bytes). */
  public static final class Bid {
    public long auction, bidder, price, time;
  }

  static final class BidSource extends RichParallelSourceFunction<Bid> {
    final long records, keys, rate, maxPrice, seed;
    long[] auction, bidder, price;
    volatile boolean running = true;

    BidSource(long records, long keys, long rate, long maxPrice, long seed) {
      this.records = records;
      this.keys = keys;
      this.rate = rate;
      this.maxPrice = maxPrice;
      this.seed = seed;
    }

    @Override
    public void open(Configuration parameters) {
      final int g = getRuntimeContext().getIndexOfThisSubtask();
      final int workers = getRuntimeContext().getNumberOfParallelSubtasks();
      final int n = (int) (records / workers + (g < records % workers ? 1 : 0));
      final long salt = mix64(seed * GOLDEN + g + 1);
      auction = new long[n];
      bidder = new long[n];
      price = new long[n];
      for (int i = 0; i < n; ++i) {
        long state = mix64(salt ^ ((long) i * 0xd6e8feb86659fd93L));
        state += GOLDEN;
        auction[i] = Long.remainderUnsigned(mix64(state), keys);
        state += GOLDEN;
        bidder[i] = Long.remainderUnsigned(mix64(state), 1_000_000);
        state += GOLDEN;
        price[i] = 1 + Long.remainderUnsigned(mix64(state), maxPrice);
      }
      generated.countDown();
    }

    @Override
    public void run(SourceContext<Bid> ctx) throws Exception {
      generated.await();
      START_NS.accumulateAndGet(System.nanoTime(), Math::min);
      START_CPU_NS.compareAndSet(0, cpuNanos());
      for (int i = 0; i < auction.length && running; ++i) {
        final Bid b = new Bid();
        b.auction = auction[i];
        b.bidder = bidder[i];
        b.price = price[i];
        b.time = Long.divideUnsigned(i, rate);
        synchronized (ctx.getCheckpointLock()) {
          ctx.collect(b);
        }
      }
    }

    @Override
    public void cancel() {
      running = false;
    }
  }

  // The bids at the window's highest price, with the window's index as the key.
  static final class HighestBids
      extends ProcessWindowFunction<Bid, Tuple3<Long, Long, Bid>, Long, TimeWindow> {
    @Override
    public void process(Long window, Context ctx, Iterable<Bid> bids,
        Collector<Tuple3<Long, Long, Bid>> out) {
      long max = Long.MIN_VALUE;
      for (Bid b : bids) max = Math.max(max, b.price);
      for (Bid b : bids) {
        if (b.price == max) out.collect(Tuple3.of(ctx.window().getStart(), window, b));
      }
    }
  }

  static final class BidChecksum extends RichSinkFunction<Tuple3<Long, Long, Bid>> {
    @Override
    public void invoke(Tuple3<Long, Long, Bid> row, Context ctx) {
      final Bid b = row.f2;
      ROWS.incrementAndGet();
      CHECKSUM.addAndGet(rowHash(row.f0, row.f1, b.auction, b.bidder, b.price, b.time));
    }

    @Override
    public void finish() {
      END_NS.set(System.nanoTime());
      END_CPU_NS.set(cpuNanos());
    }
  }

  static final class Count implements AggregateFunction<Tuple2<Long, Long>, Long, Long> {
    public Long createAccumulator() {
      return 0L;
    }

    public Long add(Tuple2<Long, Long> v, Long acc) {
      return acc + 1;
    }

    public Long getResult(Long acc) {
      return acc;
    }

    public Long merge(Long a, Long b) {
      return a + b;
    }
  }

  static final class WithWindow
      extends ProcessWindowFunction<Long, Tuple3<Long, Long, Long>, Long, TimeWindow> {
    @Override
    public void process(Long campaign, Context ctx, Iterable<Long> counts,
        Collector<Tuple3<Long, Long, Long>> out) {
      for (Long n : counts) out.collect(Tuple3.of(ctx.window().getStart(), campaign, n));
    }
  }

  static final class Checksum extends RichSinkFunction<Tuple3<Long, Long, Long>> {
    @Override
    public void invoke(Tuple3<Long, Long, Long> row, Context ctx) {
      ROWS.incrementAndGet();
      CHECKSUM.addAndGet(rowHash(row.f0, row.f1, row.f2));
    }

    // The last row is in once the input has ended here.
    @Override
    public void finish() {
      END_NS.set(System.nanoTime());
      END_CPU_NS.set(cpuNanos());
    }
  }

  static void usage(String why) {
    System.err.println("flink-peer: " + why);
    System.err.println("usage: FlinkPeer [--query ysb|nb7] [--parallelism T] [--records N]"
        + " [--keys K] [--window-ms W] [--rate R] [--max-price P] [--seed S]");
    System.exit(2);
  }

  public static void main(String[] args) throws Exception {
    int parallelism = 1;
    String query = "ysb";
    long records = 10_000_000L, keys = 0, windowMs = 0, rate = 1000, maxPrice = 100_000_000L;
    long seed = 1;
    for (int i = 0; i < args.length; i += 2) {
      if (i + 1 >= args.length) usage(args[i] + " needs a value");
      if (args[i].equals("--query")) {
        query = args[i + 1];
        if (!query.equals("ysb") && !query.equals("nb7")) {
          usage("--query is ysb or nb7, not '" + query + "'");
        }
        continue;
      }
      final long v;
      try {
        v = Long.parseLong(args[i + 1]);
      } catch (NumberFormatException e) {
        usage(args[i] + " takes a number, not '" + args[i + 1] + "'");
        return;
      }
      switch (args[i]) {
        case "--parallelism": parallelism = (int) Math.max(1, v); break;
        case "--records": records = v; break;
        case "--keys": keys = Math.max(1, v); break;
        case "--window-ms": windowMs = Math.max(1, v); break;
        case "--rate": rate = Math.max(1, v); break;
        case "--max-price": maxPrice = Math.max(1, v); break;
        case "--seed": seed = v; break;
        default: usage("unknown option '" + args[i] + "'");
      }
    }
    final boolean nb7 = query.equals("nb7");
    // The queries' defaults, as sluice-stream's.
    if (keys == 0) keys = nb7 ? 10_000 : 100;
    if (windowMs == 0) windowMs = nb7 ? 60_000 : 1000;
    generated = new CountDownLatch(parallelism);
    final StreamExecutionEnvironment env =
        StreamExecutionEnvironment.createLocalEnvironment(parallelism);
    env.getConfig().disableGenericTypes();
    if (nb7) {
      final long size = windowMs;
      env.addSource(new BidSource(records, keys, rate, maxPrice, seed))
          .returns(Bid.class)
          .assignTimestampsAndWatermarks(WatermarkStrategy.<Bid>forMonotonousTimestamps()
              .withTimestampAssigner((b, ts) -> b.time))
          .keyBy(b -> b.time / size, org.apache.flink.api.common.typeinfo.Types.LONG)
          .window(TumblingEventTimeWindows.of(Time.milliseconds(windowMs)))
          .process(new HighestBids())
          .returns(org.apache.flink.api.common.typeinfo.Types.TUPLE(
              org.apache.flink.api.common.typeinfo.Types.LONG,
              org.apache.flink.api.common.typeinfo.Types.LONG,
              org.apache.flink.api.common.typeinfo.Types.POJO(Bid.class)))
          .addSink(new BidChecksum())
          .setParallelism(1);
    } else {
      env.addSource(new Source(records, keys, rate, seed))
          .returns(Event.class)
          .filter(e -> e.eventType == 0)
          .map(e -> Tuple2.of(e.campaignId, e.eventTime))
          .returns(org.apache.flink.api.common.typeinfo.Types.TUPLE(
              org.apache.flink.api.common.typeinfo.Types.LONG,
              org.apache.flink.api.common.typeinfo.Types.LONG))
          .assignTimestampsAndWatermarks(
              WatermarkStrategy.<Tuple2<Long, Long>>forMonotonousTimestamps()
                  .withTimestampAssigner((v, ts) -> v.f1))
          .keyBy(v -> v.f0, org.apache.flink.api.common.typeinfo.Types.LONG)
          .window(TumblingEventTimeWindows.of(Time.milliseconds(windowMs)))
          .aggregate(new Count(), new WithWindow())
          .addSink(new Checksum())
          .setParallelism(1);
    }
    env.execute("flink-peer");
    final double seconds = (END_NS.get() - START_NS.get()) / 1e9;
    final double cpu = (END_CPU_NS.get() - START_CPU_NS.get()) / 1e9;
    System.out.printf("{\"program\":\"flink-peer\",\"query\":\"%s\",\"parallelism\":%d,"
            + "\"records\":%d,\"rows\":%d,\"checksum\":\"%016x\",\"seconds\":%.6f,"
            + "\"cpu_seconds\":%.3f}%n",
        query, parallelism, records, ROWS.get(), CHECKSUM.get(), seconds, cpu);
  }
}
