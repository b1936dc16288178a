// Status: the controller itself (version, uptime, database, loop timings), counts by state, and
// charts of the queue (running / pending over time) and of throughput.

import { api } from "../api.js";
import { COLORS, LineChart } from "../components/charts.js";
import { humanKey, scalar } from "../components/generic.js";
import { fill, h, kvList, notice } from "../dom.js";
import { fmtBytes, fmtCount, fmtDuration, seriesFromPoints, stateClass } from "../format.js";
import { Poller } from "../poll.js";
import { pageHref } from "../router.js";

function stat(label, value, title) {
  return h("div", { class: "stat", title }, h("div", { class: "stat-value" }, value), h("div", { class: "stat-label" }, label));
}

function countsList(counts, linkState) {
  const entries = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]);
  if (!entries.length) return h("span", { class: "dim" }, "none");
  return h(
    "div",
    { class: "attrs big" },
    entries.map(([s, n]) =>
      linkState
        ? h("a", { class: `attr ${stateClass(s)}`, href: pageHref("jobs", { state: s }) }, `${s.toLowerCase().replace(/_/g, " ")} ${fmtCount(n)}`)
        : h("span", { class: `attr ${stateClass(s)}` }, `${s.toLowerCase().replace(/_/g, " ")} ${fmtCount(n)}`),
    ),
  );
}

function loopValue(key, v) {
  if (typeof v === "number" && key.endsWith("_ms")) return `${v.toFixed(1)} ms`;
  return scalar(v, key);
}

export function mount(root) {
  const message = h("div", { class: "message" });
  const stats = h("div", { class: "stat-row" });
  const countsCard = h("div", { class: "card" });
  const loopCard = h("div", { class: "card" });
  const queueChart = new LineChart({
    title: "Tasks running and pending",
    yLabel: "tasks",
    series: [
      { label: "running", color: COLORS.running, fill: true },
      { label: "pending", color: COLORS.pending },
    ],
  });
  const rateChart = new LineChart({
    title: "Throughput (tasks finished per second)",
    yLabel: "tasks/s",
    series: [
      { label: "succeeded", color: COLORS.succeeded, fill: true },
      { label: "failed or killed", color: COLORS.failed },
    ],
  });
  const chartNote = h("p", { class: "dim small" });
  fill(
    root,
    h(
      "section",
      { class: "page page-status" },
      h("div", { class: "page-head" }, h("h1", {}, "Status")),
      message,
      stats,
      h("div", { class: "charts" }, queueChart.el, rateChart.el),
      chartNote,
      h("div", { class: "two-col" }, countsCard, loopCard),
    ),
  );

  async function refresh() {
    let cluster, st, ts;
    try {
      [cluster, st, ts] = await Promise.all([api.cluster(), api.stats(), api.timeseries()]);
    } catch (err) {
      fill(message, notice("error", err.message));
      return;
    }
    fill(message);
    const points = ts.points || [];
    const s = seriesFromPoints(points);
    fill(
      stats,
      stat("version", st.version),
      stat("uptime", fmtDuration(st.uptime_s)),
      stat("database", fmtBytes(st.db_bytes), "size of the controller's SQLite file"),
      stat("backend", cluster.kind, cluster.backend_id),
      stat("running now", fmtCount(s.running.at(-1) ?? 0)),
      stat("pending now", fmtCount(s.pending.at(-1) ?? 0)),
    );
    queueChart.setData([s.ts, s.running, s.pending]);
    rateChart.setData([s.ts, s.succeededRate, s.failedRate]);
    chartNote.textContent = points.length
      ? `A sample every ${ts.interval_s}s; ${points.length} samples (${fmtDuration(points.length * ts.interval_s)}).`
      : "No sample yet.";
    fill(
      countsCard,
      h("h2", {}, "Counts"),
      kvList([
        ["Jobs", countsList(cluster.jobs_by_state, true)],
        ["Tasks", countsList(cluster.tasks_by_state, false)],
        cluster.capabilities.includes("workers") ? ["Workers", countsList(cluster.workers_by_status, false)] : null,
      ]),
    );
    fill(
      loopCard,
      h("h2", {}, "Control loop"),
      kvList(Object.entries(st.loop || {}).map(([k, v]) => [humanKey(k), loopValue(k, v)])),
    );
    root.querySelector(".page-status").dataset.loaded = "1";
  }

  const poller = new Poller(refresh, 2000).start();
  return {
    unmount() {
      poller.stop();
      queueChart.destroy();
      rateChart.destroy();
    },
  };
}
