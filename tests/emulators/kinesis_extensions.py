"""Kinesis as AWS behaves, where moto differs, plus faults injected at the emulator boundary.

Resharding, as on AWS:

* SplitShard and MergeShards close the parents and leave their records where they are; moto
  re-puts a split parent's records and copies merged parents' records into the child, which
  would deliver every such record twice.
* New records go to the open shard whose hash key range holds the key; moto also considers
  closed shards.
* GetRecords on a closed shard read to its end answers a null ``NextShardIterator`` and the
  ``ChildShards``; moto keeps handing out iterators and never names the children.

Faults (see faults.py), from the file named by ``MOTO_FAULTS_FILE``: ``{"operation": "GetRecords",
"stream": "s", "error": "ExpiredIteratorException", "skip": 1, "times": 2}`` fails calls of that
Kinesis operation on that stream with that AWS error code; a DynamoDB UpdateItem fault can kill
the calling process, as a worker dying in the middle of a checkpoint. ``{"operation": "GetRecords",
"stream": "s", "hold_while": PATH}`` holds each GetRecords call on that stream while the file PATH
exists (ten minutes at most): a reader kept at work until the test lets it go.

Read limits, as AWS enforces them and moto does not: with ``{"operation": "GetRecords", "stream":
"s", "read_limits": true}`` each shard of that stream serves at most 5 GetRecords calls per second
(a bucket of one second's calls) and 2 MiB of records (data and partition keys) per second: a call
that arrives while the bytes served so far are not yet paid back at that rate (10 MiB: for the
next 5 seconds) fails with ProvisionedThroughputExceededException, which is recorded with the
served faults as ``{"operation": "GetRecords", "stream": "s", "shard": id, "throttled": "calls"}``
(or ``"bytes"``).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.dynamodb.responses import DynamoHandler
from moto.kinesis.models import KinesisBackend, Shard, Stream
from moto.kinesis.responses import KinesisResponse
from moto.kinesis.utils import decompose_shard_iterator

from tests.emulators.faults import FaultFile, kill_process

FAULTS = FaultFile("MOTO_FAULTS_FILE")
_installed = False


# -- resharding -------------------------------------------------------------------------------


def _open_shard_for_key(self: Stream, partition_key: str, explicit_hash_key: str) -> Shard | None:
    from moto.kinesis.exceptions import InvalidArgumentError
    from moto.utilities.utils import md5_hash

    if not isinstance(partition_key, str) or len(partition_key) > 256:
        raise InvalidArgumentError("partition_key")
    key = int(explicit_hash_key) if explicit_hash_key else int(md5_hash(partition_key.encode()).hexdigest(), 16)
    if key >= 2**128:
        raise InvalidArgumentError("explicit_hash_key")
    for shard in self.shards.values():
        if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
            return shard
    return None


def _keeping_records(original: Any) -> Any:
    """Run moto's split/merge, then give the parents their own records back, and children none."""

    def reshard(self: Stream, *args: Any) -> None:
        before = {shard_id: (shard, OrderedDict(shard.records)) for shard_id, shard in self.shards.items()}
        original(self, *args)
        for shard_id, shard in self.shards.items():
            if shard_id in before:
                shard.records = before[shard_id][1]
            else:
                shard.records = OrderedDict()

    return reshard


def _children(stream: Stream, shard_id: str) -> list[dict[str, Any]]:
    children = []
    for shard in stream.shards.values():
        if shard_id in (shard.parent, shard.adjacent_parent):
            parents = [p for p in (shard.parent, shard.adjacent_parent) if p]
            children.append(
                {
                    "ShardId": shard.shard_id,
                    "ParentShards": parents,
                    "HashKeyRange": {
                        "StartingHashKey": str(shard.starting_hash),
                        "EndingHashKey": str(shard.ending_hash),
                    },
                }
            )
    return children


# -- faults -----------------------------------------------------------------------------------


def _faults() -> list[dict[str, Any]]:
    return FAULTS.faults()


def _maybe_fail(operation: str, stream_name: str) -> None:
    fault = FAULTS.fire(
        lambda f: f["operation"] == operation and f.get("stream", stream_name) == stream_name and "error" in f
    )
    if fault is not None:
        raise JsonRESTError(fault["error"], f"injected {fault['error']} for {operation} on {stream_name}")


