// Autoscaler (WORKER backend with scale groups): slices by state, demand vs target, recent
// actions with reasons. Fields the page does not know are still shown, generically.

import { api } from "../api.js";
import { badge, fill, h, meter, notice, table } from "../dom.js";
import { humanKey, renderValue, scalar } from "../components/generic.js";
import { fmtAgo, fmtBytes, fmtTime, stateClass } from "../format.js";
import { Poller } from "../poll.js";

// The controller's status view: name, priority, min/max/buffer_slices, num_vms, resources,
// attributes, slices (one record each), slices_by_state, target, demand_tasks, demand_slices,
// status, in_backoff, backoff_until, backoff_reason, last_action.
const KNOWN_GROUP_KEYS = new Set([
  "name", "slices", "slices_by_state", "demand", "demand_tasks", "demand_slices", "waiting_tasks", "target", "min_slices", "max_slices",
  "buffer_slices", "priority", "num_vms", "resources", "attributes", "last_action", "status", "in_backoff",
  "backoff_until", "backoff_reason",
]);
const KNOWN_ACTION_KEYS = ["ts", "group", "action", "slice_id", "reason"];

function sliceCounts(g) {
  if (g.slices_by_state && typeof g.slices_by_state === "object") return g.slices_by_state;
  if (Array.isArray(g.slices)) {
    const counts = {};
    for (const sl of g.slices) counts[sl.state ?? "UNKNOWN"] = (counts[sl.state ?? "UNKNOWN"] || 0) + 1;
    return counts;
  }
  return g.slices;
}

function shapeCell(g) {
  const r = g.resources;
  if (!r || typeof r !== "object") return h("span", { class: "dim" }, "—");
  const cpu = r.cpu_millicores != null ? `${r.cpu_millicores / 1000} cpu` : "";
  const mem = r.memory_bytes != null ? fmtBytes(r.memory_bytes) : "";
  const dev = r.device ? ` · ${r.device.count}× ${r.device.type}${r.device.variant ? " " + r.device.variant : ""}` : "";
  const vms = g.num_vms > 1 ? `${g.num_vms} × ` : "";
  return h("span", { class: "nowrap" }, `${vms}${[cpu, mem].filter(Boolean).join(", ")}${dev}`);
}

function slicesCell(slices) {
  if (!slices || typeof slices !== "object") return renderValue(slices);
  const entries = Object.entries(slices).filter(([, n]) => n);
  if (!entries.length) return h("span", { class: "dim" }, "none");
  return h(
    "div",
    { class: "attrs" },
    entries.map(([state, n]) => h("span", { class: `attr ${stateClass(state)}` }, `${String(state).toLowerCase().replace(/_/g, " ")} ${n}`)),
  );
}

function demandCell(g) {
  const demand = g.demand_slices ?? g.demand;
  if (demand == null && g.target == null) return h("span", { class: "dim" }, "—");
  const max = Math.max(Number(g.max_slices) || 0, Number(g.target) || 0, Number(demand) || 0, 1);
  // Demand counts the tasks waiting for this group (also those it has no room for), then the
  // slices they fill; "demand 0" never shows while tasks wait.
  const waiting = g.waiting_tasks ?? g.demand_tasks;
  const tasks = waiting != null ? `${waiting} task${waiting === 1 ? "" : "s"} → ` : "";
  const label = `demand ${tasks}${demand ?? "—"} slice${demand === 1 ? "" : "s"} · target ${g.target ?? "—"}`;
  return meter((Number(g.target) || 0) / max, label, `${label} (max ${g.max_slices ?? "—"})`, { neutral: true });
}

function lastActionCell(a, now) {
  if (a && typeof a === "object" && !Array.isArray(a) && "action" in a) {
    const when = typeof a.ts === "number" ? ` · ${fmtAgo(a.ts, now)}` : "";
    return h("span", { title: a.reason || "" }, `${String(a.action).replace(/_/g, " ")}${when}`);
  }
  return renderValue(a, "last_action", 1);
}

