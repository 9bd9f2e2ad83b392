"""The ``spoolmq`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from storage import Message, MessageStore


def _demo(store_dir: str) -> int:
    """Open the store, append a few messages and read them back."""
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spoolmq", description="spoolmq message queue")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="append and read a few messages")
    demo.add_argument("--store-dir", default="./data")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args.store_dir)
    return 2  # pragma: no cover - argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
