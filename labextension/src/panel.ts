/* eslint-disable max-lines -- over 600 lines before issue 31; split it */
/**
 * The sidebar widget: headline numbers, the timeline, then the sections read on the
 * kernel's main thread (each says which cell it is as of). Every kernel-supplied string is
 * set with textContent: model names, details and report text are data, never markup.
 */

import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import {
  ConnectionState,
  isGpuDevice,
  LiveConnection,
  SERIES,
  sumDevices,
  sumGpu
} from './connection';
import { LeakWatchSection } from './cells';
import { rssReconciliation } from './reconcile';
import { waitingNotice } from './waiting';
import { ClearSection } from './clearing';
import { formatBytes, formatCount, formatSeconds } from './format';
import { allocatorInUse, codeParts, gpuHeadlineSub, gpuView } from './gpu';
import {
  countJobs,
  mapProgressText,
  formatElapsed,
  IJobRow,
  jobGpu,
  JobState,
  STATE_MARK,
  whereText
} from './jobs';
import {
  IFacts,
  ISample,
  isNumber,
  isUnavailable,
  IUnavailable,
  MaybeNumber,
  PROTOCOL_VERSION
} from './protocol';
import {
  classroomGeometry,
  formatClock,
  formatPct,
  ICellRunLike,
  ISeriesSpec,
  NORMAL_GEOMETRY,
  Timeline
} from './timeline';
import { el } from './dom';
import { chartSeries } from './series';
import { RestartMemory } from './restarts';

const LOAD_LINE = '%load_ext kerasmagic';

/** A byte count for display, or a dash where the kernel had no number. */
function bytesOrDash(value: MaybeNumber | null): string {
  return isNumber(value) ? formatBytes(value) : '–';
}

/**
 * A remedy as text nodes, with what to type in the code font; a variable name may break
 * after an underscore (`<wbr>`: a 250 px panel cannot hold XLA_PYTHON_CLIENT_PREALLOCATE=false).
 */
function appendRemedy(node: HTMLElement, text: string): void {
  for (const part of codeParts(text)) {
    if (!part.code) {
      node.appendChild(document.createTextNode(part.text));
      continue;
    }
    const code = el('code', 'jp-KerasMagic-gpuCode');
    if (part.text.includes(' ')) {
      code.textContent = part.text; // `%%fresh_model --isolate` stays on one line
      code.dataset.nowrap = 'true';
    } else {
      part.text.split(/(?<=_)/).forEach((piece, i) => {
        if (i > 0) {
          code.appendChild(document.createElement('wbr'));
        }
        code.appendChild(document.createTextNode(piece));
      });
    }
    node.appendChild(code);
  }
}

/** How far a framework got; the furthest of what the sample and the facts say wins. */
type Stage = 'absent' | 'not_imported' | 'not_started' | 'running';
const STAGES: Stage[] = ['absent', 'not_imported', 'not_started', 'running'];

function stageOf(status: string | IUnavailable | undefined): Stage {
  if (status === undefined) {
    return 'absent';
  }
  if (!isUnavailable(status)) {
    return status === 'running' || status === 'imported' ? 'running' : 'absent';
  }
  switch (status.reason) {
    case 'not_imported':
    case 'not_installed':
      return 'not_imported';
    case 'not_started':
      return 'not_started';
    default:
      return 'absent';
  }
}

/**
 * TensorFlow's stage from both sources. The sample (sampler thread, every second) is newer
 * than the facts (after the previous cell) while a cell runs, and a framework never goes
 * back: taking the furthest keeps the panel from saying two different things at once.
 */
function tfStage(sample: ISample | null, facts: IFacts | null): Stage {
  const fromSample = sample
    ? isUnavailable(sample.tf)
      ? stageOf(sample.tf)
      : 'running'
    : 'absent';
  const fromFacts = facts ? stageOf(facts.tf_status) : 'absent';
  return STAGES[
    Math.max(STAGES.indexOf(fromSample), STAGES.indexOf(fromFacts))
  ];
}

interface IHeadline {
  node: HTMLElement;
  value: HTMLElement;
  sub: HTMLElement;
}

export namespace KerasMagicPanel {
  export interface IOptions {
    connection: LiveConnection;
    translator?: ITranslator;
    /** Show the notebook cell with this id (the leak watch's links). */
    showCell?: (cellId: string) => Promise<boolean>;
    /** Show a cell run of the timeline: by its cell id, else by its execution count. */
    showRun?: (run: ICellRunLike) => Promise<boolean>;
    /** The user chose a timeline window: remember it (the settings' `timeline_window`). */
    saveWindow?: (minutes: number) => void;
    /** Load kerasmagic by itself in new kernels of this notebook path, or stop (settings). */
    saveAutoload?: (path: string, on: boolean) => void;
    /** The user switched classroom mode: remember it (the settings' `classroom`). */
    saveClassroom?: (on: boolean) => void;
  }
}

