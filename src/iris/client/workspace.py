"""Package the user's working directory into a content-addressed bundle, and upload it once.

Which files: inside a git work tree, what ``git ls-files --others --cached --exclude-standard``
lists (tracked files plus untracked ones git does not ignore); elsewhere, a walk that honours
``.gitignore`` files. Either way ``.irisignore`` files (same syntax) exclude more, and ``.git``,
``.venv`` and ``__pycache__`` are always left out. The archive is a deterministic tar.gz (sorted
entries, zero mtimes and owners, normalised modes), so the same files always give the same bytes,
and the bundle id is the sha256 of those bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import stat
import subprocess
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from iris.rpc.errors import InvalidArgument, Unavailable, error_from_body
from iris.rpc.models import EnvironmentSpec

DEFAULT_MAX_BUNDLE_BYTES = 50 * 1000**2
MAX_BUNDLE_BYTES_ENV = "IRIS_MAX_BUNDLE_BYTES"
ALWAYS_SKIPPED = frozenset({".git", ".venv", "__pycache__"})
IGNORE_FILES = (".gitignore", ".irisignore")


class WorkspaceTooLarge(InvalidArgument):
    """The workspace is over the bundle size limit; nothing was uploaded."""


# ---------------------------------------------------------------- ignore rules (pure)


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    """One line of an ignore file, compiled. ``base`` is the directory holding the file ('' = root)."""

    base: str
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def parse_ignore_lines(lines: Iterable[str], base: str = "") -> list[IgnoreRule]:
    """Compile gitignore-syntax lines (comments, ``!``, trailing ``/``, anchoring, ``*``, ``**``, ``?``, ``[]``)."""
    rules = []
    for raw in lines:
        line = raw.rstrip("\n").rstrip("\r")
        if not line.endswith("\\ "):
            line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        body = _glob_to_regex(line)
        regex = re.compile("^" + body + "$" if anchored else "^(?:.*/)?" + body + "$")
        rules.append(IgnoreRule(base, regex, negate, dir_only))
    return rules


def _glob_to_regex(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i) and i + 2 == n and (i == 0 or pattern[i - 1] == "/"):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if end == -1:
                out.append(re.escape(c))
                i += 1
                continue
            inner = pattern[i + 1 : end]
            if inner[:1] in ("!", "^"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def rule_verdict(rules: Sequence[IgnoreRule], path: str, is_dir: bool) -> bool | None:
    """True (ignored) / False (re-included) by the last matching rule, None if no rule matches."""
    verdict: bool | None = None
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.base:
            if not path.startswith(rule.base + "/"):
                continue
            relative = path[len(rule.base) + 1 :]
        else:
            relative = path
        if rule.regex.match(relative):
            verdict = not rule.negate
    return verdict


def is_excluded(rules: Sequence[IgnoreRule], path: str) -> bool:
    """Whether the file at ``path`` (posix, relative) is left out: by a rule, or because one of its
    parent directories is (git cannot re-include a file inside an excluded directory)."""
    parts = path.split("/")
    if any(part in ALWAYS_SKIPPED for part in parts):
        return True
    for depth in range(1, len(parts)):
        if rule_verdict(rules, "/".join(parts[:depth]), True):
            return True
    return bool(rule_verdict(rules, path, False))


# ---------------------------------------------------------------- listing files


def _read_rules(directory: Path, base: str, names: Sequence[str]) -> list[IgnoreRule]:
    rules: list[IgnoreRule] = []
    for name in names:
        try:
            text = (directory / name).read_text(errors="replace")
        except OSError:
            continue
        rules.extend(parse_ignore_lines(text.splitlines(), base))
    return rules


def _git_files(root: Path) -> list[str] | None:
    """Paths git would consider part of the work tree under ``root``; None outside a work tree."""
    try:
        inside = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        listed = subprocess.run(
            ["git", "ls-files", "--others", "--cached", "--exclude-standard", "-z"],
            cwd=root,
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    return sorted({p for p in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if p})


def workspace_files(root: Path) -> list[str]:
    """Sorted posix paths (relative to ``root``) of the regular files the bundle holds."""
    return sorted(iter_workspace_files(root))


def iter_workspace_files(root: Path) -> Iterator[str]:
    """The same paths, lazily (outside git, as the walk finds them)."""
    root = Path(root)
    listed = _git_files(root)
    if listed is None:
        yield from _walk(root)
        return
    # .irisignore files git lists (plus the root's, even if git ignores it), shallowest first.
    bases = {os.path.dirname(p) for p in listed if os.path.basename(p) == ".irisignore"}
    if (root / ".irisignore").is_file():
        bases.add("")
    rules: list[IgnoreRule] = []
    for base in sorted(bases, key=lambda b: (b.count("/") + bool(b), b)):
        rules.extend(_read_rules(root / base, base, (".irisignore",)))
    yield from (p for p in listed if not is_excluded(rules, p) and _is_regular_file(root / p))


def _walk(root: Path) -> Iterator[str]:
    rules_by_dir: dict[str, list[IgnoreRule]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        base = "" if rel == "." else Path(rel).as_posix()
        parent_rules = rules_by_dir.get(os.path.dirname(base) if base else "", []) if base else []
        rules = parent_rules + _read_rules(Path(dirpath), base, IGNORE_FILES)
        rules_by_dir[base] = rules
        keep_dirs = []
        for name in sorted(dirnames):
            path = f"{base}/{name}" if base else name
            if name in ALWAYS_SKIPPED or rule_verdict(rules, path, True):
                continue
            keep_dirs.append(name)
        dirnames[:] = keep_dirs
        for name in filenames:
            path = f"{base}/{name}" if base else name
            if rule_verdict(rules, path, False) or not _is_regular_file(Path(dirpath) / name):
                continue
            yield path


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)  # follows symlinks: a link to a file is its content
    except OSError:
        return False


# ---------------------------------------------------------------- the archive


@dataclass(frozen=True, slots=True)
class Bundle:
    bundle_id: str  # sha256 hex of ``data``
    data: bytes
    file_count: int
    content_bytes: int  # total size of the files before compression


def max_bundle_bytes() -> int:
    value = os.environ.get(MAX_BUNDLE_BYTES_ENV)
    if not value:
        return DEFAULT_MAX_BUNDLE_BYTES
    from iris.rpc.units import parse_bytes

    return parse_bytes(value)


def _human(n: int) -> str:
    for unit, size in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


# A workspace with both is a uv project: its tasks run in ``uv sync --frozen`` of it by default.
PROJECT_FILES = ("pyproject.toml", "uv.lock")


def has_project(root: str | Path) -> bool:
    """Whether ``root`` holds a ``pyproject.toml`` and a ``uv.lock``."""
    return all((Path(root) / name).is_file() for name in PROJECT_FILES)


def project_environment(
    environment: EnvironmentSpec | None,
    workspace: str | Path | None,
    *,
    sync: bool | None = None,
    extras: Sequence[str] = (),
) -> EnvironmentSpec | None:
    """``environment`` with the project environment asked for when the workspace is a uv project
    (``sync=None``: by default; ``sync=False`` opts out; ``sync=True`` requires one), with ``extras``."""
    if environment is not None and environment.project:
        return environment  # asked for explicitly
    found = has_project(workspace) if workspace is not None else sync is True  # a bundle: the worker checks
    if sync is True and not found:
        raise InvalidArgument(
            f"the project environment needs a pyproject.toml and a uv.lock in the workspace, and {workspace} "
            "has not both (run `uv lock` there first)"
        )
    if sync is False or not found:
        if extras:
            why = (
                "sync is off"
                if sync is False
                else f"no pyproject.toml + uv.lock in {workspace or 'a workspace'}"
            )
            raise InvalidArgument(
                f"extras are optional dependencies of the project environment, and this job has none ({why})"
            )
        return environment
    fields = environment.model_dump() if environment is not None else {}
    return EnvironmentSpec.model_validate({**fields, "project": True, "extras": list(extras)})


def build_bundle(root: str | Path, *, max_bytes: int | None = None) -> Bundle:
    """Package ``root``; raises WorkspaceTooLarge past ``max_bytes``, before reading any file (and
    without listing the rest once over the limit: a run from a huge directory fails fast)."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise InvalidArgument(f"the workspace {root} is not a directory")
    limit = max_bundle_bytes() if max_bytes is None else max_bytes
    sizes: dict[str, int] = {}
    total = 0
    for p in iter_workspace_files(root):
        try:
            sizes[p] = size = (root / p).stat().st_size
        except OSError:
            continue
        total += size
        if total > limit:
            raise WorkspaceTooLarge(_too_large_message(root, total, limit, sizes))
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="", compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        count = 0
        unreadable: list[str] = []
        for p in sorted(sizes):
            try:
                data = (root / p).read_bytes()
                mode = (root / p).stat().st_mode
            except FileNotFoundError:
                continue  # vanished while packaging
            except OSError as exc:
                unreadable.append(f"{p} ({(exc.strerror or str(exc)).lower()})")
                continue
            info = tarfile.TarInfo(p)
            info.size = len(data)
            info.mode = 0o755 if mode & 0o111 else 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
            count += 1
    if unreadable:
        shown = ", ".join(unreadable[:5]) + (
            f" and {len(unreadable) - 5} more" if len(unreadable) > 5 else ""
        )
        raise InvalidArgument(
            f"cannot read {len(unreadable)} file(s) of the workspace {root}: {shown}; "
            "fix their permissions, list them in .irisignore, or run with --no-workspace"
        )
    data = raw.getvalue()
    if len(data) > limit:
        raise WorkspaceTooLarge(_too_large_message(root, len(data), limit, sizes))
    return Bundle(hashlib.sha256(data).hexdigest(), data, count, total)


