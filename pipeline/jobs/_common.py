"""Arguments and the Spark session shared by the example jobs."""

from __future__ import annotations

import argparse
import os
import sys

from ..common import DEFAULT_URL


def parser(module: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=description.replace("``", "`"))
    p.add_argument("--url", default=DEFAULT_URL, help=f"tstream server (default {DEFAULT_URL})")
    p.add_argument("--key", required=True, help="the stream to read")
    p.add_argument("--snapshot", metavar="PATH",
                   help="read the key from this snapshot file (dump.tsr) instead of the server")
    p.add_argument("--master", default=None, help="Spark master (default: local[*], or spark-submit's)")
    p.add_argument("--shuffle-partitions", type=int, default=SHUFFLE_PARTITIONS, metavar="N",
                   help=f"spark.sql.shuffle.partitions unless the Spark configuration sets it (default "
                        f"{SHUFFLE_PARTITIONS}; Spark's 200 cost ~40 s per job on one machine)")
    return p


# Spark's default of 200 shuffle partitions makes a groupBy of a log cost ~40 s on
# 1M rows on one machine (200 tasks of ~0.2 s each); these jobs group a few
# thousand tags: a handful of partitions is plenty. Raise it for big clusters.
SHUFFLE_PARTITIONS = 8


def session_config(shuffle_partitions: int = SHUFFLE_PARTITIONS, preset: dict | None = None) -> dict:
    """The Spark settings the jobs' session adds to ``preset`` (spark-submit's
    ``--conf``, spark-defaults.conf): those ``preset`` has are left as they are."""
    config = {"spark.sql.session.timeZone": "UTC",
              "spark.sql.shuffle.partitions": str(shuffle_partitions)}
    return {k: v for k, v in config.items() if k not in (preset or {})}


def session(master: str | None, app: str, shuffle_partitions: int = SHUFFLE_PARTITIONS):
    """A SparkSession with the tstream format registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from tstream import pipeline

    preset = dict(SparkConf().getAll()) if "PYSPARK_GATEWAY_PORT" in os.environ else {}
    builder = SparkSession.builder.appName(app)
    for name, value in session_config(shuffle_partitions, preset).items():
        builder = builder.config(name, value)
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit, which sets the master
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    pipeline.register(spark)
    return spark


def reader(spark, args):
    """``spark.read`` of ``args.key``, from the snapshot file or the server."""
    read = spark.read.format("tstream").option("key", args.key)
    if args.snapshot:
        return read.option("path", args.snapshot)
    return read.option("url", args.url)
