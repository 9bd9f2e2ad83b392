"""message: the values every layer shares."""

from __future__ import annotations

from storage.record.decode import decode_record
from storage.record.message import PutResult
from storage.record.msg_id import encode_msg_id
from tests.storage.record.golden import KEYS, golden_record


def test_stored_message_msg_id_uses_store_host_and_physical_offset() -> None:
    stored = decode_record(golden_record())
    assert stored.msg_id == encode_msg_id("192.168.1.2", 10911, 4096)


def test_stored_message_reads_tags_keys_and_uniq_key_from_its_properties() -> None:
    stored = decode_record(golden_record())
    assert (stored.tags, stored.keys, stored.uniq_key) == ("TAG1", [KEYS], None)
    stored.properties = {"KEYS": " a  b ", "UNIQ_KEY": "U"}
    assert (stored.tags, stored.keys, stored.uniq_key) == (None, ["a", "b"], "U")


def test_a_put_result_ends_where_its_record_ends() -> None:
    result = PutResult("id", "T", 0, 7, physical_offset=4096, size=158, store_timestamp=1)
    assert result.end_offset == 4096 + 158
