"""The AccessKey signature of the gRPC face, checked against the auth file's tokens.

The access key is a token's name, the secret its SHA-256 digest. A real server with an auth
file: the official client signed with a token's name and digest produces and consumes what
the token may; an unsigned or badly signed call is UNAUTHORIZED; a token lacking the grant is
FORBIDDEN, by the HTTP API's rules.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator

import pytest
from rocketmq import Credentials, Producer  # type: ignore[import-untyped]
from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2,
    service_pb2,
)

from app.grpc.auth import Guard, parse_authorization, signature
from app.grpc.convert import ProtocolError
from app.security.tokens import TokenRegistry, entry_toml, hash_token
from tests.app.grpc.support import (
    Face,
    consumer_of,
    message,
    queue,
    receive_all,
    resource,
    serving,
    stub,
)

TOPIC = "grpc-auth-orders"
GROUP = "grpc-auth-workers"
TOKENS = {"ops": "smq_ops-secret", "orders-app": "smq_orders", "reader": "smq_reader"}
Code = definition_pb2.Code


def credentials(name: str, token: str | None = None) -> Credentials:
    """A client's credentials for the token ``name``: its name and its digest."""
    return Credentials(name, hash_token(token or TOKENS[name]))


def signed(name: str, secret: str, date_time: str = "20260101T000000Z") -> list[tuple[str, str]]:
    """The metadata a RocketMQ client sends, signed with ``secret``."""
    mac = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    return [
        ("x-mq-date-time", date_time),
        ("x-mq-client-id", f"{name}-client"),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={name}, SignedHeaders=x-mq-date-time, Signature={mac}",
        ),
    ]


@pytest.fixture(scope="module")
def face(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Face]:
    directory = tmp_path_factory.mktemp("grpc-auth")
    auth_file = directory / "auth.toml"
    auth_file.write_text(
        entry_toml("ops", hash_token(TOKENS["ops"]), admin=True)
        + entry_toml(
            "orders-app",
            hash_token(TOKENS["orders-app"]),
            produce=[TOPIC],
            consume=[f"{GROUP}:{TOPIC}"],
            producer_groups=[TOPIC],
        )
        + entry_toml("reader", hash_token(TOKENS["reader"]), consume=[f"others:{TOPIC}"])
    )
    with serving(directory / "store", "--auth-file", str(auth_file)) as face:
        face.http.headers["authorization"] = f"Bearer {TOKENS['ops']}"
        face.topic(TOPIC, queues=1)
        yield face


def test_a_client_signed_with_a_tokens_name_and_digest_produces_and_consumes(
    face: Face,
) -> None:
    producer = Producer(face.config(credentials("orders-app")), (TOPIC,))
    producer.startup()
    try:
        receipt = producer.send(message(TOPIC, b"signed"))
    finally:
        producer.shutdown()
    consumer = consumer_of(face, GROUP, TOPIC, credentials=credentials("orders-app"))
    try:
        [received] = receive_all(consumer, 1)
    finally:
        consumer.shutdown()
    assert (received.body, received.message_id) == (b"signed", receipt.message_id)


def test_an_unsigned_or_badly_signed_call_is_unauthorized(face: Face) -> None:
    route = service_pb2.QueryRouteRequest(topic=resource(TOPIC))
    digest = hash_token(TOKENS["orders-app"])
    with stub(face) as calls:
        unsigned = calls.QueryRoute(route)
        wrong_secret = calls.QueryRoute(route, metadata=signed("orders-app", "not the digest"))
        unknown_key = calls.QueryRoute(route, metadata=signed("nobody", digest))
        [telemetry] = list(
            calls.Telemetry(iter([service_pb2.TelemetryCommand()]), metadata=[("a", "b")])
        )
        good = calls.QueryRoute(route, metadata=signed("orders-app", digest))
    assert unsigned.status.code == Code.UNAUTHORIZED
    assert wrong_secret.status.code == Code.UNAUTHORIZED
    assert unknown_key.status.code == Code.UNAUTHORIZED
    assert telemetry.status.code == Code.UNAUTHORIZED
    assert good.status.code == Code.OK


def test_a_token_lacking_the_grant_is_forbidden(face: Face) -> None:
    reader = signed("reader", hash_token(TOKENS["reader"]))
    sent = definition_pb2.Message(topic=resource(TOPIC), body=b"x")
    sent.system_properties.message_id = "01AB"
    sent.system_properties.message_type = definition_pb2.MessageType.NORMAL
    orders_app = signed("orders-app", hash_token(TOKENS["orders-app"]))
    half = definition_pb2.Message()
    half.CopyFrom(sent)
    half.system_properties.message_type = definition_pb2.MessageType.TRANSACTION
    with stub(face) as calls:
        send = calls.SendMessage(service_pb2.SendMessageRequest(messages=[sent]), metadata=reader)
        [receive] = list(
            calls.ReceiveMessage(
                service_pb2.ReceiveMessageRequest(
                    group=resource(GROUP), message_queue=queue(TOPIC, 0), batch_size=1
                ),
                metadata=reader,
            )
        )
        other_topic = definition_pb2.Message()
        other_topic.CopyFrom(sent)
        other_topic.topic.name = "grpc-auth-elsewhere"
        elsewhere = calls.SendMessage(
            service_pb2.SendMessageRequest(messages=[other_topic]), metadata=orders_app
        )
    assert send.status.code == Code.FORBIDDEN
    assert receive.status.code == Code.FORBIDDEN
    assert elsewhere.status.code == Code.FORBIDDEN


def test_the_authorization_is_parsed_as_rocketmqs_clients_write_it() -> None:
    fields = parse_authorization(
        "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=0a1b"
    )
    assert fields == {"Credential": "ak", "SignedHeaders": "x-mq-date-time", "Signature": "0a1b"}
    for bad in ("Bearer abc", "MQv2-HMAC-SHA1 Credential=ak", "MQv2-HMAC-SHA1 Signature=0a"):
        with pytest.raises(ProtocolError) as raised:
            parse_authorization(bad)
        assert raised.value.code == Code.UNAUTHORIZED


def test_the_guard_takes_every_caller_without_an_auth_file() -> None:
    assert Guard(None).caller([]).admin
    digest = hash_token("smq_t")
    registry = TokenRegistry({digest: Guard(None).caller([])})
    guard = Guard(registry)
    date_time = "20260102T030405Z"
    assert (
        signature(digest, date_time)
        == hmac.new(digest.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    )
    assert guard.caller(signed("anonymous", digest, date_time)).name == "anonymous"
    with pytest.raises(ProtocolError):
        guard.caller([])
