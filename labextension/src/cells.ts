/**
 * The "Leak watch" section: cells whose memory grew on each of their last runs (the
 * kernel's `cell_growth` message, protocol 1.2), flagged cells first with the sentence and
 * the fix; a click shows the cell in the notebook. The wording functions have no DOM, so
 * jest tests them directly; every kernel string is set with textContent.
 */

import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { formatBytes, formatCount } from './format';
import { ICellFigures, ICellGrowth, ICellSummary } from './protocol';
import { el } from './dom';
import { appendWithCode, evidenceText, IEvidenceWording } from './evidence';
import { formatClock } from './timeline';

/** The part of a `TranslationBundle` the wording needs (jest passes a plain one). */
export type IWording = IEvidenceWording;

/** `cell [12]`, as the notebook numbers it (`cell [?]` without a number). */
export function cellLabel(executionCount: number | null): string {
  return `cell [${executionCount === null ? '?' : executionCount}]`;
}

/** A change in bytes with its sign: `+9.77 MiB`, `−512 KiB`, `±0 B`. */
export function signedBytes(bytes: number): string {
  if (bytes === 0) {
    return '±0 B';
  }
  return bytes > 0 ? `+${formatBytes(bytes)}` : formatBytes(bytes);
}

/** A change in a count, to one decimal (a mean over runs): `+2`, `+0.5`. */
function signedCount(count: number): string {
  const rounded = Math.round(count * 10) / 10;
  if (rounded === 0) {
    return '±0';
  }
  const text = Number.isInteger(rounded)
    ? formatCount(Math.abs(rounded))
    : Math.abs(rounded).toFixed(1);
  return `${rounded > 0 ? '+' : '−'}${text}`;
}

/**
 * The cells whose last run left much behind on its own (not flagged by the run-over-run rule),
 * as the kernel's one-run rule names them.
 */
export function oneRunCells(message: ICellGrowth | null): ICellSummary[] {
  return (message?.cells ?? []).filter(
    cell => !cell.flagged && cell.one_run?.sentence
  );
}

/**
 * What one run left behind, in the kernel's words (`one_run.sentence`, leak_watch.one_run_sentence):
 * `cell [3] grew +201 MiB and left 6 live models, held by \`models\``. The rule that picks what
 * it names (growth over the kernel's noise, models left) is the kernel's alone.
 */
export function oneRunSentence(cell: ICellSummary): string {
  return cell.one_run?.sentence ?? '';
}

/** The fix under a row in the kernel's words (`fix_text`, a one-run's `remedy_text`); '' if none. */
export function kernelFixText(cell: ICellSummary): string {
  if (cell.flagged) {
    return cell.fix_text ?? '';
  }
  return cell.one_run?.remedy_text ?? '';
}

/**
 * The flag's sentence, `cell [12] grows 9.77 MiB per run (4 runs)`: the kernel's `sentence`,
 * worded here only for a kernel before later 1.7, which sends none.
 */
export function growthSentence(cell: ICellSummary, trans: IWording): string {
  if (cell.sentence) {
    return cell.sentence;
  }
  return trans.__(
    '%1 grows %2 per run (%3 runs)',
    cellLabel(cell.execution_count),
    formatBytes(cell.growth_per_run_bytes ?? NaN),
    cell.streak
  );
}

/** The fix, in three parts so that the magic can be shown as code. */
export interface IFixParts {
  lead: string;
  code: string;
  rest: string;
}

/**
 * What to do about a flagged cell (`fresh_model`, `keep_models` or `isolate`, the same words
 * as `%tf_mem --cells`); null for no fix or a code this sidebar does not know.
 */
