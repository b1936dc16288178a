"""Users cannot reach each other's tasks: a root worker runs each attempt as a uid of its own."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.runtime.helpers import recorded_pgids
from tests.worker.harness import ControllerStub, WorkerProcess, start_worker, wait_until

from iris.cluster.runtime.isolation import Isolation, UidPool, proc_is_hidden
from iris.cluster.runtime.proc_table import read_proc
from iris.rpc.enums import TaskState
from iris.rpc.models import DesiredAttempt, Entrypoint, ResourceSpec, RunSpec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="uid switching needs a root worker (CI runs as root)"
)

WORKER_TOKEN = "worker-token-that-no-task-may-see"
VICTIM_TOKEN = "iris-job.bob-s-job-token"

# What a malicious task tries first: every process's environment, through /proc.
THIEF = """
import json, os
found, listed = [], []
for pid in os.listdir('/proc'):
    if not pid.isdigit():
        continue
    listed.append(int(pid))
    try:
        with open(f'/proc/{pid}/environ', 'rb') as f:
            found.append(f.read().decode(errors='replace'))
    except OSError:
        pass
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "listed": listed,
                  "environs": found, "cwd": os.getcwd(), "home": os.environ.get("HOME"),
                  "cwd_owner_mode": [os.stat(".").st_uid, os.stat(".").st_mode & 0o777]}))
