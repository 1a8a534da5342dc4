/**
 * The "Clear session" section: the button, then the result as a few readable lines (what
 * was freed, what was dropped, what is still held) with the full report a click away in
 * a disclosure. `readCleanReport` reads the kernel's `CleanReport.to_dict()` defensively
 * (kernel data: any field may be missing) and has no DOM, so jest tests it.
 */

import { formatSeconds } from './format';
import { signedBytes } from './cells';
import { el } from './dom';

/** The part of a `TranslationBundle` the section needs (jest passes a plain one). */
export interface IWording {
  __(msgid: string, ...args: any[]): string;
}

export interface ICleanStep {
  name: string;
  /** RSS change of the step (negative: freed), null where the report has none. */
  rssChange: number | null;
  detail: string;
  skipped: string | null;
}

/** What the compact summary shows, read from `CleanReport.to_dict()`. */
export interface ICleanSummary {
  seconds: number | null;
  /** RSS and TF-in-use changes (negative: freed); TF null when TF was not involved. */
  rssChange: number | null;
  tfChange: number | null;
  /** This process's GPU memory per NVML; null where the kernel had no GPU view. */
  gpuChange: number | null;
  modelsFreed: number;
  modelsTracked: number;
  purged: number;
  dropped: string[];
  stillHeld: string[];
  steps: ICleanStep[];
}

const REFERENCE_STEPS = ['delete named variables', 'drop hidden holders'];

const num = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) ? value : null;

const strings = (value: unknown): string[] =>
  Array.isArray(value)
    ? value.filter((item): item is string => typeof item === 'string')
    : [];

/**
 * The summary of a clean, or null when `report` is not a CleanReport dict. `dropped` is
 * what the reference steps list (as `CleanReport.dropped` gives it in Python).
 *
 * Example: `readCleanReport({rss_freed_bytes: 1024, still_held: ['x']})?.rssChange` → `-1024`.
 */
export function readCleanReport(report: unknown): ICleanSummary | null {
  if (typeof report !== 'object' || report === null || Array.isArray(report)) {
    return null;
  }
  const r = report as { [key: string]: unknown };
  const rssFreed = num(r.rss_freed_bytes);
  const tfBefore = num(r.tf_in_use_before_bytes);
  const tfAfter = num(r.tf_in_use_after_bytes);
  const tfFreed = num(r.tf_freed_bytes);
  const steps: ICleanStep[] = [];
  const dropped: string[] = [];
  for (const step of Array.isArray(r.steps) ? r.steps : []) {
    if (typeof step !== 'object' || step === null) {
      continue;
    }
    const s = step as { [key: string]: unknown };
    const name = typeof s.name === 'string' ? s.name : '?';
    const freed = num(s.rss_freed_bytes);
    steps.push({
      name,
      rssChange: freed === null ? null : -freed,
      detail: typeof s.detail === 'string' ? s.detail : '',
      skipped: typeof s.skipped === 'string' ? s.skipped : null
    });
    if (REFERENCE_STEPS.includes(name)) {
      dropped.push(...strings(s.items));
    }
  }
  const gpuFreed = num(r.gpu_freed_bytes);
  const registry = r.registry as { [key: string]: unknown } | null | undefined;
  return {
    seconds: num(r.seconds),
    rssChange: rssFreed === null ? null : -rssFreed,
    tfChange: tfFreed === null || (!tfBefore && !tfAfter) ? null : -tfFreed,
    gpuChange: gpuFreed === null ? null : -gpuFreed,
    modelsFreed: num(r.models_freed) ?? 0,
    modelsTracked: num(r.models_tracked) ?? 0,
    purged: num(registry?.purged) ?? 0,
    dropped,
    stillHeld: strings(r.still_held),
    steps
  };
}

/** `a, b, c +2 more`: the first `count` items, then how many are left out. */
export function firstItems(
  items: string[],
  count: number,
  trans: IWording
): string {
  const shown = items.slice(0, count).join(', ');
  return items.length > count
    ? `${shown} ${trans.__('+%1 more', items.length - count)}`
    : shown;
}

