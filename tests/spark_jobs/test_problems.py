"""problems: what a job tells its user of spoolmq's problem+json answers."""

from __future__ import annotations

import httpx

from spark_jobs.problems import problem_code, problem_text


def answer(status: int, **kwargs: object) -> httpx.Response:
    return httpx.Response(status, **kwargs)  # type: ignore[arg-type]


def test_code_and_text_of_a_problem_answer() -> None:
    problem = answer(404, json={"code": "TOPIC_NOT_FOUND", "title": "Not Found", "detail": "no T"})
    assert problem_code(problem) == "TOPIC_NOT_FOUND"
    assert problem_text(problem) == "TOPIC_NOT_FOUND: Not Found: no T"


def test_anything_else_is_shown_as_the_start_of_its_body() -> None:
    page = answer(502, text="<html>" + "x" * 400)
    assert problem_code(page) is None
    assert problem_text(page) == ("<html>" + "x" * 400)[:300]
    assert problem_text(answer(500, json={"unexpected": 1})) == '{"unexpected":1}'
