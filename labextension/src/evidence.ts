/**
 * The evidence under a leak-watch row (issue 29): the kernel proves a remedy before it shows
 * it (kerasmagic/remedies.py's retained-size walk) and sends the proof with the row. The fix
 * itself is the kernel's sentence, the same words `%tf_mem --cells` prints; this module only
 * lays out the proof's own data (which holders, what they retain, how it was measured) and
 * sets the kernel's `backticked` names as code. No DOM here but `appendWithCode`.
 */

import { formatBytes } from './format';
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
 * What the proof shows, one line each: what the proven command frees and by which objects
 * (or, with no name proven, what each candidate alone would free and what a plain
 * `%clear_tf` frees), with when it was measured; `title` says how. Null without a proof
 * (an older kernel, a cell not flagged).
 *
 * @example
 * evidenceText(cell.evidence?.proof, 'cell [6]', '02:05:47', trans)?.lines[0];
 * // 'Measured after cell [6] ran (02:05:47): `%clear_tf leak` frees 64.0 MiB: ...'
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
  const when = trans.__('Measured after %1 ran (%2):', cell, clock);
  const lines: string[] = [];
  if (proof.truncated) {
    lines.push(
      trans.__(
        '%1 the holder search stopped at its budget, so no name is proven.',
        when
      )
    );
  } else if (proof.named) {
    lines.push(`${when} ${retainedLine(proof.named, trans)}`);
  } else {
    const candidates = Object.entries(proof.candidates_bytes ?? {});
    const each = candidates
      .slice(0, SHOWN_OBJECTS + 1)
      .map(([name, bytes]) => trans.__('`%1` %2', name, formatBytes(bytes)))
      .join(', ');
    lines.push(
      candidates.length
        ? trans.__('%1 deleting each would free only %2.', when, each)
        : trans.__('%1 no variable of yours holds it.', when)
    );
    lines.push(retainedLine(proof.default, trans));
  }
  const how = proof.how_measured ?? proof.named?.how_measured ?? '';
  const title = how
    ? trans.__('How it was measured: %1.', how)
    : trans.__('How it was measured: not said by this kernel.');
  return { lines, title };
}

/** `%clear_tf leak` frees 64.0 MiB: ndarray (16.0 MiB) held by leak[0], … and 2 more */
function retainedLine(retained: IRetained, trans: IEvidenceWording): string {
  const objects = retained.objects ?? [];
  const shown = objects.slice(0, SHOWN_OBJECTS).join('; ');
  const more = objects.length - SHOWN_OBJECTS;
  const listed =
    more > 0
      ? trans._n('%2 and %1 more', '%2 and %1 more', more, shown)
      : shown;
  const bytes = formatBytes(retained.retained_bytes);
  const frees = retained.names.length
    ? trans.__('`%1` frees %2', retained.command, bytes)
    : trans.__('a plain `%1` frees %2', retained.command, bytes);
  if (!objects.length) {
    return trans.__('%1 (no object this walk can size).', frees);
  }
  return trans.__('%1: %2.', frees, listed);
}
