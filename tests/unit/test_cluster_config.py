"""The runner's cluster.yaml: what validate refuses (no fast link, placeholders, one host twice, hostile values), and
how a sound one reaches the profile it names."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.errors import ConfigError
from pipeline.nightly import NightPlan, weights_wanted
from pipeline.places import RunDir
from tests.corpus import BASE


def _config(tmp_path: Path, cluster: dict[str, Any]) -> ConfigPaths:
    shutil.copytree(BASE, tmp_path, dirs_exist_ok=True)
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
    return ConfigPaths(
        tmp_path / "models.yaml", tmp_path / "thresholds", tmp_path / "golden", tmp_path / "cluster.yaml"
    )


def _node(name: str, address: str, **interconnect: str) -> dict[str, Any]:
    return {"name": name, "interconnect": {"interface": "enp1s0f1np1", "address": address} | interconnect}


TWO = {
    "version": 1,
    "profile": "spark",
    "nodes": [_node("gx10-a", "192.168.177.11"), _node("gx10-b", "192.168.177.12")],
}


def _issues(paths: ConfigPaths) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(paths)
    return [str(issue) for issue in caught.value.issues]


def test_a_sound_cluster_reaches_its_profile_and_only_it(tmp_path: Path) -> None:
    nodes = [
        _node("gx10-a", "192.168.177.11", rdma=["rocep1s0f1", "roceP2p1s0f1"]),
        _node("gx10-b", "192.168.177.12", rdma="rocep1s0f1") | {"cache_dir": "~/cache"},
    ]
    raw = {"version": 1, "profile": "spark", "ray_port": 6380, "ssh_config": "~/.ssh/sparks", "nodes": nodes}
    config = load_config(_config(tmp_path, raw))
    cluster = config.matrix.profiles["spark"].cluster
    assert cluster is not None and cluster.ray_port == 6380
    assert cluster.head.rdma == ("rocep1s0f1", "roceP2p1s0f1") and cluster.nodes[1].rdma == ("rocep1s0f1",)
    home = str(Path.home())
    assert cluster.ssh_config == f"{home}/.ssh/sparks" and cluster.nodes[1].cache_dir == f"{home}/cache"
    assert [n.address for n in cluster.first(2)] == ["192.168.177.11", "192.168.177.12"]
    assert config.matrix.profiles["cpu"].cluster is None


def test_two_hosts_on_one_machine_each_get_their_own_gpu_through_their_env(tmp_path: Path) -> None:
    nvls_off = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    nodes = [
        _node("gpu-a", "10.77.0.1") | {"env": {"CUDA_VISIBLE_DEVICES": "0"} | nvls_off},
        _node("gpu-b", "10.77.0.2") | {"env": {"CUDA_VISIBLE_DEVICES": "1"} | nvls_off},
    ]
    cluster = (
        load_config(_config(tmp_path, {"version": 1, "profile": "spark", "nodes": nodes}))
        .matrix.profiles["spark"]
        .cluster
    )
    assert cluster is not None
    assert [dict(n.env)["CUDA_VISIBLE_DEVICES"] for n in cluster.nodes] == ["0", "1"]
    assert all(dict(n.env)["NCCL_NVLS_ENABLE"] == "0" for n in cluster.nodes)


def test_no_cluster_file_leaves_the_cluster_entries_to_be_skipped(tmp_path: Path) -> None:
    paths = _config(tmp_path, {})
    (tmp_path / "cluster.yaml").unlink()
    config = load_config(paths)
    spark = config.matrix.profiles["spark"]
    assert spark.cluster is None
    entries = config.matrix.select("spark", ())
    lacking = [e.id for e in entries if spark.lacks_hosts_for(e)]
    assert lacking == [e.id for e in entries if e.topology == "cluster"] and len(lacking) == 1
    solo = config.matrix.select("cpu", ())
    assert solo and not [e.id for e in solo if config.matrix.profiles["cpu"].lacks_hosts_for(e)]


def test_a_night_fetches_no_weights_for_an_entry_it_lacks_the_hosts_for_nor_one_already_run(tmp_path: Path) -> None:
    paths = _config(tmp_path / "config", {})
    (tmp_path / "config" / "cluster.yaml").unlink()
    config = load_config(paths)
    spark = config.matrix.profiles["spark"]
    # the spark profile's cluster entry beside the cpu profile's solo one, as a matrix of both kinds would be
    entries = (*config.matrix.select("spark", ()), *config.matrix.select("cpu", ()))
    assert [e.topology for e in entries] == ["cluster", "solo"]
    run = RunDir(tmp_path / "run")
    plan = NightPlan("r1", "2026-11-29", run, spark, entries)
    assert [e.id for e in weights_wanted(plan)] == [entries[1].id]
    with_hosts = replace(
        plan,
        profile=replace(spark, cluster=load_config(_config(tmp_path / "two", TWO)).matrix.profiles["spark"].cluster),
    )
    assert [e.id for e in weights_wanted(with_hosts)] == [e.id for e in entries]
    run.entry(entries[1].id).parent.mkdir(parents=True)
    run.entry(entries[1].id).write_text("{}")  # already run: a resumed night
    assert [e.id for e in weights_wanted(with_hosts)] == [entries[0].id]


def test_a_runner_with_a_cluster_has_the_hosts_for_every_entry(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, TWO))
    entries = config.matrix.select("spark", ())
    assert [e.topology for e in entries] == ["cluster"]
    assert not [e.id for e in entries if config.matrix.profiles["spark"].lacks_hosts_for(e)]


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([_node("-oProxyCommand=touch x", "192.168.177.11"), _node("b", "192.168.177.12")], "nodes[0].name"),
        ([_node("a", "192.168.177.11"), {"name": "b"}], "missing required key 'interconnect'"),
        ([_node("a", "192.168.177.11"), _node("b", "spark-b")], "nodes[1].interconnect.address"),
        ([_node("a", "192.168.177.11")], "nodes: "),  # one node is no cluster
        ([_node("localhost", "127.0.0.1"), _node("b", "192.168.177.12")], "loopback"),
        ([_node("a", "192.168.177.11"), _node("a.example", "203.0.113.9")], "placeholder"),
        ([_node("a", "192.168.177.11") | {"cache_dir": "/c"}, _node("b", "192.168.177.12")], "remove cache_dir"),
        ([_node("a", "192.168.177.11"), _node("b", "192.168.177.12") | {"cache_dir": "c"}], "not an absolute path"),
        ([_node("a", "192.168.177.11", rdma="mlx5_0,mlx5_1"), _node("b", "192.168.177.12")], "rdma"),
        (
            [_node("a", "192.168.177.11") | {"env": {"NCCL_SOCKET_IFNAME": "eth0"}}, _node("b", "192.168.177.12")],
            "nodes[0].env.NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME is set by the launch from this node's interconnect",
        ),
        ([_node("a", "192.168.177.11") | {"env": {"-x": "1"}}, _node("b", "192.168.177.12")], "nodes[0].env"),
        ([_node("a", "192.168.177.11") | {"env": {"CUDA_VISIBLE_DEVICES": 0}}, _node("b", "192.168.177.12")], "env"),
    ],
)
def test_validate_refuses_a_cluster_that_cannot_be_two_hosts_on_a_link(
    tmp_path: Path, nodes: list[dict[str, Any]], expected: str
) -> None:
    issues = _issues(_config(tmp_path, {"version": 1, "profile": "spark", "nodes": nodes}))
    assert any(expected in issue and "cluster.yaml:" in issue for issue in issues), issues


def test_a_cluster_for_an_unknown_profile_is_named(tmp_path: Path) -> None:
    nodes = [_node("a", "192.168.177.11"), _node("b", "192.168.177.12")]
    issues = _issues(_config(tmp_path, {"version": 1, "profile": "gb200", "nodes": nodes}))
    assert any("unknown profile 'gb200'" in issue for issue in issues), issues
