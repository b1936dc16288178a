"""IrisClient: submit and inspect jobs on a remote controller or an embedded local cluster."""

from __future__ import annotations

import getpass
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from iris.client.job import Job
from iris.rpc.enums import PriorityBand
from iris.rpc.errors import NotFound
from iris.rpc.http import HttpClient
from iris.rpc.models import (
    MAX_JOBS_PER_SUBMIT,
    ClientConfig,
    ClusterStatus,
    Constraint,
    CoschedulingConfig,
    DryRunResult,
    EndpointList,
    Entrypoint,
    EnvironmentSpec,
    JobList,
    JobSpec,
    ResourceSpec,
    SecretList,
    SecretRef,
    SecretValue,
    SubmitManyResponse,
    SubmitResponse,
    UserBudget,
    UserBudgetInfo,
    UserBudgetList,
    WorkerList,
)

if TYPE_CHECKING:  # both are imported where used: a command line that only reads needs neither
    from iris.client.local_cluster import LocalCluster
    from iris.client.workspace import Bundle

SUBMIT_MANY_CALL_BYTES = 2 * 1024 * 1024  # half the controller's request cap
_NAME_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def parse_secret_ref(text: str) -> SecretRef:
    """``NAME`` or ``NAME=ENVVAR``."""
    name, _, env = text.partition("=")
    try:
        return SecretRef(name=name.strip(), env=env.strip() or None)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a secret reference; write NAME or NAME=ENVVAR "
            "(letters, digits and _, not starting with a digit)"
        ) from None


def default_user() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "user"
    return _NAME_SAFE.sub("-", user).strip("-.") or "user"


def default_job_name(entrypoint: Entrypoint) -> str:
    base = "job"
    if entrypoint.kind == "command" and entrypoint.argv:
        base = os.path.basename(entrypoint.argv[0])
    base = _NAME_SAFE.sub("-", base).strip("-.") or "job"
    if base.isdigit():
        base = f"job-{base}"
    return f"{base}-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(4).hex()}"


# What ``submit`` packages when given no workspace and no bundle (a job that is not a sub-job):
# the current directory, as ``iris job run`` does. False sends none (test suites set it).
DEFAULT_WORKSPACE: bool = True


