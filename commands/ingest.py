"""BATCH ... FAST: fast-ingest batch publish (ADR-50 revisions 7-8), and MSGID checks.

    BATCH key batch-id batch-seq subject data FAST flow gap [EXPECT_LAST_SEQ n]
          [EXPECT_LAST_SUBJECT_SEQ n] [MSGID id] [COMMIT]
    BATCH key batch-id batch-seq FAST flow gap EOB
    BATCH key batch-id batch-seq FAST flow gap PING

Messages are not staged: each is appended when it arrives.  The batch's state
lives on its stream (engine/ingest.py, ``Stream._ingest``) and its progress is
logged with each append (the INGEST record), so a restart knows the batch again.
The server's ``FastRegistry`` (``server.fast``) counts the active publishers
and abandons idle batches.

Replies: batch-seq 1 gets the first flow ack ``{type: ack, seq, ack_msgs}``;
then every ``ack_msgs``-th message gets a flow ack and the others ``+OK``; a gap
in ``gap ok`` mode ``{type: gap, last_seq, seq}``; a resent message
``{type: duplicate, seq}``; COMMIT and EOB the final pub ack
``{stream, seq, batch, count}``.

The pipelined hot path (``batch_run``): a run of plain ``BATCH key id seq
subject data FAST flow gap`` messages of one batch, consecutive batch-seqs, is
appended with one ``Stream.append_columns`` and logged as one record; the work
per message is the column checks (C loops) and its share of the reply.
"""

from __future__ import annotations

import os
from time import monotonic, time_ns

from tstream.engine.ingest import MAX_FLOW, MAX_ID_LENGTH, Ingest
from tstream.engine.subjects import index_of
from tstream.resp import OK, encode, encode_error, encode_flow_ack
from tstream.resp.scan import scan_fast_run_python

from .args import to_int, to_nonnegative
from .errors import CommandError, SyntaxErr, out_of_memory

OK_BYTES = b"+OK\r\n"
DUPLICATE_MSGID = "ERR 10201 duplicate message id is in process"


def batch_error(code: int, text: str) -> CommandError:
    return CommandError(f"ERR {code} {text}")


def not_enabled() -> CommandError:
    return batch_error(10203, "batch publish not enabled on stream")


def invalid_pattern(why: str) -> CommandError:
    return batch_error(10204, f"batch publish invalid pattern used ({why})")


def invalid_id() -> CommandError:
    return batch_error(10205, f"batch publish ID is invalid (empty or exceeds {MAX_ID_LENGTH} characters)")


def unknown_id() -> CommandError:
    return batch_error(10206, "batch publish ID is unknown")


def is_fast(argv: list) -> bool:
    """True if ``argv`` (a BATCH) is a fast-ingest one."""
    n = len(argv)
    if n >= 9 and argv[6].lower() == b"fast":
        return True
    return n == 8 and argv[4].lower() == b"fast" and argv[6].lower() in (b"ok", b"fail")


def _seq(arg: bytes) -> int:
    try:
        value = to_int(arg)
    except CommandError:
        value = 0
    if value <= 0:
        raise invalid_pattern("batch-seq must be a positive integer")
    return value


def _flow(arg: bytes) -> int:
    try:
        value = to_int(arg)
    except CommandError:
        value = 0
    if not 1 <= value <= MAX_FLOW:
        raise invalid_pattern(f"flow must be 1-{MAX_FLOW}")
    return value


def _gap(arg: bytes) -> bool:
    word = arg.lower()
    if word == b"fail":
        return True
    if word != b"ok":
        raise invalid_pattern("gap must be ok or fail")
    return False


def _measures(server) -> tuple[int, int, int]:
    """(active fast batches, unsynced AOF bytes, the loop turns' work in the loop
    thread's CPU ns (average): CPU, not wall time, so that a loop waiting for a
    core, which smaller acks would not help, does not halve ``ack_msgs``)."""
    return len(server.fast.active), server.persistence.unsynced_bytes(), server.turn_end.busy_cpu_ns


