"""DynamoDB Streams as AWS behaves, where moto differs, and the controls a test uses to make it so.

moto serves a table's stream as one shard that never closes, keeps every record forever, stamps
records with microsecond times and never says a removal was made by time to live. Here, as on AWS:

* **Shards close and get children.** A test *rolls* a table's stream: the open shard gets an
  ``EndingSequenceNumber`` and a new shard, whose ``ParentShardId`` names it, takes the later
  records. Sequence numbers keep increasing across shards. Shard ids are unique and sort in the
  order the shards opened. GetRecords on a closed shard read past its last record answers no
  ``NextShardIterator``.
* **DescribeStream pages** with ``Limit`` (default 100) and ``ExclusiveStartShardId``, answering
  ``LastEvaluatedShardId`` while more shards follow; it lists closed shards as well as the open one.
* **Trimming.** A test trims the records created before a time (each shard's), or one shard's
  records before a sequence number. TRIM_HORIZON then starts at the first record kept, and
  GetShardIterator (AT/AFTER_SEQUENCE_NUMBER) or GetRecords whose first position to read was
  trimmed answers ``TrimmedDataAccessException``. Trimmed shards stay listed until a test
  *removes* a closed one, as AWS deletes a shard whose records all passed the retention: it leaves
  DescribeStream and GetShardIterator on it answers ``ResourceNotFoundException``.
* **Times.** ``ApproximateCreationDateTime`` is rounded down to the second, as AWS documents.
* **TTL removals.** A test expires an item: it is deleted and its REMOVE record carries
  ``userIdentity: {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}``.

**Controls.** The moto server answers four extra DynamoDB Streams actions (JSON over HTTP, the
``X-Amz-Target`` header ``DynamoDBStreams_20120810.<Action>``); the functions below send them:

* :func:`roll_shard` (``EmulatorRollShard {"TableName"}``) -> ``{"ClosedShardId", "ChildShardId"}``;
* :func:`trim` (``EmulatorTrim {"TableName", "Before": epoch seconds}`` or ``{"TableName",
  "ShardId", "SequenceNumber"}``: trim records with a smaller sequence number);
* :func:`expire_item` (``EmulatorExpireItem {"TableName", "Key"}``) -> ``{"Deleted": bool}``;
* :func:`remove_shard` (``EmulatorRemoveShard {"TableName", "ShardId"}``): a closed shard leaves the stream.

**Faults**, from the faults file (``MOTO_FAULTS_FILE``, shared with kinesis_extensions):
``{"operation": "DynamoDBStreams.GetRecords", "table": "t", "error": "LimitExceededException",
"skip": 0, "times": 2}`` fails calls of that operation (also ``DynamoDBStreams.GetShardIterator``
and ``DynamoDBStreams.DescribeStream``) on that table's stream with that AWS error code, e.g.
``ExpiredIteratorException`` as an iterator older than 15 minutes answers.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.table import StreamRecord, StreamShard, Table
from moto.dynamodbstreams.models import DynamoDBStreamsBackend, ShardIterator
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

from tests.emulators.kinesis_extensions import FAULTS

# As the DynamoDB Streams API names its fields (a Lambda event spells them type, principalId).
TTL_IDENTITY = {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}
# Sequence numbers a closed shard leaves unused before its child's first one.
SEQUENCE_GAP = 1000
DESCRIBE_STREAM_LIMIT = 100
TARGET_PREFIX = "DynamoDBStreams_20120810"

_installed = False
_ids = itertools.count()
_id_lock = threading.Lock()
_last_id_millis = 0


# -- the model ---------------------------------------------------------------------------------


def _new_shard_id() -> str:
    """``shardId-<20 digits>-<8 hex>`` as AWS names them, increasing in the order shards open."""
    global _last_id_millis
    with _id_lock:
        _last_id_millis = max(_last_id_millis + 1, int(time.time() * 1000))
        return f"shardId-{_last_id_millis:020d}-{next(_ids):08x}"


def _shard_init(original: Any) -> Any:
    def init(self: Any, account_id: str, table: Table) -> None:
        original(self, account_id, table)
        self.id = _new_shard_id()
        self.parent_id = None
        self.ending_sequence_number = None
        self.trimmed_before = self.starting_sequence_number

    return init


def _shard_to_json(self: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "ShardId": self.id,
        "SequenceNumberRange": {"StartingSequenceNumber": str(self.starting_sequence_number)},
    }
    if self.ending_sequence_number is not None:
        data["SequenceNumberRange"]["EndingSequenceNumber"] = str(self.ending_sequence_number)
    if self.parent_id is not None:
        data["ParentShardId"] = self.parent_id
    return data


def _record_init(original: Any) -> Any:
    def init(self: StreamRecord, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        created: datetime = self.record["dynamodb"]["ApproximateCreationDateTime"]
        self.record["dynamodb"]["ApproximateCreationDateTime"] = created.replace(microsecond=0)

    return init


def shards_of(table: Any) -> list[Any]:
    """The table's stream shards, closed ones first, in the order they opened."""
    closed: list[Any] = getattr(table, "closed_stream_shards", [])
    return [*closed, *([table.stream_shard] if table.stream_shard is not None else [])]