/** The Clear session result as the panel shows it, kept per kernel by the connection. */
export interface IClearState {
  status: 'pending' | 'ok' | 'failed';
  text: string;
  error?: string;
  report?: { [key: string]: unknown } | null;
}

export namespace ClearSection {
  export interface IOptions {
    trans: IWording;
    onClear: () => void;
  }
}

/** The button and its last result. */
export class ClearSection {
  constructor(options: ClearSection.IOptions) {
    const trans = (this._trans = options.trans);
    this.node = el('div', 'jp-KerasMagic-section jp-KerasMagic-clearing');
    this.node.dataset.section = 'actions';
    this.button = el(
      'button',
      'jp-mod-styled jp-mod-accept jp-KerasMagic-clear',
      trans.__('Clear session')
    );
    this.button.title = trans.__(
      'Run kerasmagic.clear_tf() in this kernel (after the running cell): clear the Keras session, purge dead graphs, collect garbage'
    );
    this.button.addEventListener('click', () => options.onClear());
    this.node.appendChild(this.button);
    this._report = el('div', 'jp-KerasMagic-report');
    this._report.setAttribute('role', 'status');
    this.node.appendChild(this._report);
  }

  readonly node: HTMLElement;
  readonly button: HTMLButtonElement;

  /**
   * Draw the last clear's `state`; `runningCell` (the running cell's number, `true` if its
   * number is unknown, `false` when none runs) says what a pending clear waits for.
   */
  render(
    state: IClearState | null,
    runningCell: number | boolean = false
  ): void {
    const waitsFor = state?.status === 'pending' ? runningCell : false;
    if (state === this._state && waitsFor === this._waitsFor) {
      return; // the details stay open across samples
    }
    this._state = state;
    this._waitsFor = waitsFor;
    const trans = this._trans;
    const report = this._report;
    report.textContent = '';
    report.hidden = state === null;
    if (state === null) {
      delete report.dataset.status;
      return;
    }
    report.dataset.status = state.status;
    if (state.status === 'pending') {
      report.appendChild(
        el(
          'div',
          'jp-KerasMagic-cleanHead',
          waitsFor === false
            ? trans.__('Clearing…')
            : typeof waitsFor === 'number'
              ? trans.__('Queued: clears when cell [%1] ends…', waitsFor)
              : trans.__('Queued: clears when the running cell ends…')
        )
      );
      return;
    }
    if (state.error !== undefined || state.status === 'failed') {
      report.appendChild(
        el(
          'div',
          'jp-KerasMagic-cleanHead',
          state.error !== undefined
            ? trans.__('Clear failed: %1', state.error)
            : state.text
        )
      );
      return;
    }
    const summary = readCleanReport(state.report);
    if (!summary) {
      // A kernel that sent no dict: its text is all there is.
      report.appendChild(el('div', 'jp-KerasMagic-cleanText', state.text));
      return;
    }
    this._renderSummary(summary);
  }

  private _renderSummary(summary: ICleanSummary): void {
    const trans = this._trans;
    const report = this._report;
    report.appendChild(
      el(
        'div',
        'jp-KerasMagic-cleanHead',
        summary.seconds === null
          ? trans.__('Cleaned')
          : trans.__('Cleaned in %1', formatSeconds(summary.seconds))
      )
    );
    this._renderFigures(summary);
    this._renderItems(summary);
    this._renderDetails(summary);
  }

  /** What changed: RSS, TF in use, GPU, models freed, graphs purged. */
  private _renderFigures(summary: ICleanSummary): void {
    const trans = this._trans;
    const figures = el('div', 'jp-KerasMagic-cleanFigures');
    const figure = (name: string, value: string) => {
      const node = el('span', 'jp-KerasMagic-cleanFigure');
      node.appendChild(el('span', 'jp-KerasMagic-cleanName', name));
      node.appendChild(el('span', 'jp-KerasMagic-cleanValue', value));
      figures.appendChild(node);
    };
    if (summary.rssChange !== null) {
      figure(trans.__('RSS'), signedBytes(summary.rssChange));
    }
    if (summary.tfChange !== null) {
      figure(trans.__('TF in use'), signedBytes(summary.tfChange));
    }
    if (summary.gpuChange !== null) {
      figure(trans.__('GPU'), signedBytes(summary.gpuChange));
    }
    if (summary.modelsTracked) {
      figure(
        trans.__('models freed'),
        trans.__('%1 of %2', summary.modelsFreed, summary.modelsTracked)
      );
    }
    if (summary.purged) {
      figure(trans.__('graphs purged'), String(summary.purged));
    }
    this._report.appendChild(figures);
  }

