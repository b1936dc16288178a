// Workers (WORKER backend): capacity, use, attributes, health, last contact, running tasks.

import { api } from "../api.js";
import { badge, fill, h, meter, notice, table } from "../dom.js";
import { fmtAgo, fmtBytes, fmtCpu, fmtPercent, fmtTime } from "../format.js";
import { spark } from "../components/spark.js";
import { Poller } from "../poll.js";
import { taskHref } from "../router.js";

function ratio(used, cap) {
  return cap > 0 ? used / cap : 0;
}

function utilisation(w) {
  const cap = w.capacity || {};
  const used = w.used || {};
  const cpu = ratio(used.cpu_millicores || 0, cap.cpu_millicores || 0);
  const mem = ratio(used.memory_bytes || 0, cap.memory_bytes || 0);
  return h(
    "div",
    { class: "util" },
    meter(cpu, `${fmtCpu(used.cpu_millicores || 0)} / ${fmtCpu(cap.cpu_millicores)} cpu`, `cpu reserved ${fmtPercent(cpu)}`),
    meter(mem, `${fmtBytes(used.memory_bytes || 0)} / ${fmtBytes(cap.memory_bytes)}`, `memory reserved ${fmtPercent(mem)}`),
    cap.device ? h("div", { class: "small dim" }, `${cap.device.count}× ${cap.device.type} ${cap.device.variant || ""}`) : null,
  );
}

function attributes(attrs) {
  const entries = Object.entries(attrs || {});
  if (!entries.length) return h("span", { class: "dim" }, "—");
  return h("div", { class: "attrs" }, entries.map(([k, v]) => h("span", { class: "attr" }, `${k}=${v}`)));
}

function running(tasks) {
  if (!tasks || !tasks.length) return h("span", { class: "dim" }, "idle");
  const shown = tasks.slice(0, 4);
  return h(
    "div",
    { class: "tasks-list" },
    shown.map((t) => h("a", { href: taskHref(t), class: "mono" }, t)),
    tasks.length > shown.length ? h("span", { class: "dim small" }, `+${tasks.length - shown.length} more`) : null,
  );
}

function health(w, samples) {
  const hl = w.health;
  if (!hl) return h("span", { class: "dim" }, "no report yet");
  const chart = spark(
    [
      { points: samples.map((p) => [p.ts, p.cpu]), max: 100, color: "#0ea5e9" },
      { points: samples.map((p) => [p.ts, p.mem]), max: w.capacity?.memory_bytes || 0, color: "#7c3aed" },
    ],
    "host CPU % (blue) and memory in use (purple) since this page opened",
  );
  return h(
    "div",
    { class: "small" },
    h("div", {}, `host cpu ${Math.round(hl.cpu_percent)}% · mem ${fmtBytes(hl.memory_used_bytes)}`),
    chart,
    h("div", { class: "dim" }, `disk free ${fmtBytes(hl.disk_free_bytes)}`),
    hl.error ? h("div", { class: "err-text" }, hl.error) : null,
  );
}

const HISTORY = 90; // samples kept per worker (one per poll: three minutes)

export function mount(root) {
  const history = new Map();
  const subtitle = h("span", { class: "sub" });
  const totals = h("div", { class: "stat-row" });
  const message = h("div", { class: "message" });
  const tableWrap = h("div", { class: "table-wrap" });
  fill(
    root,
    h(
      "section",
      { class: "page page-workers" },
      h("div", { class: "page-head" }, h("h1", {}, "Workers"), subtitle),
      totals,
      message,
      h("div", { class: "card" }, tableWrap),
    ),
  );

  function stat(label, value, cls = "") {
    return h("div", { class: `stat ${cls}` }, h("div", { class: "stat-value" }, value), h("div", { class: "stat-label" }, label));
  }

  async function refresh() {
    let data;
    try {
      data = await api.workers();
    } catch (err) {
      fill(message, notice("error", err.message));
      return;
    }
    fill(message);
    const now = Date.now() / 1000;
    const ws = data.workers || [];
    for (const w of ws) {
      if (!w.health) continue;
      const list = history.get(w.worker_id) || [];
      list.push({ ts: now, cpu: w.health.cpu_percent, mem: w.health.memory_used_bytes });
      if (list.length > HISTORY) list.shift();
      history.set(w.worker_id, list);
    }
    const by = (s) => ws.filter((w) => w.status === s).length;
    const cap = ws.filter((w) => w.status !== "DEAD").reduce((a, w) => a + (w.capacity?.cpu_millicores || 0), 0);
    const used = ws.filter((w) => w.status !== "DEAD").reduce((a, w) => a + (w.used?.cpu_millicores || 0), 0);
    subtitle.textContent = `${ws.length} registered`;
    fill(
      totals,
      stat("healthy", String(by("HEALTHY")), "ok"),
      stat("degraded", String(by("DEGRADED")), by("DEGRADED") ? "warn" : ""),
      stat("dead", String(by("DEAD")), by("DEAD") ? "bad" : ""),
      stat("cordoned", String(ws.filter((w) => w.cordon).length), ws.some((w) => w.cordon) ? "warn" : ""),
      stat("cpu reserved", `${fmtCpu(used)} / ${fmtCpu(cap)}`),
      stat("running tasks", String(ws.reduce((a, w) => a + (w.running_tasks || []).length, 0))),
    );
    if (!ws.length) {
      fill(tableWrap, h("div", { class: "empty" }, "No worker has registered yet."));
      return;
    }
    fill(
      tableWrap,
      table(
        [
          { label: "Worker", render: (w) => h("div", {}, h("div", { class: "mono strong" }, w.worker_id), h("div", { class: "mono dim small" }, w.address)) },
          { label: "Status", render: (w) => h("div", {}, badge(w.status), w.cordon ? h("div", { class: "cordon" }, badge(w.cordon), h("div", { class: "small err-text" }, `${w.cordon_reason || ""}${w.cordon_automatic ? " (automatic)" : ""}`, w.cordoned_at ? ` · ${fmtAgo(w.cordoned_at, now)}` : "")) : null, w.consecutive_failures ? h("div", { class: "small err-text" }, `${w.consecutive_failures} failed contacts`) : null) },
          { label: "Reserved", cls: "col-util", render: utilisation },
          { label: "Running", render: (w) => running(w.running_tasks) },
          { label: "Attributes", render: (w) => attributes(w.attributes) },
          { label: "Health", render: (w) => health(w, history.get(w.worker_id) || []) },
          { label: "Last contact", render: (w) => h("span", { title: fmtTime(w.last_contact_at) }, fmtAgo(w.last_contact_at, now)) },
          { label: "Group", render: (w) => (w.scale_group || w.slice_id ? h("div", { class: "small" }, w.scale_group || "", w.slice_id ? h("div", { class: "mono dim" }, w.slice_id) : null) : h("span", { class: "dim" }, "—")) },
        ],
        ws,
        { rowAttrs: (w) => ({ dataset: { workerId: w.worker_id, status: w.status, cordon: w.cordon || "" } }) },
      ),
    );
    root.querySelector(".page-workers").dataset.loaded = "1";
  }

  const poller = new Poller(refresh, 2000).start();
  return { unmount: () => poller.stop() };
}
