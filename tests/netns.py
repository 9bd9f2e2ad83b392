"""Network namespaces for the partition tests: one namespace per process (etcd, each broker,
the proxy, the test's client), each with a veth pair to a bridge in a namespace of its own, so
nothing is added to the host's interfaces, routes or firewall.

Every name starts with :data:`PREFIX` and the PID of the process that made it
(``smqp<pid>-<node>``); :meth:`Network.create` first removes the namespaces of earlier runs
whose process is gone (a crashed test leaves nothing for long), and :meth:`Network.destroy`
removes everything this one made, also after a failure. The addresses come from a private
/24 that only these namespaces know (each has no route but its own subnet): traffic never
leaves them.

A partition between two nodes is a silent one: each side's neighbour entry for the other
is pinned (``nud permanent``) to a MAC address nobody owns, so the frames go out onto the
bridge and vanish. Neither sender gets an error — as when a switch or a link fails, TCP
retransmits until its own timeouts give up, a connect hangs. A ``blackhole`` or
``unreachable`` route instead fails the sender at once (EINVAL, EHOSTUNREACH), which a
program sees as a refused connection: a fast, clear error that a real partition does not
give. Healing puts the entries back to normal (the next packet asks ARP again).

Delay and loss use ``tc netem`` on both ends of a node's link, where the kernel has
``sch_netem`` (:func:`netem_available`). Without it, loss alone comes from a classic BPF
program in ``cls_bpf``'s direct-action mode on the ``clsact`` egress hook of both ends
(:func:`bpf_loss_available`): it drops a packet when a random number (``ld rand``) falls in
the top ``loss`` share of its range — no action module needed. Delay has no such stand-in.

Processes run in a namespace through ``ip netns exec`` (which execs the command: the PID
the caller holds is the program's own); the test's own calls enter the client namespace
from threads of their own (``setns`` changes only the calling thread's namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

PREFIX = "smqp"
"""Every namespace the harness makes is named ``smqp<pid>-<node>``."""
BRIDGE_NODE = "br"
UNOWNED_MAC = "02:00:5e:00:de:ad"
"""A locally administered address no interface of the test network has."""
CLONE_NEWNET = 0x40000000
SKF_AD_RANDOM = 0xFFFFF000 + 56
"""Classic BPF's ancillary load of a random u32 (``ld rand``)."""
TC_ACT_OK = 0
TC_ACT_SHOT = 2
T = TypeVar("T")


