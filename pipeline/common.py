"""What every part of the data source shares: the schema, option parsing, the
connection to the server and the conversion of rows to Arrow record batches.

Nothing here imports pyspark: the planning and reading code runs in Spark's
Python workers, but it is plain Python that tests and benchmarks can call too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import pyarrow as pa

from tstream.client.types import as_map

DEFAULT_URL = "redis://127.0.0.1:6380"
DEFAULT_NODE_ENTRIES = 1000
# Macro nodes per partition when numPartitions is not given. A Spark task that
# runs Python costs ~50-130 ms on its own (measured: bench/RESULTS-spark.md), and
# one server stops gaining from more than 2-4 concurrent readers, so partitions
# are big: 250k entries (a second or so) from a server, 1M from a snapshot file,
# which is read ~3x faster.
DEFAULT_NODES_PER_PARTITION = 250
DEFAULT_OFFLINE_NODES_PER_PARTITION = 1000
DEFAULT_PAGE_SIZE = 1000           # entries per TREAD / DGET round trip
DEFAULT_MAX_PAGE_BYTES = 8 << 20   # and at most about this many bytes of tags and entries
DEFAULT_BATCH_SIZE = 500           # rows per atomic TWRITE ... ENTRIES of the sink
DEFAULT_TIMEOUT_MS = 30_000        # a reply (or a connection) not there after this is an error
DEFAULT_RETRIES = 10               # reconnections after a connection error or timeout, backing off
RETRY_BASE = 0.1                   # s: the first wait doubled (0.2 s), doubling up to RETRY_CAP
RETRY_CAP = 2.0                    # s: 10 retries ride out ~15 s without a server

SCHEMA_DDL = "offset long, tag string, entry binary, time timestamp, key string"
COLUMNS = ("offset", "tag", "entry", "time", "key")

# What Spark expects of a RecordBatch yielded by read(): exactly its
# to_arrow_schema(schema, timezone="UTC") of the DDL above, all nullable.
TIME_TYPE = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    pa.field("offset", pa.int64()),
    pa.field("tag", pa.string()),
    pa.field("entry", pa.binary()),
    pa.field("time", TIME_TYPE),
    pa.field("key", pa.string()),
])


class OptionError(ValueError):
    """A data source option is missing or malformed; the message names it."""


class DataLossError(RuntimeError):
    """A query was to read offsets that were evicted first."""


def loss_message(key: str, lo: int, hi: int, first: int) -> str:
    return (f"tstream: offsets {lo} to {hi} of key {key!r} were evicted before the query read "
            f"them (the stream's first offset is now {first}): some data may have been lost "
            "(retention: TEVICT, BACKLOG, max_len, max_age_ms or max_msgs_per_subject removed it). "
            "If you don't want your query to fail on such cases, set the source option "
            "failOnDataLoss to false.")


class MissingKeyError(RuntimeError):
    """A key to read does not exist (and ``allowMissing`` is not set)."""


def missing_key(key: str, where: str) -> MissingKeyError:
    hint = ""
    if any(c in key for c in ",*?["):
        hint = (" (to read several keys, use the option keys, a comma-separated list, or keyPattern, "
                "a glob such as orders.*)")
    return MissingKeyError(f"tstream: key {key!r} does not exist {where}{hint}; check its name, or set "
                           "the option allowMissing to true to read a missing key as empty")


def no_key_matches(pattern: str, where: str) -> MissingKeyError:
    return MissingKeyError(f"tstream: no key matches keyPattern {pattern!r} {where}; set the option "
                           "allowMissing to true to read that as empty")


# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------

# Every option, and where it applies: "r" batch reads, "s" streaming reads, "w"
# writes (batch and streaming). Anything else is refused (with the closest name
# as a suggestion): a typo must not silently read everything.
OPTION_SPECS = {
    "url": "rsw", "password": "rsw", "key": "rsw", "keys": "rs", "keyPattern": "rs",
    "path": "r",
    "startingOffset": "rs", "startingOffsets": "rs", "endingOffset": "r", "endingOffsets": "r",
    "startingTimestamp": "rs", "endingTimestamp": "r",
    "maxOffsetsPerTrigger": "s", "minOffsetsPerTrigger": "s", "maxTriggerDelay": "s",
    "failOnDataLoss": "rs", "allowMissing": "rs",
    "numPartitions": "rs", "minPartitions": "rs", "nodesPerPartition": "rs", "nodeEntries": "rs",
    "pageSize": "rs", "maxPageBytes": "rs", "withTime": "rs", "arrow": "rs", "readMode": "rs",
    "copySnapshot": "r", "readFrom": "rs", "replicas": "rs",
    "timeoutMs": "rsw", "retries": "rsw",
    "batchSize": "w", "exactlyOnce": "w", "writeId": "w", "idColumn": "w", "duplicateWindowMs": "w",
}
_CANONICAL = {name.lower(): name for name in OPTION_SPECS}
# Options Spark itself puts in a writer's map (not the user's to mistype).
_SPARK_OPTIONS = {"checkpointlocation"}
_MODES = {"r": "batch reads (spark.read)", "s": "streaming reads (spark.readStream)",
          "w": "writes (df.write, df.writeStream)"}


def check_names(options: Mapping[str, str], mode: str | None = None) -> None:
    """Refuse unknown options (suggesting the closest known name) and, given a
    ``mode`` ("r", "s" or "w"), options that do not apply to it."""
    import difflib

    for raw in options:
        name = str(raw)
        lower = name.lower()
        if lower in _SPARK_OPTIONS:
            continue
        canonical = _CANONICAL.get(lower)
        if canonical is None:
            close = difflib.get_close_matches(lower, list(_CANONICAL), n=1, cutoff=0.6)
            hint = f"; did you mean {_CANONICAL[close[0]]!r}?" if close else ""
            raise OptionError(f"tstream: unknown option {name!r}{hint} "
                              f"(the options: {', '.join(OPTION_SPECS)}; see docs/spark.md)")
        if mode is not None and mode not in OPTION_SPECS[canonical]:
            where = " and ".join(_MODES[m] for m in OPTION_SPECS[canonical])
            raise OptionError(f"tstream: option {canonical!r} applies to {where} only, "
                              f"not to {_MODES[mode]}")


def _lowered(options: Mapping[str, str]) -> dict:
    return {str(k).lower(): v for k, v in options.items()}


def _get(options: Mapping[str, str], *names: str):
    """The first of ``names`` present (option names are case-insensitive)."""
    for name in names:
        value = options.get(name.lower())
        if value is not None:
            return value
    return None


def _int(options, name: str, default: int | None, minimum: int = 1, *aliases: str) -> int | None:
    raw = _get(options, name, *aliases)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"tstream option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"tstream option {name} must be >= {minimum}, got {value}")
    return value


READ_MODES = ("auto", "nodes", "pages")


def _one_of(options, name: str, choices: tuple[str, ...]) -> str:
    """Option ``name``, one of ``choices`` (any case; the first when not given)."""
    raw = _get(options, name)
    value = choices[0] if raw is None else str(raw).strip().lower()
    if value not in choices:
        raise OptionError(f"tstream option {name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def _read_mode(options) -> str:
    return _one_of(options, "readMode", READ_MODES)


READ_FROM = ("primary", "replica")


def _read_from(options) -> str:
    return _one_of(options, "readFrom", READ_FROM)


def _replicas(options) -> tuple[str, ...] | None:
    raw = _get(options, "replicas")
    if raw is None:
        return None
    found = []
    for item in str(raw).split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(f"tstream option replicas must list host:port addresses separated by "
                              f"commas, got {raw!r}")
        found.append(f"{host.strip('[]')}:{int(port)}")
    return tuple(found)


def _bool(options, name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    raise OptionError(f"tstream option {name} must be true or false, got {raw!r}")


def _one_spec(raw, name: str) -> str | int:
    text = str(raw).strip().lower()
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise OptionError(f"tstream option {name} must be earliest, latest or an offset >= 1 "
                          f"(or a JSON object of those by key, e.g. {{\"a\": 5, \"b\": \"latest\"}}), got {raw!r}")
    return value


def _offset_spec(options, names: tuple[str, ...], default: str):
    """``earliest``, ``latest`` or an offset >= 1; or, as Kafka's, a JSON object
    of those by key (keys it does not name get ``default``): a tuple of pairs."""
    raw = _get(options, *names)
    if raw is None:
        return default
    if str(raw).lstrip().startswith("{"):
        import json

        try:
            by_key = json.loads(raw)
        except ValueError:
            raise OptionError(f"tstream option {names[0]}: malformed JSON {raw!r}") from None
        if not isinstance(by_key, dict):
            raise OptionError(f"tstream option {names[0]} must be a JSON object of offsets by key, got {raw!r}")
        return tuple(sorted((str(k), _one_spec(v, names[0])) for k, v in by_key.items()))
    return _one_spec(raw, names[0])


def spec_for(spec, key: str, default: str):
    """The ``earliest``/``latest``/offset that ``spec`` gives ``key``."""
    if isinstance(spec, tuple):
        return dict(spec).get(key, default)
    return spec


def _ending(options):
    ending = _offset_spec(options, ("endingOffset", "endingOffsets"), "latest")
    for spec in (dict(ending).values() if isinstance(ending, tuple) else (ending,)):
        if spec == "earliest":
            raise OptionError("tstream option endingOffset must be latest or an offset >= 1")
    return ending


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _duration(options, name: str, default: float) -> float:
    """A duration as Kafka writes them (``15m``, ``30s``, ``500ms``, ``1h``), in seconds."""
    import re

    raw = _get(options, name)
    if raw is None:
        return default
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h)\s*", str(raw).lower())
    if not match:
        raise OptionError(f"tstream option {name} must be a duration such as 15m, 30s or 500ms, got {raw!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _key_list(options) -> tuple[str, ...] | None:
    raw = _get(options, "keys")
    if raw is None:
        return None
    keys = tuple(dict.fromkeys(k.strip() for k in str(raw).split(",") if k.strip()))
    if not keys:
        raise OptionError(f"tstream option keys must list keys separated by commas, got {raw!r}")
    return keys


@dataclass(frozen=True)
class Options:
    """The parsed options of one read or write (picklable: partitions carry it)."""

    url: str
    password: str | None = field(repr=False)
    key: str | None
    keys: tuple[str, ...] | None  # the option keys: several streams
    key_pattern: str | None      # the option keyPattern: the streams whose names match this glob
    path: str | None
    starting: str | int | tuple  # batch: startingOffset; streaming: startingOffsets (tuple: by key)
    ending: str | int | tuple    # batch only: endingOffset (inclusive)
    num_partitions: int | None
    min_partitions: int | None   # split ranges further (not on node boundaries) up to this many
    nodes_per_partition: int | None  # None: the default of the reader (server or snapshot)
    node_entries: int | None     # None: ask the server (CONFIG GET node-entries)
    page_size: int
    with_time: bool
    arrow: bool
    starting_timestamp: int | None  # ms since the epoch (Kafka's startingTimestamp)
    ending_timestamp: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay: float     # s: minOffsetsPerTrigger waits at most this long
    fail_on_data_loss: bool
    allow_missing: bool
    batch_size: int
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    retries: int = DEFAULT_RETRIES
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES
    copy_snapshot: bool = True
    read_mode: str = "auto"      # "nodes" (TNODES), "pages" (DGET/TREAD), "auto": nodes when the server has them
    exactly_once: bool = True    # the sink writes message ids (pipeline/sink.py)
    write_id: str | None = None  # df.write: the ids' prefix (else one drawn per job)
    id_column: str | None = None  # the sink takes each row's message id from this column
    duplicate_window_ms: int | None = None  # the sink sets the stream's duplicate_window_ms to this
    read_from: str = "primary"   # "replica": the tasks read from replicas (planned on the primary, url)
    replicas: tuple[str, ...] | None = None  # host:port of the replicas; None: INFO replication of url

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False, mode: str | None = None) -> "Options":
        """Parse and check ``options``: unknown names are refused; with ``mode``
        ("r", "s", "w") so are the options that do not apply to it."""
        check_names(options, mode)
        streaming = streaming or mode == "s"
        options = _lowered(options)
        starting_names = (("startingOffsets", "startingOffset") if streaming
                          else ("startingOffset", "startingOffsets"))
        given = [name for name in ("key", "keys", "keyPattern") if _get(options, name) is not None]
        if len(given) > 1:
            raise OptionError(f"tstream: give one of the options key, keys and keyPattern, not {' and '.join(given)}")
        for by_time, by_offset in (("startingTimestamp", ("startingOffset", "startingOffsets")),
                                   ("endingTimestamp", ("endingOffset", "endingOffsets"))):
            if _get(options, by_time) is not None and _get(options, *by_offset) is not None:
                raise OptionError(f"tstream: give the option {by_time} or {by_offset[0]}, not both")
        return cls(
            url=str(_get(options, "url") or DEFAULT_URL),
            password=_get(options, "password"),
            key=_get(options, "key"),
            keys=_key_list(options),
            key_pattern=_get(options, "keyPattern"),
            path=_get(options, "path"),
            starting=_offset_spec(options, starting_names, "latest" if streaming else "earliest"),
            ending=_ending(options),
            num_partitions=_int(options, "numPartitions", None),
            min_partitions=_int(options, "minPartitions", None),
            nodes_per_partition=_int(options, "nodesPerPartition", None),
            node_entries=_int(options, "nodeEntries", None),
            page_size=_int(options, "pageSize", DEFAULT_PAGE_SIZE),
            with_time=_bool(options, "withTime", True),
            arrow=_bool(options, "arrow", True),
            starting_timestamp=_int(options, "startingTimestamp", None, 0),
            ending_timestamp=_int(options, "endingTimestamp", None, 0),
            max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None),
            min_offsets_per_trigger=_int(options, "minOffsetsPerTrigger", None),
            max_trigger_delay=_duration(options, "maxTriggerDelay", 15 * 60.0),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            allow_missing=_bool(options, "allowMissing", False),
            batch_size=_int(options, "batchSize", DEFAULT_BATCH_SIZE),
            timeout_ms=_int(options, "timeoutMs", DEFAULT_TIMEOUT_MS),
            retries=_int(options, "retries", DEFAULT_RETRIES, 0),
            max_page_bytes=_int(options, "maxPageBytes", DEFAULT_MAX_PAGE_BYTES),
            copy_snapshot=_bool(options, "copySnapshot", True),
            read_mode=_read_mode(options),
            exactly_once=_bool(options, "exactlyOnce", True),
            write_id=_get(options, "writeId"),
            id_column=_get(options, "idColumn"),
            duplicate_window_ms=_int(options, "duplicateWindowMs", None),
            read_from=_read_from(options),
            replicas=_replicas(options),
        )

    def require_key(self) -> str:
        if not self.key:
            raise OptionError("tstream: the option key (the stream to read or write) is required")
        return self.key

    def require_source(self) -> None:
        """A read needs one of key, keys and keyPattern."""
        if not (self.key or self.keys or self.key_pattern):
            raise OptionError("tstream: the option key (the stream to read) is required "
                              "(or keys, a comma-separated list, or keyPattern, a glob)")

    @property
    def fixed_keys(self) -> tuple[str, ...] | None:
        """The keys named by key or keys; None with keyPattern."""
        if self.key_pattern:
            return None
        return self.keys or ((self.key,) if self.key else ())

    def matches(self, key: str) -> bool:
        """Whether ``key`` is one this read names (for a checkpoint's keys)."""
        import fnmatch

        if self.key_pattern:
            return fnmatch.fnmatchcase(key, self.key_pattern)
        return key in (self.fixed_keys or ())

    @property
    def key_bytes(self) -> bytes:
        return self.require_key().encode()

    def at(self, address: str | None) -> "Options":
        """These options with the server ``host:port`` instead of the URL's (the
        scheme, user, password, db and TLS settings kept); None: unchanged."""
        if address is None:
            return self
        from dataclasses import replace
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.url)
        host, _, port = address.rpartition(":")
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if "@" in parts.netloc:
            netloc = parts.netloc.rsplit("@", 1)[0] + "@" + netloc
        return replace(self, url=urlunsplit(parts._replace(netloc=netloc)))


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------

