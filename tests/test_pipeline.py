"""The Spark pipeline (pipeline/): the tstream data source and sink, in Spark local mode
against real servers, plus the pieces that need no Spark (planning, paging, snapshots).

One SparkSession (local[2], no UI) serves the whole module; keep the Spark tests few
and small: each Spark job costs ~0.5-2 s on two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from tstream.pipeline.common import DataLossError, OptionError, Options, as_map, node_ranges, replica_addresses
from tstream.pipeline.server_read import PREFETCH, read_range
from tstream.pipeline.sink import write_prefix, write_rows

from .conftest import free_port


def url(server) -> str:
    return f"redis://127.0.0.1:{server.port}"


def opts(server, **extra) -> Options:
    return Options.parse({"url": url(server), "key": "k", **{k: str(v) for k, v in extra.items()}})


def fill(client, key: str, count: int, tags: int = 5, start: int = 0, chunk: int = 5000) -> None:
    """Entries ``e<i>`` with tags ``t<i % tags>``, i from ``start``."""
    for lo in range(start, start + count, chunk):
        hi = min(lo + chunk, start + count)
        flat = [x for i in range(lo, hi) for x in (f"t{i % tags}", f"e{i}")]
        client.execute_command("TWRITE", key, "ENTRIES", *flat)


def held(client, key: str) -> list[tuple[int, str, bytes]]:
    rows = client.execute_command("TREAD", key, "-", 10**9)
    return [(o, t.decode(), e) for o, t, e in (r for r in rows if r is not None)]


def micros(rfc3339: bytes) -> int:
    """DGET's RFC 3339 time as microseconds since the epoch (truncated, as Spark's)."""
    text = rfc3339.decode()
    whole = datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    return int(whole.timestamp()) * 1_000_000 + int(text[20:26])


def offsets_of(batches) -> list[int]:
    return [o for b in batches for o in b.column(0).to_pylist()]


# ---------------------------------------------------------------------------
# Spark
# ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tstream import pipeline

    session = (SparkSession.builder.master("local[2]").appName("tstream-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    pipeline.register(session)
    yield session
    session.stop()


def read(spark, server, **options):
    reader = spark.read.format("tstream").option("url", url(server)).option("key", "k")
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


def test_round_trip_write_then_read(spark, server):
    r = server.client()
    rows = [(f"t{i % 7}", f"entry {i}".encode()) for i in range(3000)]
    before = time.time_ns()
    df = spark.createDataFrame(rows, "tag string, entry binary").coalesce(1)
    df.write.format("tstream").option("url", url(server)).option("key", "k") \
        .option("batchSize", 256).mode("append").save()
    after = time.time_ns()
    # One task, chunks of 256 rows in row order: the log is the DataFrame.
    assert held(r, "k") == [(i + 1, t, e) for i, (t, e) in enumerate(rows)]

    got = read(spark, server).orderBy("offset").collect()
    assert [(x.offset, x.tag, x.entry) for x in got] == [(i + 1, t, e) for i, (t, e) in enumerate(rows)]
    times = [x.us for x in read(spark, server).selectExpr("unix_micros(time) as us").collect()]
    assert all(before // 1000 <= t <= after // 1000 for t in times)  # filled from DGET
    assert times == sorted(times)

    # A reader stopped early (limit) closes its pipelined requests cleanly.
    assert len(read(spark, server, pageSize=100).limit(5).collect()) == 5
    assert len(read(spark, server, pageSize=100, withTime="false").limit(150).collect()) == 150
    assert r.ping()

    # TREAD path (no times) and rows as tuples instead of Arrow batches: same rows.
    plain = read(spark, server, withTime="false", arrow="false", readMode="pages").orderBy("offset").collect()
    assert [(x.offset, x.tag, x.entry, x.time) for x in plain] == \
        [(x.offset, x.tag, x.entry, None) for x in got]

    # A string entry column, and a DataFrame read from tstream written back (extra columns ignored).
    spark.createDataFrame([("a", "hello"), ("b", "")], "tag string, entry string").coalesce(1) \
        .write.format("tstream").option("url", url(server)).option("key", "s").mode("append").save()
    assert held(r, "s") == [(1, "a", b"hello"), (2, "b", b"")]
    read(spark, server, endingOffset=10).write.format("tstream").option("url", url(server)) \
        .option("key", "copy").mode("append").save()
    assert sorted((t, e) for _, t, e in held(r, "copy")) == sorted(rows[:10])


def test_partitions_are_ranges_of_macro_nodes(spark, make_server):
    server = make_server("--save", "", "--node-entries", "100")
    r = server.client()
    fill(r, "k", 1050)
    r.execute_command("TEVICT", "k", 130)
    from pyspark.sql.functions import max as fmax
    from pyspark.sql.functions import min as fmin
    from pyspark.sql.functions import spark_partition_id

    df = read(spark, server, numPartitions=4)
    assert df.rdd.getNumPartitions() == 4
    spans = sorted(tuple(x) for x in df.groupBy(spark_partition_id().alias("p"))
                   .agg(fmin("offset"), fmax("offset")).select("min(offset)", "max(offset)").collect())
    # Nodes 2..11 (offsets 101..1050, first 131): 10 nodes in 4 ranges of whole nodes.
    assert spans == [(131, 300), (301, 600), (601, 800), (801, 1050)]
    assert read(spark, server, nodesPerPartition=3).rdd.getNumPartitions() == 4
    assert read(spark, server).count() == 920

    part = read(spark, server, startingOffset=250, endingOffset=420, nodesPerPartition=1)
    assert part.rdd.getNumPartitions() == 3
    assert [x.offset for x in part.orderBy("offset").collect()] == list(range(250, 421))
    assert read(spark, server, startingOffset=5000).count() == 0
    # A key that does not exist is an error, unless allowMissing.
    with pytest.raises(Exception, match="key 'nope' does not exist.*allowMissing"):
        spark.read.format("tstream").option("url", url(server)).option("key", "nope").load().count()
    assert spark.read.format("tstream").option("url", url(server)).option("key", "nope") \
        .option("allowMissing", "true").load().count() == 0


@pytest.mark.parametrize("with_time", [True, False], ids=["dget", "tread"])
def test_eviction_while_spark_reads(spark, server, with_time):
    r = server.client()
    total = 30000
    fill(r, "k", total)
    expected = {o: (t, e) for o, t, e in held(r, "k")}
    stop = threading.Event()

    def evict():
        client = server.client()
        upto = 0
        while not stop.is_set() and upto < total - 5000:
            upto += 500
            client.execute_command("TEVICT", "k", upto)
            time.sleep(0.02)

    evictor = threading.Thread(target=evict)
    evictor.start()
    try:
        got = read(spark, server, pageSize=100, numPartitions=2, withTime=with_time,
                   failOnDataLoss="false").collect()
    finally:
        stop.set()
        evictor.join()
    first = as_map(r.execute_command("TINFO", "k"))["first"]
    offsets = [x.offset for x in got]
    assert len(offsets) == len(set(offsets))                       # nothing twice
    assert set(range(first, total + 1)) <= set(offsets)            # nothing held lost
    assert all((x.tag, x.entry) == (expected[x.offset][0], expected[x.offset][1]) for x in got)


def test_streaming_available_now_restart_and_data_loss(spark, server, tmp_path):
    r = server.client()
    fill(r, "k", 2500)
    checkpoint = str(tmp_path / "checkpoint")

    def run(**options):
        reader = (spark.readStream.format("tstream").option("url", url(server)).option("key", "k")
                  .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 1000))
        for name, value in options.items():
            reader = reader.option(name, str(value))
        query = (reader.load().writeStream.format("tstream").option("url", url(server))
                 .option("key", "copy").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
        # (a micro-batch replayed from the checkpoint reports no latestOffset: Spark does not ask)
        lags.append([(json.loads(p["sources"][0]["latestOffset"] or "null") or {}).get("maxOffsetsBehindLatest")
                     for p in query.recentProgress if p["numInputRows"]])
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    def copied():
        return sorted(int(e[1:]) for _, _, e in held(r, "copy"))

    lags = []
    assert run() == [1000, 1000, 500]
    assert lags == [[1500, 500, 0]]     # offsets behind latest after each micro-batch, in its progress
    assert copied() == list(range(2500))
    fill(r, "k", 700, start=2500)
    assert run() == [700]                      # restarted from the checkpoint: only what is new
    assert copied() == list(range(3200))

    # Offsets 3201..3300 are evicted before the query reads them: data loss.
    fill(r, "k", 300, start=3200)
    r.execute_command("TEVICT", "k", 3300)
    with pytest.raises(Exception, match="failOnDataLoss") as failure:
        run()
    assert "offsets 3201 to 3300" in str(failure.value)
    assert copied() == list(range(3200))
    assert run(failOnDataLoss="false") == [200]  # the same batch again, skipping what is gone
    assert copied() == list(range(3200)) + list(range(3300, 3500))


def test_offline_snapshot_read(spark, make_server, tmp_path):
    server = make_server("--save", "", "--node-entries", "100", directory=tmp_path)
    r = server.client()
    fill(r, "k", 1234, tags=4)
    fill(r, "other", 10)
    r.execute_command("TEVICT", "k", 150)
    r.execute_command("TCONFIG", "k", "SET", "max_msgs_per_subject", 250)  # deletes inside nodes
    for i in range(37):
        r.execute_command("TWRITE", "k", "t9" if i % 2 else "t1", f"x{i}")  # a partial last node
    expected = held(r, "k")
    times = {m[b"seq"]: micros(m[b"time"])
             for m in server.client(protocol=3).execute_command("DGET", "k", "SEQ", 1, "BATCH", 10000)[:-1]}
    r.save()
    server.stop()  # no server from here on

    path = str(tmp_path / "dump.tsr")
    df = spark.read.format("tstream").option("path", path).option("key", "k").option("numPartitions", 3).load()
    assert df.rdd.getNumPartitions() == 3
    got = df.orderBy("offset").collect()
    assert [(x.offset, x.tag, x.entry) for x in got] == expected
    stamps = dict(df.selectExpr("offset", "unix_micros(time)").collect())
    assert stamps == {o: times[o] for o, _, _ in expected}  # the engine's times, to the microsecond
    window = spark.read.format("tstream").option("path", path).option("key", "k") \
        .option("startingOffset", 1000).option("endingOffset", 1100).load()
    assert [x.offset for x in window.orderBy("offset").collect()] == [o for o, _, _ in expected
                                                                       if 1000 <= o <= 1100]
    with pytest.raises(Exception, match="key 'nope' does not exist in the snapshot"):
        spark.read.format("tstream").option("path", path).option("key", "nope").load().count()
    assert spark.read.format("tstream").option("path", path).option("key", "nope") \
        .option("allowMissing", "true").load().count() == 0


def test_sink_failed_task_leaves_whole_chunks_only(spark, server):
    r = server.client()
    rows = [(None if i == 35 else f"t{i % 3}", f"row {i}") for i in range(60)]
    df = spark.createDataFrame(rows, "tag string, entry string").coalesce(1)
    with pytest.raises(Exception, match="null tag"):
        df.write.format("tstream").option("url", url(server)).option("key", "k") \
            .option("batchSize", 10).mode("append").save()
    # Chunks [0, 10) [10, 20) [20, 30) were committed; [30, 40) holds the bad row: none of it.
    assert held(r, "k") == [(i + 1, f"t{i % 3}", f"row {i}".encode()) for i in range(30)]

    with pytest.raises(Exception, match="append-only"):
        spark.createDataFrame([("a", "b")], "tag string, entry string").write.format("tstream") \
            .option("url", url(server)).option("key", "k").mode("overwrite").save()
    with pytest.raises(Exception, match="must be string or binary"):
        spark.createDataFrame([("a", 1)], "tag string, entry int").write.format("tstream") \
            .option("url", url(server)).option("key", "k").mode("append").save()


def test_jobs_compaction_and_tag_counts(spark, server, tmp_path):
    from tstream.pipeline.jobs import compact, tag_counts

    r = server.client()
    fill(r, "k", 2000, tags=6)
    assert compact.main(["--url", url(server), "--key", "k", "--target", "k.compact"], spark=spark) == 0
    assert held(r, "k.compact") == [(i + 1, f"t{o % 6}", f"e{o}".encode())
                                    for i, o in enumerate(range(1994, 2000))]

    out = str(tmp_path / "counts")
    assert tag_counts.main(["--url", url(server), "--key", "k", "--output", out], spark=spark) == 0
    counts = spark.read.parquet(out).collect()
    assert sum(x["count"] for x in counts) == 2000
    assert {x.tag for x in counts} == {f"t{i}" for i in range(6)}
    assert all(x.minute.second == 0 and x.minute.microsecond == 0 for x in counts)


def test_password_url_and_option(spark, make_server):
    server = make_server("--save", "", "--requirepass", "s3cret")
    r = server.client(password="s3cret")
    fill(r, "k", 10)
    base = f"redis://:s3cret@127.0.0.1:{server.port}"
    assert spark.read.format("tstream").option("url", base).option("key", "k").load().count() == 10
    assert spark.read.format("tstream").option("url", f"redis://127.0.0.1:{server.port}") \
        .option("password", "s3cret").option("key", "k").load().count() == 10


def test_several_keys(spark, server, tmp_path):
    from pyspark.sql.functions import countDistinct, spark_partition_id

    r = server.client()
    fill(r, "a.1", 250)
    fill(r, "a.2", 120)
    fill(r, "b", 50)

    def load(**options):
        reader = spark.read.format("tstream").option("url", url(server)).option("nodeEntries", 100) \
            .option("nodesPerPartition", 1)
        for name, value in options.items():
            reader = reader.option(name, str(value))
        return reader.load()

    df = load(keys="a.1, b")
    assert sorted((x.key, x.offset) for x in df.select("key", "offset").collect()) == \
        [("a.1", o) for o in range(1, 251)] + [("b", o) for o in range(1, 51)]
    assert df.rdd.getNumPartitions() == 4                # 3 node ranges of a.1, 1 of b
    per_partition = df.groupBy(spark_partition_id()).agg(countDistinct("key").alias("n")).collect()
    assert {x.n for x in per_partition} == {1}           # never two streams in one partition
    got = load(keyPattern="a.*").groupBy("key").count().collect()
    assert sorted((x.key, x["count"]) for x in got) == [("a.1", 250), ("a.2", 120)]
    # Offsets by key, as Kafka's JSON.
    got = load(keys="a.1,a.2", startingOffset='{"a.1": 201}', endingOffset='{"a.2": 10}').collect()
    assert sorted((x.key, x.offset) for x in got) == \
        [("a.1", o) for o in range(201, 251)] + [("a.2", o) for o in range(1, 11)]
    # A list in `key` is not a key: an error that names the options meant.
    with pytest.raises(Exception, match="does not exist.*use the option keys"):
        load(key="a.1,b").count()
    with pytest.raises(Exception, match="no key matches keyPattern 'zz\\*'"):
        load(keyPattern="zz*").count()
    with pytest.raises(Exception, match="give one of the options key, keys and keyPattern"):
        load(key="b", keys="a.1").count()

    # Streaming over a pattern: per-stream offsets in the checkpoint; a new stream joins.
    seen = []
    checkpoint = tmp_path / "checkpoint"

    def run():
        query = (spark.readStream.format("tstream").option("url", url(server)).option("keyPattern", "a.*")
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 100).load()
                 .writeStream.foreachBatch(lambda batch, _: seen.extend(
                     (x.key, x.offset) for x in batch.select("key", "offset").collect()))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            query.awaitTermination(120)
        finally:
            query.stop()

    run()
    assert sorted(seen) == [("a.1", o) for o in range(1, 251)] + [("a.2", o) for o in range(1, 121)]
    last = max((checkpoint / "offsets").iterdir(), key=lambda f: int(f.name) if f.name.isdigit() else -1)
    assert json.loads(last.read_text().splitlines()[-1]) == {"offsets": {"a.1": 251, "a.2": 121}}
    fill(r, "a.2", 10, start=120)
    fill(r, "a.3", 7)
    seen.clear()
    run()
    assert sorted(seen) == [("a.2", o) for o in range(121, 131)] + [("a.3", o) for o in range(1, 8)]


def two_halves(r, key: str = "k") -> tuple[datetime, int]:
    """Offsets 1..500 then 501..1000, written on either side of a time (returned as
    a datetime with microseconds and as ms since the epoch)."""
    fill(r, key, 500)
    time.sleep(0.005)
    ms = time.time_ns() // 1_000_000 + 1
    while time.time_ns() < ms * 1_000_000 + 2_000_000:
        time.sleep(0.001)
    fill(r, key, 500, start=500)
    return datetime.fromtimestamp(ms / 1000, timezone.utc), ms


def test_filters_narrow_the_read(spark, server):
    from pyspark.sql.functions import col, lit

    r = server.client()
    cut, ms = two_halves(r)
    fill(r, "other", 10)
    df = read(spark, server, nodeEntries=100, nodesPerPartition=1)
    assert df.rdd.getNumPartitions() == 10

    def check(where, offsets, partitions):
        got = df.where(where)
        assert sorted(x.offset for x in got.select("offset").collect()) == list(offsets)
        assert got.rdd.getNumPartitions() == partitions, where

    check("offset > 900", range(901, 1001), 1)
    check("offset >= 250 and offset <= 420", range(250, 421), 3)
    check("offset < 101", range(1, 101), 1)
    check("offset = 777", [777], 1)
    check("offset in (5, 150)", [5, 150], 2)
    check(col("time") >= lit(cut), range(501, 1001), 5)
    check(col("time") < lit(cut), range(1, 501), 5)
    check((col("time") > lit(cut)) & (col("offset") < 700), range(501, 700), 2)
    check("tag = 't3' and offset <= 300", [o for o in range(1, 301) if (o - 1) % 5 == 3], 3)
    check("offset > 2000", [], 1)  # nothing to read (Spark plans one empty partition then)
    # keys: a key filter keeps the streams it names
    several = spark.read.format("tstream").option("url", url(server)).option("keys", "k,other").load()
    assert several.where("key = 'other'").rdd.getNumPartitions() == 1
    assert several.where("key = 'other'").count() == 10
    # Kafka's startingTimestamp / endingTimestamp (ms): by write time, not checked again by Spark.
    assert [x.offset for x in read(spark, server, startingTimestamp=ms).select("offset").collect()] == \
        list(range(501, 1001))
    assert read(spark, server, endingTimestamp=ms).count() == 500
    assert read(spark, server, startingTimestamp=ms, endingOffset=600).count() == 100
    with pytest.raises(Exception, match="startingTimestamp or startingOffset, not both"):
        read(spark, server, startingTimestamp=ms, startingOffset=3).count()


def test_pushed_tag_reads_only_that_tag(server):
    """Without Spark: what a task reads once tag = 't3' is pushed (through the subject index)."""
    from pyspark.sql.datasource import EqualTo, GreaterThan

    from tstream.pipeline.source import TStreamReader

    r = server.client()
    fill(r, "k", 3000, tags=6)
    for with_time in ("true", "false"):
        reader = TStreamReader(opts(server, pageSize=100, withTime=with_time))
        filters = [EqualTo(("tag",), "t3"), GreaterThan(("offset",), 100)]
        assert list(reader.pushFilters(filters)) == filters     # Spark checks them again
        batches = [b for part in reader.partitions() for b in reader.read(part)]
        assert offsets_of(batches) == [o for o in range(101, 3001) if (o - 1) % 6 == 3]
        assert {t for b in batches for t in b.column("tag").to_pylist()} == {"t3"}
    r.execute_command("TCONFIG", "k", "SET", "allow_direct", "no")  # no subject index: every entry, Spark filters
    reader = TStreamReader(opts(server))
    list(reader.pushFilters([EqualTo(("tag",), "t3")]))
    assert sum(b.num_rows for part in reader.partitions() for b in reader.read(part)) == 3000


TAGS = ["orders.eu.created", "orders.eu.paid", "orders.us.created", "orders.europe", "orders..x", "other",
        "orders.eu.x y"]


def test_pushed_tag_prefix_reads_through_the_subject_index(server):
    """Without Spark: tag startswith 'x.y.' reads NEXT_BY_SUBJ x.y.> (tags that are
    not valid subjects too), a prefix ending inside a token its whole tokens."""
    from pyspark.sql.datasource import EqualTo, StringStartsWith

    from tstream.pipeline.pushdown import Pushed, push
    from tstream.pipeline.source import TStreamReader

    r = server.client()
    for lo in range(0, 1400, 700):
        r.execute_command("TWRITE", "k", "ENTRIES", *[x for i in range(lo, lo + 700) for x in (TAGS[i % 7], f"e{i}")])

    def tags_read(*filters) -> list[str]:
        reader = TStreamReader(opts(server, pageSize=50))
        list(reader.pushFilters(list(filters)))
        return [t for part in reader.partitions() for b in reader.read(part) for t in b.column("tag").to_pylist()]

    r.execute_command("CONFIG", "RESETSTAT")
    got = tags_read(StringStartsWith(("tag",), "orders.eu."))
    assert got == [TAGS[i % 7] for i in range(1400) if TAGS[i % 7].startswith("orders.eu.")]
    assert "cmdstat_tnodes" not in r.info("commandstats")            # through DGET NEXT_BY_SUBJ only
    got = tags_read(StringStartsWith(("tag",), "orders.eu"))        # a superset: orders.>
    assert got == [TAGS[i % 7] for i in range(1400) if TAGS[i % 7].startswith("orders.")]
    assert len(tags_read(StringStartsWith(("tag",), "ord"))) == 1400  # no whole token: not pushed

    def pushed(*filters) -> Pushed:
        return push(list(filters), Pushed())

    assert pushed(StringStartsWith(("tag",), "a.b.c")).subject_filter == "a.b.>"
    assert pushed(StringStartsWith(("tag",), "a.b"), StringStartsWith(("tag",), "a.b.c.")).subject_filter == "a.b.c.>"
    assert pushed(StringStartsWith(("tag",), "a.b"), StringStartsWith(("tag",), "a.c")).empty
    assert pushed(StringStartsWith(("tag",), "a.b"), EqualTo(("tag",), "a.b.c")).subject_filter == "a.b.c"
    assert pushed(EqualTo(("tag",), "a.c"), StringStartsWith(("tag",), "a.b")).empty
    assert pushed(StringStartsWith(("tag",), "a..b.")).subject_filter is None      # an empty token
    assert pushed(StringStartsWith(("tag",), "a.*.b.")).subject_filter is None     # a wildcard


def test_tag_prefix_filter_with_spark(spark, server):
    r = server.client()
    r.execute_command("TWRITE", "k", "ENTRIES", *[x for i in range(700) for x in (TAGS[i % 7], f"e{i}")])
    df = read(spark, server)
    cases = {"tag like 'orders.eu.%'": lambda o, t: t.startswith("orders.eu."),
             "startswith(tag, 'orders.eu')": lambda o, t: t.startswith("orders.eu"),
             "tag like 'orders.eu%' and offset > 100": lambda o, t: t.startswith("orders.eu") and o > 100}
    r.execute_command("CONFIG", "RESETSTAT")
    for where, keep in cases.items():
        got = sorted((x.offset, x.tag) for x in df.where(where).select("offset", "tag").collect())
        want = [(i + 1, TAGS[i % 7]) for i in range(700) if keep(i + 1, TAGS[i % 7])]
        assert got == want, where
    assert "cmdstat_tnodes" not in r.info("commandstats")   # every read went through the subject index


def test_options_are_validated(spark, server, tmp_path):
    r = server.client()
    fill(r, "k", 1000)
    # A typo is refused at load(), with the name meant, in batch and streaming.
    with pytest.raises(Exception, match="unknown option 'startingofset'; did you mean 'startingOffset'"):
        read(spark, server, startingOfset=500)
    with pytest.raises(Exception, match="unknown option 'maxoffsetpertrigger'; did you mean 'maxOffsetsPerTrigger'"):
        spark.readStream.format("tstream").option("url", url(server)).option("key", "k") \
            .option("maxOffsetPerTrigger", 10).load()
    # A bad value: at load() too, for streaming as well (not an UnboundLocalError at start()).
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be >= 1, got -5") as failure:
        spark.readStream.format("tstream").option("url", url(server)).option("key", "k") \
            .option("maxOffsetsPerTrigger", -5).load()
    assert "UnboundLocalError" not in str(failure.value)
    # An option of the other kind of query: batch refuses it at planning, streaming when it starts.
    with pytest.raises(Exception, match="'maxOffsetsPerTrigger' applies to streaming reads"):
        read(spark, server, maxOffsetsPerTrigger=10).count()
    query = (spark.readStream.format("tstream").option("url", url(server)).option("key", "k")
             .option("endingOffset", 10).load().writeStream.format("memory").queryName("refused")
             .option("checkpointLocation", str(tmp_path / "c1")).start())
    with pytest.raises(Exception, match="'endingOffset' applies to batch reads") as failure:
        query.awaitTermination(60)
    query.stop()
    assert "UnboundLocalError" not in str(failure.value)
    # The schema: names and types.
    with pytest.raises(Exception, match="the read schema is fixed"):
        spark.read.format("tstream").schema("offset string, tag string, entry binary, time timestamp, key string") \
            .option("url", url(server)).option("key", "k").load().count()
    with pytest.raises(Exception, match="the read schema is fixed"):
        spark.read.format("tstream").schema("offset long, tag string, entry binary, time timestamp") \
            .option("url", url(server)).option("key", "k").load().count()
    assert spark.read.format("tstream").schema("offset long, tag string, entry binary, time timestamp, key string") \
        .option("url", url(server)).option("key", "k").load().count() == 1000
    # minPartitions: ranges split below a node when the nodes are too few.
    df = read(spark, server, minPartitions=4)
    assert df.rdd.getNumPartitions() == 4
    assert sorted(x.offset for x in df.select("offset").collect()) == list(range(1, 1001))
    # failOnDataLoss in batch: asking for evicted offsets is an error unless false.
    r.execute_command("TEVICT", "k", 300)
    with pytest.raises(Exception, match="offsets 100 to 300 of key 'k' were evicted"):
        read(spark, server, startingOffset=100).count()
    assert read(spark, server, startingOffset=100, failOnDataLoss="false").count() == 700
    assert read(spark, server).count() == 700                 # earliest: what is held


# ---------------------------------------------------------------------------
# Without Spark: planning, paging, the streaming reader's offsets, snapshots, the sink
# ---------------------------------------------------------------------------

def test_node_ranges():
    o = Options.parse({"key": "k", "nodesPerPartition": "2"})
    assert node_ranges(1, 1000, 100, o) == [(1, 200), (201, 400), (401, 600), (601, 800), (801, 1000)]
    assert node_ranges(150, 420, 100, o) == [(150, 300), (301, 420)]
    assert node_ranges(5, 4, 100, o) == []
    assert len(node_ranges(1, 10**6, 1000, Options.parse({"key": "k"}))) == 4  # 250 nodes each
    o = Options.parse({"key": "k", "numPartitions": "3"})
    assert node_ranges(1, 1000, 100, o) == [(1, 300), (301, 600), (601, 1000)]
    assert node_ranges(1, 150, 100, o) == [(1, 100), (101, 150)]  # never more than the nodes


def test_options_are_checked():
    for bad in ({"numPartitions": "0"}, {"startingOffset": "first"}, {"withTime": "maybe"},
                {"batchSize": "x"}, {"endingOffset": "earliest"}, {"maxOffsetsPerTrigger": "-1"}):
        with pytest.raises(OptionError):
            Options.parse({"key": "k", **bad})
    with pytest.raises(OptionError, match="key"):
        Options.parse({}).require_key()
    with pytest.raises(OptionError, match="unknown option 'startingOfset'; did you mean 'startingOffset'"):
        Options.parse({"key": "k", "startingOfset": "5"})
    with pytest.raises(OptionError, match="'maxOffsetsPerTrigger' applies to streaming reads"):
        Options.parse({"key": "k", "maxOffsetsPerTrigger": "5"}, mode="r")
    with pytest.raises(OptionError, match="'batchSize' applies to writes"):
        Options.parse({"key": "k", "batchSize": "5"}, mode="s")
    assert Options.parse({"KEY": "k", "PageSize": "7"}, mode="r").page_size == 7
    o = Options.parse({"key": "k"}, streaming=True)
    assert (o.starting, o.fail_on_data_loss, o.with_time) == ("latest", True, True)


@pytest.mark.parametrize("with_time", [True, False], ids=["dget", "tread"])
def test_read_range_eviction_between_pages(server, with_time):
    r = server.client()
    fill(r, "k", 1000)
    pages = read_range(opts(server, pageSize=100, withTime=with_time, readMode="pages"), 1, 1000)
    got = [next(pages)]
    while offsets_of(got)[-1] < 200:          # offsets 1..200 read (TREAD probes with 4 entries first)
        got.append(next(pages))
    r.execute_command("TEVICT", "k", 450)     # 201..450 go, unless already served (prefetch)
    got += list(pages)
    offsets = offsets_of(got)
    served = [o for o in offsets if 200 < o <= 450]
    assert served == list(range(201, 201 + len(served))) and len(served) <= 100 * PREFETCH
    assert offsets == list(range(1, 201)) + served + list(range(451, 1001))
    # The streaming reader calls it with fail_on_loss: same eviction is data loss.
    r.delete("k")
    fill(r, "k", 1000)
    pages = read_range(opts(server, pageSize=100, withTime=with_time, readMode="pages"), 1, 1000, fail_on_loss=True)
    while next(pages).column(0)[-1].as_py() < 100:
        pass
    r.execute_command("TEVICT", "k", 450)
    with pytest.raises(DataLossError, match=r"offsets [12]01 to 450 .*failOnDataLoss"):
        list(pages)
    # Deleted entries above `first` (per-subject limit) are not loss, just absent.
    r.delete("k")
    fill(r, "k", 100, tags=2)  # t0 at odd offsets, t1 at even ones, then 20 more t1
    r.execute_command("TWRITE", "k", "ENTRIES", *["t1", "x"] * 20)
    r.execute_command("TCONFIG", "k", "SET", "max_msgs_per_subject", 30)
    first = as_map(r.execute_command("TINFO", "k"))["first"]
    rows = offsets_of(read_range(opts(server, pageSize=7, withTime=with_time, readMode="pages"), first, 120,
                                 fail_on_loss=True))
    assert rows == [o for o, _, _ in held(r, "k")] and len(rows) == 60
    assert first == 41 and 42 not in rows  # even offsets 42..80 are deleted, not evicted


def test_read_range_times_and_fallback(server):
    r = server.client()
    fill(r, "k", 5)
    batch = pa.Table.from_batches(list(read_range(opts(server, readMode="pages"), 1, 5)))
    assert batch.column("time").null_count == 0
    by_nodes = pa.Table.from_batches(list(read_range(opts(server), 1, 5)))  # TNODES: the same times
    assert by_nodes.column("time").to_pylist() == batch.column("time").to_pylist()
    r.execute_command("TCONFIG", "k", "SET", "allow_direct", "no")  # DGET answers 503: TREAD, no times
    batch = pa.Table.from_batches(list(read_range(opts(server, readMode="pages"), 1, 5)))
    assert batch.column("offset").to_pylist() == [1, 2, 3, 4, 5]
    assert batch.column("time").null_count == 5


def test_stream_reader_offsets(server):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from tstream.pipeline.streaming import TStreamStreamReader

    r = server.client()

    def reader(**extra):
        return TStreamStreamReader(Options.parse({"url": url(server), "key": "k",
                                                  **{k: str(v) for k, v in extra.items()}}, streaming=True))

    def at(n: int) -> dict:
        return {"offsets": {"k": n}}

    with pytest.raises(Exception, match="does not exist"):
        reader().initialOffset()
    assert reader(allowMissing="true").initialOffset() == at(1)        # no key yet
    fill(r, "k", 500)
    r.execute_command("TEVICT", "k", 100)
    assert reader(startingOffsets="earliest").initialOffset() == at(101)
    assert reader().initialOffset() == at(501)                          # latest
    assert reader(startingOffsets=42).initialOffset() == at(42)
    s = reader(maxOffsetsPerTrigger=150)
    assert s.getDefaultReadLimit() == ReadMaxRows(150)
    start = at(101)
    assert s.latestOffset(start, ReadMaxRows(150)) == at(251)
    assert s.reportLatestOffset() == {**at(501), "offsetsBehindLatest": {"k": 250}, "minOffsetsBehindLatest": 250,
                                      "maxOffsetsBehindLatest": 250, "avgOffsetsBehindLatest": 250.0}
    assert s.latestOffset(start, ReadAllAvailable()) == at(501)
    assert s.latestOffset({"key": "k", "offset": 101}, ReadAllAvailable()) == at(501)  # an old checkpoint
    s.prepareForTriggerAvailableNow()
    fill(r, "k", 100, start=500)
    assert s.latestOffset(at(501), ReadAllAvailable()) == at(501)  # stops
    assert reader().latestOffset(at(501), ReadAllAvailable()) == at(601)
    assert [(p.key, p.lo, p.hi) for p in s.partitions(start, at(601))] == [("k", 101, 600)]
    assert s.partitions(start, start) == []
    with pytest.raises(DataLossError, match="offsets 50 to 100"):
        s.partitions(at(50), at(200))
    assert reader(failOnDataLoss="false").partitions(at(50), at(200))
    with pytest.raises(ValueError, match="new checkpoint"):
        s.partitions({"key": "other", "offset": 1}, {"key": "other", "offset": 5})
    r.delete("k")
    fill(r, "k", 10)  # the key is written again from offset 1: the checkpoint is ahead of it
    with pytest.raises(DataLossError, match="deleted and written again"):
        reader().latestOffset(at(601), ReadAllAvailable())
    assert reader(failOnDataLoss="false").latestOffset(at(601), ReadAllAvailable()) == at(601)
    s.stop()


def test_stream_reader_min_offsets_per_trigger(server):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from tstream.pipeline.streaming import TStreamStreamReader

    r = server.client()
    fill(r, "k", 10)
    s = TStreamStreamReader(Options.parse({"url": url(server), "key": "k", "minOffsetsPerTrigger": "100",
                                           "maxTriggerDelay": "300ms"}, mode="s"))
    start = s.initialOffset()
    fill(r, "k", 50, start=10)
    assert s.latestOffset(start, ReadAllAvailable()) == start             # 50 < 100: wait
    time.sleep(0.35)
    end = s.latestOffset(start, ReadAllAvailable())
    assert end == {"offsets": {"k": 61}}                                  # waited maxTriggerDelay
    fill(r, "k", 30, start=60)
    assert s.latestOffset(end, ReadAllAvailable()) == end                 # the delay starts again
    fill(r, "k", 100, start=90)
    assert s.latestOffset(end, ReadAllAvailable()) == {"offsets": {"k": 191}}
    fill(r, "k", 1, start=190)
    s.prepareForTriggerAvailableNow()                                     # availableNow: no waiting
    assert s.latestOffset({"offsets": {"k": 191}}, ReadAllAvailable()) == {"offsets": {"k": 192}}
    for bad in ("15", "soon", "-1s"):
        with pytest.raises(OptionError, match="maxTriggerDelay must be a duration"):
            Options.parse({"key": "k", "maxTriggerDelay": bad})
    assert Options.parse({"key": "k", "maxTriggerDelay": "2m"}).max_trigger_delay == 120
    s.stop()


def test_stream_reader_several_keys(server):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from tstream.pipeline.streaming import TStreamStreamReader

    r = server.client()
    fill(r, "a.1", 300)
    fill(r, "a.2", 100)
    fill(r, "b", 50)
    s = TStreamStreamReader(Options.parse({"url": url(server), "keyPattern": "a.*",
                                           "startingOffsets": "earliest", "nodeEntries": "100"}, mode="s"))
    start = s.initialOffset()
    assert start == {"offsets": {"a.1": 1, "a.2": 1}}
    # maxOffsetsPerTrigger is shared in proportion to what each stream has to read.
    assert s.latestOffset(start, ReadMaxRows(200)) == {"offsets": {"a.1": 151, "a.2": 51}}
    end = s.latestOffset(start, ReadAllAvailable())
    assert end == {"offsets": {"a.1": 301, "a.2": 101}}
    assert [(p.key, p.lo, p.hi) for p in s.partitions(start, end)] == [("a.1", 1, 300), ("a.2", 1, 100)]
    # A new stream matching the pattern joins at its first offset, read from the next batch.
    fill(r, "a.3", 20)
    r.execute_command("TEVICT", "a.3", 5)
    grown = s.latestOffset(end, ReadAllAvailable())
    assert grown == {"offsets": {"a.1": 301, "a.2": 101, "a.3": 6}}
    assert s.partitions(end, grown) == []
    assert s.latestOffset(grown, ReadAllAvailable())["offsets"]["a.3"] == 21
    with pytest.raises(ValueError, match="'b', which the query does not read"):
        s.latestOffset({"offsets": {"b": 1}}, ReadAllAvailable())
    s.stop()


def test_snapshot_reader_walks_keys(make_server, tmp_path):
    from tstream.pipeline.snapshot_reader import iter_keys, iter_node_blobs, open_snapshot

    server = make_server("--save", "", "--node-entries", "10", directory=tmp_path)
    r = server.client()
    fill(r, "a", 35)
    fill(r, "b", 3)
    r.execute_command("TREAD", "a", "-", 1, "GROUP", "g")  # a group record between keys
    r.save()
    data = open_snapshot(str(tmp_path / "dump.tsr"))
    keys = {k.key: k for k in iter_keys(data)}
    assert sorted(keys) == [b"a", b"b"]
    assert len(keys[b"a"].node_pos) == 4 and len(keys[b"b"].node_pos) == 1
    assert keys[b"a"].meta["next_offset"] == 36
    blobs = list(iter_node_blobs(data, keys[b"a"].node_pos[1], 3))
    assert len(blobs) == 3 and all(bitmap is None for _, bitmap in blobs)
    del blobs


def test_sink_chunks_without_spark(server):
    r = server.client()
    batches = [pa.record_batch([pa.array(["a"] * 7), pa.array([b"x%d" % i for i in range(7)])],
                               names=["tag", "entry"]) for _ in range(3)]
    message = write_rows(opts(server, batchSize=5), iter(batches))
    assert message.rows == 21 and message.chunks == [(1, 5), (6, 5), (11, 5), (16, 5), (21, 1)]
    bad = pa.record_batch([pa.array(["a", "b", "c"]), pa.array([b"1", None, b"3"])], names=["tag", "entry"])
    with pytest.raises(ValueError, match="row 8 of this task has a null entry"):
        write_rows(opts(server, batchSize=4), iter([batches[0], bad]))
    assert as_map(r.execute_command("TINFO", "k"))["last"] == 29  # a chunk of 4 more, not the bad one


def test_sink_retried_task_stores_its_rows_once(server):
    """A task that failed after two chunks, retried with the same rows (same
    write id, partition, row indexes): every row is stored once, in order."""
    r = server.client()

    def batches(fail_after: int | None = None):
        for n in range(3):
            if n == fail_after:
                raise RuntimeError("the executor died")
            yield pa.record_batch([pa.array([f"t{n}"] * 7), pa.array([b"r%d" % (7 * n + i) for i in range(7)])],
                                  names=["tag", "entry"])

    options = opts(server, batchSize=5)
    with pytest.raises(RuntimeError, match="executor died"):
        write_rows(options, batches(fail_after=2), prefix=write_prefix("q-1", 4), partition=3)
    assert [e for _, _, e in held(r, "k")] == [b"r%d" % i for i in range(10)]  # chunks [0, 5) [5, 10)
    message = write_rows(options, batches(), prefix=write_prefix("q-1", 4), partition=3)  # the retry
    assert message.rows == 21 and message.chunks[:2] == [(1, 5), (6, 5)]  # where they were stored the first time
    assert held(r, "k") == [(i + 1, f"t{i // 7}", b"r%d" % i) for i in range(21)]
    write_rows(options, batches(), prefix=write_prefix("q-1", 4), partition=3)  # a replay of the epoch
    assert len(held(r, "k")) == 21
    write_rows(options, batches(), prefix=write_prefix("q-1", 5), partition=3)  # the next epoch: new rows
    write_rows(options, batches(), prefix=write_prefix("q-1", 4), partition=1)  # another partition
    assert len(held(r, "k")) == 63
    assert r.execute_command("TWRITE", "k", "MSGIDS", "q1.4.3.20", "ENTRIES", "x", "y") == 21

    # idColumn: the rows' own ids (here a source offset), whatever the task
    rows = pa.record_batch([pa.array(["a"] * 4), pa.array([b"v"] * 4), pa.array([10, 11, 11, 12])],
                           names=["tag", "entry", "offset"])
    id_options = opts(server, key="ids", idColumn="offset", batchSize=3)
    write_rows(id_options, iter([rows]), prefix=write_prefix("w"))
    write_rows(id_options, iter([rows]), prefix=write_prefix("other"), partition=9)
    assert [o for o, _, _ in held(r, "ids")] == [1, 2, 3]  # 10, 11, 12 once each
    with pytest.raises(ValueError, match="null id"):
        write_rows(id_options, iter([rows.set_column(2, "offset", pa.array([1, None, 2, 3]))]))
    assert len(write_prefix("x" * 80, 7)) == 32 + 2 and write_prefix("1b4e-28ba", 0) == "1b4e28ba.0"


def test_sink_exactly_once_with_spark(spark, server):
    r = server.client()
    df = spark.createDataFrame([(f"t{i % 3}", f"row {i}") for i in range(100)], "tag string, entry string").repartition(3)

    def write(**options):
        writer = df.write.format("tstream").option("url", url(server)).option("key", "k").mode("append")
        for name, value in options.items():
            writer = writer.option(name, str(value))
        writer.save()

    write(writeId="nightly-2026-11-26", batchSize=7)
    write(writeId="nightly-2026-11-26", batchSize=7)   # the job run again: nothing new
    assert sorted(e for _, _, e in held(r, "k")) == sorted(f"row {i}".encode() for i in range(100))
    write(batchSize=7)                                  # another job (its own id): written again
    assert len(held(r, "k")) == 200
    write(exactlyOnce="false")                          # no ids at all
    assert len(held(r, "k")) == 300

    write(key="w", duplicateWindowMs=3_600_000, writeId="a")
    assert int(as_map(r.execute_command("TCONFIG", "w", "GET"))["duplicate_window_ms"]) == 3_600_000
    r.execute_command("TCONFIG", "w", "SET", "duplicate_window_ms", 0)
    with pytest.raises(Exception, match="duplicate_window_ms 0"):
        write(key="w", writeId="b")
    write(key="w", writeId="b", exactlyOnce="false")
    with pytest.raises(Exception, match="idColumn 'nope' is not a column"):
        write(key="w", idColumn="nope")
    assert len(held(r, "w")) == 200


SINK_DRIVER = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
from tstream import pipeline

url, checkpoint, exactly_once = sys.argv[1:4]
spark = (SparkSession.builder.master("local[2]").appName("tstream-sink-kill")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
pipeline.register(spark)
query = (spark.readStream.format("tstream").option("url", url).option("key", "src")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 500).load()
         .writeStream.format("tstream").option("url", url).option("key", "dst").option("batchSize", 10)
         .option("exactlyOnce", exactly_once).option("checkpointLocation", checkpoint)
         .trigger(processingTime="100 milliseconds").start())
print("started", query.id, flush=True)
query.awaitTermination()
"""


