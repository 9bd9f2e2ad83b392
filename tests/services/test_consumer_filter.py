"""A consumer's filter: tags and SQL92 together, retries, a group's stored subscription, and
a refusal that names where the filter stops parsing."""

from __future__ import annotations

import pytest

from services.consumer_filter import ConsumerFilter, compiled_filter
from services.errors import InvalidFilterError
from storage.config_records import SubscriptionGroupConfig


def test_tags_and_sql_both_go_to_the_store() -> None:
    wanted = ConsumerFilter.of("A||B", "region = 'eu'")
    assert wanted.store_tags is not None and wanted.store_tags.tags == frozenset({"A", "B"})
    assert wanted.property_test is not None
    assert wanted.property_test({"region": "eu"}) and not wanted.property_test({})
    assert wanted.keeps_tags("A") and not wanted.keeps_tags("C")
    everything = ConsumerFilter.of(None)
    assert everything.store_tags is None and everything.property_test is None


def test_retries_pass_every_tag_but_not_the_sql() -> None:
    wanted = ConsumerFilter.of("A", "region = 'eu'")
    retries = wanted.for_retries()
    assert retries.store_tags is None
    assert retries.sql is wanted.sql
    untagged = ConsumerFilter.of(None, "region = 'eu'")
    assert untagged.for_retries() is untagged


def test_a_group_stored_filter_applies_when_the_request_names_none() -> None:
    group = SubscriptionGroupConfig("G", filters={"Orders": "region = 'eu'"})
    stored = ConsumerFilter.of("A").or_stored(group, "Orders")
    assert stored.sql is not None and stored.sql.expression == "region = 'eu'"
    assert stored.tags.tags == frozenset({"A"})
    own = ConsumerFilter.of(None, "region = 'us'")
    assert own.or_stored(group, "Orders") is own
    plain = ConsumerFilter.of(None)
    assert plain.or_stored(group, "Other") is plain


def test_a_filter_is_compiled_once_and_a_bad_one_is_invalid_filter() -> None:
    assert compiled_filter("a = 1") is compiled_filter("a = 1")
    with pytest.raises(InvalidFilterError, match="at position 6: expected AND, OR") as refused:
        compiled_filter("a = 1 b")
    assert refused.value.code == "INVALID_FILTER"


def test_a_record_test_checks_the_exact_tag_and_the_sql() -> None:
    both = ConsumerFilter.of("A", "n > 1").record_test
    assert both is not None
    assert both({"TAGS": "A", "n": "2"})
    assert not both({"TAGS": "B", "n": "2"}) and not both({"TAGS": "A", "n": "1"})
    tag_only = ConsumerFilter.of("A").record_test
    assert tag_only is not None and tag_only({"TAGS": "A"}) and not tag_only({})
    assert ConsumerFilter.of(None).record_test is None
