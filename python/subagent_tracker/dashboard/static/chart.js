/*
 * The chart of the last five minutes: started and cancelled tasks per second, and cancel latency.
 */
import { CHART_SECONDS, dom, serverNow } from "./state.js";

// ---------------------------------------------------------------- chart

const chart = { ctx: null, width: 0, height: 0, colors: {} };

export function setupChart() {
  const canvas = dom.chart;
  chart.width = canvas.width;
  chart.height = canvas.height;
  // Sharp on high-density screens: a bigger backing store at the same CSS size.
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(chart.width * ratio);
  canvas.height = Math.round(chart.height * ratio);
  chart.ctx = canvas.getContext("2d");
  chart.ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  const css = getComputedStyle(document.documentElement);
  const color = (name) => css.getPropertyValue(name).trim() || "#888";
  chart.colors = { starts: color("--c-running"), ends: color("--c-completed"), latency: color("--c-cancelling"),
    grid: color("--border"), text: color("--muted") };
  drawChart([]);
}

function niceCeiling(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((step) => step * power).find((candidate) => candidate >= value);
}

function seriesMax(points, value) {
  let max = 0;
  for (const point of points) {
    const v = value(point);
    if (typeof v === "number" && v > max) max = v;
  }
  return max;
}

/** Starts/s and ends/s on the left axis, cancel→stopped latency p50 in ms on the right one. */
export function drawChart(points) {
  const { ctx, width, height, colors } = chart;
  const plot = { left: 30, right: width - 40, top: 20, bottom: height - 14 };
  ctx.clearRect(0, 0, width, height);
  const end = points.length ? points[points.length - 1].t : Math.floor(serverNow());
  const x = (t) => plot.left + ((t - (end - CHART_SECONDS)) / CHART_SECONDS) * (plot.right - plot.left);
  const y = (fraction) => plot.bottom - fraction * (plot.bottom - plot.top);
  const latency = (p) => (typeof p.cancel_latency_p50 === "number" ? p.cancel_latency_p50 * 1000 : null);
  const rateMax = niceCeiling(Math.max(1, seriesMax(points, (p) => p.starts), seriesMax(points, (p) => p.ends)));
  const latencyMax = niceCeiling(Math.max(1, seriesMax(points, latency)));

  drawAxes(plot, rateMax, latencyMax);
  drawSeries(points, x, (p) => y(p.starts / rateMax), colors.starts, false);
  drawSeries(points, x, (p) => y(p.ends / rateMax), colors.ends, false);
  drawSeries(points, x, (p) => (latency(p) === null ? null : y(latency(p) / latencyMax)), colors.latency, true);
  drawLegend([["starts/s", colors.starts], ["ends/s", colors.ends], ["cancel p50 ms", colors.latency]]);
}

function drawAxes(plot, rateMax, latencyMax) {
  const { ctx, colors } = chart;
  ctx.strokeStyle = colors.grid;
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (const fraction of [0, 0.5, 1]) {
    const py = Math.round(plot.bottom - fraction * (plot.bottom - plot.top)) + 0.5;
    ctx.moveTo(plot.left, py);
    ctx.lineTo(plot.right, py);
  }
  ctx.stroke();
  ctx.fillStyle = colors.text;
  ctx.font = "10px system-ui, sans-serif";
  const label = (text, px, py, align, baseline) => {
    ctx.textAlign = align;
    ctx.textBaseline = baseline;
    ctx.fillText(text, px, py);
  };
  label(String(rateMax), plot.left - 4, plot.top, "right", "middle");
  label("0", plot.left - 4, plot.bottom, "right", "middle");
  label(`${latencyMax} ms`, plot.right + 4, plot.top, "left", "middle");
  label("0", plot.right + 4, plot.bottom, "left", "middle");
  label("−5 min", plot.left, plot.bottom + 2, "left", "top");
  label("now", plot.right, plot.bottom + 2, "right", "top");
}

// A null value breaks the line. Latency exists only in seconds with cancels, so it also gets dots.
function drawSeries(points, x, y, color, dots) {
  const { ctx } = chart;
  ctx.strokeStyle = ctx.fillStyle = color;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  let drawing = false;
  for (const point of points) {
    const py = typeof point.t === "number" ? y(point) : null;
    if (py === null || !Number.isFinite(py)) { drawing = false; continue; }
    const px = x(point.t);
    if (drawing) ctx.lineTo(px, py);
    else ctx.moveTo(px, py);
    drawing = true;
    if (dots) ctx.fillRect(px - 1.5, py - 1.5, 3, 3);
  }
  ctx.stroke();
}

function drawLegend(entries) {
  const { ctx } = chart;
  ctx.font = "10px system-ui, sans-serif";
  ctx.textAlign = "left";
  ctx.textBaseline = "middle";
  let left = 4;
  for (const [text, color] of entries) {
    ctx.fillStyle = color;
    ctx.fillRect(left, 5, 10, 3);
    ctx.fillText(text, left + 13, 7);
    left += 23 + ctx.measureText(text).width;
  }
}
