// scaling.js: Chapter 12b's scaling model (ddp_lab/widgets/scaling.py).
//
// The formulas of ddp_lab/cost/scaling.py, each named after the Python function it
// repeats, with the cost of a ring collective from ddp_lab/cost/alpha_beta.py:
//   compute        6 P T / (F · utilisation)                      compute_seconds
//   flat ring      2(W-1)·α + 2(W-1)/W · n/β, at the slowest link  flat_all_reduce_seconds
//   hierarchical   reduce + broadcast in the node (G-1 steps, n bytes each),
//                  all-reduce of the N leaders across the network  hierarchical_all_reduce_seconds
//   step           compute + all-reduce (no overlap), or
//                  forward + max(backward, all-reduce) (overlap)   step_seconds
//   efficiency     compute / step                                  scaling_efficiency
//   tokens to hide all-reduce · F · utilisation / (4 P)            tokens_to_hide
// Links, GPUs and the backward share come from Python through PY.
// tests/test_widgets_js.py compares every function with Python on a grid.

/** ddp_lab.cost.collective_time for the three collectives the model uses. */
function collectiveTime(collective, nbytes, worldSize, latency, bandwidth) {
  const w = worldSize;
  const steps = collective === "all_reduce" ? 2 * (w - 1) : w - 1;
  const factor = collective === "all_reduce" ? (2 * (w - 1)) / w : 1.0;
  return steps * latency + (nbytes * factor) / bandwidth;
}

/** ddp_lab.cost.scaling.compute_seconds. */
function computeSeconds(parameters, tokens, flops, utilisation) {
  return (6 * parameters * tokens) / (flops * utilisation);
}

/** ddp_lab.cost.scaling.flat_all_reduce_seconds (ddp_lab.cost.links.allreduce_seconds): the
 *  ring over all ranks runs at the network's pace as soon as it leaves a node.
 *  Links are {bandwidth, latency}. */
function flatAllReduceSeconds(nbytes, nodes, ranksPerNode, intra, inter) {
  const link = nodes > 1 ? inter : intra;
  return collectiveTime("all_reduce", nbytes, nodes * ranksPerNode, link.latency, link.bandwidth);
}

/** ddp_lab.cost.scaling.hierarchical_all_reduce_seconds. */
function hierarchicalAllReduceSeconds(nbytes, nodes, ranksPerNode, intra, inter) {
  let seconds = 0.0;
  if (ranksPerNode > 1) {
    for (const phase of ["reduce", "broadcast"]) {
      seconds += collectiveTime(phase, nbytes, ranksPerNode, intra.latency, intra.bandwidth);
    }
  }
  if (nodes > 1) seconds += collectiveTime("all_reduce", nbytes, nodes, inter.latency, inter.bandwidth);
  return seconds;
}

/** ddp_lab.cost.scaling.step_seconds. */
function stepSeconds(compute, allReduce, overlap = true) {
  if (!overlap) return compute + allReduce;
  const backward = PY.backward_share * compute;
  return compute - backward + Math.max(backward, allReduce);
}

/** ddp_lab.cost.scaling.scaling_efficiency. */
function scalingEfficiency(compute, step) {
  return compute / step;
}

/** ddp_lab.cost.scaling.tokens_to_hide. */
function tokensToHide(parameters, allReduce, flops, utilisation) {
  return (allReduce * flops * utilisation) / (4 * parameters);
}

