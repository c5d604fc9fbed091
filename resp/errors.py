"""Errors of the protocol layer."""


class ProtocolError(Exception):
    """The client sent bytes that are not a RESP command; the connection must close.

    The message is what follows ``-ERR Protocol error: `` in the reply.
    """