def backoff(options: Options):
    """redis-py's exponential backoff of the retries (0.2 s, 0.4 s, ... up to 2 s)."""
    from redis.backoff import ExponentialBackoff

    return ExponentialBackoff(cap=RETRY_CAP, base=RETRY_BASE)


def connect(options: Options):
    """A redis-py client for ``options.url`` (``redis://`` or ``rediss://`` for TLS;
    user, password, db and TLS settings as redis-py's ``from_url`` reads them).
    The ``password`` option, when given, overrides the URL's. RESP3 is asked
    for: maps come back as dicts. Every wait for a reply or a connection is
    bounded by ``timeoutMs``; a command that meets a connection error or a
    timeout reconnects and is sent again, up to ``retries`` times with an
    exponential backoff (the sink's ``TWRITE`` too: at least once)."""
    import redis
    from redis.retry import Retry

    timeout = options.timeout_ms / 1000
    kwargs = {"protocol": 3, "socket_timeout": timeout, "socket_connect_timeout": min(timeout, 10.0),
              "retry": Retry(backoff(options), options.retries)}
    if options.password is not None:
        kwargs["password"] = options.password
    return redis.Redis.from_url(options.url, **kwargs)


@dataclass(frozen=True)
class StreamInfo:
    """``first`` and ``last`` offsets held (``first > last`` when nothing is held)."""

    first: int
    last: int
    nodes: int
    allow_direct: bool
    exists: bool = True

    @property
    def next_offset(self) -> int:
        return self.last + 1