export class KerasMagicPanel extends Widget {
  // eslint-disable-next-line max-lines-per-function -- too long before issue 31; split it
  constructor(options: KerasMagicPanel.IOptions) {
    super();
    this.connection = options.connection;
    this._trans = (options.translator ?? nullTranslator).load('kerasmagic');
    const trans = this._trans;
    this.addClass('jp-KerasMagic-panel');
    this.node.tabIndex = -1;

    const header = el('div', 'jp-KerasMagic-header');
    const titleRow = el('div', 'jp-KerasMagic-titleRow');
    titleRow.appendChild(
      el('h2', 'jp-KerasMagic-title', trans.__('Keras memory'))
    );
    // A projector's sidebar: large type, high-contrast lines, a chart as tall as the panel
    // allows. A toggle (aria-pressed), remembered in the settings.
    this._classroomButton = el(
      'button',
      'jp-KerasMagic-classroomToggle',
      trans.__('Classroom')
    );
    this._classroomButton.type = 'button';
    this._classroomButton.title = trans.__(
      'Classroom mode: large type, high-contrast lines and a taller chart, for a projector'
    );
    this._classroomButton.setAttribute('aria-pressed', 'false');
    this._classroomButton.addEventListener('click', () => {
      this.classroom = !this._classroom;
      options.saveClassroom?.(this._classroom);
    });
    titleRow.appendChild(this._classroomButton);
    header.appendChild(titleRow);
    this._kernelLabel = el('div', 'jp-KerasMagic-kernel');
    header.appendChild(this._kernelLabel);
    this._restarted = el('div', 'jp-KerasMagic-restarted');
    header.appendChild(this._restarted);
    this.node.appendChild(header);

    // A kernel that died: said above everything else, whatever the state of the next kernel,
    // with the dead kernel's timeline (greyed) until the user dismisses it.
    this._death = el('div', 'jp-KerasMagic-death');
    this._death.setAttribute('role', 'alert');
    this._deathTitle = el('p', 'jp-KerasMagic-deathTitle');
    this._deathText = el('p', 'jp-KerasMagic-deathText');
    this._deathDismiss = el(
      'button',
      'jp-KerasMagic-deathDismiss',
      trans.__('Dismiss')
    );
    this._deathDismiss.addEventListener('click', () =>
      this.connection.dismissDeath()
    );
    this._death.append(this._deathTitle, this._deathText, this._deathDismiss);
    this._death.hidden = true;
    this.node.appendChild(this._death);
    this._notice = el('div', 'jp-KerasMagic-notice');
    this.node.appendChild(this._notice);

    this._body = el('div', 'jp-KerasMagic-body');
    const headlines = el('div', 'jp-KerasMagic-headlines');
    this._body.appendChild(headlines);
    const headline = (name: string, label: string, title: string) => {
      const node = el('div', 'jp-KerasMagic-headline');
      node.dataset.headline = name;
      node.title = title;
      // One labelled figure for a screen reader ("Kernel RSS: 54.6 MiB"), not a run of text.
      node.setAttribute('role', 'group');
      node.setAttribute('aria-label', label);
      node.dataset.label = label;
      node.appendChild(el('div', 'jp-KerasMagic-headlineLabel', label));
      const value = el('div', 'jp-KerasMagic-headlineValue', '–');
      node.appendChild(value);
      const sub = el('div', 'jp-KerasMagic-headlineSub');
      node.appendChild(sub);
      headlines.appendChild(node);
      return { node, value, sub };
    };
    this._headlines = {
      rss: headline(
        'rss',
        trans.__('Kernel RSS'),
        trans.__("The kernel process's resident memory (the OS)")
      ),
      tf: headline(
        'tf',
        trans.__('TF in use'),
        trans.__(
          "TensorFlow's CPU allocator: bytes its tensors use, and what its pool holds (a lower bound)"
        )
      ),
      gpu: headline(
        'gpu',
        trans.__('GPU, this kernel'),
        trans.__(
          "This kernel's GPU memory per NVML; below it, what each framework's allocator has in use (TF in use, torch allocated, JAX in use)"
        )
      ),
      cpu: headline(
        'cpu',
        trans.__('CPU'),
        trans.__("The kernel process's CPU use, % of one core")
      ),
      host: headline(
        'host',
        trans.__('Host memory'),
        trans.__("The machine's available memory, of its total")
      )
    };

    this._timeline = new Timeline({
      trans,
      onRun: run => void this._showRun(run),
      onWindowChange: minutes => options.saveWindow?.(minutes)
    });
    this._showRunCallback = options.showRun;
    this._saveAutoload = options.saveAutoload;
    this._body.appendChild(this._timeline.node);
    this._runStatus = el('div', 'jp-KerasMagic-runStatus');
    this._runStatus.setAttribute('role', 'status');
    this._body.appendChild(this._runStatus);

    // Right below the chart: the button stays where it is however long the lists below grow,
    // and its report shows without scrolling.
    this._clearing = new ClearSection({
      trans,
      onClear: () => void this._onClear()
    });
    this._body.appendChild(this._clearing.node);
    this._event = el('div', 'jp-KerasMagic-event');
    this._clearing.node.appendChild(this._event);

    this._tfSection = this._section('tf', trans.__('TensorFlow'));
    this._tfLines = el('div', 'jp-KerasMagic-lines');
    this._tfSection.node.appendChild(this._tfLines);
    this._gpuSection = this._section('gpu', trans.__('GPU'));
    this._gpuLines = el('div', 'jp-KerasMagic-lines');
    this._gpuSection.node.appendChild(this._gpuLines);

    this._leaks = new LeakWatchSection({ trans, showCell: options.showCell });
    this._body.appendChild(this._leaks.node);

    this._kerasSection = this._section('keras', trans.__('Keras'));
    this._counters = el('div', 'jp-KerasMagic-counters');
    this._kerasSection.node.appendChild(this._counters);
    this._modelsTitle = el('div', 'jp-KerasMagic-subTitle', '');
    this._kerasSection.node.appendChild(this._modelsTitle);
    this._models = el('ul', 'jp-KerasMagic-models');
    this._kerasSection.node.appendChild(this._models);

    this._jobsSection = el('div', 'jp-KerasMagic-section jp-KerasMagic-jobs');
    this._jobsSection.dataset.section = 'jobs';
    this._jobsTitle = el('h3', 'jp-KerasMagic-sectionTitle', '');
    this._jobsSection.appendChild(this._jobsTitle);
    this._jobsList = el('ul', 'jp-KerasMagic-jobList');
    this._jobsList.setAttribute('aria-label', trans.__('Isolated jobs'));
    this._jobsSection.appendChild(this._jobsList);
    this._body.appendChild(this._jobsSection);

    this._footer = el('div', 'jp-KerasMagic-footer');
    this._body.appendChild(this._footer);
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
    this._stopTicker();
    this._resize.disconnect();
    this._timeline.dispose();
    this._deadTimeline?.dispose();
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
    this._stopTicker();
  }

