"""The config managers: RocketMQ's file shapes, round trips, defaults and tolerance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from storage.config_managers import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    ConsumerOffsetManager,
    DataVersion,
    DelayOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
    TopicGroup,
)
from storage.json_file import ConfigFileError, backup_path


class FakeClock:
    """A settable ms clock."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def read_file(path: Path) -> object:
    """The file as strict JSON: our writer never relies on the lenient reader."""
    return json.loads(path.read_text(encoding="utf-8"))


def write_file(config_dir: Path, name: str, text: str) -> Path:
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- ConsumerOffsetManager


def offsets(config_dir: Path, clock: FakeClock | None = None) -> ConsumerOffsetManager:
    manager = ConsumerOffsetManager(config_dir, now_ms=clock or FakeClock())
    manager.load()
    return manager


def test_unknown_offset_is_minus_one(config_dir: Path) -> None:
    manager = offsets(config_dir)
    assert manager.query_offset("g", "T", 0) == -1
    assert manager.offsets_of("g", "T") == {}
    assert manager.groups() == []


def test_commit_overwrites_even_with_a_smaller_offset(config_dir: Path) -> None:
    manager = offsets(config_dir)
    manager.commit_offset("g", "T", 0, 12)
    manager.commit_offset("g", "T", 0, 5)
    assert manager.query_offset("g", "T", 0) == 5


def test_offsets_round_trip(config_dir: Path, clock: FakeClock) -> None:
    manager = offsets(config_dir, clock)
    manager.commit_offset("g1", "%RETRY%g1", 0, 3)
    manager.commit_offset("g1", "Topic|a", 2, 40)
    manager.commit_offset("g1", "Topic|a", 0, 12)
    manager.commit_offset("g-2", "Topic|a", 1, 7)
    manager.persist()

    reopened = offsets(config_dir)
    assert reopened.offsets_of("g1", "Topic|a") == {0: 12, 2: 40}
    assert reopened.query_offset("g-2", "Topic|a", 1) == 7
    assert reopened.topic_groups() == manager.topic_groups()
    assert reopened.commit_times_of("g1", "Topic|a") == manager.commit_times_of("g1", "Topic|a")


def test_offset_file_has_rocketmq_shape(config_dir: Path, clock: FakeClock) -> None:
    manager = offsets(config_dir, clock)
    manager.commit_offset("group1", "TopicTest", 1, 3)
    manager.commit_offset("group1", "TopicTest", 0, 6)
    manager.persist()
    assert read_file(config_dir / "consumerOffset.json") == {
        "offsetTable": {"TopicTest@group1": {"0": 6, "1": 3}},
        "commitTimeTable": {"TopicTest@group1": {"0": clock.now, "1": clock.now}},
    }


def test_loads_rocketmq_offset_file_with_unquoted_keys(config_dir: Path) -> None:
    write_file(
        config_dir,
        "consumerOffset.json",
        '{\n\t"offsetTable":{\n\t\t"%RETRY%group1@group1":{0:0},\n'
        '\t\t"TopicTest@group1":{0:6,1:3,2:3,3:2}\n\t}\n}',
    )
    manager = offsets(config_dir)
    assert manager.offsets_of("group1", "TopicTest") == {0: 6, 1: 3, 2: 3, 3: 2}
    assert manager.query_offset("group1", "%RETRY%group1", 0) == 0
    assert manager.commit_times_of("group1", "TopicTest") == {}
    assert manager.groups() == ["group1"]


def test_offset_keys_without_separator_are_skipped(config_dir: Path) -> None:
    write_file(config_dir, "consumerOffset.json", '{"offsetTable":{"junk":{0:1},"T@g":{0:2}}}')
    assert offsets(config_dir).topic_groups() == [TopicGroup("T", "g")]


def test_listing_groups_and_topic_groups(config_dir: Path) -> None:
    manager = offsets(config_dir)
    manager.commit_offset("b", "T2", 0, 1)
    manager.commit_offset("a", "T1", 0, 1)
    manager.commit_offset("b", "T1", 0, 1)
    assert manager.groups() == ["a", "b"]
    assert manager.topic_groups() == [
        TopicGroup("T1", "a"),
        TopicGroup("T1", "b"),
        TopicGroup("T2", "b"),
    ]
    assert manager.topic_groups()[0].key() == "T1@a"


