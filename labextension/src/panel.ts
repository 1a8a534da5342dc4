/**
 * The sidebar widget: a header (the kernel, its restart), a death notice, the empty state's
 * notice, then the body: headline numbers, the timeline, Clear session, and the sections read
 * on the kernel's main thread (each says which cell it is as of). Each part is its own
 * section (headlines.ts, frameworks.ts, cells.ts, jobsview.ts, death.ts, notice.ts); this
 * lays them out and hands each what it draws. Every kernel-supplied string is set with
 * textContent: model names, details and report text are data, never markup.
 */

import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { ConnectionState, LiveConnection } from './connection';
import { LeakWatchSection } from './cells';
import { ClearSection } from './clearing';
import { DeathSection } from './death';
import { formatSeconds } from './format';
import { GpuSection, KerasSection, TfSection } from './frameworks';
import { allocatorInUse } from './gpu';
import { HeadlinesSection } from './headlines';
import { JobsSection } from './jobsview';
import { LimitSection } from './limit';
import { NoticeSection } from './notice';
import { ISample, isNumber } from './protocol';
import { isGpuDevice, SERIES, sumDevices } from './series';
import {
  classroomGeometry,
  formatClock,
  ICellRunLike,
  FIT,
  ISeriesSpec,
  NORMAL_GEOMETRY,
  Timeline,
  WINDOW_CHOICES
} from './timeline';
import { el } from './dom';
import { chartSeries } from './series';
import { IStoreChange, KernelStore, StorePart } from './store';
import { initialWindow, savedWindow, saveWindow } from './runswindow';

export namespace KerasMagicPanel {
  export interface IOptions {
    connection: LiveConnection;
    translator?: ITranslator;
    /** Show the notebook cell with this id (the leak watch's links). */
    showCell?: (cellId: string) => Promise<boolean>;
    /** Show a cell run of the timeline: by its cell id, else by its execution count. */
    showRun?: (run: ICellRunLike) => Promise<boolean>;
    /** Load kerasmagic by itself in new kernels of this notebook path, or stop (settings). */
    saveAutoload?: (path: string, on: boolean) => void;
    /** The user switched classroom mode: remember it (the settings' `classroom`). */
    saveClassroom?: (on: boolean) => void;
  }
}

export class KerasMagicPanel extends Widget {
  constructor(options: KerasMagicPanel.IOptions) {
    super();
    this.connection = options.connection;
    this._trans = (options.translator ?? nullTranslator).load('kerasmagic');
    const trans = this._trans;
    this.addClass('jp-KerasMagic-panel');
    this.node.tabIndex = -1;
    this._showRunCallback = options.showRun;
    this._saveAutoload = options.saveAutoload;
    this.node.appendChild(this._header(options));

    this._death = new DeathSection({
      trans,
      onDismiss: () => this.connection.dismissDeath(),
      series: () => this._series(null)
    });
    this.node.appendChild(this._death.node);
    this._notice = new NoticeSection({
      trans,
      load: () => this.connection.loadExtension(),
      saveAutoload: options.saveAutoload,
      onLoadError: () => this._update()
    });
    this.node.appendChild(this._notice.node);

    this._body = el('div', 'jp-KerasMagic-body');
    this._headlines = new HeadlinesSection(trans, this.node);
    // Under the headlines: host memory free says nothing of a kernel near its own limit.
    this._limit = new LimitSection({ trans });
    this._timeline = new Timeline({
      trans,
      onRun: run => void this._showRun(run),
      onWindowChange: minutes => {
        this._pickedWindow = minutes;
        saveWindow(this._storage, minutes);
      }
    });
    this._pickedWindow = savedWindow(this._storage, WINDOW_CHOICES);
    this._applyWindow();
    this._runStatus = el('div', 'jp-KerasMagic-runStatus');
    this._runStatus.setAttribute('role', 'status');
    // Right below the chart: the button stays where it is however long the lists below grow,
    // and its report shows without scrolling.
    this._clearing = new ClearSection({
      trans,
      onClear: () => void this._onClear()
    });
    this._event = el('div', 'jp-KerasMagic-event');
    this._clearing.node.appendChild(this._event);
    this._tf = new TfSection(trans);
    this._gpu = new GpuSection(trans);
    this._leaks = new LeakWatchSection({ trans, showCell: options.showCell });
    this._keras = new KerasSection(trans);
    this._jobs = new JobsSection(trans);
    this._footer = el('div', 'jp-KerasMagic-footer');
    this._body.append(
      this._headlines.node,
      this._limit.node,
      this._timeline.node,
      this._runStatus,
      this._clearing.node,
      this._tf.node,
      this._gpu.node,
      this._leaks.node,
      this._keras.node,
      this._jobs.node,
      this._footer
    );
    this.node.appendChild(this._body);

    this.connection.stateChanged.connect(this._update, this);
    this.connection.store.changed.connect(this._onStoreChange, this);
    this.connection.runningCellChanged.connect(this._onRunningCell, this);
    // The classroom chart follows the panel's height (the sidebar's, resized with the window).
    this._resize = new ResizeObserver(() => this._fitChart());
    this._resize.observe(this.node);
    this._update();
  }

