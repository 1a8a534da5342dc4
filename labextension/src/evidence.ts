/**
 * The evidence under a leak-watch row (issue 29): the kernel proves a remedy before it shows
 * it (kerasmagic/remedies.py's retained-size walk) and sends the proof with the row. The fix
 * itself is the kernel's sentence, the same words `%tf_mem --cells` prints; this module only
 * lays out the proof's own data (which holders, what they retain, how it was measured) and
 * sets the kernel's `backticked` names as code. No DOM here but `appendWithCode`.
 */

import type { IProof, IRetained } from './protocol';

/** The part of a `TranslationBundle` the evidence needs (jest passes a plain one). */
export interface IEvidenceWording {
  __(msgid: string, ...args: any[]): string;
  _n(msgid: string, msgidPlural: string, n: number, ...args: any[]): string;
}

/** A piece of a kernel sentence: plain text, or a name or command it set in backticks. */
export interface ISegment {
  text: string;
  code: boolean;
}

/**
 * A kernel sentence cut at its backticks: "Fix: `leak` gains items" is text, code, text. An
 * unpaired backtick stays text.
 *
 * @example
 * codeSegments('run `%clear_tf a` now');
 * // [{text: 'run ', code: false}, {text: '%clear_tf a', code: true}, {text: ' now', code: false}]
 */
export function codeSegments(sentence: string): ISegment[] {
  const parts = sentence.split('`');
  if (parts.length % 2 === 0) {
    // An odd number of backticks: no pairing is safe, keep the sentence as it came.
    return [{ text: sentence, code: false }];
  }
  return parts
    .map((text, index) => ({ text, code: index % 2 === 1 }))
    .filter(segment => segment.text !== '');
}

/** Append `sentence` to `node`, its backticked parts as `<code>` (text only, never HTML). */
export function appendWithCode(node: HTMLElement, sentence: string): void {
  for (const segment of codeSegments(sentence)) {
    if (segment.code) {
      const code = document.createElement('code');
      code.textContent = segment.text;
      node.appendChild(code);
    } else {
      node.appendChild(document.createTextNode(segment.text));
    }
  }
}

/** How many of a retained set's objects a row lists before "and N more". */
export const SHOWN_OBJECTS = 3;

/** The lines under a leak-watch row, and the hover that says how they were measured. */
export interface IEvidenceText {
  lines: string[];
  title: string;
}

/**
 * What the fix line (the kernel's sentence, with the figure and when it was measured) does not
 * say: the objects the proven command frees, or, with no name proven, those a plain `%clear_tf`
 * frees; `title` says when and how it was measured. Null without a proof (an older kernel, a
 * cell not flagged).
 *
 * @example
 * evidenceText(cell.evidence?.proof, 'cell [6]', '02:05:47', trans)?.lines[0];
 * // 'What it frees: ndarray[2097152] (16.0 MiB) held by leak[0]; ...'
 */
export function evidenceText(
  proof: IProof | null | undefined,
  cell: string,
  clock: string,
  trans: IEvidenceWording
): IEvidenceText | null {
  if (!proof) {
    return null;
  }
  const lines: string[] = [];
  if (proof.named && !proof.truncated) {
    const objects = objectsLine(proof.named);
    if (objects) {
      lines.push(trans.__('What it frees: %1.', objects));
    }
  } else if (!proof.truncated) {
    const objects = objectsLine(proof.default);
    if (objects) {
      lines.push(trans.__('What a plain `%clear_tf` frees: %1.', objects));
    }
  }
  const how = proof.how_measured ?? proof.named?.how_measured ?? '';
  const when = trans.__('Measured after %1 ran (%2).', cell, clock);
  const title = how
    ? trans.__('%1 How: %2.', when, how)
    : trans.__('%1 How: not said by this kernel.', when);
  return { lines, title };
}

/** `ndarray (16.0 MiB) held by leak[0]; … and 2 more`, or '' where the walk sized none. */
function objectsLine(retained: IRetained): string {
  const objects = retained.objects ?? [];
  const shown = objects.slice(0, SHOWN_OBJECTS).join('; ');
  const more = objects.length - SHOWN_OBJECTS;
  return more > 0 ? `${shown} and ${more} more` : shown;
}
