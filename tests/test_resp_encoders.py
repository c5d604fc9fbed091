"""Every fast encoder of resp/ gives exactly the bytes of the general ``encode``,
under RESP2 and RESP3 (the fast ones skip encode's type dispatch on the hot
replies: integers, runs of integers, TREAD entries, JetStream messages)."""

from __future__ import annotations

import importlib
import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tstream.resp import (
    NO_REPLY,
    NULL_ARRAY,
    OK,
    Entries,
    ErrorReply,
    Status,
    StreamEntries,
    SubjectBulks,
    encode,
    encode_batched_message,
    encode_bulk,
    encode_entries,
    encode_error,
    encode_flow_ack,
    encode_integer,
    encode_integer_run,
    encode_message,
    encode_message_page,
    encode_message_pieces,
    encode_piece_page,
    encode_single_reads,
    encode_stream_entries,
    encode_stream_ids,
)

from . import c_extensions

try:
    from tstream.resp._speedups import encode_integer_run as c_encode_integer_run
except ImportError:
    c_encode_integer_run = None

encode_module = importlib.import_module("tstream.resp.encode")  # (tstream.resp.encode: the function)
needs_c = c_extensions.needs_c(c_encode_integer_run)

protocols = st.sampled_from([2, 3])
int64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
offsets = st.integers(min_value=0, max_value=(1 << 63) - 1)
blobs = st.binary(max_size=64)
entry = st.one_of(st.none(), st.tuples(offsets, blobs, blobs).map(list))


stream_entry = st.tuples(blobs, st.one_of(st.just(NULL_ARRAY), st.lists(blobs, max_size=6))).map(list)


@given(st.lists(stream_entry, max_size=8), protocols)
def test_stream_entries(entries, protocol):
    expected = encode([[xid, NULL_ARRAY if fields is NULL_ARRAY else list(fields)] for xid, fields in entries],
                      protocol)
    assert encode_stream_entries(StreamEntries(entries), protocol == 3) == expected
    assert encode(StreamEntries(entries), protocol) == expected


@given(blobs, protocols)
def test_bulk(value, protocol):
    assert encode_bulk(value) == encode(value, protocol)


@given(int64, protocols)
def test_integer(value, protocol):
    assert encode_integer(value) == encode(value, protocol)


@given(offsets, st.integers(min_value=0, max_value=80), protocols)
def test_integer_run(first, count, protocol):
    expected = b"".join(encode(first + i, protocol) for i in range(count))
    assert encode_integer_run(first, count) == expected


@given(st.integers(min_value=-(1 << 70), max_value=1 << 70), st.integers(min_value=0, max_value=80))
def test_integer_run_python(first, count):
    expected = b"".join(encode(first + i, 2) for i in range(count))
    assert encode_module.encode_integer_run_python(first, count) == expected


@needs_c
def test_integer_run_in_c_is_the_python_one():
    """resp/_speedups.c ``encode_integer_run`` against its fallback: every width
    and carry (9 -> 10, 999 -> 1000), 0, its limit 10**18 and past it (where
    it calls the Python one), negative and huge ints."""
    assert encode_module.encode_integer_run is c_encode_integer_run
    rng = random.Random(35)
    edges = [0, 1, 8, 9, 10, 98, 99, 100, 999, 10**9 - 3, 10**17 - 1, 10**18 - 40, 10**18 - 1, 10**18,
             10**18 + 1, 1 << 63, 1 << 64, -1, -17, -(1 << 63), -(1 << 70)]
    for _ in range(3000):
        first = rng.choice(edges + [rng.randrange(10**k) for k in range(1, 19)])
        count = rng.choice((0, 1, 2, 16, 64, 101, rng.randrange(400)))
        assert c_encode_integer_run(first, count) == encode_module.encode_integer_run_python(first, count), (first, count)
    with pytest.raises(TypeError):
        c_encode_integer_run(1)
    with pytest.raises(TypeError):
        c_encode_integer_run(b"1", 2)
    assert c_extensions.memory_error_count(lambda: c_encode_integer_run(123, 16), 4) >= 1
    assert c_encode_integer_run(123, 3) == b":123\r\n:124\r\n:125\r\n"


def test_integer_run_follows_the_switch():
    probe = "from tstream.resp import encode; print(encode.encode_integer_run is encode.encode_integer_run_python)"
    assert c_extensions.probe_words(probe.replace("from tstream.resp import encode",
                                                  "import importlib; encode = importlib.import_module('tstream.resp.encode')"),
                                    pure=True) == ["True"]


