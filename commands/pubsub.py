"""Pub/sub as Redis 7.0: PUBLISH, SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE,
PUNSUBSCRIBE, PUBSUB CHANNELS|NUMSUB|NUMPAT.

Messages are not stored (that is what the streams are for): a PUBLISH reaches
the connections subscribed at that moment.  Each server has one
:class:`PubSub` registry (``server.pubsub``)::

    channels  {b"news": {conn1, conn2}}        patterns  {b"news.*": {conn3}}
    conn1.subscriptions  Subscriptions(channels={b"news"}, patterns={})

A RESP2 connection with a subscription is in *subscribe mode*: only
(P)SUBSCRIBE, (P)UNSUBSCRIBE, PING, QUIT and RESET run (its ``gate``, see
commands/dispatch.py, says so with Redis's error); PING replies
``["pong", message]``.  A RESP3 connection gets messages as push frames and
may run anything.  A message is written to each subscriber at once, through
the connection's normal output path (``push``), so its output buffer limits
apply to a slow subscriber as to any client; a message a subscriber publishes
to itself goes into its own output in Redis's order, before the PUBLISH reply
and after the replies before it (commands/dispatch.py ``_after_running``).
"""

from __future__ import annotations

from tstream.engine.glob import glob_match
from tstream.resp import Push, Raw, encode

from .errors import CommandError, SubcommandSyntax
from .gates import add_layer, remove_layer

# What a RESP2 connection in subscribe mode may run (Redis 7.0's list).
SUBSCRIBE_MODE = frozenset({b"subscribe", b"unsubscribe", b"psubscribe", b"punsubscribe", b"ssubscribe",
                            b"sunsubscribe", b"ping", b"quit", b"reset"})


class Subscriptions:
    """One connection's channels and patterns, in the order subscribed."""

    __slots__ = ("channels", "patterns")

    def __init__(self) -> None:
        self.channels: dict[bytes, None] = {}
        self.patterns: dict[bytes, None] = {}

    def count(self) -> int:
        return len(self.channels) + len(self.patterns)


class PubSub:
    """A server's channels and patterns, and who listens to them."""

    def __init__(self) -> None:
        self.channels: dict[bytes, dict] = {}
        self.patterns: dict[bytes, dict] = {}

    def publish(self, channel: bytes, message: bytes) -> int:
        """Send ``message`` to the subscribers of ``channel`` and of the patterns
        matching it; how many got it. O(subscribers + patterns)."""
        received = 0
        for conn in list(self.channels.get(channel, ())):
            conn.push(encode(Push([b"message", channel, message]), conn.protocol))
            received += 1
        for pattern, conns in list(self.patterns.items()):
            if glob_match(pattern, channel):
                for conn in list(conns):
                    conn.push(encode(Push([b"pmessage", pattern, channel, message]), conn.protocol))
                    received += 1
        return received

    def forget(self, conn) -> None:
        """The connection closed: every subscription of it goes. O(its subscriptions)."""
        subs = conn.subscriptions
        if subs is None:
            return
        for channel in subs.channels:
            self._leave(self.channels, channel, conn)
        for pattern in subs.patterns:
            self._leave(self.patterns, pattern, conn)
        conn.subscriptions = None

    @staticmethod
    def _leave(table: dict, name: bytes, conn) -> None:
        conns = table.get(name)
        if conns is not None:
            conns.pop(conn, None)
            if not conns:
                del table[name]


def _subscriptions(client) -> Subscriptions:
    subs = client.subscriptions
    if subs is None:
        subs = client.subscriptions = Subscriptions()
    return subs


def _replies(client, items: list) -> Raw:
    """Several replies to one command (one per channel), as Redis sends them."""
    return Raw(b"".join(encode(Push(item), client.protocol) for item in items))


def _set_mode(client) -> None:
    """Enter or leave subscribe mode after the subscriptions changed: RESP2's
    restricted commands, and in both protocols a layer on the connection's gate
    that sends its commands through the dispatcher's rare path, where a message
    it publishes to itself is put before its PUBLISH reply, as Redis orders them."""
    subs = client.subscriptions
    if subs is not None and subs.count():
        add_layer(client, "subscribe", _subscribe_mode_check if client.protocol == 2 else _subscribed)
        return
    client.subscriptions = None
    remove_layer(client, "subscribe")


