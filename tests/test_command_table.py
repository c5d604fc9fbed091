"""The command table as the one description of a command (commands/table/): its
entries are complete, and COMMAND, <container> HELP, ACL CAT, ACL checks, arity
and unknown-subcommand errors all follow it.  Where tstream copies Redis, a real
redis-server is the oracle."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest
import redis

from tstream.commands import flags as F
from tstream.commands.table import COMMANDS, every_command, find

from .conftest import free_port

GROUPS = {"stream", "generic", "connection", "server", "transactions", "pubsub"}  # Redis's group names
CONTAINERS = sorted(name.decode() for name, entry in COMMANDS.items() if entry.subcommands)
# Containers Redis has too: their errors and replies are compared with redis-server.
REDIS_CONTAINERS = ["acl", "client", "command", "config", "latency", "slowlog"]


def raw(client: redis.Redis, *args):
    """The reply as parsed, without redis-py's reply callbacks (an error is returned, not raised)."""
    connection = client.connection_pool.get_connection()
    try:
        connection.send_command(*args)
        try:
            return connection.read_response()
        except redis.ResponseError as exc:
            return exc
    finally:
        client.connection_pool.release(connection)


def error_text(reply) -> str:
    assert isinstance(reply, redis.ResponseError), reply
    return str(reply)


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """A redis-server 7 on a free port, to compare with."""
    path = shutil.which("redis-server")
    if path is None:
        pytest.fail("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    directory = tmp_path_factory.mktemp("oracle")
    proc = subprocess.Popen([path, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(directory)], stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_timeout=10)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield port
    client.close()
    proc.terminate()
    proc.wait(10)


def clients(port: int):
    return redis.Redis(port=port, protocol=2, socket_timeout=10), redis.Redis(port=port, protocol=3, socket_timeout=10)


# --- the table itself ------------------------------------------------------------


@pytest.mark.parametrize("entry", list(every_command()), ids=lambda e: e.name.decode())
def test_every_entry_has_the_required_fields(entry):
    name = entry.text_name
    assert name == name.lower() and name
    assert isinstance(entry.arity, int) and entry.arity != 0
    assert entry.group in GROUPS
    assert entry.summary and entry.complexity and entry.since
    assert entry.categories and set(entry.categories) <= set(F.CATEGORIES)
    assert ("fast" in entry.categories) != ("slow" in entry.categories)
    first, last, step = entry.keys
    assert (first, last, step) == (0, 0, 0) or (first >= 1 and step >= 1)
    assert entry.syntax
    words = name.upper().split("|")
    for form in entry.syntax:
        assert form.split()[: len(words)] == words, form
    if entry.subcommands:
        assert entry.arity in (-1, -2)
        assert entry.by_name.get(b"help") is not None, "every container answers HELP"
        assert entry.handler is not None or entry.arity == -2  # a bare container needs its subcommand
        for sub in entry.subcommands:
            assert sub.name.startswith(entry.name + b"|")
            assert sub.arity >= 2 or sub.arity <= -2
            assert not sub.subcommands
    else:
        assert callable(entry.handler)
    assert entry.run is None or callable(entry.run)
    if entry.container is None:
        assert COMMANDS[entry.name] is entry
    assert find(entry.name.upper()) is entry


def test_categories_come_from_the_table_not_the_name():
    for name in (b"twrite", b"tread", b"tack", b"tevict", b"tinfo", b"tconfig", b"tpending",
                 b"dget", b"mlast", b"batch"):
        assert "stream" in COMMANDS[name].categories and COMMANDS[name].group == "stream", name
    for name in (b"type", b"time", b"del", b"exists", b"keys", b"scan"):
        assert "stream" not in COMMANDS[name].categories, name
    assert "keyspace" in COMMANDS[b"type"].categories


def test_categories_and_flags_match_redis_for_the_commands_copied_from_it(oracle):
    """COMMAND INFO of a command tstream copies from Redis shows the same ACL
    categories (KEYS aside: see commands/table/generic.py) and arity."""
    client = redis.Redis(port=oracle, protocol=2, socket_timeout=10)
    names = [e.name for e in every_command() if e.group != "stream" and e.name not in (b"keys",)]
    theirs = raw(client, "COMMAND", "INFO", *names)
    ours = {e.name: e for e in every_command()}
    for name, info in zip(names, theirs):
        if info is None:  # tstream's own (ACL CAT is in Redis; a few are not)
            continue
        entry = ours[name]
        assert info[1] == entry.arity, name
        assert [c.decode() for c in info[6]] == ["@" + c for c in entry.categories], name


# --- ACL categories ---------------------------------------------------------------


@pytest.fixture
def nostream_server(make_server, tmp_path):
    conf = tmp_path / "acl.conf"
    conf.write_text('save ""\nrequirepass adminpw\n'
                    "user nostream on >pw ~* +@all -@stream\n"
                    "user getter on >pw ~* +@all -config +config|get\n")
    return make_server(str(conf))


def test_minus_stream_blocks_the_stream_commands_but_not_type(nostream_server):
    admin = nostream_server.client(password="adminpw")
    admin.execute_command("TWRITE", "s", "a.b", "x")
    user = nostream_server.client(username="nostream", password="pw")
    for command in (["TWRITE", "s", "t", "x"], ["TREAD", "s", 1, 1], ["DGET", "s", "SEQ", 1],
                    ["MLAST", "s", "SUBJECTS", "a.>"], ["BATCH", "s", "b1", 1, "a.b", "x", "COMMIT"],
                    ["TINFO", "s"], ["TCONFIG", "s", "GET"]):
        with pytest.raises(redis.exceptions.NoPermissionError,
                           match=f"no permissions to run the '{command[0].lower()}' command"):
            user.execute_command(*command)
    assert user.execute_command("TYPE", "s") in (b"tstream", "tstream")
    assert user.exists("s") == 1
    assert admin.execute_command("TREAD", "s", 1, 10) == [[1, b"a.b", b"x"]]  # nothing was written


def test_a_subcommand_rule(nostream_server):
    user = nostream_server.client(username="getter", password="pw")
    assert user.config_get("maxclients")
    with pytest.raises(redis.exceptions.NoPermissionError, match=r"'config\|set' command"):
        user.config_set("timeout", 5)
    with pytest.raises(redis.exceptions.NoPermissionError, match=r"'config\|resetstat' command"):
        user.config_resetstat()


def test_unknown_categories_and_commands_in_rules_are_refused_as_by_redis(server, oracle):
    ours, theirs = redis.Redis(port=server.port), redis.Redis(port=oracle)
    for rule in ("+@nosuch", "-@nosuch", "+nosuch", "+config|nosuch"):
        mine, expected = raw(ours, "ACL", "SETUSER", "x", rule), raw(theirs, "ACL", "SETUSER", "x", rule)
        assert error_text(mine) == error_text(expected)
    assert raw(ours, "ACL", "SETUSER", "x", "+@hash", "-config|get") in (b"OK", "OK")
    raw(ours, "ACL", "DELUSER", "x")


def test_acl_cat(r):
    categories = [c.decode() if isinstance(c, bytes) else c for c in raw(r, "ACL", "CAT")]
    assert categories == list(F.CATEGORIES)
    streams = {c.decode() if isinstance(c, bytes) else c for c in raw(r, "ACL", "CAT", "stream")}
    assert {"twrite", "tread", "tack", "dget", "mlast", "batch"} <= streams
    assert "type" not in streams and "time" not in streams
    connection = {c.decode() if isinstance(c, bytes) else c for c in raw(r, "ACL", "CAT", "CONNECTION")}
    assert {"ping", "client|setname", "command|docs"} <= connection and "client" not in connection
    assert raw(r, "ACL", "CAT", "hash") == []


def test_acl_cat_errors_match_redis(server, oracle):
    ours, theirs = redis.Redis(port=server.port), redis.Redis(port=oracle)
    for args in (["ACL", "CAT", "nosuch"], ["ACL", "CAT", "stream", "x"]):
        assert error_text(raw(ours, *args)) == error_text(raw(theirs, *args))


# --- subcommand dispatch and its errors ------------------------------------------------


@pytest.mark.parametrize("container", REDIS_CONTAINERS)
def test_errors_of_container_commands_match_redis(server, oracle, container):
    ours, theirs = redis.Redis(port=server.port), redis.Redis(port=oracle)
    cases = [[container.upper(), "FROB"], [container, "frob", "x"], [container, "HELP", "x"]]
    if container != "command":
        cases.append([container])  # COMMAND alone is a command; the others need a subcommand
    for args in cases:
        mine, expected = raw(ours, *args), raw(theirs, *args)
        assert error_text(mine) == error_text(expected), args
    assert error_text(raw(ours, container, "frob")) == \
        f"unknown subcommand 'frob'. Try {container.upper()} HELP."


@pytest.mark.parametrize("args", [
    ["CONFIG", "GET"], ["CONFIG", "SET", "timeout"], ["CONFIG", "SET", "timeout", "1", "maxclients"],
    ["CONFIG", "RESETSTAT", "x"], ["CLIENT", "KILL"], ["CLIENT", "SETNAME"], ["CLIENT", "ID", "x"],
    ["ACL", "WHOAMI", "x"], ["ACL", "SETUSER"], ["SLOWLOG", "LEN", "x"], ["SLOWLOG", "GET", "1", "2"],
    ["LATENCY", "HISTORY"], ["COMMAND", "COUNT", "x"], ["COMMAND", "GETKEYS"], ["COMMAND", "GETKEYS", "del"],
    ["COMMAND", "GETKEYS", "nosuch", "a"], ["COMMAND", "GETKEYS", "config", "get", "x"],
    ["COMMAND", "GETKEYS", "type", "a", "b"], ["COMMAND", "LIST", "x"],
], ids=lambda args: " ".join(args))
def test_arity_and_argument_errors_of_subcommands_match_redis(server, oracle, args):
    ours, theirs = redis.Redis(port=server.port), redis.Redis(port=oracle)
    assert error_text(raw(ours, *args)) == error_text(raw(theirs, *args))


@pytest.mark.parametrize("container", CONTAINERS)
def test_every_container_answers_help(r, container):
    lines = [x.decode() if isinstance(x, bytes) else x for x in raw(r, container, "help")]
    assert lines[0] == f"{container.upper()} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    shown = {line.split()[0] for line in lines[1:] if not line.startswith((" ", "("))}
    assert shown == {sub.name.partition(b"|")[2].decode().upper() for sub in COMMANDS[container.encode()].subcommands}
    container_entry = COMMANDS[container.encode()]
    summaries = [line for line in lines if line.startswith("    ") and not line.startswith(("    *", "      "))]
    assert len(summaries) == len(container_entry.subcommands) + (container_entry.handler is not None)


def test_help_lines_show_every_form(r):
    lines = [x.decode() if isinstance(x, bytes) else x for x in raw(r, "CLIENT", "HELP")]
    assert "KILL <ip:port>" in lines
    assert any(line.startswith("KILL [ID <client-id>]") for line in lines)
    assert "SETNAME <connection-name>" in lines


def test_subcommands_are_counted_by_their_own_name(make_server):
    proc = make_server("--save", "")
    client = proc.client()
    client.config_get("maxclients")
    client.execute_command("CLIENT", "ID")
    with pytest.raises(redis.ResponseError):
        client.execute_command("CONFIG", "GET")
    stats = client.info("commandstats")
    assert stats["cmdstat_config|get"]["calls"] == 1 and stats["cmdstat_config|get"]["rejected_calls"] == 1
    assert stats["cmdstat_client|id"]["calls"] == 1


# --- COMMAND ------------------------------------------------------------------------


def test_command_count_list_info_docs_of_subcommands(r):
    assert raw(r, "COMMAND", "COUNT") == len(COMMANDS)
    listed = {n.decode() if isinstance(n, bytes) else n for n in raw(r, "COMMAND", "LIST")}
    assert listed == {e.text_name for e in every_command()}
    assert set(raw(r, "COMMAND", "LIST", "FILTERBY", "PATTERN", "config*")) == \
        {b"config", b"config|get", b"config|set", b"config|resetstat", b"config|rewrite", b"config|help"}
    assert b"acl|cat" not in raw(r, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "admin")
    assert b"acl|setuser" in raw(r, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "admin")
    info = raw(r, "COMMAND", "INFO", "config|get", "CONFIG", "config|nosuch")
    assert info[0][0] == b"config|get" and info[0][1] == -3 and info[2] is None
    assert {s[0] for s in info[1][9]} == {b"config|get", b"config|set", b"config|resetstat", b"config|rewrite",
                                          b"config|help"}
    docs = raw(r, "COMMAND", "DOCS", "config|get", "config", "nosuch")
    if isinstance(docs, list):  # RESP2: a flat array
        docs = dict(zip(docs[::2], docs[1::2]))
        docs = {k: dict(zip(v[::2], v[1::2])) for k, v in docs.items()}
    assert set(docs) == {b"config|get", b"config"}
    assert docs[b"config|get"][b"group"] == b"server"
    assert b"subcommands" in docs[b"config"] and b"arguments" not in docs[b"config"]


def test_command_info_and_docs_have_redis_s_shape(oracle, server):
    """The same fields, in the same RESP3 types, as redis-server's replies."""
    ours, theirs = clients(server.port)[1], clients(oracle)[1]
    names = ["ping", "dbsize", "del", "config", "config|get", "client|kill", "command"]
    for mine, expected in zip(raw(ours, "COMMAND", "INFO", *names), raw(theirs, "COMMAND", "INFO", *names)):
        assert len(mine) == len(expected) == 10
        assert [type(x) for x in mine] == [type(x) for x in expected], mine[0]
        assert mine[:2] == expected[:2] and mine[3:6] == expected[3:6]
        assert bool(mine[9]) == bool(expected[9])
    del_info = raw(ours, "COMMAND", "INFO", "del")[0]
    assert del_info[8] == raw(theirs, "COMMAND", "INFO", "del")[0][8]  # key specs
    mine, expected = raw(ours, "COMMAND", "DOCS", *names), raw(theirs, "COMMAND", "DOCS", *names)
    assert set(mine) == set(expected)
    for name in expected:
        redis_only = {b"history", b"doc_flags", b"deprecated_since", b"replaced_by"}
        assert set(mine[name]) == set(expected[name]) - redis_only, name
        assert mine[name][b"group"] == expected[name][b"group"], name
    assert set(mine[b"config"][b"subcommands"]) <= set(expected[b"config"][b"subcommands"])


def render_hint(args: list) -> str:
    """The parameters line redis-cli shows for HELP <command>, drawn from COMMAND DOCS."""

    def one(arg: dict) -> str:
        kind = arg[b"type"]
        if kind == b"pure-token":
            text = arg[b"token"].decode()
        elif kind == b"oneof":
            text = "|".join(one(a) for a in arg[b"arguments"])
        elif kind == b"block":
            text = " ".join(one(a) for a in arg[b"arguments"])
        else:
            text = arg[b"name"].decode()
        if b"token" in arg and kind != b"pure-token":
            text = f"{arg[b'token'].decode()} {text}"
        flags = arg.get(b"flags", [])
        if b"multiple" in flags:
            text = f"{text} [{text} ...]"
        if b"optional" in flags:
            text = f"[{text}]"
        return text

    return " ".join(one(a) for a in args)


def test_help_of_twrite_tconfig_dget_shows_every_form(r3):
    docs = raw(r3, "COMMAND", "DOCS", "twrite", "tconfig", "dget", "tinfo", "tack")
    twrite = render_hint(docs[b"twrite"][b"arguments"])
    assert twrite == ("key tag entry [MSGID id]|[BACKLOG count] [MSGIDS id [id ...]] ENTRIES tag entry "
                      "[tag entry ...]")
    tconfig = render_hint(docs[b"tconfig"][b"arguments"])
    assert tconfig == "key GET|SET name value [name value ...]"
    dget = render_hint(docs[b"dget"][b"arguments"])
    for part in ("json", "[SEQ n]", "[NEXT_BY_SUBJ filter]", "[MAX_BYTES n]", "SUBJECT subject"):
        assert part in dget
    assert render_hint(docs[b"tinfo"][b"arguments"]) == "key [GROUPS]"
    assert render_hint(docs[b"tack"][b"arguments"]) == "key group offset [offset ...]|start-end"


def test_command_docs_of_every_entry(r):
    """Every entry's docs can be built and name its group; arguments only for non-containers."""
    for entry in every_command():
        docs = raw(r, "COMMAND", "DOCS", entry.text_name)
        assert docs, entry.name
        assert re.search(entry.group.encode(), repr(docs).encode())


def test_command_getkeys(r):
    assert raw(r, "COMMAND", "GETKEYS", "TWRITE", "k", "t", "x") == [b"k"]
    assert raw(r, "COMMAND", "GETKEYS", "del", "a", "b") == [b"a", b"b"]
    assert "no key arguments" in error_text(raw(r, "COMMAND", "GETKEYS", "acl", "whoami"))


def test_redis_cli_help_shows_every_form(cli):
    """redis-cli draws HELP from COMMAND DOCS: every form of TWRITE and TCONFIG shows,
    and HELP @stream lists DGET/MLAST/BATCH with the T* commands."""
    out = re.sub(r"\x1b\[[0-9;]*m", "", cli(stdin="HELP TWRITE\nHELP TCONFIG\nHELP CONFIG GET\nHELP @stream\n"))
    assert ("TWRITE key tag entry [MSGID id]|[BACKLOG count] [MSGIDS id [id ...]] ENTRIES tag entry "
            "[tag entry ...]") in out
    assert "TCONFIG key GET|SET name value [name value ...]" in out
    assert "CONFIG GET parameter [parameter ...]" in out
    for name in ("DGET key", "MLAST key", "BATCH key", "TREAD key", "TACK key"):
        assert name in out
    assert "TYPE key" not in out
