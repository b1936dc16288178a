// A task's log for one attempt: reads from offset 0 until caught up, then (while "follow" is on)
// polls from next_offset and keeps the view scrolled to the newest line.

import { api } from "../api.js";
import { fill, h, notice } from "../dom.js";
import { TERMINAL_TASK_STATES, fmtClock } from "../format.js";

const PAGE = 1000;
const MAX_LINES = 10000;
const FOLLOW_MS = 500;

export class LogView {
  constructor() {
    this.taskId = null;
    this.attemptUid = null;
    this.offset = 0;
    this.complete = false;
    this.follow = true;
    this.dropped = 0;
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
        this.status,
      ),
      this.message,
      this.lines,
    );
  }

  /** Pickers (task and attempt selects) shown in the toolbar. */
  setPickers(...nodes) {
    fill(this.toolbarExtra, ...nodes);
  }

  /** Show the log of `taskId`'s attempt `attemptUid` (null: the task has not started yet). */
  show(taskId, attemptUid, { taskState, pendingReason } = {}) {
    if (taskId === this.taskId && attemptUid === this.attemptUid) return;
    this.gen++;
    clearTimeout(this.timer);
    this.taskId = taskId;
    this.attemptUid = attemptUid;
    this.offset = 0;
    this.complete = false;
    this.dropped = 0;
    this.lines.replaceChildren();
    fill(this.message);
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

  async fetchMore(gen) {
    if (gen !== this.gen || !this.attemptUid) return;
    let resp;
    try {
      resp = await api.taskLogs(this.taskId, { offset: this.offset, limit: PAGE, attempt: this.attemptUid });
    } catch (err) {
      if (gen !== this.gen) return;
      fill(this.message, notice("error", `Cannot read the log: ${err.message}`));
      if (this.follow) this.schedule(3000);
      return;
    }
    if (gen !== this.gen) return;
    fill(this.message);
    const stick = this.follow || this.atBottom();
    this.append(resp.lines);
    this.offset = resp.next_offset;
    this.complete = resp.complete;
    if (stick) this.scrollToEnd();
    this.renderStatus();
    if (resp.lines.length >= PAGE) this.schedule(0); // catching up
    else if (!this.complete && this.follow) this.schedule(FOLLOW_MS);
  }

  append(lines) {
    if (!lines.length) return;
    const frag = document.createDocumentFragment();
    for (const l of lines) {
      frag.append(
        h("div", { class: `ln ${l.stream}` }, h("span", { class: "ts" }, fmtClock(l.ts)), h("span", { class: "tx" }, l.line)),
      );
    }
    const empty = this.lines.querySelector(".log-empty");
    if (empty) empty.remove();
    this.lines.append(frag);
    const excess = this.lines.childElementCount - MAX_LINES;
    for (let i = 0; i < excess; i++) this.lines.firstElementChild.remove();
    if (excess > 0) this.dropped += excess;
  }

  renderStatus() {
    const n = this.offset;
    const parts = [];
    if (!this.attemptUid) parts.push("waiting for the task to start");
    else {
      parts.push(`${n.toLocaleString("en-US")} ${n === 1 ? "line" : "lines"}`);
      if (this.dropped) parts.push(`first ${this.dropped.toLocaleString("en-US")} hidden`);
      if (this.complete) parts.push("end of log");
      else if (this.follow) parts.push("following…");
      else parts.push("paused");
    }
    this.status.textContent = parts.join(" · ");
    this.el.dataset.complete = this.complete ? "1" : "0";
    if (this.attemptUid && !this.lines.querySelector(".ln")) {
      const text = this.complete ? "This attempt printed nothing." : "No output yet.";
      fill(this.lines, h("div", { class: "log-empty" }, text));
    }
  }

  destroy() {
    this.gen++;
    clearTimeout(this.timer);
  }
}
