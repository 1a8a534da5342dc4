/**
 * A kernel that died: said above everything else, whatever the state of the next kernel
 * (when, in which cell, why), with the dead kernel's timeline, greyed, until the user
 * dismisses it.
 */

import { el } from './dom';
import { SERIES } from './series';
import { IDeath } from './store';
import {
  formatClock,
  IChartGeometry,
  ISeriesSpec,
  IWording,
  NORMAL_GEOMETRY,
  Timeline
} from './timeline';

export namespace DeathSection {
  export interface IOptions {
    trans: IWording;
    /** The user has read it. */
    onDismiss: () => void;
    /** The chart's series (the live chart's). */
    series: () => ISeriesSpec[];
  }
}

/**
 * The notice's heading: `The kernel died at 14:02:11 while cell [12] ran`, in the browser's
 * clock, until the post-mortem's sentence tells the watcher's time (in the kernel's clock, with
 * its zone): then without a clock, so that zones that differ never give one death two times.
 */
export function deathHeading(death: IDeath, trans: IWording): string {
  const when =
    death.diedTs === null || death.timeInText
      ? trans.__('The kernel died')
      : trans.__('The kernel died at %1', formatClock(death.diedTs));
  return death.executionCount === null
    ? when
    : trans.__('%1 while cell [%2] ran', when, death.executionCount);
}

/** The death notice with its timeline. */
export class DeathSection {
  constructor(private readonly _options: DeathSection.IOptions) {
    const trans = _options.trans;
    this.node = el('div', 'jp-KerasMagic-death');
    this.node.setAttribute('role', 'alert');
    this._title = el('p', 'jp-KerasMagic-deathTitle');
    this._text = el('p', 'jp-KerasMagic-deathText');
    this._dismiss = el(
      'button',
      'jp-KerasMagic-deathDismiss',
      trans.__('Dismiss')
    );
    this._dismiss.addEventListener('click', () => _options.onDismiss());
    this.node.append(this._title, this._text, this._dismiss);
    this.node.hidden = true;
  }

  readonly node: HTMLElement;

  /** The dead kernel's chart, while there is one to show. */
  get timeline(): Timeline | null {
    return this._timeline;
  }

  /** The chart's rows and text size: the live chart's (classroom mode, issue 31 item 4). */
  set geometry(geometry: IChartGeometry) {
    this._geometry = geometry;
    if (this._timeline) {
      this._timeline.geometry = geometry;
    }
  }

  dispose(): void {
    this._timeline?.dispose();
  }

  /** `death` (null: none); `intervalS` is the sampling interval the chart reads points at. */
  render(death: IDeath | null, intervalS: number): void {
    const trans = this._options.trans;
    const record = death?.record ?? null;
    if (record === null && this._timeline) {
      this._timeline.node.remove();
      this._timeline.dispose();
      this._timeline = null;
    }
    this.node.hidden = death === null;
    if (death === null) {
      return;
    }
    this._title.textContent = deathHeading(death, trans);
    this._text.textContent =
      death.text ??
      trans.__(
        'The server found it dead: this was not a restart. Load kerasmagic in the next kernel (%load_ext kerasmagic): it says why where it can tell (out of memory, a crash).'
      );
    if (record !== null) {
      if (!this._timeline) {
        // Made only while there is a death to show: the live chart stays the panel's only
        // other chart (and the first one in it, as the browser tests expect).
        this._timeline = new Timeline({ trans, onRun: () => undefined });
        this._timeline.geometry = this._geometry;
        this._timeline.node.classList.add('jp-mod-dead');
        this.node.insertBefore(this._timeline.node, this._dismiss);
      }
      const points = record.history.points(SERIES.rss);
      const last = points[points.length - 1];
      // Its whole life, from its first sample or cell run to its death (issue 31, item 4: the
      // chart's "All" without a start showed only the last minute, and none of its runs).
      const since = Math.min(
        points[0]?.ts ?? Infinity,
        record.cellRuns[0]?.startedTs ?? Infinity
      );
      this._timeline.render({
        series: this._options.series(),
        points: key => record.history.points(key),
        runs: record.cellRuns,
        marks: record.marks,
        now: Math.max(last?.ts ?? 0, death.diedTs ?? 0),
        intervalS,
        since: Number.isFinite(since) ? since : null
      });
    }
  }

  private _title: HTMLElement;
  private _text: HTMLElement;
  private _dismiss: HTMLElement;
  private _timeline: Timeline | null = null;
  private _geometry: IChartGeometry = NORMAL_GEOMETRY;
}
