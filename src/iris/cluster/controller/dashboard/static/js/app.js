// The dashboard shell: reads the controller's capabilities, draws the tabs, routes the hash.

import { api, onConnectivity } from "./api.js";
import { h, fill, notice } from "./dom.js";
import { parseHash } from "./router.js";
import * as jobsPage from "./pages/jobs.js";
import * as jobPage from "./pages/job.js";
import * as schedulerPage from "./pages/scheduler.js";
import * as workersPage from "./pages/workers.js";
import * as autoscalerPage from "./pages/autoscaler.js";
import * as clusterPage from "./pages/cluster.js";
import * as endpointsPage from "./pages/endpoints.js";
import * as statusPage from "./pages/status.js";

/** Tabs in order; `available(ctx)` decides from the controller's capabilities. */
const TABS = [
  { page: "jobs", label: "Jobs", module: jobsPage, available: () => true, always: true },
  { page: "scheduler", label: "Scheduler", module: schedulerPage, available: () => true, always: true },
  { page: "workers", label: "Workers", module: workersPage, available: (c) => c.capabilities.has("workers") },
  { page: "autoscaler", label: "Autoscaler", module: autoscalerPage, available: (c) => c.capabilities.has("autoscaler") },
  { page: "cluster", label: "Cluster", module: clusterPage, available: (c) => c.capabilities.has("cluster") },
  { page: "endpoints", label: "Endpoints", module: endpointsPage, available: (c) => c.hasEndpoints },
  { page: "status", label: "Status", module: statusPage, available: () => true, always: true },
];

const ctx = { name: "", capabilities: new Set(), hasEndpoints: false, ready: false };
let current = null; // {key, view}

function tabFor(page) {
  return TABS.find((t) => t.page === page);
}

function renderTabs(activePage) {
  const nav = document.getElementById("tabs");
  fill(
    nav,
    TABS.filter((t) => t.available(ctx)).map((t) =>
      h(
        "a",
        {
          href: `#/${t.page}`,
          class: `tab${t.page === activePage ? " active" : ""}`,
          "aria-current": t.page === activePage ? "page" : false,
          dataset: { tab: t.page },
        },
        t.label,
      ),
    ),
  );
}

function route() {
  const r = parseHash(location.hash);
  const tabPage = r.page === "job" ? "jobs" : r.page;
  if (ctx.ready) renderTabs(tabPage);
  const key = r.page === "job" ? `job:${r.id}` : r.page;
  if (current && current.key === key && current.view.update) {
    current.view.update(r);
    return;
  }
  const tab = tabFor(r.page);
  // Pages every controller has start before the capabilities arrive; the others wait for them.
  if (!ctx.ready && !(r.page === "job" || (tab && tab.always))) return;
  if (current) current.view.unmount();
  current = null;
  const root = document.getElementById("view");
  root.replaceChildren();
  // The title follows the page (a job page puts its job's id first as soon as it opens).
  document.title = r.page === "job" ? `${r.id} · Iris` : ctx.name ? `Iris · ${ctx.name}` : "Iris";
  if (r.page === "job") {
    current = { key, view: jobPage.mount(root, r, ctx) };
    return;
  }
  if (!tab) {
    fill(root, notice("error", `There is no page called “${r.page}”.`), h("p", {}, h("a", { href: "#/jobs" }, "Go to the jobs")));
    return;
  }
  if (!tab.available(ctx)) {
    fill(root, notice("info", `The ${tab.label} page does not apply to this controller (${ctx.name}).`));
    return;
  }
  current = { key, view: tab.module.mount(root, r, ctx) };
}

function showConnectivity(ok, error) {
  const el = document.getElementById("conn");
  el.classList.toggle("down", !ok);
  el.classList.toggle("up", ok);
  el.querySelector(".conn-text").textContent = ok ? "live" : "disconnected";
  el.title = ok ? "Connected to the controller" : (error && error.message) || "Cannot reach the controller";
}

async function boot() {
  onConnectivity(showConnectivity);
  window.addEventListener("hashchange", route);
  const info = api.dashboard();
  const endpoints = api.endpoints();
  route();
  const [i, e] = await Promise.allSettled([info, endpoints]);
  if (i.status === "rejected") {
    if (current) current.view.unmount();
    current = null;
    fill(document.getElementById("view"), notice("error", `Cannot load the dashboard: ${i.reason.message}`));
    return;
  }
  ctx.name = i.value.name;
  ctx.capabilities = new Set(i.value.capabilities || []);
  ctx.hasEndpoints = e.status === "fulfilled";
  ctx.ready = true;
  document.getElementById("cluster-name").textContent = ctx.name;
  if (parseHash(location.hash).page !== "job") document.title = `Iris · ${ctx.name}`; // a job page names its job
  if (current) renderTabs(parseHash(location.hash).page === "job" ? "jobs" : parseHash(location.hash).page);
  else route();
  document.body.dataset.ready = "1";
}

boot();
