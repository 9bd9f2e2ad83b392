"""session: ``--conf key=value`` settings for the jobs' own sessions."""

from __future__ import annotations

import pytest

from spark_jobs.session import parse_conf


def test_conf_items_become_a_dict_and_a_malformed_one_is_refused() -> None:
    assert parse_conf(["spark.a=1", " spark.b =x=y", "spark.c="]) == {
        "spark.a": "1",
        "spark.b": "x=y",
        "spark.c": "",
    }
    assert parse_conf(None) == {}
    for bad in ("no-separator", "=value"):
        with pytest.raises(ValueError, match="key=value"):
            parse_conf([bad])
