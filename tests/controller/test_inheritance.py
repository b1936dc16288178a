"""What a sub-job takes from its parent."""

from __future__ import annotations

from iris.cluster.controller.submission import inherit_from_parent
from iris.rpc.models import Entrypoint, EnvironmentSpec, JobSpec

CMD = Entrypoint.from_command("true")


def test_child_inherits_bundle_env_and_environment() -> None:
    parent = JobSpec(
        name="p",
        entrypoint=CMD,
        bundle_id="b" * 64,
        env={"A": "1", "B": "2"},
        environment=EnvironmentSpec(pip_packages=["x"]),
    )
    child = inherit_from_parent(JobSpec(name="c", entrypoint=CMD, env={"B": "child"}), parent)
    assert child.bundle_id == "b" * 64
    assert child.env == {"A": "1", "B": "child"}
    assert child.environment == EnvironmentSpec(pip_packages=["x"])


def test_child_keeps_what_it_names_itself() -> None:
    parent = JobSpec(
        name="p", entrypoint=CMD, bundle_id="b" * 64, environment=EnvironmentSpec(pip_packages=["x"])
    )
    own = JobSpec(
        name="c", entrypoint=CMD, bundle_id="c" * 64, environment=EnvironmentSpec(pip_packages=["y"])
    )
    assert inherit_from_parent(own, parent) == own
    bare = JobSpec(name="c", entrypoint=CMD)
    assert inherit_from_parent(bare, JobSpec(name="p", entrypoint=CMD)) == bare