def _flow_ack(batch, seq: int) -> dict:
    return {"type": "ack", "seq": seq, "ack_msgs": batch.ack_msgs}


def _pub_ack(key: bytes, batch, count: int) -> dict:
    return {"stream": key, "seq": batch.last_offset, "batch": batch.id, "count": count}


def _expect_error(stream, subject: bytes, expect_last, expect_subject) -> CommandError | None:
    """The EXPECT_* check of one message against the stream as it is now."""
    if expect_last is not None:
        last = stream.last if stream is not None else 0
        if last != expect_last:
            return batch_error(10071, f"wrong last sequence: {last}")
    if expect_subject is not None:
        actual = index_of(stream).last(subject) if stream is not None and stream.last else 0
        if actual != expect_subject:
            return batch_error(10071, f"wrong last sequence: {actual}")
    return None


def _error_map(exc: CommandError) -> dict:
    code, _, text = exc.message[4:].partition(" ")
    return {"code": int(code), "description": text}


def fast_batch(client, argv):  # noqa: C901 (one message of every kind: the rare path)
    """One BATCH ... FAST command (see the module docstring). O(1)."""
    server = client.server
    n = len(argv)
    key, batch_id = argv[1], argv[2]
    subject = data = msgid = None
    expect_last = expect_subject = None
    commit = eob = ping = False
    if n == 8 and argv[4].lower() == b"fast":
        flow_arg, gap_arg = argv[5], argv[6]
        op = argv[7].lower()
        eob, ping = op == b"eob", op == b"ping"
        if not (eob or ping):
            raise invalid_pattern("unknown operation")
    else:
        subject, data = argv[4], argv[5]
        flow_arg, gap_arg = argv[7], argv[8]
        commit, expect_last, expect_subject, msgid = message_options(argv, 9, _not_a_fast_option)
    if not batch_id or len(batch_id) > MAX_ID_LENGTH:
        raise invalid_id()
    flow = _flow(flow_arg)
    gap_fail = _gap(gap_arg)
    seq = _seq(argv[3])
    stream = server.streams.get(key)
    ingest = stream._ingest if stream is not None else None
    batch = ingest.batches.get(batch_id) if ingest is not None else None
    if stream is not None and not stream.settings.allow_batched:
        if batch is not None:
            server.fast.ended(batch)
        raise not_enabled()
    if server.batches.get(key, batch_id) is not None:
        raise invalid_pattern("an atomic batch with this id is in flight: FAST missing")
    if batch is None:
        if seq != 1 or eob or ping:
            raise unknown_id()
    else:
        batch.key = key  # (a batch loaded from a snapshot learns its key here)
        if batch.owner is not ingest:
            batch.owner = ingest
    now = monotonic()
    fast = server.fast

    if batch is None:  # operation 0: a new batch
        if stream is None:
            stream = server.create_stream(key)
        if stream._ingest is None:
            stream._ingest = Ingest()
        batch = stream._ingest.batch(key, batch_id)
        batch.set_mode(flow, gap_fail, flow_arg, gap_arg)
        fast.track(batch)
        batch.start_flow(len(fast))
        batch.next_ack = 1
    else:
        batch.last_active = now
        if (key, batch_id) not in fast.active:
            fast.track(batch)
        if flow_arg != batch.flow_arg or gap_arg != batch.gap_arg:
            batch.set_mode(flow, gap_fail, flow_arg, gap_arg)

    if ping:
        reply = _flow_ack(batch, batch.last)
        if batch.gap is not None:
            reply["last_seq"], reply["gap_seq"] = batch.gap
        return reply

    last = batch.last
    if eob:
        count = seq - 1
        reply = None
        if count > last:  # messages missing before the EOB
            if gap_fail:
                count = last
            reply = {"last_seq": last, "gap_seq": seq}
        return _end(server, key, stream, batch, count, reply)

    if seq <= last:  # resent: never stored twice
        return {"type": "duplicate", "seq": seq}
    gap = seq > last + 1
    if gap and gap_fail:
        return _end(server, key, stream, batch, last, {"last_seq": last, "gap_seq": seq})
    error = _expect_error(stream, subject, expect_last, expect_subject)
    if error is not None:
        if gap_fail:
            return _end(server, key, stream, batch, last, {"error": _error_map(error)})
        batch.last = seq  # received, not stored: the next batch-seq is not a gap
        reply = _flow_ack(batch, seq)
        reply["error"] = _error_map(error)
        return reply
    duplicate = False
    if msgid is not None:
        window = stream.settings.duplicate_window_ms
        if window:
            ingest = stream._ingest
            if ingest.seen(msgid, time_ns(), window * 1_000_000) is not None:
                duplicate = True
        else:
            msgid = None
    first = stream.first
    if duplicate:  # the message id is in the window: counted as received, not stored
        batch.last = seq
        if commit:
            reply = _end(server, key, stream, batch, seq)
            reply["duplicate"] = 1
            return reply
        reply = _flow_ack(batch, seq)
        reply["duplicate"] = 1
        return reply
    try:
        offset = stream.append(subject, data, time_ns())
    except MemoryError:
        raise out_of_memory(0, 1, stream.next_offset) from None
    batch.last = batch.stored = seq
    batch.last_offset = offset
    ids = [msgid] if msgid is not None else []
    if ids:
        stream._ingest.add_ids(ids, offset, stream.last_time)
    if commit:
        fast.ended(batch)
        server.writes.ingested(key, stream, first, offset, (subject,), (data,), batch_id, seq, True, ids)
        return _pub_ack(key, batch, seq)
    server.writes.ingested(key, stream, first, offset, (subject,), (data,), batch_id, seq, False, ids)
    if gap:
        batch.gap = (last, seq)
        return {"type": "gap", "last_seq": last, "seq": seq}
    if seq >= batch.next_ack:
        if seq > 1:
            batch.adjust(*_measures(server))
        batch.next_ack = seq + batch.ack_msgs
        return _flow_ack(batch, seq)
    return OK


