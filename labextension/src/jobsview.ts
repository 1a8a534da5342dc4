/**
 * The "Isolated jobs" section: running jobs first, then the recent ones, each with its state
 * in words, where it ran, its elapsed time (ticking while it runs and the panel is shown),
 * its RSS peak and GPU figure.
 */

import {
  countJobs,
  formatElapsed,
  IJobRow,
  jobGpu,
  JobState,
  JobTable,
  mapProgressText,
  spareText,
  sparesLines,
  STATE_MARK,
  whereText
} from './jobs';
import { IWording } from './timeline';
import { el } from './dom';
import { bytesOrDash } from './section';

/** The jobs of the followed kernel. */
export class JobsSection {
  constructor(private readonly _trans: IWording) {
    this.node = el('div', 'jp-KerasMagic-section jp-KerasMagic-jobs');
    this.node.dataset.section = 'jobs';
    this._title = el('h3', 'jp-KerasMagic-sectionTitle', '');
    this.node.appendChild(this._title);
    this._list = el('ul', 'jp-KerasMagic-jobList');
    this._list.setAttribute('aria-label', _trans.__('Isolated jobs'));
    this.node.appendChild(this._list);
    // The pool's warm spares wait with memory of their own: said, with what they hold.
    this._spares = el('ul', 'jp-KerasMagic-spares');
    this._spares.setAttribute('aria-label', _trans.__('Warm spares'));
    this.node.appendChild(this._spares);
  }

  readonly node: HTMLElement;

  /**
   * Draw `table` where it changed since the last call. `supported`: whether the kernel lists
   * jobs (null before hello); `kernelProtocol` is said to a kernel too old to.
   */
  render(
    table: JobTable,
    supported: boolean | null,
    kernelProtocol: string
  ): void {
    if (
      table === this._table &&
      table.version === this._version &&
      supported === this._supported
    ) {
      return;
    }
    this._table = table;
    this._version = table.version;
    this._supported = supported;
    this._render(table, supported, kernelProtocol);
  }

  /** Elapsed times tick once a second, only while a job runs and `shown`. */
  syncTicker(shown: boolean): void {
    const needed = shown && this._elapsedNodes.size > 0;
    if (needed && this._ticker === null) {
      this._ticker = window.setInterval(() => this._tick(), 1000);
    } else if (!needed) {
      this.stopTicker();
    }
  }

  stopTicker(): void {
    if (this._ticker !== null) {
      window.clearInterval(this._ticker);
      this._ticker = null;
    }
  }

  private _render(
    table: JobTable,
    supported: boolean | null,
    kernelProtocol: string
  ): void {
    const trans = this._trans;
    this._list.textContent = '';
    this._spares.textContent = '';
    this._spares.hidden = true;
    this._elapsedNodes.clear();
    const rows = table.rows(Date.now());
    const counts = countJobs(rows);
    const data = this.node.dataset;
    data.running = String(counts.running);
    data.done = String(counts.done);
    data.failed = String(counts.failed);
    data.total = String(rows.length);
    data.empty = String(rows.length === 0);
    if (rows.length === 0) {
      this._title.textContent =
        supported === false
          ? trans.__(
              "Isolated jobs: this kernel's kerasmagic is older (protocol %1) and does not list them",
              kernelProtocol
            )
          : trans.__('Isolated jobs: none in this kernel yet');
      return;
    }
    const parts = [trans.__('Isolated jobs')];
    if (counts.running) {
      parts.push(trans.__('%1 running', counts.running));
    }
    if (counts.done) {
      parts.push(trans.__('%1 done', counts.done));
    }
    if (counts.failed) {
      parts.push(trans.__('%1 failed', counts.failed));
    }
    if (counts.other) {
      parts.push(trans.__('%1 stopped', counts.other));
    }
    const map = mapProgressText(rows, trans);
    if (map) {
      parts.push(map);
    }
    this._title.textContent = parts.join(' · ');
    for (const row of rows) {
      this._list.appendChild(this._item(row));
    }
    const spares = sparesLines(rows, trans);
    spares.forEach(line =>
      this._spares.appendChild(el('li', 'jp-KerasMagic-spare', line))
    );
    this._spares.hidden = spares.length === 0;
  }