def _hold(operation: str, stream_name: str) -> None:
    gates = [
        Path(f["hold_while"])
        for f in _faults()
        if f["operation"] == operation and f.get("stream") == stream_name and "hold_while" in f
    ]
    deadline = time.monotonic() + 600
    while any(gate.exists() for gate in gates) and time.monotonic() < deadline:
        time.sleep(0.1)


def _moto_shard_end(stream_name: str) -> bool:
    """A fault ``{"operation": "GetRecords", "stream": s, "shard_end": "moto"}`` keeps moto's own
    behaviour at a closed shard's end (an iterator forever, no children) for that stream."""
    return any(
        f["operation"] == "GetRecords" and f.get("stream") == stream_name and f.get("shard_end") == "moto"
        for f in _faults()
    )


def _dynamodb_update_item(original: Any) -> Any:
    """``{"operation": "DynamoDB.UpdateItem", "contains": "...", "action": "kill", "pid": N}``: when an
    UpdateItem whose body contains the text arrives, SIGKILL process N (and its children) first;
    with ``"error": "Code"`` instead of an action, fail that UpdateItem with that AWS error.
    ``"contains_all": [...]`` instead of ``contains``: the body contains each text."""

    def update_item(self: Any) -> Any:
        body = self.body if isinstance(self.body, str) else str(self.body)
        fault = FAULTS.fire(
            lambda f: (
                f["operation"] == "DynamoDB.UpdateItem"
                and all(text in body for text in f.get("contains_all", [f.get("contains", "")]))
            )
        )
        if fault is not None:
            if "error" in fault:
                raise JsonRESTError(fault["error"], f"injected {fault['error']} for UpdateItem")
            kill_process(int(fault["pid"]))
            raise JsonRESTError("InternalServerError", "the caller was killed while writing")
        return original(self)

    return update_item


def _dynamodb_kill(operation: str, original: Any) -> Any:
    """``{"operation": "DynamoDB.DeleteTable", "contains": "...", "action": "kill", "pid": N}`` (or
    ``DynamoDB.PutItem``): when such a request whose body contains the text arrives, SIGKILL
    process N (and its children) before it is carried out, as a worker dying right before it."""

    def call(self: Any) -> Any:
        body = self.body if isinstance(self.body, str) else str(self.body)
        fault = FAULTS.fire(lambda f: f["operation"] == operation and f.get("contains", "") in body)
        if fault is not None:
            kill_process(int(fault["pid"]))
            raise JsonRESTError("InternalServerError", "the caller was killed")
        return original(self)

    return call


# -- a shard's read limits --------------------------------------------------------------------

SHARD_READ_CALLS_PER_SECOND = 5.0
SHARD_READ_BYTES_PER_SECOND = float(2 * 1024 * 1024)


@dataclass
class _ShardReads:
    """One shard's read budget: calls left in a bucket of one second's calls, bytes served but not paid back."""

    calls: float
    unpaid_bytes: float
    at: float

    def catch_up(self, now: float) -> None:
        elapsed = max(0.0, now - self.at)
        self.calls = min(SHARD_READ_CALLS_PER_SECOND, self.calls + elapsed * SHARD_READ_CALLS_PER_SECOND)
        self.unpaid_bytes = max(0.0, self.unpaid_bytes - elapsed * SHARD_READ_BYTES_PER_SECOND)
        self.at = max(self.at, now)


_SHARD_READS: dict[tuple[str, str], _ShardReads] = {}
_SHARD_READS_LOCK = threading.Lock()


def _read_limits(stream_name: str) -> bool:
    return any(
        f["operation"] == "GetRecords" and f.get("stream") == stream_name and f.get("read_limits") is True
        for f in _faults()
    )