/** ddp_lab.widgets.scaling.scaling_model: everything the control shows for one setting. */
function scalingModel(parameters, gpusPerNode, nodes, intra, inter, cards, tokens, gpu, utilisation, algorithm,
                      bytesPerGradient, speeds) {
  // Link.at_achieved: nccl-tests' bus bandwidth where the book has one, else the rated figure
  const priced = (key) => {
    const link = PY.links[key];
    return speeds === "achieved" && link.achieved ? {...link, bandwidth: link.achieved} : link;
  };
  const flops = PY.gpus[gpu].flops;
  const compute = computeSeconds(parameters, tokens, flops, utilisation);
  const nbytes = parameters * bytesPerGradient;
  const card = priced(inter);
  let network = null;
  if (nodes > 1) {
    // a flat ring leaves the node through all its cards; a hierarchical leader through one
    network = algorithm === "hierarchical" ? card : {bandwidth: cards * card.bandwidth, latency: card.latency};
  }
  const reduce = algorithm === "hierarchical" ? hierarchicalAllReduceSeconds : flatAllReduceSeconds;
  const allReduce = reduce(nbytes, nodes, gpusPerNode, priced(intra), network);
  const serial = stepSeconds(compute, allReduce, false);
  const overlapped = stepSeconds(compute, allReduce, true);
  return {
    compute,
    all_reduce: allReduce,
    step_serial: serial,
    step_overlapped: overlapped,
    efficiency_serial: scalingEfficiency(compute, serial),
    efficiency_overlapped: scalingEfficiency(compute, overlapped),
    tokens_to_hide: tokensToHide(parameters, allReduce, flops, utilisation),
  };
}

/** Python's f"{x:.1%}". */
function percent(x) {
  return `${formatFixed(x * 100, 1, false)}%`;
}

/** Python's f"{x:,.0f}": tokens. */
function count(x) {
  return formatFixed(x, 0);
}

function formatBandwidth(bytesPerSecond) {
  return `${formatG(bytesPerSecond / 1e9, 3)} GB/s`;
}

// ------------------------------------------------------------- the pictures

/** One step drawn to scale: compute then all-reduce, and the all-reduce beside the backward pass. */
function drawStep(answer) {
  const width = 720, height = 92, left = 92, right = 64, top = 8, row = 30, gap = 14;
  const forward = answer.compute * (1 - PY.backward_share);
  const backward = answer.compute * PY.backward_share;
  const longest = Math.max(answer.step_serial, answer.step_overlapped);
  const x = (t) => left + (t / longest) * (width - left - right);
  const picture = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "ddp-scaling-step",
                              "aria-label": "one step: compute and all-reduce, without and with overlap"});
  const bar = (y, from, to, colour, name, extra = {}) => svg("rect", {
    x: x(from), y, width: Math.max(x(to) - x(from), 0), height: row * 0.42, fill: colour, "data-part": name, ...extra});
  const rows = [["no overlap", top], ["overlap", top + row + gap]];
  for (const [label, y] of rows) {
    picture.append(svg("text", {x: left - 8, y: y + row * 0.45, "text-anchor": "end", "dominant-baseline": "central",
                                "font-size": 12.5, fill: "#222"}, label));
  }
  const [serialY, overlapY] = [top, top + row + gap];
  // compute on the upper half of each row, communication on the lower half
  picture.append(
    bar(serialY, 0, forward, PY.colours.forward, "forward"),
    bar(serialY, forward, answer.compute, PY.colours.backward, "backward"),
    bar(serialY + row * 0.48, answer.compute, answer.step_serial, PY.colours.exposed, "exposed"),
    bar(overlapY, 0, forward, PY.colours.forward, "forward"),
    bar(overlapY, forward, answer.compute, PY.colours.backward, "backward"),
    bar(overlapY + row * 0.48, forward, forward + Math.min(answer.all_reduce, backward), PY.colours.comm, "hidden"),
    bar(overlapY + row * 0.48, forward + backward, answer.step_overlapped, PY.colours.exposed, "exposed"));
  for (const [y, step] of [[serialY, answer.step_serial], [overlapY, answer.step_overlapped]]) {
    picture.append(svg("text", {x: x(step) + 5, y: y + row * 0.45, "font-size": 11.5, fill: "#333",
                                "dominant-baseline": "central"}, formatSeconds(step)));
  }
  return picture;
}