@given(st.integers(min_value=0, max_value=(1 << 64) - 1), offsets, st.integers(min_value=0, max_value=40), protocols)
def test_stream_ids(ms, first_seq, count, protocol):
    expected = b"".join(encode(b"%d-%d" % (ms, first_seq + i), protocol) for i in range(count))
    assert encode_stream_ids(ms, first_seq, count) == expected


@given(st.lists(entry, max_size=12), protocols)
def test_entries(entries, protocol):
    general = encode(list(entries), protocol)
    assert encode_entries(Entries(entries), protocol == 3) == general
    assert encode(Entries(entries), protocol) == general


@given(entry, protocols)
def test_one_entry(one, protocol):  # TREAD key o 1's reply has a short cut
    assert encode_entries(Entries([one]), protocol == 3) == encode([one], protocol)


# A one-entry read's result: an entry held (tag, payload), missing (None) or past the end ("end").
single_read = st.tuples(st.integers(min_value=1, max_value=(1 << 62) - 1),
                        st.one_of(st.tuples(blobs, blobs), st.none(), st.just("end")))


@given(st.lists(single_read, min_size=1, max_size=12), protocols)
def test_single_reads(reads, protocol):  # a run of TREAD key o 1: each reply as encode_entries gives it alone
    end = 1 << 62
    texts = [b"%d" % (o if what != "end" else end + o) for o, what in reads]
    tags = [what[0] if what.__class__ is tuple else None for _, what in reads]
    datas = [what[1] if what.__class__ is tuple else None for _, what in reads]
    expected = b"".join(encode_entries(Entries([] if what == "end" else [[int(text), *what] if what else None]),
                                       protocol == 3) for text, (_, what) in zip(texts, reads))
    assert encode_single_reads(texts, tags, datas, end, protocol == 3) == expected


@given(blobs, blobs, offsets, blobs, blobs, protocols)
def test_message(stream, subject, seq, time, data, protocol):
    fields = {"stream": stream, "subject": subject, "seq": seq, "time": time, "data": data}
    assert encode_message(protocol, stream, subject, seq, time, data) == encode(fields, protocol)


@given(offsets, st.integers(min_value=1, max_value=65535), protocols)
def test_flow_ack(seq, ack_msgs, protocol):
    general = encode({"type": "ack", "seq": seq, "ack_msgs": ack_msgs}, protocol)
    assert encode_flow_ack(protocol, seq, ack_msgs) == general


@given(blobs, blobs, offsets, blobs, blobs, offsets, offsets, protocols)
def test_batched_message(stream, subject, seq, time, data, num_pending, last_seq, protocol):
    fields = {"stream": stream, "subject": subject, "seq": seq, "time": time, "data": data,
              "num_pending": num_pending, "last_seq": last_seq}
    encoded = encode_batched_message(protocol, stream, subject, seq, time, data, num_pending, last_seq)
    assert encoded == encode(fields, protocol)
    # inside a bigger reply (a DGET batch), as a Raw, it is the same as the map
    assert encode([encoded, {"status": 204}], protocol) == encode([fields, {"status": 204}], protocol)


# (a stream name with % in it is no format directive)
@given(st.one_of(st.binary(max_size=16), st.just(b"%d%s%%")),
       st.lists(st.tuples(offsets, blobs, blobs, blobs), max_size=6),
       st.integers(min_value=0, max_value=1000), offsets, protocols)
def test_message_page(stream, messages, more, last_seq, protocol):
    seqs = [m[0] for m in messages]
    subjects = [m[1] for m in messages]
    times = [m[2] for m in messages]
    datas = [m[3] for m in messages]
    pending = len(messages) + more
    tail = {"status": 204, "description": "EOB", "num_pending": more, "last_seq": seqs[-1] if seqs else 0}
    expected = [encode_batched_message(protocol, stream, subject, seq, time, data, pending - k - 1,
                                       seqs[k - 1] if k else last_seq)
                for k, (seq, subject, time, data) in enumerate(messages)]
    assert encode_message_page(protocol, stream, seqs, subjects, times, datas, pending, last_seq, tail) \
        == encode(expected + [tail], protocol)
    # the times of one second: its prefix, and the fractions
    prefix = b"2024-11-04T23:45:%02d" % (len(messages) % 60)
    fractions = [seq % 1_000_000_000 for seq in seqs]
    expected = [encode_batched_message(protocol, stream, subject, seq, b"%s.%09dZ" % (prefix, frac), data,
                                       pending - k - 1, seqs[k - 1] if k else last_seq)
                for k, ((seq, subject, _, data), frac) in enumerate(zip(messages, fractions))]
    assert encode_message_page(protocol, stream, seqs, subjects, fractions, datas, pending, last_seq, tail,
                               prefix) == encode(expected + [tail], protocol)


