"""The node agent's container environment and argv, built the way the kubelet builds them (pure)."""

from __future__ import annotations

import base64

import pytest

from iris.testing.kubelet_sim.container_env import (
    ContainerConfigError,
    build_environment,
    container_argv,
    expand,
)
from iris.testing.kubelet_sim.k8s_types import CONFIGMAPS, SECRETS


def test_environment_sources_and_expansion() -> None:
    objects = {
        (CONFIGMAPS.plural, "cfg"): {"data": {"A": "from-cm", "B": "b"}},
        (SECRETS.plural, "sec"): {"data": {"TOKEN": base64.b64encode(b"s3cret").decode()}},
    }

    def lookup(resource, namespace, name):
        return objects.get((resource.plural, name))

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