def _last_sequence(shard: Any) -> int:
    return shard.starting_sequence_number + len(shard.items) - 1


def _shard(table: Table, shard_id: str) -> Any:
    for shard in shards_of(table):
        if shard.id == shard_id:
            return shard
    raise JsonRESTError("ResourceNotFoundException", f"shard {shard_id} not found in the stream of {table.name}")


def _trimmed(shard: Any, table: Any, position: int) -> JsonRESTError:
    return JsonRESTError(
        "TrimmedDataAccessException",
        f"position {position} of shard {shard.id} of the stream of {table.name} is beyond the trim horizon "
        f"(records before {shard.trimmed_before} were trimmed)",
    )


def _get_shard_iterator(
    self: DynamoDBStreamsBackend, arn: str, shard_id: str, shard_iterator_type: str, sequence_number: Any = None
) -> ShardIterator:
    table = self._get_table_from_arn(arn)
    shard = _shard(table, shard_id)
    iterator = ShardIterator(self, shard, shard_iterator_type, sequence_number)
    if shard_iterator_type == "TRIM_HORIZON":
        iterator.sequence_number = max(iterator.sequence_number, shard.trimmed_before)
    elif iterator.sequence_number < shard.trimmed_before:
        raise _trimmed(shard, table, iterator.sequence_number)
    self.shard_iterators[iterator.arn] = iterator
    return iterator


def _iterator_get(self: ShardIterator, limit: int = 1000) -> dict[str, Any]:
    shard: Any = self.stream_shard
    if self.sequence_number < shard.trimmed_before:
        raise _trimmed(shard, shard.table, self.sequence_number)
    result: dict[str, Any] = _original_get(self, limit)
    if shard.ending_sequence_number is not None:
        next_position = self.sequence_number + len(result["Records"])
        if next_position > shard.ending_sequence_number:
            # A closed shard read to its end: AWS ends the iteration.
            del result["NextShardIterator"]
    return result


_original_get = ShardIterator.get


# -- the controls ------------------------------------------------------------------------------


def _table(handler: DynamoDBStreamsHandler, name: str) -> Any:
    table: Any = dynamodb_backends[handler.current_account][handler.region].get_table(name)
    if table.stream_shard is None:
        raise JsonRESTError("ValidationException", f"table {name} has no stream")
    return table


