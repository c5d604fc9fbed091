"""Scale: housekeeping costs only what is due (time eviction timers, batch timeouts)."""

from __future__ import annotations

import time

from tstream.engine import Keyspace
from tstream.engine.batches import BatchRegistry

MS = 1_000_000


def stream_with(keyspace: Keyspace, key: bytes, times_ms: list[int], max_age_ms: int = 0):
    stream = keyspace.get_or_create(key)
    for t in times_ms:
        stream.append(b"t", b"x", t * MS)
    if max_age_ms:
        stream.config.max_age_ms = max_age_ms
        keyspace.limits_changed(key)
    return stream


# --- engine: the due-time heap --------------------------------------------------------


def test_keys_without_max_age_have_no_due_time():
    keyspace = Keyspace()
    for i in range(100):
        stream_with(keyspace, b"k%d" % i, [1000])
    assert len(keyspace.age_timers) == 0
    assert keyspace.evict_aged(10**6 * MS) == []


def test_a_key_is_due_when_its_oldest_entry_ages_out():
    keyspace = Keyspace()
    stream = stream_with(keyspace, b"k", [1000, 1500, 3000], max_age_ms=100)
    assert keyspace.age_timers.next_due() == 1100 * MS + 1
    assert keyspace.evict_aged(1100 * MS) == []  # exactly max_age old: kept, as enforce_limits does
    assert stream.length == 3
    assert keyspace.evict_aged(1600 * MS + 1) == [(b"k", stream, 1, 2)]  # key, stream, first before, evicted
    assert stream.first == 3
    assert keyspace.age_timers.next_due() == 3100 * MS + 1  # rescheduled on the next oldest


def test_an_empty_stream_is_checked_once_per_max_age_period():
    keyspace = Keyspace()
    stream = stream_with(keyspace, b"k", [1000], max_age_ms=100)
    assert keyspace.evict_aged(2000 * MS) == [(b"k", stream, 1, 1)]
    # Anything written from now on is written at >= 2000 ms: nothing can age out sooner.
    assert keyspace.age_timers.next_due() == 2100 * MS + 1
    stream.append(b"t", b"y", 2050 * MS)
    assert keyspace.evict_aged(2100 * MS + 1) == []  # early: reschedules on the new entry
    assert keyspace.age_timers.next_due() == 2150 * MS + 1
    assert keyspace.evict_aged(2150 * MS + 1) == [(b"k", stream, 2, 1)]


def test_a_shorter_max_age_makes_a_key_due_sooner_and_zero_removes_it():
    keyspace = Keyspace()
    stream = stream_with(keyspace, b"k", [1000], max_age_ms=10_000)
    stream.config.max_age_ms = 10
    keyspace.limits_changed(b"k")
    assert keyspace.age_timers.next_due() == 1010 * MS + 1
    stream.config.max_age_ms = 0
    keyspace.limits_changed(b"k")
    assert len(keyspace.age_timers) == 0 and keyspace.age_timers.next_due() is None


def test_deleted_flushed_and_recreated_keys_leave_no_live_timer():
    keyspace = Keyspace()
    stream_with(keyspace, b"a", [1000], max_age_ms=10)
    stream_with(keyspace, b"b", [1000], max_age_ms=10)
    keyspace.delete(b"a")
    fresh = stream_with(keyspace, b"a", [5000])  # re-created without a max age
    assert keyspace.evict_aged(2000 * MS) == [(b"b", keyspace.get(b"b"), 1, 1)]
    assert fresh.length == 1
    keyspace.flush()
    assert len(keyspace.age_timers) == 0 and keyspace.age_timers.next_due() is None


def test_put_schedules_a_loaded_stream():
    source = Keyspace()
    stream = stream_with(source, b"k", [1000], max_age_ms=50)
    loaded = Keyspace()
    loaded.put(b"k", stream)
    assert loaded.age_timers.next_due() == 1050 * MS + 1
    assert loaded.evict_aged(1051 * MS) == [(b"k", stream, 1, 1)]


def test_work_per_pass_is_bounded_and_the_rest_stays_due():
    keyspace = Keyspace()
    for i in range(50):
        stream_with(keyspace, b"k%d" % i, [1000], max_age_ms=10)
    first_pass = keyspace.evict_aged(2000 * MS, budget_ns=0)  # the budget is spent after one key
    assert len(first_pass) == 1
    rest = keyspace.evict_aged(2000 * MS, budget_ns=60 * 10**9)  # (not the default few ms: a loaded CI box)
    assert len(rest) == 49
    assert {key for key, *_ in first_pass + rest} == {b"k%d" % i for i in range(50)}


