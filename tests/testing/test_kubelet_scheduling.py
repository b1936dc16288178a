"""kube-scheduler's choice and explanations, and the kubelet's container environment (pure)."""

from __future__ import annotations

import base64
from fractions import Fraction
from typing import Any

import pytest

from iris.testing.fake_apiserver import CONFIGMAPS, SECRETS
from iris.testing.kubelet_sim import NodeInfo, schedule_pod
from iris.testing.kubelet_sim.container_env import (
    ContainerConfigError,
    build_environment,
    container_argv,
    expand,
)


def node(name: str, cpu: int = 4, **labels: str) -> NodeInfo:
    return NodeInfo(
        name,
        {"kubernetes.io/hostname": name, **labels},
        {"cpu": Fraction(cpu), "memory": Fraction(8 * 2**30), "pods": Fraction(110)},
    )


def pod(cpu: str = "1", **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **spec}}


def test_picks_the_least_loaded_feasible_node() -> None:
    placement = schedule_pod(pod(), [node("a"), node("b")], {"a": {"cpu": Fraction(3)}})
    assert placement.node == "b"


@pytest.mark.parametrize(
    ("the_pod", "nodes", "used", "message"),
    [
        (pod(nodeSelector={"pool": "gpu"}), [node("a"), node("b"), node("c")], {},
         "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."),
        (pod("3", nodeSelector={"pool": "x"}), [node("a", pool="x"), node("b")], {"a": {"cpu": Fraction(2)}},
         "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector."),
        (pod("8"), [node("a")], {}, "0/1 nodes are available: 1 Insufficient cpu."),
        (pod(), [], {}, "no nodes available to schedule pods"),
    ],
)  # fmt: skip
def test_unschedulable_messages(the_pod: dict, nodes: list[NodeInfo], used: dict, message: str) -> None:
    placement = schedule_pod(the_pod, nodes, used)
    assert placement.node is None and placement.message == message


def test_affinity_and_taints() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}]}}}  # fmt: skip
    assert schedule_pod(pod(affinity=affinity), [node("a", zone="z1"), node("b", zone="z2")], {}).node == "b"
    tainted = NodeInfo(
        "t",
        {},
        {"cpu": Fraction(4), "pods": Fraction(10)},
        taints=({"key": "nvidia.com/gpu", "effect": "NoSchedule"},),
    )
    assert (
        schedule_pod(pod(), [tainted], {}).message
        == "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: }."
    )
    tolerating = pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert schedule_pod(tolerating, [tainted], {}).node == "t"


def test_environment_sources_and_expansion() -> None:
    objects = {
        (CONFIGMAPS.key, "cfg"): {"data": {"A": "from-cm", "B": "b"}},
        (SECRETS.key, "sec"): {"data": {"TOKEN": base64.b64encode(b"s3cret").decode()}},
    }

    def lookup(resource, namespace, name):
        return objects.get((resource.key, name))

    the_pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"team": "ml"}},
        "spec": {"nodeName": "node-1"},
    }
    container = {
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CM_"}],
        "env": [
            {"name": "X", "value": "x"},
            {"name": "Y", "value": "$(X)-y-$$(X)-$(UNDEFINED)"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "TOKEN"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}}},
        ],
        "command": ["sh", "-c"],
        "args": ["echo $(POD) $(Y)"],
    }
    env = build_environment(the_pod, container, {"PATH": "/bin"}, lookup)
    assert env["CM_A"] == "from-cm" and env["Y"] == "x-y-$(X)-$(UNDEFINED)"
    assert (env["POD"], env["TEAM"], env["NODE"], env["TOKEN"]) == ("p", "ml", "node-1", "s3cret")
    assert "OPT" not in env and env["PATH"] == "/bin"
    assert container_argv(container, env) == ["sh", "-c", "echo p x-y-$(X)-$(UNDEFINED)"]
    with pytest.raises(ContainerConfigError, match='configmap "gone" not found'):
        build_environment(
            the_pod,
            {"env": [{"name": "Z", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]},
            {},
            lookup,
        )
    assert expand("$$$(X)", {"X": "1"}) == "$1"
