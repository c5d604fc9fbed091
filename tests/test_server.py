"""Server commands, connection handling and process behaviour, over real TCP."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import redis
import redis.asyncio

from .conftest import raw_exchange


def raw_command(client: redis.Redis, *args):
    """Send a command and return the reply as parsed, without redis-py's reply callbacks."""
    connection = client.connection_pool.get_connection()
    try:
        connection.send_command(*args)
        return connection.read_response()
    finally:
        client.connection_pool.release(connection)


class TestConnection:
    def test_hello3_satisfies_redis_py(self, r3):
        assert r3.ping() is True
        reply = r3.execute_command("HELLO", 3)
        assert reply[b"proto"] == 3 if b"proto" in reply else reply["proto"] == 3

    def test_hello_fields(self, r2):
        reply = r2.execute_command("HELLO", 2)
        fields = dict(zip(reply[::2], reply[1::2]))
        for name in (b"server", b"version", b"proto", b"id", b"mode", b"role", b"modules"):
            assert name in fields
        assert fields[b"proto"] == 2 and fields[b"role"] == b"master"

    def test_hello_bad_version(self, r):
        with pytest.raises(redis.ResponseError, match="NOPROTO"):
            r.execute_command("HELLO", 4)
        with pytest.raises(redis.ResponseError, match="Protocol version is not an integer"):
            r.execute_command("HELLO", "x")

    def test_ping_echo_select_time(self, r):
        assert r.ping()
        assert raw_command(r, "PING", "hi") == b"hi"
        assert r.echo("x y") == b"x y"
        assert r.execute_command("SELECT", 0) in (b"OK", "OK", True)
        with pytest.raises(redis.ResponseError, match="DB index is out of range"):
            r.execute_command("SELECT", 1)
        seconds, micros = r.time()
        assert abs(seconds - time.time()) < 5 and 0 <= micros < 1_000_000

    def test_unknown_command(self, r):
        with pytest.raises(redis.ResponseError, match="unknown command 'FOO', with args beginning with: 'a' 'b'"):
            r.execute_command("FOO", "a", "b")
        assert r.ping()

    def test_wrong_arity_everywhere(self, r):
        for command in (["ECHO"], ["TYPE"], ["DBSIZE", "x"], ["TEVICT", "k"], ["KEYS"]):
            with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
                r.execute_command(*command)

    def test_auth_without_password_configured(self, r):
        with pytest.raises(redis.RedisError, match="without any password configured"):
            r.execute_command("AUTH", "secret")

    def test_client_commands(self, server):
        c = server.client(protocol=3, client_name="worker-1")
        assert c.client_getname() == "worker-1" or c.client_getname() == b"worker-1"
        my_id = c.client_id()
        listing = c.execute_command("CLIENT", "LIST")
        listing = listing.decode() if isinstance(listing, bytes) else listing
        line = next(l for l in listing.splitlines() if f"id={my_id} " in l)
        assert "name=worker-1" in line and "resp=3" in line and "lib-name=redis-py" in line
        fields = dict(part.split("=", 1) for part in line.split())
        assert fields["cmd"] == "client|list" and fields["flags"] == "N" and fields["events"] == "r"
        assert int(fields["tot-net-in"]) > 0 and int(fields["tot-net-out"]) > 0 and int(fields["tot-cmds"]) >= 3
        with pytest.raises(redis.ResponseError, match="cannot contain spaces"):
            c.execute_command("CLIENT", "SETNAME", "a b")
        with pytest.raises(redis.ResponseError, match="unknown subcommand"):
            c.execute_command("CLIENT", "FROB")

    def test_client_kill_by_id(self, server):
        victim = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        victim.sendall(b"CLIENT ID\r\n")
        victim_id = int(victim.recv(100)[1:-2])
        killer = server.client()
        assert killer.execute_command("CLIENT", "KILL", "ID", victim_id) == 1
        assert victim.recv(100) == b""  # closed by the server
        assert killer.execute_command("CLIENT", "KILL", "ID", victim_id) == 0
        with pytest.raises(redis.ResponseError, match="No such client"):
            killer.execute_command("CLIENT", "KILL", "127.0.0.1:1")

    def test_quit(self, server):
        assert raw_exchange(server.port, b"QUIT\r\n").startswith(b"+OK\r\n")

    @pytest.mark.asyncio
    async def test_asyncio_client_resp2_and_resp3(self, server):
        for protocol in (2, 3):
            client = redis.asyncio.Redis(port=server.port, protocol=protocol)
            first = await client.execute_command("TWRITE", f"a{protocol}", "t", "x")
            results = await asyncio.gather(
                *(client.execute_command("TWRITE", f"a{protocol}", "t", str(i)) for i in range(20))
            )
            assert first == 1 and sorted(results) == list(range(2, 22))
            reply = await client.execute_command("TREAD", f"a{protocol}", 1, 100)
            assert len(reply) == 21
            await client.aclose()