def stream_info(client, key: str) -> StreamInfo:
    """TINFO of ``key``; a key that does not exist reads as an empty stream at 1."""
    from redis.exceptions import ResponseError

    try:
        info = as_map(client.execute_command("TINFO", key))
    except ResponseError as exc:
        if "no such key" in str(exc).lower():
            return StreamInfo(1, 0, 0, True, exists=False)
        raise
    direct = info.get("allow_direct", b"yes")
    return StreamInfo(int(info["first"]), int(info["last"]), int(info["nodes"]),
                      direct in (b"yes", "yes", 1, True))


def resolve_keys(client, options: Options) -> list[str]:
    """The keys a read covers: key or keys as given, or those matching
    keyPattern now (``SCAN ... MATCH pattern TYPE tstream``), sorted."""
    if options.key_pattern:
        found = client.scan_iter(match=options.key_pattern, count=1000, _type="tstream")
        return sorted({k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k) for k in found})
    return list(options.fixed_keys or ())


class NoReplicaError(RuntimeError):
    """``readFrom=replica`` and no replica to read from."""


def replica_addresses(client, options: Options) -> list[str]:
    """Where the tasks read: ``[None]`` (the primary, ``url``) unless
    ``readFrom=replica``; then the ``replicas`` option, else the replicas the
    primary reports online in ``INFO replication`` (``slaveN: ip=...,port=...,
    state=online``)."""
    if options.read_from != "replica":
        return [None]
    if options.replicas:
        return list(options.replicas)
    info = client.info("replication")
    found = []
    for name, value in sorted(info.items()):
        if name.startswith("slave") and name[5:].isdigit() and isinstance(value, dict):
            if value.get("state") == "online":
                found.append(f"{value['ip']}:{value['port']}")
    if not found:
        raise NoReplicaError(f"tstream: readFrom is replica, but the server at {options.url} reports no "
                             "online replica (INFO replication); give their addresses with the option "
                             "replicas (host:port,host:port) or read with readFrom=primary")
    return found