"""


@pytest.fixture
def controller() -> Iterator[ControllerStub]:
    stub = ControllerStub().start()
    yield stub
    stub.stop()


def python_for_task_uids() -> tuple[str, str] | None:
    """An interpreter (and PYTHONPATH) with which another uid can import Iris: this one, or the
    system Python of the same version when this one lives where others cannot read (/root)."""
    import iris

    paths = os.pathsep.join([str(Path(iris.__file__).parents[1]), *site.getsitepackages()])
    same = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    for python in dict.fromkeys([sys.executable, same]):
        check = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                '"$0" -c "import iris.cluster.worker.main, cloudpickle"',
                python,
            ],
            env={**os.environ, "PYTHONPATH": paths},
            capture_output=True,
            cwd="/",
            check=False,
        )
        if check.returncode == 0:
            return python, paths
    return None


@pytest.fixture
def worker(
    tmp_path: Path, controller: ControllerStub, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WorkerProcess]:
    found = python_for_task_uids()
    if found is None:
        pytest.skip("no Python that other uids can run with Iris on this machine")
    python, paths = found
    monkeypatch.setenv("PYTHONPATH", paths)
    monkeypatch.setenv("IRIS_TOKEN", WORKER_TOKEN)  # the worker's own token, in its environment
    proc = start_worker(
        tmp_path, controller.url, "--reregister-after", "30", entry=[python, "-m", "iris.cluster.worker"]
    )
    assert "NOT isolated" not in proc.stderr()
    yield proc
    proc.stop()


def spec(uid: str, user: str, *argv: str, env: dict[str, str] | None = None) -> RunSpec:
    return RunSpec(
        attempt_uid=uid,
        attempt_number=0,
        job_id=f"/{user}/job",
        task_id=f"/{user}/job/0",
        task_index=0,
        entrypoint=Entrypoint.from_command(*argv),
        resources=ResourceSpec(cpu=1, memory="1GB"),
        env=env or {},
    )


def run(s: RunSpec) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=s.attempt_uid, intent="run", spec=s)


def keep(uid: str) -> DesiredAttempt:
    return DesiredAttempt(attempt_uid=uid, intent="run")


def stdout_of(worker: WorkerProcess, uid: str) -> str:
    page = worker.http.get(f"/attempts/{uid}/logs", params={"limit": 10000}).json()
    return "\n".join(line["line"] for line in page["lines"] if line["stream"] == "stdout")


def test_token_theft_fails_at_the_first_step(worker: WorkerProcess) -> None:
    victim = spec("bob-1", "bob", "sleep", "100", env={"IRIS_TOKEN": VICTIM_TOKEN})
    worker.reconcile([run(victim)])
    wait_until(lambda: worker.observe([keep("bob-1")], "bob-1").state is TaskState.RUNNING, what="bob's task")
    thief = spec("mallory-1", "mallory", "python3", "-c", THIEF)
    worker.reconcile([keep("bob-1"), run(thief)])
    wait_until(
        lambda: worker.observe([keep("bob-1"), keep("mallory-1")], "mallory-1").state is TaskState.SUCCEEDED,
        what="the thief to finish",
    )
    seen = json.loads(stdout_of(worker, "mallory-1"))
    # Its own uid, no root, no groups; it lists only its own processes and reads only its own environ.
    assert seen["uid"] >= 200000 and seen["gid"] == seen["uid"] and seen["groups"] == []
    bob_pid = recorded_pgids(worker.state_dir / "pids")["bob-1"]
    assert bob_pid not in seen["listed"] and worker.popen.pid not in seen["listed"]
    everything = "\n".join(seen["environs"])
    assert VICTIM_TOKEN not in everything
    assert WORKER_TOKEN not in everything
    # Its working dir is its own (0700) while it runs, and HOME points there; once the attempt
    # has ended (and its uid is free for another user) it is the worker's.
    work = Path(seen["cwd"])
    assert seen["home"] == str(work)
    assert seen["cwd_owner_mode"] == [seen["uid"], 0o700]
    info = work.stat()
    assert info.st_uid == 0 and info.st_mode & 0o777 == 0o700
    worker.reconcile([])


def test_each_attempt_gets_its_own_uid_and_cannot_enter_another_work_dir(worker: WorkerProcess) -> None:
    first = spec("a-1", "alice", "sleep", "100")
    worker.reconcile([run(first)])
    wait_until(lambda: worker.observe([keep("a-1")], "a-1").state is TaskState.RUNNING, what="alice's task")
    probe = "import os, glob; print(os.getuid()); print(len(os.listdir('..')) if os.access('..', os.R_OK) else 'no-list')"
    second = spec("b-1", "bob", "python3", "-c", probe)
    worker.reconcile([keep("a-1"), run(second)])
    wait_until(
        lambda: worker.observe([keep("a-1"), keep("b-1")], "b-1").state is TaskState.SUCCEEDED,
        what="bob's probe",
    )
    uid_b, listing = stdout_of(worker, "b-1").split()
    status = worker.http.get("/attempts/a-1/status").json()
    uid_a = next(
        psutil.Process(p["pid"]).uids().real for p in status["processes"] if p["command"].startswith("sleep")
    )
    assert int(uid_b) != uid_a and uid_a >= 200000
    assert listing == "no-list"  # the parent of a work dir cannot be listed by a task
    worker.reconcile([])


def test_worker_token_is_not_in_a_task_environment(worker: WorkerProcess) -> None:
    attempt = spec("env-1", "alice", "env")
    worker.reconcile([run(attempt)])
    wait_until(lambda: worker.observe([keep("env-1")], "env-1").state is TaskState.SUCCEEDED, what="env")
    out = stdout_of(worker, "env-1")
    assert "IRIS_JOB_ID=/alice/job" in out and WORKER_TOKEN not in out


def test_exec_runs_as_the_attempt_uid(worker: WorkerProcess) -> None:
    worker.reconcile([run(spec("x-1", "alice", "sleep", "100"))])
    wait_until(lambda: worker.observe([keep("x-1")], "x-1").state is TaskState.RUNNING, what="running")
    answer = worker.http.post("/attempts/x-1/exec", json={"argv": ["id", "-u"], "timeout_s": 20})
    assert answer.status_code == 200
    assert int(answer.json()["stdout"]) >= 200000
    worker.reconcile([])


def test_two_pools_on_one_machine_never_lease_the_same_uid(tmp_path: Path) -> None:
    one, two = UidPool(300000, 300003, tmp_path / "leases"), UidPool(300000, 300003, tmp_path / "leases")
    leases = [one.acquire(), two.acquire(), one.acquire(), two.acquire()]
    assert len({lease.uid for lease in leases}) == 4
    with pytest.raises(Exception, match="in use"):
        one.acquire()
    UidPool.release(leases[1])
    assert two.acquire().uid == leases[1].uid
    assert (tmp_path / "leases").stat().st_mode & 0o777 == 0o700


def test_the_daemon_hides_proc_once_and_its_attempts_start_through_one_exec(worker: WorkerProcess) -> None:
    # The daemon re-made itself in a mount namespace whose /proc is hidepid=2 (same pid).
    assert proc_is_hidden(Path(f"/proc/{worker.popen.pid}/mountinfo"))
    worker.reconcile([run(spec("fast-1", "alice", "sleep", "100"))])
    wait_until(lambda: worker.observe([keep("fast-1")], "fast-1").state is TaskState.RUNNING, what="running")
    pgid = recorded_pgids(worker.state_dir / "pids")["fast-1"]
    task = psutil.Process(pgid)
    # setpriv exec'd into the command itself: no unshare, sh or mount left between daemon and task.
    # RUNNING means the process exists; its exec chain may still be under way (mid-exec its
    # cmdline reads empty), so wait for the final command in the same process.
    wait_until(lambda: task.cmdline() == ["sleep", "100"], what="the attempt's process to exec into sleep")
    assert task.ppid() == worker.popen.pid
    assert task.uids().real >= 200000
    worker.reconcile([])


def test_without_a_hidden_proc_each_attempt_gets_a_namespace_of_its_own(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("22 27 0:21 / /proc rw,relatime - proc proc rw\n")
    assert not proc_is_hidden(mountinfo)
    mountinfo.write_text(
        mountinfo.read_text() + "90 22 0:55 / /proc rw,relatime - proc proc rw,hidepid=invisible\n"
    )
    assert proc_is_hidden(mountinfo)
    base = Isolation(
        UidPool(200_000, 200_009, tmp_path / "leases"), tmp_path, "unshare", "setpriv", "mount", "sh"
    )
    slow = base.wrap(["true"], 200_001)
    assert slow[:2] == ["unshare", "--mount"] and "hidepid=2" in " ".join(slow) and slow[-1] == "true"
    fast = dataclasses.replace(base, proc_hidden=True).wrap(["true"], 200_001)
    assert fast[0] == "setpriv" and "--reuid=200001" in fast and fast[-1] == "true" and "unshare" not in fast


# A task that leaves a process behind the way a hostile one would: a new session, output closed,
# an empty environment (nothing names the attempt), reparented away from the task's tree.
DETACH = "id -u; (setsid env -i sleep 300 </dev/null >/dev/null 2>&1 &)"


def processes_of(uid: int) -> list[int]:
    return [p.pid for p in psutil.process_iter(["uids", "status"])
            if p.info["uids"] and uid in p.info["uids"][:3] and p.info["status"] != psutil.STATUS_ZOMBIE]  # fmt: skip


def task_uid(worker: WorkerProcess, uid: str) -> int:
    wait_until(lambda: stdout_of(worker, uid).strip(), timeout=30, what="the task's uid")
    return int(stdout_of(worker, uid).split()[0])


def test_a_uid_goes_back_to_the_pool_only_when_no_process_of_it_is_left(worker: WorkerProcess) -> None:
    worker.reconcile([run(spec("d-1", "mallory", "sh", "-c", DETACH))])
    wait_until(
        lambda: (
            (o := worker.observe([keep("d-1")], "d-1")).state is TaskState.SUCCEEDED and o.runtime_released
        ),
        timeout=30,
        what="the attempt ended and released",
    )
    uid = task_uid(worker, "d-1")
    assert uid >= 200000
    assert processes_of(uid) == []  # the detached child died before the uid was released
    worker.reconcile([])


@pytest.fixture
def fencing_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerProcess]:
    found = python_for_task_uids()
    if found is None:
        pytest.skip("no Python that other uids can run with Iris on this machine")
    python, paths = found
    monkeypatch.setenv("PYTHONPATH", paths)
    stub = ControllerStub(fence_after_s=2.0).start()
    proc = start_worker(
        tmp_path, stub.url, "--reregister-after", "60", entry=[python, "-m", "iris.cluster.worker"]
    )
    yield proc
    proc.stop()
    stub.stop()


def test_fencing_kills_every_process_of_the_attempts_uid(fencing_worker: WorkerProcess) -> None:
    fencing_worker.reconcile([run(spec("f-1", "mallory", "sh", "-c", DETACH + "; exec sleep 300"))])
    uid = task_uid(fencing_worker, "f-1")
    wait_until(lambda: len(processes_of(uid)) == 2, timeout=30, what="the task and its detached child")
    # No more reconciles (a partition): the worker fences itself, and finds the child by its uid.
    wait_until(lambda: processes_of(uid) == [], timeout=20, what="every process of the uid to be killed")


ONE_UID = 299_000 + os.getpid() % 900  # a uid no other test's pool leases at the same time


@pytest.fixture
def one_uid_worker(
    tmp_path: Path, controller: ControllerStub, monkeypatch: pytest.MonkeyPatch
) -> Iterator[WorkerProcess]:
    """A root worker whose pool has one uid: every attempt gets the previous one's uid."""
    found = python_for_task_uids()
    if found is None:
        pytest.skip("no Python that other uids can run with Iris on this machine")
    python, paths = found
    monkeypatch.setenv("PYTHONPATH", paths)
    first = ONE_UID
    proc = start_worker(
        tmp_path,
        controller.url,
        "--task-uids",
        f"{first}-{first}",
        entry=[python, "-m", "iris.cluster.worker"],
    )
    yield proc
    proc.stop()


