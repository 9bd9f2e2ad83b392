"""Config records and their JSON form: camelCase names, checked types, defaults kept."""

from __future__ import annotations

import pytest

from storage.config_records import (
    SubscriptionGroupConfig,
    TopicConfig,
    camel,
    decode_record,
    record_to_json,
)


def test_a_record_round_trips_through_its_camel_case_json() -> None:
    config = TopicConfig("Orders", read_queue_nums=4, write_queue_nums=2, order=True)
    as_json = record_to_json(config)
    assert as_json["readQueueNums"] == 4 and as_json["topicName"] == "Orders"
    assert decode_record(TopicConfig("Orders"), as_json, "put") == config
    assert camel("which_broker_when_consume_slowly") == "whichBrokerWhenConsumeSlowly"


def test_missing_fields_keep_their_defaults_and_wrong_types_are_named() -> None:
    group = decode_record(SubscriptionGroupConfig("g"), {"retryMaxTimes": 3}, "g")
    assert group == SubscriptionGroupConfig("g", retry_max_times=3)
    with pytest.raises(ValueError, match=r"g\.consumeEnable"):
        decode_record(SubscriptionGroupConfig("g"), {"consumeEnable": "yes"}, "g")
