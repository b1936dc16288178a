// Autoscaler (WORKER backend with scale groups): slices by state, demand vs target, recent
// actions with reasons. Fields the page does not know are still shown, generically.

import { api } from "../api.js";
import { badge, fill, h, meter, notice, table } from "../dom.js";
import { humanKey, renderValue, scalar } from "../components/generic.js";
import { fmtAgo, fmtTime, stateClass } from "../format.js";
import { Poller } from "../poll.js";

const KNOWN_GROUP_KEYS = new Set(["name", "slices", "demand", "target", "min_slices", "max_slices", "last_action", "status", "backoff_until"]);
const KNOWN_ACTION_KEYS = ["ts", "group", "action", "slice_id", "reason"];

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
  if (g.demand == null && g.target == null) return h("span", { class: "dim" }, "—");
  const max = Math.max(Number(g.max_slices) || 0, Number(g.target) || 0, Number(g.demand) || 0, 1);
  const label = `demand ${g.demand ?? "—"} · target ${g.target ?? "—"}`;
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
                { label: "Slices", render: (g) => slicesCell(g.slices) },
                { label: "Demand / target", cls: "col-util", render: demandCell },
                { label: "Min–max", render: (g) => `${g.min_slices ?? "—"}–${g.max_slices ?? "—"}` },
                { label: "Last action", render: (g) => lastActionCell(g.last_action, now) },
                {
                  label: "Backoff until",
                  render: (g) => (g.backoff_until && g.backoff_until > now ? h("span", { title: fmtTime(g.backoff_until) }, `in ${fmtAgo(now, g.backoff_until).replace(" ago", "")}`) : h("span", { class: "dim" }, "—")),
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
      h("h2", {}, "Recent actions"),
      actions.length === 0
        ? h("div", { class: "empty" }, "No scaling action yet.")
        : h(
            "div",
            { class: "table-wrap" },
            table(
              [
                { label: "When", render: (a) => (typeof a.ts === "number" ? h("span", { title: fmtTime(a.ts) }, fmtAgo(a.ts, now)) : scalar(a.ts)) },
                { label: "Group", render: (a) => scalar(a.group) },
                { label: "Action", render: (a) => h("span", { class: "event-kind" }, String(a.action ?? "—").replace(/_/g, " ")) },
                { label: "Slice", render: (a) => h("span", { class: "mono" }, scalar(a.slice_id)) },
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
    const actions = Array.isArray(data.actions) ? data.actions : [];
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