  private _stateText(state: JobState, status: string): string {
    const trans = this._trans;
    switch (state) {
      case 'running':
        return trans.__('running');
      case 'done':
        return trans.__('done');
      case 'failed':
        return status === 'crash'
          ? trans.__('failed (worker died)')
          : trans.__('failed');
      case 'timeout':
        return trans.__('timed out');
      case 'cancelled':
        return trans.__('cancelled');
      case 'interrupted':
        return trans.__('interrupted');
      default:
        return status;
    }
  }

  private _item(row: IJobRow): HTMLElement {
    const job = row.job;
    const item = el('li', 'jp-KerasMagic-job');
    item.dataset.jobId = job.job_id;
    item.dataset.state = row.state;
    item.dataset.status = job.status;
    const label = el('div', 'jp-KerasMagic-jobLabel', job.label);
    label.title = job.label;
    item.appendChild(label);
    item.appendChild(this._meta(row));
    if (job.error) {
      const error = el('div', 'jp-KerasMagic-jobError', job.error);
      error.title = job.error;
      item.appendChild(error);
    }
    return item;
  }

  /** State, place, elapsed time, RSS peak and GPU of one job. */
  private _meta(row: IJobRow): HTMLElement {
    const trans = this._trans;
    const job = row.job;
    // The state as a word (a screen reader reads it; the mark and the edge are colour cues).
    const meta = el('div', 'jp-KerasMagic-jobMeta');
    const badge = el('span', 'jp-KerasMagic-jobState');
    const mark = el('span', 'jp-KerasMagic-jobMark', STATE_MARK[row.state]);
    mark.setAttribute('aria-hidden', 'true');
    badge.appendChild(mark);
    badge.appendChild(
      document.createTextNode(this._stateText(row.state, job.status))
    );
    meta.appendChild(badge);
    const where = whereText(
      job,
      trans.__('this machine'),
      trans.__('Ray cluster')
    );
    meta.appendChild(el('span', 'jp-KerasMagic-jobWhere', where));
    const elapsed = el(
      'span',
      'jp-KerasMagic-jobElapsed',
      formatElapsed(row.elapsedS, row.running)
    );
    elapsed.title = row.running
      ? trans.__('running for')
      : trans.__('wall time');
    meta.appendChild(elapsed);
    if (row.running) {
      this._elapsedNodes.set(job.job_id, elapsed);
    }
    meta.appendChild(
      el(
        'span',
        'jp-KerasMagic-jobRss',
        trans.__('RSS peak %1', bytesOrDash(job.rss_peak_bytes))
      )
    );
    // Text only: el() sets textContent, the title is an attribute.
    const figure = jobGpu(job, trans);
    const gpu = el('span', 'jp-KerasMagic-jobGpu', figure.text);
    gpu.title = figure.title;
    meta.appendChild(gpu);
    const spare = spareText(job, trans);
    if (spare) {
      meta.appendChild(el('span', 'jp-KerasMagic-jobSpare', spare));
    }
    return meta;
  }

  private _tick(): void {
    const now = Date.now();
    this._elapsedNodes.forEach((node, jobId) => {
      const seconds = this._table?.elapsed(jobId, now) ?? null;
      if (seconds !== null) {
        node.textContent = formatElapsed(seconds, true);
      }
    });
  }

  private _title: HTMLElement;
  private _list: HTMLElement;
  private _spares: HTMLElement;
  private _table: JobTable | null = null;
  private _version = -1;
  private _supported: boolean | null = null;
  private _elapsedNodes = new Map<string, HTMLElement>();
  private _ticker: number | null = null;
}
