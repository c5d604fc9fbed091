"""tstream for Apache Spark: a PySpark (4.2+) Python data source and sink.

    from tstream import pipeline
    pipeline.register(spark)
    df = spark.read.format("tstream").option("url", "redis://host:6380").option("key", "events").load()

Schema of what is read: ``offset`` long, ``tag`` string, ``entry`` binary,
``time`` timestamp (the entry's write time, UTC, microseconds).

Options (names are case-insensitive, as every Spark option):

=====================  ======================================================
``url``                ``redis://[[user]:password@]host:port`` or ``rediss://``
                       for TLS (redis-py ``from_url``; TLS settings as query
                       parameters, e.g. ``?ssl_ca_certs=/ca.pem``); default
                       ``redis://127.0.0.1:6380``
``password``           overrides the URL's password (keeps it out of the URL)
``key``                the stream (required)
``path``               batch reads only: read the key from this snapshot file
                       (``dump.tsr``) instead of a server
``startingOffset``     batch: ``earliest`` (default) or the first offset to read
``endingOffset``       batch: ``latest`` (default) or the last offset to read
                       (inclusive); both resolved when the query is planned
``startingOffsets``    streaming: ``latest`` (default), ``earliest`` or an offset
``maxOffsetsPerTrigger`` streaming: offsets per micro-batch at most
``failOnDataLoss``     streaming: fail when offsets to read were evicted (true)
``numPartitions``      split the range into this many partitions of whole
                       macro nodes (default: ``nodesPerPartition`` nodes each)
``nodesPerPartition``  macro nodes per partition (250 from a server, 1000
                       from a snapshot file)
``nodeEntries``        the stream's node size, if not the server's ``node-entries``
``pageSize``           offsets per TREAD/DGET round trip (1000)
``withTime``           fill ``time`` through DGET (true); false reads with
                       TREAD, faster, and leaves ``time`` null
``arrow``              hand rows to Spark as Arrow record batches (true)
``batchSize``          sink: rows per atomic ``TWRITE ... ENTRIES`` (500)
=====================  ======================================================

The writer takes ``tag`` and ``entry`` columns (string or binary), at least
once; see ``pipeline/sink.py``. Modules: ``source`` (the DataSource and the
batch reader), ``server_read`` (reading pages from a server), ``offline`` and
``snapshot_reader`` (snapshot files), ``streaming``, ``sink``, ``jobs``.
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
