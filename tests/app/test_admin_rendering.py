"""How the admin pages print a body in a table row: one line of text, cut at a word's end,
or a note that it is binary."""

from __future__ import annotations

from app.admin.rendering import PREVIEW_CHARS, BodyPreview, body_preview, preview_of


def test_white_space_runs_show_as_one_space() -> None:
    assert preview_of(b"order 9\n\tpaid  \r\n") == BodyPreview("order 9 paid", 17, cut=False)


def test_a_long_text_is_cut_at_a_word_end_and_says_so() -> None:
    body = ("ship it to the customer " * 20).encode()
    preview = preview_of(body)
    assert preview.cut and preview.size == len(body)
    assert preview.text is not None and len(preview.text) <= PREVIEW_CHARS
    assert preview.text.endswith("customer"), preview.text
    assert body_preview(body) == preview.text + "…"


def test_a_word_longer_than_the_preview_is_cut_where_it_must() -> None:
    preview = preview_of(b"x" * 500)
    assert preview.text == "x" * PREVIEW_CHARS and preview.cut


def test_a_character_split_by_the_cut_is_left_out() -> None:
    preview = preview_of("é".encode() * 1000)
    assert preview.text == "é" * PREVIEW_CHARS and preview.cut


def test_bytes_that_are_not_text_are_binary() -> None:
    for body in (b"\x00\x01\x02\xff", b"\xff\xfe order", b"order\x00 9"):
        assert preview_of(body) == BodyPreview(None, len(body), cut=False), body
    assert body_preview(b"\x00\x01\x02\x03\x04\xff") == "(binary, 6 B)"