class TestProtocol:
    def test_inline_commands_work(self, server):
        assert raw_exchange(server.port, b"PING\r\nTWRITE inl tag value\r\nTREAD inl 1 1\r\n") == (
            b"+PONG\r\n:1\r\n*1\r\n*3\r\n:1\r\n$3\r\ntag\r\n$5\r\nvalue\r\n"
        )

    def test_pipelined_replies_in_order(self, server):
        payload = b"".join(b"*4\r\n$6\r\nTWRITE\r\n$1\r\np\r\n$1\r\nt\r\n$%d\r\n%d\r\n" % (len(str(i)), i)
                           for i in range(100))
        reply = raw_exchange(server.port, payload)
        assert reply == b"".join(b":%d\r\n" % i for i in range(1, 101))

    def test_protocol_error_closes_only_that_connection(self, server):
        other = server.client()
        other.execute_command("TWRITE", "keep", "t", "x")
        reply = raw_exchange(server.port, b"*1\r\n$x\r\n")
        assert reply.startswith(b"-ERR Protocol error") and reply.endswith(b"<closed>")
        reply = raw_exchange(server.port, b'ECHO "unterminated\r\n')
        assert reply.startswith(b"-ERR Protocol error: unbalanced quotes")
        assert other.execute_command("TREAD", "keep", 1, 1) == [[1, b"t", b"x"]]

    def test_error_mid_pipeline_does_not_stop_the_rest(self, server):
        reply = raw_exchange(server.port, b"PING\r\nNOPE\r\nTEVICT k x\r\nPING\r\n")
        lines = reply.split(b"\r\n")
        assert lines[0] == b"+PONG" and lines[1].startswith(b"-ERR unknown command")
        assert lines[2].startswith(b"-ERR value is not an integer") and lines[3] == b"+PONG"


class TestKeyspace:
    def test_del_exists_type_dbsize(self, r):
        r.execute_command("TWRITE", "a", "t", "x")
        r.execute_command("TWRITE", "b", "t", "x")
        assert r.exists("a", "b", "c", "a") == 3
        assert r.type("a") in (b"tstream", "tstream")
        assert r.type("c") in (b"none", "none")
        assert r.dbsize() == 2
        assert r.delete("a", "c") == 1
        assert r.dbsize() == 1
        assert r.execute_command("TWRITE", "a", "t", "x") == 1  # a new stream starts at 1 again

    def test_keys_glob(self, r):
        for key in ("user:1", "user:2", "order:1", "u[x]"):
            r.execute_command("TWRITE", key, "t", "x")
        assert sorted(r.keys("user:*")) == [b"user:1", b"user:2"]
        assert sorted(r.keys("*:1")) == [b"order:1", b"user:1"]
        assert r.keys("u\\[x\\]") == [b"u[x]"]
        assert sorted(r.keys("user:[12]")) == [b"user:1", b"user:2"]

    def test_scan_returns_every_key(self, r):
        names = {f"k{i}".encode() for i in range(250)}
        pipe = r.pipeline(transaction=False)
        for name in names:
            pipe.execute_command("TWRITE", name, "t", "x")
        pipe.execute()
        assert set(r.scan_iter(count=17)) == names
        assert set(r.scan_iter(match="k1*", count=50)) == {n for n in names if n.startswith(b"k1")}
        with pytest.raises(redis.ResponseError, match="invalid cursor"):
            r.execute_command("SCAN", "abc")

    def test_flushall(self, r):
        r.execute_command("TWRITE", "a", "t", "x")
        assert r.flushall()
        assert r.dbsize() == 0


