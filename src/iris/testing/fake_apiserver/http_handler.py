"""HTTP front end: REST verbs, watch streams, the pods/log subresource, discovery."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import socket
import ssl
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

import yaml

from iris.testing.fake_apiserver import discovery, errors
from iris.testing.fake_apiserver.errors import ApiError
from iris.testing.fake_apiserver.exec_session import SUBPROTOCOLS, ExecSession
from iris.testing.fake_apiserver.pod_logs import LogQuery
from iris.testing.fake_apiserver.resources import PODS
from iris.testing.fake_apiserver.routing import ResourceRoute, route_resource
from iris.testing.fake_apiserver.selectors import (
    fields_match,
    labels_match,
)
from iris.testing.fake_apiserver.subscriptions import WatchEvent
from iris.testing.fake_apiserver.tables import render_table
from iris.testing.fake_apiserver.websocket import OP_BINARY, OP_CLOSE, accept_key, encode_frame

if TYPE_CHECKING:
    from iris.testing.fake_apiserver.server import FakeApiServer

_WATCH_MAX_BACKLOG = 100_000
_DEFAULT_WATCH_TIMEOUT = 1800.0


class ApiHttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that remembers its connections so ``stop`` can cut keep-alive clients."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], api: FakeApiServer, ssl_context: ssl.SSLContext | None
    ) -> None:
        self.api = api
        self._connections: set[socket.socket] = set()
        super().__init__(address, ApiRequestHandler)
        if ssl_context is not None:
            # The handshake runs in the connection's own thread (see ApiRequestHandler.setup).
            self.socket = ssl_context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Failed handshakes and dropped clients are routine; keep stderr quiet."""

    def process_request(self, request: Any, client_address: Any) -> None:
        self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        for connection in list(self._connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _int_param(query: dict[str, str], name: str) -> int | None:
    value = query.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"invalid {name}: {value!r}") from None


class ApiRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ApiHttpServer
    _streaming = False

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def api(self) -> FakeApiServer:
        return self.server.api

    # ----- plumbing -----------------------------------------------------------------------------

    def _send_bytes(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_json(self, code: int, obj: Any) -> None:
        self._send_bytes(code, json.dumps(obj, separators=(",", ":")).encode(), "application/json")

    def _send_error(self, error: ApiError) -> None:
        self._send_json(error.code, error.status())

    def _start_stream(self, content_type: str) -> None:
        self._streaming = True
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.close_connection = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass

    def _read_body(self) -> Any:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        content_type = self.headers.get("Content-Type", "")
        try:
            if "yaml" in content_type:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"the request body could not be decoded: {exc}") from None

    def _authorized(self) -> bool:
        tokens = self.api.tokens
        if not tokens:
            return True
        header = self.headers.get("Authorization", "")
        return header.startswith("Bearer ") and header[len("Bearer ") :].strip() in tokens

    # ----- dispatch -----------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        self._streaming = False
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        try:
            body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
            if path in ("/healthz", "/readyz", "/livez"):
                return self._send_bytes(200, b"ok", "text/plain; charset=utf-8")
            if not self._authorized():
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if method == "GET" and (document := self._discovery(path)) is not None:
                return self._send_json(200, document)
            route = route_resource(path, self.api.registry)
            if route is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            handler = {
                "GET": self._get,
                "POST": self._post,
                "PUT": self._put,
                "PATCH": self._patch,
                "DELETE": self._delete,
            }[method]
            handler(route, query, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - an API server answers 500, it does not die
            if self._streaming:  # headers are out: all that is left is to end the stream
                self.close_connection = True
                return
            if not isinstance(exc, ApiError):
                exc = ApiError(500, "InternalError", f"Internal error occurred: {type(exc).__name__}: {exc}")
            self._send_error(exc)

    def _discovery(self, path: str) -> Any:
        registry = self.api.registry
        parts = [p for p in path.split("/") if p]
        if path == "/version":
            return discovery.KUBERNETES_VERSION
        if path == "/api":
            return discovery.core_versions()
        if path == "/apis":
            return discovery.group_list(registry)
        if path == "/openapi/v3":
            return discovery.openapi_v3_root(registry)
        if len(parts) >= 3 and parts[:2] == ["openapi", "v3"]:
            return discovery.openapi_v3_document(registry, "/".join(parts[2:]))
        if len(parts) == 2 and parts[0] == "api":
            return discovery.resource_list(registry, "", parts[1])
        if len(parts) == 2 and parts[0] == "apis":
            return discovery.group(registry, parts[1])
        if len(parts) == 3 and parts[0] == "apis":
            return discovery.resource_list(registry, parts[1], parts[2])
        return None

    # ----- verbs --------------------------------------------------------------------------------

    def _get(self, route: ResourceRoute, query: dict[str, str], _body: Any) -> None:
        store = self.api.store
        if route.subresource == "log":
            return self._logs(route, query)
        if route.subresource == "exec":
            return self._exec(route, query)
        if route.legacy_watch or _truthy(query.get("watch")):
            return self._watch(route, query)
        if route.name is not None:
            if route.subresource not in (None, "status"):
                raise errors.bad_request(f"{route.subresource} does not support GET")
            obj = store.get(route.resource, route.namespace, route.name, copy_result=False)
            if self._wants_table():
                list_meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
                include = query.get("includeObject", "Metadata")
                return self._send_json(200, render_table(route.resource, [obj], list_meta, include))
            return self._send_json(200, obj)
        result = store.list(
            route.resource,
            route.namespace,
            label_selector=query.get("labelSelector"),
            field_selector=query.get("fieldSelector"),
            limit=_int_param(query, "limit"),
            continue_token=query.get("continue") or None,
            copy_result=False,
        )
        list_meta: dict[str, Any] = {"resourceVersion": result.resource_version}
        if result.continue_token:
            list_meta["continue"] = result.continue_token
            list_meta["remainingItemCount"] = result.remaining_item_count
        if self._wants_table():
            return self._send_json(
                200,
                render_table(route.resource, result.items, list_meta, query.get("includeObject", "Metadata")),
            )
        self._send_json(
            200,
            {
                "kind": route.resource.list_kind,
                "apiVersion": route.resource.api_version,
                "metadata": list_meta,
                "items": result.items,
            },
        )

    def _wants_table(self) -> bool:
        return "as=Table" in self.headers.get("Accept", "")

    def _post(self, route: ResourceRoute, query: dict[str, str], body: Any) -> None:
        store = self.api.store
        dry_run = bool(query.get("dryRun"))
        if route.name is None:
            return self._send_json(201, store.create(route.resource, route.namespace, body, dry_run=dry_run))
        if route.subresource == "exec":
            return self._exec(route, query)
        if route.resource == PODS and route.subresource == "binding":
            target = ((body or {}).get("target") or {}).get("name")
            if not target:
                raise errors.invalid(PODS, route.name, ["target.name: Required value"])
            store.bind_pod(route.namespace or "", route.name, target)
            return self._send_json(
                201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
            )
        if route.resource == PODS and route.subresource == "eviction":
            options = (body or {}).get("deleteOptions") or {}
            store.delete(
                PODS,
                route.namespace,
                route.name,
                grace_period_seconds=options.get("gracePeriodSeconds"),
                dry_run=dry_run,
            )
            return self._send_json(
                201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
            )
        raise ApiError(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )

    def _put(self, route: ResourceRoute, query: dict[str, str], body: Any) -> None:
        if route.name is None or route.subresource not in (None, "status"):
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        obj = self.api.store.replace(
            route.resource,
            route.namespace,
            route.name,
            body,
            subresource=route.subresource,
            dry_run=bool(query.get("dryRun")),
        )
        self._send_json(200, obj)

    def _patch(self, route: ResourceRoute, query: dict[str, str], body: Any) -> None:
        if route.name is None or route.subresource not in (None, "status"):
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        patch_type = self.headers.get("Content-Type", "").split(";")[0].strip()
        obj = self.api.store.patch(
            route.resource,
            route.namespace,
            route.name,
            body,
            patch_type,
            subresource=route.subresource,
            dry_run=bool(query.get("dryRun")),
        )
        self._send_json(200, obj)

    def _delete(self, route: ResourceRoute, query: dict[str, str], body: Any) -> None:
        options = body if isinstance(body, dict) else {}
        grace = _int_param(query, "gracePeriodSeconds")
        if grace is None and options.get("gracePeriodSeconds") is not None:
            grace = int(options["gracePeriodSeconds"])
        dry_run = bool(query.get("dryRun")) or bool(options.get("dryRun"))
        store = self.api.store
        if route.name is None:
            deleted = store.delete_collection(
                route.resource,
                route.namespace,
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                grace_period_seconds=grace,
                dry_run=dry_run,
            )
            return self._send_json(
                200,
                {
                    "kind": route.resource.list_kind,
                    "apiVersion": route.resource.api_version,
                    "metadata": {"resourceVersion": str(store.resource_version)},
                    "items": deleted,
                },
            )
        preconditions = options.get("preconditions") or {}
        obj = store.delete(
            route.resource,
            route.namespace,
            route.name,
            grace_period_seconds=grace,
            precondition_uid=preconditions.get("uid"),
            precondition_resource_version=preconditions.get("resourceVersion"),
            dry_run=dry_run,
        )
        self._send_json(200, obj)

    # ----- watch --------------------------------------------------------------------------------

    def _watch(self, route: ResourceRoute, query: dict[str, str]) -> None:
        store = self.api.store
        field_selector = query.get("fieldSelector") or ""
        if route.name is not None:
            field_selector = ",".join(filter(None, [field_selector, f"metadata.name={route.name}"]))
        label_reqs = store.parse_label_requirements(query.get("labelSelector"))
        field_reqs = store.parse_field_requirements(route.resource, field_selector)
        timeout = float(_int_param(query, "timeoutSeconds") or _DEFAULT_WATCH_TIMEOUT)
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        try:
            subscription = store.subscribe(
                route.resource,
                route.namespace,
                resource_version=query.get("resourceVersion"),
                max_backlog=_WATCH_MAX_BACKLOG,
            )
        except ApiError as exc:
            if exc.code != 410:
                raise
            self._start_stream("application/json")
            self._write_chunk(json.dumps({"type": "ERROR", "object": exc.status()}).encode() + b"\n")
            return self._end_stream()

        def matches(obj: dict[str, Any] | None) -> bool:
            return (
                obj is not None
                and labels_match(label_reqs, obj["metadata"].get("labels"))
                and fields_match(field_reqs, obj)
            )

        def translate(event: WatchEvent) -> str | None:
            now = matches(event.object)
            if event.type != "MODIFIED":
                return event.type if now else None
            before = matches(event.previous) if event.previous is not None else now
            if before and now:
                return "MODIFIED"
            if now:
                return "ADDED"
            return "DELETED" if before else None

        as_table = self._wants_table()
        include = query.get("includeObject", "Metadata")
        deadline = time.monotonic() + timeout
        interval = self.api.bookmark_interval
        last_bookmark = time.monotonic()
        self._start_stream("application/json")
        try:
            while not self.api.stopping.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                event = subscription.get(timeout=min(remaining, interval))
                if event is None:
                    if subscription.closed:
                        break
                    if bookmarks and time.monotonic() - last_bookmark >= interval:
                        rv = store.quiescent_resource_version(subscription)
                        if rv is not None:
                            bookmark = {
                                "kind": route.resource.kind,
                                "apiVersion": route.resource.api_version,
                                "metadata": {"resourceVersion": str(rv), "annotations": {}},
                            }
                            self._write_chunk(
                                json.dumps({"type": "BOOKMARK", "object": bookmark}).encode() + b"\n"
                            )
                            last_bookmark = time.monotonic()
                    continue
                event_type = translate(event)
                if event_type is not None:
                    obj = event.object
                    if as_table:
                        row_meta = {"resourceVersion": str(event.resource_version)}
                        obj = render_table(route.resource, [obj], row_meta, include)
                    line = json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode()
                    self._write_chunk(line + b"\n")
            self._end_stream()
        except OSError:
            pass
        finally:
            subscription.close()

    # ----- exec ---------------------------------------------------------------------------------

    def _exec(self, route: ResourceRoute, query: dict[str, str]) -> None:
        if route.resource != PODS or route.name is None:
            raise errors.bad_request("exec is served for pods only")
        argv = parse_qs(urlparse(self.path).query).get("command") or []
        if not argv:
            raise errors.bad_request("you must specify at least 1 command")
        pod = self.api.store.get(PODS, route.namespace, route.name, copy_result=False)
        container = _pick_container(pod, query.get("container"))
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            raise errors.bad_request(
                f"cannot exec into a container in a completed pod; current phase is {phase}"
            )
        if "websocket" not in self.headers.get("Upgrade", "").lower():
            raise errors.bad_request(
                "pods/exec needs a websocket upgrade (v5.channel.k8s.io or v4.channel.k8s.io); SPDY is not served"
            )
        offered = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        protocol = next((p for p in SUBPROTOCOLS if p in offered), None)
        if protocol is None:
            raise errors.bad_request(
                f"none of the offered subprotocols {offered} is served; use one of {list(SUBPROTOCOLS)}"
            )
        handler = self.api.exec_handler
        if handler is None:
            raise errors.bad_request(f'unable to upgrade connection: container not found ("{container}")')
        try:
            process = handler(pod, container, argv, _truthy(query.get("stdin")))
            failure = None
        except OSError as exc:
            process, failure = (
                None,
                f'exec failed: unable to start container process: exec: "{argv[0]}": {exc.strerror or exc}',
            )
        self._streaming = True
        self.close_connection = True
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept_key(self.headers.get("Sec-WebSocket-Key", "")))
        self.send_header("Sec-WebSocket-Protocol", protocol)
        self.end_headers()
        self.wfile.flush()
        if process is None:
            status = ApiError(500, "InternalError", failure or "exec failed").status()
            self.wfile.write(encode_frame(OP_BINARY, bytes([3]) + json.dumps(status).encode()))
            self.wfile.write(encode_frame(OP_CLOSE, (1000).to_bytes(2, "big")))
            return
        ExecSession(self.rfile, self.wfile, process, argv).run()

    # ----- logs ---------------------------------------------------------------------------------

    def _logs(self, route: ResourceRoute, query: dict[str, str]) -> None:
        if route.resource != PODS or route.name is None:
            raise errors.bad_request("logs are served for pods only")
        pod = self.api.store.get(PODS, route.namespace, route.name, copy_result=False)
        container = _pick_container(pod, query.get("container"))
        log = self.api.pod_logs.get(pod["metadata"]["uid"], container)
        if log is None:
            reason = "ContainerCreating"
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                waiting = (status.get("state") or {}).get("waiting")
                if status.get("name") == container and waiting and waiting.get("reason"):
                    reason = waiting["reason"]
            raise errors.bad_request(
                f'container "{container}" in pod "{route.name}" is waiting to start: {reason}'
            )
        since = None
        if (seconds := _int_param(query, "sinceSeconds")) is not None:
            since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
        elif query.get("sinceTime"):
            since = dt.datetime.strptime(query["sinceTime"][:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
        log_query = LogQuery(
            timestamps=_truthy(query.get("timestamps")),
            tail_lines=_int_param(query, "tailLines"),
            since=since,
            limit_bytes=_int_param(query, "limitBytes"),
        )
        lines, offset = log.read_lines(log_query)
        budget = log_query.limit_bytes
        if not _truthy(query.get("follow")):
            data = "".join(f"{line}\n" for line in lines).encode()
            return self._send_bytes(200, data[:budget] if budget is not None else data, "text/plain")
        self._start_stream("text/plain")
        try:
            for line in itertools.chain(lines, log.follow(offset, log_query, self.api.stopping)):
                data = f"{line}\n".encode()
                if budget is not None:
                    data = data[:budget]
                    budget -= len(data)
                self._write_chunk(data)
                if budget is not None and budget <= 0:
                    break
            self._end_stream()
        except OSError:
            pass


def _pick_container(pod: dict[str, Any], requested: str | None) -> str:
    """The container a logs/exec request is about (the only one when the pod has one)."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    main = [c["name"] for c in spec.get("containers") or []]
    if not requested:
        if len(main) != 1:
            raise errors.bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(main)}]"
            )
        return main[0]
    if requested not in main + [c["name"] for c in spec.get("initContainers") or []]:
        raise errors.bad_request(f"container {requested} is not valid for pod {name}")
    return requested