def run_sink_driver(server, tmp_path, kill_at: list[int], total: int, exactly_once: bool = True) -> list[int]:
    """Stream ``src`` to ``dst`` through a Spark driver in its own process group,
    SIGKILLed (Python, JVM and workers) once ``dst`` holds ``kill_at[i]`` rows
    and a micro-batch is half written, then restarted on the same checkpoint;
    the last run goes on until ``dst`` holds ``total`` rows. Returns the
    ``dst`` lengths at the kills."""
    import signal

    script = tmp_path / "sink_driver.py"
    script.write_text(SINK_DRIVER)
    checkpoint = str(tmp_path / "sink-checkpoint")
    r = server.client()
    killed_at = []
    for run, threshold in enumerate([*kill_at, None]):
        with open(tmp_path / f"driver{run}.log", "wb") as out:
            proc = subprocess.Popen([sys.executable, str(script), url(server), checkpoint, str(exactly_once).lower()],
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and proc.poll() is None:
                last = as_map(r.execute_command("TINFO", "dst"))["last"] if r.exists("dst") else 0
                if threshold is None and last >= total:
                    time.sleep(2)      # anything more it would write (it must not)
                    break
                if threshold is not None and last >= threshold and last % 500:
                    killed_at.append(last)
                    break
                time.sleep(0.005)
            else:
                raise AssertionError(f"driver run {run} ended or timed out: "
                                     f"{(tmp_path / f'driver{run}.log').read_text(errors='replace')[-3000:]}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return killed_at


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sink_exactly_once_across_two_driver_kills(server, tmp_path):
    """The driver (Python, JVM, workers) SIGKILLed twice while a micro-batch is
    half written, restarted on the same checkpoint: the replayed micro-batches'
    rows are dropped as duplicates: the target holds every source row once."""
    r = server.client()
    total = 12_000
    fill(r, "src", total)
    killed_at = run_sink_driver(server, tmp_path, [2000, 6000], total)
    print("dst rows at the kills:", killed_at)
    assert len(killed_at) == 2 and all(n % 500 for n in killed_at)   # both mid-batch
    rows = [int(e[1:]) for _, _, e in held(r, "dst")]
    assert len(rows) == total                         # 0 duplicates
    assert sorted(rows) == list(range(total))         # 0 gaps


def test_options_at_a_replica_address(server):
    base = Options.parse({"url": "rediss://ann:pw@primary:6380/0?ssl_ca_certs=/ca.pem", "key": "k",
                          "readFrom": "replica", "replicas": "10.0.0.2:6381, [::1]:6382"})
    assert base.replicas == ("10.0.0.2:6381", "::1:6382")
    assert base.at("10.0.0.2:6381").url == "rediss://ann:pw@10.0.0.2:6381/0?ssl_ca_certs=/ca.pem"
    assert base.at("::1:6382").url == "rediss://ann:pw@[::1]:6382/0?ssl_ca_certs=/ca.pem"
    assert base.at(None) is base
    for bad in ({"readFrom": "secondary"}, {"replicas": "host"}, {"replicas": "h:99999"}):
        with pytest.raises(OptionError, match="readFrom|replicas"):
            Options.parse({"key": "k", **bad})
    # No replica online: a clear error, not a silent read from the primary
    with pytest.raises(Exception, match="reports no online replica"):
        replica_addresses(server.client(), opts(server, readFrom="replica"))
    assert replica_addresses(server.client(), opts(server)) == [None]


def test_read_from_replica(spark, make_server, tmp_path):
    """readFrom=replica: offsets planned on the primary, every TNODES/DGET/TREAD
    served by the replica (the primary's counters of those stay at 0)."""
    for name in ("p", "r"):
        (tmp_path / name).mkdir()
    primary = make_server("--save", "", directory=tmp_path / "p")
    replica = make_server("--save", "", "--replicaof", f"127.0.0.1 {primary.port}", directory=tmp_path / "r")
    p, rep = primary.client(), replica.client()
    fill(p, "k", 5000)
    deadline = time.monotonic() + 30
    while not (rep.exists("k") and as_map(rep.execute_command("TINFO", "k"))["last"] == 5000):
        assert time.monotonic() < deadline, "the replica did not catch up"
        time.sleep(0.05)
    p.execute_command("CONFIG", "RESETSTAT")
    rep.execute_command("CONFIG", "RESETSTAT")

    def offsets(**options) -> list[int]:
        return sorted(x.offset for x in read(spark, primary, readFrom="replica", numPartitions=3, **options)
                      .select("offset").collect())

    assert offsets(readMode="nodes") == list(range(1, 5001))
    assert offsets(readMode="pages") == list(range(1, 5001))                      # DGET pages
    assert offsets(readMode="pages", withTime="false") == list(range(1, 5001))    # TREAD pages
    assert offsets(replicas=f"127.0.0.1:{replica.port}") == list(range(1, 5001))  # named, not discovered
    seen = []
    query = (spark.readStream.format("tstream").option("url", url(primary)).option("key", "k")
             .option("readFrom", "replica").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 2000).load()
             .writeStream.foreachBatch(lambda batch, _: seen.extend(x.offset for x in batch.select("offset").collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    assert sorted(seen) == list(range(1, 5001))

    def calls(client, command: str) -> int:
        return client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)

    assert [calls(p, c) for c in ("tnodes", "dget", "tread")] == [0, 0, 0]
    assert calls(rep, "tnodes") > 0 and calls(rep, "dget") > 0 and calls(rep, "tread") > 0
    assert calls(p, "tinfo") > 0                      # planned on the primary

    # A replica that cannot be reached: its partitions are read from the primary.
    assert offsets(replicas=f"127.0.0.1:{free_port()}", retries=0, timeoutMs=2000) == list(range(1, 5001))
    assert calls(p, "tnodes") > 0


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=pipeline-test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=server", "-keyout", "server.key",
        "-out", "server.csr")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "server.crt")
    return d


def test_tls_and_password_url(make_server, certificates):
    port = free_port()
    server = make_server("--save", "", "--requirepass", "pw", "--tls-port", str(port),
                         "--tls-cert-file", str(certificates / "server.crt"),
                         "--tls-key-file", str(certificates / "server.key"))
    tls = Options.parse({"url": f"rediss://:pw@127.0.0.1:{port}?ssl_ca_certs={certificates / 'ca.crt'}",
                         "key": "k"})
    assert write_rows(tls, iter([pa.record_batch([pa.array(["t"]), pa.array(["v"])],
                                                 names=["tag", "entry"])])).rows == 1
    assert offsets_of(read_range(tls, 1, 10)) == [1]
    assert server.client(password="pw").execute_command("TREAD", "k", 1, 1) == [[1, b"t", b"v"]]


# ---------------------------------------------------------------------------
# Resilience: timeouts, retries, a server restart
# ---------------------------------------------------------------------------

def test_timeout_on_a_hung_server():
    """A server that accepts and never answers: timeoutMs bounds each wait, retries their number."""
    import socket

    import redis

    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        options = Options.parse({"url": f"redis://127.0.0.1:{hung.getsockname()[1]}", "key": "k",
                                 "timeoutMs": "200", "retries": "1"}, mode="r")
        with pytest.raises(redis.exceptions.TimeoutError):
            list(read_range(options, 1, 10))
    for bad in ({"timeoutMs": "0"}, {"retries": "-1"}):
        with pytest.raises(OptionError):
            Options.parse({"key": "k", **bad})


def test_reader_resumes_after_a_restart(make_server, tmp_path):
    """A task's pages survive a server restart: it reconnects and goes on from the page after
    the last one it handed out, neither skipping nor repeating rows."""
    server = make_server("--save", "", "--appendonly", "yes", "--node-entries", "100", directory=tmp_path)
    fill(server.client(), "k", 5000)
    for mode, with_time in (("pages", True), ("pages", False), ("nodes", True)):
        pages = read_range(opts(server, pageSize=100, withTime=with_time, readMode=mode), 1, 5000)
        # pages of 100 rows; node reads: a batch per TNODES reply of 16 nodes (4 replies here)
        got = [next(pages) for _ in range(5 if mode == "pages" else 2)]
        server.stop()
        threading.Timer(1.0, server.start).start()   # back after a second
        got += list(pages)
        assert offsets_of(got) == list(range(1, 5001))
        server.wait_ready()


def test_streaming_query_rides_out_a_server_restart(spark, make_server, tmp_path):
    server = make_server("--save", "", "--appendonly", "yes", directory=tmp_path)
    r = server.client()
    fill(r, "k", 3000)
    seen = []
    query = (spark.readStream.format("tstream").option("url", url(server)).option("key", "k")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 500).load()
             .writeStream.foreachBatch(lambda batch, _: seen.extend(x.offset for x in batch.select("offset").collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 1000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(seen) >= 1000
        server.stop()
        time.sleep(3)                                  # 3 s without a server
        server.start()
        fill(server.client(), "k", 1000, start=3000)   # written after the restart
        deadline = time.monotonic() + 90
        while len(seen) < 4000 and time.monotonic() < deadline and query.isActive:
            time.sleep(0.1)
        assert query.isActive and query.exception() is None
        assert sorted(seen) == list(range(1, 4001))    # every row once
    finally:
        query.stop()


# ---------------------------------------------------------------------------
# Big entries, live snapshots, the example jobs' session
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("with_time", [True, False], ids=["dget", "tread"])
def test_pages_are_capped_in_bytes(server, with_time):
    r = server.client()
    big = 64 * 1024
    for i in range(0, 200, 20):
        r.execute_command("TWRITE", "k", "ENTRIES", *[x for j in range(i, i + 20) for x in (f"t{j}", b"%06d" % j * (big // 6))])
    r.execute_command("TWRITE", "k", "ENTRIES", *[x for j in range(200, 300) for x in (f"t{j}", f"small {j}")])
    cap = 256 * 1024
    batches = list(read_range(opts(server, pageSize=1000, maxPageBytes=cap, withTime=with_time, readMode="pages"),
                              1, 300))
    assert offsets_of(batches) == list(range(1, 301))            # in order, nothing lost or twice
    assert [e[:6] for b in batches[:1] for e in b.column("entry").to_pylist()][:1] == [b"000000"]
    assert max(b.column("entry").nbytes for b in batches[1:]) <= cap + big
    assert batches[0].num_rows <= (4 if not with_time else cap // big + 1)  # TREAD probes with 4 entries
    assert len(batches) >= 200 * big // (cap + big)
    assert batches[-1].num_rows > 50                             # small entries: big pages again


def test_snapshot_read_survives_a_save(make_server, tmp_path):
    """A live server's dump.tsr replaced by a save between planning and reading: the tasks read
    the version planned (a hard link in .tstream-spark/), not the new one, and do not fail."""
    from tstream.pipeline import offline

    server = make_server("--save", "", "--node-entries", "100", directory=tmp_path)
    r = server.client()
    fill(r, "k", 1000)
    r.save()
    path = str(tmp_path / "dump.tsr")
    parts = offline.plan(Options.parse({"path": path, "key": "k", "numPartitions": "3"}, mode="r"))
    fill(r, "k", 500, start=1000)
    r.save()                                                     # renamed over dump.tsr
    got = [o for part in parts for b in offline.read(part) for o in b.column("offset").to_pylist()]
    assert sorted(got) == list(range(1, 1001))
    assert all(os.path.dirname(p.path).endswith(".tstream-spark") for p in parts)
    again = offline.plan(Options.parse({"path": path, "key": "k"}, mode="r"))
    assert sum(b.num_rows for part in again for b in offline.read(part)) == 1500
    # Without the copy, the same save fails the tasks with a message that says what happened.
    parts = offline.plan(Options.parse({"path": path, "key": "k", "copySnapshot": "false"}, mode="r"))
    fill(r, "k", 10, start=1500)
    r.save()
    with pytest.raises(RuntimeError, match="changed after the query was planned"):
        list(offline.read(parts[0]))


def test_jobs_use_few_shuffle_partitions():
    from tstream.pipeline.jobs import _common, tag_counts  # noqa: F401 (the job module imports)

    assert _common.session_config()["spark.sql.shuffle.partitions"] == "8"
    assert _common.session_config(3)["spark.sql.shuffle.partitions"] == "3"
    assert "spark.sql.shuffle.partitions" not in _common.session_config(preset={"spark.sql.shuffle.partitions": "64"})
    args = _common.parser("x", "x").parse_args(["--key", "k"])
    assert args.shuffle_partitions == 8


def test_read_range_through_nodes_and_an_eviction_between_calls(server):
    """readMode auto reads through TNODES (the nodes as stored, decoded here): the same rows as
    the pages, times included; an eviction between two calls leaves rows out, never twice, and
    is data loss when asked."""
    r = server.client()
    fill(r, "k", 5000)
    nodes = pa.Table.from_batches(list(read_range(opts(server), 1, 5000)))
    pages = pa.Table.from_batches(list(read_range(opts(server, readMode="pages"), 1, 5000)))
    assert nodes.to_pydict() == pages.to_pydict()
    first = int(as_map(r.execute_command("TINFO", "k"))["first"])
    batches = read_range(opts(server), first, 5000)
    got = [next(batches)]
    r.execute_command("TEVICT", "k", 3500)
    got += list(batches)
    offsets = offsets_of(got)
    assert offsets == sorted(set(offsets)) and offsets[-1] == 5000 and set(range(3501, 5001)) <= set(offsets)
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        list(read_range(opts(server), 1, 5000, fail_on_loss=True))


def test_read_mode_is_checked(server):
    with pytest.raises(OptionError, match="readMode must be one of auto, nodes, pages"):
        opts(server, readMode="fast")
