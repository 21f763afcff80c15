// allreduce_cost.js: Chapter 6's ring against naive all-reduce (ddp_lab/widgets/allreduce_cost.py).
//
// The alpha-beta model of ddp_lab/cost/alpha_beta.py: with W ranks, a tensor of n bytes,
// latency α and bandwidth β,
//   naive (rank 0 as a hub): 2(W-1)·α + 2(W-1)·n/β    (naive_all_reduce_time)
//   ring:                    2(W-1)·α + 2(W-1)/W·n/β  (collective_time("all_reduce", ...))
// Both pay the same latencies; only the naive bandwidth term grows with W.
// tests/test_widgets_js.py checks these against Python on a grid.

/** The two terms and the total of each algorithm, in seconds. */
function allReduceTimes(nbytes, worldSize, latency, bandwidth) {
  const steps = 2 * (worldSize - 1);
  const ring = {latency: steps * latency, bandwidth: ((steps / worldSize) * nbytes) / bandwidth};
  const naive = {latency: steps * latency, bandwidth: (steps * nbytes) / bandwidth};
  ring.total = ring.latency + ring.bandwidth;
  naive.total = naive.latency + naive.bandwidth;
  return {ring, naive};
}

/** ddp_lab.units.format_bytes: 1536 -> "1.5 KiB", 4 << 20 -> "4 MiB". */
function formatBytes(nbytes) {
  for (const unit of ["B", "KiB", "MiB", "GiB"]) {
    if (Math.abs(nbytes) < 1024 || unit === "GiB") {
      return unit === "B" ? `${formatFixed(nbytes, 0, false)} B` : `${formatFixed(nbytes, 1, false).replace(/\.0$/, "")} ${unit}`;
    }
    nbytes /= 1024;
  }
}

function formatBandwidth(bytesPerSecond) {
  return `${formatG(bytesPerSecond / 1e9, 3)} GB/s`;
}

// ------------------------------------------------------------- the picture

function drawCurves(model) {
  const [n, current, latency, bandwidth] = ["message_bytes", "world_size", "latency", "bandwidth"].map((k) => model.get(k));
  const worlds = Array.from({length: PY.max_world_size - 1}, (_, i) => i + 2);
  const series = worlds.map((w) => allReduceTimes(n, w, latency, bandwidth));
  const all = series.flatMap((t) => [t.ring.total, t.naive.total, t.ring.latency]);
  const [lo, hi] = [Math.min(...all) / 1.5, Math.max(...all) * 1.5];
  const width = 470, height = 300, left = 62, right = 14, top = 14, bottom = 44;
  const x = scale("log", [2, PY.max_world_size], [left, width - right]);
  const y = scale("log", [10 ** Math.floor(Math.log10(lo)), 10 ** Math.ceil(Math.log10(hi))], [height - bottom, top]);
  const picture = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "ddp-cost-curves",
                              "aria-label": "all-reduce time against the world size, ring and naive"});
  yGrid(picture, y, y.ticks, formatSeconds, {left, right: width - right, stroke: "#e6e6e6"});
  xGrid(picture, x, [2, 4, 8, 16, 32, 64].filter((w) => w <= PY.max_world_size), String,
        {top, bottom: height - bottom, stroke: "#eeeeee"});
  picture.append(svg("text", {x: (left + width - right) / 2, y: height - 8, "text-anchor": "middle",
                              "font-size": 12, fill: "#333"}, "world size W (ranks)"));
  const path = (values) => values.map((v, i) => `${i ? "L" : "M"}${x(worlds[i]).toFixed(2)},${y(v).toFixed(2)}`).join("");
  picture.append(
    svg("path", {d: path(series.map((t) => t.ring.latency)), fill: "none", stroke: "#777",
                 "stroke-dasharray": "4 3", "stroke-width": 1.4}),
    svg("path", {d: path(series.map((t) => t.naive.total)), fill: "none", stroke: PY.colours.naive, "stroke-width": 2.2}),
    svg("path", {d: path(series.map((t) => t.ring.total)), fill: "none", stroke: PY.colours.ring, "stroke-width": 2.2}));
  const now = allReduceTimes(n, current, latency, bandwidth);
  picture.append(svg("line", {x1: x(current), x2: x(current), y1: top, y2: height - bottom, stroke: "#999",
                              "stroke-width": 1}));
  for (const [name, value] of [["naive", now.naive.total], ["ring", now.ring.total]]) {
    picture.append(svg("circle", {cx: x(current), cy: y(value), r: 4.5, fill: PY.colours[name], stroke: "#fff",
                                  "stroke-width": 1.5, class: `ddp-marker-${name}`}));
  }
  return picture;
}

