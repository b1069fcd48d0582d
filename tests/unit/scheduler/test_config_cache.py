"""Configuration validation and the columnar cache's bookkeeping."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from scheduler.cache import EventKind, SchedulerCache
from scheduler.config import ConfigError, parse_config
from tests.unit.scheduler.builders import NodeBuilder, PodBuilder


def test_default_config() -> None:
    cfg = parse_config(None)
    assert cfg.percentage_of_nodes_to_score == 0
    assert [n for n, _ in cfg.profile.plugins][:3] == [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
    ]
    assert dict(cfg.profile.plugins)["TaintToleration"] == 3


def test_config_enable_disable_and_args() -> None:
    cfg = parse_config(
        yaml.safe_load(
            """
percentageOfNodesToScore: 30
profiles:
  - schedulerName: fast
    plugins:
      disabled: [{name: ImageLocality}]
      enabled: [{name: NodeResourcesFit, weight: 4}]
    pluginConfig:
      - name: NodeResourcesFit
        args: {scoringStrategy: {type: MostAllocated}}
"""
        )
    )
    names = dict(cfg.profile.plugins)
    assert "ImageLocality" not in names
    assert names["NodeResourcesFit"] == 4
    assert cfg.profile.scheduler_name == "fast"
    assert cfg.profile.args["NodeResourcesFit"]["scoringStrategy"]["type"] == "MostAllocated"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"percentageOfNodesToScore": 101}, "percentageOfNodesToScore"),
        ({"bogus": 1}, "bogus"),
        (
            {"profiles": [{"plugins": {"enabled": [{"name": "Foo"}]}}]},
            "profiles[0].plugins.enabled[0].name",
        ),
        (
            {"profiles": [{"plugins": {"enabled": [{"name": "NodeAffinity", "weight": 0}]}}]},
            "profiles[0].plugins.enabled[0].weight",
        ),
        (
            {"profiles": [{"plugins": {"disabled": [{"name": 3}]}}]},
            "profiles[0].plugins.disabled[0].name",
        ),
        ({"profiles": [{"pluginConfig": [{"name": "Nope"}]}]}, "profiles[0].pluginConfig[0].name"),
        ({"podMaxBackoffSeconds": -1}, "podMaxBackoffSeconds"),
        ({"profiles": [{}, {}]}, "profiles"),
    ],
)
def test_config_errors_name_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")


def test_node_slots_reused_and_events() -> None:
    c = SchedulerCache()
    assert c.add_node(NodeBuilder("a").obj()) >= {EventKind.NODE_ADD}
    c.add_node(NodeBuilder("b").labels(zone="z").obj())
    c.remove_node("a")
    assert c.nodes.count == 1 and not c.nodes.valid[0]
    c.add_node(NodeBuilder("c").obj())
    assert c.nodes.index["c"] == 0  # the free slot was reused
    assert c.update_node(NodeBuilder("c").obj()) == set()  # nothing changed
    assert c.update_node(NodeBuilder("c").labels(x="1").obj()) == {EventKind.NODE_LABEL}
    assert c.update_node(NodeBuilder("c").labels(x="1").taint("k").obj()) == {EventKind.NODE_TAINT}


def test_grows_beyond_initial_capacity() -> None:
    c = SchedulerCache()
    for i in range(200):
        c.add_node(NodeBuilder(f"n{i}").labels(i=str(i)).obj())
    assert c.nodes.count == 200
    assert c.nodes.labels["i"].ids[199] == 199
    assert int(c.nodes.alloc_cpu[150]) == 4000


def test_pod_accounting_assume_confirm_remove() -> None:
    c = SchedulerCache()
    c.add_node(NodeBuilder("a").obj())
    info = PodBuilder("p").req(cpu="1", memory="1Gi").info()
    c.assume(info, "a")
    assert int(c.nodes.req_cpu[0]) == 1000 and int(c.nodes.req_pods[0]) == 1
    bound = PodBuilder("p").req(cpu="1", memory="1Gi").node_name("a").info()
    c.add_pod(bound)  # confirmation: counted once
    assert int(c.nodes.req_cpu[0]) == 1000 and not c.is_assumed("default/p")
    c.remove_pod("default/p")
    assert int(c.nodes.req_cpu[0]) == 0 and int(c.nodes.req_mem[0]) == 0
    assert int(c.nodes.nz_cpu[0]) == 0


def test_forget_undoes_assume() -> None:
    c = SchedulerCache()
    c.add_node(NodeBuilder("a").alloc_extra("example.com/gpu", "2").obj())
    info = PodBuilder("p").req(example_com__gpu="1").info()
    c.assume(info, "a")
    assert int(c.nodes.ext["example.com/gpu"].req[0]) == 1  # whole units, as kube-scheduler
    c.forget("default/p")
    assert int(c.nodes.ext["example.com/gpu"].req[0]) == 0


def test_removed_node_keeps_its_pods_for_its_return() -> None:
    c = SchedulerCache()
    c.add_node(NodeBuilder("a").obj())
    c.add_pod(PodBuilder("p").req(cpu="1").node_name("a").info())
    c.remove_node("a")
    c.add_node(NodeBuilder("a").obj())
    assert int(c.nodes.req_cpu[c.nodes.index["a"]]) == 1000


def test_assumed_pod_bound_elsewhere_is_moved() -> None:
    c = SchedulerCache()
    c.add_node(NodeBuilder("a").obj())
    c.add_node(NodeBuilder("b").obj())
    c.assume(PodBuilder("p").req(cpu="1").info(), "a")
    c.add_pod(PodBuilder("p").req(cpu="1").node_name("b").info())  # another binder won
    assert not c.is_assumed("default/p")
    assert [int(x) for x in c.nodes.req_cpu[:2]] == [0, 1000]
    assert c.is_confirmed("default/p", "uid-p", "b")
