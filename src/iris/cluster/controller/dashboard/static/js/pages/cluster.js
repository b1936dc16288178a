// Cluster (KUBERNETES backend): our pods by phase, Kueue admission, nodes. The overview's keys
// belong to the Kubernetes backend; known ones get a tailored view, the rest a generic one.

import { api } from "../api.js";
import { badge, fill, h, kvList, notice, table } from "../dom.js";
import { humanKey, objectTable, renderValue, scalar } from "../components/generic.js";
import { fmtCount, stateClass } from "../format.js";
import { Poller } from "../poll.js";

const SHOWN = new Set(["backend_id", "namespace", "local_queue", "server", "pods", "workloads", "workloads_admitted",
  "workloads_pending", "nodes"]);

function stat(label, value, cls = "") {
  return h("div", { class: `stat ${cls}` }, h("div", { class: "stat-value" }, value), h("div", { class: "stat-label" }, label));
}

function nodesTable(nodes) {
  const resources = (r) => {
    if (!r || typeof r !== "object") return renderValue(r);
    const keys = ["cpu", "memory", "nvidia.com/gpu", "google.com/tpu", "pods"].filter((k) => k in r);
    return keys.length ? keys.map((k) => `${k} ${r[k]}`).join(" · ") : renderValue(r, "", 1);
  };
  return h(
    "div",
    { class: "table-wrap" },
    table(
      [
        { label: "Node", cls: "nowrap", render: (n) => h("span", { class: "mono" }, scalar(n.name)) },
        { label: "Ready", render: (n) => badge(n.ready ? "HEALTHY" : "DEAD", n.ready ? "ready" : "not ready") },
        { label: "Schedulable", render: (n) => (n.unschedulable ? h("span", { class: "err-text" }, "cordoned") : "yes") },
        { label: "Allocatable", cls: "nowrap", render: (n) => resources(n.allocatable) },
        { label: "Labels", render: (n) => renderValue(n.labels, "labels", 1) },
      ],
      nodes,
      { rowAttrs: (n) => ({ dataset: { node: String(n.name ?? "") } }) },
    ),
  );
}

export function mount(root) {
  const message = h("div", { class: "message" });
  const body = h("div", { class: "cluster-body" });
  fill(
    root,
    h(
      "section",
      { class: "page page-cluster" },
      h("div", { class: "page-head" }, h("h1", {}, "Cluster")),
      h("p", { class: "lead dim" }, "The Kubernetes side: this controller's pods, Kueue's admission of them, and the nodes it can see."),
      message,
      body,
    ),
  );

  async function refresh() {
    let o;
    try {
      o = await api.clusterOverview();
    } catch (err) {
      fill(message, notice(err.status === 501 ? "info" : "error", err.message));
      return;
    }
    const errors = Object.entries(o).filter(([k, v]) => k.endsWith("_error") && v);
    fill(message, errors.map(([k, v]) => notice("error", `${humanKey(k.replace(/_error$/, ""))}: ${v}`)));
    const pods = o.pods && typeof o.pods === "object" ? o.pods : null;
    const phases = (pods && pods.by_phase) || {};
    const nodes = Array.isArray(o.nodes) ? o.nodes : null;
    const workloads = Array.isArray(o.workloads) ? o.workloads : null;
    const rest = Object.entries(o).filter(([k]) => !SHOWN.has(k) && !k.endsWith("_error"));
    fill(
      body,
      h(
        "div",
        { class: "stat-row" },
        pods ? stat("pods", fmtCount(pods.total ?? 0)) : null,
        pods ? stat("running", fmtCount(phases.Running || 0), "ok") : null,
        pods ? stat("pending", fmtCount(phases.Pending || 0), phases.Pending ? "warn" : "") : null,
        pods && "kueue_gated" in pods ? stat("held by Kueue", fmtCount(pods.kueue_gated)) : null,
        "workloads_admitted" in o ? stat("workloads admitted", fmtCount(o.workloads_admitted)) : null,
        "workloads_pending" in o ? stat("workloads waiting", fmtCount(o.workloads_pending), o.workloads_pending ? "warn" : "") : null,
        nodes ? stat("nodes ready", `${nodes.filter((n) => n.ready).length} / ${nodes.length}`) : null,
      ),
      h(
        "div",
        { class: "card" },
        h("h2", {}, "Connection"),
        kvList(["backend_id", "server", "namespace", "local_queue"].filter((k) => k in o).map((k) => [humanKey(k), h("span", { class: "mono" }, scalar(o[k]))])),
      ),
      pods
        ? h(
            "div",
            { class: "card", dataset: { section: "pods" } },
            h("h2", {}, "Pods"),
            Object.keys(phases).length
              ? h("div", { class: "attrs big pod-phases" }, Object.entries(phases).map(([p, n]) => h("span", { class: `attr ${stateClass(p)}` }, `${p} ${n}`)))
              : h("p", { class: "dim" }, "No pod of this controller exists right now."),
            renderValue(Object.fromEntries(Object.entries(pods).filter(([k]) => k !== "by_phase" && k !== "total"))),
          )
        : null,
      workloads
        ? h(
            "div",
            { class: "card", dataset: { section: "workloads" } },
            h("h2", {}, "Kueue workloads ", h("span", { class: "count" }, String(workloads.length))),
            workloads.length ? objectTable(workloads) : h("div", { class: "empty" }, "No workload."),
          )
        : null,
      nodes
        ? h(
            "div",
            { class: "card", dataset: { section: "nodes" } },
            h("h2", {}, "Nodes ", h("span", { class: "count" }, String(nodes.length))),
            nodes.length ? nodesTable(nodes) : h("div", { class: "empty" }, "No node is visible."),
          )
        : null,
      rest.length ? h("div", { class: "card" }, h("h2", {}, "More"), renderValue(Object.fromEntries(rest))) : null,
    );
    root.querySelector(".page-cluster").dataset.loaded = "1";
  }

  const poller = new Poller(refresh, 3000).start();
  return { unmount: () => poller.stop() };
}
