"""RocketMQ 5's gRPC face driven by the official Python client (``rocketmq-python-client``).

One real ``spoolmq serve --grpc-listen`` on 127.0.0.1 for the module; each test uses its own
topic and groups. The client is synchronous (its own threads and event loop), so the tests are
too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from rocketmq import (  # type: ignore[import-untyped]
    ConsumeResult,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2,
    service_pb2,
    service_pb2_grpc,
)

from tests.app.grpc.support import (
    DEADLINE_S,
    Face,
    consumer_of,
    message,
    receive_all,
    serving,
)


@pytest.fixture(scope="module")
def face(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Face]:
    with serving(tmp_path_factory.mktemp("grpc") / "store") as face:
        yield face


@pytest.fixture
def producer(face: Face) -> Iterator[Producer]:
    producer = Producer(face.config())
    producer.startup()
    yield producer
    producer.shutdown()


def test_a_producer_sends_and_a_simple_consumer_receives_and_acks(
    face: Face, producer: Producer
) -> None:
    topic = face.topic("grpc-normal")
    receipt = producer.send(
        message(topic, b"hello", tag="created", keys="order-1", properties={"color": "red"})
    )
    consumer = consumer_of(face, "grpc-normal-workers", topic)
    try:
        [received] = receive_all(consumer, 1)
        assert received.body == b"hello"
        assert received.tag == "created"
        assert received.keys == {"order-1"}
        assert received.properties == {"color": "red"}
        assert received.message_id == receipt.message_id
        assert received.delivery_attempt == 1
        assert consumer.receive(16, 30) == []  # acked: it never comes back
    finally:
        consumer.shutdown()


def test_a_tag_filter_receives_only_its_tags(face: Face, producer: Producer) -> None:
    topic = face.topic("grpc-tags")
    for tag in ("a", "b", "a"):
        producer.send(message(topic, tag.encode(), tag=tag))
    consumer = consumer_of(face, "grpc-tags-workers", topic, "a")
    try:
        assert [m.body for m in receive_all(consumer, 2)] == [b"a", b"a"]
    finally:
        consumer.shutdown()


def test_a_message_not_acked_comes_back_and_a_change_of_invisibility_holds_it(
    face: Face, producer: Producer
) -> None:
    topic = face.topic("grpc-invisible", queues=1)
    producer.send(message(topic, b"again"))
    consumer = consumer_of(face, "grpc-invisible-workers", topic)
    try:
        [first] = receive_all(consumer, 1, ack=False)
        consumer.change_invisible_duration(first, 2)  # a new handle; back in about 2 s
        [second] = receive_all(consumer, 1)
        assert second.message_id == first.message_id
        assert second.delivery_attempt == 2
    finally:
        consumer.shutdown()


def test_a_delayed_message_arrives_once_it_is_due(face: Face, producer: Producer) -> None:
    topic = face.topic("grpc-delay")
    due_s = int(time.time()) + 3
    producer.send(message(topic, b"later", deliver_at_s=due_s))
    consumer = consumer_of(face, "grpc-delay-workers", topic)
    try:
        [received] = receive_all(consumer, 1)
        assert received.body == b"later"
        assert time.time() >= due_s  # never before it is due
        assert received.delivery_timestamp == due_s * 1000
    finally:
        consumer.shutdown()


def test_fifo_messages_keep_their_order_per_message_group_across_four_consumers(
    face: Face, producer: Producer
) -> None:
    topic = face.topic("grpc-fifo")
    group = "grpc-fifo-workers"
    response = face.http.put(f"/v1/groups/{group}", json={"consume_mode": "pop", "fifo": True})
    assert response.status_code in (200, 201)
    sent = {f"order-{n}": [f"order-{n}/{step}".encode() for step in range(5)] for n in range(3)}
    for step in range(5):
        for key, bodies in sent.items():
            producer.send(message(topic, bodies[step], group=key))
    lock = threading.Lock()
    delivered: list[Message] = []  # in the order received: a group's next waits for the ack

    def work(consumer: SimpleConsumer) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            with lock:
                if len(delivered) >= 15:
                    return
            for received in consumer.receive(4, 30):
                with lock:
                    delivered.append(received)
                consumer.ack(received)

    consumers = [consumer_of(face, group, topic) for _ in range(4)]
    try:
        workers = [threading.Thread(target=work, args=(c,)) for c in consumers]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        for consumer in consumers:
            consumer.shutdown()
    by_group: dict[str, list[bytes]] = {}
    for received in delivered:
        by_group.setdefault(received.message_group, []).append(received.body)
    assert by_group == sent


def test_a_grpc_send_is_pulled_over_http_with_its_tag_keys_group_and_properties(
    face: Face, producer: Producer
) -> None:
    topic = face.topic("grpc-to-http", queues=1)
    receipt = producer.send(
        message(topic, b"across", tag="t", keys="k-1", group="g-1", properties={"region": "eu"})
    )
    pulled = face.http.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0})
    [stored] = pulled.json()["messages"]
    assert stored["body"] == "across"
    assert stored["tags"] == "t"
    assert stored["keys"] == ["k-1"]
    assert stored["properties"]["region"] == "eu"
    assert stored["properties"]["__SHARDINGKEY"] == "g-1"  # the message group
    assert stored["properties"]["UNIQ_KEY"] == receipt.message_id


def test_an_http_send_is_received_by_a_simple_consumer(face: Face) -> None:
    topic = face.topic("http-to-grpc")
    sent = {"body": "from http", "tags": "h", "keys": ["k-2"], "properties": {"size": "9"}}
    assert face.http.post(f"/v1/topics/{topic}/messages", json=sent).status_code == 201
    consumer = consumer_of(face, "http-to-grpc-workers", topic)
    try:
        [received] = receive_all(consumer, 1)
    finally:
        consumer.shutdown()
    assert (received.body, received.tag, received.keys) == (b"from http", "h", {"k-2"})
    assert received.properties == {"size": "9"}


def test_status_codes_answer_as_rocketmqs_proxy(face: Face) -> None:
    with grpc.insecure_channel(face.address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        route = stub.QueryRoute(
            service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="%DLQ%nobody"))
        )
        assert route.status.code == definition_pb2.Code.ILLEGAL_TOPIC
        ack = stub.AckMessage(
            service_pb2.AckMessageRequest(
                group=definition_pb2.Resource(name="g"),
                topic=definition_pb2.Resource(name="t"),
                entries=[service_pb2.AckMessageEntry(message_id="m", receipt_handle="nonsense")],
            )
        )
        assert ack.entries[0].status.code == definition_pb2.Code.INVALID_RECEIPT_HANDLE
        with pytest.raises(grpc.RpcError) as raised:
            stub.SyncLiteSubscription(service_pb2.SyncLiteSubscriptionRequest())
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


class FailingListener(MessageListener):  # type: ignore[misc]
    """Fails every delivery of the messages whose body starts with ``bad``; counts deliveries."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: dict[bytes, list[int]] = {}

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.deliveries.setdefault(message.body, []).append(message.delivery_attempt)
        return ConsumeResult.FAILURE if message.body.startswith(b"bad") else ConsumeResult.SUCCESS


