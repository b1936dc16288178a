// Hash routes: #/jobs, #/jobs/alice/train, #/jobs/alice/train/0 (a task), #/workers, ...
// Query parameters after "?" keep page state (filters, sort, page) in the address.

/** Parse a location hash into {page, id, taskIndex, query}. */
export function parseHash(hash) {
  let text = String(hash || "").replace(/^#/, "");
  if (!text.startsWith("/")) text = "/" + text;
  const q = text.indexOf("?");
  const path = q >= 0 ? text.slice(0, q) : text;
  const query = new URLSearchParams(q >= 0 ? text.slice(q + 1) : "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const page = parts[0] || "jobs";
  if (page === "jobs" && parts.length >= 3) {
    const rest = parts.slice(1);
    const last = rest[rest.length - 1];
    if (/^\d+$/.test(last) && rest.length >= 3) {
      return { page: "job", id: "/" + rest.slice(0, -1).join("/"), taskIndex: Number(last), query };
    }
    return { page: "job", id: "/" + rest.join("/"), taskIndex: null, query };
  }
  return { page, id: null, taskIndex: null, query };
}

/** The hash of a job page (optionally focused on one task). */
export function jobHref(jobId, taskIndex = null) {
  const base = "#/jobs/" + String(jobId).replace(/^\/+/, "");
  return taskIndex == null ? base : `${base}/${taskIndex}`;
}

/** The hash of a task page, from a task id like "/alice/train/3". */
export function taskHref(taskId) {
  return "#/jobs/" + String(taskId).replace(/^\/+/, "");
}

/** Build "#/page?k=v" dropping empty values. */
export function pageHref(page, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "" || v === false) continue;
    q.set(k, Array.isArray(v) ? v.join(",") : String(v));
  }
  const s = q.toString();
  return `#/${page}${s ? "?" + s : ""}`;
}
