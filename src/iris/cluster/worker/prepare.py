"""The worker's BUILDING phase: unpack the job's workspace bundle, then build its environment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from iris.cluster.runtime.container import ContainerTaskRuntime, ImageUnavailable
from iris.cluster.runtime.isolation import Isolation
from iris.cluster.runtime.subprocess_runtime import Preparation
from iris.cluster.worker.bundles import BundleCache
from iris.cluster.worker.environments import (
    PROJECT_PATH_ENV,
    EnvironmentBuilder,
    EnvironmentBuildError,
    InImage,
    ProjectFiles,
    project_path,
)
from iris.cluster.worker.safe_unpack import MAX_BYTES, MAX_MEMBERS
from iris.rpc.models import RunSpec


class AttemptPreparer:
    """Plugs into ``SubprocessRuntime(preparer=...)``; caches live under the worker's state dir."""

    def __init__(
        self,
        state_dir: Path,
        controller_url: str,
        *,
        token: str | None = None,
        envs_dir: Path | None = None,
        isolation: Isolation | None = None,
        bundle_max_bytes: int = MAX_BYTES,
        bundle_max_entries: int = MAX_MEMBERS,
        containers: ContainerTaskRuntime | None = None,
    ) -> None:
        """``envs_dir`` (default ``<state>/envs``) must be reachable by the uids attempts run as;
        with ``isolation`` environments are built as one of them, never as root. An attempt in a
        container image gets its environment built in that image (``containers`` runs it)."""
        self._containers = containers
        self.bundles = BundleCache(
            Path(state_dir) / "bundles",
            controller_url,
            token=token,
            max_unpack_bytes=bundle_max_bytes,
            max_unpack_entries=bundle_max_entries,
        )
        self.environments = EnvironmentBuilder(envs_dir or Path(state_dir) / "envs", isolation=isolation)

    def needed(self, spec: RunSpec) -> bool:
        environment = spec.environment
        return bool(spec.bundle_id) or bool(
            environment is not None and (environment.pip_packages or environment.project)
        )

    def prepare(
        self, spec: RunSpec, work_dir: Path, log: Callable[[str], None], cancelled: Callable[[], bool]
    ) -> Preparation:
        env: dict[str, str] = {}
        path_prepend: tuple[str, ...] = ()
        python: str | None = None
        if spec.bundle_id:
            archive = self.bundles.fetch(spec.bundle_id, log=log, cancelled=cancelled)
            count = self.bundles.unpack(spec.bundle_id, archive, work_dir, cancelled)
            log(f"unpacked bundle {spec.bundle_id[:12]} ({count} files) into {work_dir}")
            env["IRIS_BUNDLE_ID"] = spec.bundle_id
        packages = spec.environment.pip_packages if spec.environment is not None else []
        project = None
        if spec.environment is not None and spec.environment.project:
            project = ProjectFiles.read(work_dir, spec.environment.extras)
        if packages or project is not None:
            in_image = self._in_image(spec.image) if spec.image else None
            built = self.environments.ensure(
                packages, project=project, in_image=in_image, log=log, cancelled=cancelled
            )
            env["VIRTUAL_ENV"] = str(built.path)  # the container runtime mounts it (read-only)
            if project is not None:  # the workspace is at the same path in a container
                env[PROJECT_PATH_ENV] = project_path(work_dir)
            if in_image is not None:
                env["PATH"] = f"{built.bin_dir}:{in_image.path}"
            else:
                path_prepend = (str(built.bin_dir),)
                python = str(built.python)
        return Preparation(env=env, path_prepend=path_prepend, python=python)

    def _in_image(self, image: str) -> InImage:
        if self._containers is None:
            raise EnvironmentBuildError(
                f"this worker runs no containers, so it cannot build an environment in {image}"
            )
        try:
            image_id, path = self._containers.image_facts(image)
        except ImageUnavailable as exc:
            raise EnvironmentBuildError(str(exc)) from None
        return InImage(image, image_id, path, self._containers.one_off_argv, self._containers.remove)
