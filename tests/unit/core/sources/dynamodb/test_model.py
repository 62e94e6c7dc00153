"""The order of an item's changes: snapshot items, stream records, snapshots taken again after a gap."""

import pytest

from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, ItemChange, Version

KEYS = {"pk": {"S": "a"}}


def test_a_stream_record_is_newer_than_its_generations_snapshot_item_and_older_than_the_next_snapshot():
    snapshot_item = Version.of_snapshot(0)
    early, late = Version.of_stream(0, "100"), Version.of_stream(0, "9" * 40)
    next_snapshot = Version.of_snapshot(1)
    assert snapshot_item < early < late < next_snapshot < Version.of_stream(1, "1")


def test_the_text_form_sorts_as_the_versions_do_and_reads_back():
    versions = [Version.of_stream(2, "5"), Version.of_snapshot(0), Version.of_stream(0, "40")]
    versions.append(Version.of_stream(0, "5"))
    assert sorted(versions, key=Version.to_text) == sorted(versions)
    assert [Version.from_text(v.to_text()) for v in versions] == versions


@pytest.mark.parametrize(
    ("args", "message"),
    [((-1, 0, 0), "generation"), ((0, 2, 0), "origin"), ((0, 0, 7), "no sequence"), ((0, 1, 10**40), "sequence")],
)
def test_a_version_outside_the_order_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        Version(*args)


def test_a_removal_has_no_image_and_only_a_removal_can_be_a_ttl_expiry():
    version = Version.of_stream(0, "1")
    with pytest.raises(ValueError, match="carries no image"):
        ItemChange("t", KEYS, KEYS, EventName.REMOVE, version)
    with pytest.raises(ValueError, match="new image"):
        ItemChange("t", KEYS, None, EventName.MODIFY, version)
    with pytest.raises(ValueError, match="time-to-live"):
        ItemChange("t", KEYS, KEYS, EventName.INSERT, version, ttl_expiry=True)
    assert ItemChange("t", KEYS, None, EventName.REMOVE, version, ttl_expiry=True).is_removal
