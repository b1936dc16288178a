// Jobs: filter by state, user and name; sortable columns; server-side pages; live refresh.

import { api } from "../api.js";
import { badge, fill, h, notice, table } from "../dom.js";
import {
  JOB_STATES, TERMINAL_JOB_STATES, fmtAgo, fmtCount, fmtDuration, fmtTime, stateClass, summarizeTaskCounts,
} from "../format.js";
import { Poller } from "../poll.js";
import { jobHref, pageHref } from "../router.js";

const PAGE_SIZES = [25, 50, 100];
const TEXT_SORTS = new Set(["job_id", "user", "state", "priority"]);
const TASK_STATE_ORDER = ["SUCCEEDED", "RUNNING", "BUILDING", "ASSIGNED", "PENDING", "FAILED", "WORKER_FAILED",
  "KILLED", "PREEMPTED", "UNSCHEDULABLE", "COSCHED_FAILED"];

/** Page state <-> hash query. */
function readState(query) {
  const size = Number(query.get("size"));
  return {
    states: (query.get("state") || "").split(",").map((s) => s.trim().toUpperCase()).filter(Boolean),
    user: query.get("user") || "",
    name: query.get("name") || "",
    roots: query.get("roots") === "1",
    sort: query.get("sort") || "submitted_at",
    desc: query.get("desc") !== "0",
    page: Math.max(1, Number(query.get("page")) || 1),
    size: PAGE_SIZES.includes(size) ? size : 50,
  };
}

function writeState(s) {
  const href = pageHref("jobs", {
    state: s.states,
    user: s.user,
    name: s.name,
    roots: s.roots ? "1" : "",
    sort: s.sort === "submitted_at" ? "" : s.sort,
    desc: s.desc ? "" : "0",
    page: s.page > 1 ? s.page : "",
    size: s.size === 50 ? "" : s.size,
  });
  if (location.hash !== href) history.replaceState(null, "", href);
}

function taskBar(counts, replicas) {
  const total = Object.values(counts || {}).reduce((a, b) => a + b, 0) || replicas || 0;
  const done = (counts || {}).SUCCEEDED || 0;
  const parts = TASK_STATE_ORDER.filter((k) => (counts || {})[k] > 0);
  return h(
    "div",
    { class: "taskbar", title: summarizeTaskCounts(counts).join(" · ") || "no tasks" },
    h(
      "div",
      { class: "taskbar-track" },
      parts.map((k) => h("span", { class: `seg ${stateClass(k)}`, style: { flexGrow: String(counts[k]) } })),
    ),
    h("span", { class: "taskbar-label" }, `${done}/${total}`),
  );
}

function jobDuration(j, now) {
  if (j.started_at != null) return fmtDuration((j.finished_at ?? now) - j.started_at);
  if (!TERMINAL_JOB_STATES.has(j.state)) return h("span", { class: "dim" }, `waiting ${fmtDuration(now - j.submitted_at)}`);
  return "—";
}

function jobInfo(j, reasons) {
  const quiet = j.state === "KILLED" || j.state === "SUCCEEDED";
  if (j.error) return h("span", { class: quiet ? "dim" : "err-text", title: j.error }, j.error);
  const reason = j.pending_reason || (j.state === "PENDING" && reasons.get(j.job_id));
  if (reason) return h("span", { class: "reason", title: reason }, reason);
  if (j.exit_code != null && j.state !== "SUCCEEDED") return `exit ${j.exit_code}`;
  return h("span", { class: "dim mono", title: j.entrypoint }, j.entrypoint);
}

/**
 * Why PENDING jobs wait, from the scheduler's queue, for list rows that carry no reason of their
 * own. Refreshed at most every 10 s, and only while such rows are shown.
 */
class PendingReasons {
  constructor() {
    this.byJob = new Map();
    this.fetchedAt = 0;
  }

  /** Fetch in the background when due; `onUpdate` runs once new reasons are in. */
  refresh(jobs, onUpdate) {
    const missing = jobs.some((j) => j.state === "PENDING" && !j.pending_reason);
    if (!missing || Date.now() - this.fetchedAt < 10000) return;
    this.fetchedAt = Date.now();
    api
      .scheduler({ limit: 1000 })
      .then((data) => {
        const map = new Map();
        for (const entries of Object.values(data.bands || {})) {
          for (const e of entries) if (e.reason && !map.has(e.job_id)) map.set(e.job_id, e.reason);
        }
        this.byJob = map;
        onUpdate();
      })
      .catch(() => {
        // reasons are a nicety here; the Scheduler page shows the error
      });
  }
}

