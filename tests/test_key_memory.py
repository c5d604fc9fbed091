"""The memory layout of a small key (one entry): shared defaults, compact tables."""

from __future__ import annotations

import pytest

from tstream.engine import Keyspace, Stream, StreamConfig
from tstream.engine.stream import DEFAULT_CONFIG


def test_a_stream_shares_the_default_config_until_configured():
    a, b = Stream(), Stream()
    assert a.settings is b.settings is DEFAULT_CONFIG and a._config is None
    assert vars_of(a.settings) == vars_of(StreamConfig())
    assert a.settings == StreamConfig() and StreamConfig() == a.settings != StreamConfig(max_len=1)
    with pytest.raises(AttributeError):
        DEFAULT_CONFIG.max_len = 3
    assert DEFAULT_CONFIG.max_len == 0
    a.config.max_len = 2  # the first access gives the stream a config of its own
    assert a.settings is a.config and a.config.max_len == 2 and b.settings is DEFAULT_CONFIG
    for i in range(5):
        a.append(b"t", b"%d" % i, 10 + i)
    assert a.length == 2
    a._check()


def vars_of(config) -> list:
    return [getattr(config, name) for name in ("max_len", "max_age_ms", "max_msgs_per_subject",
                                                "allow_direct", "allow_atomic")]


def test_a_loaded_stream_with_the_default_config_shares_it():
    s = Stream()
    s.append(b"t", b"x", 1)
    t = Stream.from_state(s.export_state())
    assert t._config is None and t.settings is DEFAULT_CONFIG
    s.config.max_age_ms = 5
    u = Stream.from_state(s.export_state())
    assert u._config is not None and u.config.max_age_ms == 5
    u._check()


def test_keyspace_reads_do_not_give_a_key_a_config():
    ks = Keyspace()
    s = ks.get_or_create(b"k")
    s.append(b"t", b"x", 1)
    ks.limits_changed(b"k")
    ks.evict_aged(10 ** 18)
    assert s.enforce_limits(10 ** 18) == 0 and s._config is None


def test_streams_of_a_keyspace_share_equal_tags_and_first_node_ends():
    ks = Keyspace()
    a, b = ks.get_or_create(b"a"), ks.get_or_create(b"b")
    a.append(bytes(bytearray(b"tag")), b"x", 1)
    b.append(bytes(bytearray(b"tag")), b"y", 1)
    assert a._tag_list[1] is b._tag_list[1]
    assert a.node_list()[0].cap_end is b.node_list()[0].cap_end == 1001
    other = Keyspace().get_or_create(b"a")  # another keyspace shares nothing with this one
    other.append(bytes(bytearray(b"tag")), b"z", 1)
    assert other._tag_list[1] is not a._tag_list[1]
    a._check()
    b._check()


def test_the_interned_values_are_bounded():
    from tstream.engine.blocks import INTERNED_MAX, BlockCache
    cache = BlockCache()
    for i in range(INTERNED_MAX + 10):
        assert cache.intern(b"t%d" % i) == b"t%d" % i
    assert len(cache._interned) <= INTERNED_MAX


def test_one_tag_streams_share_their_tag_table_and_copy_it_on_write():
    ks = Keyspace()
    a, b, c = (ks.get_or_create(k, node_entries=4) for k in (b"a", b"b", b"c"))
    for s in (a, b, c):
        s.append(b"tag", b"x", 1)
    assert a._tag_list is b._tag_list is c._tag_list == (None, b"tag")
    a.append(b"other", b"y", 2)  # a second tag: a's own list
    assert a._tag_list == [None, b"tag", b"other"] and b._tag_list == (None, b"tag")
    for i in range(9):
        b.append(b"tag", b"%d" % i, 3)  # seals nodes: reference counts, same shared table
    b.evict_keep(0)  # everything evicted: the tag freed in b's own copy only
    assert b.tag_count() == 0 and c._tag_list == (None, b"tag") and c.tag_count() == 1
    assert c.read(1, 1) == [[1, b"tag", b"x"]]
    state = c.export_state()
    loaded = Stream.from_state(state, cache=ks.cache)
    assert loaded._tag_list is c._tag_list
    for s in (a, b, c, loaded):
        s._check()


def test_collector_policy_freezes_what_reached_the_old_generation():
    import gc

    from tstream.server import collector

    policy = collector.CollectorPolicy()
    try:
        big = collector.FREEZE_EVERY_KEYS  # a keyspace big enough for full passes to matter
        policy.install(keys=5)
        gc.collect(1)  # a generation-1 pass: its survivors reach the old generation
        policy.cron(5)  # a small keyspace: that alone does not freeze
        assert policy.freezes == 0 and policy._promoted
        policy.cron(big)  # grown by less than FREEZE_EVERY_KEYS, but big: frozen
        assert policy.freezes == 1 and not policy._promoted
    finally:
        policy.uninstall()
        gc.unfreeze()
