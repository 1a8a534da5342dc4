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
import { RestartMemory } from './restarts';
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
    this.connection.changed.connect(this._update, this);
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
    this.connection.changed.disconnect(this._update, this);
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

  /** The chart's rows for the mode and, in classroom mode, the panel's height. */
  private _fitChart(): void {
    this._timeline.geometry = this._classroom
      ? classroomGeometry(this.node.clientHeight)
      : NORMAL_GEOMETRY;
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

  private _update(): void {
    if (!this.isVisible && this.isAttached) {
      return; // drawn on show; hidden panels cost nothing
    }
    const connection = this.connection;
    const state = connection.state;
    this.node.dataset.state = state.kind;
    this._kernelLabel.textContent = this._kernelText(state);
    this._notice.render(state, {
      showsLastView: connection.lastView !== null,
      runningCell: connection.runningCell,
      notebookPath: connection.notebookPath,
      autoloads: connection.autoloads
    });
    this._renderDeath();
    const connected = state.kind === 'connected';
    // Back on a kernel it has seen: its last view at once, "updating…", not a blank panel.
    const updating = !connected && connection.lastView !== null;
    this.node.dataset.updating = String(updating);
    this._body.hidden = !connected && !updating;
    this._renderKernelRecord();
    this._clearing.button.disabled =
      !connected || connection.clearReport?.status === 'pending';
    if (!connected && !updating) {
      this._jobs.stopTicker();
      return;
    }
    this._renderSections();
  }

  /** The body's sections, from the followed kernel's latest sample and facts. */
  private _renderSections(): void {
    const connection = this.connection;
    const sample = connection.latestSample;
    const facts = connection.latestFacts;
    if (sample) {
      this._headlines.render(sample, connection.host);
      this._limit.render(sample);
      this._gpu.render(sample);
      this._renderFooter(sample);
      this._stampFigures(sample);
    }
    this._tf.render(sample, facts);
    if (facts) {
      this._keras.render(facts, connection.runningCell);
      this.node.dataset.executionCount = String(facts.execution_count);
    }
    this._renderTimeline(sample);
    this._leaks.render(
      connection.cellGrowth,
      connection.cellsSupported,
      this._kernelProtocol()
    );
    this._jobs.render(
      connection.jobs,
      connection.jobsSupported,
      this._kernelProtocol()
    );
    this._jobs.syncTicker(
      this.isVisible && connection.state.kind === 'connected'
    );
    if (sample) {
      // Read by the browser tests and bench_sidebar.py (sample-to-screen latency): stamped
      // last, once the timeline and every section show this sample, not when the headline does.
      this.node.dataset.sampleTs = String(sample.ts);
      this.node.dataset.sampleSeq = String(sample.seq);
      this.node.dataset.renderedTs = String(Date.now() / 1000);
    }
  }

  /** The sample's figures as the browser tests read them (data attributes). */
  private _stampFigures(sample: ISample): void {
    const data = this.node.dataset;
    data.rssBytes = isNumber(sample.rss_bytes) ? String(sample.rss_bytes) : '';
    const tfInUse = sumDevices(
      sample.tf,
      'in_use_bytes',
      name => !isGpuDevice(name)
    );
    data.tfInUseBytes = tfInUse === null ? '' : String(tfInUse);
    const gpuInUse = allocatorInUse(sample);
    data.gpuAllocInUseBytes = gpuInUse === null ? '' : String(gpuInUse);
  }

  /**
   * What belongs to the followed kernel alone: its restart, its last Clear session report
   * and event, and where its history starts (read by the browser tests).
   */
  private _renderKernelRecord(): void {
    const trans = this._trans;
    const restartedAt = this._restart()?.at ?? null;
    this._restarted.textContent =
      restartedAt === null
        ? ''
        : trans.__('restarted %1', formatClock(restartedAt / 1000));
    this._restarted.hidden = restartedAt === null;
    this.node.dataset.restartedAt =
      restartedAt === null ? '' : String(restartedAt / 1000);
    const first = this.connection.history.points(SERIES.rss)[0];
    this.node.dataset.historySince = first ? String(first.ts) : '';
    this._clearing.render(
      this.connection.clearReport,
      this.connection.runningCell
    );
    const event = this.connection.lastEvent;
    this._event.textContent = event
      ? trans.__(
          'Last event: %1 at %2',
          event.text ?? event.kind,
          formatClock(event.ts)
        )
      : '';
    this._event.hidden = !event;
  }

  /**
   * The followed kernel's restart: the one this page saw (kept for a reload), else one a page
   * before a reload saw, with its mark's time (`recalledTs`). Null where there was none.
   */
  private _restart(): { at: number; recalledTs: number | null } | null {
    const state = this.connection.state;
    const pid = state.kind === 'connected' ? state.hello.pid : null;
    const path = this.connection.notebookPath;
    const seenAt = this.connection.restartedAt;
    if (seenAt !== null) {
      const mark = this.connection.marks.find(m => m.kind === 'restart');
      const key = `${path} ${pid} ${seenAt}`;
      if (pid !== null && path && mark && key !== this._rememberedRestart) {
        this._restarts.remember(path, { pid, ts: mark.ts, at: seenAt });
        this._rememberedRestart = key;
      }
      return { at: seenAt, recalledTs: null };
    }
    const recalled =
      pid !== null && path ? this._restarts.recall(path, pid) : null;
    return recalled ? { at: recalled.at, recalledTs: recalled.ts } : null;
  }

  /** The followed kernel's predecessor died: when, in which cell, why, and its timeline. */
  private _renderDeath(): void {
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

  private _renderTimeline(sample: ISample | null): void {
    const history = this.connection.history;
    const series = this._series(sample);
    const runs = this.connection.cellRuns;
    const lastPoint = history.points(SERIES.rss).slice(-1)[0];
    const now = Math.max(
      sample?.ts ?? 0,
      lastPoint?.ts ?? 0,
      ...runs.slice(-1).map(r => r.endedTs ?? r.startedTs),
      ...this.connection.marks.slice(-1).map(m => m.ts)
    );
    const since = Math.min(
      history.points(SERIES.rss)[0]?.ts ?? Infinity,
      runs[0]?.startedTs ?? Infinity
    );
    let marks = this.connection.marks;
    const recalled = this._restart()?.recalledTs ?? null;
    if (recalled !== null && !marks.some(m => m.kind === 'restart')) {
      marks = [{ kind: 'restart', ts: recalled }, ...marks].sort(
        (a, b) => a.ts - b.ts
      );
    }
    this._timeline.render({
      series,
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

  private _renderFooter(sample: ISample): void {
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
  private _restarts = new RestartMemory(this._storage);
  /** The window the user picked on the switch (kept in the browser), or null. */
  private _pickedWindow: number | null = null;
  private _settingsWindow: number | null = null;
  /** What `_restarts` was last told, so that a sample does not write it again. */
  private _rememberedRestart = '';
  private _showRunCallback?: (run: ICellRunLike) => Promise<boolean>;
  private _saveAutoload?: (path: string, on: boolean) => void;
  private _resize: ResizeObserver;
}