def _end(server, key: bytes, stream, batch, count: int, extra: dict | None = None) -> dict:
    """End the batch (EOB, a gap or an expectation in gap fail mode): the final pub ack."""
    server.fast.ended(batch)
    server.writes.ingested(key, stream, stream.first, stream.next_offset, (), (), batch.id, batch.stored, True, [])
    reply = _pub_ack(key, batch, count)
    if extra:
        reply.update(extra)
    return reply


def message_options(argv: list, i: int, unknown) -> tuple[bool, int | None, int | None, bytes | None]:
    """A BATCH message's options from ``argv[i]`` on, atomic or fast: ``(commit,
    EXPECT_LAST_SEQ, EXPECT_LAST_SUBJECT_SEQ, MSGID)``, each given at most once;
    ``unknown(word)`` raises the error for any other word."""
    n = len(argv)
    commit = False
    expect_last = expect_subject = msgid = None
    while i < n:
        word = argv[i].lower()
        if word == b"commit" and not commit:
            commit = True
            i += 1
        elif word == b"expect_last_seq" and i + 1 < n and expect_last is None:
            expect_last = to_nonnegative(argv[i + 1], "EXPECT_LAST_SEQ")
            i += 2
        elif word == b"expect_last_subject_seq" and i + 1 < n and expect_subject is None:
            expect_subject = to_nonnegative(argv[i + 1], "EXPECT_LAST_SUBJECT_SEQ")
            i += 2
        elif word == b"msgid" and i + 1 < n and msgid is None:
            msgid = argv[i + 1]
            i += 2
        else:
            unknown(word)
    return commit, expect_last, expect_subject, msgid


