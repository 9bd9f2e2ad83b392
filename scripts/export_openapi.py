"""Write the app's OpenAPI document to openapi/openapi.json, or check that it is up to date.

uv run python scripts/export_openapi.py          # regenerate
uv run python scripts/export_openapi.py --check  # exit 1 when the file differs from the app
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402

DEFAULT_PATH = ROOT / "openapi" / "openapi.json"


def render() -> str:
    """The document of an app built with default settings (the environment is ignored)."""
    app = create_app(Settings.model_construct())
    return json.dumps(app.openapi(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the file is stale")
    parser.add_argument("--output", type=Path, default=DEFAULT_PATH)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current == text:
            print(f"{args.output} is up to date")
            return 0
        diff = difflib.unified_diff(
            current.splitlines(), text.splitlines(), "committed", "app", lineterm="", n=2
        )
        print("\n".join(list(diff)[:80]))
        print(f"{args.output} differs from the app: run scripts/export_openapi.py", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