export function mount(root) {
  const message = h("div", { class: "message" });
  const groupsCard = h("div", { class: "card" });
  const actionsCard = h("div", { class: "card" });
  const moreCard = h("div", { class: "card", hidden: true });
  fill(
    root,
    h(
      "section",
      { class: "page page-autoscaler" },
      h("div", { class: "page-head" }, h("h1", {}, "Autoscaler")),
      h("p", { class: "lead dim" }, "Scale groups, their slices by state, what the queue asks for, and what the autoscaler did about it."),
      message,
      groupsCard,
      actionsCard,
      moreCard,
    ),
  );

  function renderGroups(groups, now) {
    const extraKeys = [];
    for (const g of groups) for (const k of Object.keys(g)) if (!KNOWN_GROUP_KEYS.has(k) && !extraKeys.includes(k)) extraKeys.push(k);
    fill(
      groupsCard,
      h("h2", {}, "Scale groups ", h("span", { class: "count" }, String(groups.length))),
      groups.length === 0
        ? h("div", { class: "empty" }, "No scale group is configured.")
        : h(
            "div",
            { class: "table-wrap" },
            table(
              [
                { label: "Group", render: (g) => h("span", { class: "strong" }, String(g.name ?? "—")) },
                { label: "Status", render: (g) => (g.status ? badge(g.status) : h("span", { class: "dim" }, "—")) },
                { label: "Per slice", render: shapeCell },
                { label: "Slices", render: (g) => slicesCell(sliceCounts(g)) },
                { label: "Demand / target", cls: "col-util", render: demandCell },
                { label: "Min–max", render: (g) => `${g.min_slices ?? "—"}–${g.max_slices ?? "—"}` },
                { label: "Last action", render: (g) => lastActionCell(g.last_action, now) },
                {
                  label: "Backoff until",
                  render: (g) =>
                    g.backoff_until && g.backoff_until > now
                      ? h("span", { title: `${g.backoff_reason || ""} (until ${fmtTime(g.backoff_until)})` }, `backoff, ends in ${fmtAgo(now, g.backoff_until).replace(" ago", "")}`)
                      : h("span", { class: "dim" }, "—"),
                },
                ...extraKeys.map((k) => ({ label: humanKey(k), render: (g) => renderValue(g[k], k, 1) })),
              ],
              groups,
              { rowAttrs: (g) => ({ dataset: { group: String(g.name ?? "") } }) },
            ),
          ),
    );
  }

  function renderActions(actions, now) {
    const extraKeys = [];
    for (const a of actions) for (const k of Object.keys(a)) if (!KNOWN_ACTION_KEYS.includes(k) && !extraKeys.includes(k)) extraKeys.push(k);
    fill(
      actionsCard,
      h("h2", {}, "Recent actions ", h("span", { class: "dim" }, "newest first")),
      actions.length === 0
        ? h("div", { class: "empty" }, "No scaling action yet.")
        : h(
            "div",
            { class: "table-wrap" },
            table(
              [
                { label: "When", render: (a) => (typeof a.ts === "number" ? h("span", { class: "nowrap", title: fmtTime(a.ts) }, fmtAgo(a.ts, now)) : scalar(a.ts)) },
                { label: "Group", render: (a) => scalar(a.group) },
                { label: "Action", render: (a) => h("span", { class: "event-kind" }, String(a.action ?? "—").replace(/_/g, " ")) },
                { label: "Slice", render: (a) => h("span", { class: "mono nowrap" }, scalar(a.slice_id)) },
                { label: "Reason", cls: "col-info", render: (a) => scalar(a.reason) },
                ...extraKeys.map((k) => ({ label: humanKey(k), render: (a) => renderValue(a[k], k, 1) })),
              ],
              actions,
            ),
          ),
    );
  }

  async function refresh() {
    let data;
    try {
      data = await api.autoscaler();
    } catch (err) {
      fill(message, notice(err.status === 501 ? "info" : "error", err.message));
      return;
    }
    fill(message);
    const now = Date.now() / 1000;
    const groups = Array.isArray(data.groups) ? data.groups : [];
    const actions = Array.isArray(data.actions) ? [...data.actions].reverse() : []; // newest first
    renderGroups(groups, now);
    renderActions(actions, now);
    const rest = Object.fromEntries(Object.entries(data).filter(([k]) => k !== "groups" && k !== "actions"));
    moreCard.hidden = Object.keys(rest).length === 0;
    fill(moreCard, h("h2", {}, "More"), renderValue(rest));
    root.querySelector(".page-autoscaler").dataset.loaded = "1";
  }

  const poller = new Poller(refresh, 2000).start();
  return { unmount: () => poller.stop() };
}
