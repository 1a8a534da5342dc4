/**
 * The one DOM helper the panel's sections share.
 */

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
