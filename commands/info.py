"""INFO: the server's state as Redis's ``# Section`` / ``field:value`` text."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time

from .connection import VERSION

# Tools (redis-cli, redis-benchmark, monitoring agents, Sentinel) parse redis_version:
# it is the Redis version whose replies tstream matches (its tests compare them with
# that redis-server's), and tstream_version is tstream's own.
REDIS_COMPAT_VERSION = "7.0.15"

DEFAULT_SECTIONS = ["server", "clients", "memory", "persistence", "stats", "replication", "cpu", "cluster",
                    "keyspace"]


def _server(server) -> dict:
    uptime = int(time.time() - server.started)
    return {
        "redis_version": REDIS_COMPAT_VERSION,
        "tstream_version": VERSION,
        "redis_mode": "standalone",
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "arch_bits": 64 if sys.maxsize > 2**32 else 32,
        "multiplexing_api": server.event_loop_name,
        "python_version": platform.python_version(),
        "process_id": os.getpid(),
        "run_id": server.run_id,
        "tcp_port": server.port,
        "server_time_usec": time.time_ns() // 1000,
        "uptime_in_seconds": uptime,
        "uptime_in_days": uptime // 86400,
        "executable": sys.argv[0],
        "config_file": server.config_file or "",
    }


def _clients(server) -> dict:
    return {
        "connected_clients": len(server.clients),
        "maxclients": server.config["maxclients"],
        "blocked_clients": server.blocked_count(),
    }


def _memory(server) -> dict:
    rss = rss_bytes()
    data = sum(stream.memory_bytes() for _, stream in server.keyspace.items())
    return {
        "used_memory": data,
        "used_memory_human": _human(data),
        "used_memory_rss": rss,
        "used_memory_rss_human": _human(rss),
        "used_memory_peak": server.peak_memory(data),
        "maxmemory": server.config["maxmemory"],
        "maxmemory_human": _human(server.config["maxmemory"]),
        "maxmemory_policy": server.config["maxmemory-policy"],
    }


def _persistence(server) -> dict:
    fields = {"loading": 0}
    fields.update(server.persistence_info())
    return fields


def _stats(server) -> dict:
    stats = server.stats
    return {
        "total_connections_received": stats.connections,
        "total_commands_processed": stats.commands,
        "instantaneous_ops_per_sec": stats.ops_per_sec(),
        "total_net_input_bytes": stats.net_input,
        "total_net_output_bytes": stats.net_output,
        "rejected_connections": stats.rejected,
        "total_error_replies": stats.errors,
        "evicted_entries": stats.evicted,
        "keyspace_hits": stats.hits,
        "keyspace_misses": stats.misses,
        # replication (server/replication.py): resyncs this server served as a primary
        "sync_full": server.replication.full_syncs,
        "sync_partial_ok": server.replication.partial_ok,
        "sync_partial_err": server.replication.partial_err,
        # JetStream atomic batches (engine/batches.py)
        "batches_in_flight": len(server.batches),
        **{f"batch_abandoned_{reason}": count for reason, count in server.batches.abandoned.items()},
        # JetStream fast-ingest batches (engine/ingest.py)
        "fast_batches_in_flight": len(server.fast),
        "fast_batch_abandoned_timeout": server.fast.abandoned,
        "fast_ingest_scanned_reads": stats.fast_scanned,
    }


def _replication(server) -> dict:
    return server.replication.info()


def _cpu(server) -> dict:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"used_cpu_sys": round(usage.ru_stime, 6), "used_cpu_user": round(usage.ru_utime, 6)}


def _commandstats(server) -> dict:
    fields = {}
    for name, stats in sorted(server.command_stats.items()):
        if not stats.used():  # as Redis: only the commands called since the last reset
            continue
        usec = int(stats.seconds * 1_000_000)
        per_call = usec / stats.calls if stats.calls else 0.0
        fields[f"cmdstat_{name.decode()}"] = (f"calls={stats.calls},usec={usec},usec_per_call={per_call:.2f},"
                                              f"rejected_calls={stats.rejected},failed_calls={stats.failed}")
    return fields


def _cluster(server) -> dict:
    return {"cluster_enabled": 0}  # (as Redis outside cluster mode: clients check it)


def _keyspace(server) -> dict:
    keys = len(server.keyspace)
    return {"db0": f"keys={keys},expires=0,avg_ttl=0"} if keys else {}


SECTIONS = {
    "server": _server,
    "clients": _clients,
    "memory": _memory,
    "persistence": _persistence,
    "stats": _stats,
    "replication": _replication,
    "cpu": _cpu,
    "cluster": _cluster,
    "keyspace": _keyspace,
    "commandstats": _commandstats,
}


def render(server, wanted: list[str]) -> str:
    if "all" in wanted or "everything" in wanted:
        names = DEFAULT_SECTIONS + ["commandstats"]
    elif not wanted or "default" in wanted:
        names = DEFAULT_SECTIONS
    else:
        names = [name for name in wanted if name in SECTIONS]
    parts = []
    for name in names:
        lines = [f"# {name.capitalize()}"]
        lines += [f"{key}:{value}" for key, value in SECTIONS[name](server).items()]
        parts.append("\r\n".join(lines))
    return "\r\n\r\n".join(parts) + "\r\n"


def rss_bytes() -> int:
    """The process's resident set size (what maxmemory is compared with)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _human(size: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{size:.2f}{unit}" if unit != "B" else f"{int(size)}B"
        size /= 1024
    return str(size)