class IrisClient:
    def __init__(self, url: str, *, token: str | None = None, parent_job_id: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.http = HttpClient(self.url, token=token)
        self.parent_job_id = parent_job_id
        self._token = token
        self._cluster: LocalCluster | None = None
        self._forward_env: list[str] | None = None

    @classmethod
    def remote(cls, url: str | None = None, *, token: str | None = None) -> IrisClient:
        url = url or os.environ.get("IRIS_CONTROLLER_URL")
        if not url:
            from iris.rpc.errors import InvalidArgument

            raise InvalidArgument("no controller URL: pass one or set IRIS_CONTROLLER_URL")
        return cls(url, token=token or os.environ.get("IRIS_TOKEN"))

    @classmethod
    @contextmanager
    def local(cls, workers: int = 2, **cluster_options: Any) -> Iterator[IrisClient]:
        """Start a controller and ``workers`` worker daemons as subprocesses; stop them on exit."""
        from iris.client.local_cluster import LocalCluster

        cluster = LocalCluster(workers=workers, **cluster_options)
        cluster.start()
        client = cls(cluster.url, token=cluster.token)
        client._cluster = cluster
        try:
            yield client
        finally:
            client.close()
            cluster.stop()

    @property
    def cluster(self) -> LocalCluster | None:
        return self._cluster

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> IrisClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ jobs

    def submit(
        self,
        entrypoint: Entrypoint | None = None,
        *,
        name: str | None = None,
        resources: ResourceSpec | None = None,
        replicas: int = 1,
        env: Mapping[str, str] | None = None,
        environment: EnvironmentSpec | None = None,
        constraints: Sequence[Constraint] = (),
        preferences: Sequence[Constraint] = (),
        coscheduling: CoschedulingConfig | None = None,
        max_retries_failure: int = 0,
        max_retries_preemption: int = 100,
        max_task_failures: int = 0,
        timeout: float | None = None,
        scheduling_timeout: float | None = None,
        priority: PriorityBand | str = PriorityBand.INTERACTIVE,
        ports: Sequence[str] = (),
        user: str | None = None,
        parent_job_id: str | None = None,
        existing_job_policy: Literal["error", "replace", "keep"] = "error",
        replace: bool = False,
        wait_for_capacity: bool = False,
        image: str | None = None,
        image_pull_policy: Literal["if-not-present", "always", "never"] = "if-not-present",
        secrets: Sequence[SecretRef | str] = (),
        workspace: str | Path | bool | None = None,
        bundle_id: str | None = None,
        sync: bool | None = None,
        extras: Sequence[str] = (),
    ) -> Job:
        """Submit a job; returns a handle to wait on, read logs from, or kill.

        A name in use is refused (HTTP 409) while that job runs; ``replace=True`` replaces a
        finished job of the same name, whose tasks, attempts and events are then gone.

        ``secrets`` names secrets of the job's user (``iris secret set``): ``"HF_TOKEN"`` or
        ``"NAME=ENVVAR"`` (or ``SecretRef``); each is injected into every task's environment, and
        a name the user has no secret by is refused. The variables the cluster config lists in
        ``forward_env`` are copied from this process's environment into ``env`` (unless given).

        ``workspace`` (a directory, or True for the current one) is packaged and uploaded (once per
        content) so the tasks run inside a copy of it; ``bundle_id`` names an already uploaded one.
        With neither, a job is submitted as ``iris job run`` does: from the current directory
        (``DEFAULT_WORKSPACE``; ``workspace=False`` sends none), and a sub-job runs from its
        parent's bundle.

        ``image`` runs each task in that container image (the workspace is its working dir);
        ``image_pull_policy`` is ``if-not-present`` (default), ``always`` or ``never``.

        A workspace holding ``pyproject.toml`` and ``uv.lock`` is a uv project: its tasks run in
        ``uv sync --frozen`` of it (built once per lock, Python and extras on each worker), with
        the optional dependencies ``extras``; ``sync=False`` opts out, ``sync=True`` insists.
        """
        options = {
            k: v for k, v in locals().items() if k not in ("self", "workspace", "bundle_id", "sync", "extras")
        }
        from iris.client.workspace import project_environment

        spec = self.build_spec(**options)
        if workspace is None and bundle_id is None and spec.parent_job_id is None:
            workspace = DEFAULT_WORKSPACE
        directory = None
        if workspace is not None and workspace is not False:
            directory = Path.cwd() if workspace is True else Path(workspace)
        spec.environment = project_environment(spec.environment, directory, sync=sync, extras=extras)
        if directory is not None:
            bundle, _uploaded = self.upload_workspace(directory)
            bundle_id = bundle.bundle_id
        if bundle_id is not None:
            spec.bundle_id = bundle_id
        return self.submit_spec(spec)

    def upload_workspace(self, directory: str | Path) -> tuple[Bundle, bool]:
        """Package ``directory`` (see ``iris.client.workspace``) and make sure the controller has it.

        Returns the bundle and whether it was uploaded now (False: the controller already had it).
        """
        from iris.client.workspace import build_bundle, upload_bundle

        bundle = build_bundle(directory)
        return bundle, upload_bundle(self.url, bundle, token=self._token)

    def dry_run(self, entrypoint: Entrypoint | None = None, **options: Any) -> DryRunResult:
        """Would this job place now, and on which workers (or why not)? Nothing is submitted."""
        spec = self.build_spec(entrypoint, **options)
        return self.http.post("/api/v1/dry-run", DryRunResult, spec)

    def build_spec(
        self,
        entrypoint: Entrypoint | None = None,
        *,
        name: str | None = None,
        resources: ResourceSpec | None = None,
        replicas: int = 1,
        env: Mapping[str, str] | None = None,
        environment: EnvironmentSpec | None = None,
        constraints: Sequence[Constraint] = (),
        preferences: Sequence[Constraint] = (),
        coscheduling: CoschedulingConfig | None = None,
        max_retries_failure: int = 0,
        max_retries_preemption: int = 100,
        max_task_failures: int = 0,
        timeout: float | None = None,
        scheduling_timeout: float | None = None,
        priority: PriorityBand | str = PriorityBand.INTERACTIVE,
        ports: Sequence[str] = (),
        user: str | None = None,
        parent_job_id: str | None = None,
        existing_job_policy: Literal["error", "replace", "keep"] = "error",
        replace: bool = False,
        wait_for_capacity: bool = False,
        image: str | None = None,
        image_pull_policy: Literal["if-not-present", "always", "never"] = "if-not-present",
        secrets: Sequence[SecretRef | str] = (),
    ) -> JobSpec:
        if entrypoint is None:
            from iris.rpc.errors import InvalidArgument

            raise InvalidArgument(
                "submit needs an entrypoint (Entrypoint.from_command or Entrypoint.from_callable)"
            )
        spec = JobSpec(
            name=name or default_job_name(entrypoint),
            entrypoint=entrypoint,
            resources=resources or ResourceSpec(),
            replicas=replicas,
            env=dict(env or {}),
            environment=environment,
            constraints=list(constraints),
            preferences=list(preferences),
            coscheduling=coscheduling,
            max_retries_failure=max_retries_failure,
            max_retries_preemption=max_retries_preemption,
            max_task_failures=max_task_failures,
            timeout_s=timeout,
            scheduling_timeout_s=scheduling_timeout,
            priority=PriorityBand(priority.upper() if isinstance(priority, str) else priority),
            ports=list(ports),
            user=user or default_user(),
            parent_job_id=parent_job_id or self.parent_job_id,
            existing_job_policy="replace" if replace else existing_job_policy,
            wait_for_capacity=wait_for_capacity,
            image=image,
            image_pull_policy=image_pull_policy,
            secrets=[parse_secret_ref(s) if isinstance(s, str) else s for s in secrets],
        )
        return spec

    def forward_env(self) -> list[str]:
        """The names the cluster config's ``forward_env`` lists (asked once per client)."""
        if self._forward_env is None:
            try:
                self._forward_env = self.http.get("/api/v1/client-config", ClientConfig).forward_env
            except NotFound:  # a controller from before forward_env
                self._forward_env = []
        return self._forward_env

    def _with_forwarded_env(self, spec: JobSpec) -> JobSpec:
        """``spec`` with the ``forward_env`` variables set in this process (and not in the spec)."""
        names = self.forward_env()
        extra = {n: os.environ[n] for n in names if n in os.environ and n not in spec.env}
        return spec.model_copy(update={"env": {**extra, **spec.env}}) if extra else spec

    def set_secret(self, name: str, value: str, *, user: str | None = None) -> None:
        """Store (or replace) a secret of this client's user (an admin may name ``user``)."""
        self.http.request(
            "PUT",
            f"/api/v1/secrets/{quote(name, safe='')}",
            json_body=SecretValue(value=value, user=user, default_user=default_user()),
        )

    def list_secrets(self, *, user: str | None = None) -> SecretList:
        """Names and times of secrets (never values): a user's own; an admin's: everyone's or ``user``'s."""
        return self.http.get("/api/v1/secrets", SecretList, user=user)

    def remove_secret(self, name: str, *, user: str | None = None) -> None:
        self.http.request(
            "DELETE",
            f"/api/v1/secrets/{quote(name, safe='')}",
            params={"user": user, "default_user": default_user()},
        )

    def set_budget(self, user: str, budget: UserBudget) -> UserBudgetInfo:
        """Set ``user``'s budget (admins, when the controller has auth on); replaces the old one."""
        data = self.http.request("PUT", f"/api/v1/budgets/{quote(user, safe='')}", json_body=budget)
        return UserBudgetInfo.model_validate(data)

    def get_budget(self, user: str) -> UserBudgetInfo:
        """``user``'s budget (their own, else the ``*`` default); NotFound when unlimited."""
        return self.http.get(f"/api/v1/budgets/{quote(user, safe='')}", UserBudgetInfo)

    def list_budgets(self) -> UserBudgetList:
        return self.http.get("/api/v1/budgets", UserBudgetList)

    def remove_budget(self, user: str) -> None:
        self.http.request("DELETE", f"/api/v1/budgets/{quote(user, safe='')}")

    def submit_spec(self, spec: JobSpec) -> Job:
        spec = self._with_forwarded_env(spec)
        resp = self.http.post("/api/v1/jobs", SubmitResponse, spec)
        return Job(self, resp.job_id)

    def submit_many(self, specs: Sequence[JobSpec]) -> list[Job]:
        """Submit many jobs in few API calls (build each with ``build_spec``); handles in order.

        The controller checks each job as ``submit`` would and stores a call's jobs in one
        transaction: if it rejects one, the call fails with that job's error and stores none of
        them. Specs are sent in calls of at most ``MAX_JOBS_PER_SUBMIT`` jobs and
        ``SUBMIT_MANY_CALL_BYTES`` bytes, under the controller's request-size cap (calls before
        a rejected one have landed).
        """
        jobs: list[Job] = []
        batch: list[bytes] = []  # each spec's JSON, dumped once (a SubmitManyRequest body)
        size = 0

        def flush() -> None:
            body = b'{"jobs":[' + b",".join(batch) + b"]}"
            resp = self.http.post("/api/v1/jobs:batch", SubmitManyResponse, body)
            jobs.extend(Job(self, job_id) for job_id in resp.job_ids)

        for spec in specs:
            encoded = self._with_forwarded_env(spec).model_dump_json(exclude_none=True).encode()
            length = len(encoded) + 1
            if batch and (len(batch) == MAX_JOBS_PER_SUBMIT or size + length > SUBMIT_MANY_CALL_BYTES):
                flush()
                batch, size = [], 0
            batch.append(encoded)
            size += length
        if batch:
            flush()
        return jobs

    def job(self, job_id: str) -> Job:
        return Job(self, job_id if job_id.startswith("/") else "/" + job_id)

    def list_jobs(
        self,
        *,
        state: Sequence[str] = (),
        user: str | None = None,
        name: str | None = None,
        since: float | None = None,
        sort: str = "submitted_at",
        descending: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> JobList:
        """Jobs, newest first by default; ``name`` matches part of the id, ``since`` is a time."""
        params: dict[str, Any] = {"limit": limit, "offset": offset, "sort": sort, "desc": descending}
        if state:
            params["state"] = list(state)
        if user:
            params["user"] = user
        if name:
            params["name"] = name
        if since is not None:
            params["since"] = since
        return self.http.get("/api/v1/jobs", JobList, **params)

    def endpoints(self, *, job: str | None = None, name: str | None = None) -> EndpointList:
        """Endpoints visible to ``job`` (default: this client's parent job, if any)."""
        job = job or self.parent_job_id
        params = {"job": job.lstrip("/") if job else None, "name": name}
        return self.http.get("/api/v1/endpoints", EndpointList, **params)

    def resolve_endpoint(self, name: str, *, job: str | None = None, timeout: float = 0.0) -> str:
        """The address registered under ``name`` in ``job``'s namespace; waits up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.endpoints(job=job, name=name).endpoints
            if found:
                return found[0].address
            if time.monotonic() >= deadline:
                raise NotFound(f"no endpoint named {name!r} is registered")
            time.sleep(0.05)

    def workers(self) -> WorkerList:
        return self.http.get("/api/v1/workers", WorkerList)

    def cluster_status(self) -> ClusterStatus:
        return self.http.get("/api/v1/cluster", ClusterStatus)
