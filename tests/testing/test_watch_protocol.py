"""The watch wire protocol, read raw: chunked JSON lines, selector transitions, bookmarks, 410."""

from __future__ import annotations

import json
import threading

import httpx

from iris.testing.fake_apiserver import CONFIGMAPS, PATCH_MERGE, FakeApiServer


def test_watch_stream_lines_selector_transitions_and_bookmarks() -> None:
    with FakeApiServer(bookmark_interval=0.1) as server:
        store = server.store
        start = store.resource_version

        def writer() -> None:
            store.create(CONFIGMAPS, "default", {"metadata": {"name": "other"}})  # never matches the selector
            store.create(CONFIGMAPS, "default", {"metadata": {"name": "cm"}})
            store.patch(CONFIGMAPS, "default", "cm", {"metadata": {"labels": {"w": "1"}}}, PATCH_MERGE)
            store.patch(CONFIGMAPS, "default", "cm", {"data": {"k": "v"}}, PATCH_MERGE)
            store.patch(CONFIGMAPS, "default", "cm", {"metadata": {"labels": {"w": "0"}}}, PATCH_MERGE)

        params = {
            "watch": "1",
            "resourceVersion": str(start),
            "labelSelector": "w=1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "1",
        }
        with httpx.stream(
            "GET", f"{server.url}/api/v1/namespaces/default/configmaps", params=params, timeout=10
        ) as response:
            assert response.headers["transfer-encoding"] == "chunked"
            threading.Thread(target=writer, daemon=True).start()
            events = []
            for line in response.iter_lines():
                if line:
                    events.append(json.loads(line))
                if any(e["type"] == "DELETED" for e in events) and events[-1]["type"] == "BOOKMARK":
                    break  # everything arrived, and a bookmark followed it
        changes = [(e["type"], e["object"]["metadata"]["name"]) for e in events if e["type"] != "BOOKMARK"]
        assert changes == [("ADDED", "cm"), ("MODIFIED", "cm"), ("DELETED", "cm")], (
            "enters, changes, leaves the selection"
        )
        versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert versions == sorted(versions)
        bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
        assert bookmarks and bookmarks[-1]["object"]["kind"] == "ConfigMap"
        assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) == store.resource_version


def test_watch_without_version_starts_with_the_current_state() -> None:
    with FakeApiServer() as server:
        server.store.create(CONFIGMAPS, "default", {"metadata": {"name": "existing"}})
        params = {"watch": "true", "timeoutSeconds": "1", "fieldSelector": "metadata.name=existing"}
        with httpx.stream(
            "GET", f"{server.url}/api/v1/namespaces/default/configmaps", params=params, timeout=10
        ) as response:
            events = [json.loads(line) for line in response.iter_lines() if line]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "existing")]


def test_too_old_version_is_an_expired_error_event() -> None:
    with FakeApiServer(history_size=3) as server:
        start = server.store.resource_version
        for i in range(5):
            server.store.create(CONFIGMAPS, "default", {"metadata": {"name": f"cm-{i}"}})
        params = {"watch": "1", "resourceVersion": str(start)}
        response = httpx.get(f"{server.url}/api/v1/namespaces/default/configmaps", params=params, timeout=10)
        assert response.status_code == 200
        (event,) = [json.loads(line) for line in response.text.splitlines()]
        assert event["type"] == "ERROR"
        assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