def test_remove_group_and_topic(config_dir: Path) -> None:
    manager = offsets(config_dir)
    manager.commit_offset("a", "T1", 0, 1)
    manager.commit_offset("b", "T1", 0, 2)
    manager.commit_offset("b", "T2", 0, 3)

    assert manager.remove_group("a") is True
    assert manager.remove_group("a") is False
    assert manager.remove_topic("T1") is True
    assert manager.topic_groups() == [TopicGroup("T2", "b")]
    assert manager.commit_times_of("b", "T1") == {}

    manager.persist()
    assert offsets(config_dir).topic_groups() == [TopicGroup("T2", "b")]


@pytest.mark.parametrize(
    ("group", "topic"),
    [
        pytest.param("g@x", "T", id="group"),
        pytest.param("g", "T@x", id="topic"),
        pytest.param("", "T", id="empty"),
    ],
)
def test_names_that_would_break_the_key_are_rejected(
    config_dir: Path, group: str, topic: str
) -> None:
    with pytest.raises(ValueError, match="@"):
        offsets(config_dir).commit_offset(group, topic, 0, 1)


def test_dirty_flag(config_dir: Path) -> None:
    manager = offsets(config_dir)
    assert manager.dirty is False
    assert manager.persist_if_dirty() is False
    assert not (config_dir / "consumerOffset.json").exists()

    manager.commit_offset("g", "T", 0, 1)
    assert manager.dirty is True
    assert manager.persist_if_dirty() is True
    assert manager.dirty is False
    assert manager.persist_if_dirty() is False

    assert manager.remove_group("unknown") is False
    assert manager.dirty is False
    assert manager.remove_topic("T") is True
    assert manager.dirty is True

    manager.load()  # back to the persisted state: clean again
    assert manager.dirty is False
    assert manager.query_offset("g", "T", 0) == 1


def test_failed_persist_stays_dirty(tmp_path: Path) -> None:
    blocker = tmp_path / "config"
    blocker.write_text("a file where the config directory should be", encoding="utf-8")
    manager = ConsumerOffsetManager(blocker)
    manager.commit_offset("g", "T", 0, 1)
    with pytest.raises(OSError):
        manager.persist()
    assert manager.dirty is True


def test_commit_time_table(config_dir: Path, clock: FakeClock) -> None:
    manager = offsets(config_dir, clock)
    manager.commit_offset("g", "T", 0, 1)
    clock.now += 5_000
    manager.commit_offset("g", "T", 1, 1)
    manager.commit_offset("g", "T", 0, 2)
    first_commit = clock.now
    assert manager.commit_times_of("g", "T") == {0: first_commit, 1: first_commit}

    clock.now += 5_000
    manager.commit_offset("g", "T", 1, 9)
    assert manager.commit_times_of("g", "T") == {0: first_commit, 1: clock.now}
    manager.persist()

    reopened = offsets(config_dir, FakeClock(0))
    assert reopened.commit_times_of("g", "T") == {0: first_commit, 1: clock.now}
    stored = read_file(config_dir / "consumerOffset.json")
    assert isinstance(stored, dict)
    assert stored["commitTimeTable"] == {"T@g": {"0": first_commit, "1": clock.now}}


def test_a_pinned_start_is_an_offset_without_a_commit_time(
    config_dir: Path, clock: FakeClock
) -> None:
    manager = offsets(config_dir, clock)
    manager.pin_offset("g", "T", 0, 4)
    manager.pin_offset("g", "T", 1, 0)
    assert manager.offsets_of("g", "T") == {0: 4, 1: 0}
    assert manager.commit_times_of("g", "T") == {}
    manager.commit_offset("g", "T", 1, 3)
    assert manager.commit_times_of("g", "T") == {1: clock.now}
    manager.persist()
    reopened = offsets(config_dir, FakeClock(0))
    assert reopened.offsets_of("g", "T") == {0: 4, 1: 3}
    assert reopened.commit_times_of("g", "T") == {1: clock.now}