  readonly connection: LiveConnection;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._jobs.stopTicker();
    this._resize.disconnect();
    this._timeline.dispose();
    this._death.dispose();
    this.connection.stateChanged.disconnect(this._update, this);
    this.connection.store.changed.disconnect(this._onStoreChange, this);
    this.connection.runningCellChanged.disconnect(this._onRunningCell, this);
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    this.connection.setVisible(true);
    this._update();
  }

  protected onAfterHide(msg: Message): void {
    this.connection.setVisible(false);
    this._jobs.stopTicker();
  }

  /**
   * The window the user set in the settings before the switch remembered picks in the browser
   * (the old `timeline_window`); null where they set none. Used only where the browser has no pick.
   */
  set settingsWindow(minutes: number | null) {
    this._settingsWindow = minutes;
    this._applyWindow();
  }

  /** The user's pick, else "Cell runs" in classroom mode and "All" otherwise (runswindow.ts). */
  private _applyWindow(): void {
    this._timeline.windowMinutes = initialWindow(
      this._pickedWindow ?? this._settingsWindow,
      this._classroom,
      FIT
    );
  }

  /** Classroom mode: large type, high-contrast series, a chart that grows with the panel. */
  get classroom(): boolean {
    return this._classroom;
  }

  set classroom(on: boolean) {
    this._classroom = on;
    this.node.classList.toggle('jp-mod-classroom', on);
    this.node.dataset.classroom = String(on);
    this._classroomButton.setAttribute('aria-pressed', String(on));
    this._applyWindow();
    this._fitChart();
  }

  /**
   * Take the focus (the palette's "Show the Keras memory sidebar", the shortcut): now, and
   * again once the palette has given it back to the notebook it came from. The palette
   * restores the focus after the command ran, in the next animation frame (issue 31, item 5).
   */
  takeFocus(): void {
    this.node.focus();
    requestAnimationFrame(() =>
      requestAnimationFrame(() => {
        if (!this.node.contains(document.activeElement)) {
          this.node.focus();
        }
      })
    );
  }

  /** The chart's rows for the mode and, in classroom mode, the panel's height. */
  private _fitChart(): void {
    const geometry = this._classroom
      ? classroomGeometry(this.node.clientHeight)
      : NORMAL_GEOMETRY;
    this._timeline.geometry = geometry;
    this._death.geometry = geometry;
  }

  /** The title, the classroom toggle, the kernel's name and pid, and its restart. */
  private _header(options: KerasMagicPanel.IOptions): HTMLElement {
    const trans = this._trans;
    const header = el('div', 'jp-KerasMagic-header');
    const titleRow = el('div', 'jp-KerasMagic-titleRow');
    titleRow.appendChild(
      el('h2', 'jp-KerasMagic-title', trans.__('Keras memory'))
    );
    // A projector's sidebar: large type, high-contrast lines, a chart as tall as the panel
    // allows. A toggle (aria-pressed), remembered in the settings.
    const button = el(
      'button',
      'jp-KerasMagic-classroomToggle',
      trans.__('Classroom')
    );
    button.type = 'button';
    button.title = trans.__(
      'Classroom mode: large type, high-contrast lines and a taller chart, for a projector'
    );
    button.setAttribute('aria-pressed', 'false');
    button.addEventListener('click', () => {
      this.classroom = !this._classroom;
      options.saveClassroom?.(this._classroom);
    });
    this._classroomButton = button;
    titleRow.appendChild(button);
    header.appendChild(titleRow);
    this._kernelLabel = el('div', 'jp-KerasMagic-kernel');
    header.appendChild(this._kernelLabel);
    this._restarted = el('div', 'jp-KerasMagic-restarted');
    header.appendChild(this._restarted);
    return header;
  }

  // ---- rendering -------------------------------------------------------------------------

  /** Everything again: the followed kernel or its state changed, or the panel was shown. */
  private _update(): void {
    if (!this.isVisible && this.isAttached) {
      return; // drawn on show; hidden panels cost nothing
    }
    const connection = this.connection;
    const state = connection.state;
    this.node.dataset.state = state.kind;
    this._drawNotice();
    const connected = state.kind === 'connected';
    // Back on a kernel it has seen: its last view at once, "updating…", not a blank panel.
    const updating = !connected && connection.lastView !== null;
    this.node.dataset.updating = String(updating);
    this._body.hidden = !connected && !updating;
    (Object.keys(this._drawers) as StorePart[]).forEach(part =>
      this._draw(part)
    );
    if (!connected && !updating) {
      this._jobs.stopTicker();
    }
  }

  /**
   * What draws each part of the followed kernel's store entry: a part's change redraws its
   * sections alone (a sample does not rebuild the jobs list or the Keras section).
   */
  private _drawers: { [part in StorePart]: (() => void)[] } = {
    hello: [() => this._drawHeader()],
    samples: [
      () => this._headlines.render(this._sample(), this.connection.host),
      () => this._limit.render(this._sample()),
      () => this._gpu.render(this._sample()),
      () => this._drawFooter(),
      () => this._tf.render(this._sample(), this.connection.latestFacts),
      () => this._drawTimeline(),
      () => this._stampFigures()
    ],
    facts: [
      () => this._tf.render(this._sample(), this.connection.latestFacts),
      () => this._drawKeras()
    ],
    runs: [() => this._drawTimeline()],
    clear: [() => this._drawClearing()],
    jobs: [() => this._drawJobs()],
    cellGrowth: [
      () =>
        this._leaks.render(
          this.connection.cellGrowth,
          this.connection.cellsSupported,
          this._kernelProtocol()
        )
    ],
    death: [() => this._drawDeath()]
  };

  private _draw(part: StorePart): void {
    this._drawers[part].forEach(draw => draw());
  }

  /** A part of some kernel's entry changed: redrawn where it is the followed kernel's. */
  private _onStoreChange(store: KernelStore, change: IStoreChange): void {
    if (
      change.kernelId !== this.connection.kernelId ||
      (!this.isVisible && this.isAttached)
    ) {
      return; // another kernel's, or hidden: drawn when followed or shown
    }
    this._draw(change.part);
  }

  /** A cell started or ended: what says "as of the running cell" or waits for it. */
  private _onRunningCell(): void {
    if (!this.isVisible && this.isAttached) {
      return;
    }
    this._drawNotice();
    this._drawKeras();
    this._drawClearing();
  }

  /** The followed kernel's latest sample, shown only with its body (connected or updating). */
  private _sample(): ISample | null {
    return this.connection.latestSample;
  }

  private _drawNotice(): void {
    const connection = this.connection;
    this._notice.render(connection.state, {
      showsLastView: connection.lastView !== null,
      runningCell: connection.runningCell,
      notebookPath: connection.notebookPath,
      autoloads: connection.autoloads
    });
  }

  private _drawKeras(): void {
    const facts = this.connection.latestFacts;
    this._keras.render(facts, this.connection.runningCell);
    if (facts) {
      this.node.dataset.executionCount = String(facts.execution_count);
    } else {
      delete this.node.dataset.executionCount;
    }
  }

  private _drawJobs(): void {
    const connection = this.connection;
    this._jobs.render(
      connection.jobs,
      connection.jobsSupported,
      this._kernelProtocol()
    );
    this._jobs.syncTicker(
      this.isVisible && connection.state.kind === 'connected'
    );
  }

  /**
   * The sample's figures as the browser tests and bench_sidebar.py read them (data
   * attributes), none for a kernel with no sample yet. Stamped last, once the timeline and
   * every section show this sample (sample-to-screen latency), not when the headline does.
   */
  private _stampFigures(): void {
    const sample = this._sample();
    const data = this.node.dataset;
    if (sample === null) {
      for (const key of ['rssBytes', 'tfInUseBytes', 'gpuAllocInUseBytes']) {
        delete data[key];
      }
      for (const key of ['sampleTs', 'sampleSeq', 'renderedTs']) {
        delete data[key];
      }
      return;
    }
    data.rssBytes = isNumber(sample.rss_bytes) ? String(sample.rss_bytes) : '';
    const tfInUse = sumDevices(
      sample.tf,
      'in_use_bytes',
      name => !isGpuDevice(name)
    );
    data.tfInUseBytes = tfInUse === null ? '' : String(tfInUse);
    const gpuInUse = allocatorInUse(sample);
    data.gpuAllocInUseBytes = gpuInUse === null ? '' : String(gpuInUse);
    data.sampleTs = String(sample.ts);
    data.sampleSeq = String(sample.seq);
    data.renderedTs = String(Date.now() / 1000);
  }

  /**
   * The kernel's name and pid (its last view's, "updating…", while it answers) and its
   * restart (the store keeps it for a reload).
   */
  private _drawHeader(): void {
    const trans = this._trans;
    this._kernelLabel.textContent = this._kernelText(this.connection.state);
    const restartedAt = this.connection.restartedAt;
    this._restarted.textContent =
      restartedAt === null
        ? ''
        : trans.__('restarted %1', formatClock(restartedAt / 1000));
    this._restarted.hidden = restartedAt === null;
    this.node.dataset.restartedAt =
      restartedAt === null ? '' : String(restartedAt / 1000);
  }

  /** The followed kernel's last Clear session report and event. */
  private _drawClearing(): void {
    const trans = this._trans;
    const connection = this.connection;
    this._clearing.render(connection.clearReport, connection.runningCell);
    this._clearing.button.disabled =
      connection.state.kind !== 'connected' ||
      connection.clearReport?.status === 'pending';
    const event = connection.lastEvent;
    this._event.textContent = event
      ? trans.__(
          'Last event: %1 at %2',
          event.text ?? event.kind,
          formatClock(event.ts)
        )
      : '';
    this._event.hidden = !event;
  }

  /** The followed kernel's predecessor died: when, in which cell, why, and its timeline. */
  private _drawDeath(): void {
    const death = this.connection.death;
    this._death.render(death, this.connection.intervalS);
    this.node.dataset.death =
      death?.diedTs?.toString() ?? (death ? 'unknown' : '');
  }

  private _kernelText(state: ConnectionState): string {
    const name = this.connection.kernelName;
    if (state.kind === 'connected') {
      return this._trans.__(
        '%1 · pid %2 · kerasmagic %3',
        name,
        state.hello.pid,
        state.hello.package_version
      );
    }
    const last = this.connection.lastView;
    if (last) {
      return this._trans.__(
        '%1 · pid %2 · kerasmagic %3 · updating…',
        name,
        last.pid,
        last.package_version
      );
    }
    return name;
  }

  /** The followed kernel's series, cell runs and marks; where its history starts. */
  private _drawTimeline(): void {
    const sample = this._sample();
    const history = this.connection.history;
    const runs = this.connection.cellRuns;
    const marks = this.connection.marks;
    const rss = history.points(SERIES.rss);
    const now = Math.max(
      sample?.ts ?? 0,
      rss[rss.length - 1]?.ts ?? 0,
      ...runs.slice(-1).map(r => r.endedTs ?? r.startedTs),
      ...marks.slice(-1).map(m => m.ts)
    );
    const since = Math.min(
      rss[0]?.ts ?? Infinity,
      runs[0]?.startedTs ?? Infinity
    );
    this.node.dataset.historySince = rss[0] ? String(rss[0].ts) : '';
    this._timeline.render({
      series: this._series(sample),
      points: key => history.points(key),
      runs,
      marks,
      now,
      intervalS: this.connection.intervalS,
      since: Number.isFinite(since) ? since : null
    });
  }

  /** The chart's series (series.ts); the GPU allocators' line is named after `sample`'s frameworks. */
  private _series(sample: ISample | null): ISeriesSpec[] {
    return chartSeries(this._trans, sample);
  }

  private _drawFooter(): void {
    const sample = this._sample();
    if (sample === null) {
      this._footer.textContent = '';
      return;
    }
    this._footer.textContent = this._trans.__(
      'Sample %1 · every %2 · cost %3',
      sample.seq,
      formatSeconds(this.connection.intervalS),
      formatSeconds(sample.sample_cost_s)
    );
    const path = this.connection.notebookPath;
    if (this.connection.autoloads && path && this._saveAutoload) {
      // Said where it can be undone.
      this._footer.appendChild(
        document.createTextNode(
          ' · ' +
            this._trans.__("loads by itself in this notebook's new kernels") +
            ' '
        )
      );
      const stop = el(
        'button',
        'jp-KerasMagic-autoloadStop',
        this._trans.__('Stop')
      );
      stop.addEventListener('click', () => this._saveAutoload?.(path, false));
      this._footer.appendChild(stop);
    }
  }

  /** A click on a cell span: show that cell, or say why not. */
  private async _showRun(run: ICellRunLike): Promise<void> {
    const shown = (await this._showRunCallback?.(run)) ?? false;
    this._runStatus.textContent = shown
      ? ''
      : this._trans.__(
          'Cell [%1] is not in an open notebook (edited away, or run from elsewhere).',
          run.executionCount ?? '?'
        );
  }

  private _kernelProtocol(): string {
    const state = this.connection.state;
    return state.kind === 'connected' ? state.hello.protocol_version : '?';
  }

  /** The report is the followed kernel's (the connection keeps it per kernel). */
  private async _onClear(): Promise<void> {
    if (this.connection.clearReport?.status === 'pending') {
      return;
    }
    try {
      await this.connection.clear();
    } catch {
      // Recorded in the kernel's report, which _update shows.
    }
    this._update();
  }

  private _trans: TranslationBundle;
  private _kernelLabel!: HTMLElement;
  private _restarted!: HTMLElement;
  private _classroomButton!: HTMLButtonElement;
  private _classroom = false;
  private _notice: NoticeSection;
  private _death: DeathSection;
  private _body: HTMLElement;
  private _headlines: HeadlinesSection;
  private _limit: LimitSection;
  private _timeline: Timeline;
  private _runStatus: HTMLElement;
  private _clearing: ClearSection;
  private _event: HTMLElement;
  private _tf: TfSection;
  private _gpu: GpuSection;
  private _leaks: LeakWatchSection;
  private _keras: KerasSection;
  private _jobs: JobsSection;
  private _footer: HTMLElement;
  private _storage = typeof window !== 'undefined' ? window.localStorage : null;
  /** The window the user picked on the switch (kept in the browser), or null. */
  private _pickedWindow: number | null = null;
  private _settingsWindow: number | null = null;
  private _showRunCallback?: (run: ICellRunLike) => Promise<boolean>;
  private _saveAutoload?: (path: string, on: boolean) => void;
  private _resize: ResizeObserver;
}
