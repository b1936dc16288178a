// Time-series charts on uPlot (vendored in /vendor/uplot), sized to their container.

import { h } from "../dom.js";

const COLORS = {
  running: "#3b5bdb",
  pending: "#e8a317",
  succeeded: "#2f9e44",
  failed: "#e03131",
};

/** A line chart: series = [{label, color, fill?}], data = [xs, ...ys] (uPlot layout). */
export class LineChart {
  constructor({ title, series, yLabel, height = 200 }) {
    this.height = height;
    this.plot = null;
    this.series = series;
    this.yLabel = yLabel;
    this.canvas = h("div", { class: "chart-canvas" });
    this.el = h("div", { class: "card chart" }, h("h2", {}, title), this.canvas);
    this.resize = new ResizeObserver(() => this.fit());
  }

  width() {
    return Math.max(240, Math.floor(this.canvas.clientWidth || 480));
  }

  setData(data) {
    if (!window.uPlot) return;
    if (!this.plot) {
      const opts = {
        width: this.width(),
        height: this.height,
        legend: { live: true },
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
        axes: [
          { stroke: "#6b7280", grid: { stroke: "#eef0f3" }, ticks: { stroke: "#e5e7eb" } },
          { stroke: "#6b7280", grid: { stroke: "#eef0f3" }, ticks: { stroke: "#e5e7eb" }, label: this.yLabel, size: 56 },
        ],
        series: [
          {},
          ...this.series.map((s) => ({
            label: s.label,
            stroke: s.color,
            width: 2,
            fill: s.fill ? `${s.color}22` : undefined,
            points: { show: false },
            spanGaps: false,
            value: (u, v) => (v == null ? "—" : Number.isInteger(v) ? String(v) : v.toFixed(2)),
          })),
        ],
      };
      this.plot = new window.uPlot(opts, data, this.canvas);
      this.resize.observe(this.canvas);
    } else {
      this.plot.setData(data);
    }
  }

  fit() {
    if (this.plot) this.plot.setSize({ width: this.width(), height: this.height });
  }

  destroy() {
    this.resize.disconnect();
    if (this.plot) this.plot.destroy();
  }
}

export { COLORS };
