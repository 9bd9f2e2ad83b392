"""Reading admin form fields, with messages that say which field is wrong and why.

Browsers post ``application/x-www-form-urlencoded`` (htmx too); it is parsed here with the
standard library. Values are checked only for shape (a number, a time); the domain rules
(queue counts, names, offsets) stay in the services, which answer with their own errors.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import ClassVar, Final
from urllib.parse import parse_qs

from starlette.datastructures import QueryParams
from starlette.requests import Request

MAX_FORM_BYTES: Final = 256 * 1024
_DIGITS: Final = re.compile(r"^-?\d+$")


class FormError(Exception):
    """A field that cannot be read: shown next to the form, like a domain error."""

    code: ClassVar[str] = "VALIDATION_FAILED"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Form:
    """The fields of one request (a posted form or a query string)."""

    def __init__(self, fields: Mapping[str, list[str]]) -> None:
        self._fields = fields

    @classmethod
    async def posted(cls, request: Request) -> Form:
        """The urlencoded body of a POST."""
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise FormError("", f"the form is larger than {MAX_FORM_BYTES} bytes")
        try:
            text = body.decode()
        except UnicodeDecodeError:
            raise FormError("", "the form is not valid UTF-8") from None
        return cls(parse_qs(text, keep_blank_values=True))

    @classmethod
    def query(cls, params: QueryParams) -> Form:
        return cls({key: params.getlist(key) for key in params})

    def text(self, name: str, default: str = "") -> str:
        """The first value of ``name``, stripped; ``default`` when missing or blank."""
        values = self._fields.get(name)
        value = values[0].strip() if values else ""
        return value or default

    def raw(self, name: str) -> str:
        """The first value of ``name`` exactly as typed (a message body)."""
        values = self._fields.get(name)
        return values[0] if values else ""

    def texts(self, name: str) -> list[str]:
        """Every non-blank value of ``name`` (checkboxes)."""
        return [v.strip() for v in self._fields.get(name, []) if v.strip()]

    def words(self, name: str) -> list[str]:
        """The values of ``name`` split at commas and white space (ids typed in a box)."""
        return [w for value in self.texts(name) for w in re.split(r"[\s,]+", value) if w]

    def required(self, name: str, label: str) -> str:
        value = self.text(name)
        if not value:
            raise FormError(name, f"{label} is required")
        return value

    def integer(self, name: str, label: str, default: int | None = None) -> int:
        value = self.optional_integer(name, label)
        if value is None:
            if default is None:
                raise FormError(name, f"{label} is required")
            return default
        return value

    def optional_integer(self, name: str, label: str) -> int | None:
        value = self.text(name)
        if not value:
            return None
        if not _DIGITS.match(value):
            raise FormError(name, f"{label} must be a whole number, not {value[:40]!r}")
        return int(value)

    def timestamp(self, name: str, label: str) -> int | None:
        """A time as ms since the epoch: a ``datetime-local`` value (UTC) or a number of ms."""
        value = self.text(name)
        if not value:
            return None
        return parse_time(value, name, label)


def parse_time(value: str, field: str, label: str) -> int:
    """``2026-11-21T06:11`` / ``2026-11-21 06:11:16.5`` (UTC, an offset may follow) or ms."""
    if value.isdigit():
        return int(value)
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise FormError(
            field, f"{label} must be a date and time (YYYY-MM-DD HH:MM:SS, UTC) or ms"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)
