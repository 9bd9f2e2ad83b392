"""options: the jobs' and data sources' option values, read strictly."""

from __future__ import annotations

import pytest

from spark_jobs.options import (
    OptionError,
    parse_bool,
    parse_commitlog_options,
    parse_endpoints,
    parse_list,
    parse_positive_int,
    parse_size,
    parse_time_ms,
    store_dirs_from_options,
)


def test_sizes_times_booleans_and_lists() -> None:
    assert parse_size("64m", 1) == 64 * 1024 * 1024 == parse_size("64MiB", 1)
    assert (parse_size("1g", 1), parse_size(None, 7), parse_size(4096, 1)) == (1024**3, 7, 4096)
    assert parse_time_ms("1714564800000") == 1_714_564_800_000
    assert parse_time_ms("2024-05-01T12:00:00Z") == 1_714_564_800_000
    assert parse_time_ms(" ") is None and parse_time_ms(None) is None
    assert (parse_bool("yes"), parse_bool("0"), parse_bool(None, True)) == (True, False, True)
    assert parse_list(" a, ,b ,") == ["a", "b"] and parse_list(None) == []
    assert parse_positive_int("3", 1, "runs") == 3 and parse_positive_int("", 5, "runs") == 5


def test_endpoints_are_http_urls_without_trailing_slashes() -> None:
    assert parse_endpoints(" http://a:8080/ , https://b") == ("http://a:8080", "https://b")
    assert parse_endpoints(None) == () == parse_endpoints(" , ")
    with pytest.raises(OptionError, match="not 'b:8080'"):
        parse_endpoints("http://a:8080,b:8080")


@pytest.mark.parametrize(
    "bad",
    [
        lambda: parse_size("lots", 1),
        lambda: parse_size("0", 1),
        lambda: parse_time_ms("yesterday"),
        lambda: parse_bool("maybe"),
        lambda: parse_positive_int("-1", 1, "runs"),
        lambda: parse_positive_int("x", 1, "runs"),
    ],
)
def test_values_that_cannot_be_used_are_option_errors(bad: object) -> None:
    with pytest.raises(OptionError):
        bad()  # type: ignore[operator]


def test_store_directories_come_from_path_paths_and_stores() -> None:
    found = store_dirs_from_options({"path": "/a", "paths": '["/b", "/c"]', "stores": "/d, /e"})
    assert found == ["/a", "/b", "/c", "/d", "/e"]


def test_a_sql92_filter_option_is_checked_before_the_read() -> None:
    options = parse_commitlog_options({"stores": "/a", "filter": "region = 'eu'"})
    assert options.record_filter.sql == "region = 'eu'"
    with pytest.raises(OptionError, match="filter does not parse: at position 2"):
        parse_commitlog_options({"stores": "/a", "filter": "a LIKE 'x%'"})
