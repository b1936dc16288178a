// Pure formatting and derivation helpers (no DOM, no fetch): easy to test from a page.

export const JOB_STATES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "UNSCHEDULABLE"];
export const TERMINAL_JOB_STATES = new Set(["SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "UNSCHEDULABLE"]);
export const TERMINAL_TASK_STATES = new Set([
  "SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "PREEMPTED", "UNSCHEDULABLE", "COSCHED_FAILED",
]);
export const BANDS = ["PRODUCTION", "INTERACTIVE", "BATCH"];

/** Seconds as a short human duration: 0.4s, 12s, 3m 05s, 2h 07m, 3d 4h. */
export function fmtDuration(seconds) {
  if (seconds == null || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, seconds);
  if (s < 10) return `${s.toFixed(1)}s`;
  if (s < 60) return `${Math.floor(s)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 24) return `${hrs}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(hrs / 24)}d ${hrs % 24}h`;
}

/** How long ago an epoch-seconds timestamp was, relative to `now` (epoch seconds). */
export function fmtAgo(ts, now) {
  if (ts == null) return "—";
  const d = now - ts;
  if (d < 1) return "just now";
  return `${fmtDuration(d)} ago`;
}

function pad(n, w = 2) {
  return String(n).padStart(w, "0");
}

/** Local wall-clock time of an epoch-seconds timestamp: "2024-05-01 13:04:05". */
export function fmtTime(ts) {
  if (ts == null) return "—";
  const d = new Date(ts * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** Time of day with milliseconds, for log lines: "13:04:05.123". */
export function fmtClock(ts) {
  if (ts == null) return "";
  const d = new Date(ts * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** Bytes in decimal units with three significant digits: 2GB, 512MB, 1.5KB, 0B. */
export function fmtBytes(n) {
  if (n == null || !Number.isFinite(n)) return "—";
  const units = [["TB", 1e12], ["GB", 1e9], ["MB", 1e6], ["KB", 1e3]];
  for (const [unit, size] of units) {
    if (n >= size) return `${Number((n / size).toPrecision(3))}${unit}`;
  }
  return `${n}B`;
}

/** Millicores as cores: 2, 0.5, 0.25. */
export function fmtCpu(millicores) {
  if (millicores == null) return "—";
  return String(Number((millicores / 1000).toFixed(3)));
}

export function fmtPercent(fraction) {
  if (fraction == null || !Number.isFinite(fraction)) return "—";
  return `${Math.round(fraction * 100)}%`;
}

export function fmtCount(n) {
  return n == null ? "—" : Number(n).toLocaleString("en-US");
}

/** A CSS class for a job, task or worker state. */
export function stateClass(state) {
  return `st-${String(state || "unknown").toLowerCase().replace(/_/g, "-")}`;
}

/** "3 running · 1 pending" style summary of task counts, most interesting states first. */
export function summarizeTaskCounts(counts) {
  const order = ["RUNNING", "BUILDING", "ASSIGNED", "PENDING", "SUCCEEDED", "FAILED", "WORKER_FAILED",
    "KILLED", "PREEMPTED", "UNSCHEDULABLE", "COSCHED_FAILED"];
  const keys = Object.keys(counts || {}).sort((a, b) => {
    const ia = order.indexOf(a), ib = order.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
  });
  return keys.filter((k) => counts[k] > 0).map((k) => `${counts[k]} ${k.toLowerCase().replace(/_/g, " ")}`);
}

// ------------------------------------------------------------------ CLI equivalent

const SAFE_ARG = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** Quote one argument for a POSIX shell. */
export function shellQuote(arg) {
  const s = String(arg);
  if (s !== "" && SAFE_ARG.test(s)) return s;
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** Bytes as the shortest quantity `iris` parses back to exactly the same number. */
export function cliBytes(n) {
  const units = [["TB", 1e12], ["GB", 1e9], ["MB", 1e6], ["KB", 1e3],
    ["Ti", 2 ** 40], ["Gi", 2 ** 30], ["Mi", 2 ** 20], ["Ki", 2 ** 10]];
  for (const [unit, size] of units) {
    if (n >= size && n % size === 0) return `${n / size}${unit}`;
  }
  return String(n);
}

/** Millicores as the --cpu value: "1", "0.5", "250m". */
export function cliCpu(millicores) {
  if (millicores % 100 === 0) return String(millicores / 1000);
  return `${millicores}m`;
}

/**
 * The `iris job run` command that submits the same job as `spec` (a JobSpec).
 * Returns {command: string|null, unsupported: [what the command line cannot express]}.
 */
/** A constraint as `--constraint` takes it: zone=a, zone!=a, 'zone in (a,b)', mem>=64, gpu, !spot. */
export function constraintExpr(c) {
  const symbols = { EQ: "=", NE: "!=", GT: ">", GE: ">=", LT: "<", LE: "<=" };
  if (c.op === "IN") return `${c.key} in (${(c.values || []).join(",")})`;
  if (c.op === "EXISTS") return c.key;
  if (c.op === "NOT_EXISTS") return `!${c.key}`;
  return `${c.key}${symbols[c.op || "EQ"]}${c.value ?? ""}`;
}

/** A device request as `--device` takes it: TYPE[:VARIANT]:COUNT. */
function cliDevice(d) {
  return [d.type, d.variant, String(d.count ?? 1)].filter((p) => p).join(":");
}

export function cliEquivalent(spec) {
  const unsupported = [];
  const ep = spec.entrypoint || {};
  if (ep.kind !== "command") {
    return { command: null, unsupported: ["a Python callable entrypoint (submit it from Python)"] };
  }
  const res = spec.resources || {};
  const args = ["iris", "job", "run", "--name", spec.name];
  args.push("--cpu", cliCpu(res.cpu_millicores ?? 1000));
  args.push("--memory", cliBytes(res.memory_bytes ?? 512e6));
  if (res.disk_bytes) args.push("--disk", cliBytes(res.disk_bytes));
  if (res.device) args.push("--device", cliDevice(res.device));
  for (const [k, v] of Object.entries(spec.env || {})) args.push("--env", `${k}=${v}`);
  if ((spec.replicas ?? 1) !== 1) args.push("--replicas", String(spec.replicas));
  if (spec.max_retries_failure) args.push("--max-retries", String(spec.max_retries_failure));
  if ((spec.max_retries_preemption ?? 100) !== 100) args.push("--max-preemptions", String(spec.max_retries_preemption));
  if (spec.max_task_failures) args.push("--max-task-failures", String(spec.max_task_failures));
  if (spec.timeout_s) args.push("--timeout", String(spec.timeout_s));
  if (spec.scheduling_timeout_s) args.push("--scheduling-timeout", String(spec.scheduling_timeout_s));
  if (spec.priority && spec.priority !== "INTERACTIVE") args.push("--priority", spec.priority.toLowerCase());
  for (const c of spec.constraints || []) args.push("--constraint", constraintExpr(c));
  for (const c of spec.preferences || []) args.push("--prefer", constraintExpr(c));
  if (spec.coscheduling && spec.coscheduling.group_by) args.push("--group-by", spec.coscheduling.group_by);
  for (const p of spec.ports || []) args.push("--port", p);
  for (const s of spec.secrets || []) args.push("--secret", s.env && s.env !== s.name ? `${s.name}=${s.env}` : s.name);
  for (const pkg of (spec.environment && spec.environment.pip_packages) || []) args.push("--pip", pkg);
  // The project environment (uv sync of the workspace) is the CLI's default where there is a uv.lock.
  for (const extra of (spec.environment && spec.environment.extras) || []) args.push("--extra", extra);
  if (spec.environment && Object.keys(spec.environment.env_vars || {}).length) {
    unsupported.push("environment variables of the job's environment (use --env)");
  }
  if (spec.wait_for_capacity) args.push("--wait-for-capacity");
  if (spec.parent_job_id) unsupported.push("parent job (the command submits a top-level job)");
  const command = [...args.map(shellQuote), "--", ...(ep.argv || []).map(shellQuote)].join(" ");
  return { command, unsupported };
}

// ------------------------------------------------------------------ time series

/**
 * uPlot-shaped series from /api/v1/timeseries points:
 * {ts, queue: [running, pending], rate: [succeeded/s, failed/s]}. The first rate sample is null;
 * a drop in a cumulative count (finished jobs replaced, controller restart) counts as 0.
 */
export function seriesFromPoints(points) {
  const ts = [], running = [], pending = [], ok = [], bad = [];
  for (let i = 0; i < points.length; i++) {
    const p = points[i];
    ts.push(p.ts);
    running.push(p.running ?? 0);
    pending.push(p.pending ?? 0);
    if (i === 0) {
      ok.push(null);
      bad.push(null);
      continue;
    }
    const q = points[i - 1];
    const dt = p.ts - q.ts;
    const rate = (a, b) => (dt > 0 ? Math.max(0, (a ?? 0) - (b ?? 0)) / dt : null);
    ok.push(rate(p.succeeded, q.succeeded));
    bad.push(rate((p.failed ?? 0) + (p.killed ?? 0), (q.failed ?? 0) + (q.killed ?? 0)));
  }
  return { ts, running, pending, succeededRate: ok, failedRate: bad };
}

// ------------------------------------------------------------------ ids

/** Job or task id (with a leading slash) as a URL path without it. */
export function idPath(id) {
  return String(id).replace(/^\/+/, "").split("/").map(encodeURIComponent).join("/");
}

/** Split a task id into {jobId, index}; null when the last component is not a number. */
export function splitTaskId(id) {
  const m = /^(.*)\/(\d+)$/.exec(String(id));
  return m ? { jobId: m[1], index: Number(m[2]) } : null;
}

/** Ancestor job ids of a job id: "/u/a/b/c" -> ["/u/a", "/u/a/b"] (the first component is the user). */
export function ancestorJobIds(jobId) {
  const parts = String(jobId).replace(/^\/+/, "").split("/");
  const out = [];
  for (let i = 2; i < parts.length; i++) out.push("/" + parts.slice(0, i).join("/"));
  return out;
}
