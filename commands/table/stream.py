"""Group ``stream``, ACL category @stream: the RCP 11 commands (commands/streams.py)
and the JetStream ones, ADR-31 direct get and ADR-50 atomic batch (commands/jetstream.py)."""

from __future__ import annotations

from .. import ingest, jetstream, nodes, streams
from ..flags import BLOCKING, DENYOOM, FAST, READONLY, WRITE
from .entry import ONE_KEY, command

GROUP = "stream"

COMMANDS = [
    command(
        "twrite", streams.twrite, arity=-4, flags=WRITE | DENYOOM | FAST, acl="@stream", keys=ONE_KEY,
        group=GROUP, run=streams.twrite_run, run_words=(4, 6),
        syntax=["TWRITE key tag entry [MSGID id]",
                "TWRITE key [BACKLOG count] [MSGIDS id [id ...]] ENTRIES tag entry [tag entry ...]"],
        summary="Appends entries atomically; replies the offset of the first one.",
        complexity="O(1) per entry (plus sealing a full macro node, O(node size), once per node).",
    ),
    command(
        "tread", streams.tread, arity=-4, flags=READONLY | BLOCKING, acl="@stream", keys=ONE_KEY, group=GROUP,
        run=streams.tread_run,
        syntax="TREAD key offset count [BLOCK ms] [GROUP name] [RETRY retry-ms expire-ms] [WITHINFO]",
        summary="Reads up to count entries from offset on, or a consumer group's next entries; "
                "BLOCK waits for something to read.",
        complexity="O(1) seek + O(count); group reads O(count log pending) for the due retries, "
                   "amortised O(1) per new entry.",
    ),
    command(
        "tevict", streams.tevict, arity=3, flags=WRITE, acl="@stream", keys=ONE_KEY, group=GROUP,
        syntax="TEVICT key offset",
        summary="Evicts every entry up to offset (a negative -n keeps the newest n); "
                "replies the number of entries evicted.",
        complexity="O(entries evicted / node size).",
    ),
    command(
        "tack", streams.tack, arity=-4, flags=WRITE | FAST, acl="@stream", keys=ONE_KEY, group=GROUP,
        syntax=["TACK key group offset [offset ...]",
                "TACK key group start-end"],
        summary="Acknowledges pending entries of a consumer group; replies how many were pending.",
        complexity="Amortised O(k) for k offsets.",
    ),
    command(
        "tpending", streams.tpending, arity=3, flags=READONLY, acl="@stream", keys=ONE_KEY, group=GROUP,
        syntax="TPENDING key group",
        summary="The consumer group's pending entries as [offset, deliveries, ms-until-retry], by offset.",
        complexity="O(pending).",
    ),
    command(
        "tinfo", streams.tinfo, arity=-2, flags=READONLY, acl="@stream", keys=ONE_KEY, group=GROUP,
        syntax=["TINFO key",
                "TINFO key GROUPS"],
        summary="The stream's length, first, last, nodes, bytes, groups and config; "
                "with GROUPS, one map (name, next, pending) per consumer group.",
        complexity="O(1); with GROUPS O(groups).",
    ),
    command(
        "tnodes", nodes.tnodes, arity=-3, flags=READONLY, acl="@stream", keys=ONE_KEY, group=GROUP,
        syntax="TNODES key offset [COUNT nodes] [MAXBYTES bytes]",
        summary="The macro nodes holding offset and after, as stored (compressed blocks and the header "
                "that describes them), for readers that decode them (the Spark source).",
        complexity="O(nodes x (blocks + distinct tags)) plus a copy of their bytes.",
    ),
    command(
        "tconfig", streams.tconfig, arity=-3, flags=WRITE, acl="@stream", keys=ONE_KEY, group=GROUP,
        syntax=["TCONFIG key GET",
                "TCONFIG key SET name value [name value ...]"],
        summary="Reads the stream's config, or validates every pair and then applies them all "
                "(creating the stream if needed), evicting what the new limits exclude.",
        complexity="O(pairs) plus the eviction.",
    ),
    command(
        "dget", jetstream.dget, arity=-3, flags=READONLY, acl="@stream", keys=ONE_KEY, group=GROUP,
        syntax=["DGET key json",
                "DGET key [SEQ n] [LAST_BY_SUBJ subject] [NEXT_BY_SUBJ filter] [START_TIME time] "
                "[BATCH n] [MAX_BYTES n]",
                "DGET key SUBJECT subject"],
        summary="JetStream direct get (ADR-31): one message map (null when none matches), or with "
                "BATCH message maps then an end-of-batch map.",
        complexity="O(log n) per subject; batches O(messages + log n).",
    ),
    command(
        "mlast", jetstream.mlast, arity=-3, flags=READONLY, acl="@stream", keys=ONE_KEY, group=GROUP,
        syntax="MLAST key [UP_TO_SEQ n] [UP_TO_TIME time] [SEQ n] [BATCH n] [MAX_BYTES n] "
               "SUBJECTS filter [filter ...]",
        summary="JetStream multi-last get (ADR-31): the newest message of every subject matching "
                "the filters, then an end-of-batch map.",
        complexity="O(log n) per subject under the filters' literal prefixes.",
    ),
    command(
        "batch", jetstream.batch, arity=-5, flags=WRITE | DENYOOM | FAST, acl="@stream", keys=ONE_KEY,
        group=GROUP, run=ingest.batch_run, run_words=(9,),
        syntax=["BATCH key batch-id batch-seq subject data [EXPECT_LAST_SEQ n] "
                "[EXPECT_LAST_SUBJECT_SEQ n] [MSGID id] [COMMIT]",
                "BATCH key batch-id batch-seq EOB",
                "BATCH key batch-id batch-seq subject data FAST flow ok|fail [EXPECT_LAST_SEQ n] "
                "[EXPECT_LAST_SUBJECT_SEQ n] [MSGID id] [COMMIT]",
                "BATCH key batch-id batch-seq FAST flow ok|fail EOB|PING"],
        summary="Atomic batch publish (JetStream ADR-50): stages a message; COMMIT or EOB appends "
                "every staged message at once and replies the pub ack. With FAST, fast-ingest: each "
                "message is appended as it arrives, a flow ack every ack_msgs messages.",
        complexity="O(1) per message; an atomic commit O(messages).",
    ),
]