def test_offsets_fall_back_to_bak(config_dir: Path) -> None:
    manager = offsets(config_dir)
    manager.commit_offset("g", "T", 0, 1)
    manager.persist()
    manager.commit_offset("g", "T", 0, 2)
    manager.persist()
    (config_dir / "consumerOffset.json").write_bytes(b"\x00" * 64)
    assert offsets(config_dir).query_offset("g", "T", 0) == 1


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[1, 2]", id="top-level-list"),
        pytest.param('{"offsetTable": []}', id="table-list"),
        pytest.param('{"offsetTable": {"T@g": {"0": "twelve"}}}', id="offset-text"),
        pytest.param('{"offsetTable": {"T@g": {"zero": 1}}}', id="queue-id-text"),
        pytest.param('{"offsetTable": {"T@g": {"0": true}}}', id="offset-bool"),
    ],
)
def test_wrong_offset_file_shape_raises_naming_the_file(config_dir: Path, text: str) -> None:
    write_file(config_dir, "consumerOffset.json", text)
    with pytest.raises(ConfigFileError, match=re.escape("consumerOffset.json")):
        offsets(config_dir)


def test_both_files_corrupt_raises(config_dir: Path) -> None:
    path = write_file(config_dir, "consumerOffset.json", "{garbage")
    backup_path(path).write_text("{more garbage", encoding="utf-8")
    with pytest.raises(ConfigFileError, match=re.escape("consumerOffset.json")):
        offsets(config_dir)


# ---------------------------------------------------------------- TopicConfigManager


def topics(config_dir: Path, clock: FakeClock | None = None) -> TopicConfigManager:
    manager = TopicConfigManager(config_dir, now_ms=clock or FakeClock())
    manager.load()
    return manager


def test_fresh_topics_hold_the_schedule_topic(config_dir: Path) -> None:
    manager = topics(config_dir)
    assert manager.all() == [TopicConfig(SCHEDULE_TOPIC, 18, 18, perm=6)]
    schedule = manager.get(SCHEDULE_TOPIC)
    assert schedule is not None
    assert schedule.is_readable
    assert schedule.is_writeable
    assert manager.get("nope") is None


def test_topic_config_defaults() -> None:
    config = TopicConfig("T")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (8, 8, 6)
    assert (config.topic_filter_type, config.topic_sys_flag, config.order) == (
        "SINGLE_TAG",
        0,
        False,
    )


@pytest.mark.parametrize(
    ("perm", "readable", "writeable"),
    [
        pytest.param(0, False, False, id="none"),
        pytest.param(PERM_WRITE, False, True, id="write-only"),
        pytest.param(PERM_READ, True, False, id="read-only"),
        pytest.param(PERM_READ | PERM_WRITE, True, True, id="read-write"),
        pytest.param(PERM_READ | PERM_WRITE | PERM_INHERIT, True, True, id="inherit"),
    ],
)
def test_topic_permissions(perm: int, readable: bool, writeable: bool) -> None:
    config = TopicConfig("T", perm=perm)
    assert (config.is_readable, config.is_writeable) == (readable, writeable)


def test_topic_put_and_delete_persist_and_bump_version(config_dir: Path, clock: FakeClock) -> None:
    manager = topics(config_dir, clock)
    start = manager.data_version
    clock.now += 10
    manager.put(TopicConfig("orders", read_queue_nums=4, write_queue_nums=4, order=True))
    assert manager.data_version == DataVersion(start.counter + 1, clock.now)

    # put persisted on its own: a new manager sees the topic.
    reopened = topics(config_dir)
    assert reopened.get("orders") == TopicConfig("orders", 4, 4, order=True)
    assert reopened.all() == manager.all()
    assert reopened.data_version == manager.data_version

    clock.now += 10
    assert manager.delete("orders") is True
    assert manager.delete("orders") is False
    assert manager.data_version == DataVersion(start.counter + 2, clock.now)
    assert topics(config_dir).get("orders") is None


def test_topics_file_has_rocketmq_shape(config_dir: Path, clock: FakeClock) -> None:
    manager = topics(config_dir, clock)
    manager.put(TopicConfig("T", perm=PERM_READ))
    assert manager.persist_if_dirty(), "the change is journaled; the broker's stop writes it"
    stored = read_file(config_dir / "topics.json")
    assert isinstance(stored, dict)
    assert stored["dataVersion"] == {"counter": 1, "timestamp": clock.now}
    assert stored["topicConfigTable"]["T"] == {
        "topicName": "T",
        "readQueueNums": 8,
        "writeQueueNums": 8,
        "perm": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }


