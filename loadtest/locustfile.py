"""Locust load test for tstream, over RESP with redis-py.

    .venv/bin/pip install -e '.[load]'
    .venv/bin/tstream-server --dir /tmp/tstream-load --save '' &
    .venv/bin/locust -f loadtest/locustfile.py --headless -u 100 -r 20 -t 2m \\
        --csv loadtest/runs/run --host redis://127.0.0.1:6380

(``loadtest/run.sh`` does all three and stops the server.)  Every command is
timed with ``perf_counter`` around redis-py's ``execute_command`` and reported
through locust's ``request`` event (request type ``RESP``, the name is the
command and its form: ``TWRITE``, ``TREAD GROUP``, ``DGET SUBJECT``...), so the
locust statistics and CSV files are per command.

User classes (pick some by naming them after the locustfile, e.g.
``locust -f loadtest/locustfile.py ReaderUser``; each task also carries a tag
for ``--tags``/``--exclude-tags``):

- ``ProducerUser``        TWRITE single entries, ENTRIES of 10, events (tag ``produce``)
- ``GroupConsumerUser``   TREAD GROUP billing RETRY 5000 60000, then TACK (tag ``consume``)
- ``ReaderUser``          DGET by subject / by sequence / KV SUBJECT, MLAST, TREAD (tag ``read``)
- ``BatchPublisherUser``  atomic BATCH ... COMMIT of 2-6 KV updates (tag ``batch``)
- ``FastIngestUser``      fast-ingest BATCH ... FAST through the typed client's
                          FastPublisher: bursts of 100 messages (one request
                          ``BATCH FAST x100`` each), a new batch every 50 bursts
                          (tag ``fast``)

Each user is paced (``constant_throughput``) so the run measures latency at a
known offered rate instead of saturating the single locust process; change the
rate with ``TSTREAM_USER_RATE`` (tasks per second per user, default 10).  The
load mix and its keys (``load:*``, bounded by eviction policies set at test
start) are in ``workload.py``, shared with ``soak.py``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis  # noqa: E402
from locust import User, constant_throughput, events, tag, task  # noqa: E402
from workload import Workload  # noqa: E402

from tstream.client import FastPublisher  # noqa: E402

DEFAULT_HOST = "redis://127.0.0.1:6380"
RATE = float(os.environ.get("TSTREAM_USER_RATE", "10"))


def reply_size(reply) -> int:
    """Bytes of payload in a reply (for locust's response_length)."""
    if reply is None:
        return 0
    if isinstance(reply, (bytes, str)):
        return len(reply)
    if isinstance(reply, (list, tuple)):
        return sum(reply_size(x) for x in reply)
    if isinstance(reply, dict):
        return sum(reply_size(k) + reply_size(v) for k, v in reply.items())
    return 8


def connect(host: str | None, protocol: int = 3) -> redis.Redis:
    return redis.Redis.from_url(host or DEFAULT_HOST, protocol=protocol, socket_timeout=30,
                                socket_connect_timeout=10)


class RespUser(User):
    """A user with one redis-py connection; ``call`` times a command for locust."""

    abstract = True
    protocol = 3
    wait_time = constant_throughput(RATE)

    def on_start(self) -> None:
        self.redis = connect(self.host, self.protocol)
        self.redis.ping()  # connect (and HELLO) before timing: users keep their connection
        self.load = Workload(self.call, prefix="load")

    def on_stop(self) -> None:
        self.redis.close()

    def call(self, name: str, *argv):
        started = time.perf_counter()
        reply = exception = None
        try:
            reply = self.redis.execute_command(*argv)
        except redis.RedisError as exc:
            exception = exc
        self.environment.events.request.fire(
            request_type="RESP", name=name, response_time=(time.perf_counter() - started) * 1000,
            response_length=reply_size(reply), exception=exception, context={})
        return reply


class ProducerUser(RespUser):
    weight = 30

    @tag("produce")
    @task
    def produce(self) -> None:
        self.load.produce()


class GroupConsumerUser(RespUser):
    weight = 30
    protocol = 2  # both protocols are exercised

    @tag("consume")
    @task
    def consume(self) -> None:
        self.load.consume()


class ReaderUser(RespUser):
    weight = 30

    @tag("read")
    @task
    def read(self) -> None:
        self.load.read()


class BatchPublisherUser(RespUser):
    weight = 10

    @tag("batch")
    @task
    def publish(self) -> None:
        self.load.publish_batch()


class FastIngestUser(RespUser):
    """ADR-50 fast ingest: a FastPublisher (2 acks outstanding, the server's
    ack_msgs), bursts of 100 messages to ``load:fast`` (max_len 100000)."""

    weight = 5
    burst = 100
    bursts_per_batch = 50

    def on_start(self) -> None:
        super().on_start()
        self.redis.execute_command("TCONFIG", "load:fast", "SET", "max_len", 100000)
        self.publisher = None
        self.bursts = 0
        self.payload = b"f" * 100

    def on_stop(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
        super().on_stop()

    @tag("fast")
    @task
    def ingest(self) -> None:
        started = time.perf_counter()
        exception = None
        try:
            if self.publisher is None:
                self.publisher = FastPublisher(self.redis, "load:fast", flow=64, gap="fail")
            for _ in range(self.burst):
                self.publisher.add("load.fast.event", self.payload)
            self.bursts += 1
            if self.bursts % self.bursts_per_batch == 0:
                self.publisher.end()
                self.publisher.close()
                self.publisher = None
        except redis.RedisError as exc:
            exception = exc
            if self.publisher is not None:
                self.publisher.close()
            self.publisher = None
        self.environment.events.request.fire(
            request_type="RESP", name=f"BATCH FAST x{self.burst}",
            response_time=(time.perf_counter() - started) * 1000,
            response_length=self.burst * len(self.payload), exception=exception, context={})


@events.test_start.add_listener
def set_eviction_policies(environment, **_kwargs) -> None:
    """Bound the data the run writes (max_len, max_age_ms, max_msgs_per_subject)."""
    r = connect(environment.host)
    try:
        Workload(lambda name, *argv: r.execute_command(*argv), prefix="load").setup()
    finally:
        r.close()
