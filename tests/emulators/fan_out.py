"""SubscribeToShard (enhanced fan-out), which moto lacks, served as AWS serves it.

The answer is an AWS event stream (``application/vnd.amazon.eventstream``): an ``initial-response``
event, then ``SubscribeToShardEvent`` events with the shard's records (Data, SequenceNumber,
ApproximateArrivalTimestamp, PartitionKey), a ``ContinuationSequenceNumber`` (the last record
delivered) and ``MillisBehindLatest``. Events are framed by moto's own event-stream serializer and
encoder and streamed while the subscription lasts: records put meanwhile are pushed, and a
caught-up subscription sends an empty event with ``MillisBehindLatest`` 0 now and then. A closed
shard read to its end gets a last event naming its ``ChildShards`` without a continuation.

AWS ends a subscription after 5 minutes; here a fault-file entry without an ``error`` sets when,
per stream, so that a test sees readers subscribe again::

    {"operation": "SubscribeToShard", "stream": "s", "events_per_subscription": 2,
     "records_per_event": 3, "seconds_per_subscription": 300, "heartbeat_seconds": 0.5}

Entries with an ``error`` fail the call like the GetRecords faults (``ResourceInUseException``
when another subscription holds the shard); ``{"operation": "SubscribeToShard", "stream": "s",
"drop_after_events": 1}`` cuts the connection of a subscription after that many events, as a
network failure would. An unknown consumer ARN or shard is ``ResourceNotFoundException``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from moto.core.eventstream import EventStream, EventStreamEncoder
from moto.core.exceptions import JsonRESTError
from moto.core.serialize import JSONSerializer
from moto.core.utils import get_service_model
from moto.kinesis.models import Consumer, KinesisBackend, Shard, Stream
from moto.kinesis.responses import KinesisResponse

from tests.emulators.kinesis_extensions import FAULTS, _children, _maybe_fail

OPERATION = "SubscribeToShard"
DEFAULTS: dict[str, float | None] = {
    "events_per_subscription": None,
    "records_per_event": 1000,
    "seconds_per_subscription": 300.0,
    "heartbeat_seconds": 1.0,
}
# How often a caught-up subscription looks for new records.
POLL_SECONDS = 0.05
_installed = False


def _settings(stream_name: str) -> dict[str, float | None]:
    for fault in FAULTS.faults():
        if (
            fault["operation"] == OPERATION
            and "error" not in fault
            and "drop_after_events" not in fault
            and fault.get("stream", stream_name) == stream_name
        ):
            return {key: fault.get(key, default) for key, default in DEFAULTS.items()}
    return dict(DEFAULTS)


def _consumer(backend: KinesisBackend, consumer_arn: str) -> tuple[Stream, Consumer]:
    for stream in backend.streams.values():
        for consumer in stream.consumers:
            if consumer.consumer_arn == consumer_arn:
                return stream, consumer
    raise JsonRESTError("ResourceNotFoundException", f"Consumer {consumer_arn} not found")


def _first_sequence(shard: Shard, position: dict[str, Any]) -> int:
    """The first sequence number a subscription starting at ``position`` delivers."""
    kind = position.get("Type")
    last = shard.get_max_sequence_number()
    if kind == "AT_SEQUENCE_NUMBER":
        return int(position["SequenceNumber"])
    if kind == "AFTER_SEQUENCE_NUMBER":
        return int(position["SequenceNumber"]) + 1
    if kind == "TRIM_HORIZON":
        return next(iter(shard.records), 1)
    if kind == "LATEST":
        return last + 1
    if kind == "AT_TIMESTAMP":
        at = position["Timestamp"]
        instant = at.timestamp() if isinstance(at, datetime) else float(at)
        return next((seq for seq, record in list(shard.records.items()) if record.created_at >= instant), last + 1)
    raise JsonRESTError("InvalidArgumentException", f"StartingPosition Type {kind!r} is not supported")


class DroppedConnection(Exception):
    """Ends a streamed response without its last chunk: the client sees the connection break."""


def _events(
    stream: Stream, shard: Shard, first: int, settings: dict[str, float | None], drop_after: int | None = None
) -> Iterator[dict[str, Any]]:
    """The subscription's SubscribeToShardEvents, produced as the shard grows, until it ends."""
    per_event = int(settings["records_per_event"] or 1000)
    max_events = settings["events_per_subscription"]
    heartbeat = float(settings["heartbeat_seconds"] or 1.0)
    ends_at = time.monotonic() + float(settings["seconds_per_subscription"] or 300.0)
    following, sent, last_empty = first, 0, float("-inf")
    while (max_events is None or sent < max_events) and time.monotonic() < ends_at:
        if drop_after is not None and sent >= drop_after:
            raise DroppedConnection(f"injected: the subscription to {shard.shard_id} breaks after {sent} events")
        last = shard.get_max_sequence_number()
        # Sequence numbers are per shard and consecutive here; get() keeps a concurrent put harmless.
        records = [
            r
            for r in (shard.records.get(seq) for seq in range(following, min(last, following + per_event - 1) + 1))
            if r
        ]
        if records:
            following = int(records[-1].sequence_number) + 1
            tip = shard.records.get(last)
            behind = 0 if following > last or tip is None else int((tip.created_at - records[-1].created_at) * 1000)
            sent += 1
            yield {
                "SubscribeToShardEvent": {
                    "Records": [record.to_json() for record in records],
                    "ContinuationSequenceNumber": str(following - 1),
                    "MillisBehindLatest": behind,
                }
            }
        elif not shard.is_open:
            # Read to the end of a closed shard: AWS names the children and ends the subscription.
            yield {
                "SubscribeToShardEvent": {
                    "Records": [],
                    "MillisBehindLatest": 0,
                    "ChildShards": _children(stream, shard.shard_id),
                }
            }
            return
        elif time.monotonic() - last_empty >= heartbeat:
            last_empty = time.monotonic()
            sent += 1
            yield {
                "SubscribeToShardEvent": {
                    "Records": [],
                    "ContinuationSequenceNumber": str(following - 1),
                    "MillisBehindLatest": 0,
                }
            }
        else:
            time.sleep(POLL_SECONDS)