/** The efficiency against the number of GPUs, 1 to 128 nodes of this size. */
function drawCurve(args) {
  const [, gpusPerNode, current] = args;
  const points = PY.nodes.map((nodes) => {
    const answer = scalingModel(args[0], gpusPerNode, nodes, ...args.slice(3));
    return [nodes * gpusPerNode, answer.efficiency_serial, answer.efficiency_overlapped];
  });
  const width = 470, height = 260, left = 50, right = 14, top = 12, bottom = 42;
  const x = scale("log", [points[0][0], points[points.length - 1][0]], [left, width - right]);
  const y = scale("linear", [0, 1.05], [height - bottom, top]);
  const picture = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "ddp-scaling-curve",
                              "aria-label": "scaling efficiency against the number of GPUs"});
  yGrid(picture, y, [0, 0.25, 0.5, 0.75, 1], (tick) => `${tick * 100}%`,
        {left, right: width - right, stroke: "#e6e6e6"});
  xGrid(picture, x, points.map(([gpus]) => gpus), String, {top, bottom: height - bottom, stroke: "#eeeeee"});
  picture.append(svg("text", {x: (left + width - right) / 2, y: height - 8, "text-anchor": "middle", "font-size": 12,
                              fill: "#333"}, `GPUs (nodes of ${gpusPerNode})`));
  const path = (i) => points.map((p, k) => `${k ? "L" : "M"}${x(p[0]).toFixed(2)},${y(p[i]).toFixed(2)}`).join("");
  picture.append(svg("path", {d: path(2), fill: "none", stroke: PY.colours.backward, "stroke-width": 2.2}),
                 svg("path", {d: path(1), fill: "none", stroke: PY.colours.exposed, "stroke-width": 2.2}));
  const now = points[PY.nodes.indexOf(current)];
  picture.append(svg("line", {x1: x(now[0]), x2: x(now[0]), y1: top, y2: height - bottom, stroke: "#999"}));
  for (const [i, colour, name] of [[2, PY.colours.backward, "overlap"], [1, PY.colours.exposed, "serial"]]) {
    picture.append(svg("circle", {cx: x(now[0]), cy: y(now[i]), r: 4.5, fill: colour, stroke: "#fff",
                                  "stroke-width": 1.5, class: `ddp-marker-${name}`}));
  }
  return picture;
}

// ------------------------------------------------------------- the control

const NAMES = ["parameters", "gpus_per_node", "nodes", "intra", "inter", "cards", "tokens_per_gpu", "gpu",
               "utilisation", "algorithm", "bytes_per_gradient", "speeds"];

function linkOption(key) {
  const link = PY.links[key];
  const achieved = link.achieved ? `, ${formatBandwidth(link.achieved)} achieved` : "";
  return [key, `${link.name} (${formatBandwidth(link.bandwidth)} rated${achieved})`];
}

