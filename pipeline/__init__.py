"""tstream for Apache Spark: a PySpark (4.2+) Python data source and sink.

    from tstream import pipeline
    pipeline.register(spark)
    df = spark.read.format("tstream").option("url", "redis://host:6380").option("key", "events").load()

Schema of what is read: ``offset`` long, ``tag`` string, ``entry`` binary,
``time`` timestamp (the entry's write time, UTC, microseconds), ``key`` string
(the stream). The options (``url``, ``key``/``keys``/``keyPattern``, ``path``,
offsets and timestamps, partitioning, paging, ``timeoutMs``/``retries``,
``batchSize``, ...) are listed in ``OPTION_SPECS`` (``pipeline/common.py``) and
described, all in one table, in docs/spark.md; unknown ones are refused.

The writer takes ``tag`` and ``entry`` columns (string or binary), exactly
once through message ids; see ``pipeline/sink.py``. Modules: ``source`` (the DataSource and the
batch reader), ``pushdown`` (filters and timestamps), ``server_read`` (reading
pages from a server), ``offline`` and ``snapshot_reader`` (snapshot files),
``streaming``, ``sink``, ``jobs``.
"""

from __future__ import annotations

__all__ = ["register", "TStreamDataSource"]


def register(spark) -> None:
    """Register the ``tstream`` format with ``spark`` (read, readStream, write, writeStream)."""
    from .source import TStreamDataSource

    spark.dataSource.register(TStreamDataSource)
    # Filters on offset, time, tag and key narrow batch reads (pipeline/pushdown.py); PySpark
    # calls a Python source's pushFilters only with this on, and refuses the read without it.
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def __getattr__(name: str):
    if name == "TStreamDataSource":
        from .source import TStreamDataSource

        return TStreamDataSource
    raise AttributeError(name)
