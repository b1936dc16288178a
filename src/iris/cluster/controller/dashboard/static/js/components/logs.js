// A log from the controller's log store. It opens at the END of the log (a tail read from the end,
// however big the log), "Load earlier" pages backwards, and while "follow" is on new lines arrive
// as they are written. One attempt of one task, or every task of the job interleaved by time with
// a [task N] prefix. ANSI colours are rendered, "\r" progress lines collapse to their last state,
// "Search" filters what is shown and (Enter) greps the whole log on the server.

import { api } from "../api.js";
import { fill, h, notice } from "../dom.js";
import { TERMINAL_TASK_STATES, fmtClock } from "../format.js";

const PAGE = 1000;
const MAX_LINES = 20000;
const FOLLOW_MS = 500;
const ANSI = /\x1b\[([0-9;]*)m/g;
const OTHER_ESCAPES = /\x1b\[[0-9;?]*[ -/]*[@-~]/g;

/** "\r" rewrites a terminal line in place: keep what the last rewrite left. */
export function collapseCarriageReturns(text) {
  if (!text.includes("\r")) return text;
  const parts = text.split("\r").filter((p) => p.length);
  return parts.length ? parts[parts.length - 1] : "";
}

/** Text with SGR colour codes -> spans (foreground colours and bold); other escapes dropped. */
export function ansiNodes(text) {
  text = collapseCarriageReturns(text);
  if (!text.includes("\x1b")) return [text];
  const out = [];
  let classes = [];
  let last = 0;
  const push = (chunk) => {
    chunk = chunk.replace(OTHER_ESCAPES, "");
    if (!chunk) return;
    out.push(classes.length ? h("span", { class: classes.join(" ") }, chunk) : chunk);
  };
  for (const m of text.matchAll(ANSI)) {
    push(text.slice(last, m.index));
    last = m.index + m[0].length;
    for (const code of (m[1] || "0").split(";").map(Number)) {
      if (code === 0) classes = [];
      else if (code === 1) classes = [...classes.filter((c) => c !== "ansi-bold"), "ansi-bold"];
      else if ((code >= 30 && code <= 37) || (code >= 90 && code <= 97)) {
        classes = [...classes.filter((c) => !c.startsWith("ansi-fg")), `ansi-fg${code}`];
      } else if (code === 39) classes = classes.filter((c) => !c.startsWith("ansi-fg"));
    }
  }
  push(text.slice(last));
  return out;
}

export class LogView {
  constructor() {
    this.jobId = null;
    this.taskId = null; // null with jobId set: every task of the job
    this.attemptUid = null;
    this.attemptNumber = null;
    this.first = 0; // line number of the first line shown (single attempt)
    this.offset = 0; // next line to read (single attempt)
    this.total = 0;
    this.cursor = ""; // job mode follow cursor
    this.complete = false;
    this.follow = true;
    this.searchMode = null; // the pattern of a whole-log search being shown
    this.gen = 0;
    this.timer = null;
    this.followBox = h("input", { type: "checkbox", checked: true, name: "follow" });
    this.followBox.addEventListener("change", () => {
      this.follow = this.followBox.checked;
      if (this.follow) {
        this.scrollToEnd();
        this.schedule(0);
      } else {
        clearTimeout(this.timer);
      }
      this.renderStatus();
    });
    this.search = h("input", {
      type: "search",
      name: "log-search",
      placeholder: "Search (Enter: whole log)",
      "aria-label": "Search the log",
      class: "log-search",
    });
    this.search.addEventListener("input", () => this.applyFilter());
    this.search.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        this.searchWholeLog(this.search.value);
      }
    });
    this.earlier = h("button", { type: "button", class: "btn small", "data-action": "load-earlier", hidden: true }, "Load earlier");
    this.earlier.addEventListener("click", () => this.loadEarlier());
    this.download = h("button", { type: "button", class: "btn small", "data-action": "download-log" }, "Download");
    this.download.addEventListener("click", () => this.downloadAll());
    this.status = h("span", { class: "log-status dim" });
    this.message = h("div", { class: "message" });
    this.lines = h("div", { class: "log-lines", role: "log", "aria-label": "Task log" });
    this.toolbarExtra = h("span", { class: "log-pickers" });
    this.el = h(
      "div",
      { class: "logview" },
      h(
        "div",
        { class: "log-toolbar" },
        this.toolbarExtra,
        h("label", { class: "check follow" }, this.followBox, " follow"),
        this.search,
        this.download,
        this.status,
      ),
      this.message,
      this.earlier,
      this.lines,
    );
  }

  /** Pickers (task and attempt selects) shown in the toolbar. */
  setPickers(...nodes) {
    fill(this.toolbarExtra, ...nodes);
  }

  /** Every task of `jobId`, interleaved by time (their current attempts). */
  showJob(jobId, { running } = {}) {
    if (this.jobId === jobId && this.taskId === null && this.attemptUid === null) return;
    this.reset();
    this.jobId = jobId;
    this.follow = Boolean(running);
    this.followBox.checked = this.follow;
    this.schedule(0);
  }

  /** Show the log of `taskId`'s attempt `attemptUid` (null: the task has not started yet). */
  show(taskId, attemptUid, { taskState, pendingReason, attemptNumber } = {}) {
    if (taskId === this.taskId && attemptUid === this.attemptUid) return;
    this.reset();
    this.jobId = taskId.slice(0, taskId.lastIndexOf("/"));
    this.taskId = taskId;
    this.attemptUid = attemptUid;
    this.attemptNumber = attemptNumber ?? null;
    this.follow = !TERMINAL_TASK_STATES.has(taskState);
    this.followBox.checked = this.follow;
    if (!attemptUid) {
      this.lines.append(
        h("div", { class: "log-empty" }, `This task has not started yet${pendingReason ? `: ${pendingReason.replace(/[.\s]*$/, "")}` : ""}. Its output appears here once it runs.`),
      );
      this.renderStatus();
      return;
    }
    this.schedule(0);
  }

  reset() {
    this.gen++;
    clearTimeout(this.timer);
    this.taskId = null;
    this.attemptUid = null;
    this.first = this.offset = this.total = 0;
    this.cursor = "";
    this.started = false;
    this.complete = false;
    this.searchMode = null;
    this.lines.replaceChildren();
    this.earlier.hidden = true;
    fill(this.message);
  }

  schedule(ms) {
    clearTimeout(this.timer);
    const gen = this.gen;
    this.timer = setTimeout(() => this.fetchMore(gen), ms);
  }

  atBottom() {
    const el = this.lines;
    return el.scrollHeight - el.scrollTop - el.clientHeight < 40;
  }

  scrollToEnd() {
    this.lines.scrollTop = this.lines.scrollHeight;
  }

  get jobMode() {
    return this.taskId === null;
  }

  async fetchMore(gen) {
    if (gen !== this.gen || this.searchMode) return;
    if (!this.jobMode && !this.attemptUid) return;
    let resp;
    try {
      if (this.jobMode) {
        resp = await api.jobLogs(this.jobId, this.started ? { after: this.cursor, limit: PAGE } : { tail: PAGE });
      } else if (!this.started) {
        resp = await api.taskLogs(this.taskId, { tail: PAGE, attempt: this.attemptUid });
      } else {
        resp = await api.taskLogs(this.taskId, { offset: this.offset, limit: PAGE, attempt: this.attemptUid });
      }
    } catch (err) {
      if (gen !== this.gen) return;
      fill(this.message, notice("error", `Cannot read the log: ${err.message}`));
      if (this.follow) this.schedule(3000);
      return;
    }
    if (gen !== this.gen) return;
    fill(this.message);
    const stick = this.follow || this.atBottom() || !this.started;
    if (this.jobMode) {
      if (!this.started) this.earlier.hidden = !resp.truncated;
      this.cursor = resp.cursor;
    } else {
      if (!this.started) {
        this.first = resp.start_offset;
        this.earlier.hidden = this.first === 0;
      }
      this.offset = resp.next_offset;
      this.total = resp.total_lines ?? resp.next_offset;
    }
    this.started = true;
    this.append(resp.lines);
    this.complete = resp.complete;
    if (stick) this.scrollToEnd();
    this.renderStatus();
    if (resp.lines.length >= PAGE && this.follow) this.schedule(0); // catching up
    else if (!this.complete && this.follow) this.schedule(FOLLOW_MS);
  }

  async loadEarlier() {
    const gen = this.gen;
    if (this.jobMode) {
      // Interleaved tasks: the earlier part is the whole log (download it) or a single task.
      fill(this.message, notice("info", "Pick one task to page back through its log, or download the whole log."));
      return;
    }
    if (this.first <= 0) return;
    let resp;
    try {
      resp = await api.taskLogs(this.taskId, { tail: PAGE, before: this.first, attempt: this.attemptUid });
    } catch (err) {
      fill(this.message, notice("error", `Cannot read the log: ${err.message}`));
      return;
    }
    if (gen !== this.gen) return;
    const el = this.lines;
    const fromBottom = el.scrollHeight - el.scrollTop;
    this.first = resp.start_offset;
    this.earlier.hidden = this.first === 0;
    this.prepend(resp.lines);
    el.scrollTop = el.scrollHeight - fromBottom; // keep what the reader was looking at in place
    this.renderStatus();
  }

  async searchWholeLog(pattern) {
    if (!pattern) {
      this.clearSearch();
      return;
    }
    const gen = ++this.gen;
    clearTimeout(this.timer);
    const params = { grep: pattern, ignore_case: true, limit: 5000 };
    if (!this.jobMode) {
      params.task = Number(this.taskId.split("/").pop());
      if (this.attemptNumber != null) params.attempt = this.attemptNumber;
    }
    let resp;
    try {
      resp = await api.jobLogs(this.jobId, params);
    } catch (err) {
      fill(this.message, notice("error", err.message));
      return;
    }
    if (gen !== this.gen) return;
    this.searchMode = pattern;
    this.lines.replaceChildren();
    this.earlier.hidden = true;
    this.append(resp.lines);
    const n = resp.lines.length;
    fill(
      this.message,
      h(
        "div",
        { class: "notice info search-result" },
        `${n.toLocaleString("en-US")} ${n === 1 ? "line matches" : "lines match"} “${pattern}” in the whole log${n >= 5000 ? " (first 5,000 shown)" : ""}. `,
        h("button", { type: "button", class: "btn small", onclick: () => this.clearSearch() }, "Back to the log"),
      ),
    );
    this.renderStatus();
  }

  clearSearch() {
    const { jobId, taskId, attemptUid, attemptNumber } = this;
    const follow = this.follow;
    this.search.value = "";
    this.reset();
    this.jobId = jobId;
    this.taskId = taskId;
    this.attemptUid = attemptUid;
    this.attemptNumber = attemptNumber;
    this.follow = follow;
    this.schedule(0);
  }

  async downloadAll() {
    const params = { download: true, timestamps: true };
    if (!this.jobMode) {
      params.task = Number(this.taskId.split("/").pop());
      if (this.attemptNumber != null) params.attempt = this.attemptNumber;
    }
    try {
      const blob = await api.jobLogsText(this.jobId, params);
      const url = URL.createObjectURL(blob);
      const name = `${this.jobId.replace(/^\/+/, "").replace(/\//g, "_")}${this.jobMode ? "" : `_task${params.task}`}.log`;
      const a = h("a", { href: url, download: name, hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (err) {
      fill(this.message, notice("error", `Cannot download the log: ${err.message}`));
    }
  }

  lineNode(l) {
    const text = h("span", { class: "tx" }, ansiNodes(l.line));
    const prefix = this.jobMode && l.task_index != null ? h("span", { class: "task-prefix" }, `[task ${l.task_index}] `) : null;
    const node = h("div", { class: `ln ${l.stream}` }, h("span", { class: "ts" }, fmtClock(l.ts)), prefix, text);
    node.dataset.text = collapseCarriageReturns(l.line).replace(OTHER_ESCAPES, "").toLowerCase();
    return node;
  }

  append(lines) {
    if (!lines.length) return;
    const frag = document.createDocumentFragment();
    for (const l of lines) frag.append(this.lineNode(l));
    const empty = this.lines.querySelector(".log-empty");
    if (empty) empty.remove();
    this.lines.append(frag);
    const excess = this.lines.childElementCount - MAX_LINES;
    for (let i = 0; i < excess; i++) this.lines.firstElementChild.remove();
    if (excess > 0) {
      this.first += excess;
      this.earlier.hidden = this.jobMode;
    }
    this.applyFilter();
  }

  prepend(lines) {
    if (!lines.length) return;
    const frag = document.createDocumentFragment();
    for (const l of lines) frag.append(this.lineNode(l));
    this.lines.prepend(frag);
    this.applyFilter();
  }

  applyFilter() {
    const q = this.searchMode ? "" : this.search.value.trim().toLowerCase();
    let shown = 0;
    for (const node of this.lines.children) {
      if (!node.classList.contains("ln")) continue;
      const hit = !q || node.dataset.text.includes(q);
      node.hidden = !hit;
      if (hit) shown++;
    }
    this.el.dataset.filtered = q ? String(shown) : "";
  }

  renderStatus() {
    const parts = [];
    if (!this.jobMode && !this.attemptUid) parts.push("waiting for the task to start");
    else if (this.searchMode) parts.push("search results");
    else {
      const shown = this.lines.querySelectorAll(".ln").length;
      if (this.jobMode) parts.push(`last ${shown.toLocaleString("en-US")} ${shown === 1 ? "line" : "lines"} of every task`);
      else {
        const n = this.total;
        parts.push(`${n.toLocaleString("en-US")} ${n === 1 ? "line" : "lines"}`);
        if (this.first > 0) parts.push(`showing from line ${this.first.toLocaleString("en-US")}`);
      }
      if (this.complete) parts.push("end of log");
      else if (this.follow) parts.push("following…");
      else parts.push("paused");
    }
    this.status.textContent = parts.join(" · ");
    this.el.dataset.complete = this.complete ? "1" : "0";
    if ((this.jobMode || this.attemptUid) && !this.searchMode && !this.lines.querySelector(".ln")) {
      const text = this.complete ? "This attempt printed nothing." : "No output yet.";
      fill(this.lines, h("div", { class: "log-empty" }, text));
    }
  }

  destroy() {
    this.gen++;
    clearTimeout(this.timer);
  }
}
