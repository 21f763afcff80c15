// buckets.js: Chapter 8's bucket-size trade-off (ddp_lab/widgets/buckets.py).
//
// The model of ddp_lab.cost.bucket_schedule: the gradients (G bytes) are cut
// into n = ceil(G / bucket) equal buckets, produced at an even pace over the
// backward pass T_b; each bucket is one ring all-reduce of c = 2(W-1)α +
// 2(W-1)/W·(G/n)/β, and they run one after the other. Small buckets start
// communicating early but pay α n times; large ones leave a long tail after
// the last gradient. tests/test_widgets_js.py checks this against Python.

/** [ready, start, end] of each bucket's all-reduce, seconds from the start of backward. */
function bucketSchedule(gradientBytes, bucketBytes, backwardSeconds, worldSize, latency, bandwidth) {
  const buckets = Math.ceil(gradientBytes / bucketBytes);
  const steps = 2 * (worldSize - 1);
  const each = steps * latency + ((steps / worldSize) * (gradientBytes / buckets)) / bandwidth;
  const schedule = [];
  let previousEnd = 0;
  for (let i = 1; i <= buckets; i++) {
    const ready = (backwardSeconds * i) / buckets;
    const start = Math.max(ready, previousEnd);
    previousEnd = start + each;
    schedule.push([ready, start, previousEnd]);
  }
  return schedule;
}

function backwardTime(...args) {
  const schedule = bucketSchedule(...args);
  return schedule[schedule.length - 1][2];
}

/** Sizes in MiB as the book writes bucket_cap_mb: "25 MiB", "0.25 MiB", "1,024 MiB". */
function formatMiB(nbytes) {
  const mib = nbytes / 2 ** 20;
  return mib >= 1000 ? `${formatFixed(mib, 0)} MiB` : `${formatG(mib, 3)} MiB`;
}

/** Contiguous busy stretches of the network: back-to-back all-reduces merged. */
function busy(schedule) {
  const stretches = [];
  for (const [, start, end] of schedule) {
    const last = stretches[stretches.length - 1];
    if (last && start <= last[1] + 1e-12 * end) last[1] = end;
    else stretches.push([start, end]);
  }
  return stretches;
}

// ------------------------------------------------------------- the pictures

function drawTimeline(schedule, backwardSeconds) {
  const total = schedule[schedule.length - 1][2];
  const width = 720, height = 104, left = 92, right = 16;
  const x = (t) => left + (t / total) * (width - left - right);
  const picture = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "ddp-bucket-timeline",
                              "aria-label": "timeline of the backward pass and the buckets' all-reduces"});
  const rows = [["backward", 12], ["all-reduce", 44]];
  for (const [label, y] of rows) {
    picture.append(svg("text", {x: left - 8, y: y + 11, "text-anchor": "end", "dominant-baseline": "central",
                                "font-size": 12, fill: "#333"}, label));
  }
  picture.append(svg("rect", {x: x(0), y: 12, width: x(backwardSeconds) - x(0), height: 22, fill: tint(PY.colours.compute, 0.55),
                              stroke: PY.colours.compute}));
  if (schedule.length <= 64) {
    for (const [ready] of schedule.slice(0, -1)) {
      picture.append(svg("line", {x1: x(ready), x2: x(ready), y1: 12, y2: 34, stroke: "#fff", "stroke-width": 1.2}));
    }
  }
  const separate = schedule.length <= 64;
  for (const [start, end] of separate ? schedule.map(([, s, e]) => [s, e]) : busy(schedule)) {
    picture.append(svg("rect", {x: x(start), y: 44, width: Math.max(x(end) - x(start) - (separate ? 1 : 0), 0.8), height: 22,
                                fill: PY.colours.comm, class: "ddp-allreduce"}));
  }
  if (total > backwardSeconds) {
    picture.append(svg("rect", {x: x(backwardSeconds), y: 6, width: x(total) - x(backwardSeconds), height: 66,
                                fill: tint(PY.colours.exposed, 0.12), stroke: "none"}));
  }
  if (x(backwardSeconds) - x(0) >= 100) {
    picture.append(svg("text", {x: x(0), y: 86, "font-size": 11, fill: "#444"}, "0"));
  }
  picture.append(svg("line", {x1: x(backwardSeconds), x2: x(backwardSeconds), y1: 6, y2: 72, stroke: "#555",
                              "stroke-dasharray": "3 2"}),
                 subscripted(`T_b = ${formatSeconds(backwardSeconds)}`, {x: x(backwardSeconds), y: 86, "font-size": 11,
                   fill: "#444", "text-anchor": x(backwardSeconds) - x(0) < 100 ? "start" : "end"}),
                 svg("text", {x: x(total), y: 101, "font-size": 11, fill: "#222", "text-anchor": "end", "font-weight": 600},
                     `T = ${formatSeconds(total)}`));
  return picture;
}

