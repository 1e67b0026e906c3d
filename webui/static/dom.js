// Building DOM without HTML strings: text is always a text node, attributes are set one by one.

/**
 * h("button", { class: "x", onclick: f, "aria-label": "Stop" }, "text", child) -> element.
 * Strings among the children become text nodes; null/false children are skipped.
 */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined && child !== false));
  return node;
}

/** Copies text, and says so on the button for a moment. */
export async function copyText(button, text) {
  await navigator.clipboard.writeText(text);
  const label = button.textContent;
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = label; }, 1200);
}

/** `long` as the input's placeholder where it fits on one line, else `short`; measured again whenever the input is
 * resized (a phone's narrow composer wrapped the long one). */
export function fitPlaceholder(input, long, short) {
  const measure = document.createElement("canvas").getContext("2d");
  new ResizeObserver(() => {
    const style = getComputedStyle(input);
    measure.font = style.font;
    const room = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    input.placeholder = measure.measureText(long).width <= room ? long : short;
  }).observe(input);
}

/** A number input's range from a server limit ({min, max}; a null max: none). */
export function setRange(input, { min, max }) {
  input.min = String(min);
  if (max === null) input.removeAttribute("max");
  else input.max = String(max);
}
