"""Where worker machines come from: local processes, a fixed host list, or an in-memory fake."""

from iris.cluster.platforms.base import (
    Platform,
    PlatformError,
    SliceHandle,
    SliceInfo,
    SliceState,
    worker_id_for,
)
from iris.cluster.platforms.factory import make_platform
from iris.cluster.platforms.fake import FakePlatform
from iris.cluster.platforms.local import LocalPlatform
from iris.cluster.platforms.manual import ManualPlatform

__all__ = [
    "FakePlatform",
    "LocalPlatform",
    "ManualPlatform",
    "Platform",
    "PlatformError",
    "SliceHandle",
    "SliceInfo",
    "SliceState",
    "make_platform",
    "worker_id_for",
]
