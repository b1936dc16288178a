// A tiny line chart (SVG, no axes) of one or more series over time, for table cells.

const NS = "http://www.w3.org/2000/svg";

/** series: [{ points: [[t, v], ...], max, color }], title: hover text. */
export function spark(series, title, { width = 160, height = 36 } = {}) {
  const all = series.flatMap((s) => s.points);
  if (all.length < 2) return null;
  const t0 = Math.min(...all.map((p) => p[0]));
  const t1 = Math.max(...all.map((p) => p[0]));
  const span = Math.max(1e-6, t1 - t0);
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "usage-chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", title);
  for (const s of series) {
    const max = Math.max(s.max || 0, ...s.points.map((p) => p[1]), 1e-9);
    const d = s.points
      .map((p, i) => `${i ? "L" : "M"}${(((p[0] - t0) / span) * width).toFixed(1)},${(height - 2 - (p[1] / max) * (height - 4)).toFixed(1)}`)
      .join(" ");
    const path = document.createElementNS(NS, "path");
    path.setAttribute("d", d);
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", s.color);
    path.setAttribute("stroke-width", "1.5");
    svg.append(path);
  }
  const t = document.createElementNS(NS, "title");
  t.textContent = title;
  svg.append(t);
  return svg;
}
