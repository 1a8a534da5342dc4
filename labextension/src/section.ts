/**
 * What the panel's titled sections share: a section frame (title, and on the right how fresh
 * its facts are) and its quiet lines.
 */

import { formatBytes } from './format';
import { el } from './dom';
import { isNumber, MaybeNumber } from './protocol';

/** A section's frame: its node, its title and its "as of" note. */
export interface ISectionFrame {
  node: HTMLElement;
  title: HTMLElement;
  asOf: HTMLElement;
}

/** A section named `name` (its `data-section`) with `title`; append `node` where it goes. */
export function sectionFrame(name: string, title: string): ISectionFrame {
  const node = el('div', 'jp-KerasMagic-section');
  node.dataset.section = name;
  const head = el('div', 'jp-KerasMagic-sectionHead');
  const titleNode = el('h3', 'jp-KerasMagic-sectionTitle', title);
  head.appendChild(titleNode);
  const asOf = el('span', 'jp-KerasMagic-asOf');
  head.appendChild(asOf);
  node.appendChild(head);
  return { node, title: titleNode, asOf };
}

/** One quiet line in a section (a note, or the whole section when it collapses). */
export function sectionLine(
  parent: HTMLElement,
  text: string,
  name?: string
): HTMLElement {
  const line = el('div', 'jp-KerasMagic-line', text);
  if (name) {
    line.dataset.line = name;
  }
  parent.appendChild(line);
  return line;
}

/** A byte count for display, or a dash where the kernel had no number. */
export function bytesOrDash(value: MaybeNumber | null): string {
  return isNumber(value) ? formatBytes(value) : '–';
}