def _not_a_fast_option(word: bytes) -> None:
    if word in (b"eob", b"ping"):
        raise invalid_pattern("EOB and PING carry no message")
    raise SyntaxErr()


# The batch-seq check in C (resp/_speedups.c ``decimal_run``: one memcmp a seq
# against a decimal counter, ~60 instructions a message), unless the extension
# was not built or is turned off (TSTREAM_PURE_PYTHON, as for the C parser).
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from tstream.resp._speedups import decimal_run
except ImportError:
    decimal_run = None
try:  # (separate: an extension built before fast_run_columns existed still gives decimal_run)
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from tstream.resp._speedups import fast_run_columns
except ImportError:
    fast_run_columns = None


# The read's scan in C (resp/_speedups.c), unless the extension is off or not built.
# ``None`` turns the connection's fast-ingest read off (a switch for tests:
# tests/test_fast_scan.py compares a server with it and one without).
try:
    if os.environ.get("TSTREAM_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("TSTREAM_PURE_PYTHON is set")
    from tstream.resp._speedups import scan_fast_run
except ImportError:
    scan_fast_run = scan_fast_run_python
if os.environ.get("TSTREAM_NO_FAST_SCAN", "") not in ("", "0"):
    scan_fast_run = None


def consecutive(seqs: tuple, lo: int) -> bool:
    """Whether the batch-seqs ``seqs`` (bytes) are exactly ``lo``, ``lo + 1``, ...
    in decimal (no sign, no leading zero, nothing else).  O(len(seqs)): in C
    (``decimal_run``) when built; else ``consecutive_python``.  The C check
    costs ~60 instructions a message; the Python one ~1,000-1,500 (its integer
    grows with the run: 128 seqs of 6 digits are a 768-digit int())."""
    if decimal_run is not None:
        answer = decimal_run(seqs, lo)
        if answer is not None:
            return answer
    return consecutive_python(seqs, lo)


def consecutive_python(seqs: tuple, lo: int) -> bool:
    """``consecutive`` without the C extension.  O(len(seqs)), in C passes
    over bytes: when every seq has the same number of digits ``w`` (a run that
    crosses no power of ten), their concatenation is one integer, whose value
    with base ``10 ** w`` digits ``lo + i`` has a closed form; formatting each
    expected seq costs ~15x more (~1,100 instructions a message).  Else, each
    expected seq is formatted and compared."""
    count = len(seqs)
    width = len(seqs[0])
    spaced = b" ".join(seqs)
    base = 10 ** width
    if (len(spaced) == (width + 1) * count - 1 and width * count <= 4000  # (int()'s digit limit: 4300)
            and base // 10 <= lo and lo + count <= base):  # every expected seq has ``width`` digits
        if spaced.count(b" ") != count - 1 or spaced[width::width + 1] != b" " * (count - 1):
            return False  # a seq with a space, or not of ``width`` characters
        digits = spaced.replace(b" ", b"")
        if not digits.isdigit():
            return False
        ones = (base ** count - 1) // (base - 1)  # sum of base ** j, j < count
        return int(digits) == lo * ones + (ones - count) // (base - 1)
    return spaced == " ".join(map(str, range(lo, lo + count))).encode()


def run_columns_python(argvs: list, lo: int) -> tuple[tuple, tuple] | bool:
    """``fast_run_columns`` without the C extension: the run's ``(subjects,
    datas)`` when every command of ``argvs`` (9-word ``BATCH key id seq subject
    data FAST flow gap``) has the first one's key, id, FAST word, flow and gap
    and their batch-seqs are ``lo``, ``lo + 1``, ... (``consecutive``); else
    False.  The subjects are the first one's object ``len(argvs)`` times when
    all are equal (the engine then compares by identity).  O(len(argvs))."""
    count = len(argvs)
    _, keys, ids, seqs, subjects, datas, fasts, flows, gaps = zip(*argvs)
    first_argv = argvs[0]
    if (not consecutive(seqs, lo) or keys.count(first_argv[1]) != count or ids.count(first_argv[2]) != count
            or fasts.count(first_argv[6]) != count or flows.count(first_argv[7]) != count
            or gaps.count(first_argv[8]) != count):
        return False
    if subjects.count(subjects[0]) == count:
        subjects = (subjects[0],) * count
    return subjects, datas


def batch_run(client, argvs: list) -> bytes:
    """A pipelined run of 9-word BATCH commands (see commands.dispatch).

    The hot path: every command a plain fast message of one batch, spelled
    alike, with the batch-seqs that follow the batch's last one: one append,
    one record, the replies (+OK, a flow ack at each ack point) joined.
    Anything else runs command by command.  The checks and the columns: one
    C call (``fast_run_columns``), else ``run_columns_python``.  O(messages)."""
    server = client.server
    _, key, batch_id, _, _, _, fast_word, flow_arg, gap_arg = argvs[0]  # (9 words: the table's run_words)
    stream = server.streams.get(key)
    batch = _open_batch(stream, batch_id, fast_word, flow_arg, gap_arg)
    if batch is None:
        return _each(client, argvs)
    lo = batch.last + 1
    if fast_run_columns is None or (columns := fast_run_columns(argvs, lo)) is None:
        columns = run_columns_python(argvs, lo)
    if columns is False:
        return _each(client, argvs)
    subjects, datas = columns
    return store_run(client, key, batch_id, stream, batch, lo, subjects, datas)


def _open_batch(stream, batch_id: bytes, fast_word: bytes, flow_arg: bytes, gap_arg: bytes):
    """The open fast batch ``batch_id`` of ``stream`` when a run of plain messages
    spelled with ``fast_word``, ``flow_arg`` and ``gap_arg`` may go to it
    whole (``store_run``), else None (the messages then run one by one)."""
    ingest = stream._ingest if stream is not None else None
    batch = ingest.batches.get(batch_id) if ingest is not None else None
    if (batch is None or batch.flow_arg != flow_arg or batch.gap_arg != gap_arg
            # (stream.settings.allow_batched, inlined: no config of its own is the defaults, which allow it)
            or (config := stream._config) is not None and not config.allow_batched
            or fast_word != b"FAST" and fast_word.lower() != b"fast"):
        return None
    return batch


def scan_run(client, template: list, data: bytes, max_count: int, max_bulk: int) -> tuple | None:
    """A read of plain fast messages run straight from its bytes (commands/dispatch.py
    ``execute_scan``): when ``template`` (the 9-word BATCH ... FAST message the
    client ran last) names a batch still open, the read's leading commands that
    are that message again with the next batch-seqs (``scan_fast_run``, at most
    ``max_count``, data of at most ``max_bulk`` bytes) are stored as
    ``batch_run`` stores a run (``store_run``): ``(replies, count, bytes
    consumed, the first batch-seq, the first data)``, the replies an Exception
    if the store raised one (the dispatcher answers it as a failed run's).  None,
    with nothing done, otherwise.  O(messages)."""
    if scan_fast_run is None:  # (turned off: TSTREAM_NO_FAST_SCAN)
        return None
    server = client.server
    _, key, batch_id, _, subject, _, fast_word, flow_arg, gap_arg = template
    stream = server.streams.get(key)
    batch = _open_batch(stream, batch_id, fast_word, flow_arg, gap_arg)
    if (batch is None or server.fast.active.get((key, batch_id)) is not batch
            or server.batches.by_id and server.batches.get(key, batch_id) is not None):
        return None  # (untracked, or an atomic batch of that id: BATCH's own checks apply)
    lo = batch.last + 1
    scanned = scan_fast_run(data, template, lo, max_count, max_bulk)
    if scanned is None:
        return None
    count, datas, consumed = scanned
    try:
        out = store_run(client, key, batch_id, stream, batch, lo, (subject,) * count, datas)
    except Exception as exc:  # (a bug: the dispatcher's _run_failed answers it, as a run handler's)
        out = exc
    return out, count, consumed, lo, datas[0]


def store_run(client, key: bytes, batch_id: bytes, stream, batch, lo: int, subjects: tuple, datas: tuple) -> bytes:
    """Store a run of plain messages of the open ``batch`` (batch-seqs ``lo``, ``lo
    + 1``, ..., checked), log them as one record and reply (``batch_run`` and
    ``scan_run``).  O(messages)."""
    server = client.server
    count = len(datas)
    first = stream.first
    start = stream.next_offset
    try:
        offset = stream.append_columns(subjects, datas, time_ns())
    except MemoryError:  # what was stored (in sealed nodes) is logged and acknowledged one by one
        stored = stream.next_offset - start
        if stored:
            batch.last = batch.stored = lo + stored - 1
            batch.last_offset = stream.next_offset - 1
            server.writes.ingested(key, stream, first, start, subjects[:stored], datas[:stored], batch_id,
                                   batch.stored, False, [])
        error = encode_error(out_of_memory(0, 1, 0).message)
        refused = count - stored  # (counted as failed commands, as one BATCH's error is by the dispatcher)
        server.dispatch[b"batch"][6].failed += refused
        server.stats.errors += refused
        return OK_BYTES * stored + error * refused
    hi = lo + count  # past the last batch-seq of the run
    batch.last = batch.stored = hi - 1
    batch.last_offset = offset + count - 1
    batch.last_active = monotonic()
    server.writes.ingested(key, stream, first, offset, subjects, datas, batch_id, hi - 1, False, [])
    next_ack = batch.next_ack
    if next_ack < lo:  # (behind after a restart, a gap or a duplicate: the first message is due)
        next_ack = lo
    if next_ack >= hi:
        return OK_BYTES * count
    # The flow control's measures (_measures, inlined), read once for the run's ack
    # points; adjust() is skipped when it would change nothing (FastBatch.keeps_steady:
    # the interval at its ceiling and the loop keeping up, the usual ack).
    active, unsynced, turn_ns = len(server.fast.active), server.persistence.unsynced_bytes(), server.turn_end.busy_cpu_ns
    steady = batch.keeps_steady(active, unsynced, turn_ns)
    if not steady:
        batch.adjust(active, unsynced, turn_ns)
        steady = batch.keeps_steady(active, unsynced, turn_ns)
    protocol = client.protocol
    ack_msgs = batch.ack_msgs
    following = next_ack + ack_msgs
    if following >= hi:  # one ack point in the run (a read of the flow's size): no list
        batch.next_ack = following
        return OK_BYTES * (next_ack - lo) + encode_flow_ack(protocol, next_ack, ack_msgs) + OK_BYTES * (hi - next_ack - 1)
    out = [OK_BYTES * (next_ack - lo), encode_flow_ack(protocol, next_ack, ack_msgs)]
    pos = next_ack + 1
    next_ack = following
    while next_ack < hi:
        out.append(OK_BYTES * (next_ack - pos))
        if not steady:
            batch.adjust(active, unsynced, turn_ns)
            steady = batch.keeps_steady(active, unsynced, turn_ns)
        ack_msgs = batch.ack_msgs
        out.append(encode_flow_ack(protocol, next_ack, ack_msgs))
        pos = next_ack + 1
        next_ack += ack_msgs
    batch.next_ack = next_ack
    out.append(OK_BYTES * (hi - pos))
    return b"".join(out)


def _each(client, argvs: list) -> bytes:
    """Each BATCH of a run on its own (through the BATCH handler)."""
    handler = client.server.dispatch[b"batch"][1]  # jetstream.batch (which imports this module)
    out = []
    protocol = client.protocol
    for argv in argvs:
        try:
            out.append(encode(handler(client, argv), protocol))
        except CommandError as exc:
            out.append(encode_error(exc.message))
    return b"".join(out)
