"""Parsed job specs and per-job run templates, kept in memory so a round never re-parses JSON.

A job's ``JobSpec`` is parsed once (``job_spec``); the ``RunSpec`` a worker or pod is sent is its
job's template (env, secrets, the job's token) plus the attempt's own fields (``run_spec``). A
finished or replaced job is dropped (``forget``, called after the commit that ends it).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from iris.cluster.controller import store
from iris.cluster.controller.auth import Authenticator
from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.secrets import SecretStore
from iris.cluster.types import JobName
from iris.rpc.errors import NotFound
from iris.rpc.models import JobSpec, RunSpec

SPEC_CACHE_SIZE = 10_000  # parsed job specs (and run templates) kept in memory
# A run template carries the job's token (valid for days): rebuilt this often, so a retry long
# after the job started still gets a fresh one.
RUN_TEMPLATE_MAX_AGE_S = 3600.0


class SpecCache:
    def __init__(
        self,
        db: ControllerDB,
        secrets: SecretStore,
        auth: Authenticator,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.secrets = secrets
        self.auth = auth
        self.clock = clock
        self.task_env: dict[str, str] = {}  # defaults.task_env, under each job's own env
        self.default_task_image: str | None = None  # the image of every job that names none
        self.specs: OrderedDict[str, JobSpec] = OrderedDict()
        self._run_templates: dict[str, tuple[RunSpec, float]] = {}

    def job_spec(self, job_id: str, spec_json: str | None = None) -> JobSpec:
        """The job's spec (parsed from ``spec_json`` when given, else read); raises NotFound."""
        spec = self.specs.get(job_id)
        if spec is None:
            if spec_json is None:
                with self.db.read() as cur:
                    row = store.get_job(cur, job_id)
                if row is None:
                    raise NotFound(f"job {job_id} does not exist")
                spec_json = row.spec_json
            spec = JobSpec.model_validate_json(spec_json)
            self.specs[job_id] = spec
            if len(self.specs) > SPEC_CACHE_SIZE:
                self.specs.popitem(last=False)
        return spec

    def specs_for(self, spec_json: Mapping[str, str], job_ids: Iterable[str]) -> dict[str, JobSpec]:
        """The specs of the jobs in ``spec_json`` (job id -> its JSON) and of ``job_ids``."""
        specs = {job_id: self.job_spec(job_id, text) for job_id, text in spec_json.items()}
        for job_id in job_ids:
            if job_id not in specs:
                specs[job_id] = self.job_spec(job_id)
        return specs

    def forget(self, job_id: str) -> None:
        self.specs.pop(job_id, None)
        self._run_templates.pop(job_id, None)

    def secret_masks(self, job_id: str) -> list[str]:
        """The values of the job's secrets (to mask in logs the controller collects itself)."""
        spec = self.job_spec(job_id)
        if not spec.secrets:
            return []
        return list(
            self.secrets.values(JobName.parse(job_id).user, [ref.name for ref in spec.secrets]).values()
        )

    def run_spec(self, a: store.LiveAttempt) -> RunSpec:
        """The attempt's spec: its job's template (validated once) with the attempt's own fields."""
        now = self.clock()
        cached = self._run_templates.get(a.job_id)
        if cached is None or now - cached[1] > RUN_TEMPLATE_MAX_AGE_S:
            cached = self._run_templates[a.job_id] = (self._run_template(a.job_id), now)
            while len(self._run_templates) > SPEC_CACHE_SIZE:
                self._run_templates.pop(next(iter(self._run_templates)))
        return cached[0].model_copy(
            update={
                "attempt_uid": a.attempt_uid,
                "attempt_number": a.attempt_number,
                "task_id": a.task_id,
                "task_index": a.task_index,
            }
        )

    def _run_template(self, job_id: str) -> RunSpec:
        spec = self.job_spec(job_id)
        user = JobName.parse(job_id).user
        env = {**self.task_env, **spec.env}
        secret_env: dict[str, str] = {}
        if spec.secrets:
            values = self.secrets.values(user, [ref.name for ref in spec.secrets])
            secret_env = {ref.env_name: values[ref.name] for ref in spec.secrets if ref.name in values}
        if self.auth.enabled:
            # The task acts as its job's user: sub-jobs, endpoints and its bundle need no other secret.
            # The token names this run of the job: a --replace'd or finished run's token is refused.
            with self.db.read() as cur:
                row = store.get_job(cur, job_id)
            if row is None:
                raise NotFound(f"job {job_id} does not exist")
            env["IRIS_TOKEN"] = self.auth.job_token(job_id, user, row.run_uid)
        template = RunSpec(
            attempt_uid="",
            attempt_number=0,
            job_id=job_id,
            task_id="",
            task_index=0,
            entrypoint=spec.entrypoint,
            resources=spec.resources,
            env=env,
            environment=spec.environment,
            timeout_s=None,  # the controller enforces execution timeouts itself (no retry)
            ports=spec.ports,
            bundle_id=spec.bundle_id,
            priority=spec.priority,
            constraints=spec.constraints,
            preferences=spec.preferences,
            replicas=spec.replicas,
            coscheduling=spec.coscheduling,
            user=user,
            image=spec.image or self.default_task_image,
            image_pull_policy=spec.image_pull_policy,
            secret_env=secret_env,
        )
        # Every attempt's copy would copy this set of given names (~20); nothing reads it, and with
        # 32,000 attempts dispatched in one round those copies held 26.6 MB.
        template.model_fields_set.clear()
        return template