def _roll_shard(self: DynamoDBStreamsHandler) -> str:
    table = _table(self, self._get_param("TableName"))
    old: Any = table.stream_shard
    old.ending_sequence_number = max(old.starting_sequence_number, _last_sequence(old))
    child: Any = StreamShard(self.current_account, table)
    child.starting_sequence_number = old.ending_sequence_number + SEQUENCE_GAP
    child.trimmed_before = child.starting_sequence_number
    child.parent_id = old.id
    table.closed_stream_shards = [*getattr(table, "closed_stream_shards", []), old]
    table.stream_shard = child
    return json.dumps({"ClosedShardId": old.id, "ChildShardId": child.id})


def _trim(self: DynamoDBStreamsHandler) -> str:
    table = _table(self, self._get_param("TableName"))
    before = self._get_param("Before")
    if before is not None:
        for shard in shards_of(table):
            for offset, item in enumerate(shard.items):
                created: datetime = item.record["dynamodb"]["ApproximateCreationDateTime"]
                if created.replace(tzinfo=UTC).timestamp() >= float(before):  # moto's times are naive UTC
                    break
                shard.trimmed_before = max(shard.trimmed_before, shard.starting_sequence_number + offset + 1)
    else:
        shard = _shard(table, self._get_param("ShardId"))
        shard.trimmed_before = max(shard.trimmed_before, int(self._get_param("SequenceNumber")))
    return json.dumps({"Shards": {s.id: str(s.trimmed_before) for s in shards_of(table)}})


def _remove_shard(self: DynamoDBStreamsHandler) -> str:
    table = _table(self, self._get_param("TableName"))
    shard = _shard(table, self._get_param("ShardId"))
    if shard.ending_sequence_number is None:
        raise JsonRESTError("ValidationException", f"shard {shard.id} is open: only a closed shard leaves the stream")
    table.closed_stream_shards = [s for s in table.closed_stream_shards if s is not shard]
    return json.dumps({"RemovedShardId": shard.id})


def _expire_item(self: DynamoDBStreamsHandler) -> str:
    name = self._get_param("TableName")
    table = _table(self, name)
    backend = dynamodb_backends[self.current_account][self.region]
    hash_value, range_value = backend.get_keys_value(table, self._get_param("Key"))
    shard: Any = table.stream_shard
    before = len(shard.items)
    deleted = table.delete_item(hash_value, range_value) is not None
    if deleted and len(shard.items) > before:
        shard.items[-1].record["userIdentity"] = dict(TTL_IDENTITY)
    return json.dumps({"Deleted": deleted})


# -- faults ------------------------------------------------------------------------------------


def _maybe_fail(operation: str, table_name: str) -> None:
    fault = FAULTS.fire(
        lambda f: f["operation"] == operation and f.get("table", table_name) == table_name and "error" in f
    )
    if fault is not None:
        raise JsonRESTError(fault["error"], f"injected {fault['error']} for {operation} on {table_name}")


def _table_of_arn(arn: str) -> str:
    return str(arn).split(":", 6)[5].split("/")[1]


def _describe_stream(self: DynamoDBStreamsHandler) -> ActionResult:
    arn = self._get_param("StreamArn")
    _maybe_fail("DynamoDBStreams.DescribeStream", _table_of_arn(arn))
    description = self.backend.describe_stream(arn)
    table = self.backend._get_table_from_arn(arn)
    shards = [s.to_json() for s in shards_of(table)]
    start = self._get_param("ExclusiveStartShardId")
    if start is not None:
        ids = [s["ShardId"] for s in shards]
        shards = shards[ids.index(start) + 1 :] if start in ids else []
    limit = int(self._get_param("Limit") or DESCRIBE_STREAM_LIMIT)
    description["Shards"] = shards[:limit]
    if len(shards) > limit:
        description["LastEvaluatedShardId"] = shards[limit - 1]["ShardId"]
    return ActionResult({"StreamDescription": description})


def _with_fault(operation: str, original: Any, table_name: Any) -> Any:
    def call(self: DynamoDBStreamsHandler) -> Any:
        _maybe_fail(operation, table_name(self))
        return original(self)

    return call


