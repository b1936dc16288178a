// Job detail: summary, tasks with attempts, sub-jobs, a live log per task, events, Stop, CLI.

import { api } from "../api.js";
import { LogView } from "../components/logs.js";
import { spark } from "../components/spark.js";
import { badge, confirmDialog, copyText, fill, h, kvList, notice, table, toast } from "../dom.js";
import {
  TERMINAL_JOB_STATES, TERMINAL_TASK_STATES, ancestorJobIds, cliEquivalent, fmtAgo, fmtBytes, fmtClock,
  fmtCpu, fmtDuration, fmtTime, summarizeTaskCounts,
} from "../format.js";
import { Poller } from "../poll.js";
import { jobHref, taskHref } from "../router.js";

const TASK_PAGE = 200;

function resources(r) {
  if (!r) return "—";
  const parts = [`${fmtCpu(r.cpu_millicores)} cpu`, `${fmtBytes(r.memory_bytes)} memory`];
  if (r.disk_bytes) parts.push(`${fmtBytes(r.disk_bytes)} disk`);
  if (r.device) parts.push(`${r.device.count}× ${r.device.type}${r.device.variant ? ` ${r.device.variant}` : ""}`);
  return parts.join(" · ");
}

function span(start, end, now) {
  if (start == null) return "—";
  return fmtDuration((end ?? now) - start);
}

function breadcrumbs(jobId) {
  const user = jobId.replace(/^\/+/, "").split("/")[0];
  return h(
    "nav",
    { class: "crumbs", "aria-label": "Job tree" },
    h("a", { href: "#/jobs" }, "Jobs"),
    h("span", { class: "sep" }, "/"),
    h("a", { href: `#/jobs?user=${encodeURIComponent(user)}` }, user),
    ancestorJobIds(jobId).map((id) => [h("span", { class: "sep" }, "/"), h("a", { href: jobHref(id) }, id.split("/").pop())]),
    h("span", { class: "sep" }, "/"),
    h("span", { class: "here" }, jobId.split("/").pop()),
  );
}

function attemptsList(task) {
  if (!task.attempts || task.attempts.length === 0) return h("span", { class: "dim" }, "none yet");
  return h(
    "ol",
    { class: "attempts", start: "0" },
    task.attempts.map((a) =>
      h(
        "li",
        {},
        badge(a.state),
        " ",
        h("span", { class: "mono dim", title: "attempt uid" }, a.attempt_uid),
        a.worker_id ? [" on ", h("span", { class: "mono" }, a.worker_id)] : "",
        a.exit_code != null ? ` · exit ${a.exit_code}` : "",
        a.started_at ? ` · ${fmtDuration((a.finished_at ?? Date.now() / 1000) - a.started_at)}` : "",
        a.error ? [" · ", h("span", { class: "err-text" }, a.error)] : "",
      ),
    ),
  );
}


const FAILURE_KINDS = {
  exit_code: "non-zero exit",
  oom: "out of memory",
  timeout: "TIMEOUT (execution time limit)",
  worker_lost: "worker lost",
  preempted: "preempted",
  command_not_found: "command not found",
  killed: "killed",
  unschedulable: "unschedulable",
  gang_failed: "gang failed",
  start_failed: "could not start",
  disk: "out of disk",
  image: "image unavailable",
  environment: "ENVIRONMENT (uv could not build it)",
};

/** The failure kind shown beside a FAILED job's state (as the CLI's `FAILED (TIMEOUT)`), or null. */
function shownFailureKind(d) {
  if (d.state !== "FAILED") return null;
  const t = (d.tasks || []).find((x) => x.failure);
  return t && (["timeout", "oom", "disk", "environment"].includes(t.failure.kind)) ? t.failure.kind : null;
}

function failureBlock(t) {
  const f = t.failure;
  return h(
    "div",
    { class: "failure", dataset: { taskIndex: String(t.task_index), kind: f.kind } },
    h("h3", {}, h("span", { class: "kind" }, FAILURE_KINDS[f.kind] || f.kind), `task ${t.task_index}: `, h("span", { class: "failure-summary" }, f.summary)),
    f.exception && !f.summary.includes(f.exception) ? h("div", { class: "exception" }, f.exception) : null,
    f.log_tail && f.log_tail.length
      ? [h("div", { class: "dim small" }, `last ${f.log_tail.length} log lines`), h("pre", { class: "log-tail" }, f.log_tail.join("\n"))]
      : null,
  );
}

function cpuTime(u) {
  if (!u || u.cpu_seconds == null) return "—";
  return u.cpu_seconds < 60 ? `${u.cpu_seconds.toFixed(1)}s` : fmtDuration(u.cpu_seconds);
}

