"""Which file a command's name runs, found once per name and PATH, as a shell's command hash.

``subprocess.Popen`` given a bare name builds the full path of that name in every PATH directory
before each start (the child tries them in turn): on a worker that was a tenth of its Python time
per short task. The first directory holding an executable file of that name is what the child's
``execvpe`` would have run; it is remembered, and searched for again once it is no longer there.
"""

from __future__ import annotations

import os
import threading

_KEPT = 1024
_kept: dict[tuple[str, str], str] = {}
_lock = threading.Lock()


def _runnable(path: str) -> bool:
    return os.access(path, os.X_OK) and not os.path.isdir(path)


def resolve_executable(name: str, search_path: str) -> str | None:
    """The file ``name`` runs with ``PATH=search_path``; None to leave the search to the child:
    a name with a slash, a PATH with a relative entry (it depends on the working directory), or
    no such file (the child then fails with the usual error)."""
    if not name or "/" in name:
        return None
    key = (name, search_path)
    found = _kept.get(key)
    if found is not None and _runnable(found):
        return found
    directories = search_path.split(os.pathsep)
    if not all(d.startswith("/") for d in directories):
        return None
    found = next((p for d in directories if _runnable(p := f"{d.rstrip('/')}/{name}")), None)
    if found is None:
        return None
    with _lock:
        if len(_kept) >= _KEPT:
            _kept.pop(next(iter(_kept)), None)
        _kept[key] = found
    return found