def _too_large_message(root: Path, total: int, limit: int, sizes: dict[str, int]) -> str:
    biggest = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    named = ", ".join(f"{p} ({_human(s)})" for p, s in biggest)
    return (
        f"the workspace {root} holds at least {_human(total)}, over the {_human(limit)} bundle limit "
        f"({MAX_BUNDLE_BYTES_ENV}); the biggest files are {named}: list them in .irisignore "
        "(or .gitignore), or run with --no-workspace"
    )


# ---------------------------------------------------------------- upload


def bundle_url(bundle_id: str) -> str:
    return f"/api/v1/bundles/{bundle_id}"


def upload_bundle(
    controller_url: str, bundle: Bundle, *, token: str | None = None, timeout_s: float = 300.0
) -> bool:
    """Make sure the controller has ``bundle``: True if it was uploaded now, False if already there."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    base = controller_url.rstrip("/")
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=timeout_s) as http:
            head = http.head(bundle_url(bundle.bundle_id))
            if head.status_code == 200:
                return False
            if head.status_code != 404:
                raise error_from_body(head.status_code, None)
            put = http.put(
                bundle_url(bundle.bundle_id),
                content=bundle.data,
                headers={"content-type": "application/gzip"},
            )
    except httpx.TimeoutException:
        raise Unavailable(
            f"the controller at {base} did not answer in time while uploading the workspace"
        ) from None
    except httpx.HTTPError:
        raise Unavailable(f"cannot reach the controller at {base}: is it running?") from None
    if put.status_code >= 400:
        try:
            body = put.json()
        except ValueError:
            body = None
        raise error_from_body(put.status_code, body)
    return True
