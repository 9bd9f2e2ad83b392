"""The ``spoolmq`` command line: ``spoolmq serve`` runs the HTTP server, ``spoolmq token
create`` makes a bearer token for the auth file, ``spoolmq demo`` sends and pulls a few
messages through the services without a server, ``spoolmq proxy`` fronts a cluster of broker
groups whose route table is in etcd.

Every setting of :class:`app.settings.Settings` is a flag (``--max-parked-pulls``) and an
environment variable (``SPOOLMQ_MAX_PARKED_PULLS``); a flag wins over the variable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
import types
import typing
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from app.grpc import GrpcExtraMissingError
from app.main import build_server, create_app
from app.proxy.context import ProxyLimits
from app.proxy.main import create_proxy_app, proxy_server
from app.proxy.workers import ProxyService, bind_port, serve_in_workers
from app.security import (
    AuthFileError,
    UnsafeBindError,
    check_bind,
    check_ha_bind,
    entry_toml,
    hash_token,
    new_token,
)
from app.security.principals import ConsumeGrant
from app.server import ListenError, listen_socket
from app.server.workers import cpu_count
from app.settings import SETTING_SECTIONS, Settings
from services import Broker, OutgoingMessage, PullOptions, TlsConfig, TlsConfigError
from services.errors import MasterRoleLostError, ServiceError, StorageError
from services.ha import split_host_port

DEMO_TOPIC = "DemoTopic"


BOUND_TEXTS: Final = {
    "gt": "> {}",
    "ge": ">= {}",
    "lt": "< {}",
    "le": "<= {}",
    "min_length": "length >= {}",
    "max_length": "length <= {}",
}
"""How each bound a setting's ``Field`` may set (``gt=0``, ``le=95``, ...) reads in --help."""


def allowed_range(field: FieldInfo) -> str | None:
    """The bounds of a setting, as ``--help`` states them (``>= 10, <= 95``); None if none."""
    bounds = [
        text.format(getattr(rule, name))
        for rule in field.metadata
        for name, text in BOUND_TEXTS.items()
        if getattr(rule, name, None) is not None
    ]
    return ", ".join(bounds) or None


def setting_help(name: str, field: FieldInfo) -> str:
    """A setting's flag help: what it does, its allowed range, its variable and default."""
    bounds = allowed_range(field)
    allowed = f"allowed {bounds}; " if bounds else ""
    return f"{field.description} ({allowed}env SPOOLMQ_{name.upper()}, default {field.default})"


def _add_setting(parser: Any, name: str, field: FieldInfo) -> None:
    flag = "--" + name.replace("_", "-")
    help_text = setting_help(name, field)
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
    if isinstance(annotation, types.UnionType):  # X | None: given as text, checked by Settings
        parser.add_argument(flag, metavar=name.upper(), **kwargs)
        return
    parser.add_argument(flag, **kwargs)


LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
QUIET_LOGGERS = ("httpx", "httpcore")
"""Libraries that log every request at INFO: etcd lease renewals, config syncs and route reads
would fill an INFO log; they show at DEBUG only."""


def configure_logging(level: str, process: str = "") -> None:
    """One format for every command; the HTTP clients' request lines at DEBUG only. ``process``
    tags every line (``worker 2``: one of several processes logging to one place)."""
    tag = f"[{process}] " if process else ""
    logging.basicConfig(
        level=level.upper(), format=f"%(asctime)s %(levelname)s {tag}%(name)s: %(message)s"
    )
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


