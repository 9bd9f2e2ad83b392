"""ConfigJournal and the journaled config tables: a change is one durable line, the file is
rewritten in RocketMQ's shape only now and then, and nothing is lost around a rewrite."""

from __future__ import annotations

import itertools
import json
import os
import threading
from pathlib import Path

import pytest

import storage.config_managers
import storage.json_file
from storage.config_journal import ConfigJournal
from storage.config_managers import TopicConfig, TopicConfigManager
from storage.errors import ConfigFileError


def test_lines_are_read_back_in_order_and_a_torn_last_line_is_cut(tmp_path: Path) -> None:
    journal = ConfigJournal(tmp_path / "config" / "topics.json")
    for n in range(3):
        journal.sync(journal.append({"put": n}))
    with journal.path.open("ab") as file:
        file.write(b'{"put": 3')  # a crash in the middle of an append
    again = ConfigJournal(tmp_path / "config" / "topics.json")
    assert again.read() == [{"put": 0}, {"put": 1}, {"put": 2}]
    again.sync(again.append({"put": 4}))
    assert ConfigJournal(tmp_path / "config" / "topics.json").read()[-1] == {"put": 4}


def test_a_damaged_line_before_the_last_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    (tmp_path / "topics.json.journal").write_text('{"put": 1}\nnot json\n{"put": 2}\n')
    with pytest.raises(ConfigFileError, match="line 2"):
        ConfigJournal(path).read()


def test_one_sync_carries_every_line_appended_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fdatasync", synced.append)
    journal = ConfigJournal(tmp_path / "topics.json")
    tickets = [journal.append({"n": n}) for n in range(5)]
    journal.sync(tickets[-1])
    for ticket in tickets:
        journal.sync(ticket)  # already durable: no more syncs
    assert len(synced) == 1


def test_creating_many_topics_rewrites_the_file_a_few_times_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    real_save = storage.json_file.save_json

    def counting_save(path: Path, data: object) -> None:
        writes.append(len(data["topicConfigTable"]))  # type: ignore[index]
        real_save(path, data)

    monkeypatch.setattr(storage.config_managers, "save_json", counting_save)
    manager = TopicConfigManager(tmp_path)
    manager.load()
    for n in range(1000):
        manager.put(TopicConfig(f"T{n}"))
    assert 1 <= len(writes) <= 8, writes  # the journal grows with the table: O(1) a change
    assert all(b >= 1.5 * a for a, b in itertools.pairwise(writes)), writes
    reopened = TopicConfigManager(tmp_path)
    reopened.load()
    assert reopened.all() == manager.all()
    assert reopened.data_version == manager.data_version
    manager.persist_if_dirty()
    on_disk = json.loads((tmp_path / "topics.json").read_text())
    assert len(on_disk["topicConfigTable"]) == 1001  # with the schedule topic
    assert not (tmp_path / "topics.json.journal").exists()


def test_a_rewrite_that_fails_loses_no_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = TopicConfigManager(tmp_path)
    manager.load()
    manager.put(TopicConfig("kept"))
    manager.persist()
    manager.put(TopicConfig("journaled"))
    manager.delete("kept")

    def power_cut(path: Path, data: object) -> None:
        raise OSError("power cut during the rewrite")

    monkeypatch.setattr(storage.config_managers, "save_json", power_cut)
    with pytest.raises(OSError, match="power cut"):
        manager.persist()  # the journal was rotated to .old; the file is the old one
    manager.put(TopicConfig("after"))  # a fresh journal
    with pytest.raises(OSError, match="power cut"):
        manager.persist()  # a second rotation appends to the old journal
    manager.put(TopicConfig("last"))
    reopened = TopicConfigManager(tmp_path)
    reopened.load()
    names = [config.topic_name for config in reopened.all()]
    assert "kept" not in names and {"journaled", "after", "last"} <= set(names)


def test_concurrent_creations_are_each_durable_when_answered(tmp_path: Path) -> None:
    manager = TopicConfigManager(tmp_path)
    manager.load()

    def create(prefix: str) -> None:
        for k in range(50):
            manager.put(TopicConfig(f"{prefix}-{k}"))

    threads = [threading.Thread(target=create, args=(f"T{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reopened = TopicConfigManager(tmp_path)
    reopened.load()
    assert len(reopened.all()) == 201
    assert reopened.data_version.counter == 200
