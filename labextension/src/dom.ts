/**
 * The DOM helpers the panel's sections and the timeline share.
 */

const SVG_NS = 'http://www.w3.org/2000/svg';

/** An element with a class and, optionally, its text (never HTML: values come from the kernel). */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** An SVG element with its attributes, appended to `parent` where given. */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: { [name: string]: string | number },
  parent?: SVGElement
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, String(value));
  }
  parent?.appendChild(node);
  return node;
}