export function mount(root, route) {
  let state = readState(route.query);
  let seq = 0;
  let last = null;
  const reasons = new PendingReasons();

  const title = h("h1", {}, "Jobs");
  const subtitle = h("span", { class: "sub" });
  const chips = h("div", { class: "chips", role: "group", "aria-label": "Filter by state" });
  const userInput = h("input", { type: "search", name: "user", placeholder: "user", value: state.user, "aria-label": "Filter by user" });
  const nameInput = h("input", { type: "search", name: "name", placeholder: "job name contains…", value: state.name, "aria-label": "Filter by name" });
  const rootsBox = h("input", { type: "checkbox", name: "roots", checked: state.roots });
  const message = h("div", { class: "message" });
  const tableWrap = h("div", { class: "table-wrap", id: "jobs-table" });
  const pager = h("div", { class: "pager" });

  let typingTimer = null;
  const onText = () => {
    clearTimeout(typingTimer);
    typingTimer = setTimeout(() => {
      state = { ...state, user: userInput.value.trim(), name: nameInput.value.trim(), page: 1 };
      changed();
    }, 250);
  };
  userInput.addEventListener("input", onText);
  nameInput.addEventListener("input", onText);
  rootsBox.addEventListener("change", () => {
    state = { ...state, roots: rootsBox.checked, page: 1 };
    changed();
  });

  fill(
    root,
    h(
      "section",
      { class: "page page-jobs" },
      h("div", { class: "page-head" }, title, subtitle),
      chips,
      h(
        "div",
        { class: "filters" },
        userInput,
        nameInput,
        h("label", { class: "check" }, rootsBox, " top-level jobs only"),
      ),
      message,
      tableWrap,
      pager,
    ),
  );

  function changed() {
    writeState(state);
    poller.now();
  }

  function toggleState(s) {
    const set = new Set(state.states);
    if (s === null) set.clear();
    else if (set.has(s)) set.delete(s);
    else set.add(s);
    state = { ...state, states: JOB_STATES.filter((x) => set.has(x)), page: 1 };
    changed();
  }

  function renderChips(counts) {
    const total = Object.values(counts || {}).reduce((a, b) => a + b, 0);
    const selected = new Set(state.states);
    fill(
      chips,
      h(
        "button",
        { type: "button", class: `chip${selected.size === 0 ? " on" : ""}`, dataset: { state: "ALL" }, onclick: () => toggleState(null) },
        "All ",
        h("span", { class: "n" }, fmtCount(total)),
      ),
      JOB_STATES.map((s) =>
        h(
          "button",
          {
            type: "button",
            class: `chip ${stateClass(s)}${selected.has(s) ? " on" : ""}`,
            "aria-pressed": selected.has(s) ? "true" : "false",
            dataset: { state: s },
            onclick: () => toggleState(s),
          },
          s.toLowerCase().replace(/_/g, " "),
          " ",
          h("span", { class: "n" }, fmtCount((counts || {})[s] || 0)),
        ),
      ),
    );
  }

  function onSort(key) {
    const desc = state.sort === key ? !state.desc : !TEXT_SORTS.has(key);
    state = { ...state, sort: key, desc, page: 1 };
    changed();
  }

  function renderTable(list) {
    const now = Date.now() / 1000;
    const columns = [
      { label: "Job", sortKey: "job_id", cls: "col-job", render: (j) => h("a", { href: jobHref(j.job_id), class: "mono" }, j.job_id) },
      { label: "User", sortKey: "user", render: (j) => j.user },
      { label: "State", sortKey: "state", cls: "nowrap", render: (j) => badge(j.state) },
      { label: "Tasks", cls: "nowrap", render: (j) => taskBar(j.task_counts, j.replicas) },
      { label: "Priority", sortKey: "priority", render: (j) => h("span", { class: "band" }, j.priority.toLowerCase()) },
      { label: "Submitted", sortKey: "submitted_at", cls: "nowrap", render: (j) => h("span", { title: fmtTime(j.submitted_at) }, fmtAgo(j.submitted_at, now)) },
      { label: "Finished", sortKey: "finished_at", cls: "nowrap", render: (j) => (j.finished_at ? h("span", { title: fmtTime(j.finished_at) }, fmtAgo(j.finished_at, now)) : "—") },
      { label: "Duration", cls: "nowrap", render: (j) => jobDuration(j, now) },
      { label: "Details", cls: "col-info", render: (j) => jobInfo(j, reasons.byJob) },
    ];
    if (list.jobs.length === 0) {
      const filtered = state.states.length || state.user || state.name || state.roots;
      fill(tableWrap, h("div", { class: "empty" }, filtered ? "No job matches these filters." : "No jobs yet. Submit one with: iris job run -- echo hello"));
      return;
    }
    fill(
      tableWrap,
      table(columns, list.jobs, {
        sort: { key: state.sort, desc: state.desc },
        onSort,
        rowAttrs: (j) => ({ dataset: { jobId: j.job_id, state: j.state } }),
      }),
    );
  }

  function renderPager(list) {
    const pages = Math.max(1, Math.ceil(list.total / state.size));
    const first = list.total === 0 ? 0 : list.offset + 1;
    const lastRow = list.offset + list.jobs.length;
    const go = (p) => {
      state = { ...state, page: Math.min(Math.max(1, p), pages) };
      changed();
    };
    const sizeSelect = h(
      "select",
      { "aria-label": "Jobs per page", onchange: (e) => { state = { ...state, size: Number(e.target.value), page: 1 }; changed(); } },
      PAGE_SIZES.map((n) => h("option", { value: String(n), selected: n === state.size }, `${n} per page`)),
    );
    fill(
      pager,
      h("span", { class: "range" }, `${fmtCount(first)}–${fmtCount(lastRow)} of ${fmtCount(list.total)}`),
      h("button", { type: "button", class: "btn", disabled: state.page <= 1, onclick: () => go(1), "aria-label": "First page" }, "«"),
      h("button", { type: "button", class: "btn", disabled: state.page <= 1, onclick: () => go(state.page - 1), "data-page": "prev" }, "‹ Prev"),
      h("span", { class: "page-no" }, `page ${fmtCount(state.page)} of ${fmtCount(pages)}`),
      h("button", { type: "button", class: "btn", disabled: state.page >= pages, onclick: () => go(state.page + 1), "data-page": "next" }, "Next ›"),
      h("button", { type: "button", class: "btn", disabled: state.page >= pages, onclick: () => go(pages), "aria-label": "Last page" }, "»"),
      sizeSelect,
    );
  }

  async function refresh() {
    const mySeq = ++seq;
    const s = state;
    const params = {
      state: s.states,
      user: s.user,
      name: s.name,
      roots: s.roots ? "true" : undefined,
      sort: s.sort,
      desc: s.desc ? "true" : "false",
      limit: s.size,
      offset: (s.page - 1) * s.size,
    };
    try {
      const [list, cluster] = await Promise.all([api.jobs(params), api.cluster()]);
      if (mySeq !== seq) return;
      last = list;
      fill(message);
      subtitle.textContent = `${fmtCount(list.total)} ${list.total === 1 ? "job" : "jobs"}${s.states.length || s.user || s.name || s.roots ? " match" : ""}`;
      renderChips(cluster.jobs_by_state);
      renderTable(list);
      renderPager(list);
      reasons.refresh(list.jobs, () => {
        if (last === list) renderTable(list);
      });
      if (list.jobs.length === 0 && list.total > 0 && s.page > 1) {
        state = { ...state, page: Math.max(1, Math.ceil(list.total / s.size)) };
        changed();
      }
      const pageEl = root.querySelector(".page-jobs");
      if (!pageEl.dataset.loaded) performance.mark("iris:jobs-rendered");
      pageEl.dataset.loaded = "1";
    } catch (err) {
      if (mySeq !== seq) return;
      fill(message, notice("error", err.message));
      if (!last) fill(tableWrap);
    }
  }

  renderChips({});
  const poller = new Poller(refresh, 2000).start();

  return {
    update(r) {
      state = readState(r.query);
      userInput.value = state.user;
      nameInput.value = state.name;
      rootsBox.checked = state.roots;
      poller.now();
    },
    unmount() {
      poller.stop();
      clearTimeout(typingTimer);
    },
  };
}
