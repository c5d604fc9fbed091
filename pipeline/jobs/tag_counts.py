"""Entries per tag and per minute of ``--key``, written as a Parquet directory.

    python -m tstream.pipeline.jobs.tag_counts --url redis://127.0.0.1:6380 --key orders --output counts.parquet
    python -m tstream.pipeline.jobs.tag_counts --snapshot dump.tsr --key orders --output counts.parquet

Columns: ``minute`` (timestamp, start of the minute, UTC), ``tag``, ``count``.
The minutes come from the entries' write times: read from a server they need
DGET (JetStream direct get, on by default: ``allow_direct yes``); a snapshot
always has them. Entries without a time are counted and reported, not written.
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ._common import parser, reader, session


def tag_counts(df: DataFrame) -> DataFrame:
    """``minute``, ``tag``, ``count``; entries without a time fall in ``minute`` null."""
    return (df.groupBy(F.window("time", "1 minute").alias("w"), "tag").count()
            .select(F.col("w.start").alias("minute"), "tag", "count"))


def main(argv: list[str] | None = None, spark=None) -> int:
    p = parser(__name__ if __name__ != "__main__" else __spec__.name, __doc__.splitlines()[0])
    p.add_argument("--output", required=True, help="the Parquet directory to write (replaced)")
    args = p.parse_args(argv)
    spark = spark or session(args.master, "tstream-tag-counts", args.shuffle_partitions)
    counts = tag_counts(reader(spark, args).load()).cache()
    untimed = counts.where(F.col("minute").isNull()).agg(F.sum("count")).first()[0] or 0
    timed = counts.where(F.col("minute").isNotNull()).orderBy("minute", "tag")
    timed.write.mode("overwrite").parquet(args.output)
    rows = timed.count()
    counts.unpersist()
    print(f"wrote {rows} (minute, tag) counts of {args.key!r} to {args.output}")
    if untimed:
        print(f"warning: {untimed} entries had no time (the server did not serve DGET) and "
              "were not counted; read a snapshot (--snapshot) to get their times", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
