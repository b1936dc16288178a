// Endpoints that tasks registered (name -> address), for finding a server a job runs.

import { api } from "../api.js";
import { fill, h, notice, table } from "../dom.js";
import { renderValue } from "../components/generic.js";
import { fmtAgo, fmtTime } from "../format.js";
import { Poller } from "../poll.js";
import { jobHref, taskHref } from "../router.js";

export function mount(root) {
  const subtitle = h("span", { class: "sub" });
  const message = h("div", { class: "message" });
  const wrap = h("div", { class: "card" });
  fill(
    root,
    h("section", { class: "page page-endpoints" }, h("div", { class: "page-head" }, h("h1", {}, "Endpoints"), subtitle), message, wrap),
  );

  async function refresh() {
    let data;
    try {
      data = await api.endpoints();
    } catch (err) {
      fill(message, notice("error", err.message));
      return;
    }
    fill(message);
    const now = Date.now() / 1000;
    const eps = data.endpoints || [];
    subtitle.textContent = `${eps.length} registered`;
    fill(
      wrap,
      eps.length === 0
        ? h("div", { class: "empty" }, "No task has registered an endpoint.")
        : h(
            "div",
            { class: "table-wrap" },
            table(
              [
                { label: "Name", render: (e) => h("span", { class: "mono strong" }, e.name) },
                { label: "Address", render: (e) => h("span", { class: "mono" }, e.address) },
                { label: "Namespace", render: (e) => h("span", { class: "mono dim" }, e.namespace || "—") },
                { label: "Job", render: (e) => (e.job_id ? h("a", { href: jobHref(e.job_id), class: "mono" }, e.job_id) : "—") },
                { label: "Task", render: (e) => (e.task_id ? h("a", { href: taskHref(e.task_id), class: "mono" }, e.task_id.split("/").pop()) : "—") },
                { label: "Metadata", render: (e) => renderValue(e.metadata, "metadata", 1) },
                { label: "Registered", render: (e) => h("span", { title: fmtTime(e.registered_at) }, fmtAgo(e.registered_at, now)) },
              ],
              eps,
            ),
          ),
    );
    root.querySelector(".page-endpoints").dataset.loaded = "1";
  }

  const poller = new Poller(refresh, 3000).start();
  return { unmount: () => poller.stop() };
}