def test_the_next_holder_of_a_uid_finds_nothing_its_last_holder_left_in_shared_temp_dirs(
    one_uid_worker: WorkerProcess,
) -> None:
    name = f"iris-leftover-{os.getpid()}"
    try:
        leftovers_are_gone(one_uid_worker, name)
    finally:
        for path in (f"/tmp/{name}", f"/var/tmp/{name}", f"/dev/shm/{name}"):
            Path(path).unlink(missing_ok=True)
        shutil.rmtree(f"/tmp/{name}.d", ignore_errors=True)
        for row in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
            if int(row.split()[7]) == ONE_UID:
                subprocess.run(["ipcrm", "-m", row.split()[1]], check=False)


def leftovers_are_gone(one_uid_worker: WorkerProcess, name: str) -> None:
    # Alice keeps private files where every program puts them: /tmp, /var/tmp, /dev/shm (mode
    # 0600, so no other uid can read them), plus a directory of her own in /tmp.
    places = [f"/tmp/{name}", f"/var/tmp/{name}", f"/dev/shm/{name}", f"/tmp/{name}.d/inner"]
    # And one in her work dir, which the worker keeps a while after her attempt ends.
    plant = (
        f"id -u; pwd; umask 077; mkdir /tmp/{name}.d; ipcmk -M 4096 -p 0600 >/dev/null; echo alice-secret > kept; "
        + "; ".join(f"echo alice-secret > {p}" for p in places)
    )
    one_uid_worker.reconcile([run(spec("a-1", "alice", "sh", "-c", plant))])
    wait_until(
        lambda: (
            (o := one_uid_worker.observe([keep("a-1")], "a-1")).state is TaskState.SUCCEEDED
            and o.runtime_released
        ),
        timeout=30,
        what="alice's attempt ended and released",
    )
    alice = task_uid(one_uid_worker, "a-1")
    kept = Path(stdout_of(one_uid_worker, "a-1").split()[1], "kept")
    assert kept.read_text() == "alice-secret\n"
    # Bob's attempt gets the same uid (the pool has one): whatever alice left is gone, or not his.
    look = "id -u; " + "; ".join(f"cat {p} 2>/dev/null" for p in [*places, kept])
    look += f"; ls -d /tmp/{name}.d 2>&1; true"
    one_uid_worker.reconcile([run(spec("b-1", "bob", "sh", "-c", look))])
    wait_until(
        lambda: one_uid_worker.observe([keep("b-1")], "b-1").state is TaskState.SUCCEEDED,
        timeout=30,
        what="bob's attempt ended",
    )
    assert task_uid(one_uid_worker, "b-1") == alice
    assert "alice-secret" not in stdout_of(one_uid_worker, "b-1")
    assert not any(os.path.lexists(p) for p in [*places, f"/tmp/{name}.d"])
    shared_memory = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]  # a System V segment too
    assert not [row for row in shared_memory if int(row.split()[7]) == alice]
    one_uid_worker.reconcile([])