def root_skip_reason() -> str | None:
    """Why the partition tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "the partition tests make network namespaces: they need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "the partition tests need iproute2's ip and tc (make test installs iproute2)"
    return None


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=30)


@dataclass(frozen=True, slots=True)
class Node:
    """One namespace on the test network."""

    name: str
    namespace: str
    address: str
    bridge_port: str  # the veth's end in the bridge's namespace


@dataclass
class Network:
    """Namespaces ``nodes`` on one bridge; partitions, flaps and netem between them."""

    nodes: Sequence[str]
    subnet: str = field(default_factory=lambda: f"10.213.{os.getpid() % 250}")
    by_name: dict[str, Node] = field(default_factory=dict)
    _cuts: set[frozenset[str]] = field(default_factory=set)
    _executors: dict[str, ThreadPoolExecutor] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return f"{PREFIX}{os.getpid()}"

    def namespace(self, node: str) -> str:
        return f"{self.tag}-{node}"

    def create(self) -> Network:
        remove_leftovers()
        bridge = self.namespace(BRIDGE_NODE)
        try:
            run("ip", "netns", "add", bridge)
            run("ip", "-n", bridge, "link", "add", "br0", "type", "bridge")
            run("ip", "-n", bridge, "link", "set", "br0", "up")
            for index, name in enumerate(self.nodes, start=2):
                self.by_name[name] = self._add_node(name, f"{self.subnet}.{index}", index)
        except BaseException:
            self.destroy()
            raise
        return self

    def _add_node(self, name: str, address: str, index: int) -> Node:
        namespace = self.namespace(name)
        port = f"p{index}"
        bridge = self.namespace(BRIDGE_NODE)
        run("ip", "netns", "add", namespace)
        run(
            "ip",
            "-n",
            namespace,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            port,
            "netns",
            bridge,
        )
        run("ip", "-n", bridge, "link", "set", port, "master", "br0", "up")
        run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        run("ip", "-n", namespace, "link", "set", "eth0", "up")
        run("ip", "-n", namespace, "link", "set", "lo", "up")
        return Node(name, namespace, address, port)

    def __getitem__(self, node: str) -> Node:
        return self.by_name[node]

    def address(self, node: str) -> str:
        return self.by_name[node].address

    def exec_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``node``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    # ------------------------------------------------------------ the test's own calls

    def call(self, node: str, fn: Callable[[], T]) -> T:
        """``fn()`` on a thread that lives in ``node``'s namespace (one thread per node)."""
        executor = self._executors.get(node)
        if executor is None:
            executor = ThreadPoolExecutor(
                1, f"netns-{node}", initializer=enter_namespace, initargs=(self.namespace(node),)
            )
            self._executors[node] = executor
        return executor.submit(fn).result()

    def thread(self, node: str, target: Callable[[], None]) -> threading.Thread:
        """A started daemon thread running ``target`` in ``node``'s namespace."""

        def inside() -> None:
            enter_namespace(self.namespace(node))
            target()

        started = threading.Thread(target=inside, daemon=True, name=f"netns-{node}")
        started.start()
        return started

    # ------------------------------------------------------------ partitions

    def cut(self, a: str, b: str) -> None:
        """Drop everything between ``a`` and ``b``, silently, both ways."""
        self._pin(a, b, UNOWNED_MAC)
        self._pin(b, a, UNOWNED_MAC)
        self._cuts.add(frozenset((a, b)))

    def heal(self, a: str, b: str) -> None:
        self._unpin(a, b)
        self._unpin(b, a)
        self._cuts.discard(frozenset((a, b)))

    def isolate(self, node: str, others: Sequence[str]) -> None:
        for other in others:
            self.cut(node, other)

    def heal_all(self) -> None:
        for a, b in [tuple(pair) for pair in self._cuts]:
            self.heal(a, b)

    def _pin(self, at: str, peer: str, mac: str) -> None:
        run(
            "ip",
            "-n",
            self.namespace(at),
            "neigh",
            "replace",
            self.address(peer),
            "lladdr",
            mac,
            "nud",
            "permanent",
            "dev",
            "eth0",
        )

    def _unpin(self, at: str, peer: str) -> None:
        run(
            "ip",
            "-n",
            self.namespace(at),
            "neigh",
            "del",
            self.address(peer),
            "dev",
            "eth0",
            check=False,
        )

    # ------------------------------------------------------------ slow links

    def netem(self, node: str, delay_ms: int, jitter_ms: int, loss_percent: float) -> None:
        """Delay and loss on ``node``'s link, both ways (needs ``sch_netem``)."""
        spec = ["delay", f"{delay_ms}ms", f"{jitter_ms}ms", "loss", f"{loss_percent}%"]
        bridge = self.namespace(BRIDGE_NODE)
        run(
            "tc",
            "-n",
            self.namespace(node),
            "qdisc",
            "replace",
            "dev",
            "eth0",
            "root",
            "netem",
            *spec,
        )
        run(
            "tc",
            "-n",
            bridge,
            "qdisc",
            "replace",
            "dev",
            self[node].bridge_port,
            "root",
            "netem",
            *spec,
        )

    def lose(self, node: str, loss_percent: float) -> None:
        """Drop ``loss_percent`` % of the packets on ``node``'s link, both ways (cls_bpf)."""
        program = loss_program(loss_percent)
        for namespace, device in self._link_ends(node):
            run("tc", "-n", namespace, "qdisc", "replace", "dev", device, "clsact")
            run(
                "tc", "-n", namespace, "filter", "replace", "dev", device, "egress",
                "prio", "1", "handle", "1", "bpf", "bytecode", program, "da",
            )  # fmt: skip

    def clear_loss(self, node: str) -> None:
        for namespace, device in self._link_ends(node):
            run("tc", "-n", namespace, "qdisc", "del", "dev", device, "clsact", check=False)

    def _link_ends(self, node: str) -> list[tuple[str, str]]:
        """The two ends of ``node``'s link: its eth0, the bridge's port (namespace, device)."""
        return [
            (self.namespace(node), "eth0"),
            (self.namespace(BRIDGE_NODE), self[node].bridge_port),
        ]

    def clear_netem(self, node: str) -> None:
        bridge = self.namespace(BRIDGE_NODE)
        run("tc", "-n", self.namespace(node), "qdisc", "del", "dev", "eth0", "root", check=False)
        run("tc", "-n", bridge, "qdisc", "del", "dev", self[node].bridge_port, "root", check=False)

    # ------------------------------------------------------------ teardown

    def destroy(self) -> None:
        """Remove every namespace of this network (their veths go with them)."""
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)
        self._executors.clear()
        for name in own_namespaces(self.tag):
            delete_namespace(name)


