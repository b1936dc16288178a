"""The dashboard's pure helpers (format.js, router.js), run in the browser that serves them: tables
of cases, and round trips through Iris's own parsers (the copied CLI must mean the same job)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.rpc.units import parse_bytes, parse_cpu_millicores

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def js(browser, seeded) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """Call `fn(...args)` from a dashboard module: js("format.js", "fmtBytes", 2e9)."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{seeded.url}/#/status")
    page.wait_for_selector("body[data-ready]")

    def call(module: str, fn: str, *args: object) -> object:
        return page.evaluate(
            "async ([m, f, a]) => { const mod = await import(`/js/${m}`); return mod[f](...a); }",
            [module, fn, list(args)],
        )

    yield call
    context.close()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0.0s"),
        (0.44, "0.4s"),
        (12.7, "12s"),
        (65, "1m 05s"),
        (3600 * 2 + 7 * 60, "2h 07m"),
        (86400 * 3 + 3600 * 4, "3d 4h"),
    ],
)
def test_durations(js, seconds: float, text: str) -> None:  # type: ignore[no-untyped-def]
    assert js("format.js", "fmtDuration", seconds) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0B"), (999, "999B"), (1500, "1.5KB"), (512e6, "512MB"), (2e9, "2GB"), (84492189696, "84.5GB")],
)
def test_bytes(js, n: float, text: str) -> None:  # type: ignore[no-untyped-def]
    assert js("format.js", "fmtBytes", n) == text


@pytest.mark.parametrize(
    ("hash_", "expected"),
    [
        ("", {"page": "jobs", "id": None, "taskIndex": None}),
        ("#/workers", {"page": "workers", "id": None, "taskIndex": None}),
        ("#/jobs/alice/train", {"page": "job", "id": "/alice/train", "taskIndex": None}),
        ("#/jobs/alice/train/sub", {"page": "job", "id": "/alice/train/sub", "taskIndex": None}),
        ("#/jobs/alice/train/3", {"page": "job", "id": "/alice/train", "taskIndex": 3}),
        ("#/jobs/alice/train/sub/0?attempt=x", {"page": "job", "id": "/alice/train/sub", "taskIndex": 0}),
        ("#/jobs?state=RUNNING", {"page": "jobs", "id": None, "taskIndex": None}),
    ],
)
def test_routes(js, hash_: str, expected: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    got = js("router.js", "parseHash", hash_)
    assert {k: got[k] for k in expected} == expected  # type: ignore[index]


def test_cli_equivalent_of_a_full_spec(js) -> None:  # type: ignore[no-untyped-def]
    spec = {
        "name": "train",
        "entrypoint": {"kind": "command", "argv": ["python", "train.py", "--lr", "0.1", "it's"]},
        "resources": {"cpu_millicores": 2000, "memory_bytes": 4 * 10**9, "disk_bytes": 2**30},
        "replicas": 3,
        "env": {"A": "1 2"},
        "max_retries_failure": 2,
        "max_retries_preemption": 100,
        "timeout_s": 60.5,
        "priority": "BATCH",
        "constraints": [{"key": "zone", "op": "EQ", "value": "a"}],
    }
    out = js("format.js", "cliEquivalent", spec)
    assert out["command"] == (  # type: ignore[index]
        "iris job run --name train --cpu 2 --memory 4GB --disk 1Gi --env 'A=1 2' --replicas 3"
        " --max-retries 2 --timeout 60.5 --priority batch --constraint zone=a"
        " -- python train.py --lr 0.1 'it'\\''s'"
    )
    assert out["unsupported"] == []  # type: ignore[index]
    callable_spec = {"name": "f", "entrypoint": {"kind": "callable", "callable_b64": "x"}}
    assert js("format.js", "cliEquivalent", callable_spec)["command"] is None  # type: ignore[index]


def test_cli_equivalent_expresses_gangs_pip_ports_constraints_and_devices(js) -> None:  # type: ignore[no-untyped-def]
    from iris.cli.job_options import parse_constraint, parse_device
    from iris.rpc.models import Constraint, DeviceSpec

    constraints = [
        Constraint(key="zone", op="IN", values=["a", "b"]),
        Constraint(key="spot", op="NOT_EXISTS"),
        Constraint(key="rack", op="EXISTS"),
        Constraint(key="mem", op="GE", value="64"),
        Constraint(key="pool", op="NE", value="cpu"),
    ]
    device = DeviceSpec(type="gpu", variant="h100", count=8)
    spec = {
        "name": "gang",
        "entrypoint": {"kind": "command", "argv": ["python", "dist.py"]},
        "resources": {"cpu_millicores": 1000, "memory_bytes": 512 * 10**6, "device": device.model_dump()},
        "replicas": 4,
        "constraints": [c.model_dump() for c in constraints],
        "preferences": [{"key": "disk", "op": "EQ", "value": "ssd"}],
        "coscheduling": {"group_by": "rack"},
        "ports": ["coordinator"],
        "environment": {"pip_packages": ["numpy==2.1", "rich"], "env_vars": {}},
        "max_task_failures": 1,
        "wait_for_capacity": True,
    }
    out = js("format.js", "cliEquivalent", spec)
    assert out["unsupported"] == [], out  # type: ignore[index]
    argv = shlex.split(out["command"])  # type: ignore[index]
    assert argv[argv.index("--") :] == ["--", "python", "dist.py"]
    given = [(flag, argv[i + 1]) for i, flag in enumerate(argv[: argv.index("--")]) if flag.startswith("--")]
    assert [parse_constraint(v) for f, v in given if f == "--constraint"] == constraints
    assert [parse_device(v) for f, v in given if f == "--device"] == [device]
    assert ("--prefer", "disk=ssd") in given and ("--group-by", "rack") in given
    assert ("--port", "coordinator") in given and ("--max-task-failures", "1") in given
    assert [v for f, v in given if f == "--pip"] == ["numpy==2.1", "rich"]
    assert "--wait-for-capacity" in argv


def test_throughput_from_cumulative_counts(js) -> None:  # type: ignore[no-untyped-def]
    points = [
        {"ts": 100, "pending": 5, "running": 1, "succeeded": 0, "failed": 0, "killed": 0},
        {"ts": 102, "pending": 3, "running": 2, "succeeded": 10, "failed": 1, "killed": 1},
        {"ts": 104, "pending": 0, "running": 0, "succeeded": 4, "failed": 2, "killed": 1},
    ]
    s = js("format.js", "seriesFromPoints", points)
    assert s["succeededRate"] == [None, 5, 0], "a drop (finished jobs replaced) counts as zero"  # type: ignore[index]
    assert s["failedRate"] == [None, 1, 0.5]  # type: ignore[index]
    assert s["running"] == [1, 2, 0] and s["pending"] == [5, 3, 0]  # type: ignore[index]


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=1 << 50))
def test_cli_bytes_round_trip(js, n: int) -> None:  # type: ignore[no-untyped-def]
    assert parse_bytes(js("format.js", "cliBytes", n)) == n


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10_000_000))
def test_cli_cpu_round_trip(js, millicores: int) -> None:  # type: ignore[no-untyped-def]
    assert parse_cpu_millicores(js("format.js", "cliCpu", millicores)) == millicores


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), max_size=20))
def test_shell_quote_round_trip(js, arg: str) -> None:  # type: ignore[no-untyped-def]
    quoted = js("format.js", "shellQuote", arg)
    assert shlex.split(str(quoted)) == [arg], json.dumps(arg)
