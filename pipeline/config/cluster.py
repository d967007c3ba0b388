"""The runner's cluster (cluster.yaml): which hosts a cluster entry spans and the fast link between them.

Host names, addresses and interfaces belong to one runner, not to the matrix every runner shares: they live in a file
of the runner's own (paths.cluster, outside the checkout), and a runner without one skips its cluster entries.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.load import Document
from pipeline.errors import ConfigIssue

DEFAULT_RAY_PORT = 6379
# Names and addresses that only documentation uses (RFC 2606 and RFC 5737): an example copied and not filled in
PLACEHOLDER_DOMAINS = (".example", ".invalid")
DOCUMENTATION_NETWORKS = tuple(ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))
ONE_HOST_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# What the launch sets on each node from its interconnect (cluster_launch.interconnect_env): a node's own `env` may
# not set these, so the fast link is chosen by the product, never by a variable left over
INTERCONNECT_VARIABLES = frozenset(
    {
        "VLLM_HOST_IP",
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
        "NCCL_IB_HCA",
        "NCCL_IB_DISABLE",
        "RAY_memory_monitor_refresh_ms",
    }
)


@dataclass(frozen=True)
class Node:
    """One host of the cluster: its ssh name and its end of the fast link."""

    name: str
    interface: str  # the fast link's interface: NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, UCX_NET_DEVICES
    address: str  # where Ray listens on this host (--node-ip-address) and VLLM_HOST_IP
    rdma: tuple[str, ...] = ()  # the RDMA devices of that port (NCCL_IB_HCA); none: NCCL over TCP sockets
    cache_dir: str | None = None  # paths.cache on this host, when it differs from the runner's
    # variables of this host's processes (Ray, and the API server on the head): the GPU it serves with
    # (CUDA_VISIBLE_DEVICES where two hosts share one machine), NCCL settings its machine needs
    env: tuple[tuple[str, str], ...] = ()

    @property
    def on_link(self) -> str:
        """The host as messages and the summary name it: "spark-a (fast0 10.125.1.1)"."""
        return f"{self.name} ({self.interface} {self.address})"


@dataclass(frozen=True)
class Cluster:
    """The runner's hosts, the head (the runner itself) first."""

    profile: str
    nodes: tuple[Node, ...]
    source: str  # the file it was read from, for messages
    ssh_config: str | None = None
    ray_port: int = DEFAULT_RAY_PORT

    @property
    def head(self) -> Node:
        return self.nodes[0]

    def first(self, count: int) -> tuple[Node, ...]:
        """The nodes an entry of `count` nodes runs on: the head and the next count-1."""
        return self.nodes[:count]


def build_cluster(doc: Document) -> Cluster:
    """The Cluster of a schema-checked cluster.yaml; `~` expanded, an ssh config named relative to the file."""
    data = doc.data
    nodes = tuple(
        Node(
            name=raw["name"],
            interface=raw["interconnect"]["interface"],
            address=raw["interconnect"]["address"],
            rdma=_devices(raw["interconnect"].get("rdma")),
            cache_dir=os.path.expanduser(raw["cache_dir"]) if "cache_dir" in raw else None,
            env=tuple(sorted((str(k), str(v)) for k, v in raw.get("env", {}).items())),
        )
        for raw in data["nodes"]
    )
    ssh_config = data.get("ssh_config")
    if ssh_config is not None:
        ssh_config = str(Path(doc.file).parent / os.path.expanduser(ssh_config))
    return Cluster(data["profile"], nodes, doc.file, ssh_config, data.get("ray_port", DEFAULT_RAY_PORT))


def _devices(raw: str | list[str] | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    return (raw,) if isinstance(raw, str) else tuple(raw)


def cluster_issues(doc: Document, cluster: Cluster, profiles: Sequence[str]) -> Iterator[ConfigIssue]:
    """A cluster that cannot be separate hosts on one link: an unknown profile, placeholders, one host twice."""
    known = tuple(profiles)
    if cluster.profile not in known:
        yield doc.issue(("profile",), f"unknown profile '{cluster.profile}'; models.yaml has {', '.join(known)}")
    seen_names: dict[str, int] = {}
    seen_addresses: dict[str, int] = {}
    for index, node in enumerate(cluster.nodes):
        where = ("nodes", index)
        if node.name.lower().endswith(PLACEHOLDER_DOMAINS):
            yield doc.issue(
                (*where, "name"), f"'{node.name}' is a placeholder: put the host's ssh name (its Host in ~/.ssh/config)"
            )
        address = ipaddress.ip_address(node.address)
        if any(address in network for network in DOCUMENTATION_NETWORKS):
            yield doc.issue(
                (*where, "interconnect", "address"),
                f"{node.address} is a documentation address: put the host's address on the fast link (ip -br addr)",
            )
        if node.name.lower() in ONE_HOST_NAMES or address.is_loopback or address.is_unspecified:
            yield doc.issue(
                (*where, "interconnect" if address.is_loopback or address.is_unspecified else "name"),
                f"node {index + 1} is this host's loopback ({node.name}, {node.address}): a cluster is separate hosts",
            )
        if node.name in seen_names:
            yield doc.issue(
                (*where, "name"),
                f"'{node.name}' is node {seen_names[node.name] + 1} again: the nodes of a cluster are separate hosts",
            )
        if node.address in seen_addresses:
            yield doc.issue(
                (*where, "interconnect", "address"),
                f"{node.address} is node {seen_addresses[node.address] + 1}'s address too: each host has its own",
            )
        if node.cache_dir is not None and (index == 0 or not node.cache_dir.startswith("/")):
            yield doc.issue(
                (*where, "cache_dir"),
                "the head's cache is the runner's paths.cache: remove cache_dir here"
                if index == 0
                else f"'{node.cache_dir}' is not an absolute path: write the node's paths.cache in full",
            )
        yield from _env_issues(doc, index, node)
        seen_names.setdefault(node.name, index)
        seen_addresses.setdefault(node.address, index)


def _env_issues(doc: Document, index: int, node: Node) -> Iterator[ConfigIssue]:
    for name, _value in node.env:
        if name in INTERCONNECT_VARIABLES:
            yield doc.issue(
                ("nodes", index, "env", name),
                f"{name} is set by the launch from this node's interconnect: remove it here (the fast link is "
                "named by interconnect.interface and interconnect.address)",
            )
