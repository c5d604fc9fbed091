"""RESP2/RESP3 protocol: request parsing and reply encoding, no I/O."""

from .encode import (
    NO_REPLY,
    NULL_ARRAY,
    OK,
    QUEUED,
    TABLE_PAGES_IN_C,
    BigNumber,
    Entries,
    ErrorReply,
    KeyedReplies,
    Push,
    Raw,
    Set,
    Status,
    StreamEntries,
    SubjectBulks,
    Verbatim,
    encode,
    encode_batched_message,
    encode_bulk,
    encode_entries,
    encode_eob,
    encode_error,
    encode_flow_ack,
    encode_integer,
    encode_integer_run,
    encode_integers,
    encode_message,
    encode_message_page,
    encode_message_pieces,
    encode_piece_page,
    encode_single_reads,
    encode_stream_entries,
    encode_stream_ids,
    encode_table_page,
)
from .errors import ProtocolError
from .parser import RequestParser, split_inline
from .strict import StrictRequestParser

__all__ = [
    "NO_REPLY", "NULL_ARRAY", "OK", "QUEUED", "BigNumber", "Entries", "ErrorReply", "KeyedReplies", "Push", "Raw", "Set", "Status", "StreamEntries", "SubjectBulks", "Verbatim",
    "encode", "encode_batched_message", "encode_message_page", "encode_message_pieces", "encode_piece_page", "encode_bulk", "encode_entries", "encode_eob", "encode_error", "encode_flow_ack", "encode_integer", "encode_integer_run",
    "encode_integers", "encode_message", "encode_single_reads", "encode_stream_entries", "encode_stream_ids", "encode_table_page", "TABLE_PAGES_IN_C", "ProtocolError", "RequestParser", "StrictRequestParser", "split_inline",
]