/** At the current W: each algorithm's time as latency + bandwidth, to scale. */
function drawTerms(times) {
  const width = 300, height = 150, left = 52, right = 10, top = 22, rowHeight = 44;
  const largest = Math.max(times.ring.total, times.naive.total);
  const x = (v) => left + (v / largest) * (width - left - right);
  const picture = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "ddp-cost-terms",
                              "aria-label": "latency and bandwidth terms at this world size"});
  picture.append(svg("text", {x: left, y: 12, "font-size": 11.5, fill: "#444"}, "at this W: latency + bandwidth"));
  ["ring", "naive"].forEach((name, i) => {
    const t = times[name];
    const y = top + i * rowHeight;
    picture.append(
      svg("text", {x: left - 6, y: y + 11, "text-anchor": "end", "dominant-baseline": "central", "font-size": 12.5}, name),
      svg("rect", {x: left, y, width: Math.max(x(t.latency) - left, 0), height: 22, fill: tint(PY.colours[name], 0.35),
                   stroke: PY.colours[name], "data-term": "latency"}),
      svg("rect", {x: x(t.latency), y, width: Math.max(x(t.total) - x(t.latency), 0), height: 22,
                   fill: PY.colours[name], "data-term": "bandwidth"}),
      svg("text", {x: left, y: y + 34, "font-size": 11, fill: "#333"},
          `${formatSeconds(t.latency)} + ${formatSeconds(t.bandwidth)} = ${formatSeconds(t.total)}`));
  });
  return picture;
}

// ------------------------------------------------------------- the control

const NAMES = ["world_size", "message_bytes", "latency", "bandwidth"];

function render({model, el}) {
  const root = html("div", {class: "ddp-control ddp-allreduce-cost"});
  const out = html("div", {class: "ddp-result"});
  const set = (name) => (value) => update(model, {[name]: value});
  const controls = [
    slider({name: "world_size", label: "ranks W", min: 2, max: PY.max_world_size, value: model.get("world_size"),
            onChange: set("world_size")}),
    slider({name: "message_bytes", label: "message n", values: PY.message_sizes, value: model.get("message_bytes"),
            format: formatBytes, onChange: set("message_bytes")}),
    slider({name: "latency", label: "latency α", values: logValues(-6, -3, 10), value: model.get("latency"),
            format: formatSeconds, onChange: set("latency")}),
    slider({name: "bandwidth", label: "bandwidth β", values: logValues(8, 11, 10), value: model.get("bandwidth"),
            format: formatBandwidth, onChange: set("bandwidth")}),
  ];
  root.append(html("div", {class: "ddp-controls"}, controls.map((c) => c.element)), out);
  el.append(root);

  function redraw() {
    const values = NAMES.map((name) => model.get(name));
    controls.forEach((control, i) => control.set(values[i]));
    const [w, n, latency, bandwidth] = values;
    const times = allReduceTimes(n, w, latency, bandwidth);
    root.dataset.result = JSON.stringify(times);
    const ratio = times.naive.total / times.ring.total;
    out.replaceChildren(
      html("div", {class: "ddp-numbers"},
        html("span", {class: "ddp-number", "data-name": "ring"}, "ring ", html("b", {}, formatSeconds(times.ring.total))),
        html("span", {class: "ddp-number", "data-name": "naive"}, "naive ", html("b", {}, formatSeconds(times.naive.total))),
        html("span", {class: "ddp-number", "data-name": "ratio"}, "naive / ring ", html("b", {}, `${formatG(ratio, 3)}×`))),
      html("div", {style: "display: flex; flex-wrap: wrap; gap: 8px 20px; align-items: flex-start"},
           pictureBox(drawCurves(model)), pictureBox(drawTerms(times))),
      html("div", {class: "ddp-legend"}, swatch(PY.colours.ring, "ring: 2(W−1)α + 2(W−1)/W · n/β"),
           swatch(PY.colours.naive, "naive: 2(W−1)(α + n/β)"),
           swatch("#777", "latency term 2(W−1)α, the same for both", {dashed: true})));
  }

  for (const name of NAMES) model.on(`change:${name}`, redraw);
  redraw();
  return () => { for (const name of NAMES) model.off(`change:${name}`, redraw); };
}

export {allReduceTimes, formatSeconds, formatBytes, formatG, formatFixed};
export default {render};
