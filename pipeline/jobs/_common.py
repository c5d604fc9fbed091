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
    return p


def session(master: str | None, app: str):
    """A SparkSession with the tstream format registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tstream import pipeline

    builder = SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")
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
