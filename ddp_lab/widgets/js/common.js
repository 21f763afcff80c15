// common.js: what every control of the book shares, in the browser.
//
// ddp_lab/widgets/control.py puts this file between the constants exported
// from Python (`PY`, the palette, the choices, the bytes per parameter) and
// the control's own module, and anywidget runs the result as one ES module,
// in JupyterLab, in Colab and in the static book alike. Nothing here loads
// anything: no import, no fetch.

const SVG_NS = "http://www.w3.org/2000/svg";

/** An HTML element: html("div", {class: "x"}, child, "text", ...). */
function html(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  return fill(element, attributes, children);
}

/** An SVG element, same calling convention as html(). */
function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  return fill(element, attributes, children);
}

/** A picture (an <svg> with a width) in a box of its own: on a phone
 *  (controls.css) the picture stays at least 0.8 of its width, so that its
 *  text stays legible, and the box scrolls sideways. */
function pictureBox(picture) {
  picture.style.setProperty("--natural-width", `${picture.getAttribute("width")}px`);
  return html("div", {class: "ddp-picture"}, picture);
}

function fill(element, attributes, children) {
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null) element.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** SVG text with a subscript: R_g becomes R<tspan>g</tspan> (as $R_g$ in the book's figures). */
function subscripted(text, attributes = {}) {
  const node = svg("text", attributes);
  const parts = text.split(SUBSCRIPT);  // "R_g = 5" -> ["R", "g", " = 5"]
  parts.forEach((part, index) => {
    if (index % 2 === 1) {
      node.append(svg("tspan", {"baseline-shift": "sub", "font-size": "75%"}, part));
    } else if (part) {
      node.append(svg("tspan", {}, part));
    }
  });
  return node;
}

// ------------------------------------------------------------- controls

/** A labelled range slider. `values` (optional) maps positions to values,
 *  for sliders over a list (powers of two) or a log scale. The readout is
 *  format(value). onChange(value) runs on every move. */
function slider({name, label, min, max, step = 1, value, values, format = String, onChange}) {
  const position = values ? nearestIndex(values, value) : value;
  const input = html("input", {type: "range", name, min: values ? 0 : min,
                               max: values ? values.length - 1 : max, step: values ? 1 : step,
                               value: position, "aria-label": label});
  const readout = html("output", {class: "ddp-readout"});
  const read = () => (values ? values[Number(input.value)] : Number(input.value));
  const show = (v) => { readout.textContent = format(v); };
  input.addEventListener("input", () => { show(read()); onChange(read()); });
  show(value);
  const element = html("label", {class: "ddp-slider"}, html("span", {class: "ddp-label"}, label), input, readout);
  return {
    element, input,
    set(v) { input.value = values ? nearestIndex(values, v) : v; show(v); },
  };
}

/** A labelled <select>; options are [value, text] pairs. */
function choice({name, label, options, value, onChange}) {
  const select = html("select", {name, "aria-label": label},
    options.map(([v, text]) => html("option", {value: String(v)}, text)));
  select.value = String(value);
  select.addEventListener("change", () => {
    const picked = options.find(([v]) => String(v) === select.value)[0];
    onChange(picked);
  });
  return {
    element: html("label", {class: "ddp-choice"}, html("span", {class: "ddp-label"}, label), select),
    input: select,
    set(v) { select.value = String(v); },
  };
}

/** A row of toggle buttons, one per option ([value, text, {off, title}]); the
 *  pressed one is the value. Buttons marked `off` stay clickable, drawn dashed. */
function buttons({name, label, options, value, onChange}) {
  const row = html("span", {class: "ddp-buttons", role: "group", "aria-label": label, "data-name": name});
  const element = html("span", {class: "ddp-choice"}, html("span", {class: "ddp-label"}, label), row);
  let current = value;
  function build(list) {
    row.replaceChildren(...list.map(([v, text, extra = {}]) => {
      const button = html("button", {type: "button", "data-value": v, title: extra.title,
                                     class: extra.off ? "ddp-off" : null}, text);
      button.addEventListener("click", () => onChange(v));
      return button;
    }));
    mark();
  }
  function mark() {
    for (const button of row.children) {
      button.setAttribute("aria-pressed", String(button.dataset.value === String(current)));
    }
  }
  build(options);
  return {element, input: row, options: build, set(v) { current = v; mark(); }};
}

/** Text with subscripts, as one HTML span: "R_g" -> R<sub>g</sub> (LOCAL_RANK stays as it is). */
function subscriptedHtml(text) {
  return html("span", {}, text.split(SUBSCRIPT).map((part, i) => (i % 2 ? html("sub", {}, part) : part)));
}

// One lower-case letter after "_", ending a word: R_g, R_l, T_b; not LOCAL_RANK.
const SUBSCRIPT = /_([a-z])(?![A-Za-z])/;

function nearestIndex(values, value) {
  let best = 0;
  values.forEach((v, i) => { if (Math.abs(v - value) < Math.abs(values[best] - value)) best = i; });
  return best;
}

/** Values from 10^lo to 10^hi in `per_decade` steps per decade (log sliders). */
function logValues(lo, hi, perDecade) {
  const values = [];
  for (let i = Math.round(lo * perDecade); i <= Math.round(hi * perDecade); i++) {
    values.push(Number((10 ** (i / perDecade)).toPrecision(12)));
  }
  return values;
}

/** Set traits on the model (Python sees them in a live kernel; the static
 *  page has no kernel, and save_changes() then does nothing). */
function update(model, changes) {
  for (const [name, value] of Object.entries(changes)) model.set(name, value);
  model.save_changes();
}

// ------------------------------------------------ numbers as Python prints them

/** The decimal digits of |x| as [digits, exponent], |x| = d.ddd... × 10^exponent,
 *  to 100 significant digits: enough to tell a true tie (…5000) from a near one. */
function decimalDigits(x) {
  const [mantissa, exponent] = Math.abs(x).toExponential(99).split("e");
  return [mantissa.replace(".", ""), Number(exponent)];
}

/** Round a digit string to `keep` digits, half to even (as Python does). */
function roundDigits(digits, keep) {
  if (keep < 0) return ["", false];
  const head = digits.slice(0, keep).padEnd(keep, "0");
  const rest = digits.slice(keep);
  const last = keep > 0 ? Number(head[keep - 1]) : 0;
  const up = rest[0] > "5" || (rest[0] === "5" && (/[1-9]/.test(rest.slice(1)) || last % 2 === 1));
  if (!up) return [head, false];
  const bumped = (BigInt("1" + head) + 1n).toString().slice(1);  // keeps leading zeros
  const carried = bumped === "0".repeat(keep);  // 999 + 1 -> 000: a carry out of the head
  return [carried ? "1" + bumped : bumped, carried];
}

/** Python's format(x, f".{precision}g"). */
function formatG(x, precision = 6) {
  const p = Math.max(precision, 1);
  if (x === 0) return "0";
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : (x > 0 ? "inf" : "-inf");
  const sign = x < 0 ? "-" : "";
  let [digits, exponent] = decimalDigits(x);
  let [head, carried] = roundDigits(digits, p);
  if (carried) { head = head.slice(0, p); exponent += 1; }
  if (-4 <= exponent && exponent < p) {
    let whole, fraction;
    if (exponent >= 0) {
      whole = head.slice(0, exponent + 1);
      fraction = head.slice(exponent + 1);
    } else {
      whole = "0";
      fraction = "0".repeat(-exponent - 1) + head;
    }
    fraction = fraction.replace(/0+$/, "");
    return sign + whole + (fraction ? "." + fraction : "");
  }
  const fraction = head.slice(1).replace(/0+$/, "");
  const e = (exponent < 0 ? "-" : "+") + String(Math.abs(exponent)).padStart(2, "0");
  return sign + head[0] + (fraction ? "." + fraction : "") + "e" + e;
}

/** Python's format(x, f",.{decimals}f"): fixed point, thousands separated by commas. */
function formatFixed(x, decimals = 0, commas = true) {
  const sign = x < 0 ? "-" : "";
  const [whole, fraction] = Math.abs(x).toFixed(100).split(".");
  const digits = whole + fraction;
  let [rounded] = roundDigits(digits, whole.length + decimals);
  let wholeDigits = rounded.slice(0, rounded.length - decimals).replace(/^0+(?=\d)/, "") || "0";
  const fractionDigits = rounded.slice(rounded.length - decimals);
  if (commas) wholeDigits = wholeDigits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const text = wholeDigits + (decimals ? "." + fractionDigits : "");
  return (sign && /[1-9]/.test(text) ? sign : "") + text;
}

/** ddp_lab.units.format_seconds(seconds, "text"): "12.3 µs", "4.5 ms", "1.2 s"
 *  (the cost models of Chapters 6, 8 and 12). */
function formatSeconds(seconds) {
  if (seconds < 1e-3) return `${formatG(seconds * 1e6, 3)} µs`;
  if (seconds < 1) return `${formatG(seconds * 1e3, 3)} ms`;
  return `${formatG(seconds, 3)} s`;
}

/** ddp_lab.draw.memory.describe_parameters: 7.5e9 -> "7.5B" (Chapters 12b and 15). */
function describeParameters(count) {
  for (const [size, suffix] of [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]]) {
    if (count >= size) return formatG(count / size, 3) + suffix;
  }
  return formatG(count, 3);
}

