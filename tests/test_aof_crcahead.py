"""persistence.crcahead: a big incr file's CRCs are checked ahead of the load
in a helper process; the loading thread skips the frames it verified and
checks the others itself.  The helper only ever says "good up to here": a
damaged, torn or corrupt record is still reported by the load at its own
offset, and the keyspace a load builds is the one the records applied one by
one build."""

from __future__ import annotations

import os
import random
import time

import pytest

from tests.test_aof_sealer import batch_log, full_state, mixed_log
from tests.test_replay_runs import write_aof
from tstream.engine import Keyspace
from tstream.persistence import aof, crcahead, effects
from tstream.persistence.framing import CorruptFile


def finished(path: str, step: int = 1) -> int:
    """What a helper on ``path`` verified once it ended."""
    ahead = crcahead.CrcAhead(path, step)
    assert ahead.proc is not None
    deadline = time.monotonic() + 60
    while ahead.proc is not None and time.monotonic() < deadline:
        ahead.verified()
        time.sleep(0.01)
    assert ahead.proc is None, "the helper did not end"
    return ahead.verified()


def incr_path(directory) -> str:
    return os.path.join(str(directory), aof.incr_name(1))


def damaged(directory, log: list, at: int, how: str) -> int:
    """``log``'s AOF with record ``at`` damaged (``how``); its offset."""
    offsets = write_aof(directory, log)
    path = incr_path(directory)
    with open(path, "r+b") as handle:
        data = bytearray(handle.read())
        if how == "payload":
            data[offsets[at] + 20] ^= 0x40
        elif how == "header":
            data[offsets[at] + 3] ^= 0x01  # the length no longer matches its inverted copy
        else:  # torn: the file ends inside record ``at``
            del data[offsets[at] + 9:]
        handle.seek(0)
        handle.truncate()
        handle.write(data)
    return offsets[at]


def some_log(seed: int = 1) -> list:
    return batch_log(random.Random(seed), 24)


def test_the_helper_verifies_a_good_file_to_its_end(tmp_path):
    write_aof(tmp_path, some_log())
    assert finished(incr_path(tmp_path)) == os.path.getsize(incr_path(tmp_path))
    # published in steps: the last one is the end too
    assert finished(incr_path(tmp_path), step=1 << 30) == os.path.getsize(incr_path(tmp_path))


@pytest.mark.parametrize("how", ["payload", "header", "torn"])
def test_the_helper_stops_before_the_first_bad_frame(tmp_path, how):
    log = some_log()
    offset = damaged(tmp_path, log, 17, how)
    assert finished(incr_path(tmp_path)) == offset


def test_the_helper_of_an_empty_or_missing_file_verifies_nothing(tmp_path):
    open(tmp_path / "empty", "wb").close()
    assert finished(str(tmp_path / "empty")) == 0
    assert finished(str(tmp_path / "missing")) == 0


class _Waited(crcahead.CrcAhead):
    """A helper the load finds done (its worst case for a damaged file: it
    verified everything before the damage)."""

    __slots__ = ()

    def __init__(self, path: str, step: int = crcahead.STEP) -> None:
        super().__init__(path, 1)
        if self.proc is not None:
            self.proc.wait()


@pytest.fixture(params=["waited", "racing"])
def helper_always(request, monkeypatch):
    """Every incr file of a load with the sealer checked ahead (the helper
    done first, or running beside the load)."""
    monkeypatch.setattr(crcahead, "MIN_BYTES", 0)
    if request.param == "waited":
        monkeypatch.setattr(crcahead, "CrcAhead", _Waited)
    return request.param


@pytest.mark.parametrize("how", ["payload", "header"])
def test_a_bad_record_is_reported_at_its_offset_with_the_helper(tmp_path, helper_always, how):
    log = some_log()
    offset = damaged(tmp_path, log, 17, how)
    with pytest.raises(CorruptFile) as failed:
        aof.load(str(tmp_path), background_seal=True)
    assert failed.value.offset == offset
    assert ("checksum" in str(failed.value)) == (how == "payload")


def test_a_torn_tail_is_cut_at_its_offset_with_the_helper(tmp_path, helper_always):
    log = some_log()
    offset = damaged(tmp_path, log, len(log) - 1, "torn")
    loaded = aof.load(str(tmp_path), background_seal=True)
    assert loaded.truncated_at == (incr_path(tmp_path), offset)
    assert loaded.records == len(log) - 1
    assert os.path.getsize(incr_path(tmp_path)) == offset
    expected = Keyspace()
    for record in log[:-1]:
        effects.apply(expected, record)
    assert full_state(loaded.keyspace)[0] == full_state(expected)[0]


@pytest.mark.parametrize("seed", range(2))
def test_a_load_builds_what_the_records_one_by_one_build(tmp_path, helper_always, seed):
    """The load (runs of appends in one call, seals in the background, CRCs
    checked ahead) against the old path: every record of the file applied
    one at a time with effects.apply, sealing at once.  Every stream's
    entries, times, tags, groups, pending entries and ids (the snapshot's
    bytes), TINFO's fields, memory figures and the block cache."""
    log = mixed_log(seed)
    write_aof(tmp_path, log)
    loaded = aof.load(str(tmp_path), background_seal=True)
    with open(incr_path(tmp_path), "rb") as handle:
        records = aof.records_of(handle.read())
    one_by_one = Keyspace()
    for record in records:
        effects.apply(one_by_one, record)
    assert full_state(loaded.keyspace) == full_state(one_by_one)