class TestIntrospection:
    def test_info_sections(self, r):
        r.execute_command("TWRITE", "a", "t", "x")
        info = r.info()
        for field in ("redis_version", "connected_clients", "used_memory", "total_commands_processed",
                      "rdb_changes_since_last_save", "blocked_clients", "uptime_in_seconds"):
            assert field in info
        assert info["db0"]["keys"] == 1
        assert "connected_clients" in r.info("clients")
        assert "used_memory" not in r.info("clients")

    def test_config_get_set(self, r):
        assert r.config_get("port")["port"].isdigit()
        assert r.config_get("node-entries") == {"node-entries": "1000"}
        assert r.config_set("group-max-pending", 500)
        assert r.config_get("group-max-pending") == {"group-max-pending": "500"}
        r.config_set("group-max-pending", 10000)
        assert set(r.config_get("a*")) >= {"appendonly", "appendfsync"}

    @pytest.mark.parametrize(
        "args, error",
        [
            (["port", "1"], "can't set immutable config 'port'"),
            (["nonsense", "1"], "Unknown option"),
            (["maxclients", "lots"], "Invalid argument"),
            (["appendfsync", "sometimes"], "Invalid argument"),
        ],
    )
    def test_config_set_errors_change_nothing(self, r, args, error):
        before = r.config_get("*")
        with pytest.raises(redis.ResponseError, match=error):
            r.execute_command("CONFIG", "SET", "timeout", "5", *args)
        assert r.config_get("*") == before

    def test_command_count_info_docs(self, r):
        assert raw_command(r, "COMMAND", "COUNT") >= 20
        info = raw_command(r, "COMMAND", "INFO", "twrite", "nosuch")
        assert info[0][0] == b"twrite" and info[0][1] == -4 and info[1] is None
        docs = r3_docs = raw_command(r, "COMMAND", "DOCS", "tread")
        if isinstance(docs, list):
            docs = {docs[0]: dict(zip(docs[1][::2], docs[1][1::2]))}
        tread = docs.get(b"tread") or docs.get("tread")
        args = tread.get(b"arguments") or tread.get("arguments")
        assert r3_docs and len(args) >= 5

    def test_command_docs_argument_tree(self, r3):
        docs = raw_command(r3, "COMMAND", "DOCS", "tread")[b"tread"]
        args = docs[b"arguments"]
        names = [a[b"name"] for a in args]
        assert names[:3] == [b"key", b"offset", b"count"]
        block = next(a for a in args if a.get(b"token") == b"BLOCK")
        assert b"optional" in block[b"flags"]
        retry = next(a for a in args if a.get(b"token") == b"RETRY")
        assert retry[b"type"] == b"block" and len(retry[b"arguments"]) == 2


class TestRedisCli:
    def test_one_shot_commands(self, cli):
        assert cli("TWRITE", "clikey", "tag", "hello").strip() == "(integer) 1"
        assert cli("TWRITE", "clikey", "ENTRIES", "a", "1", "b", "2").strip() == "(integer) 2"
        out = cli("TREAD", "clikey", "1", "10")
        assert "hello" in out and '"b"' in out
        assert cli("TREAD", "clikey", "3", "1", raw=True).split() == ["3", "b", "2"]
        assert "unknown command" in cli("NOPE")

    def test_piped_commands(self, cli):
        out = cli(stdin="TWRITE piped t one\nTWRITE piped t two\nTREAD piped - 10 WITHINFO\n", raw=True)
        assert out.split() == ["1", "2", "1", "2", "1", "t", "one", "2", "t", "two"]

    def test_info_and_help_hints(self, cli):
        assert "redis_version" in cli("INFO", "server")
        assert "tread" in cli("COMMAND", "DOCS", "tread")


