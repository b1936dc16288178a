"""Shared helpers for the Kubernetes backend tests.

The suite runs with ``--import-mode=importlib``, which does not put test folders on
``sys.path``; this folder's helper modules (``k8s_pod_factory``, ``k8s_backend_helpers``)
are made importable here.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