def _serve(args: argparse.Namespace) -> int:
    given = {name: value for name, value in vars(args).items() if name in Settings.model_fields}
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        print(f"spoolmq: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    failures: list[BaseException] = []

    def start_failed(exc: BaseException) -> None:
        failures.append(exc)
        server.should_exit = True

    try:
        check_bind(
            settings.host,
            auth_enabled=settings.auth_file is not None,
            allow_anonymous=settings.allow_anonymous,
        )
        if settings.grpc_listen is not None:  # signed calls with an auth file, as over HTTP
            check_bind(
                split_host_port(settings.grpc_listen)[0],
                auth_enabled=settings.auth_file is not None,
                allow_anonymous=settings.allow_anonymous,
            )
        if settings.ha_listen is not None:
            # Beyond loopback: slaves prove a token (auth file) over TLS, or asked for.
            check_ha_bind(
                split_host_port(settings.ha_listen)[0],
                auth_enabled=settings.auth_file is not None,
                tls_enabled=settings.tls_cert is not None,
                allow_anonymous=settings.allow_anonymous,
            )
        app = create_app(settings, on_start_failure=start_failed)
        server = build_server(app, settings)
    except (UnsafeBindError, AuthFileError, TlsConfigError, GrpcExtraMissingError) as exc:
        print(f"spoolmq: {exc}", file=sys.stderr)
        return 2
    try:
        sock = listen_socket(settings.host, settings.port)
    except ListenError as exc:
        print(f"spoolmq: {exc}", file=sys.stderr)
        return 2
    address = base_url(settings.host, sock.getsockname()[1])
    logging.getLogger("spoolmq").info(
        "serving on %s: admin pages at %s/admin, API docs at %s/docs", address, address, address
    )
    if settings.auth_file is None:
        logging.getLogger("spoolmq").warning(
            "no --auth-file: every caller is admin (listening on %s)", settings.host
        )
    server.run(sockets=[sock])
    if failures and isinstance(failures[0], MasterRoleLostError):
        print(f"spoolmq: stopped: {failures[0]}", file=sys.stderr)
        return 1
    if failures:
        print(f"spoolmq: could not start: {failures[0]}", file=sys.stderr)
        return 1
    return 0


def base_url(host: str, port: int) -> str:
    """The server's URL as a browser takes it (an IPv6 address in brackets; the wildcard
    addresses shown as the loopback one a local browser reaches)."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def _demo(store_dir: str) -> int:
    """Send a few messages and pull them back, through the services, without a server."""
    try:
        settings = Settings(store_dir=Path(store_dir))
    except ValidationError as exc:
        print(f"spoolmq: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_run_demo(Broker(settings.broker_config())))
    except (ServiceError, StorageError) as exc:
        print(f"spoolmq: {exc}", file=sys.stderr)
        return 1
    return 0


async def _run_demo(broker: Broker) -> None:
    await broker.start()
    try:
        for i in range(3):
            message = OutgoingMessage(f"hello {i}".encode(), tags="demo", queue_id=0)
            [sent] = await broker.send.send(DEMO_TOPIC, [message])
            print(f"sent {sent.msg_id} queue {sent.queue_id} offset {sent.queue_offset}")
        got = await broker.pull.pull_queue(DEMO_TOPIC, 0, 0, PullOptions())
        print(f"pulled {len(got.messages)} messages: {got.status.value}, next {got.next_offset}")
    finally:
        await broker.stop()


def _token_create(args: argparse.Namespace) -> int:
    """Print a new token once (stderr), and the auth-file entry holding its digest (stdout)."""
    try:
        for grant in args.consume:
            ConsumeGrant.parse(grant)
    except ValueError as exc:
        print(f"spoolmq: {exc}", file=sys.stderr)
        return 2
    token = new_token()
    entry = entry_toml(
        args.name,
        hash_token(token),
        admin=args.admin,
        produce=args.produce,
        consume=args.consume,
        producer_groups=args.producer_group,
        rate_per_s=args.rate_per_s,
        burst=args.burst,
        max_parked_pulls=args.max_parked_pulls,
    )
    # stdout is the entry alone, so `>> auth.toml` appends it; the token goes to stderr,
    # alone on its last line, so `2> name.token` keeps it and `tail -n 1` reads it back.
    print(
        f"spoolmq: the token of {args.name!r} follows, shown only now (the auth file keeps "
        "only its SHA-256); its auth-file entry went to stdout: append it to the file "
        "(--auth-file) and restart the server.",
        file=sys.stderr,
    )
    print(token, file=sys.stderr)
    print(entry, end="")
    return 0


def _add_token_commands(commands: Any) -> None:
    token = commands.add_parser("token", help="make bearer tokens for the auth file")
    actions = token.add_subparsers(dest="action", required=True)
    create = actions.add_parser(
        "create",
        help="print a new token and its auth-file entry",
        description="Print the [[tokens]] entry for the auth file on stdout (`>> auth.toml` "
        "appends it; the file keeps only the token's SHA-256) and the new random token, "
        "once, on stderr (its last line: `2> name.token`).",
    )
    create.add_argument("--name", required=True, type=_token_name, help="unique, for logs")
    create.add_argument("--admin", action="store_true", help="may do everything")
    create.add_argument(
        "--produce", action="append", default=[], metavar="TOPIC", help="topic pattern (glob)"
    )
    create.add_argument(
        "--consume",
        action="append",
        default=[],
        metavar="GROUP:TOPIC",
        help="group and topic patterns (globs)",
    )
    create.add_argument(
        "--producer-group",
        action="append",
        default=[],
        metavar="GROUP",
        help="producer group pattern (glob) of its transactions",
    )
    create.add_argument("--rate-per-s", type=float, help="its own request rate (0: none)")
    create.add_argument("--burst", type=int, help="its own burst")
    create.add_argument("--max-parked-pulls", type=int, help="its own long-poll cap")


def _proxy(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    try:
        check_bind(args.host, auth_enabled=False, allow_anonymous=args.allow_anonymous)
        if args.grpc_listen is not None:
            host = split_host_port(args.grpc_listen)[0]
            check_bind(host, auth_enabled=False, allow_anonymous=args.allow_anonymous)
    except UnsafeBindError as exc:
        print(f"spoolmq: {exc}", file=sys.stderr)
        return 2
    try:
        tls = _proxy_tls(args)
    except TlsConfigError as exc:
        print(f"spoolmq: {exc}", file=sys.stderr)
        return 2
    limits = ProxyLimits(
        send_timeout_s=args.send_timeout_s,
        send_attempt_timeout_s=min(args.send_attempt_timeout_s, args.send_timeout_s),
        max_request_bytes=args.max_request_bytes,
        tls=tls,
    )
    service = ProxyService(args.cluster, tuple(args.etcd), args.host, args.port, limits)
    # the gRPC face's port is one process's: with it, the proxy is served by one
    asked_workers = 1 if args.grpc_listen is not None else args.workers
    try:
        sock, workers = bind_port(service, asked_workers)
    except ListenError as exc:
        print(f"spoolmq: {exc}", file=sys.stderr)
        return 2
    if workers > 1:
        return serve_in_workers(service, sock, workers, partial(configure_logging, args.log_level))
    try:
        app = create_proxy_app(args.cluster, args.etcd, limits, grpc_listen=args.grpc_listen)
    except GrpcExtraMissingError as exc:
        sock.close()
        print(f"spoolmq: {exc}", file=sys.stderr)
        return 2
    with sock:
        proxy_server(app).run(sockets=[sock])
    return 0


def _proxy_tls(args: argparse.Namespace) -> TlsConfig | None:
    """The proxy's certificate files, loaded once to refuse bad ones before it listens."""
    if args.tls_cert is None and args.tls_key is None and args.tls_ca is None:
        return None
    tls = TlsConfig(args.tls_cert, args.tls_key, args.tls_ca)
    tls.client_context()
    if tls.serves:
        tls.server_context()
    return tls


PROXY_TLS_FLAGS: Final = {
    "--tls-cert": "PEM certificate the proxy serves https with (with --tls-key); presented to "
    "brokers and etcd when they ask for one",
    "--tls-key": "the PEM private key of --tls-cert",
    "--tls-ca": "PEM CA that https brokers' and etcd's certificates are checked against; "
    "clients presenting a certificate it did not sign are refused",
}
"""The proxy's TLS flags: the names and meaning of ``spoolmq serve``'s."""


def _add_tls_flags(parser: Any) -> None:
    for flag, help_text in PROXY_TLS_FLAGS.items():
        parser.add_argument(flag, type=Path, help=help_text)


def _add_proxy_command(commands: Any) -> None:
    proxy = commands.add_parser(
        "proxy",
        help="run a stateless proxy in front of a cluster's broker groups",
        description="Serve the broker HTTP API for a whole cluster: each request goes to the "
        "right group's master (or a slave, for reads), as the route table in etcd says.",
    )
    proxy.add_argument("--cluster", required=True, help="the cluster's name in etcd")
    proxy.add_argument(
        "--etcd", required=True, action="append", help="an etcd URL (repeat for several)"
    )
    proxy.add_argument("--host", default="127.0.0.1")
    proxy.add_argument("--port", type=int, default=8081)
    proxy.add_argument(
        "--workers",
        type=_at_least_one,
        default=cpu_count(),
        help="processes serving the port (Linux: SO_REUSEPORT), restarted when one dies "
        f"(default: one per CPU, {cpu_count()} here)",
    )
    proxy.add_argument(
        "--allow-anonymous",
        action="store_true",
        help="listen beyond loopback although the proxy checks no tokens",
    )
    defaults = ProxyLimits()
    proxy.add_argument(
        "--send-timeout-s",
        type=_positive,
        default=defaults.send_timeout_s,
        help="a send is answered within this: receipts, a refusal, or 504 OUTCOME_UNKNOWN "
        f"(default {defaults.send_timeout_s:g})",
    )
    proxy.add_argument(
        "--send-attempt-timeout-s",
        type=_positive,
        default=defaults.send_attempt_timeout_s,
        help="one attempt's wait for a broker's answer; keep it above the brokers' "
        f"--sync-flush-timeout-ms (default {defaults.send_attempt_timeout_s:g})",
    )
    proxy.add_argument(
        "--max-request-bytes",
        type=int,
        default=defaults.max_request_bytes,
        help=f"largest request body (413 beyond; default {defaults.max_request_bytes})",
    )
    proxy.add_argument(
        "--grpc-listen",
        metavar="HOST:PORT",
        help="serve RocketMQ 5's gRPC protocol there too, for the official clients (the grpc "
        "extra; port 0: any; off when not given; the proxy is then served by one process)",
    )
    proxy.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default info")
    _add_tls_flags(proxy)


def _positive(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError("a number of seconds above 0")
    return number


def _at_least_one(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("a number of processes, 1 or more")
    return number


def _token_name(value: str) -> str:
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}$", value):
        raise argparse.ArgumentTypeError(
            "1 to 64 of A-Z a-z 0-9 . _ @ : -, starting with a letter or digit"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spoolmq", description="spoolmq message queue")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the HTTP API server",
        usage="spoolmq serve [--FLAG VALUE ...]",
        description="Run the HTTP API on one store directory (one worker, uvloop, httptools). "
        "Every flag is also an environment variable (SPOOLMQ_<FLAG>); a flag wins.",
    )
    section: Any = serve
    for name, field in Settings.model_fields.items():
        if name in SETTING_SECTIONS:
            section = serve.add_argument_group(SETTING_SECTIONS[name])
        _add_setting(section, name, field)
    demo = commands.add_parser(
        "demo",
        help="send and pull a few messages without a server",
        description="Open the store (settings from the SPOOLMQ_* environment), send three "
        "messages to DemoTopic and pull queue 0 from its start.",
    )
    demo.add_argument("--store-dir", default="./data")
    _add_token_commands(commands)
    _add_proxy_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "demo":
        return _demo(args.store_dir)
    if args.command == "token":
        return _token_create(args)
    if args.command == "proxy":
        return _proxy(args)
    return 2  # pragma: no cover - argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