// ------------------------------------------------------------- charts

/** A linear or log axis: a function from value to pixel, with ticks. */
function scale(kind, [lo, hi], [from, to]) {
  const f = kind === "log" ? Math.log10 : (v) => v;
  const a = f(lo), b = f(hi);
  const map = (v) => from + ((f(v) - a) / (b - a)) * (to - from);
  map.ticks = kind === "log" ? logTicks(lo, hi) : linearTicks(lo, hi);
  return map;
}

function logTicks(lo, hi) {
  const ticks = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    const v = 10 ** e;
    if (v >= lo * 0.999 && v <= hi * 1.001) ticks.push(v);
  }
  return ticks;
}

function linearTicks(lo, hi, count = 5) {
  const span = hi - lo;
  const raw = span / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

/** Horizontal grid lines at `ticks` of the axis `y`, from `left` to `right`,
 *  each labelled on the left with `label(tick)`. */
function yGrid(picture, y, ticks, label, {left, right, stroke}) {
  for (const tick of ticks) {
    picture.append(svg("line", {x1: left, x2: right, y1: y(tick), y2: y(tick), stroke}),
                   svg("text", {x: left - 6, y: y(tick), "text-anchor": "end", "dominant-baseline": "central",
                                "font-size": 11, fill: "#444"}, label(tick)));
  }
}

/** Vertical grid lines at `ticks` of the axis `x`, from `top` to `bottom`,
 *  each labelled `gap` pixels under the axis with `label(tick)`. */
function xGrid(picture, x, ticks, label, {top, bottom, stroke, gap = 15}) {
  for (const tick of ticks) {
    picture.append(svg("line", {x1: x(tick), x2: x(tick), y1: top, y2: bottom, stroke}),
                   svg("text", {x: x(tick), y: bottom + gap, "text-anchor": "middle", "font-size": 11,
                                fill: "#444"}, label(tick)));
  }
}

/** Colour with transparency, for fills: "#E69F00" -> "rgba(230,159,0,0.4)". */
function tint(colour, alpha = 0.4) {
  const [r, g, b] = rgb(colour);
  return `rgba(${r},${g},${b},${alpha})`;
}

/** The colour darkened to 70 %, for outlines (as ddp_lab.draw.layout does). */
function darker(colour) {
  const [r, g, b] = rgb(colour).map((c) => Math.round(0.7 * c));
  return `rgb(${r},${g},${b})`;
}

function rgb(colour) {
  const hex = colour.replace("#", "");
  return [0, 2, 4].map((i) => parseInt(hex.slice(i, i + 2), 16));
}

/** A legend entry: a small swatch and its label, as HTML. */
function swatch(colour, label, {fill = colour, dashed = false} = {}) {
  const style = dashed
    ? `border-top: 2px dashed ${colour}; height: 0; margin-top: 0.55em;`
    : `background: ${fill}; border: 1.5px solid ${colour};`;
  return html("span", {class: "ddp-swatch"}, html("span", {class: "ddp-swatch-box", style}), label);
}