function drawCurve(args, sizes, current) {
  const [gradientBytes, , backwardSeconds, worldSize, latency, bandwidth] = args;
  const usable = sizes.filter((s) => s <= gradientBytes * 1.0001);
  const times = usable.map((s) => backwardTime(gradientBytes, s, backwardSeconds, worldSize, latency, bandwidth));
  const width = 720, height = 210, left = 62, right = 16, top = 10, bottom = 40;
  const x = scale("log", [usable[0], usable[usable.length - 1]], [left, width - right]);
  // log scale: the time spans decades between tiny buckets and the best one
  const lo = Math.min(...times, backwardSeconds), hi = Math.max(...times);
  const y = scale("log", [10 ** Math.floor(Math.log10(lo * 0.95)), 10 ** Math.ceil(Math.log10(hi * 1.05))],
                  [height - bottom, top]);
  const picture = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "ddp-bucket-curve",
                              "aria-label": "time of the backward pass against the bucket size"});
  yGrid(picture, y, y.ticks, formatSeconds, {left, right: width - right, stroke: "#eee"});
  const [first, last] = [usable[0], usable[usable.length - 1]];
  const sizeTicks = [];
  for (let mib = 0.25; mib * 2 ** 20 <= last * 1.0001; mib *= 4) {
    if (mib * 2 ** 20 >= first * 0.9999) sizeTicks.push(mib * 2 ** 20);
  }
  xGrid(picture, x, sizeTicks, formatMiB, {top, bottom: height - bottom, stroke: "#eee"});
  const ddpDefault = 25 * 2 ** 20;  // DDP's bucket_cap_mb default
  if (ddpDefault >= first && ddpDefault <= last) {
    picture.append(svg("line", {x1: x(ddpDefault), x2: x(ddpDefault), y1: top, y2: height - bottom, stroke: "#999",
                                "stroke-dasharray": "2 3"}),
                   svg("text", {x: x(ddpDefault) + 4, y: top + 10, "font-size": 10.5, fill: "#666"}, "DDP's default, 25 MiB"));
  }
  picture.append(svg("text", {x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle", "font-size": 12,
                              fill: "#333"}, "bucket size (bucket_cap_mb)"),
                 svg("line", {x1: left, x2: width - right, y1: y(backwardSeconds), y2: y(backwardSeconds),
                              stroke: PY.colours.compute, "stroke-dasharray": "4 3"}),
                 subscripted("T_b: all communication hidden", {x: width - right, y: y(backwardSeconds) - 5,
                              "text-anchor": "end", "font-size": 11, fill: PY.colours.compute}));
  picture.append(svg("path", {fill: "none", stroke: PY.colours.comm, "stroke-width": 2,
    d: times.map((t, i) => `${i ? "L" : "M"}${x(usable[i]).toFixed(2)},${y(t).toFixed(2)}`).join("")}));
  const now = backwardTime(...args);
  const shown = Math.min(Math.max(current, usable[0]), usable[usable.length - 1]);
  picture.append(svg("circle", {cx: x(shown), cy: y(now), r: 5, fill: PY.colours.comm, stroke: "#fff", "stroke-width": 1.5,
                                class: "ddp-marker"}));
  return picture;
}

