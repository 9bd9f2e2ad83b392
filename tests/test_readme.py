"""README.md, followed word for word: every shell block runs (or says why not), output checked.

The conventions a README block must follow are in ``tests/readme_runner.py``'s docstring.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.readme_runner import ReadmeError, ReadmeRun, check_output, describe, parse_blocks

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


@pytest.mark.timeout(2400)
def test_every_shell_block_of_the_readme_runs_as_written(tmp_path: Path) -> None:
    run = ReadmeRun(README, ROOT, tmp_path)
    try:
        outcomes = run.run()
    finally:
        run.stop()
    report = describe(outcomes)
    assert not [o for o in outcomes if o.status == "failed"], report
    shell = [o for o in outcomes if o.block.is_shell]
    assert all(o.status in ("ran", "not run") for o in shell), report
    not_run = [o for o in shell if o.status == "not run"]
    # Most of the README runs; what does not is marked, with its reason, and counted here.
    assert len(not_run) < len(shell) / 3, report
    assert [o for o in shell if o.block.expected is not None], "no output is checked"


def test_the_readme_follows_the_runner_conventions() -> None:
    blocks = parse_blocks(README.read_text())
    assert [b for b in blocks if b.is_shell]


def test_an_indented_code_block_is_refused() -> None:
    with pytest.raises(ReadmeError, match="line 3: an indented code block"):
        parse_blocks("Run it:\n\n    make run\n")


def test_a_marker_needs_a_reason_and_a_known_kind() -> None:
    with pytest.raises(ReadmeError, match="needs its reason"):
        parse_blocks("<!-- readme: not run: -->\n```sh\nls\n```\n")
    with pytest.raises(ReadmeError, match="unknown readme marker"):
        parse_blocks("<!-- readme: maybe later -->\n```sh\nls\n```\n")


def test_an_output_block_belongs_to_the_shell_block_just_before_it() -> None:
    [block] = parse_blocks("```sh\necho hi\n```\n\n```text output\nhi\n```\n")
    assert block.expected is not None and block.expected.text == "hi\n"
    with pytest.raises(ReadmeError, match="must follow its shell block"):
        parse_blocks("```sh\necho hi\n```\nSome words.\n```text output\nhi\n```\n")


def test_markers_apply_to_the_next_block_only() -> None:
    first, second = parse_blocks(
        "<!-- readme: not run: needs docker -->\n```sh\ndocker run x\n```\n\n```sh\nls\n```\n"
    )
    assert first.marker is not None and first.marker.argument == "needs docker"
    assert second.marker is None


@pytest.mark.parametrize(
    ("shown", "printed", "ok"),
    [
        ('{"a": 1, "b": "…"}', '{"a": 1, "b": [2], "c": 3}', True),
        ('{"a": 1}', '{"a": 2}', False),
        ('{"a": "order …"}', '{"a": "order 42 paid"}', True),
        ('{"a": [1, "…"]}', '{"a": [1, 2, 3]}', True),
        ('{"a": [1]}', '{"a": [1, 2]}', False),
        ('{"a": 1}\n{"b": 2}', '{"a": 1}{"b": 2}', True),
        ('{"a": 1}', '{"a": 1}{"b": 2}', False),
        ('{"a": true}', '{"a": 1}', False),
    ],
)
def test_json_output_is_matched_as_a_pattern(shown: str, printed: str, ok: bool) -> None:
    [block] = parse_blocks(f"```sh\ntrue\n```\n```json output\n{shown}\n```\n")
    assert block.expected is not None
    assert (check_output(block.expected, printed) is None) is ok


def test_text_output_takes_an_ellipsis() -> None:
    [block] = parse_blocks("```sh\ntrue\n```\n```text output\nsent … to queue 0\n```\n")
    assert block.expected is not None
    assert check_output(block.expected, "sent 3 messages to queue 0\n") is None
    assert check_output(block.expected, "sent 3 messages to queue 1\n") is not None