export function fixParts(
  fix: string | null,
  trans: IWording
): IFixParts | null {
  switch (fix) {
    case 'fresh_model':
      return {
        lead: trans.__('Fix: start the cell with'),
        code: '%%fresh_model',
        rest: trans.__(
          ", which frees the previous run's models and dead TensorFlow graphs before it runs."
        )
      };
    case 'keep_models':
      return {
        lead: trans.__(
          'Fix: each run keeps one more Keras model alive (a list of models or of History objects holds them): keep only what you need from each, e.g. history.history, then'
        ),
        code: '%%fresh_model',
        rest: trans.__(' frees the rest.')
      };
    case 'isolate':
      return {
        lead: trans.__('Fix:'),
        code: '%%fresh_model --isolate',
        rest: trans.__(
          ' runs the cell in a new process, the only way to get this memory back (unless the cell keeps it on purpose, e.g. a list it appends to).'
        )
      };
    default:
      return null;
  }
}

/** The fix as one line of text (what `%tf_mem --cells` prints too). */
export function fixText(fix: string | null, trans: IWording): string {
  const parts = fixParts(fix, trans);
  return parts ? `${parts.lead} ${parts.code}${parts.rest}` : '';
}

/**
 * What grew, per run: `RSS +9.77 MiB · TF in use +1.50 MiB · +2 CustomGradient entries`
 * (figures the kernel has no number for are left out, counts only when they moved).
 */
export function detailsText(
  figures: ICellFigures | null,
  trans: IWording
): string {
  if (!figures) {
    return '';
  }
  const parts: string[] = [];
  const bytes: Array<[string, string]> = [
    ['rss_bytes', trans.__('RSS')],
    ['tf_in_use_bytes', trans.__('TF in use')],
    ['gpu_bytes', trans.__('GPU (this kernel)')]
  ];
  for (const [name, label] of bytes) {
    const value = figures[name];
    if (value !== null && value !== undefined) {
      parts.push(`${label} ${signedBytes(value)}`);
    }
  }
  const counts: Array<[string, string]> = [
    ['custom_gradient_entries', trans.__('CustomGradient entries')],
    ['live_models', trans.__('Keras models')]
  ];
  for (const [name, label] of counts) {
    const value = figures[name];
    if (value !== null && value !== undefined && Math.abs(value) >= 0.05) {
      parts.push(`${signedCount(value)} ${label}`);
    }
  }
  return parts.join(' · ');
}

/** The flagged cells of a message, the largest growth first. */
export function flaggedCells(message: ICellGrowth | null): ICellSummary[] {
  if (!message) {
    return [];
  }
  return message.cells
    .filter(cell => cell.flagged)
    .sort(
      (a, b) => (b.growth_per_run_bytes ?? 0) - (a.growth_per_run_bytes ?? 0)
    );
}

/**
 * The section's title: `Leak watch · 1 cell grows from run to run`, or one quiet line when
 * nothing is flagged (and why there is nothing to say).
 */
export function titleText(
  message: ICellGrowth | null,
  supported: boolean | null,
  kernelProtocol: string,
  trans: IWording
): string {
  if (supported === false) {
    return trans.__(
      "Leak watch: this kernel's kerasmagic is older (protocol %1) and does not watch cells",
      kernelProtocol
    );
  }
  if (!message) {
    return trans.__('Leak watch: waiting for the kernel');
  }
  const flagged = flaggedCells(message).length;
  if (flagged === 1) {
    return trans.__('Leak watch · 1 cell grows from run to run');
  }
  if (flagged > 1) {
    return trans.__('Leak watch · %1 cells grow from run to run', flagged);
  }
  if (message.watched_cells === 0) {
    return trans.__('Leak watch: no cell has run since %load_ext kerasmagic');
  }
  const oneRun = oneRunCells(message).length;
  if (oneRun > 0) {
    // Not "no cell grows": a run that left 200 MiB and six models behind is named at once.
    return oneRun === 1
      ? trans.__('Leak watch · 1 cell left much behind in one run')
      : trans.__('Leak watch · %1 cells left much behind in one run', oneRun);
  }
  return message.watched_cells === 1
    ? trans.__('Leak watch: no cell grows from run to run (1 cell watched)')
    : trans.__(
        'Leak watch: no cell grows from run to run (%1 cells watched)',
        message.watched_cells
      );
}

/** The open notebooks, the current one first (the cell is most likely there). */
function openNotebooks(tracker: INotebookTracker): NotebookPanel[] {
  const panels: NotebookPanel[] = [];
  if (tracker.currentWidget) {
    panels.push(tracker.currentWidget);
  }
  tracker.forEach(panel => {
    if (panel !== tracker.currentWidget) {
      panels.push(panel);
    }
  });
  return panels;
}

