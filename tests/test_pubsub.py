"""Pub/sub through the real server: the same sequences as redis-server, byte for
byte (RESP2 subscribe mode and RESP3 push frames), redis-py's PubSub (sync and
asyncio), cleanup when a subscriber leaves, and a subscriber that stops
reading is cut off by the pubsub output limit."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import redis
import redis.asyncio

from .harness import encode_command


class Quiet:
    """A raw connection whose every command's reply is all that arrives until the
    line goes quiet (pub/sub commands answer with several frames)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)

    def call(self, *words, quiet: float = 0.05) -> bytes:
        self.sock.sendall(encode_command(words))
        return self.read(quiet)

    def ask(self, *words, quiet: float = 0.05) -> bytes:
        """:meth:`call` for a command that replies: its first bytes are waited
        for (up to 5 s: a loaded machine), then the rest until the line goes quiet."""
        self.sock.sendall(encode_command(words))
        return self.read(quiet, first=5.0)

    def read(self, quiet: float = 0.05, first: float | None = None) -> bytes:
        received = b""
        if first is not None:
            self.sock.settimeout(first)
            received = self.sock.recv(65536)
        self.sock.settimeout(quiet)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except (socket.timeout, TimeoutError):
            pass
        finally:
            self.sock.settimeout(5)
        return received

    def close(self) -> None:
        self.sock.close()


SEQUENCE = [
    ("SUBSCRIBE", "a"), ("ECHO", "x"), ("PING",), ("PING", "hi"), ("PSUBSCRIBE", "a*"), ("SUBSCRIBE", "a"),
    ("UNSUBSCRIBE", "a"), ("PUNSUBSCRIBE",), ("UNSUBSCRIBE",), ("PUBSUB", "NUMSUB", "a", "c"),
    ("PUBSUB", "NUMPAT"), ("PUBSUB", "CHANNELS"), ("PUBSUB", "FOO"), ("PUBLISH", "a", "m"), ("SUBSCRIBE",),
    ("PUBSUB", "CHANNELS", "x", "y"), ("PUBLISH", "a"), ("SUBSCRIBE", "z"), ("PUBLISH", "z", "hello"),
    ("PSUBSCRIBE", "z*", "q?"), ("PUBLISH", "zz", "p"), ("PUBLISH", "qa", "r"), ("PUBSUB", "NUMSUB", "z"),
    ("PUBSUB", "CHANNELS", "z*"), ("PUBSUB", "NUMPAT"), ("PUNSUBSCRIBE", "nope"), ("UNSUBSCRIBE", "z"),
    ("PUNSUBSCRIBE",), ("PING",), ("ECHO", "back"),
]


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_pubsub_sequence_matches_redis(server, redis_oracle, protocol):
    ours, theirs = Quiet(server.port), Quiet(redis_oracle)
    try:
        if protocol == 3:
            ours.call("HELLO", "3")
            theirs.call("HELLO", "3")
        for words in SEQUENCE:
            mine, want = ours.ask(*words), theirs.ask(*words)
            assert mine == want, f"{' '.join(words)}:\n tstream {mine!r}\n redis   {want!r}"
    finally:
        ours.close()
        theirs.close()


def test_messages_reach_subscribers_of_channels_and_patterns(server):
    publisher = server.client()
    for protocol in (2, 3):
        sub = server.client(protocol=protocol).pubsub()
        sub.subscribe("news")
        sub.psubscribe("news.*")
        assert sub.get_message(timeout=1)["type"] == "subscribe"
        assert sub.get_message(timeout=1)["type"] == "psubscribe"
        assert publisher.publish("news", "one") == 1
        assert publisher.publish("news.sport", "two") == 1
        first, second = sub.get_message(timeout=1), sub.get_message(timeout=1)
        assert (first["type"], first["channel"], first["data"]) == ("message", b"news", b"one")
        assert (second["type"], second["pattern"], second["channel"], second["data"]) == \
            ("pmessage", b"news.*", b"news.sport", b"two")
        sub.close()
    deadline = time.monotonic() + 5
    while publisher.pubsub_numsub("news") != [(b"news", 0)] or publisher.pubsub_numpat() != 0:
        assert time.monotonic() < deadline, "a closed subscriber is forgotten"
        time.sleep(0.02)


def test_resp3_publisher_subscribed_to_itself_gets_the_push_first(server):
    raw = Quiet(server.port)
    raw.call("HELLO", "3")
    raw.call("SUBSCRIBE", "self")
    assert raw.call("PUBLISH", "self", "hi") == b">3\r\n$7\r\nmessage\r\n$4\r\nself\r\n$2\r\nhi\r\n:1\r\n"
    assert raw.call("XADD", "after", "1-1", "f", "v") == b"$3\r\n1-1\r\n"  # RESP3: anything runs
    raw.close()


def test_client_list_shows_subscriptions(server):
    sub = server.client().pubsub()
    sub.subscribe("a", "b")
    sub.psubscribe("c*")
    sub.get_message(timeout=1)
    clients = [c for c in server.client().client_list() if c.get("sub") == "2"]
    assert len(clients) == 1 and clients[0]["psub"] == "1" and "P" in clients[0]["flags"]
    sub.close()


def test_asyncio_pubsub(server):
    async def run():
        client = redis.asyncio.Redis(port=server.port)
        sub = client.pubsub()
        await sub.subscribe("aio")
        assert (await sub.get_message(timeout=1))["type"] == "subscribe"
        await client.publish("aio", "x")
        message = None
        for _ in range(50):
            message = await sub.get_message(timeout=0.1)
            if message is not None:
                break
        assert message["data"] == b"x"
        await sub.aclose() if hasattr(sub, "aclose") else await sub.close()
        await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(run())


def test_a_subscriber_that_stops_reading_is_cut_off(make_server):
    proc = make_server("--save", "", "--client-output-buffer-limit", "normal 0 0 0 pubsub 1mb 256kb 1")
    slow = Quiet(proc.port)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.call("SUBSCRIBE", "firehose")
    publisher = proc.client()
    payload = "x" * 65536
    deadline = time.monotonic() + 20
    while True:
        receivers = publisher.publish("firehose", payload)
        if receivers == 0:
            break  # the slow subscriber was closed
        assert time.monotonic() < deadline, "the slow subscriber was never cut off"
    assert "over client-output-buffer-limit" in proc.output()
    assert publisher.ping()  # everyone else goes on
    slow.close()
