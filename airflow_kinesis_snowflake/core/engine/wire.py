"""The work a Spark job is given, as one command-line argument: an envelope tagged with its source.

The Airflow worker and the Spark driver share no disk (the driver may run on a cluster node), so
the work travels inside the submission: one batch's plan (``--plan``) or a continuous run
(``--continuous``), each as a :class:`Work` envelope that names the source it belongs to, the kind
of work, the region the driver reaches AWS in, and the source's own body (its plan or run, as the
source's ``to_dict`` writes it). The driver opens the envelope, finds the source's job in the
registry by :attr:`Work.source` and hands it the body (:mod:`.driver`).

The envelope is compact JSON, zlib-compressed and URL-safe base64 encoded; it holds names,
positions and settings only, never a credential.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

# Linux holds one argument to 131,072 bytes (MAX_ARG_STRLEN), and YARN starts a cluster-mode driver
# through ``bash -c "<its whole command>"``: the encoded work leaves room for the rest of that command.
MAX_PLAN_ARGUMENT = 96 * 1024


class WorkKind(StrEnum):
    """What a submission does: one batch, or batches back to back until its run time is up."""

    BATCH = "batch"
    CONTINUOUS = "continuous"


class PlanTooLargeError(ValueError):
    """Encoded work longer than one spark-submit argument may be; nothing was submitted."""


@dataclass(frozen=True)
class Work:
    """One submission's work, tagged with its source.

    :param source: the ``source.type`` whose job runs it (``kinesis``, ``dynamodb``).
    :param kind: one batch, or a continuous run.
    :param region: the AWS region the driver's clients use.
    :param body: the source's plan or run, as its ``to_dict`` writes it.
    """

    source: str
    kind: WorkKind
    region: str
    body: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        envelope = {"source": self.source, "kind": self.kind.value, "region": self.region, "body": self.body}
        return json.dumps(envelope, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Work:
        data = json.loads(text)
        try:
            return cls(data["source"], WorkKind(data["kind"]), data["region"], data["body"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a job's work envelope: {err!r}") from None

    def body_for(self, source: str, kind: WorkKind) -> Mapping[str, Any]:
        """The body, after checking that this is ``kind`` work of ``source``.

        :raises ValueError: it is another source's, or another kind of work.
        """
        if (self.source, self.kind) != (source, kind):
            raise ValueError(
                f"expected {kind.value} work of source {source!r}, got {self.kind.value} work of {self.source!r}"
            )
        return self.body


class Submittable(Protocol):
    """A source's plan or continuous run: what it sends as a job's work."""

    def work(self) -> Work:
        """The envelope of this plan or run."""
        ...

    def too_large(self, length: int, limit: int) -> str:
        """Why an encoding of ``length`` characters (more than ``limit``) cannot be sent, and what to lower."""
        ...


def encode(item: Submittable, limit: int = MAX_PLAN_ARGUMENT) -> str:
    """``item``'s work as one command-line argument.

    :param limit: the longest argument accepted, in characters.
    :raises PlanTooLargeError: the encoded work is longer than ``limit``; the message is the item's
        :meth:`~Submittable.too_large`, which names the setting to lower.
    """
    text = base64.urlsafe_b64encode(zlib.compress(item.work().to_json().encode(), 9)).decode("ascii")
    if len(text) > limit:
        raise PlanTooLargeError(f"{item.too_large(len(text), limit)}; nothing was submitted")
    return text


def decode(text: str) -> Work:
    """The work :func:`encode` encoded.

    :raises ValueError: ``text`` is not encoded work.
    """
    try:
        data = zlib.decompress(base64.urlsafe_b64decode(text.encode("ascii")))
    except (binascii.Error, zlib.error, UnicodeEncodeError) as err:
        raise ValueError(f"not a job's encoded work ({len(text)} characters): {err}") from None
    return Work.from_json(data.decode("utf-8"))