def node_entries(client, options: Options) -> int:
    """The macro-node size to align partitions and pages on: the ``nodeEntries``
    option, else the server's ``node-entries``. A stream created before a
    ``CONFIG SET node-entries`` keeps its old size; alignment only saves
    decompressions, the rows read do not depend on it."""
    if options.node_entries:
        return options.node_entries
    try:
        reply = client.execute_command("CONFIG", "GET", "node-entries")
        value = as_map(reply).get("node-entries")
        return max(1, int(value)) if value is not None else DEFAULT_NODE_ENTRIES
    except Exception:  # a server without it: any size works
        return DEFAULT_NODE_ENTRIES


# ---------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------

def batch_range(first: int, last: int, options: Options, key: str | None = None) -> tuple[int, int]:
    """The offsets ``lo..hi`` a batch read of ``key`` covers, given what it holds."""
    key = key or options.key or ""
    starting = spec_for(options.starting, key, "earliest")
    ending = spec_for(options.ending, key, "latest")
    if starting == "latest":
        lo = last + 1
    elif starting == "earliest":
        lo = first
    else:
        lo = max(first, starting)
    hi = last if ending == "latest" else min(last, ending)
    return lo, hi


def node_ranges(lo: int, hi: int, n: int, options: Options) -> list[tuple[int, int]]:
    """Split offsets ``lo..hi`` (inclusive) into ranges of whole macro nodes of
    ``n`` entries: ``numPartitions`` ranges of (nearly) equal node counts when
    that option is set, else ranges of ``nodesPerPartition`` nodes."""
    if hi < lo:
        return []
    first_node = (lo - 1) // n
    last_node = (hi - 1) // n
    total = last_node - first_node + 1
    if options.num_partitions:
        parts = min(options.num_partitions, total)
        bounds = [first_node + total * i // parts for i in range(parts + 1)]
    else:
        step = options.nodes_per_partition or DEFAULT_NODES_PER_PARTITION
        bounds = list(range(first_node, last_node + 1, step)) + [last_node + 1]
    ranges = []
    for a, b in zip(bounds, bounds[1:]):
        start = max(lo, a * n + 1)
        end = min(hi, b * n)
        if start <= end:
            ranges.append((start, end))
    return ranges


def split_to(ranges: list[tuple], minimum: int | None, n: int) -> list[tuple]:
    """``minPartitions``: split the biggest ranges in two (on a macro-node
    boundary while a range spans several nodes, else anywhere) until there are
    ``minimum`` ranges or every range is one offset. A range is a tuple whose
    last two items are ``lo`` and ``hi``; what comes before them is kept."""
    import heapq

    if not minimum or len(ranges) >= minimum:
        return ranges
    heap = [(-(r[-1] - r[-2] + 1), i, r) for i, r in enumerate(ranges)]
    heapq.heapify(heap)
    order = len(ranges)
    while len(heap) < minimum:
        size, i, r = heapq.heappop(heap)
        if -size <= 1:
            heapq.heappush(heap, (size, i, r))
            break
        head, lo, hi = r[:-2], r[-2], r[-1]
        first_node, last_node = (lo - 1) // n, (hi - 1) // n
        if last_node > first_node:
            cut = (first_node + (last_node - first_node + 1) // 2) * n  # last offset of the left half
        else:
            cut = lo + (hi - lo + 1) // 2 - 1
        for part in ((*head, lo, cut), (*head, cut + 1, hi)):
            heapq.heappush(heap, (-(part[-1] - part[-2] + 1), order, part))
            order += 1
    return sorted((r for _, _, r in heap), key=lambda r: (r[:-2], r[-2]))


# ---------------------------------------------------------------------------
# Arrow
# ---------------------------------------------------------------------------

def decode_tags(values: list) -> pa.Array:
    """Tags (bytes) as an Arrow string array; tags that are not UTF-8 are
    decoded with replacement characters (Spark's column is a string)."""
    binary = pa.array(values, pa.binary())
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else bytes(v).decode("utf-8", "replace") for v in values],
                        pa.string())