def test_message_page_random_pages():
    """Pages as DGET/MLAST make them, against the per-message encoding: many
    subjects (some repeated, a kept SubjectBulks shared by the pages and
    overflowing), empty payloads, times across second boundaries (texts) or
    within one second (prefix and fractions), RESP2 and RESP3."""
    rng = random.Random(19)

    class FewBulks(SubjectBulks):
        __slots__ = ()
        MAX = 50  # full and forgotten many times over

    bulks = FewBulks()
    for round_ in range(200):
        protocol = 2 + round_ % 2
        n = rng.choice([0, 1, 2, 7, 100, 257])
        seqs = sorted(rng.sample(range(1, 10 * n + 2), n))
        subjects = [b"t.%d" % rng.randrange(300) if rng.random() < 0.9 else b"" for _ in range(n)]
        datas = [rng.randbytes(rng.choice([0, 0, 1, 99, 300])) for _ in range(n)]
        base = rng.randrange(1, 2_000_000_000) * 1_000_000_000
        within = rng.random() < 0.5
        ns = sorted(base + rng.randrange(1_000_000_000 if within else 3_000_000_000) for _ in range(n))
        texts = [b"%s.%09dZ" % (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // 10**9)).encode(),
                                t % 10**9) for t in ns]
        pending = n + rng.randrange(5)
        last_seq = rng.randrange(10)
        tail = {"status": 204, "description": "EOB", "num_pending": pending - n, "last_seq": seqs[-1] if n else 0}
        expected = encode([encode_batched_message(protocol, b"pg", subject, seq, text, data, pending - k - 1,
                                                  seqs[k - 1] if k else last_seq)
                           for k, (seq, subject, text, data) in enumerate(zip(seqs, subjects, texts, datas))]
                          + [tail], protocol)
        kept = bulks if round_ % 3 else None
        assert encode_message_page(protocol, b"pg", seqs, subjects, texts, datas, pending, last_seq, tail,
                                   None, kept) == expected
        fractions = [t % 10**9 for t in ns]
        if n and ns[-1] // 10**9 == ns[0] // 10**9:
            prefix = texts[0][:-11]
            assert encode_message_page(protocol, b"pg", seqs, subjects, fractions, datas,
                                       pending, last_seq, tail, prefix, kept) == expected
        # each message's prefix (a page across seconds)
        assert encode_message_page(protocol, b"pg", seqs, subjects, fractions, datas, pending, last_seq, tail,
                                   [text[:-11] for text in texts], kept) == expected


def test_piece_pages_are_message_pages():
    """A page from kept pieces (consecutive seqs) is exactly encode_message_page's
    page of the same messages, RESP2 and RESP3, any first last_seq, empty
    pages, payloads and subjects, a stream name with % in it."""
    rng = random.Random(8)
    for round_ in range(300):
        protocol = 2 + round_ % 2
        n = rng.choice([0, 1, 2, 35, 100, 257])
        first = rng.choice([1, 2, 999, 10**12, (1 << 63) - 300])
        seqs = list(range(first, first + n))
        subjects = [b"t.%d" % rng.randrange(300) if rng.random() < 0.9 else b"" for _ in range(n)]
        datas = [rng.randbytes(rng.choice([0, 1, 99, 300])) for _ in range(n)]
        texts = [b"2026-11-27T22:%02d:%02d.%09dZ" % (rng.randrange(60), rng.randrange(60), rng.randrange(10**9))
                 for _ in range(n)]
        pending = n + rng.randrange(5)
        last_seq = rng.choice([0, first - 1, 7])
        stream = rng.choice([b"pg", b"%d%s%%", b""])
        tail = {"status": 204, "description": "EOB", "num_pending": pending - n, "last_seq": seqs[-1] if n else 0}
        pieces = encode_message_pieces(range(first, first + n), subjects, texts, datas)
        assert len(pieces) == n and all(type(piece) is bytes for piece in pieces)
        assert encode_piece_page(protocol, stream, pieces, first, pending, last_seq, tail) \
            == encode_message_page(protocol, stream, seqs, subjects, texts, datas, pending, last_seq, tail)


@given(st.text(max_size=40), protocols)
def test_error(message, protocol):
    assert encode_error(message) == encode(ErrorReply(message), protocol)


def test_constants():
    for protocol in (2, 3):
        assert OK == encode(Status("OK"), protocol) == encode(OK, protocol)
    assert encode(NULL_ARRAY, 2) == b"*-1\r\n" and encode(NULL_ARRAY, 3) == b"_\r\n"
    assert repr(NO_REPLY) == "NO_REPLY"