  /** The timeline's window (minutes; 0: all the history), as the settings remember it. */
  set timelineWindow(minutes: number) {
    this._timeline.windowMinutes = minutes;
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
    this._fitChart();
  }

  /** The chart's rows for the mode and, in classroom mode, the panel's height. */
  private _fitChart(): void {
    this._timeline.geometry = this._classroom
      ? classroomGeometry(this.node.clientHeight)
      : NORMAL_GEOMETRY;
  }

  // ---- building --------------------------------------------------------------------------

  /** A section with a title line and, on the right, how fresh its facts are. */
  private _section(
    name: string,
    title: string
  ): { node: HTMLElement; title: HTMLElement; asOf: HTMLElement } {
    const node = el('div', 'jp-KerasMagic-section');
    node.dataset.section = name;
    const head = el('div', 'jp-KerasMagic-sectionHead');
    const titleNode = el('h3', 'jp-KerasMagic-sectionTitle', title);
    head.appendChild(titleNode);
    const asOf = el('span', 'jp-KerasMagic-asOf');
    head.appendChild(asOf);
    node.appendChild(head);
    this._body.appendChild(node);
    return { node, title: titleNode, asOf };
  }

  /** One quiet line in a section (a note, or the whole section when it collapses). */
  private _line(parent: HTMLElement, text: string, name?: string): HTMLElement {
    const line = el('div', 'jp-KerasMagic-line', text);
    if (name) {
      line.dataset.line = name;
    }
    parent.appendChild(line);
    return line;
  }

  // ---- rendering -------------------------------------------------------------------------