ROCKETMQ_TOPICS = """{
\t"dataVersion":{
\t\t"counter":7,
\t\t"stateVersion":0,
\t\t"timestamp":1690000000000
\t},
\t"topicConfigTable":{
\t\t"SCHEDULE_TOPIC_XXXX":{
\t\t\t"attributes":{},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":18,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"SCHEDULE_TOPIC_XXXX",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":18
\t\t},
\t\t"TopicTest":{
\t\t\t"attributes":{"+message.type":"NORMAL"},
\t\t\t"order":false,
\t\t\t"perm":7,
\t\t\t"readQueueNums":16,
\t\t\t"topicFilterType":"MULTI_TAG",
\t\t\t"topicName":"TopicTest",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":4
\t\t},
\t\t"Sparse":{
\t\t\t"readQueueNums":2
\t\t}
\t}
}"""


def test_loads_rocketmq_topics_file(config_dir: Path) -> None:
    write_file(config_dir, "topics.json", ROCKETMQ_TOPICS)
    manager = topics(config_dir)
    assert manager.data_version == DataVersion(7, 1_690_000_000_000)
    assert manager.get("TopicTest") == TopicConfig("TopicTest", 16, 4, 7, "MULTI_TAG")
    assert manager.get("Sparse") == TopicConfig("Sparse", read_queue_nums=2)
    assert [config.topic_name for config in manager.all()] == [
        SCHEDULE_TOPIC,
        "Sparse",
        "TopicTest",
    ]


def test_schedule_topic_exists_even_if_the_file_lacks_it(config_dir: Path) -> None:
    write_file(config_dir, "topics.json", '{"topicConfigTable":{"T":{"perm":6}}}')
    assert topics(config_dir).get(SCHEDULE_TOPIC) is not None


def test_topic_map_key_names_the_topic(config_dir: Path) -> None:
    write_file(config_dir, "topics.json", '{"topicConfigTable":{"New":{"topicName":"Old"}}}')
    assert topics(config_dir).get("New") == TopicConfig("New")


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param('{"readQueueNums":"many"}', id="int-as-text"),
        pytest.param('{"order":"no"}', id="bool-as-text"),
        pytest.param('{"topicFilterType":3}', id="text-as-int"),
        pytest.param("[]", id="entry-list"),
    ],
)
def test_wrong_topic_field_types_raise(config_dir: Path, entry: str) -> None:
    write_file(config_dir, "topics.json", f'{{"topicConfigTable":{{"T":{entry}}}}}')
    with pytest.raises(ConfigFileError, match=re.escape("topics.json")):
        topics(config_dir)


# ---------------------------------------------------------------- SubscriptionGroupManager


def groups(config_dir: Path, clock: FakeClock | None = None) -> SubscriptionGroupManager:
    manager = SubscriptionGroupManager(config_dir, now_ms=clock or FakeClock())
    manager.load()
    return manager


def test_get_or_create_persists_at_once(config_dir: Path) -> None:
    manager = groups(config_dir)
    assert manager.get("g") is None
    created = manager.get_or_create("g")
    assert created == SubscriptionGroupConfig("g")
    assert manager.data_version.counter == 1

    assert groups(config_dir).get("g") == created  # no persist() call needed
    assert manager.get_or_create("g") is created
    assert manager.data_version.counter == 1  # an existing group changes nothing


def test_subscription_group_file_has_rocketmq_shape(config_dir: Path) -> None:
    manager = groups(config_dir)
    manager.get_or_create("group1")
    manager.persist_if_dirty()
    stored = read_file(config_dir / "subscriptionGroup.json")
    assert isinstance(stored, dict)
    assert stored["subscriptionGroupTable"] == {
        "group1": {
            "groupName": "group1",
            "consumeEnable": True,
            "consumeFromMinEnable": True,
            "consumeBroadcastEnable": True,
            "retryQueueNums": 1,
            "retryMaxTimes": 16,
            "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1,
            "notifyConsumerIdsChangedEnable": True,
            "consumeFrom": "earliest",
            "consumeMode": "",
            "fifo": False,
            "filters": {},
        }
    }


