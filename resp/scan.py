"""A fast-ingest publisher's read, scanned against its last message.

``scan_fast_run_python`` is the pure-Python twin of resp/_speedups.c
``scan_fast_run`` (commands/ingest.py ``scan_run`` takes the C one when it is
built): the leading commands of a read that repeat a 9-word ``BATCH ... FAST``
message with the next batch-seqs and any data, found without parsing each
command into a list.  RESP bytes only: no I/O, no engine.
"""

from __future__ import annotations

SCAN_MAX_COUNT = 1024  # (scan_fast_run's stack array of data places)
SCAN_TEMPLATE_MAX = 1024  # (its stack buffer of the template's fixed words)


def scan_fast_run_python(data: bytes, template: list, lo: int, max_count: int,
                         max_bulk: int) -> tuple[int, tuple, int] | None:
    """The longest prefix of the read ``data`` made of whole commands (at most
    ``max_count``) that are, byte for byte, the 9-word ``template`` (``BATCH key
    id seq subject data FAST flow gap``, a list of bytes) in canonical RESP
    (``*9`` then ``$len`` and the word each), except the batch-seq, which must be
    ``b"%d" % lo``, ``lo + 1``, ..., and the data, any bulk of at most
    ``max_bulk`` bytes (its length canonical: 1-18 digits, no leading zero but
    ``0``): ``(count, datas, consumed)``, at most SCAN_MAX_COUNT commands; None
    when not even one command matches or it cannot tell (``lo`` outside
    1-10**17, ``max_count`` < 1, a template that is not 9 bytes, or whose fixed
    words with 24 bytes each take more than SCAN_TEMPLATE_MAX).
    Its C twin: resp/_speedups.c ``scan_fast_run`` (no per-command list or seq
    object).  O(bytes consumed)."""
    if (not 1 <= lo <= 10 ** 17 or max_count < 1 or len(template) != 9
            or any(word.__class__ is not bytes for word in template)
            or sum(len(word) + 24 for i, word in enumerate(template) if i not in (3, 5)) > SCAN_TEMPLATE_MAX):
        return None
    max_count = min(max_count, SCAN_MAX_COUNT)
    head = b"*9\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in template[:3])
    subject = b"$%d\r\n%s\r\n" % (len(template[4]), template[4])
    tail = b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in template[6:])
    datas: list[bytes] = []
    pos = 0
    seq = lo
    while len(datas) < max_count and data.startswith(head, pos):
        at = pos + len(head)
        digits = b"%d" % seq
        seq_bulk = b"$%d\r\n%s\r\n" % (len(digits), digits)
        if not data.startswith(seq_bulk, at) or not data.startswith(subject, at + len(seq_bulk)):
            break
        at += len(seq_bulk) + len(subject)
        crlf = data.find(b"\r\n", at + 1, at + 21)  # (a length of at most 18 digits)
        if crlf < 0:
            break
        length = data[at + 1:crlf]
        if (data[at:at + 1] != b"$" or not length.isdigit() or len(length) > 18
                or (length[0] == 0x30 and len(length) > 1) or int(length) > max_bulk):
            break
        start = crlf + 2
        stop = start + int(length)
        if data[stop:stop + 2] != b"\r\n" or not data.startswith(tail, stop + 2):
            break
        datas.append(data[start:stop])
        pos = stop + 2 + len(tail)
        seq += 1
    if not datas:
        return None
    return len(datas), tuple(datas), pos