def _encoded(events: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    """Each message of the event stream, framed (prelude, headers, payload, CRCs) as it is made."""
    operation = get_service_model("kinesis").operation_model(OPERATION)
    serializer = JSONSerializer(operation)._event_stream_serializer
    assert serializer is not None
    encoder = EventStreamEncoder()
    for message in EventStream({"EventStream": events}, operation.output_shape, serializer):
        yield encoder.encode_event(message)


def _subscribe_to_shard(self: KinesisResponse) -> tuple[int, dict[str, str], Iterator[bytes]]:
    backend: KinesisBackend = self.kinesis_backend
    stream, _ = _consumer(backend, self._get_param("ConsumerARN"))
    _maybe_fail(OPERATION, stream.stream_name)
    shard_id = self._get_param("ShardId")
    shard = stream.shards.get(shard_id)
    if shard is None:
        raise JsonRESTError("ResourceNotFoundException", f"Shard {shard_id} in stream {stream.stream_name} not found")
    first = _first_sequence(shard, self._get_param("StartingPosition") or {})
    drop = FAULTS.fire(
        lambda f: (
            f["operation"] == OPERATION
            and "drop_after_events" in f
            and f.get("stream", stream.stream_name) == stream.stream_name
        )
    )
    drop_after = int(drop["drop_after_events"]) if drop is not None else None
    events = _events(stream, shard, first, _settings(stream.stream_name), drop_after)
    # A body that is an iterator is streamed by the server, event by event.
    return 200, {"Content-Type": "application/vnd.amazon.eventstream"}, _encoded(events)


def install() -> None:
    """Add SubscribeToShard to moto's Kinesis responses; idempotent."""
    global _installed
    if _installed:
        return
    KinesisResponse.subscribe_to_shard = _subscribe_to_shard  # type: ignore[attr-defined]
    _installed = True