def test_a_uid_whose_holder_died_is_cleaned_before_it_is_leased_again(tmp_path: Path) -> None:
    """A worker killed with -9 never gives its leases back: the flock goes with it, and the next
    worker leasing that uid (another user's attempt) must not share it with what is left."""
    uid = 298_000 + os.getpid() % 900
    pool = UidPool(uid, uid, tmp_path / "leases")
    lease = pool.acquire()
    kept = Path(f"/tmp/iris-crashed-holder-{os.getpid()}")
    leftover = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c",
         f"umask 077; echo secret > {kept}; exec sleep 300"],
        start_new_session=True,
    )  # fmt: skip
    again = None
    try:
        wait_until(lambda: kept.exists(), timeout=10, what="the attempt's temp file")
        os.close(lease.fd)  # its worker died holding the lease
        again = pool.acquire()
        assert again.uid == uid
        assert leftover.wait(timeout=10) == -9  # killed before the uid was handed out again
        assert not kept.exists()
    finally:
        if again is not None:
            UidPool.release(again)
        leftover.kill()
        leftover.wait()
        kept.unlink(missing_ok=True)


def test_a_restarted_worker_leases_its_adopted_containers_uid_without_cleaning_it(tmp_path: Path) -> None:
    """An adopted container still runs as the uid its dead worker had leased: the new worker leases
    that very uid again (no new attempt may get it), and kills nothing of it."""
    uid = 297_000 + os.getpid() % 900
    pool = UidPool(uid, uid + 1, tmp_path / "leases")
    lease = pool.acquire_uid(uid)
    assert lease is not None
    os.close(lease.fd)  # its worker died holding the lease
    running = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"],
        start_new_session=True,
    )
    again = None
    try:
        wait_until(lambda: read_proc(running.pid) is not None, what="the container's process")
        again = pool.acquire_uid(uid)
        assert again is not None and again.uid == uid
        assert pool.acquire_uid(uid) is None and pool.acquire_uid(uid + 5) is None  # leased; not in the pool
        other = pool.acquire()
        UidPool.release(other)
        assert other.uid == uid + 1  # a new attempt gets another uid
        assert running.poll() is None  # nothing of the adopted uid was killed
    finally:
        if again is not None:
            UidPool.release(again)
        running.kill()
        running.wait()
