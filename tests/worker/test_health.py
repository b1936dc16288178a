"""Worker health: a full or unwritable state dir makes the worker report itself unhealthy."""

from __future__ import annotations

from pathlib import Path

from iris.cluster.worker.health import HealthCache, probe_health


def test_writable_state_dir_is_healthy(tmp_path: Path) -> None:
    health = probe_health(tmp_path, running_attempts=3)
    assert health.healthy and health.error is None and not health.disk_pressure
    assert health.running_attempts == 3 and health.disk_free_bytes > 0 and health.memory_used_bytes > 0
    assert not (tmp_path / ".health-probe").exists()


def test_full_disk_is_disk_pressure_not_death(tmp_path: Path) -> None:
    health = probe_health(tmp_path, running_attempts=0, min_free_bytes=1 << 60)
    assert health.healthy and health.disk_pressure and health.error.startswith("disk full:")


def test_unwritable_state_dir_is_disk_pressure(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    health = probe_health(not_a_dir, running_attempts=0)
    assert health.disk_pressure and "not writable" in health.error


def test_cache_refreshes_running_count_every_time(tmp_path: Path) -> None:
    running = [0]
    cache = HealthCache(tmp_path, lambda: running[0], max_age_s=60)
    assert cache.current().running_attempts == 0
    running[0] = 5
    assert cache.current().running_attempts == 5