def _iterator_table(self: DynamoDBStreamsHandler) -> str:
    iterator = self.backend.shard_iterators.get(self._get_param("ShardIterator"))
    return "" if iterator is None else str(iterator.stream_shard.table.name)


def install() -> None:
    """Patch moto's DynamoDB Streams model and responses; idempotent."""
    global _installed
    if _installed:
        return
    StreamShard.__init__ = _shard_init(StreamShard.__init__)  # type: ignore[method-assign]
    StreamShard.to_json = _shard_to_json  # type: ignore[method-assign]
    StreamRecord.__init__ = _record_init(StreamRecord.__init__)  # type: ignore[method-assign]
    ShardIterator.get = _iterator_get  # type: ignore[method-assign]
    DynamoDBStreamsBackend.get_shard_iterator = _get_shard_iterator  # type: ignore[method-assign]
    DynamoDBStreamsHandler.describe_stream = _describe_stream  # type: ignore[method-assign]
    DynamoDBStreamsHandler.get_shard_iterator = _with_fault(  # type: ignore[method-assign]
        "DynamoDBStreams.GetShardIterator",
        DynamoDBStreamsHandler.get_shard_iterator,
        lambda h: _table_of_arn(h._get_param("StreamArn")),
    )
    DynamoDBStreamsHandler.get_records = _with_fault(  # type: ignore[method-assign]
        "DynamoDBStreams.GetRecords", DynamoDBStreamsHandler.get_records, _iterator_table
    )
    DynamoDBStreamsHandler.emulator_roll_shard = _roll_shard  # type: ignore[attr-defined]
    DynamoDBStreamsHandler.emulator_trim = _trim  # type: ignore[attr-defined]
    DynamoDBStreamsHandler.emulator_expire_item = _expire_item  # type: ignore[attr-defined]
    DynamoDBStreamsHandler.emulator_remove_shard = _remove_shard  # type: ignore[attr-defined]
    _installed = True


# -- what a test calls -------------------------------------------------------------------------


def _control(endpoint: str, action: str, body: dict[str, Any], region: str = "us-east-1") -> dict[str, Any]:
    request = urllib.request.Request(
        endpoint,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"{TARGET_PREFIX}.{action}",
            # moto takes the region (and nothing else) from the credential scope.
            "Authorization": f"AWS4-HMAC-SHA256 Credential=testing/20240101/{region}/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def roll_shard(endpoint: str, table: str) -> tuple[str, str]:
    """Close the table's open stream shard and open its child: (closed shard id, child shard id)."""
    answer = _control(endpoint, "EmulatorRollShard", {"TableName": table})
    return answer["ClosedShardId"], answer["ChildShardId"]


def trim(
    endpoint: str,
    table: str,
    *,
    before: datetime | None = None,
    shard_id: str | None = None,
    sequence_number: str | None = None,
) -> dict[str, str]:
    """Trim the records created before ``before``, or ``shard_id``'s records before ``sequence_number``.

    Answers each shard's first sequence number kept.
    """
    body: dict[str, Any] = {"TableName": table}
    if before is not None:
        body["Before"] = before.timestamp()
    else:
        body.update(ShardId=shard_id, SequenceNumber=sequence_number)
    shards: dict[str, str] = _control(endpoint, "EmulatorTrim", body)["Shards"]
    return shards


def expire_item(endpoint: str, table: str, key: dict[str, Any]) -> bool:
    """Delete the item with ``key`` (wire format) as time to live does; False if there was none."""
    return bool(_control(endpoint, "EmulatorExpireItem", {"TableName": table, "Key": key})["Deleted"])


def remove_shard(endpoint: str, table: str, shard_id: str) -> None:
    """Remove the closed shard ``shard_id`` from the table's stream, as AWS does past the retention."""
    _control(endpoint, "EmulatorRemoveShard", {"TableName": table, "ShardId": shard_id})