  /** What was dropped, and what is still held (one a line: they are sentences). */
  private _renderItems(summary: ICleanSummary): void {
    const trans = this._trans;
    const report = this._report;
    const line = (label: string, items: string[], name: string) => {
      const node = el('div', 'jp-KerasMagic-cleanLine');
      node.dataset.part = name;
      node.appendChild(el('span', 'jp-KerasMagic-cleanName', label));
      node.appendChild(
        document.createTextNode(
          items.length ? firstItems(items, 3, trans) : trans.__('nothing')
        )
      );
      report.appendChild(node);
    };
    line(
      trans.__('Dropped (%1)', summary.dropped.length),
      summary.dropped,
      'dropped'
    );
    // Held items are sentences ("Sequential 'x' (4 MiB) held by history.model"): one a line.
    const held = el('div', 'jp-KerasMagic-cleanLine');
    held.dataset.part = 'held';
    held.appendChild(
      el(
        'span',
        'jp-KerasMagic-cleanName',
        trans.__('Still held (%1)', summary.stillHeld.length)
      )
    );
    if (!summary.stillHeld.length) {
      held.appendChild(document.createTextNode(trans.__('nothing')));
    }
    report.appendChild(held);
    if (summary.stillHeld.length) {
      const list = el('ul', 'jp-KerasMagic-cleanItems');
      summary.stillHeld
        .slice(0, 3)
        .forEach(item => list.appendChild(el('li', '', item)));
      if (summary.stillHeld.length > 3) {
        list.appendChild(
          el(
            'li',
            'jp-KerasMagic-cleanMore',
            trans.__(
              '+%1 more in the full report',
              summary.stillHeld.length - 3
            )
          )
        );
      }
      report.appendChild(list);
    }
  }

  /** The full report: every step, every dropped and held item. */
  private _renderDetails(summary: ICleanSummary): void {
    const trans = this._trans;
    const details = el('details', 'jp-KerasMagic-cleanDetails');
    details.appendChild(el('summary', '', trans.__('Full report')));
    const steps = el('ul', 'jp-KerasMagic-cleanSteps');
    for (const step of summary.steps) {
      const item = el('li', 'jp-KerasMagic-cleanStep');
      item.appendChild(el('span', 'jp-KerasMagic-cleanName', step.name));
      item.appendChild(
        el(
          'span',
          'jp-KerasMagic-cleanValue',
          step.skipped
            ? trans.__('skipped')
            : step.rssChange === null
              ? '–'
              : signedBytes(step.rssChange)
        )
      );
      const detail = step.skipped ?? step.detail;
      if (detail) {
        item.appendChild(el('span', 'jp-KerasMagic-cleanDetail', detail));
      }
      steps.appendChild(item);
    }
    details.appendChild(steps);
    for (const [title, items] of [
      [trans.__('Dropped'), summary.dropped],
      [trans.__('Still held'), summary.stillHeld]
    ] as [string, string[]][]) {
      if (!items.length) {
        continue;
      }
      details.appendChild(el('div', 'jp-KerasMagic-cleanName', title));
      const list = el('ul', 'jp-KerasMagic-cleanItems');
      items.forEach(item => list.appendChild(el('li', '', item)));
      details.appendChild(list);
    }
    this._report.appendChild(details);
  }

  private _trans: IWording;
  private _report: HTMLElement;
  private _state: IClearState | null = null;
  private _waitsFor: number | boolean = false;
}
