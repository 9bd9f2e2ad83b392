"""The ``spoolmq`` command line: ``spoolmq serve`` runs the HTTP server.

Every setting of :class:`app.settings.Settings` is a flag (``--max-parked-pulls``) and an
environment variable (``SPOOLMQ_MAX_PARKED_PULLS``); a flag wins over the variable.
"""

from __future__ import annotations

import argparse
import logging
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from app.main import create_app
from app.server import build_server
from app.settings import Settings


def _add_setting(parser: argparse.ArgumentParser, name: str, field: FieldInfo) -> None:
    flag = "--" + name.replace("_", "-")
    help_text = f"{field.description} (env SPOOLMQ_{name.upper()}, default {field.default})"
    annotation = field.annotation
    kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": help_text}
    if annotation is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        return
    if typing.get_origin(annotation) is typing.Literal:
        parser.add_argument(flag, choices=typing.get_args(annotation), **kwargs)
        return
    if isinstance(annotation, type) and annotation in (int, float, str, Path):
        parser.add_argument(flag, type=annotation, **kwargs)
        return
    if isinstance(annotation, types.UnionType):  # pragma: no cover - no such setting yet
        parser.add_argument(flag, **kwargs)
        return
    parser.add_argument(flag, **kwargs)


def _serve(args: argparse.Namespace) -> int:
    given = {name: value for name, value in vars(args).items() if name in Settings.model_fields}
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        print(f"spoolmq: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    failures: list[BaseException] = []

    def start_failed(exc: BaseException) -> None:
        failures.append(exc)
        server.should_exit = True

    app = create_app(settings, on_start_failure=start_failed)
    server = build_server(app, settings)
    server.run()
    if failures:
        print(f"spoolmq: could not start: {failures[0]}", file=sys.stderr)
        return 1
    return 0


def _demo(store_dir: str) -> int:
    """Open the store, append a few messages and read them back."""
    from storage import Message, MessageStore

    with MessageStore.open(store_dir) as store:
        for i in range(3):
            result = store.put_message(
                Message("DemoTopic", f"hello {i}".encode(), properties={"TAGS": "demo"})
            )
            print(f"sent {result.msg_id} queue {result.queue_id} offset {result.queue_offset}")
        got = store.get_message("demo", "DemoTopic", 0, 0, 32)
        print(
            f"pulled {len(got.messages)} messages: {got.status.value}, next {got.next_begin_offset}"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spoolmq", description="spoolmq message queue")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the HTTP API server",
        description="Run the HTTP API on one store directory (one worker, uvloop, httptools).",
    )
    for name, field in Settings.model_fields.items():
        _add_setting(serve, name, field)
    demo = commands.add_parser("demo", help="append and read a few messages without a server")
    demo.add_argument("--store-dir", default="./data")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "demo":
        return _demo(args.store_dir)
    return 2  # pragma: no cover - argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