function memory(u) {
  if (!u || !u.peak_rss_bytes) return "—";
  const limit = u.memory_limit_bytes ? ` / ${fmtBytes(u.memory_limit_bytes)}` : "";
  const hot = u.memory_limit_bytes && u.peak_rss_bytes > 0.9 * u.memory_limit_bytes;
  return h("span", { class: hot ? "err-text nowrap" : "nowrap" }, `${fmtBytes(u.peak_rss_bytes)}${limit}`);
}

/** Memory (purple) and CPU cores in use (blue) over the attempt's life, from its usage history. */
function sparkline(u) {
  const pts = (u && u.history) || [];
  const cores = pts.map((p, i) => [p.ts, i === 0 ? 0 : (p.cpu_seconds - pts[i - 1].cpu_seconds) / Math.max(1e-6, p.ts - pts[i - 1].ts)]);
  const chart = spark(
    [
      { points: pts.map((p) => [p.ts, p.rss_bytes]), max: u ? u.memory_limit_bytes : 0, color: "#7c3aed" },
      { points: cores, max: 1, color: "#0ea5e9" },
    ],
    u ? `memory (purple, peak ${fmtBytes(u.peak_rss_bytes)}) and CPU cores in use (blue)` : "",
  );
  return chart || "—";
}

export function mount(root, route) {
  const jobId = route.id;
  let selectedIndex = route.taskIndex;
  let pinnedAttempt = route.query.get("attempt") || null; // null: follow the current attempt
  let detail = null;
  let taskPage = 0;
  let stopped = false;
  const openAttempts = new Set();

  const header = h("div", { class: "job-head" });
  const message = h("div", { class: "message" });
  const summary = h("div", { class: "card summary" });
  const cliBox = h("div", { class: "card cli" });
  const tasksCard = h("div", { class: "card" });
  const childrenCard = h("div", { class: "card", hidden: true });
  const eventsCard = h("div", { class: "card" });
  const failuresCard = h("div", { class: "card failures", hidden: true });
  const profileCard = h("div", { class: "card profile", hidden: true });
  let usageByTask = new Map();
  let allTasks = false;
  const logView = new LogView();
  const logsCard = h("div", { class: "card logs" }, h("h2", {}, "Logs"), logView.el);

  fill(
    root,
    h(
      "section",
      { class: "page page-job", dataset: { jobId } },
      breadcrumbs(jobId),
      header,
      message,
      h("div", { class: "job-top" }, summary, cliBox),
      failuresCard,
      tasksCard,
      profileCard,
      childrenCard,
      logsCard,
      eventsCard,
    ),
  );

  async function profile(t, what) {
    profileCard.hidden = false;
    const title = h(
      "h2",
      {},
      `Profile of task ${t.task_index} `,
      h("button", { type: "button", class: "btn small profile-threads-again", onclick: () => profile(t, "threads") }, "Threads"),
      " ",
      h("button", { type: "button", class: "btn small profile-flame", title: "py-spy samples the task for 5 s", onclick: () => profile(t, "flame") }, "CPU flame graph (5 s)"),
    );
    fill(profileCard, title, h("div", { class: "dim" }, what === "flame" ? "sampling for 5 s..." : "reading every thread's stack..."));
    try {
      if (what === "flame") {
        const blob = await api.profileTask(t.task_id, { kind: "cpu", format: "svg", duration_s: 5 });
        const url = URL.createObjectURL(new Blob([blob], { type: "image/svg+xml" }));
        fill(profileCard, title, h("img", { class: "flame-graph", src: url, alt: `CPU flame graph of task ${t.task_index}` }));
      } else {
        const text = await (await api.profileTask(t.task_id, { kind: "threads" })).text();
        fill(profileCard, title, h("pre", { class: "mono profile-text" }, text));
      }
    } catch (err) {
      fill(profileCard, title, notice("error", err.message));
    }
  }

  async function stopJob() {
    const ok = await confirmDialog({
      title: "Stop this job?",
      message: `Stop ${jobId}? Its running tasks are killed, and its sub-jobs stop too. This cannot be undone.`,
      confirmLabel: "Stop job",
      danger: true,
    });
    if (!ok) return;
    try {
      const resp = await api.stopJob(jobId);
      toast(`${resp.job_id} is ${resp.state.toLowerCase()}`, "ok");
    } catch (err) {
      toast(`Could not stop the job: ${err.message}`, "error");
    }
    poller.now();
  }

  function renderHeader(d) {
    const active = !TERMINAL_JOB_STATES.has(d.state);
    const cli = cliEquivalent(d.spec);
    fill(
      header,
      h("h1", { class: "mono" }, d.job_id),
      badge(d.state),
      shownFailureKind(d) ? h("span", { class: "failure-kind err-text mono", "data-failure-kind": shownFailureKind(d) }, shownFailureKind(d).toUpperCase()) : null,
      h("span", { class: "grow" }),
      h(
        "button",
        {
          type: "button",
          class: "btn",
          "data-action": "copy-cli",
          disabled: !cli.command,
          title: cli.command ? "Copy the iris command that submits the same job" : cli.unsupported.join(", "),
          onclick: async () => {
            const ok = await copyText(cli.command);
            toast(ok ? "Command copied" : "Copy failed: select the command below", ok ? "ok" : "error");
          },
        },
        "Copy CLI equivalent",
      ),
      active ? h("button", { type: "button", class: "btn danger", "data-action": "stop", onclick: stopJob }, "Stop job") : null,
    );
    fill(
      cliBox,
      h("h2", {}, "CLI equivalent"),
      cli.command ? h("pre", { class: "cli-command", "data-cli": "" }, cli.command) : h("p", { class: "dim" }, "This job cannot be submitted from the command line."),
      cli.unsupported.length ? h("p", { class: "dim small" }, `Not expressible on the command line: ${cli.unsupported.join(", ")}.`) : null,
    );
  }

  function renderSummary(d) {
    const now = Date.now() / 1000;
    fill(
      summary,
      kvList([
        ["User", d.user],
        ["Priority", d.priority.toLowerCase()],
        ["Tasks", `${d.replicas} · ${summarizeTaskCounts(d.task_counts).join(" · ") || "none"}`],
        ["Resources", `${resources(d.resources || d.spec.resources)} per task`],
        ["Command", h("code", {}, d.entrypoint || "—")],
        ["Submitted", `${fmtTime(d.submitted_at)} (${fmtAgo(d.submitted_at, now)})`],
        ["Started", d.started_at ? fmtTime(d.started_at) : "—"],
        ["Finished", d.finished_at ? fmtTime(d.finished_at) : "—"],
        ["Duration", d.started_at ? span(d.started_at, d.finished_at, now) : d.finished_at ? "—" : `waiting ${fmtDuration(now - d.submitted_at)}`],
        d.parent_job_id ? ["Parent job", h("a", { href: jobHref(d.parent_job_id), class: "mono" }, d.parent_job_id)] : null,
        d.exit_code != null ? ["Exit code", String(d.exit_code)] : null,
        d.error ? ["Error", h("span", { class: "err-text" }, d.error)] : null,
        d.pending_reason ? ["Waiting because", h("span", { class: "reason" }, d.pending_reason)] : null,
      ]),
    );
  }

  function renderFailures(d) {
    const failed = d.tasks.filter((t) => t.failure);
    failuresCard.hidden = failed.length === 0;
    if (!failed.length) return;
    fill(
      failuresCard,
      h("h2", {}, failed.length === 1 ? "Why it failed" : `Why ${failed.length} tasks failed`),
      failed.slice(0, 5).map((t) => failureBlock(t)),
      failed.length > 5 ? h("p", { class: "dim small" }, `… and ${failed.length - 5} more (iris job summary ${jobId}).`) : null,
    );
  }

  function renderTasks(d) {
    const now = Date.now() / 1000;
    // The controller sends one page of tasks (task_offset/task_limit); the counts cover them all.
    const total = Object.values(d.task_counts || {}).reduce((a, b) => a + b, 0);
    const pages = Math.max(1, Math.ceil(total / TASK_PAGE));
    const rows = d.tasks;
    const columns = [
      { label: "#", render: (t) => h("a", { href: taskHref(t.task_id) }, String(t.task_index)) },
      { label: "State", render: (t) => badge(t.state) },
      {
        label: "Attempts",
        render: (t) => {
          const det = h("details", { open: openAttempts.has(t.task_id) }, h("summary", {}, `${t.attempt_count}`), attemptsList(t));
          det.addEventListener("toggle", () => (det.open ? openAttempts.add(t.task_id) : openAttempts.delete(t.task_id)));
          return det;
        },
      },
      { label: "Worker", render: (t) => (t.worker_id ? h("span", { class: "mono nowrap" }, t.worker_id) : "—") },
      { label: "Exit", cls: "num", render: (t) => (t.exit_code != null ? String(t.exit_code) : "—") },
      { label: "Started", render: (t) => (t.started_at ? h("span", { class: "nowrap", title: fmtTime(t.started_at) }, fmtAgo(t.started_at, now)) : "—") },
      { label: "Duration", render: (t) => span(t.started_at, t.finished_at, now) },
      { label: "CPU time", cls: "num", render: (t) => cpuTime(usageByTask.get(t.task_index)) },
      { label: "Peak memory / limit", render: (t) => memory(usageByTask.get(t.task_index)) },
      { label: "Usage", render: (t) => sparkline(usageByTask.get(t.task_index)) },
      {
        label: "Error / waiting because",
        cls: "col-info",
        render: (t) =>
          t.failure ? h("span", { class: "err-text", title: t.failure.summary }, t.failure.summary)
          : t.error ? h("span", { class: "err-text", title: t.error }, t.error)
          : t.pending_reason ? h("span", { class: "reason", title: t.pending_reason }, t.pending_reason)
          : "",
      },
      {
        label: "",
        render: (t) =>
          h(
            "span",
            { class: "row-actions" },
            h("a", { href: taskHref(t.task_id), class: `btn small${t.task_index === selectedIndex ? " on" : ""}` }, "Logs"),
            t.state === "RUNNING"
              ? h("button", { type: "button", class: "btn small profile-threads", title: "py-spy: every thread's stack now (then a flame graph)", onclick: () => profile(t, "threads") }, "Profile")
              : null,
          ),
      },
    ];
    fill(
      tasksCard,
      h("h2", {}, `Tasks `, h("span", { class: "count" }, String(total))),
      table(columns, rows, {
        rowAttrs: (t) => ({ class: t.task_index === selectedIndex ? "selected" : "", dataset: { taskIndex: String(t.task_index), state: t.state } }),
      }),
      pages > 1
        ? h(
            "div",
            { class: "pager" },
            h("span", { class: "range" }, `tasks ${taskPage * TASK_PAGE}–${Math.min(total, (taskPage + 1) * TASK_PAGE) - 1} of ${total}`),
            h("button", { type: "button", class: "btn", disabled: taskPage === 0, onclick: () => { taskPage--; refresh(); } }, "‹ Prev"),
            h("button", { type: "button", class: "btn", disabled: taskPage >= pages - 1, onclick: () => { taskPage++; refresh(); } }, "Next ›"),
          )
        : null,
    );
  }

  async function renderChildren(d) {
    if (!d.children || d.children.length === 0) {
      childrenCard.hidden = true;
      return;
    }
    const list = await api.jobs({ parent: jobId, limit: 100, sort: "submitted_at", desc: "false" });
    childrenCard.hidden = false;
    const now = Date.now() / 1000;
    fill(
      childrenCard,
      h("h2", {}, "Sub-jobs ", h("span", { class: "count" }, String(d.children.length))),
      table(
        [
          { label: "Job", render: (j) => h("a", { href: jobHref(j.job_id), class: "mono" }, j.job_id) },
          { label: "State", render: (j) => badge(j.state) },
          { label: "Tasks", render: (j) => summarizeTaskCounts(j.task_counts).join(" · ") || "—" },
          { label: "Submitted", render: (j) => fmtAgo(j.submitted_at, now) },
          { label: "Details", cls: "col-info", render: (j) => j.error || j.pending_reason || "" },
        ],
        list.jobs,
        { rowAttrs: (j) => ({ dataset: { jobId: j.job_id } }) },
      ),
      list.total > list.jobs.length ? h("p", { class: "dim small" }, `Showing ${list.jobs.length} of ${list.total}.`) : null,
    );
  }

  function renderEvents(events) {
    fill(
      eventsCard,
      h("h2", {}, "Events"),
      events.length === 0
        ? h("div", { class: "empty" }, "No events yet.")
        : h(
            "div",
            { class: "table-wrap events" },
            table(
              [
                { label: "Time", render: (e) => h("span", { title: fmtTime(e.ts), class: "mono" }, fmtClock(e.ts)) },
                { label: "Event", render: (e) => h("span", { class: "event-kind" }, String(e.kind).replace(/_/g, " ")) },
                { label: "Task", render: (e) => (e.task_id ? h("a", { href: taskHref(e.task_id), class: "mono" }, e.task_id.split("/").pop()) : "") },
                { label: "Worker", render: (e) => (e.worker_id ? h("span", { class: "mono" }, e.worker_id) : "") },
                { label: "Message", cls: "col-info", render: (e) => e.message || "" },
              ],
              events,
            ),
          ),
    );
  }

  function selectedTask(d) {
    if (!d.tasks.length) return null;
    if (selectedIndex != null) {
      const t = d.tasks.find((x) => x.task_index === selectedIndex);
      if (t) return t;
    }
    const running = d.tasks.find((t) => !TERMINAL_TASK_STATES.has(t.state) && t.current_attempt_uid);
    return running || d.tasks[0];
  }

  function syncLogs(d) {
    const task = selectedTask(d);
    if (!task) {
      logsCard.hidden = true;
      return;
    }
    logsCard.hidden = false;
    const attempts = task.attempts || [];
    const pinned = pinnedAttempt && attempts.find((a) => a.attempt_uid === pinnedAttempt);
    const uid = pinned ? pinned.attempt_uid : task.current_attempt_uid;
    const taskSelect = h(
      "select",
      {
        "aria-label": "Task",
        name: "task",
        onchange: (e) => {
          if (e.target.value === "all") {
            allTasks = true;
            syncLogs(detail);
            return;
          }
          allTasks = false;
          location.hash = taskHref(`${jobId}/${e.target.value}`);
        },
      },
      d.tasks.length > 1 ? h("option", { value: "all", selected: allTasks }, "all tasks, interleaved") : null,
      d.tasks.slice(0, 1000).map((t) => h("option", { value: String(t.task_index), selected: !allTasks && t.task_index === task.task_index }, `task ${t.task_index} · ${t.state.toLowerCase()}`)),
    );
    const attemptSelect = h(
      "select",
      {
        "aria-label": "Attempt",
        name: "attempt",
        disabled: attempts.length < 2,
        onchange: (e) => {
          pinnedAttempt = e.target.value === task.current_attempt_uid ? null : e.target.value;
          syncLogs(detail);
        },
      },
      attempts.length === 0
        ? h("option", {}, "no attempt yet")
        : attempts.map((a) => h("option", { value: a.attempt_uid, selected: a.attempt_uid === uid }, `attempt ${a.attempt_number} · ${a.state.toLowerCase()}`)),
    );
    logView.setPickers(taskSelect, allTasks ? null : attemptSelect);
    if (allTasks) {
      logView.showJob(jobId, { running: !TERMINAL_JOB_STATES.has(d.state) });
      return;
    }
    const attempt = attempts.find((a) => a.attempt_uid === uid);
    logView.show(task.task_id, uid || null, {
      taskState: attempt ? attempt.state : task.state,
      pendingReason: task.pending_reason,
      attemptNumber: attempt ? attempt.attempt_number : null,
    });
  }

  async function refresh() {
    if (stopped) return;
    let d;
    let events;
    try {
      const page = { task_offset: taskPage * TASK_PAGE, task_limit: TASK_PAGE };
      [d, events] = await Promise.all([api.job(jobId, page), api.jobEvents(jobId, 200)]);
      const total = Object.values(d.task_counts || {}).reduce((a, b) => a + b, 0);
      if (taskPage > 0 && taskPage * TASK_PAGE >= total) {
        taskPage = Math.max(0, Math.ceil(total / TASK_PAGE) - 1);  // the job shrank (replaced)
        return refresh();
      }
    } catch (err) {
      if (err.status === 404) {
        stopped = true;
        poller.stop();
        logView.destroy();
        document.title = `${jobId} not found · Iris`;
        fill(
          root,
          h(
            "div",
            { class: "page page-job", dataset: { jobId, notFound: "1", loaded: "1" } },
            h("h1", { class: "mono" }, jobId),
            notice("error", `Job ${jobId} not found: ${err.message}. It may have been replaced, or never existed.`),
            h("p", {}, h("a", { href: "#/jobs" }, "Go to the jobs")),
          ),
        );
        return;
      }
      fill(message, notice("error", err.message));
      return;
    }
    detail = d;
    try {
      const usage = await api.jobSummary(jobId);
      usageByTask = new Map(usage.tasks.map((t) => [t.task_index, t]));
    } catch {
      usageByTask = new Map(); // usage is a nice-to-have: the page works without it
    }
    fill(message);
    document.title = `${d.job_id} · Iris`;
    renderHeader(d);
    renderSummary(d);
    renderFailures(d);
    renderTasks(d);
    syncLogs(d);
    renderEvents(events.events || []);
    try {
      await renderChildren(d);
    } catch (err) {
      fill(childrenCard, h("h2", {}, "Sub-jobs"), notice("error", err.message));
    }
    root.querySelector(".page-job").dataset.loaded = "1";
  }

  const poller = new Poller(refresh, 2000).start();

  return {
    update(r) {
      selectedIndex = r.taskIndex;
      pinnedAttempt = r.query.get("attempt") || null;
      if (detail) {
        renderTasks(detail);
        syncLogs(detail);
      }
    },
    unmount() {
      poller.stop();
      logView.destroy();
    },
  };
}