/**
 * Where a cell is: by its id, else (a kernel that sent no id, or a cell since re-created)
 * by the execution count it shows, in the current notebook only: another notebook's
 * `[12]` is another kernel's cell.
 */
function findCell(
  tracker: INotebookTracker,
  cellId: string | null,
  executionCount: number | null = null
): { panel: NotebookPanel; index: number } | null {
  const panels = openNotebooks(tracker);
  for (const panel of cellId === null ? [] : panels) {
    const cells = panel.content.model?.cells;
    for (let index = 0; cells && index < cells.length; index++) {
      if (cells.get(index).id === cellId) {
        return { panel, index };
      }
    }
  }
  const current = tracker.currentWidget;
  const cells = current?.content.model?.cells;
  if (current && cells && executionCount !== null) {
    for (let index = 0; index < cells.length; index++) {
      const model = cells.get(index) as { executionCount?: unknown };
      if (model.executionCount === executionCount) {
        return { panel: current, index };
      }
    }
  }
  return null;
}

/**
 * Scroll the notebook to the cell (by id, else by execution count) and make it the active
 * cell; `activate` brings its notebook to the front. Resolves false when no open notebook
 * has the cell.
 */
export async function showCell(
  tracker: INotebookTracker,
  cellId: string | null,
  activate: (widgetId: string) => void,
  executionCount: number | null = null
): Promise<boolean> {
  const found = findCell(tracker, cellId, executionCount);
  if (!found) {
    return false;
  }
  const { panel, index } = found;
  activate(panel.id);
  const notebook = panel.content;
  notebook.activeCellIndex = index;
  await notebook.scrollToItem(index, 'center');
  return true;
}

export namespace LeakWatchSection {
  export interface IOptions {
    trans: IWording;
    /** Show the cell with this id in its notebook; resolves false when it is not open. */
    showCell?: (cellId: string) => Promise<boolean>;
  }
}

/** The section's DOM: a title line and the flagged cells (none: the title says so). */
export class LeakWatchSection {
  constructor(options: LeakWatchSection.IOptions) {
    this._trans = options.trans;
    this._showCell = options.showCell;
    this.node = el('div', 'jp-KerasMagic-section jp-KerasMagic-leaks');
    this.node.dataset.section = 'leaks';
    this._title = el('h3', 'jp-KerasMagic-sectionTitle', '');
    this.node.appendChild(this._title);
    this._list = el('ul', 'jp-KerasMagic-leakList');
    this._list.setAttribute(
      'aria-label',
      this._trans.__('Cells that grow from run to run')
    );
    this.node.appendChild(this._list);
    this._status = el('div', 'jp-KerasMagic-leakStatus');
    this._status.setAttribute('role', 'status');
    this.node.appendChild(this._status);
    this.render(null, null, '');
  }

  readonly node: HTMLElement;

  /** Draw `message` (null: none yet); a no-op when nothing changed since the last call. */
  render(
    message: ICellGrowth | null,
    supported: boolean | null,
    kernelProtocol: string
  ): void {
    if (
      this._rendered &&
      message === this._message &&
      supported === this._supported
    ) {
      return;
    }
    this._rendered = true;
    this._message = message;
    this._supported = supported;
    const trans = this._trans;
    const flagged = flaggedCells(message);
    this.node.dataset.flagged = String(flagged.length);
    this.node.dataset.watched = String(message?.watched_cells ?? 0);
    this.node.dataset.empty = String(flagged.length === 0);
    this._title.textContent = titleText(
      message,
      supported,
      kernelProtocol,
      trans
    );
    const oneRun = oneRunCells(message);
    this.node.dataset.oneRun = String(oneRun.length);
    this._list.textContent = '';
    this._list.hidden = flagged.length === 0 && oneRun.length === 0;
    for (const cell of flagged) {
      this._list.appendChild(this._item(cell, growthSentence(cell, trans)));
    }
    for (const cell of oneRun) {
      this._list.appendChild(this._item(cell, oneRunSentence(cell)));
    }
  }

