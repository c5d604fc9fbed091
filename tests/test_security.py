"""Hardening: authentication, ACL users, limits, protected mode, TLS — through a real server."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time

import pytest
import redis

from tstream.server.connection import is_loopback

from .conftest import raw_exchange, read_until_quiet


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def read_all(sock: socket.socket, wait: float = 0.5) -> bytes:
    return read_until_quiet(sock, wait)


class TestAuthentication:
    @pytest.fixture
    def locked(self, make_server):
        return make_server("--save", "", "--requirepass", "s3cret")

    def test_noauth_until_auth(self, locked):
        reply = raw_exchange(locked.port, b"TWRITE k t v\r\nPING\r\nAUTH wrong\r\nAUTH s3cret\r\nTWRITE k t v\r\n")
        lines = reply.split(b"\r\n")
        assert lines[0] == b"-NOAUTH Authentication required."
        assert lines[1] == b"-NOAUTH Authentication required."
        assert lines[2].startswith(b"-WRONGPASS")
        assert lines[3] == b"+OK" and lines[4] == b":1"

    def test_redis_py_with_password_resp2_and_resp3(self, locked):
        for protocol in (2, 3):
            c = locked.client(password="s3cret", protocol=protocol)
            assert c.execute_command("TWRITE", "k", "t", "v") >= 1
        with pytest.raises(redis.AuthenticationError):
            locked.client(password="nope").ping()

    def test_hello_auth(self, locked):
        reply = raw_exchange(locked.port, b"HELLO 3\r\nHELLO 3 AUTH default s3cret\r\nPING\r\n")
        assert reply.startswith(b"-NOAUTH HELLO must be called")
        assert b"+PONG" in reply and b"proto" in reply

    def test_quit_allowed_and_nothing_written_before_auth(self, locked):
        assert raw_exchange(locked.port, b"TWRITE k t v\r\nQUIT\r\n").endswith(b"+OK\r\n<closed>")
        assert locked.client(password="s3cret").exists("k") == 0

    def test_unauthenticated_limits(self, locked):
        eleven = b"*11\r\n" + b"$1\r\na\r\n" * 11
        assert raw_exchange(locked.port, eleven) == b"-ERR Protocol error: unauthenticated multibulk length\r\n<closed>"
        big = b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"
        assert raw_exchange(locked.port, big) == b"-ERR Protocol error: unauthenticated bulk length\r\n<closed>"
        sock = connect(locked.port)
        try:
            for _ in range(20):  # 1.3 MB of a never-ending inline line
                sock.sendall(b"x" * 65536)
        except OSError:
            pass
        assert b"Protocol error" in read_all(sock)
        sock.close()
        # After AUTH the same client may send large commands.
        sock = connect(locked.port)
        sock.sendall(b"AUTH s3cret\r\n" + b"*4\r\n$6\r\nTWRITE\r\n$1\r\nk\r\n$1\r\nt\r\n$100000\r\n" + b"x" * 100000 + b"\r\n")
        assert read_all(sock) == b"+OK\r\n:1\r\n"
        sock.close()

    def test_requirepass_set_at_runtime(self, make_server):
        proc = make_server("--save", "")
        c = proc.client()
        c.config_set("requirepass", "later")
        assert c.ping()  # existing connections stay authenticated
        assert raw_exchange(proc.port, b"PING\r\n").startswith(b"-NOAUTH")
        assert proc.client(password="later").ping()


class TestAclUsers:
    @pytest.fixture
    def acl_server(self, make_server, tmp_path):
        conf = tmp_path / "acl.conf"
        conf.write_text(
            "save \"\"\n"
            "requirepass adminpw\n"
            "user app on >apppw ~app:* +@all -@admin -@dangerous\n"
            "user reader on >readpw ~app:* +@read +@connection\n"
            "user disabled off >pw ~* +@all\n"
        )
        return make_server(str(conf))

    def test_app_user_restricted_to_its_keys(self, acl_server):
        app = acl_server.client(username="app", password="apppw")
        assert app.execute_command("TWRITE", "app:events", "t", "v") == 1
        with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions to access one of the keys used as arguments"):
            app.execute_command("TWRITE", "other", "t", "v")
        with pytest.raises(redis.exceptions.NoPermissionError, match=r"this user has no permissions to run the 'config\|get' command"):
            app.config_get("port")
        assert app.execute_command("ACL", "WHOAMI") in (b"app", "app")
        admin = acl_server.client(password="adminpw")
        admin.execute_command("TWRITE", "other", "t", "v")
        assert sorted(admin.keys("*")) == [b"app:events", b"other"]
        assert app.keys("*") == [b"app:events"]  # KEYS shows only what the user may access
        with pytest.raises(redis.exceptions.NoPermissionError):
            app.exists("other")  # even asking whether a forbidden key exists is refused

    def test_read_only_user(self, acl_server):
        reader = acl_server.client(username="reader", password="readpw")
        acl_server.client(username="app", password="apppw").execute_command("TWRITE", "app:x", "t", "v")
        assert reader.execute_command("TREAD", "app:x", 1, 10) == [[1, b"t", b"v"]]
        with pytest.raises(redis.exceptions.NoPermissionError, match="this user has no permissions to run the 'twrite'"):
            reader.execute_command("TWRITE", "app:x", "t", "v")

    def test_wrong_and_disabled_users(self, acl_server):
        with pytest.raises(redis.AuthenticationError):
            acl_server.client(username="app", password="wrong").ping()
        with pytest.raises(redis.AuthenticationError):
            acl_server.client(username="disabled", password="pw").ping()
        with pytest.raises(redis.AuthenticationError):
            acl_server.client(username="nobody", password="pw").ping()

    def test_acl_list_users_setuser_deluser(self, acl_server):
        admin = acl_server.client(password="adminpw")
        listing = [x.decode() if isinstance(x, bytes) else x for x in admin.execute_command("ACL", "LIST")]
        assert any(line.startswith("user app on #") and "~app:*" in line for line in listing)
        assert "apppw" not in " ".join(listing)  # passwords are shown as digests only
        assert admin.execute_command("ACL", "SETUSER", "temp", "on", ">t", "~t:*", "+@all") in (b"OK", "OK", True)
        assert acl_server.client(username="temp", password="t").execute_command("TWRITE", "t:1", "a", "b") == 1
        with pytest.raises(redis.ResponseError, match="Syntax error"):
            admin.execute_command("ACL", "SETUSER", "temp", "bogus-rule")
        assert admin.execute_command("ACL", "DELUSER", "temp") == 1
        with pytest.raises(redis.ResponseError, match="cannot be removed"):
            admin.execute_command("ACL", "DELUSER", "default")

    def test_bad_user_line_refuses_to_start(self, make_server, tmp_path):
        conf = tmp_path / "bad.conf"
        conf.write_text("user broken on ?what\n")
        with pytest.raises(RuntimeError, match="bad configuration"):
            make_server(str(conf))


class TestLimits:
    def test_maxclients(self, make_server):
        proc = make_server("--save", "", "--maxclients", "2")
        first, second = connect(proc.port), connect(proc.port)
        first.sendall(b"PING\r\n")
        second.sendall(b"PING\r\n")
        assert read_all(first).startswith(b"+PONG") and read_all(second).startswith(b"+PONG")
        third = connect(proc.port)
        assert read_all(third) == b"-ERR max number of clients reached\r\n<closed>"
        first.close()
        time.sleep(0.2)
        fourth = connect(proc.port)
        fourth.sendall(b"PING\r\n")
        assert read_all(fourth).startswith(b"+PONG")

    def test_idle_timeout(self, make_server):
        proc = make_server("--save", "", "--timeout", "1")
        sock = connect(proc.port)
        sock.sendall(b"PING\r\n")
        assert read_all(sock).startswith(b"+PONG")
        time.sleep(1.6)
        assert read_all(sock, 1.0) == b"<closed>"

    def test_proto_max_bulk_len_and_query_buffer(self, make_server):
        proc = make_server("--save", "", "--proto-max-bulk-len", "1mb")
        sock = connect(proc.port)
        try:
            sock.sendall(b"*4\r\n$6\r\nTWRITE\r\n$1\r\nk\r\n$1\r\nt\r\n$3000000\r\n" + b"x" * 2_000_000)
        except OSError:
            pass
        # Refused from its header, before its bytes arrive, with Redis's text.
        assert read_all(sock).startswith(b"-ERR Protocol error: invalid bulk length\r\n")
        c = proc.client()
        assert c.exists("k") == 0
        assert c.execute_command("TWRITE", "k", "t", b"x" * 500_000) == 1  # within the limit

    def test_client_that_never_reads_is_bounded(self, make_server):
        proc = make_server("--save", "", "--client-output-buffer-limit", "normal 4mb 2mb 1")
        c = proc.client()
        c.execute_command("TWRITE", "big", "ENTRIES", *[b"t", b"y" * 1000] * 5000)  # 5 MB of entries
        sock = connect(proc.port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        request = b"TREAD big 1 5000\r\n" * 200  # ~1 GB of replies if the server buffered them all
        try:
            sock.sendall(request)
        except OSError:
            pass
        time.sleep(2.5)
        listing = c.execute_command("CLIENT", "LIST")
        listing = listing.decode() if isinstance(listing, bytes) else listing
        omem = [int(part.split("=")[1]) for line in listing.splitlines()
                for part in line.split() if part.startswith("omem=")]
        assert max(omem) < 8 * 1024 * 1024
        assert c.ping()  # other clients never notice
        sock.close()

    def test_protected_mode_rule(self):
        assert is_loopback("127.0.0.1:5000") and is_loopback("[::1]:5000")
        assert not is_loopback("10.1.2.3:5000") and not is_loopback("[2001:db8::1]:5000")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    d = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=tstream-test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", f"{name}.crt")
    return d


class TestTls:
    def tls_server(self, make_server, certificates, *extra):
        from .conftest import free_port

        port = free_port()
        proc = make_server("--save", "", "--tls-port", str(port), "--tls-cert-file", str(certificates / "server.crt"),
                           "--tls-key-file", str(certificates / "server.key"), *extra)
        return proc, port

    def test_redis_py_over_tls(self, make_server, certificates):
        proc, port = self.tls_server(make_server, certificates)
        for protocol in (2, 3):
            c = redis.Redis(port=port, ssl=True, ssl_ca_certs=str(certificates / "ca.crt"), protocol=protocol)
            assert c.execute_command("TWRITE", "tls", "t", "v") >= 1
            assert c.execute_command("TREAD", "tls", 1, 1) == [[1, b"t", b"v"]]
        assert proc.client().execute_command("TREAD", "tls", "-", 0, "WITHINFO") == [[1, 2]]  # plain port too

    def test_client_certificates_required_with_a_ca(self, make_server, certificates):
        proc, port = self.tls_server(make_server, certificates, "--tls-ca-cert-file", str(certificates / "ca.crt"))
        with pytest.raises((redis.ConnectionError, ssl.SSLError)):
            redis.Redis(port=port, ssl=True, ssl_ca_certs=str(certificates / "ca.crt")).ping()
        c = redis.Redis(port=port, ssl=True, ssl_ca_certs=str(certificates / "ca.crt"),
                        ssl_certfile=str(certificates / "client.crt"), ssl_keyfile=str(certificates / "client.key"))
        assert c.ping()

    def test_redis_cli_over_tls(self, make_server, certificates):
        from .conftest import redis_cli_path

        proc, port = self.tls_server(make_server, certificates)
        done = subprocess.run([redis_cli_path(), "-p", str(port), "--tls", "--cacert", str(certificates / "ca.crt"),
                               "TWRITE", "clitls", "t", "v"], capture_output=True, text=True, timeout=30)
        assert done.stdout.strip() == "1", done.stderr


def test_pipelined_writes_of_a_restricted_user_are_checked_one_by_one(make_server, tmp_path):
    """Runs of TWRITE (commands/dispatch.py) are only taken for unrestricted users: an ACL
    user's pipeline is checked command by command."""
    from .conftest import raw_exchange

    conf = tmp_path / "acl.conf"
    conf.write_text('save ""\nuser app on >apppw ~app:* +@all -@admin\n')
    proc = make_server(str(conf))

    def mb(*args: bytes) -> bytes:
        return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

    payload = (mb(b"AUTH", b"app", b"apppw") + mb(b"TWRITE", b"app:x", b"t", b"1")
               + mb(b"TWRITE", b"app:x", b"t", b"2") + mb(b"TWRITE", b"other", b"t", b"3")
               + mb(b"TWRITE", b"other", b"t", b"4") + mb(b"TWRITE", b"app:x", b"t", b"5"))
    reply = raw_exchange(proc.port, payload)
    assert reply.startswith(b"+OK\r\n:1\r\n:2\r\n-NOPERM")
    assert reply.endswith(b":3\r\n")
    assert reply.count(b"-NOPERM") == 2
    assert proc.client().execute_command("EXISTS", "other") == 0
