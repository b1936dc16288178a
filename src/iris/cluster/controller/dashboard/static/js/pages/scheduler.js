// Scheduler: the pending queue by priority band, each task with why it waits and its position.

import { api } from "../api.js";
import { fill, h, notice, table } from "../dom.js";
import { BANDS, fmtAgo, fmtTime } from "../format.js";
import { Poller } from "../poll.js";
import { jobHref, taskHref } from "../router.js";

const BAND_HELP = {
  PRODUCTION: "placed first; may preempt lower bands",
  INTERACTIVE: "the default band",
  BATCH: "placed last; may be preempted",
};

export function mount(root) {
  const subtitle = h("span", { class: "sub" });
  const message = h("div", { class: "message" });
  const bandsEl = h("div", { class: "bands" });
  fill(
    root,
    h(
      "section",
      { class: "page page-scheduler" },
      h("div", { class: "page-head" }, h("h1", {}, "Scheduler"), subtitle),
      h("p", { class: "lead dim" }, "Tasks waiting to be placed, in the order the scheduler considers them, and why each one waits."),
      message,
      bandsEl,
    ),
  );

  function bandSection(band, entries, now) {
    return h(
      "div",
      { class: "card band-card", dataset: { band } },
      h("h2", {}, band.toLowerCase(), " ", h("span", { class: "count" }, String(entries.length)), h("span", { class: "dim small band-help" }, BAND_HELP[band] || "")),
      entries.length === 0
        ? h("div", { class: "empty" }, "Nothing waiting.")
        : table(
            [
              { label: "Position", cls: "num", render: (e) => (e.position != null ? String(e.position) : "—") },
              { label: "Task", render: (e) => h("a", { href: taskHref(e.task_id), class: "mono" }, e.task_id) },
              { label: "Job", render: (e) => h("a", { href: jobHref(e.job_id), class: "mono" }, e.job_id) },
              { label: "User", render: (e) => e.user },
              { label: "Waiting", render: (e) => h("span", { title: fmtTime(e.submitted_at) }, fmtAgo(e.submitted_at, now).replace(" ago", "")) },
              { label: "Code", render: (e) => (e.code ? h("span", { class: "code-tag" }, String(e.code).replace(/_/g, " ")) : "") },
              { label: "Why it waits", cls: "col-info", render: (e) => h("span", { class: "reason" }, e.reason || "—") },
            ],
            entries,
            { rowAttrs: (e) => ({ dataset: { taskId: e.task_id } }) },
          ),
    );
  }

  async function refresh() {
    let data;
    try {
      data = await api.scheduler();
    } catch (err) {
      fill(message, notice("error", err.message));
      return;
    }
    fill(message);
    const now = Date.now() / 1000;
    const bands = data.bands || {};
    const names = [...BANDS, ...Object.keys(bands).filter((b) => !BANDS.includes(b))];
    const total = names.reduce((n, b) => n + (bands[b] || []).length, 0);
    subtitle.textContent = total === 0 ? "queue empty" : `${total} waiting`;
    fill(bandsEl, names.map((b) => bandSection(b, bands[b] || [], now)));
    root.querySelector(".page-scheduler").dataset.loaded = "1";
  }

  const poller = new Poller(refresh, 2000).start();
  return { unmount: () => poller.stop() };
}