def test_subscription_group_round_trip(config_dir: Path) -> None:
    manager = groups(config_dir)
    manager.put(SubscriptionGroupConfig("a", consume_enable=False, retry_max_times=3))
    manager.put(SubscriptionGroupConfig("b", consume_from="1700000000000"))
    manager.get_or_create("c")
    assert manager.delete("c") is True
    assert manager.delete("c") is False

    reopened = groups(config_dir)
    assert reopened.all() == manager.all()
    assert reopened.data_version == manager.data_version
    b = reopened.get("b")
    assert b is not None
    assert b.consume_from_timestamp == 1_700_000_000_000


@pytest.mark.parametrize(
    ("consume_from", "timestamp"),
    [
        pytest.param("earliest", None, id="earliest"),
        pytest.param("latest", None, id="latest"),
        pytest.param("1700000000000", 1_700_000_000_000, id="timestamp"),
    ],
)
def test_consume_from_values(consume_from: str, timestamp: int | None) -> None:
    config = SubscriptionGroupConfig("g", consume_from=consume_from)
    assert config.consume_from_timestamp == timestamp


@pytest.mark.parametrize("consume_from", ["", "yesterday", "-5", "1.5", "EARLIEST"])
def test_bad_consume_from_is_rejected(consume_from: str) -> None:
    with pytest.raises(ValueError, match="consume_from"):
        SubscriptionGroupConfig("g", consume_from=consume_from)


def test_loads_rocketmq_subscription_group_file(config_dir: Path) -> None:
    write_file(
        config_dir,
        "subscriptionGroup.json",
        '{\n\t"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1690000000000},\n'
        '\t"forbiddenTable":{},\n'
        '\t"subscriptionGroupTable":{\n'
        '\t\t"group1":{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,'
        '"consumeFromMinEnable":true,"consumeMessageOrderly":false,"groupName":"group1",'
        '"groupRetryPolicy":{"type":"CUSTOMIZED"},"notifyConsumerIdsChangedEnable":true,'
        '"retryMaxTimes":5,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1,'
        '"attributes":{},"subscriptionDataSet":[]}\n\t}\n}',
    )
    manager = groups(config_dir)
    assert manager.get("group1") == SubscriptionGroupConfig("group1", retry_max_times=5)
    assert manager.data_version == DataVersion(3, 1_690_000_000_000)


def test_bad_consume_from_in_file_raises(config_dir: Path) -> None:
    write_file(
        config_dir,
        "subscriptionGroup.json",
        '{"subscriptionGroupTable":{"g":{"consumeFrom":"whenever"}}}',
    )
    with pytest.raises(ConfigFileError, match=re.escape("subscriptionGroup.json")):
        groups(config_dir)


# ---------------------------------------------------------------- DelayOffsetManager


def delays(config_dir: Path) -> DelayOffsetManager:
    manager = DelayOffsetManager(config_dir)
    manager.load()
    return manager


def test_delay_offsets_default_to_zero(config_dir: Path) -> None:
    manager = delays(config_dir)
    assert manager.get(3) == 0
    assert manager.table() == {}


def test_delay_offsets_round_trip(config_dir: Path) -> None:
    manager = delays(config_dir)
    manager.update(3, 11)
    manager.update(1, 1)
    assert manager.dirty is True
    manager.persist()
    assert read_file(config_dir / "delayOffset.json") == {"offsetTable": {"1": 1, "3": 11}}
    reopened = delays(config_dir)
    assert reopened.table() == {1: 1, 3: 11}
    assert reopened.get(3) == 11


def test_loads_rocketmq_delay_offset_file(config_dir: Path) -> None:
    write_file(
        config_dir,
        "delayOffset.json",
        '{\n\t"offsetTable":{1:1,2:1,3:11,4:1,5:1,6:1,7:1,8:1,9:1,10:1,11:1,12:1,13:1,14:1,'
        "15:0,16:0,17:0,18:0}\n}",
    )
    table = delays(config_dir).table()
    assert len(table) == 18
    assert table[3] == 11
    assert table[18] == 0


def test_delay_level_starts_at_one(config_dir: Path) -> None:
    with pytest.raises(ValueError, match="level"):
        delays(config_dir).update(0, 1)
