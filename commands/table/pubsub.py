"""Group ``pubsub``, ACL category @pubsub: PUBLISH, SUBSCRIBE, UNSUBSCRIBE,
PSUBSCRIBE, PUNSUBSCRIBE, PUBSUB (commands/pubsub.py).  Arity and flags as Redis 7.0's."""

from __future__ import annotations

from .. import pubsub
from ..flags import FAST, LOADING, NOSCRIPT, STALE
from .entry import command
from .help import help_command

GROUP = "pubsub"
SUB_FLAGS = NOSCRIPT | LOADING | STALE

COMMANDS = [
    command(
        "publish", pubsub.publish, arity=3, flags=LOADING | STALE | FAST, acl="@pubsub", group=GROUP,
        syntax="PUBLISH channel message",
        summary="Sends a message to a channel's subscribers; replies how many got it.",
        complexity="O(N+M): N subscribers of the channel, M patterns subscribed.",
    ),
    command(
        "subscribe", pubsub.subscribe, arity=-2, flags=SUB_FLAGS, acl="@pubsub", group=GROUP,
        syntax="SUBSCRIBE channel [channel ...]",
        summary="Listens to channels (RESP2: the connection enters subscribe mode).",
        complexity="O(N) for N channels.",
    ),
    command(
        "psubscribe", pubsub.psubscribe, arity=-2, flags=SUB_FLAGS, acl="@pubsub", group=GROUP,
        syntax="PSUBSCRIBE pattern [pattern ...]",
        summary="Listens to the channels matching glob-style patterns.",
        complexity="O(N) for N patterns.",
    ),
    command(
        "unsubscribe", pubsub.unsubscribe, arity=-1, flags=SUB_FLAGS, acl="@pubsub", group=GROUP,
        syntax="UNSUBSCRIBE [channel [channel ...]]",
        summary="Stops listening to channels (all of them without arguments).",
        complexity="O(N) for N channels.",
    ),
    command(
        "punsubscribe", pubsub.punsubscribe, arity=-1, flags=SUB_FLAGS, acl="@pubsub", group=GROUP,
        syntax="PUNSUBSCRIBE [pattern [pattern ...]]",
        summary="Stops listening to patterns (all of them without arguments).",
        complexity="O(N) for N patterns.",
    ),
    command(
        "pubsub", None, arity=-2, flags=0, group=GROUP,
        syntax="PUBSUB CHANNELS|NUMSUB|NUMPAT|HELP ...",
        summary="A container for pub/sub introspection commands.",
        complexity="Depends on subcommand.",
        subcommands=[
            command(
                "pubsub|channels", pubsub.pubsub_channels, arity=-2, flags=LOADING | STALE, acl="@pubsub",
                group=GROUP,
                syntax="PUBSUB CHANNELS [pattern]",
                summary="The channels with at least one subscriber.",
                complexity="O(N) for N channels.",
            ),
            command(
                "pubsub|numsub", pubsub.pubsub_numsub, arity=-2, flags=LOADING | STALE, acl="@pubsub",
                group=GROUP,
                syntax="PUBSUB NUMSUB [channel [channel ...]]",
                summary="The number of subscribers of each channel.",
                complexity="O(N) for N channels.",
            ),
            command(
                "pubsub|numpat", pubsub.pubsub_numpat, arity=2, flags=LOADING | STALE, acl="@pubsub",
                group=GROUP,
                syntax="PUBSUB NUMPAT",
                summary="The number of patterns subscribed.",
                complexity="O(1).",
            ),
            help_command("pubsub", GROUP),
        ],
    ),
]