def subscribe_mode_changed(client) -> None:
    """The connection's protocol changed (HELLO), or its subscriptions were
    dropped (RESET): its mode follows."""
    remove_layer(client, "subscribe")
    _set_mode(client)


def _subscribed(client, name: bytes) -> None:
    """A RESP3 subscriber may run anything (its layer only marks it, see _set_mode)."""


def _subscribe_mode_check(client, name: bytes) -> None:
    """While a RESP2 connection is subscribed: Redis's error for anything but
    (P)SUBSCRIBE, (P)UNSUBSCRIBE, PING, QUIT, RESET (commands/gates.py).  The
    commands of an EXEC that subscribed run (Redis checks them when queued)."""
    if name not in SUBSCRIBE_MODE and not client.in_exec:
        raise CommandError(f"ERR Can't execute '{name.decode(errors='replace')}': only (P|S)SUBSCRIBE / "
                           "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context")


def subscribe(client, argv):
    """SUBSCRIBE channel [channel ...]

    Listens to the channels; one reply per channel. O(channels)."""
    return _join(client, argv[1:], client.server.pubsub.channels, "channels", b"subscribe")


def psubscribe(client, argv):
    """PSUBSCRIBE pattern [pattern ...]

    Listens to the channels matching the glob-style patterns. O(patterns)."""
    return _join(client, argv[1:], client.server.pubsub.patterns, "patterns", b"psubscribe")


def _join(client, names: list, table: dict, kind: str, word: bytes) -> Raw:
    subs = _subscriptions(client)
    mine = getattr(subs, kind)
    items = []
    for name in names:
        if name not in mine:
            mine[name] = None
            table.setdefault(name, {})[client] = None
        items.append([word, name, subs.count()])
    _set_mode(client)
    return _replies(client, items)


def unsubscribe(client, argv):
    """UNSUBSCRIBE [channel [channel ...]]

    Stops listening to the channels (all of them without arguments). O(channels)."""
    return _leave(client, argv[1:], client.server.pubsub.channels, "channels", b"unsubscribe")


def punsubscribe(client, argv):
    """PUNSUBSCRIBE [pattern [pattern ...]]

    Stops listening to the patterns (all of them without arguments). O(patterns)."""
    return _leave(client, argv[1:], client.server.pubsub.patterns, "patterns", b"punsubscribe")


def _leave(client, names: list, table: dict, kind: str, word: bytes) -> Raw:
    subs = _subscriptions(client)
    mine = getattr(subs, kind)
    if not names:
        names = list(mine)
    items = []
    for name in names:
        if name in mine:
            del mine[name]
            PubSub._leave(table, name, client)
        items.append([word, name, subs.count()])
    if not items:
        items.append([word, None, subs.count()])
    _set_mode(client)
    return _replies(client, items)


def publish(client, argv):
    """PUBLISH channel message

    Sends the message to the channel's subscribers; replies how many got it.
    O(subscribers + patterns)."""
    return client.server.pubsub.publish(argv[1], argv[2])


def pubsub_channels(client, argv):
    """PUBSUB CHANNELS [pattern]

    The channels with at least one subscriber (matching the pattern). O(channels)."""
    channels = client.server.pubsub.channels
    if len(argv) > 3:
        raise SubcommandSyntax(argv)
    if len(argv) == 3:
        return [name for name in channels if glob_match(argv[2], name)]
    return list(channels)


def pubsub_numsub(client, argv):
    """PUBSUB NUMSUB [channel ...]

    Each channel and its number of subscribers. O(channels)."""
    channels = client.server.pubsub.channels
    out: list = []
    for name in argv[2:]:
        out += [name, len(channels.get(name, ()))]
    return out


def pubsub_numpat(client, argv):
    """PUBSUB NUMPAT

    The number of patterns with at least one subscriber. O(1)."""
    return len(client.server.pubsub.patterns)
