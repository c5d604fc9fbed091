"""Handlers of the persistence commands: SAVE, BGSAVE, LASTSAVE, BGREWRITEAOF."""

from __future__ import annotations

from tstream.resp import OK, Status

from .errors import CommandError, SyntaxErr


def save(client, argv):
    """SAVE

    Writes a snapshot now; every client waits until it is on disk. O(size).
    """
    persistence = client.server.persistence
    if persistence.bgsave_started is not None:
        raise CommandError("ERR Background save already in progress")
    try:
        persistence.save()
    except OSError as exc:
        raise CommandError(f"ERR saving the snapshot failed: {exc.strerror or exc}") from None
    return OK


def bgsave(client, argv):
    """BGSAVE [SCHEDULE]

    Writes a snapshot from a worker thread while clients go on being served.
    O(nodes) on the event loop to capture, the writing in the background.
    """
    if len(argv) > 2 or (len(argv) == 2 and argv[1].lower() != b"schedule"):
        raise SyntaxErr()
    persistence = client.server.persistence
    if persistence.bgsave_started is not None:
        raise CommandError("ERR Background save already in progress")
    if persistence.rewrite_started is not None:
        raise CommandError("ERR Another child process is active (AOF?): can't BGSAVE right now. "
                           "Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.")
    persistence.start_bgsave()
    return Status("Background saving started")


def lastsave(client, argv):
    """LASTSAVE

    Unix time of the last successful snapshot. O(1).
    """
    return client.server.persistence.last_save


def bgrewriteaof(client, argv):
    """BGREWRITEAOF

    Compacts the append-only file: a new base snapshot written in the background,
    the incremental files since it kept. Needs appendonly yes.
    """
    persistence = client.server.persistence
    if persistence.file is None:
        raise CommandError("ERR Background append only file rewriting needs appendonly yes")
    if persistence.rewrite_started is not None:
        raise CommandError("ERR Background append only file rewriting already in progress")
    if persistence.bgsave_started is not None:
        persistence.rewrite_scheduled = True
        return Status("Background append only file rewriting scheduled")
    try:
        persistence.start_rewrite()
    except OSError:
        raise CommandError("ERR Can't execute an AOF background rewriting. "
                           "Please check the server logs for more information.") from None
    return Status("Background append only file rewriting started")
