// The controller's public HTTP API, as the dashboard uses it. Every error becomes an ApiError
// carrying the server's message ({"error": {"code", "message"}}).

import { idPath } from "./format.js";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
  }
}

const listeners = new Set();

/** Subscribe to connectivity changes: fn(ok: boolean, error?: Error). */
export function onConnectivity(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function notify(ok, error) {
  for (const fn of listeners) fn(ok, error);
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === "") continue;
    if (Array.isArray(v)) v.forEach((x) => q.append(k, String(x)));
    else q.set(k, String(v));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

// A controller configured with tokens answers 401 until the page has one: ask once, keep it in
// this browser (localStorage), and send it as a bearer token from then on.
const TOKEN_KEY = "iris_token";
let asking = null;

// `iris cluster start --local` prints the dashboard's URL with its one-time token
// (http://127.0.0.1:PORT/?token=...): keep the token in this browser and take it out of the URL
// (history, bookmarks and screenshots then do not carry it).
(function adoptTokenFromUrl() {
  const url = new URL(window.location.href);
  const token = url.searchParams.get("token");
  if (!token) return;
  localStorage.setItem(TOKEN_KEY, token.trim());
  url.searchParams.delete("token");
  window.history.replaceState(window.history.state, "", url.pathname + url.search + url.hash);
})();

function authHeaders() {
  const token = localStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

function askForToken(message) {
  if (!asking) {
    asking = Promise.resolve().then(() => {
      const token = window.prompt(`${message}\n\nPaste an Iris token (it stays in this browser):`);
      if (token) localStorage.setItem(TOKEN_KEY, token.trim());
      asking = null;
      return Boolean(token);
    });
  }
  return asking;
}

async function request(method, path, params, retried = false) {
  let resp;
  try {
    resp = await fetch(path + query(params), {
      method,
      // Writes say JSON: a controller without tokens refuses other types (what a page can forge).
      headers: {
        Accept: "application/json",
        ...(method === "GET" ? {} : { "Content-Type": "application/json" }),
        ...authHeaders(),
      },
      cache: "no-store",
    });
  } catch (err) {
    const e = new ApiError(0, "unreachable", `cannot reach the controller (${err.message || err})`);
    notify(false, e);
    throw e;
  }
  notify(true);
  let body = null;
  const text = await resp.text();
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = null;
    }
  }
  if (resp.status === 401 && !retried) {
    localStorage.removeItem(TOKEN_KEY);
    if (await askForToken((body && body.error && body.error.message) || "This controller needs a token.")) {
      return request(method, path, params, true);
    }
  }
  if (!resp.ok) {
    const err = body && body.error;
    const detail = body && typeof body.detail === "string" ? body.detail : null;
    throw new ApiError(
      resp.status,
      (err && err.code) || `http_${resp.status}`,
      (err && err.message) || detail || `${method} ${path} failed with HTTP ${resp.status}`,
    );
  }
  return body;
}

/** A download (text) with the same auth as every other call. */
async function requestBlob(path, params, method = "GET") {
  const headers = { ...authHeaders(), ...(method === "GET" ? {} : { "Content-Type": "application/json" }) };
  const resp = await fetch(path + query(params), { method, headers, cache: "no-store" });
  if (!resp.ok) {
    let message = `${method} ${path} failed with HTTP ${resp.status}`;
    try {
      message = (await resp.json()).error.message || message;
    } catch {
      // not a JSON error body
    }
    throw new ApiError(resp.status, `http_${resp.status}`, message);
  }
  return resp.blob();
}

export const api = {
  dashboard: () => request("GET", "/api/v1/dashboard"),
  cluster: () => request("GET", "/api/v1/cluster"),
  stats: () => request("GET", "/api/v1/stats"),
  timeseries: () => request("GET", "/api/v1/timeseries"),
  jobs: (params) => request("GET", "/api/v1/jobs", params),
  job: (id, params) => request("GET", `/api/v1/jobs/${idPath(id)}`, params),
  jobEvents: (id, limit = 200) => request("GET", `/api/v1/jobs/${idPath(id)}:events`, { limit }),
  stopJob: (id) => request("POST", `/api/v1/jobs/${idPath(id)}:stop`),
  taskLogs: (taskId, params) => request("GET", `/api/v1/tasks/${idPath(taskId)}:logs`, params),
  jobLogs: (id, params) => request("GET", `/api/v1/jobs/${idPath(id)}:logs`, params),
  jobLogsText: (id, params) => requestBlob(`/api/v1/jobs/${idPath(id)}:logs`, params),
  jobSummary: (id) => request("GET", `/api/v1/jobs/${idPath(id)}:summary`),
  // kind: threads | cpu; format: text | svg (cpu only). Runs py-spy beside the task (as exec).
  profileTask: (taskId, params) => requestBlob(`/api/v1/tasks/${idPath(taskId)}:profile`, params, "POST"),
  scheduler: (params) => request("GET", "/api/v1/scheduler", params),
  workers: () => request("GET", "/api/v1/workers"),
  autoscaler: () => request("GET", "/api/v1/autoscaler"),
  clusterOverview: () => request("GET", "/api/v1/cluster/overview"),
  endpoints: () => request("GET", "/api/v1/endpoints"),
};
