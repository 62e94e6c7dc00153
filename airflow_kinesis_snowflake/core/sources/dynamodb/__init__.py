"""DynamoDB tables as a source: discovery, a parallel snapshot, DynamoDB Streams, converging changes.

A table is copied once by a parallel Scan (the snapshot, resumable per segment), then followed
through its DynamoDB Stream. Both produce :class:`~.model.ItemChange` values, ordered per item by
:class:`~.model.Version`, so that the destination applies a change only when it is newer than what
it holds: replays, the overlap between the snapshot and the stream, and retries change nothing.
"""