def test_a_push_consumer_retries_what_its_listener_fails_then_it_goes_to_the_dlq(
    face: Face, producer: Producer
) -> None:
    topic = face.topic("grpc-push")
    group = "grpc-push-workers"
    response = face.http.put(f"/v1/groups/{group}", json={"retry_max_times": 1})
    assert response.status_code in (200, 201)
    for body in (b"good-1", b"bad-1", b"good-2"):
        producer.send(message(topic, body))
    listener = FailingListener()
    consumer = PushConsumer(face.config(), group, listener, {topic: FilterExpression()})
    consumer.startup()
    try:
        dead: list[dict[str, object]] = []
        deadline = time.monotonic() + DEADLINE_S
        while not dead and time.monotonic() < deadline:
            dead = face.http.get(f"/v1/groups/{group}/dlq/messages").json()["messages"]
            time.sleep(0.2)
    finally:
        consumer.shutdown()
    assert [m["body"] for m in dead] == ["bad-1"]
    assert listener.deliveries[b"bad-1"] == [1, 2]  # the first delivery, and one retry
    assert listener.deliveries[b"good-1"] == [1]
    assert listener.deliveries[b"good-2"] == [1]


def test_a_received_message_forwarded_to_the_dead_letter_queue_is_there_and_acked(
    face: Face, producer: Producer
) -> None:
    topic = face.topic("grpc-forward", queues=1)
    group = "grpc-forward-workers"
    producer.send(message(topic, b"poison"))
    consumer = consumer_of(face, group, topic)
    try:
        [received] = receive_all(consumer, 1, ack=False)
    finally:
        consumer.shutdown()
    with grpc.insecure_channel(face.address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        forwarded = stub.ForwardMessageToDeadLetterQueue(
            service_pb2.ForwardMessageToDeadLetterQueueRequest(
                group=definition_pb2.Resource(name=group),
                topic=definition_pb2.Resource(name=topic),
                receipt_handle=received.receipt_handle,
                message_id=received.message_id,
                delivery_attempt=1,
                max_delivery_attempts=16,
            )
        )
    assert forwarded.status.code == definition_pb2.Code.OK
    [dead] = face.http.get(f"/v1/groups/{group}/dlq/messages").json()["messages"]
    assert dead["body"] == "poison"
    in_flight = face.http.get(f"/v1/groups/{group}/in-flight").json()
    assert in_flight["total"] == 0  # acked: it does not come back


def test_a_delayed_message_recalled_before_it_is_due_is_never_delivered(
    face: Face, producer: Producer
) -> None:
    topic = face.topic("grpc-recall", queues=1)
    due_s = int(time.time()) + 4
    recalled = producer.send(message(topic, b"recalled", deliver_at_s=due_s))
    kept = producer.send(message(topic, b"kept", deliver_at_s=due_s))
    assert recalled.recall_handle and kept.recall_handle
    assert producer.recall_message(topic, recalled.recall_handle) == recalled.message_id
    consumer = consumer_of(face, "grpc-recall-workers", topic)
    try:
        [received] = receive_all(consumer, 1)
        assert received.body == b"kept"
        assert consumer.receive(16, 30) == []  # the recalled one never comes
    finally:
        consumer.shutdown()
    with grpc.insecure_channel(face.address) as channel:  # too late: it was delivered
        late = service_pb2_grpc.MessagingServiceStub(channel).RecallMessage(
            service_pb2.RecallMessageRequest(
                topic=definition_pb2.Resource(name=topic), recall_handle=kept.recall_handle
            )
        )
    assert late.status.code == definition_pb2.Code.PRECONDITION_FAILED