def test_rescheduling_often_keeps_the_heap_small():
    keyspace = Keyspace()
    stream = stream_with(keyspace, b"k", [1000], max_age_ms=10)
    for age in range(1, 10_000):
        stream.config.max_age_ms = age
        keyspace.limits_changed(b"k")
    assert len(keyspace.age_timers._heap) < 200


# --- batches: nothing is scanned until the least recently active batch can be stale -----


def test_batch_timeouts_scan_only_when_one_can_be_due():
    registry = BatchRegistry()
    old = registry.start(b"k", b"a")
    registry.start(b"k", b"b")
    base = old.last_active
    assert registry.expire(1000, now=base + 0.5) == 0
    registry.get(b"k", b"b").last_active = base + 0.9  # b was active later than a
    assert registry.expire(1000, now=base + 1.0) == 1  # a timed out
    assert registry.get(b"k", b"a") is None and registry.get(b"k", b"b") is not None
    assert registry.expire(1000, now=base + 1.5) == 0
    assert registry.expire(1000, now=base + 1.9) == 1
    assert len(registry) == 0 and registry.abandoned["timeout"] == 2


# --- server: idle streams age out through the housekeeping pass --------------------------


def wait_for(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def tinfo(client, key):
    info = client.execute_command("TINFO", key)
    return dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info


def test_idle_streams_age_out_and_stay_evicted_after_a_restart(make_server):
    server = make_server("--save", "", "--appendonly", "yes")
    c = server.client()
    for i in range(20):
        c.execute_command("TWRITE", f"aged{i}", "t", "x")
        c.execute_command("TCONFIG", f"aged{i}", "SET", "max_age_ms", 300)
    c.execute_command("TWRITE", "kept", "t", "x")
    c.execute_command("TCONFIG", "kept", "SET", "max_age_ms", 3_600_000)
    wait_for(lambda: all(tinfo(c, f"aged{i}")[b"length"] == 0 for i in range(20)))
    assert tinfo(c, "kept")[b"length"] == 1
    assert c.info("stats")["evicted_entries"] == 20
    c.execute_command("TWRITE", "aged0", "t", "y")  # written again after it emptied: ages out again
    wait_for(lambda: tinfo(c, "aged0")[b"length"] == 0)
    server.stop()
    server.start()
    c = server.client()
    assert tinfo(c, "aged0")[b"length"] == 0 and tinfo(c, "aged0")[b"first"] == 3
    assert tinfo(c, "kept")[b"length"] == 1


def test_a_loaded_stream_ages_out_after_a_restart(make_server):
    server = make_server("--save", "3600 1")
    c = server.client()
    c.execute_command("TWRITE", "s", "t", "x")
    c.execute_command("TCONFIG", "s", "SET", "max_age_ms", 1500)
    server.stop()  # the final snapshot holds the entry and the config
    server.start()
    c = server.client()
    wait_for(lambda: tinfo(c, "s")[b"length"] == 0)


# --- the collector: frozen data must not hide garbage ---------------------------------------


def test_deleting_keys_leaves_no_reference_cycles():
    """What server/collector.py relies on: the engine's objects form no cycles, so
    frozen keys that are deleted are freed by reference counting alone."""
    import gc

    from tstream.engine.groups import Group

    keyspace = Keyspace()
    for i in range(300):
        stream = stream_with(keyspace, b"k%d" % i, [1000, 1001, 1002], max_age_ms=10 if i % 2 else 0)
        if i % 3 == 0:  # a JetStream per-subject limit: builds the subject index
            stream.config.max_msgs_per_subject = 1
            stream.append(b"a.b", b"v", 1003 * MS)
            assert stream._subjects is not None
        group = Group(b"g", 1)
        stream.add_group(b"g", group)
        group.read(stream, 2, 1000, (100, 1000), 100)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(300):
            keyspace.delete(b"k%d" % i)
        keyspace.flush()
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()


def test_collector_policy_freezes_after_growth_and_after_a_slow_full_pass(monkeypatch):
    import gc

    from tstream.server import collector

    policy = collector.CollectorPolicy()
    try:
        policy.install(keys=100)
        assert gc.get_freeze_count() > 0 and policy._on_collection in gc.callbacks
        policy.cron(100 + collector.FREEZE_EVERY_KEYS - 1)
        assert policy.freezes == 0
        policy.cron(100 + collector.FREEZE_EVERY_KEYS)
        assert policy.freezes == 1
        monkeypatch.setattr(collector, "SLOW_FULL_PASS_NS", -1)
        gc.collect()  # a full pass, "slow" under the patched threshold
        assert policy.slow_full_passes >= 1
        policy.cron(100 + collector.FREEZE_EVERY_KEYS)
        assert policy.freezes == 2
    finally:
        policy.uninstall()
        gc.unfreeze()
    assert policy._on_collection not in gc.callbacks
