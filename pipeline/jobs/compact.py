"""Log compaction: copy the newest entry of every tag of ``--key`` into ``--target``.

    python -m tstream.pipeline.jobs.compact --url redis://127.0.0.1:6380 --key orders --target orders.compact
    python -m tstream.pipeline.jobs.compact --snapshot dump.tsr --key orders --target orders.compact

The compacted entries are written in offset order (one writer task, atomic
chunks of ``--batch-size``), each with its tag and entry; the ``--target`` key
gets them appended. Compacting is idempotent in effect: running it again
appends the same newest-per-tag set, and compacting the target gives it back.
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ._common import parser, reader, session


def compact(df: DataFrame) -> DataFrame:
    """The newest entry (highest offset) of every tag, in offset order, one partition."""
    newest = df.groupBy("tag").agg(F.max("offset").alias("offset"),
                                   F.max_by("entry", "offset").alias("entry"))
    return newest.repartition(1).sortWithinPartitions("offset").select("offset", "tag", "entry")


def main(argv: list[str] | None = None, spark=None) -> int:
    p = parser(__name__ if __name__ != "__main__" else __spec__.name, __doc__.splitlines()[0])
    p.add_argument("--target", required=True, help="the key to append the compacted log to")
    p.add_argument("--batch-size", type=int, default=500, help="entries per atomic write (500)")
    args = p.parse_args(argv)
    spark = spark or session(args.master, "tstream-compact", args.shuffle_partitions)
    source = reader(spark, args).load()
    compacted = compact(source).cache()
    count = compacted.count()
    (compacted.write.format("tstream").option("url", args.url).option("key", args.target)
     .option("batchSize", args.batch_size).mode("append").save())
    compacted.unpersist()
    print(f"compacted {args.key!r} into {count} entries (one per tag) appended to {args.target!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