  private _update(): void {
    if (!this.isVisible && this.isAttached) {
      return; // drawn on show; hidden panels cost nothing
    }
    const state = this.connection.state;
    this.node.dataset.state = state.kind;
    if (state.kind === 'connected') {
      this._loadError = null;
    }
    this._kernelLabel.textContent = this._kernelText(state);
    this._renderNotice(state);
    this._renderDeath();
    const connected = state.kind === 'connected';
    // Back on a kernel it has seen: its last view at once, "updating…", not a blank panel.
    const updating = !connected && this.connection.lastView !== null;
    this.node.dataset.updating = String(updating);
    this._body.hidden = !connected && !updating;
    this._renderKernelRecord();
    this._clearing.button.disabled =
      !connected || this.connection.clearReport?.status === 'pending';
    if (!connected && !updating) {
      this._stopTicker();
      return;
    }
    const sample = this.connection.latestSample;
    const facts = this.connection.latestFacts;
    if (sample) {
      this._renderHeadlines(sample);
      this._renderGpu(sample);
      this._renderFooter(sample);
      this.node.dataset.rssBytes = isNumber(sample.rss_bytes)
        ? String(sample.rss_bytes)
        : '';
      const tfInUse = sumDevices(
        sample.tf,
        'in_use_bytes',
        name => !isGpuDevice(name)
      );
      this.node.dataset.tfInUseBytes = tfInUse === null ? '' : String(tfInUse);
      const gpuInUse = allocatorInUse(sample);
      this.node.dataset.gpuAllocInUseBytes =
        gpuInUse === null ? '' : String(gpuInUse);
    }
    this._renderTf(sample, facts);
    if (facts) {
      this._renderKeras(facts);
      this.node.dataset.executionCount = String(facts.execution_count);
    }
    this._renderTimeline(sample);
    this._leaks.render(
      this.connection.cellGrowth,
      this.connection.cellsSupported,
      this._kernelProtocol()
    );
    const jobs = this.connection.jobs;
    if (
      jobs.version !== this._jobsVersion ||
      this.connection.jobsSupported !== this._jobsSupported
    ) {
      this._renderJobs();
    }
    this._syncTicker();
    if (sample) {
      // Read by the browser tests and bench_sidebar.py (sample-to-screen latency): stamped
      // last, once the timeline and every section show this sample, not when the headline does.
      this.node.dataset.sampleTs = String(sample.ts);
      this.node.dataset.sampleSeq = String(sample.seq);
      this.node.dataset.renderedTs = String(Date.now() / 1000);
    }
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
    const trans = this._trans;
    const death = this.connection.death;
    const record = death?.record ?? null;
    if (record === null && this._deadTimeline) {
      this._deadTimeline.node.remove();
      this._deadTimeline.dispose();
      this._deadTimeline = null;
    }
    this._death.hidden = death === null;
    this.node.dataset.death =
      death?.diedTs?.toString() ?? (death ? 'unknown' : '');
    if (death === null) {
      return;
    }
    const when =
      death.diedTs === null
        ? trans.__('The kernel died')
        : trans.__('The kernel died at %1', formatClock(death.diedTs));
    this._deathTitle.textContent =
      death.executionCount === null
        ? when
        : trans.__('%1 while cell [%2] ran', when, death.executionCount);
    this._deathText.textContent =
      death.text ??
      trans.__(
        'The server found it dead: this was not a restart. Load kerasmagic in the next kernel (%load_ext kerasmagic): it says why where it can tell (out of memory, a crash).'
      );
    if (record !== null) {
      if (!this._deadTimeline) {
        // Made only while there is a death to show: the live chart stays the panel's only
        // other chart (and the first one in it, as the browser tests expect).
        this._deadTimeline = new Timeline({ trans, onRun: () => undefined });
        this._deadTimeline.node.classList.add('jp-mod-dead');
        this._death.insertBefore(this._deadTimeline.node, this._deathDismiss);
      }
      const last = record.history.points(SERIES.rss).slice(-1)[0];
      this._deadTimeline.render({
        series: this._series(null),
        points: key => record.history.points(key),
        runs: record.cellRuns,
        marks: record.marks,
        now: Math.max(last?.ts ?? 0, death.diedTs ?? 0),
        intervalS: this.connection.intervalS
      });
    }
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

  // eslint-disable-next-line max-lines-per-function -- too long before issue 31; split it
  private _renderNotice(state: ConnectionState): void {
    const trans = this._trans;
    const notice = this._notice;
    notice.textContent = '';
    // Showing the kernel's last view while it answers: no "Connecting…" over it.
    notice.hidden =
      state.kind === 'connected' ||
      (state.kind === 'connecting' && this.connection.lastView !== null);
    delete notice.dataset.waitingFor;
    const say = (title: string, hint: string, code?: string) => {
      notice.appendChild(el('p', 'jp-KerasMagic-noticeTitle', title));
      notice.appendChild(el('p', 'jp-KerasMagic-noticeHint', hint));
      if (code) {
        notice.appendChild(el('code', 'jp-KerasMagic-code', code));
      }
    };
    switch (state.kind) {
      case 'no_kernel':
        say(
          trans.__('No kernel'),
          trans.__(
            'Open a notebook with a running Python kernel; the sidebar follows the active notebook.'
          )
        );
        break;
      case 'connecting':
        say(
          trans.__('Connecting…'),
          this.connection.runningCell === false
            ? trans.__('Waiting for the kernel to answer.')
            : trans.__(
                'Waiting for the kernel to answer (it answers after the running cell).'
              )
        );
        break;
      case 'waiting': {
        const { title, hint } = waitingNotice(state, trans);
        say(title, hint);
        // The browser tests read which cell the panel waits for.
        notice.dataset.waitingFor =
          state.executionCount === null ? '' : String(state.executionCount);
        break;
      }
      case 'restarting':
        say(
          trans.__('The kernel is restarting'),
          trans.__(
            'The sidebar reconnects when it is back; load the extension again after a restart.'
          )
        );
        break;
      case 'not_loaded': {
        say(
          trans.__('kerasmagic is not loaded in this kernel'),
          trans.__(
            'Load it here, or run this line in a cell of the notebook; the sidebar attaches as soon as it has run:'
          ),
          LOAD_LINE
        );
        const load = el(
          'button',
          'jp-KerasMagic-loadButton',
          trans.__('Load kerasmagic')
        );
        load.addEventListener('click', () => {
          load.disabled = true;
          void this.connection.loadExtension().then(error => {
            load.disabled = false;
            if (error) {
              this._loadError = error;
              this._update();
            }
          });
        });
        notice.appendChild(load);
        const path = this.connection.notebookPath;
        if (path && this._saveAutoload) {
          const label = el('label', 'jp-KerasMagic-autoload');
          const box = document.createElement('input');
          box.type = 'checkbox';
          box.checked = this.connection.autoloads;
          box.addEventListener('change', () => {
            this._saveAutoload?.(path, box.checked);
            if (box.checked) {
              load.click();
            }
          });
          label.append(
            box,
            document.createTextNode(
              ' ' + trans.__("Load it by itself in this notebook's new kernels")
            )
          );
          notice.appendChild(label);
        }
        if (this._loadError) {
          notice.appendChild(
            el(
              'p',
              'jp-KerasMagic-noticeHint jp-KerasMagic-loadError',
              trans.__('It did not load: %1', this._loadError)
            )
          );
        }
        break;
      }
      case 'mismatch':
        say(
          trans.__(
            'This kernel speaks another version of the kerasmagic protocol'
          ),
          state.message ||
            trans.__(
              'Kernel protocol %1, sidebar protocol %2: upgrade the older side (pip install -U kerasmagic), restart the kernel and reload the page.',
              state.kernelVersion,
              PROTOCOL_VERSION
            )
        );
        break;
    }
  }

  /** "as of cell [7], 12:03:04": facts read on the main thread after that cell. */
  private _asOf(facts: IFacts): string {
    return this._trans.__(
      'as of cell [%1], %2',
      facts.execution_count,
      formatClock(facts.ts)
    );
  }

  /** The big numbers; a tile with no number for this kernel is hidden, not a dash. */
  private _renderHeadlines(sample: ISample): void {
    const trans = this._trans;
    const h = this._headlines;
    const show = (tile: IHeadline, value: string | null, sub = '') => {
      tile.node.hidden = value === null;
      tile.value.textContent = value ?? '';
      tile.sub.textContent = sub;
      tile.node.setAttribute(
        'aria-label',
        trans.__('%1: %2', tile.node.dataset.label ?? '', value ?? '') +
          (sub ? ` (${sub})` : '')
      );
    };
    // Whose figure it is, and how it meets top's and jupyter-resource-usage's (the hover).
    const rss = rssReconciliation(sample, trans);
    show(h.rss, bytesOrDash(sample.rss_bytes), rss.lines.join('\n'));
    h.rss.node.title = rss.title;
    const tree = sample.process_tree;
    this.node.dataset.pssBytes =
      tree && !isUnavailable(tree) && isNumber(tree.pss_bytes)
        ? String(tree.pss_bytes)
        : '';
    this.node.dataset.withChildrenBytes =
      rss.withChildrenBytes === null ? '' : String(rss.withChildrenBytes);
    const cpu = (name: string) => !isGpuDevice(name);
    const inUse = sumDevices(sample.tf, 'in_use_bytes', cpu);
    const unused = sumDevices(sample.tf, 'held_unused_min_bytes', cpu);
    show(
      h.tf,
      inUse === null ? null : formatBytes(inUse),
      inUse === null
        ? ''
        : trans.__('held %1', formatBytes(inUse + (unused ?? 0)))
    );
    const proc = sumGpu(sample.gpu, 'process_used_bytes');
    const allocators = allocatorInUse(sample);
    // Where NVML cannot name this kernel (no driver view, a container's PID namespace) the
    // allocators' own figures stand in, and the sub-line says whose they are.
    const gpuValue = proc ?? allocators;
    show(
      h.gpu,
      gpuValue === null ? null : formatBytes(gpuValue),
      gpuHeadlineSub(sample, proc !== null, trans)
    );
    show(
      h.cpu,
      isNumber(sample.cpu_pct) ? formatPct(sample.cpu_pct) : null,
      trans.__('of one core')
    );
    const host = this.connection.host;
    show(
      h.host,
      host ? formatBytes(host.availableBytes) : null,
      host ? trans.__('free of %1', formatBytes(host.totalBytes)) : ''
    );
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

  /** TensorFlow: one quiet line until its runtime runs, then the graph facts. */
  private _renderTf(sample: ISample | null, facts: IFacts | null): void {
    const trans = this._trans;
    const section = this._tfSection;
    const lines = this._tfLines;
    lines.textContent = '';
    const stage = tfStage(sample, facts);
    section.node.dataset.stage = stage;
    section.asOf.textContent = '';
    if (stage !== 'running') {
      section.node.dataset.quiet = 'true';
      section.title.textContent =
        stage === 'not_started'
          ? trans.__('TensorFlow imported, runtime not started')
          : trans.__('TensorFlow not imported');
      return;
    }
    section.node.dataset.quiet = 'false';
    section.title.textContent = trans.__('TensorFlow');
    if (sample && !isUnavailable(sample.tf)) {
      const cpu = (name: string) => !isGpuDevice(name);
      const unused = sumDevices(sample.tf, 'held_unused_min_bytes', cpu);
      const unsupported = Object.entries(sample.tf.devices).find(
        ([name, d]) => cpu(name) && isUnavailable(d.in_use_bytes)
      );
      if (unsupported) {
        const why = unsupported[1].in_use_bytes as IUnavailable;
        this._line(
          lines,
          trans.__('%1: %2', unsupported[0], why.detail ?? why.reason),
          'allocator'
        );
      } else if (unused) {
        this._line(
          lines,
          trans.__(
            'The pool keeps at least %1 unused; it never shrinks (only a new process returns it).',
            formatBytes(unused)
          ),
          'allocator'
        );
      }
    }
    if (!facts || stageOf(facts.tf_status) !== 'running') {
      // The sampler saw the runtime start during a cell; the facts come after it.
      this._line(
        lines,
        trans.__('Graph figures: after the running cell'),
        'graph'
      );
      return;
    }
    section.asOf.textContent = this._asOf(facts);
    const ops = facts.graph_op_count;
    const entries = facts.custom_gradient_entries;
    const graph = this._line(
      lines,
      trans.__(
        'Graph: %1 ops · %2 CustomGradient entries',
        isNumber(ops) ? formatCount(ops) : '–',
        isNumber(entries) ? formatCount(entries) : '–'
      ),
      'graph'
    );
    // The kernel knows whether its TensorFlow's entries pin graphs (before 2.22) or not.
    graph.title =
      facts.custom_gradients_pin_graphs === false
        ? trans.__(
            'Each training step Keras 3 traces on TensorFlow adds CustomGradient entries; this TensorFlow (2.22 or later) keeps no graph or weights in them, so they hold no memory.'
          )
        : trans.__(
            'Each training step Keras 3 traces on TensorFlow adds CustomGradient entries that pin its graph and weights; Clear session purges the dead ones.'
          );
  }

  /**
   * NVML's devices and each framework's allocator (whose number each is, what its pool
   * keeps unused and the remedy), or one quiet line saying why there is no GPU view.
   */
  private _renderGpu(sample: ISample): void {
    const trans = this._trans;
    const section = this._gpuSection;
    const lines = this._gpuLines;
    lines.textContent = '';
    const view = gpuView(sample, trans);
    section.node.dataset.quiet = String(view.quiet);
    section.node.dataset.status = view.status;
    if (view.quiet && isUnavailable(sample.gpu)) {
      section.title.textContent =
        sample.gpu.reason === 'no_device'
          ? trans.__('No GPU')
          : trans.__('GPU unavailable');
      section.title.title = sample.gpu.detail ?? sample.gpu.reason;
      return;
    }
    section.title.textContent = trans.__('GPU');
    section.title.title = '';
    for (const line of view.lines) {
      const node = this._line(
        lines,
        line.kind === 'remedy' ? '' : line.text,
        line.kind
      );
      if (line.kind === 'remedy') {
        appendRemedy(node, line.text);
      }
      node.classList.add('jp-KerasMagic-gpuLine');
      node.dataset.whose = line.whose;
      node.dataset.device = line.device;
      if (line.hint) {
        node.title = line.hint;
      }
    }
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

  /** Keras: one quiet line until it is imported, then counters and live models. */
  // eslint-disable-next-line max-lines-per-function -- too long before issue 31; split it
  private _renderKeras(facts: IFacts): void {
    const trans = this._trans;
    const section = this._kerasSection;
    this._counters.textContent = '';
    this._models.textContent = '';
    const stage = stageOf(facts.keras_status);
    const quiet = stage === 'not_imported';
    section.node.dataset.quiet = String(quiet);
    this._counters.hidden = quiet;
    this._modelsTitle.hidden = quiet;
    this._models.hidden = quiet;
    if (quiet) {
      // Read after the previous cell: the running one may be importing it now.
      section.title.textContent = trans.__('Keras not imported');
      section.asOf.textContent = this._asOf(facts);
      return;
    }
    section.title.textContent = trans.__('Keras');
    section.asOf.textContent = this._asOf(facts);
    const counters = facts.name_counters;
    if (isUnavailable(counters)) {
      this._counters.textContent = counters.detail ?? counters.reason;
    } else if (Object.keys(counters).length === 0) {
      // Not "no layers yet": clear_session() empties the counters while models live on.
      this._counters.appendChild(
        el(
          'span',
          'jp-KerasMagic-countersLabel',
          trans.__(
            'Name counters: empty, the next layer gets a plain name (dense, not dense_3)'
          )
        )
      );
    } else {
      this._counters.appendChild(
        el('span', 'jp-KerasMagic-countersLabel', trans.__('Name counters'))
      );
      for (const [name, count] of Object.entries(counters)) {
        const chip = el('span', 'jp-KerasMagic-chip');
        chip.appendChild(el('span', 'jp-KerasMagic-chipName', name));
        chip.appendChild(
          el('span', 'jp-KerasMagic-chipCount', formatCount(count))
        );
        this._counters.appendChild(chip);
      }
    }
    const models = facts.live_models;
    if (isUnavailable(models)) {
      this._modelsTitle.textContent = trans.__(
        'Live models: %1',
        models.detail ?? models.reason
      );
      return;
    }
    // Read between cells: while one runs (it may be building six), "none" is only as of the
    // last cell, and says so.
    const running = this.connection.runningCell;
    this._modelsTitle.textContent = models.length
      ? trans.__('Live models (%1)', models.length)
      : running !== false
        ? trans.__(
            'Live models: none as of cell [%1] (read again when the running cell ends)',
            facts.execution_count
          )
        : trans.__('Live models: none');
    for (const model of models) {
      const item = el('li', 'jp-KerasMagic-model');
      item.appendChild(el('span', 'jp-KerasMagic-modelName', model.name));
      item.appendChild(
        el(
          'span',
          'jp-KerasMagic-modelSize',
          trans.__(
            '%1 weights, %2 optimizer',
            bytesOrDash(model.weight_bytes),
            bytesOrDash(model.optimizer_bytes)
          )
        )
      );
      if (model.held_by && model.held_by.length) {
        item.appendChild(
          el(
            'span',
            'jp-KerasMagic-modelHolders',
            trans.__('held by %1', model.held_by.join(', '))
          )
        );
      }
      this._models.appendChild(item);
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

  // ---- isolated jobs ----------------------------------------------------------------------

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

  /** Running jobs first, then the recent ones; one quiet line when there were none. */
  private _renderJobs(): void {
    const trans = this._trans;
    const table = this.connection.jobs;
    const supported = this.connection.jobsSupported;
    this._jobsVersion = table.version;
    this._jobsSupported = supported;
    this._jobsList.textContent = '';
    this._elapsedNodes.clear();
    const now = Date.now();
    const rows = table.rows(now);
    const counts = countJobs(rows);
    const section = this._jobsSection;
    section.dataset.running = String(counts.running);
    section.dataset.done = String(counts.done);
    section.dataset.failed = String(counts.failed);
    section.dataset.total = String(rows.length);
    section.dataset.empty = String(rows.length === 0);
    if (rows.length === 0) {
      this._jobsTitle.textContent =
        supported === false
          ? trans.__(
              "Isolated jobs: this kernel's kerasmagic is older (protocol %1) and does not list them",
              this._kernelProtocol()
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
    this._jobsTitle.textContent = parts.join(' · ');
    for (const row of rows) {
      this._jobsList.appendChild(this._jobItem(row));
    }
  }

  private _jobItem(row: IJobRow): HTMLElement {
    const trans = this._trans;
    const job = row.job;
    const item = el('li', 'jp-KerasMagic-job');
    item.dataset.jobId = job.job_id;
    item.dataset.state = row.state;
    item.dataset.status = job.status;
    const label = el('div', 'jp-KerasMagic-jobLabel', job.label);
    label.title = job.label;
    item.appendChild(label);
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
    item.appendChild(meta);
    if (job.error) {
      const error = el('div', 'jp-KerasMagic-jobError', job.error);
      error.title = job.error;
      item.appendChild(error);
    }
    return item;
  }

  private _kernelProtocol(): string {
    const state = this.connection.state;
    return state.kind === 'connected' ? state.hello.protocol_version : '?';
  }

  /** Elapsed times tick once a second, only while a job runs and the panel is shown. */
  private _syncTicker(): void {
    const needed =
      this.isVisible &&
      this.connection.state.kind === 'connected' &&
      this._elapsedNodes.size > 0;
    if (needed && this._ticker === null) {
      this._ticker = window.setInterval(() => this._tick(), 1000);
    } else if (!needed) {
      this._stopTicker();
    }
  }

  private _stopTicker(): void {
    if (this._ticker !== null) {
      window.clearInterval(this._ticker);
      this._ticker = null;
    }
  }

  private _tick(): void {
    const now = Date.now();
    this._elapsedNodes.forEach((node, jobId) => {
      const seconds = this.connection.jobs.elapsed(jobId, now);
      if (seconds !== null) {
        node.textContent = formatElapsed(seconds, true);
      }
    });
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
  private _kernelLabel: HTMLElement;
  private _notice: HTMLElement;
  private _body: HTMLElement;
  private _headlines: { [name: string]: IHeadline };
  private _timeline: Timeline;
  private _restarts = new RestartMemory(
    typeof window !== 'undefined' ? window.localStorage : null
  );
  /** What `_restarts` was last told, so that a sample does not write it again. */
  private _rememberedRestart = '';
  private _showRunCallback?: (run: ICellRunLike) => Promise<boolean>;
  private _runStatus: HTMLElement;
  private _classroomButton: HTMLButtonElement;
  private _classroom = false;
  private _resize: ResizeObserver;
  private _tfSection: {
    node: HTMLElement;
    title: HTMLElement;
    asOf: HTMLElement;
  };
  private _tfLines: HTMLElement;
  private _gpuSection: {
    node: HTMLElement;
    title: HTMLElement;
    asOf: HTMLElement;
  };
  private _gpuLines: HTMLElement;
  private _kerasSection: {
    node: HTMLElement;
    title: HTMLElement;
    asOf: HTMLElement;
  };
  private _counters: HTMLElement;
  private _models: HTMLElement;
  private _modelsTitle: HTMLElement;
  private _clearing: ClearSection;
  private _event: HTMLElement;
  private _footer: HTMLElement;
  private _restarted: HTMLElement;
  private _saveAutoload?: (path: string, on: boolean) => void;
  /** Why the empty state's "Load kerasmagic" failed, shown there until it loads. */
  private _loadError: string | null = null;
  private _death: HTMLElement;
  private _deathTitle: HTMLElement;
  private _deathText: HTMLElement;
  private _deathDismiss: HTMLElement;
  private _deadTimeline: Timeline | null = null;
  private _jobsSection: HTMLElement;
  private _jobsTitle: HTMLElement;
  private _jobsList: HTMLElement;
  private _jobsVersion = -1;
  private _jobsSupported: boolean | null = null;
  private _elapsedNodes = new Map<string, HTMLElement>();
  private _leaks: LeakWatchSection;
  private _ticker: number | null = null;
}
