"""Modes of a connection that check its commands: layers on its dispatcher gate.

A connection's ``gate`` (commands/dispatch.py) is None, or a callable the
dispatcher runs before each command (the ACL check of a user with limits,
server/acl.py).  A mode of the connection that must see its commands -- RESP2
subscribe mode (commands/pubsub.py), CLIENT REPLY OFF|SKIP
(commands/connection.py) -- adds a :class:`Layer` in front of that gate, and
removes it when the mode ends, wherever it sits among the others::

    client.gate = Layer("reply", ..., Layer("subscribe", ..., acl_gate))

Setting a gate also sends the connection's commands through the dispatcher's
rare path, so a mode costs the other connections nothing.
"""

from __future__ import annotations

from typing import Callable


class Layer:
    """One mode's check, then the rest of the gate."""

    __slots__ = ("kind", "check", "inner")

    def __init__(self, kind: str, check: Callable, inner) -> None:
        self.kind = kind
        self.check = check  # check(client, name): raises CommandError to refuse
        self.inner = inner

    def __call__(self, client, name: bytes, argv: list, command) -> None:
        self.check(client, name)
        if self.inner is not None:
            self.inner(client, name, argv, command)


def has_layer(client, kind: str) -> bool:
    gate = client.gate
    while isinstance(gate, Layer):
        if gate.kind == kind:
            return True
        gate = gate.inner
    return False


def add_layer(client, kind: str, check: Callable) -> None:
    """Put the mode ``kind``'s check in front of the connection's gate (once)."""
    if not has_layer(client, kind):
        client.gate = Layer(kind, check, client.gate)


def remove_layer(client, kind: str) -> None:
    """Take the mode ``kind``'s check out of the connection's gate, if there."""
    kept = []
    gate = client.gate
    while isinstance(gate, Layer):
        if gate.kind != kind:
            kept.append(gate)
        gate = gate.inner
    for layer in reversed(kept):
        gate = Layer(layer.kind, layer.check, gate)
    client.gate = gate


def rebase(client, base) -> None:
    """Put the connection's mode layers on a new base gate (a new ACL user)."""
    kept = []
    gate = client.gate
    while isinstance(gate, Layer):
        kept.append(gate)
        gate = gate.inner
    for layer in reversed(kept):
        base = Layer(layer.kind, layer.check, base)
    client.gate = base