class TestProcess:
    def test_sigterm_exits_zero(self, make_server):
        proc = make_server("--save", "")
        assert proc.stop() == 0
        assert "bye" in proc.output()

    def test_shutdown_command_exits_zero(self, make_server):
        proc = make_server("--save", "")
        c = proc.client()
        c.shutdown(nosave=True)  # redis-py treats the closed connection as success
        assert proc.proc.wait(10) == 0

    def test_config_file_and_bad_config(self, make_server, tmp_path):
        conf = tmp_path / "tstream.conf"
        conf.write_text("# comment\nnode-entries 7\ngroup-max-pending 33\nsave \"\"\n")
        proc = make_server(str(conf))
        assert proc.client().config_get("node-entries") == {"node-entries": "7"}
        bad = make_server("--node-entries", "zero", start=False)
        with pytest.raises(RuntimeError, match="bad configuration"):
            bad.start()


class TestObservability:
    def test_commandstats_count_calls_failures_and_rejections(self, server):
        c = server.client()
        c.config_resetstat()
        for i in range(5):
            c.execute_command("TWRITE", "obs", "t", i)
        with pytest.raises(redis.ResponseError):
            c.execute_command("TWRITE", "obs", "t")  # wrong arity: rejected
        with pytest.raises(redis.ResponseError):
            c.execute_command("TEVICT", "obs", "x")  # fails inside the command
        stats = c.info("commandstats")
        assert stats["cmdstat_twrite"]["calls"] == 5 and stats["cmdstat_twrite"]["rejected_calls"] == 1
        assert stats["cmdstat_tevict"]["failed_calls"] == 1
        assert stats["cmdstat_twrite"]["usec"] >= 0
        assert "cmdstat_twrite" in c.info("all")
        assert "cmdstat_twrite" not in c.info()
        assert c.info("stats")["total_commands_processed"] >= 7

    def test_slowlog(self, server):
        c = server.client()
        c.config_set("slowlog-log-slower-than", 0)
        try:
            c.slowlog_reset()
            c.execute_command("TWRITE", "slow", "t", "x" * 500)
            entries = raw_command(c, "SLOWLOG", "GET", 10)
            logged = [e for e in entries if e[3][0] == b"TWRITE"]
            assert logged and logged[0][3][3].startswith(b"x" * 128) and b"more bytes" in logged[0][3][3]
            assert raw_command(c, "SLOWLOG", "LEN") >= 1
            c.config_set("slowlog-log-slower-than", -1)
            c.slowlog_reset()
            c.execute_command("TWRITE", "slow", "t", "x")
            assert raw_command(c, "SLOWLOG", "LEN") == 0
        finally:
            c.config_set("slowlog-log-slower-than", 10000)
        with pytest.raises(redis.ResponseError, match="Try SLOWLOG HELP"):
            c.execute_command("SLOWLOG", "FROB")

    def test_latency_events(self, server):
        c = server.client()
        c.config_set("latency-monitor-threshold", 1)
        try:
            c.execute_command("LATENCY", "RESET")
            # 200k entries in one TWRITE take well over a millisecond.
            c.execute_command("TWRITE", "lat", "ENTRIES", *[b"t", b"x" * 20] * 200_000)
            latest = {e[0]: e for e in raw_command(c, "LATENCY", "LATEST")}
            assert b"fast-command" in latest and latest[b"fast-command"][3] >= 1
            history = raw_command(c, "LATENCY", "HISTORY", "fast-command")
            assert history and history[-1][1] >= 1
            assert raw_command(c, "LATENCY", "RESET") == 1
            assert raw_command(c, "LATENCY", "LATEST") == []
        finally:
            c.config_set("latency-monitor-threshold", 0)