// ------------------------------------------------------------- the control

const NAMES = ["gradient_bytes", "bucket_bytes", "backward_seconds", "world_size", "latency", "bandwidth"];

function render({model, el}) {
  const root = html("div", {class: "ddp-control ddp-bucket-tradeoff"});
  const out = html("div", {class: "ddp-result"});
  const set = (name) => (value) => update(model, {[name]: value});
  const controls = [
    slider({name: "gradient_bytes", label: "gradients G", values: PY.gradient_sizes, value: model.get("gradient_bytes"),
            format: formatMiB, onChange: set("gradient_bytes")}),
    slider({name: "bucket_bytes", label: "bucket size", values: PY.bucket_sizes, value: model.get("bucket_bytes"),
            format: formatMiB, onChange: set("bucket_bytes")}),
    slider({name: "backward_seconds", label: "backward T_b", values: logValues(-3, 0, 10),
            value: model.get("backward_seconds"), format: formatSeconds, onChange: set("backward_seconds")}),
    slider({name: "world_size", label: "ranks W", min: 2, max: PY.max_world_size, value: model.get("world_size"),
            onChange: set("world_size")}),
    slider({name: "latency", label: "latency α", values: logValues(-6, -3, 10), value: model.get("latency"),
            format: formatSeconds, onChange: set("latency")}),
    slider({name: "bandwidth", label: "bandwidth β", values: logValues(8, 11, 10), value: model.get("bandwidth"),
            format: (b) => `${formatG(b / 1e9, 3)} GB/s`, onChange: set("bandwidth")}),
  ];
  root.append(html("div", {class: "ddp-controls"}, controls.map((c) => c.element)), out);
  el.append(root);

  function redraw() {
    const args = NAMES.map((name) => model.get(name));
    controls.forEach((control, i) => control.set(args[i]));
    const schedule = bucketSchedule(...args);
    const total = schedule[schedule.length - 1][2];
    const each = schedule[0][2] - schedule[0][1];
    const sizes = PY.bucket_sizes.filter((s) => s <= args[0] * 1.0001);
    const best = sizes.reduce((b, s) => {
      const t = backwardTime(args[0], s, ...args.slice(2));
      return t < b[1] ? [s, t] : b;
    }, [sizes[0], Infinity]);
    root.dataset.result = JSON.stringify({buckets: schedule.length, each, total, best});
    out.replaceChildren(
      html("div", {class: "ddp-numbers"},
        html("span", {class: "ddp-number", "data-name": "buckets"}, "buckets n ", html("b", {}, String(schedule.length))),
        html("span", {class: "ddp-number", "data-name": "each"}, "each all-reduce c ", html("b", {}, formatSeconds(each))),
        html("span", {class: "ddp-number", "data-name": "total"}, "backward with communication T ",
             html("b", {}, formatSeconds(total))),
        html("span", {class: "ddp-number", "data-name": "exposed"}, "not hidden ",
             html("b", {}, formatSeconds(total - args[2]))),
        html("span", {class: "ddp-number", "data-name": "best"}, "best on this slider ",
             html("b", {}, `${formatMiB(best[0])} (${formatSeconds(best[1])})`))),
      pictureBox(drawTimeline(schedule, args[2])),
      pictureBox(drawCurve(args, PY.bucket_sizes, args[1])),
      html("div", {class: "ddp-legend"}, swatch(PY.colours.compute, "gradients computed", {fill: tint(PY.colours.compute, 0.55)}),
           swatch(PY.colours.comm, "buckets all-reduced, one after the other"),
           swatch(PY.colours.exposed, "communication left after the backward pass",
                  {fill: tint(PY.colours.exposed, 0.12)})));
  }

  for (const name of NAMES) model.on(`change:${name}`, redraw);
  redraw();
  return () => { for (const name of NAMES) model.off(`change:${name}`, redraw); };
}

export {bucketSchedule, backwardTime, formatSeconds, formatMiB, formatG, formatFixed};
export default {render};