def enter_namespace(namespace: str) -> None:
    """Move the calling thread into ``namespace`` (its sockets are made there from now on)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def listed_namespaces() -> list[str]:
    shown = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in shown.splitlines() if line.strip()]


def own_namespaces(tag: str) -> list[str]:
    """The namespaces named ``<tag>-...``, the bridge's last (its ports go with the nodes)."""
    names = [n for n in listed_namespaces() if n.startswith(f"{tag}-")]
    return sorted(names, key=lambda n: n == f"{tag}-{BRIDGE_NODE}")


def remove_leftovers() -> None:
    """Remove the namespaces of earlier runs whose process has gone (a crashed test's)."""
    tags = {n.split("-")[0] for n in listed_namespaces() if n.startswith(PREFIX)}
    for tag in tags:
        pid = tag.removeprefix(PREFIX)
        if pid.isdigit() and not _alive(int(pid)):
            for name in own_namespaces(tag):
                delete_namespace(name)


def delete_namespace(name: str) -> None:
    """Kill what still runs in ``name`` (only the harness starts processes there), then
    delete it."""
    for pid in run("ip", "netns", "pids", name, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), 9)
    run("ip", "netns", "del", name, check=False)


def netem_available() -> bool:
    """Whether the kernel has ``sch_netem`` (tried on a namespace of its own)."""
    if root_skip_reason() is not None:
        return False
    probe = f"{PREFIX}{os.getpid()}-netem-probe"
    try:
        if run("ip", "netns", "add", probe, check=False).returncode != 0:
            return False
        tried = run(
            "tc",
            "-n",
            probe,
            "qdisc",
            "add",
            "dev",
            "lo",
            "root",
            "netem",
            "delay",
            "1ms",
            check=False,
        )
        return tried.returncode == 0
    finally:
        run("ip", "netns", "del", probe, check=False)


def loss_program(loss_percent: float) -> str:
    """``tc``'s bytecode of a classic BPF program for direct-action mode: a random u32 above
    ``(1 - loss)`` of its range drops the packet (TC_ACT_SHOT), else it passes (TC_ACT_OK)."""
    threshold = int((1 - loss_percent / 100) * 0xFFFFFFFF)
    instructions = [
        (0x20, 0, 0, SKF_AD_RANDOM),  # ld [rand]
        (0x25, 0, 1, threshold),  # jgt threshold: the next one, else skip it
        (0x06, 0, 0, TC_ACT_SHOT),  # ret
        (0x06, 0, 0, TC_ACT_OK),  # ret
    ]
    return f"{len(instructions)}," + "".join(f"{c} {t} {f} {k}," for c, t, f, k in instructions)


def bpf_loss_available() -> bool:
    """Whether ``cls_bpf`` takes the loss program (tried on a namespace of its own)."""
    if root_skip_reason() is not None:
        return False
    probe = f"{PREFIX}{os.getpid()}-bpf-probe"
    try:
        if run("ip", "netns", "add", probe, check=False).returncode != 0:
            return False
        if run("tc", "-n", probe, "qdisc", "add", "dev", "lo", "clsact", check=False).returncode:
            return False
        tried = run(
            "tc", "-n", probe, "filter", "add", "dev", "lo", "egress",
            "bpf", "bytecode", loss_program(5), "da", check=False,
        )  # fmt: skip
        return tried.returncode == 0
    finally:
        run("ip", "netns", "del", probe, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def network(nodes: Sequence[str]) -> Iterator[Network]:
    """A :class:`Network` of ``nodes``, destroyed on the way out whatever happened."""
    net = Network(nodes).create()
    try:
        yield net
    finally:
        net.destroy()
