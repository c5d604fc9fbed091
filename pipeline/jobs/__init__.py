"""Example Spark jobs over tstream logs, each runnable as ``python -m tstream.pipeline.jobs.<name>``:

- ``compact``: log compaction, the newest entry of every tag copied to another key;
- ``tag_counts``: entries per tag and per minute, written as a Parquet directory.

Both read from a server (``--url``, ``--key``) or from a snapshot file
(``--snapshot dump.tsr``, no server needed to read), and run on ``local[*]``
unless ``--master`` (or spark-submit) says otherwise.
"""
