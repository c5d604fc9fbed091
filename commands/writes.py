"""The write path: what a command changed, and the one place that acts on it.

Modelled on Redis's ``call()`` + ``propagate()`` + ``signalKeyAsReady()``.  A
handler only changes the engine and *describes* the change to its server's
``Writes`` (``server.writes``), with one of the verbs below: ``appended``,
``appended_columns``, ``wrote``, ``group_moved``, ``acked``, ``configured``,
``created``, ``deleted``, ``flushed`` (and ``limit_deletes`` for
housekeeping).  A verb notes the effect records (``persistence.effects``: what
the append-only file logs and replays), the changes to count and the keys to
wake; nothing else.

Then ``commit`` (called by the dispatcher after every handler returns or
raises, by the end of the turn after the group reads it serves, and by the
housekeeping pass) is the one place that acts:

1. for the stream the command wrote: an EVICT record when its first offset
   moved (its limits evicted on the way), DELETE records for the entries its
   per-subject limit deleted;
2. every record, in order, to every effect sink (``sinks``: the append-only
   file while ``appendonly`` is on; replicas would be more);
3. the changes added to ``server.dirty`` (save points, INFO);
4. blocked readers woken: the written keys are marked ready (served at the end
   of the loop turn, server.blocking), group readers of deleted keys unblocked;
5. connections that WATCH a written key marked (their EXEC will do nothing).

While EXEC runs (``begin_transaction`` .. ``end_transaction``) step 2 collects
the records instead, and they are logged together as one TXN record.

Hot paths stay cheap: one ``Writes`` per server, reused (a command allocates
nothing here but its records, and those only when there is a sink); the
stream a command wrote sits in three slots, not a list; the dispatcher pays
one attribute check (``pending``) for a command that wrote nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from tstream.persistence.effects import (
    ACK,
    APPEND,
    CONFIG,
    CREATE,
    DELETE,
    DELKEY,
    EVICT,
    FLUSH,
    INGEST,
    TXN,
    XADD,
    XDEL,
    XSETID,
    group_moved,
)


class Writes:
    __slots__ = ("server", "sinks", "records", "dirty", "pending", "key", "stream", "first", "wake",
                 "ready", "gone", "watched", "transaction", "waiting", "lost")

    def __init__(self, server) -> None:
        self.server = server  # reads waiting_keys and blocking, adds to dirty
        self.sinks: list = []  # objects with log(record): where the effect records go
        self.records: list[list] = []  # this command's effect records, built only if there is a sink
        self.dirty = 0  # this command's changes
        self.pending = False  # something to commit
        # The stream this command wrote, and its first offset before the command.
        self.key: bytes | None = None
        self.stream = None
        self.first = 0
        self.wake = False  # its blocked readers may be served now
        self.ready: list[bytes] = []  # other keys to wake (TACK)
        self.gone: list[bytes] = []  # deleted keys that clients wait on
        # WATCH (commands.transactions): key -> the connections watching it; a
        # committed change of a key marks them (EXEC then does nothing).
        self.watched: dict[bytes, set] = server.watched
        self.waiting: set[bytes] = server.waiting_keys  # the same set: keys blocked clients wait on
        # While EXEC runs: the effect records of its commands, logged as one TXN record.
        self.transaction: list | None = None
        # A change of the last commit could not be recorded for the sinks (MemoryError):
        # the dispatcher turns the command's reply into an error (see commit).
        self.lost = False

    def add_sink(self, sink) -> None:
        if sink not in self.sinks:
            self.sinks.append(sink)

    def remove_sink(self, sink) -> None:
        if sink in self.sinks:
            self.sinks.remove(sink)

    def begin_transaction(self) -> None:
        """Until ``end_transaction``, collect the effect records instead of logging them."""
        self.transaction = []

    def end_transaction(self) -> None:
        """Log the records collected since ``begin_transaction`` as one unit: a TXN
        record, which a crash leaves whole or cuts off whole (persistence.effects)."""
        records, self.transaction = self.transaction, None
        if records:
            record = records[0] if len(records) == 1 else [TXN, records]
            for sink in self.sinks:
                sink.log(record)

    def record_lost(self) -> None:
        """A change is in memory but its record could not be built or handed to the
        sinks (MemoryError): the append-only file no longer says what memory holds.
        The command that made it is answered with an error, not an acknowledgement
        (``lost``, read by the dispatcher), and persistence refuses writes until a
        rewrite has saved memory as it is (server.persist.Persistence.record_lost)."""
        self.lost = True
        self.records.clear()
        self.server.persistence.record_lost()

    def touch(self, key: bytes) -> None:
        """``key`` changed: the connections WATCHing it will not run their EXEC."""
        clients = self.watched.get(key)
        if clients:
            for client in clients:
                client.dirty_cas = True

    # --- describing: what handlers call --------------------------------------------

    def wrote(self, key: bytes, stream, first: int, dirty: int = 1, wake: bool = True) -> None:
        """``stream`` at ``key`` changed (``dirty`` changes); its first offset was
        ``first`` before the command.  ``wake``: new entries, serve its readers."""
        if self.stream is not stream:
            if self.stream is not None:
                self._settle()  # a second stream in one command: the first one is done
            self.key = key
            self.stream = stream
            self.first = first
            self.wake = wake
        elif wake:
            self.wake = True
        self.dirty += dirty
        self.pending = True

    def appended(self, key: bytes, stream, first: int, offset: int, items: list, start: int,
                 dirty: int = 1) -> None:
        """Entries ``items[start:]`` (tag, data, tag, data, ...) were appended to
        ``stream`` from ``offset`` on, with the stream's last time."""
        sinks = self.sinks
        if sinks:
            try:
                record = [APPEND, key, offset, stream.last_time, *items[start:]]
            except MemoryError:
                self.record_lost()
            else:
                if not (self.waiting or self.watched or stream._subjects is not None or self.pending
                        or self.transaction is not None) and stream.first == first:
                    # As below, with a record and nothing else: it goes to the sinks now,
                    # which is all commit() would do with it (no EVICT: ``first`` did not move).
                    try:
                        for sink in sinks:
                            sink.log(record)
                    except MemoryError:
                        self.record_lost()
                        self.pending = True  # (the dispatcher then sees ``lost``)
                        return
                    self.server.dirty += dirty
                    return
                self.records.append(record)
        elif not (self.waiting or self.watched or stream._subjects is not None or self.pending):
            # Nothing to log, no reader to wake, no WATCH to break, no per-subject limit,
            # nothing else described: counting the change is all there is to commit.
            self.server.dirty += dirty
            return
        # wrote(key, stream, first, dirty), inlined: this is every TWRITE's path
        if self.stream is not stream:
            if self.stream is not None:
                self._settle()
            self.key = key
            self.stream = stream
            self.first = first
        self.wake = True
        self.dirty += dirty
        self.pending = True

    def appended_partly(self, key: bytes, stream, first: int, offset: int, items: list, start: int) -> None:
        """An append of the pairs ``items[start:]`` from ``offset`` on failed
        midway (MemoryError after a node sealed: the engine keeps what went into
        sealed nodes): the pairs it stored are described as an append of their
        own, so that the log says what the command did."""
        stored = stream.next_offset - offset
        if stored > 0:
            self.appended(key, stream, first, offset, items[:start + 2 * stored], start, stored)

    def appended_columns(self, key: bytes, stream, first: int, offset: int, tags: Sequence[bytes], datas: Sequence[bytes]) -> None:
        """``len(tags)`` entries appended from ``offset`` on (a pipelined run of TWRITE):
        one record, one change per entry."""
        if self.sinks:
            record = [APPEND, key, offset, stream.last_time, *tags, *datas]
            record[4::2], record[5::2] = tags, datas  # interleaved: tag, data, tag, data, ...
            self.records.append(record)
        elif not (self.waiting or self.watched or stream._subjects is not None or self.pending):
            self.server.dirty += len(tags)  # nothing else to commit (see appended)
            return
        if self.stream is not stream:  # wrote(key, stream, first, len(tags)), inlined
            if self.stream is not None:
                self._settle()
            self.key = key
            self.stream = stream
            self.first = first
        self.wake = True
        self.dirty += len(tags)
        self.pending = True

    def ingested(self, key: bytes, stream, first: int, offset: int, tags, datas, batch_id: bytes | None,
                 batch_seq: int, ended: bool, ids) -> None:
        """``len(tags)`` entries (maybe none) appended from ``offset`` on by the fast
        batch ``batch_id``, whose highest batch-seq stored is now ``batch_seq``
        (``ended``: the batch is over), or with the message ids ``ids``: one
        INGEST record (persistence.effects), so the batch's progress and the ids
        are in the file with the entries, all or none of them."""
        if self.sinks:
            record = [INGEST, key, offset, stream.last_time, batch_id, batch_seq, 1 if ended else 0, ids, *tags, *datas]
            record[8::2], record[9::2] = tags, datas  # interleaved: tag, data, tag, data, ...
            self.records.append(record)
        elif not (self.waiting or self.watched or stream._subjects is not None or self.pending):
            self.server.dirty += len(tags) or 1  # nothing else to commit (see appended)
            return
        if self.stream is not stream:  # wrote(key, stream, first, ..., wake=bool(tags)), inlined (every FAST run)
            if self.stream is not None:
                self._settle()
            self.key = key
            self.stream = stream
            self.first = first
            self.wake = bool(tags)
        elif tags:
            self.wake = True
        self.dirty += len(tags) or 1
        self.pending = True

    def xadded(self, key: bytes, stream, first: int, offset: int, xid: tuple[int, int], tag: bytes,
               data: bytes, packed: bool) -> None:
        """XADD appended one entry at ``offset`` with the Redis id ``xid``."""
        if self.sinks:
            self.records.append([XADD, key, offset, stream.last_time, xid[0], xid[1], int(packed), tag, data])
        elif not (self.waiting or self.watched or stream._subjects is not None or self.pending):
            self.server.dirty += 1  # nothing else to commit (see appended)
            return
        self.wrote(key, stream, first)

    def xsetid(self, key: bytes, stream, first: int, top: tuple[int, int], added: int,
               max_deleted: tuple[int, int]) -> None:
        """XSETID set the stream's top id, entries-added and max-deleted id."""
        if self.sinks:
            self.records.append([XSETID, key, top[0], top[1], added, max_deleted[0], max_deleted[1]])
        self.wrote(key, stream, first, wake=False)

    def xdeleted(self, key: bytes, stream, first: int, offsets: list[int]) -> None:
        """XDEL deleted the entries at ``offsets``."""
        if self.sinks:
            self.records.append([XDEL, key, *offsets])
        self.wrote(key, stream, first, len(offsets), wake=False)

    def xgroup_changed(self, key: bytes, stream, records: list[list], wake: bool = False) -> None:
        """An X* consumer group changed (commands/xgroups.py): its effect records
        (persistence.effects XGROUP, XCONSUMER, XOWN, XGDESTROY, XCDEL, ACK)."""
        if self.sinks:
            self.records.extend(records)
        elif not (wake or self.waiting or self.watched or self.pending):
            self.server.dirty += 1  # nothing else to commit (see appended)
            return
        self.wrote(key, stream, stream.first, max(len(records), 1), wake=wake)

    def configured(self, key: bytes, stream, first: int, names: list[str], dirty: int) -> None:
        """The stream's config values ``names`` were set (allow_direct may follow
        them), then its limits enforced."""
        if self.sinks:
            config = stream.config
            record = [CONFIG, key]
            for name in names:
                record += [name.encode(), getattr(config, name)]
            record += [b"allow_direct", config.allow_direct]
            self.records.append(record)
        self.wrote(key, stream, first, dirty, wake=False)

    def created(self, key: bytes, stream) -> None:
        """A new, empty stream at ``key``."""
        if self.watched:
            self.touch(key)
        if self.sinks:
            self.records.append([CREATE, key, stream.node_entries])
            self.pending = True

    def group_moved(self, key: bytes, group, entries=None) -> None:
        """``group`` was created or moved; ``entries`` ([offset, ...] each) were
        handed out and are now pending (as the group keeps them)."""
        if self.watched:
            self.touch(key)
        if self.sinks:
            try:
                self.records.append(group_moved(key, group, [entry[0] for entry in entries] if entries else ()))
            except MemoryError:
                self.record_lost()
        self.dirty += 1
        self.pending = True

    def acked(self, key: bytes, group_name: bytes, offsets: list, wake: bool) -> None:
        """Pending ``offsets`` of a group were acknowledged; ``wake``: the group's
        pending list was full, its capped readers may go on."""
        if self.watched:
            self.touch(key)
        if self.sinks:
            self.records.append([ACK, key, group_name, *offsets])
        elif not (wake or self.pending):
            self.server.dirty += 1  # nothing to log or wake: counting the change is all (see appended)
            return
        if wake:
            self.ready.append(key)
        self.dirty += 1
        self.pending = True

    def deleted(self, key: bytes) -> None:
        """``key`` was removed (DEL)."""
        if self.watched:
            self.touch(key)
        if self.sinks:
            self.records.append([DELKEY, key])
        if key in self.server.waiting_keys:
            self.gone.append(key)
        self.dirty += 1
        self.pending = True

    def flushed(self, count: int, existed=()) -> None:
        """Every key (``count`` of them) was removed (FLUSHALL); ``existed``: the
        WATCHed keys among them (a watched key that did not exist is not changed)."""
        for key in existed:
            self.touch(key)
        if self.sinks:
            self.records.append([FLUSH])
        self.gone.extend(self.server.waiting_keys)
        self.dirty += count
        self.pending = True

    def limit_deletes(self, keyspace) -> None:
        """Housekeeping: DELETE records for the entries ``max_msgs_per_subject``
        deleted outside a command's commit (every command's are taken by it)."""
        pending = keyspace.limit_pending
        if not pending:
            return
        streams = keyspace.streams
        lost = False
        for index in list(pending):
            key = index.owner
            if key is not None and streams.get(key) is index.stream:
                self._take_limit_deletes(key, index)
            else:
                lost = True
        if lost:  # indexes the engine built itself: find their keys once
            for key, stream in list(keyspace.items()):
                index = stream._subjects
                if index is not None and index in pending:
                    index.owner = key
                    self._take_limit_deletes(key, index)
        pending.clear()  # what is left belongs to streams deleted since

    def _take_limit_deletes(self, key: bytes, index) -> None:
        offsets = index.take_deleted()
        if self.sinks and offsets:
            self.records.append([DELETE, key, *offsets])
            self.pending = True

    def replicated_run(self, key: bytes, records: list) -> None:
        """:meth:`replicated` of a run of APPEND records of ``key``, at once
        (effects.Replay applies a replica's runs in one engine call)."""
        for sink in self.sinks:
            log = sink.log
            for record in records:
                log(record)
        self.dirty += len(records)
        self.pending = True
        if self.watched:
            self.touch(key)
        if key in self.waiting:
            self.ready.append(key)

    def replicated(self, record: list) -> None:
        """A record received from this replica's primary was applied to the keyspace
        (server.replication): logged to the sinks (the AOF), counted, its key's
        readers woken and watchers marked."""
        for sink in self.sinks:
            sink.log(record)
        self.dirty += 1
        self.pending = True
        kind = record[0]
        if kind == FLUSH:
            self.gone.extend(self.server.waiting_keys)
            for key in list(self.watched):
                self.touch(key)
            return
        for inner in record[1] if kind == TXN else (record,):
            if len(inner) > 1:
                key = inner[1]
                if self.watched:
                    self.touch(key)
                if key in self.waiting:
                    (self.gone if inner[0] == DELKEY else self.ready).append(key)

    # --- acting: the one place --------------------------------------------------------

    def commit(self) -> None:  # noqa: C901 (over the limit when it came in)
        """Act on what was described since the last commit (see the module docstring)."""
        self.pending = False
        server = self.server
        stream = self.stream
        if stream is not None:  # _settle(), inlined: this is every TWRITE's path
            key = self.key
            self.stream = None
            if stream.first != self.first and self.sinks:
                self.records.append([EVICT, key, stream.first])
            index = stream._subjects
            if index is not None and index.limit_deleted:
                index.owner = key
                self._take_limit_deletes(key, index)
            if self.wake and key in server.waiting_keys:
                server.blocking.key_ready(key)
            if self.watched:
                self.touch(key)
        records = self.records
        if records:
            try:
                if self.transaction is not None:
                    self.transaction.extend(records)
                else:
                    for sink in self.sinks:
                        for record in records:
                            sink.log(record)
            except MemoryError:
                self.record_lost()
            records.clear()
        server.dirty += self.dirty
        self.dirty = 0
        if self.ready:
            ready, self.ready = self.ready, []
            for key in ready:
                if key in server.waiting_keys:
                    server.blocking.key_ready(key)
        if self.gone:  # last: unblocking a client may run its next commands (and their commits)
            gone, self.gone = self.gone, []
            for key in gone:
                server.key_deleted(key)

    def _settle(self) -> None:
        """The written stream: EVICT/DELETE records of what its limits removed, wake its readers."""
        key, stream = self.key, self.stream
        self.stream = None
        if stream.first != self.first and self.sinks:
            self.records.append([EVICT, key, stream.first])
        index = stream._subjects
        if index is not None and index.limit_deleted:
            index.owner = key
            self._take_limit_deletes(key, index)
        if self.wake and key in self.server.waiting_keys:
            self.server.blocking.key_ready(key)
        if self.watched:
            self.touch(key)