def record_batch(offsets, tags: pa.Array, entries, times: pa.Array | None, key: str) -> pa.RecordBatch:
    """One batch of ``key`` in Spark's layout; ``times`` None gives null times."""
    offsets = offsets if isinstance(offsets, pa.Array) else pa.array(offsets, pa.int64())
    entries = entries if isinstance(entries, pa.Array) else pa.array(entries, pa.binary())
    if times is None:
        times = pa.nulls(len(offsets), TIME_TYPE)
    keys = pa.repeat(pa.scalar(key, pa.string()), len(offsets))
    return pa.RecordBatch.from_arrays([offsets, tags, entries, times, keys], schema=ARROW_SCHEMA)


def rfc3339_to_times(values: list) -> pa.Array:
    """RFC 3339 strings with nanoseconds (DGET's ``time``) as Spark timestamps
    (microseconds: Spark's precision, the nanoseconds are truncated)."""
    strings = pa.array(values, pa.binary()).cast(pa.string())
    nanos = strings.cast(pa.timestamp("ns", tz="UTC"))
    return nanos.cast(TIME_TYPE, safe=False)


def batch_rows(batch: pa.RecordBatch):
    """The rows of a batch as tuples (for ``arrow=false``)."""
    return zip(*(column.to_pylist() for column in batch.columns))