function render({model, el}) {
  const root = html("div", {class: "ddp-control ddp-scaling-model"});
  const out = html("div", {class: "ddp-result"});
  const set = (name) => (value) => update(model, {[name]: value});
  const get = (name) => model.get(name);
  const controls = {
    parameters: slider({name: "parameters", label: "parameters P", values: logValues(8, 12, 10),
                        value: get("parameters"), format: describeParameters, onChange: set("parameters")}),
    tokens_per_gpu: slider({name: "tokens_per_gpu", label: "tokens per GPU T", values: PY.tokens,
                            value: get("tokens_per_gpu"), format: count, onChange: set("tokens_per_gpu")}),
    gpus_per_node: slider({name: "gpus_per_node", label: "GPUs per node", values: PY.gpus_per_node,
                           value: get("gpus_per_node"), onChange: set("gpus_per_node")}),
    nodes: slider({name: "nodes", label: "nodes", values: PY.nodes, value: get("nodes"), onChange: set("nodes")}),
    intra: choice({name: "intra", label: "inside a node", options: PY.intra.map(linkOption), value: get("intra"),
                   onChange: set("intra")}),
    inter: choice({name: "inter", label: "network card", options: PY.inter.map(linkOption), value: get("inter"),
                   onChange: set("inter")}),
    cards: slider({name: "cards", label: "cards per node", min: 1, max: PY.max_cards, value: get("cards"),
                   onChange: set("cards")}),
    gpu: buttons({name: "gpu", label: "GPU", value: get("gpu"),
                  options: Object.entries(PY.gpus).map(([key, gpu]) => [key, gpu.name]), onChange: set("gpu")}),
    utilisation: slider({name: "utilisation", label: "of its peak", values: PY.utilisations, value: get("utilisation"),
                         format: (u) => `${formatFixed(u * 100, 0)}%`, onChange: set("utilisation")}),
    algorithm: buttons({name: "algorithm", label: "all-reduce", value: get("algorithm"),
                        options: [["flat", "flat ring"], ["hierarchical", "hierarchical"]],
                        onChange: set("algorithm")}),
    bytes_per_gradient: buttons({name: "bytes_per_gradient", label: "gradients", value: get("bytes_per_gradient"),
                                 options: [[2, "16-bit"], [4, "32-bit"]], onChange: set("bytes_per_gradient")}),
    speeds: buttons({name: "speeds", label: "link speeds", value: get("speeds"),
                     options: [["achieved", "as NCCL reaches them"], ["rated", "rated"]], onChange: set("speeds")}),
  };
  const row = (...names) => html("div", {class: "ddp-controls"}, names.map((name) => controls[name].element));
  root.append(row("parameters", "tokens_per_gpu"),
              row("gpus_per_node", "nodes", "cards"),
              row("intra", "inter"),
              row("gpu", "utilisation"),
              row("algorithm", "bytes_per_gradient", "speeds"), out);
  el.append(root);

  function redraw() {
    const args = NAMES.map(get);
    NAMES.forEach((name, i) => controls[name].set(args[i]));
    const answer = scalingModel(...args);
    root.dataset.result = JSON.stringify(answer);
    const [parameters, gpusPerNode, nodes, , , , tokens, , , algorithm, , speeds] = args;
    const number = (name, label, value) => html("span", {class: "ddp-number", "data-name": name}, label,
                                               html("b", {}, value));
    out.replaceChildren(
      html("div", {class: "ddp-title"},
           `${describeParameters(parameters)} parameters on ${nodes * gpusPerNode} GPUs (${nodes} x ${gpusPerNode}), ` +
           `${count(tokens)} tokens per GPU, ${algorithm} all-reduce, ${speeds} link speeds`),
      html("div", {class: "ddp-numbers"},
        number("compute", "compute ", formatSeconds(answer.compute)),
        number("all_reduce", "all-reduce ", formatSeconds(answer.all_reduce)),
        number("step_serial", "step, no overlap ", formatSeconds(answer.step_serial)),
        number("step_overlapped", "step, overlap ", formatSeconds(answer.step_overlapped))),
      html("div", {class: "ddp-numbers"},
        number("efficiency_serial", "efficiency, no overlap ", percent(answer.efficiency_serial)),
        number("efficiency_overlapped", "efficiency, overlap ", percent(answer.efficiency_overlapped)),
        number("tokens_to_hide", "tokens per GPU that hide the all-reduce ", count(answer.tokens_to_hide))),
      pictureBox(drawStep(answer)),
      html("div", {class: "ddp-legend"}, swatch(PY.colours.forward, "forward"),
           swatch(PY.colours.backward, "backward"), swatch(PY.colours.comm, "all-reduce, hidden"),
           swatch(PY.colours.exposed, "all-reduce the step waits for")),
      pictureBox(drawCurve(args)),
      html("div", {class: "ddp-legend"}, swatch(PY.colours.backward, "efficiency with overlap (the best case)"),
           swatch(PY.colours.exposed, "without overlap (the worst case)")));
  }

  for (const name of NAMES) model.on(`change:${name}`, redraw);
  redraw();
  return () => { for (const name of NAMES) model.off(`change:${name}`, redraw); };
}

export {collectiveTime, computeSeconds, flatAllReduceSeconds, hierarchicalAllReduceSeconds, stepSeconds,
        scalingEfficiency, tokensToHide, scalingModel, percent, count, formatSeconds, describeParameters,
        formatG, formatFixed};
export default {render};
