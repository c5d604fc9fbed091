"""Unit tests of resp/: the request parser and the reply encoders, no server."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tstream.resp import (
    NULL_ARRAY,
    OK,
    BigNumber,
    ErrorReply,
    ProtocolError,
    RequestParser,
    Set,
    Status,
    StrictRequestParser,
    Verbatim,
    encode,
    encode_error,
)


def multibulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def drain(parser: RequestParser) -> list:
    out = []
    while (command := parser.next_command()) is not None:
        out.append(command)
    return out


def parse_all(data: bytes) -> list:
    parser = RequestParser()
    parser.feed(data)
    return drain(parser)


class TestParser:
    def test_multibulk(self):
        assert parse_all(multibulk(b"TWRITE", b"k", b"t", b"e")) == [[b"TWRITE", b"k", b"t", b"e"]]

    def test_pipelined_commands_come_out_in_order(self):
        data = multibulk(b"PING") + multibulk(b"ECHO", b"x") + multibulk(b"TWRITE", b"k", b"a", b"b")
        assert parse_all(data) == [[b"PING"], [b"ECHO", b"x"], [b"TWRITE", b"k", b"a", b"b"]]

    def test_binary_safe_arguments(self):
        blob = bytes(range(256)) + b"\r\n*3\r\n"
        assert parse_all(multibulk(b"ECHO", blob)) == [[b"ECHO", blob]]
        assert parse_all(multibulk(b"ECHO", b"")) == [[b"ECHO", b""]]

    def test_fed_one_byte_at_a_time(self):
        data = multibulk(b"TWRITE", b"key", b"tag", b"x" * 300) + b"PING\r\n" + multibulk(b"ECHO", b"hi")
        parser = RequestParser()
        got = []
        for i in range(len(data)):
            parser.feed(data[i : i + 1])
            got += drain(parser)
        assert got == [[b"TWRITE", b"key", b"tag", b"x" * 300], [b"PING"], [b"ECHO", b"hi"]]

    def test_incomplete_command_waits_for_more(self):
        parser = RequestParser()
        parser.feed(b"*2\r\n$4\r\nECHO\r\n$5\r\nhel")
        assert parser.next_command() is None
        assert parser.pending_bytes() > 0
        parser.feed(b"lo\r\n")
        assert parser.next_command() == [b"ECHO", b"hello"]

    def test_inline_commands(self):
        assert parse_all(b"PING\r\n") == [[b"PING"]]
        assert parse_all(b"TWRITE  k   tag value\n") == [[b"TWRITE", b"k", b"tag", b"value"]]
        assert parse_all(b"\r\n\r\nPING\r\n") == [[b"PING"]]  # empty lines are skipped

    def test_inline_quotes_and_escapes(self):
        assert parse_all(b'ECHO "a b" \'c d\'\r\n') == [[b"ECHO", b"a b", b"c d"]]
        assert parse_all(b'ECHO "\\x41\\n\\"q\\""\r\n') == [[b"ECHO", b'A\n"q"']]

    def test_inline_then_multibulk_then_inline(self):
        parser = RequestParser()
        parser.feed(b"PING\r\n" + multibulk(b"ECHO", b"a"))
        assert drain(parser) == [[b"PING"], [b"ECHO", b"a"]]
        parser.feed(b"ECHO b\r\n")
        assert drain(parser) == [[b"ECHO", b"b"]]

    def test_unbalanced_quotes_is_a_protocol_error(self):
        with pytest.raises(ProtocolError, match="unbalanced"):
            parse_all(b'ECHO "abc\r\n')

    def test_bad_multibulk_is_a_protocol_error(self):
        with pytest.raises(ProtocolError):
            parse_all(b"*1\r\n:12\r\n")  # arguments must be bulk strings
        with pytest.raises(ProtocolError):
            parse_all(b"*1\r\n*1\r\n$1\r\na\r\n")  # no nested arrays
        with pytest.raises(ProtocolError):
            parse_all(b"*x\r\n")

    def test_empty_multibulk_is_ignored(self):
        assert parse_all(b"*0\r\n" + multibulk(b"PING")) == [[b"PING"]]

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=6), min_size=1, max_size=8),
        st.lists(st.integers(min_value=1, max_value=30), max_size=30),
    )
    def test_any_split_gives_the_same_commands(self, commands, cuts):
        data = b"".join(multibulk(*c) for c in commands)
        parser = RequestParser()
        got = []
        pos = 0
        for cut in cuts:
            parser.feed(data[pos : pos + cut])
            pos += cut
            got += drain(parser)
        if pos < len(data):
            parser.feed(data[pos:])
        got += drain(parser)
        assert got == commands


class TestEncoders:
    def test_scalars(self):
        assert encode(42, 2) == b":42\r\n"
        assert encode(b"hi", 3) == b"$2\r\nhi\r\n"
        assert encode("héllo", 2) == b"$6\r\nh\xc3\xa9llo\r\n"
        assert encode(Status("OK"), 2) == b"+OK\r\n"
        assert encode(OK, 3) == b"+OK\r\n"
        assert encode(ErrorReply("ERR bad"), 3) == b"-ERR bad\r\n"

    def test_nulls_differ_by_protocol(self):
        assert encode(None, 2) == b"$-1\r\n"
        assert encode(NULL_ARRAY, 2) == b"*-1\r\n"
        assert encode(None, 3) == b"_\r\n"
        assert encode(NULL_ARRAY, 3) == b"_\r\n"

    def test_maps_are_flat_arrays_in_resp2(self):
        value = {"a": 1, b"b": [None, b"x"]}
        assert encode(value, 2) == b"*4\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n*2\r\n$-1\r\n$1\r\nx\r\n"
        assert encode(value, 3) == b"%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n*2\r\n_\r\n$1\r\nx\r\n"

    def test_booleans_doubles_and_rich_types(self):
        assert encode(True, 2) == b":1\r\n" and encode(False, 3) == b"#f\r\n"
        assert encode(1.5, 2) == b"$3\r\n1.5\r\n" and encode(1.5, 3) == b",1.5\r\n"
        assert encode(float("inf"), 3) == b",inf\r\n"
        assert encode(Verbatim("hi"), 3) == b"=6\r\ntxt:hi\r\n"
        assert encode(Verbatim("hi"), 2) == b"$2\r\nhi\r\n"
        assert encode(BigNumber(2**70), 3) == b"(%d\r\n" % 2**70
        assert encode(Set([b"a"]), 3) == b"~1\r\n$1\r\na\r\n"
        assert encode(Set([b"a"]), 2) == b"*1\r\n$1\r\na\r\n"

    def test_error_text_cannot_break_framing(self):
        assert encode_error("ERR a\r\nb") == b"-ERR a  b\r\n"

    def test_unknown_type_is_refused(self):
        with pytest.raises(TypeError):
            encode(object(), 2)

    def test_round_trip_through_hiredis(self):
        import hiredis

        value = [1, b"two", [b"three", None], {b"k": b"v"}]
        reader = hiredis.Reader()
        reader.feed(encode(value, 2))
        assert reader.gets() == [1, b"two", [b"three", None], [b"k", b"v"]]


class TestPull:
    """RequestParser.pull(): every complete command at once, errors after them."""

    def test_pulls_every_complete_command(self):
        parser = RequestParser()
        parser.feed(multibulk(b"PING") * 3 + b"*2\r\n$4\r\nECHO\r\n$2\r\nh")
        assert parser.pull() == [[b"PING"]] * 3
        assert parser.pull() == []
        parser.feed(b"i\r\n")
        assert parser.pull() == [[b"ECHO", b"hi"]]
        assert parser.pull() == []

    def test_inline_and_multibulk_mixed(self):
        parser = RequestParser()
        parser.feed(b"PING\r\nECHO a\r\n" + multibulk(b"ECHO", b"b"))
        assert parser.pull() == [[b"PING"], [b"ECHO", b"a"], [b"ECHO", b"b"]]

    def test_protocol_error_comes_after_the_commands_before_it(self):
        parser = RequestParser()
        parser.feed(multibulk(b"PING") + multibulk(b"ECHO", b"x") + b"*1\r\n:5\r\n")
        assert parser.pull() == [[b"PING"], [b"ECHO", b"x"]]
        with pytest.raises(ProtocolError, match="expected '\\$'"):
            parser.pull()

    def test_protocol_error_alone_raises_at_once(self):
        parser = RequestParser()
        parser.feed(b"*1\r\n:7\r\n")
        with pytest.raises(ProtocolError):
            parser.pull()

    def test_has_input_says_whether_pull_can_return_anything(self):
        # The server skips pull() after an unblock when has_input() is False.
        parser = RequestParser()
        assert not parser.has_input()
        parser.feed(multibulk(b"PING") + b"*1\r\n$4\r\nPI")
        assert parser.has_input()
        assert parser.pull() == [[b"PING"]]
        assert parser.has_input()  # a partial command
        parser.feed(b"NG\r\n")
        assert parser.pull() == [[b"PING"]] and not parser.has_input() and parser.pull() == []
        parser.feed(b"PING\r\n")  # inline
        assert parser.has_input() and parser.pull() == [[b"PING"]] and not parser.has_input()
        parser.feed(multibulk(b"PING") + b"*1\r\n:5\r\n")
        assert parser.pull() == [[b"PING"]]
        assert parser.has_input()  # the protocol error still to raise
        with pytest.raises(ProtocolError):
            parser.pull()
        strict = StrictRequestParser()
        assert not strict.has_input()
        strict.feed(multibulk(b"PING"))
        assert strict.has_input() and strict.pull() == [[b"PING"]] and not strict.has_input()

    def test_empty_multibulks_are_ignored(self):
        parser = RequestParser()
        parser.feed(b"*0\r\n*-1\r\n" + multibulk(b"PING"))
        assert parser.pull() == [[b"PING"]]

    @given(st.lists(st.lists(st.binary(max_size=20), min_size=1, max_size=5), max_size=8),
           st.integers(min_value=1, max_value=40))
    @settings(max_examples=150, deadline=None)
    def test_pull_agrees_with_next_command_fed_in_pieces(self, commands, step):
        data = b"".join(multibulk(*c) for c in commands)
        parser = RequestParser()
        pulled = []
        for i in range(0, len(data), step):
            parser.feed(data[i:i + step])
            pulled += parser.pull()
        assert pulled == commands == parse_all(data)


class TestEntriesEncoding:
    def test_entries_encode_like_the_plain_list(self):
        from tstream.resp import Entries

        entries = [[1, b"tag", b"data"], None, [3, b"", memoryview(b"xyz")]]
        plain = [[1, b"tag", b"data"], None, [3, b"", b"xyz"]]
        for protocol in (2, 3):
            assert encode(Entries(entries), protocol) == encode(plain, protocol)
        assert encode(Entries([]), 2) == b"*0\r\n"