def _admit_read(stream_name: str, shard_id: str) -> None:
    """Take a call from the shard's budget, or fail it as AWS does when the shard is over its limits."""
    with _SHARD_READS_LOCK:
        now = time.monotonic()
        reads = _SHARD_READS.setdefault((stream_name, shard_id), _ShardReads(SHARD_READ_CALLS_PER_SECOND, 0.0, now))
        reads.catch_up(now)
        over = "bytes" if reads.unpaid_bytes > 0 else "calls" if reads.calls < 1 else None
        if over is None:
            reads.calls -= 1
            return
    FAULTS.record({"operation": "GetRecords", "stream": stream_name, "shard": shard_id, "throttled": over})
    raise JsonRESTError(
        "ProvisionedThroughputExceededException",
        f"Rate exceeded for shard {shard_id} in stream {stream_name} ({over} per second).",
    )


def _charge_read(stream_name: str, shard_id: str, records: list[dict[str, Any]]) -> None:
    size = sum(len(r["Data"]) + len(r["PartitionKey"].encode()) for r in records)
    with _SHARD_READS_LOCK:
        reads = _SHARD_READS[(stream_name, shard_id)]
        reads.catch_up(time.monotonic())
        reads.unpaid_bytes += size


def _stream_of_iterator(response: KinesisResponse) -> tuple[str, str, str]:
    stream_name, shard_id, last_sequence_id = decompose_shard_iterator(response._get_param("ShardIterator"))
    return stream_name, shard_id, last_sequence_id


def _get_records(self: KinesisResponse) -> ActionResult:
    stream_name, shard_id, _ = _stream_of_iterator(self)
    _hold("GetRecords", stream_name)
    _maybe_fail("GetRecords", stream_name)
    limited = _read_limits(stream_name)
    if limited:
        _admit_read(stream_name, shard_id)
    limit = self._get_param("Limit")
    backend: KinesisBackend = self.kinesis_backend
    next_iterator, records, millis_behind = backend.get_records(
        self._get_param("StreamARN"), self._get_param("ShardIterator"), limit
    )
    body: dict[str, Any] = {
        "NextShardIterator": next_iterator,
        "Records": [record.to_json() for record in records],
        "MillisBehindLatest": millis_behind,
    }
    if limited:
        _charge_read(stream_name, shard_id, body["Records"])
    stream = backend.describe_stream(stream_arn=None, stream_name=stream_name)
    shard = stream.get_shard(shard_id)
    _, _, position = decompose_shard_iterator(next_iterator)
    if not shard.is_open and int(position) >= shard.get_max_sequence_number() and not _moto_shard_end(stream_name):
        # A closed shard read to its end: AWS ends the iteration and names the children.
        body["NextShardIterator"] = None
        body["ChildShards"] = _children(stream, shard_id)
        body["MillisBehindLatest"] = 0
    return ActionResult(body)


def _with_fault(operation: str, original: Any) -> Any:
    def call(self: KinesisResponse) -> Any:
        _maybe_fail(operation, self._get_param("StreamName") or str(self._get_param("StreamARN", "")).split("/")[-1])
        return original(self)

    return call


def _max_sequence_number(self: Shard) -> int:
    # moto lists every record of the shard to find the last one, on every put.
    return next(reversed(self.records), 0)


def install() -> None:
    """Patch moto's Kinesis model and responses; idempotent."""
    global _installed
    if _installed:
        return
    Shard.get_max_sequence_number = _max_sequence_number  # type: ignore[method-assign]
    Stream.get_shard_for_key = _open_shard_for_key  # type: ignore[method-assign]
    Stream.split_shard = _keeping_records(Stream.split_shard)  # type: ignore[method-assign]
    Stream.merge_shards = _keeping_records(Stream.merge_shards)  # type: ignore[method-assign]
    KinesisResponse.get_records = _get_records  # type: ignore[method-assign]
    KinesisResponse.get_shard_iterator = _with_fault(  # type: ignore[method-assign]
        "GetShardIterator", KinesisResponse.get_shard_iterator
    )
    KinesisResponse.list_shards = _with_fault("ListShards", KinesisResponse.list_shards)  # type: ignore[method-assign]
    DynamoHandler.update_item = _dynamodb_update_item(DynamoHandler.update_item)  # type: ignore[method-assign]
    DynamoHandler.delete_table = _dynamodb_kill("DynamoDB.DeleteTable", DynamoHandler.delete_table)  # type: ignore[method-assign]
    DynamoHandler.put_item = _dynamodb_kill("DynamoDB.PutItem", DynamoHandler.put_item)  # type: ignore[method-assign]
    _installed = True