  private _item(cell: ICellSummary, sentence: string): HTMLElement {
    const trans = this._trans;
    const item = el('li', 'jp-KerasMagic-leak');
    item.dataset.key = cell.key;
    item.dataset.cellId = cell.cell_id ?? '';
    item.dataset.executionCount = String(cell.execution_count ?? '');
    item.dataset.fix = cell.fix ?? '';
    item.dataset.growthPerRunBytes = String(cell.growth_per_run_bytes ?? '');
    item.dataset.rule = cell.flagged ? 'runs' : 'one_run';
    const cellId = cell.cell_id;
    if (cellId && this._showCell) {
      const button = el('button', 'jp-KerasMagic-leakCell');
      appendWithCode(button, sentence);
      button.type = 'button';
      button.title = trans.__(
        'Show %1 in the notebook',
        cellLabel(cell.execution_count)
      );
      button.addEventListener('click', () => void this._show(cellId, cell));
      item.appendChild(button);
    } else {
      const line = el('div', 'jp-KerasMagic-leakCell');
      appendWithCode(line, sentence);
      item.appendChild(line);
    }
    const details = detailsText(cell.per_run, trans);
    if (details) {
      item.appendChild(
        el('div', 'jp-KerasMagic-leakDetail', trans.__('Per run: %1', details))
      );
    }
    if (cell.first_line) {
      const source = el('code', 'jp-KerasMagic-leakSource', cell.first_line);
      source.title = cell.first_line;
      item.appendChild(source);
    }
    this._appendFix(item, cell);
    return item;
  }

  /**
   * The fix in the kernel's words (what `%tf_mem --cells` prints, proven when it was
   * measured), then the proof it rests on; an older kernel's bare code in this sidebar's.
   */
  private _appendFix(item: HTMLElement, cell: ICellSummary): void {
    const trans = this._trans;
    const words = kernelFixText(cell);
    const fix = words ? null : cell.flagged ? fixParts(cell.fix, trans) : null;
    if (words) {
      const line = el('div', 'jp-KerasMagic-leakFix');
      appendWithCode(line, words);
      item.appendChild(line);
    } else if (fix) {
      const line = el('div', 'jp-KerasMagic-leakFix');
      line.appendChild(document.createTextNode(`${fix.lead} `));
      line.appendChild(el('code', 'jp-KerasMagic-leakFixCode', fix.code));
      line.appendChild(document.createTextNode(fix.rest));
      item.appendChild(line);
    }
    const proof = cell.flagged ? cell.evidence?.proof : cell.one_run?.proof;
    const ranTs = cell.last_ts;
    const evidence = evidenceText(
      proof,
      cellLabel(cell.one_run?.execution_count ?? cell.execution_count),
      typeof ranTs === 'number' ? formatClock(ranTs) : trans.__('time unknown'),
      trans
    );
    if (evidence) {
      const box = el('div', 'jp-KerasMagic-leakEvidence');
      box.title = evidence.title;
      box.dataset.proven = String(!!proof?.named);
      for (const text of evidence.lines) {
        const line = el('div', 'jp-KerasMagic-leakEvidenceLine');
        appendWithCode(line, text);
        box.appendChild(line);
      }
      item.appendChild(box);
    }
  }

  private async _show(cellId: string, cell: ICellSummary): Promise<void> {
    let shown = false;
    try {
      shown = (await this._showCell?.(cellId)) ?? false;
    } catch (reason) {
      console.warn('kerasmagic: cannot show the cell', reason);
    }
    this._status.textContent = shown
      ? ''
      : this._trans.__(
          '%1 is not in an open notebook (deleted, or its notebook is closed).',
          cellLabel(cell.execution_count)
        );
  }

  private _trans: IWording;
  private _showCell?: (cellId: string) => Promise<boolean>;
  private _title: HTMLElement;
  private _list: HTMLElement;
  private _status: HTMLElement;
  private _message: ICellGrowth | null = null;
  private _supported: boolean | null = null;
  private _rendered = false;
}
