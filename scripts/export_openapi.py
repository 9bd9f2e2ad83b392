"""Write the OpenAPI documents to openapi/: the broker's (openapi.json) and the proxy's
(proxy.json), or check that they are up to date.

uv run python scripts/export_openapi.py          # regenerate
uv run python scripts/export_openapi.py --check  # exit 1 when a file differs from its app
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from typing import Any  # noqa: E402

from app.main import create_app  # noqa: E402
from app.proxy.main import create_proxy_app  # noqa: E402
from app.settings import Settings  # noqa: E402

DEFAULT_PATH = ROOT / "openapi" / "openapi.json"
PROXY_PATH = ROOT / "openapi" / "proxy.json"


def render() -> str:
    """The document of an app built with default settings (the environment is ignored)."""
    return _text(create_app(Settings.model_construct()).openapi())


def render_proxy() -> str:
    """The document of a proxy (it does not depend on its cluster or etcd)."""
    return _text(create_proxy_app("cluster", ["http://127.0.0.1:2379"]).openapi())


def _text(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a file is stale")
    parser.add_argument("--output", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--proxy-output", type=Path, default=PROXY_PATH)
    args = parser.parse_args(argv)
    documents = [(args.output, render()), (args.proxy_output, render_proxy())]
    if args.check:
        stale = [path for path, text in documents if not _is_current(path, text)]
        return 1 if stale else 0
    for path, text in documents:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


def _is_current(path: Path, text: str) -> bool:
    """Whether ``path`` holds ``text``; what differs is printed when it does not."""
    current = path.read_text() if path.exists() else ""
    if current == text:
        print(f"{path} is up to date")
        return True
    diff = difflib.unified_diff(
        current.splitlines(), text.splitlines(), "committed", "app", lineterm="", n=2
    )
    print("\n".join(list(diff)[:80]))
    print(f"{path} differs from the app: run scripts/export_openapi.py", file=sys.stderr)
    return False


if __name__ == "__main__":
    sys.exit(main())
