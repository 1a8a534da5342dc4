/**
 * The sidebar widget. Every kernel-supplied string is set with textContent: model names,
 * details and report text are data, never markup.
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
import { formatBytes, formatCount, formatSeconds } from './format';
import { IPoint } from './history';
import {
  countJobs,
  formatElapsed,
  IJobRow,
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
import { drawSparkline } from './sparkline';
import { el } from './dom';

const SPARK = { width: 200, height: 28, floor: 0 };

const LOAD_LINE = '%load_ext kerasmagic';

/** HH:MM:SS of a time in ms since the epoch, in the browser's time zone. */
function formatClock(ms: number): string {
  const date = new Date(ms);
  return [date.getHours(), date.getMinutes(), date.getSeconds()]
    .map(part => String(part).padStart(2, '0'))
    .join(':');
}

/** A byte count for display, or a dash where the kernel had no number. */
function bytesOrDash(value: MaybeNumber | null): string {
  return isNumber(value) ? formatBytes(value) : '–';
}

interface IMetricRow {
  node: HTMLElement;
  value: HTMLElement;
  note: HTMLElement;
  spark: SVGSVGElement;
}

export namespace KerasMagicPanel {
  export interface IOptions {
    connection: LiveConnection;
    translator?: ITranslator;
    /** Show the notebook cell with this id (the leak watch's links). */
    showCell?: (cellId: string) => Promise<boolean>;
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

    const header = el('div', 'jp-KerasMagic-header');
    header.appendChild(
      el('h2', 'jp-KerasMagic-title', trans.__('Keras memory'))
    );
    this._kernelLabel = el('div', 'jp-KerasMagic-kernel');
    header.appendChild(this._kernelLabel);
    this._restarted = el('div', 'jp-KerasMagic-restarted');
    header.appendChild(this._restarted);
    this.node.appendChild(header);

    this._notice = el('div', 'jp-KerasMagic-notice');
    this.node.appendChild(this._notice);

    this._body = el('div', 'jp-KerasMagic-body');
    this._rows = {
      rss: this._row('rss', trans.__('Kernel memory (RSS)')),
      tf: this._row('tf', trans.__('TensorFlow allocator: in use / held')),
      gpu: this._row(
        'gpu',
        trans.__('GPU: TensorFlow / this kernel (NVML) / device')
      ),
      graph: this._row('graph', trans.__('Graph: ops / CustomGradient entries'))
    };
    this._leaks = new LeakWatchSection({ trans, showCell: options.showCell });
    this._body.appendChild(this._leaks.node);
    this._counters = el('div', 'jp-KerasMagic-counters');
    const countersSection = this._section(
      'counters',
      trans.__('Keras name counters')
    );
    countersSection.appendChild(this._counters);
    this._models = el('ul', 'jp-KerasMagic-models');
    this._modelsTitle = el('h3', 'jp-KerasMagic-sectionTitle', '');
    const modelsSection = el('div', 'jp-KerasMagic-section');
    modelsSection.dataset.section = 'models';
    modelsSection.appendChild(this._modelsTitle);
    modelsSection.appendChild(this._models);
    this._body.appendChild(modelsSection);

    this._jobsSection = el('div', 'jp-KerasMagic-section jp-KerasMagic-jobs');
    this._jobsSection.dataset.section = 'jobs';
    this._jobsTitle = el('h3', 'jp-KerasMagic-sectionTitle', '');
    this._jobsSection.appendChild(this._jobsTitle);
    this._jobsList = el('ul', 'jp-KerasMagic-jobList');
    this._jobsList.setAttribute('aria-label', trans.__('Isolated jobs'));
    this._jobsSection.appendChild(this._jobsList);
    this._body.appendChild(this._jobsSection);

    const actions = this._section('actions', trans.__('Actions'));
    this._clearButton = el(
      'button',
      'jp-mod-styled jp-mod-accept jp-KerasMagic-clear',
      trans.__('Clear session')
    );
    this._clearButton.title = trans.__(
      'Run kerasmagic.clear_tf() in this kernel (after the running cell): clear the Keras session, purge dead graphs, collect garbage'
    );
    this._clearButton.addEventListener('click', () => void this._onClear());
    actions.appendChild(this._clearButton);
    this._report = el('pre', 'jp-KerasMagic-report');
    actions.appendChild(this._report);
    this._event = el('div', 'jp-KerasMagic-event');
    actions.appendChild(this._event);
    this._footer = el('div', 'jp-KerasMagic-footer');
    this._body.appendChild(this._footer);
    this.node.appendChild(this._body);

    this.connection.stateChanged.connect(this._update, this);
    this.connection.changed.connect(this._update, this);
    this._update();
  }

  readonly connection: LiveConnection;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._stopTicker();
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

  // ---- building --------------------------------------------------------------------------

  private _section(name: string, title: string): HTMLElement {
    const section = el('div', 'jp-KerasMagic-section');
    section.dataset.section = name;
    section.appendChild(el('h3', 'jp-KerasMagic-sectionTitle', title));
    this._body.appendChild(section);
    return section;
  }

  private _row(name: string, label: string): IMetricRow {
    const node = el('div', 'jp-KerasMagic-metric');
    node.dataset.metric = name;
    node.appendChild(el('div', 'jp-KerasMagic-label', label));
    const value = el('div', 'jp-KerasMagic-value', '–');
    node.appendChild(value);
    const spark = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    spark.setAttribute('class', 'jp-KerasMagic-spark');
    spark.setAttribute('role', 'img');
    node.appendChild(spark);
    const note = el('div', 'jp-KerasMagic-note');
    node.appendChild(note);
    this._body.appendChild(node);
    return { node, value, note, spark };
  }

  // ---- rendering -------------------------------------------------------------------------

  private _update(): void {
    if (!this.isVisible && this.isAttached) {
      return; // drawn on show; hidden panels cost nothing
    }
    const state = this.connection.state;
    this.node.dataset.state = state.kind;
    this._kernelLabel.textContent = this._kernelText(state);
    this._renderNotice(state);
    const connected = state.kind === 'connected';
    this._body.hidden = !connected;
    this._renderKernelRecord();
    this._clearButton.disabled =
      !connected || this.connection.clearReport?.status === 'pending';
    if (!connected) {
      this._stopTicker();
      return;
    }
    const sample = this.connection.latestSample;
    const facts = this.connection.latestFacts;
    if (sample) {
      this._renderSample(sample);
      // Read by the browser tests and bench_sidebar.py: sample-to-screen latency.
      this.node.dataset.sampleTs = String(sample.ts);
      this.node.dataset.sampleSeq = String(sample.seq);
      this.node.dataset.renderedTs = String(Date.now() / 1000);
      this.node.dataset.rssBytes = isNumber(sample.rss_bytes)
        ? String(sample.rss_bytes)
        : '';
      const tfInUse = sumDevices(
        sample.tf,
        'in_use_bytes',
        name => !isGpuDevice(name)
      );
      this.node.dataset.tfInUseBytes = tfInUse === null ? '' : String(tfInUse);
    }
    if (facts) {
      this._renderFacts(facts);
      this.node.dataset.executionCount = String(facts.execution_count);
    }
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
  }

  /**
   * What belongs to the followed kernel alone: its restart, its last Clear session report
   * and event, and where its history starts (read by the browser tests).
   */
  private _renderKernelRecord(): void {
    const trans = this._trans;
    const restartedAt = this.connection.restartedAt;
    this._restarted.textContent =
      restartedAt === null
        ? ''
        : trans.__('restarted %1', formatClock(restartedAt));
    this._restarted.hidden = restartedAt === null;
    this.node.dataset.restartedAt =
      restartedAt === null ? '' : String(restartedAt / 1000);
    const first = this.connection.history.points(SERIES.rss)[0];
    this.node.dataset.historySince = first ? String(first.ts) : '';
    const report = this.connection.clearReport;
    if (!report) {
      this._report.textContent = '';
      delete this._report.dataset.status;
    } else {
      this._report.dataset.status = report.status;
      this._report.textContent =
        report.status === 'pending'
          ? trans.__('Clearing (queued after the running cell)…')
          : report.error !== undefined
            ? trans.__('Clear failed: %1', report.error)
            : report.text;
    }
    this._report.hidden = !report;
    const event = this.connection.lastEvent;
    this._event.textContent = event
      ? trans.__('Last event: %1', event.text ?? event.kind)
      : '';
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
    return name;
  }

  private _renderNotice(state: ConnectionState): void {
    const trans = this._trans;
    const notice = this._notice;
    notice.textContent = '';
    notice.hidden = state.kind === 'connected';
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
          trans.__(
            'Waiting for the kernel to answer (it answers after the running cell).'
          )
        );
        break;
      case 'restarting':
        say(
          trans.__('The kernel is restarting'),
          trans.__(
            'The sidebar reconnects when it is back; load the extension again after a restart.'
          )
        );
        break;
      case 'not_loaded':
        say(
          trans.__('kerasmagic is not loaded in this kernel'),
          trans.__(
            'Run this line in a cell of the notebook; the sidebar attaches as soon as it has run:'
          ),
          LOAD_LINE
        );
        break;
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

  private _unavailableText(value: IUnavailable, what: string): string {
    const trans = this._trans;
    switch (value.reason) {
      case 'not_imported':
        return trans.__(
          '%1 is not imported yet: the numbers appear once the notebook imports it.',
          what
        );
      case 'not_started':
        return trans.__(
          '%1 is imported but its runtime has not started yet (no tensor created).',
          what
        );
      case 'no_device':
        return trans.__('No GPU: %1', value.detail ?? '');
      case 'not_installed':
        return trans.__('%1 is not installed in this kernel.', what);
      default:
        return trans.__(
          '%1 unavailable: %2',
          what,
          value.detail ?? value.reason
        );
    }
  }

  private _points(series: string): IPoint[] {
    return this.connection.history.points(series);
  }

  private _renderSample(sample: ISample): void {
    this._renderRss(sample);
    this._renderTfAllocator(sample);
    this._renderGpu(sample);
    this._renderFooter(sample);
  }

  private _renderRss(sample: ISample): void {
    const rss = this._rows.rss;
    rss.value.textContent = bytesOrDash(sample.rss_bytes);
    rss.note.textContent = isUnavailable(sample.rss_bytes)
      ? this._unavailableText(sample.rss_bytes, this._trans.__('RSS'))
      : '';
    drawSparkline(
      rss.spark,
      [this._points(SERIES.rss)],
      ['jp-KerasMagic-line-rss'],
      SPARK
    );
  }

  /** TensorFlow's CPU allocator: what its tensors use and what its pool holds. */
  private _renderTfAllocator(sample: ISample): void {
    const trans = this._trans;
    const tf = this._rows.tf;
    if (isUnavailable(sample.tf)) {
      tf.value.textContent = '–';
      tf.note.textContent = this._unavailableText(sample.tf, 'TensorFlow');
      tf.node.dataset.status = sample.tf.reason;
    } else {
      const cpu = (name: string) => !isGpuDevice(name);
      const inUse = sumDevices(sample.tf, 'in_use_bytes', cpu);
      const unused = sumDevices(sample.tf, 'held_unused_min_bytes', cpu);
      tf.value.textContent =
        inUse === null
          ? '–'
          : trans.__(
              '%1 in use / %2 held',
              formatBytes(inUse),
              formatBytes(inUse + (unused ?? 0))
            );
      const unsupported = Object.entries(sample.tf.devices).find(
        ([name, d]) => cpu(name) && isUnavailable(d.in_use_bytes)
      );
      tf.note.textContent = unsupported
        ? this._unavailableText(
            unsupported[1].in_use_bytes as IUnavailable,
            unsupported[0]
          )
        : unused
          ? trans.__(
              'TensorFlow keeps at least %1 it does not use (its pool never shrinks).',
              formatBytes(unused)
            )
          : '';
      tf.node.dataset.status = 'running';
    }
    drawSparkline(
      tf.spark,
      [this._points(SERIES.tfHeld), this._points(SERIES.tfInUse)],
      ['jp-KerasMagic-line-held', 'jp-KerasMagic-line-inuse'],
      SPARK
    );
  }

  /** The GPU: TensorFlow's view and NVML's view, labelled apart. */
  private _renderGpu(sample: ISample): void {
    const gpu = this._rows.gpu;
    if (isUnavailable(sample.gpu)) {
      gpu.value.textContent = '–';
      gpu.note.textContent = this._unavailableText(
        sample.gpu,
        this._trans.__('NVML')
      );
      gpu.node.dataset.status = sample.gpu.reason;
    } else {
      const tfGpu = sumDevices(sample.tf, 'in_use_bytes', isGpuDevice);
      const proc = sumGpu(sample.gpu, 'process_used_bytes');
      const used = sumGpu(sample.gpu, 'used_bytes');
      const total = sumGpu(sample.gpu, 'total_bytes');
      gpu.value.textContent = this._trans.__(
        'TF %1 / kernel %2 / device %3 of %4',
        bytesOrDash(tfGpu),
        bytesOrDash(proc),
        bytesOrDash(used),
        bytesOrDash(total)
      );
      gpu.note.textContent = sample.gpu
        .map(d =>
          isUnavailable(d)
            ? (d.detail ?? d.reason)
            : `${d.index}: ${d.name ?? ''}`
        )
        .join(' · ');
      gpu.node.dataset.status = 'available';
    }
    drawSparkline(
      gpu.spark,
      [
        this._points(SERIES.nvmlUsed),
        this._points(SERIES.nvmlProcess),
        this._points(SERIES.gpuTfInUse)
      ],
      [
        'jp-KerasMagic-line-held',
        'jp-KerasMagic-line-process',
        'jp-KerasMagic-line-inuse'
      ],
      SPARK
    );
  }

  private _renderFooter(sample: ISample): void {
    this._footer.textContent = this._trans.__(
      'Sample %1 · every %2 · cost %3',
      sample.seq,
      formatSeconds(this.connection.intervalS),
      formatSeconds(sample.sample_cost_s)
    );
  }

  private _renderFacts(facts: IFacts): void {
    this._renderGraph(facts);
    this._renderCounters(facts);
    this._renderModels(facts);
  }

  /** The legacy graph's size and TensorFlow's CustomGradient registry. */
  private _renderGraph(facts: IFacts): void {
    const graph = this._rows.graph;
    if (isUnavailable(facts.tf_status)) {
      graph.value.textContent = '–';
      graph.note.textContent = this._unavailableText(
        facts.tf_status,
        'TensorFlow'
      );
    } else {
      const ops = facts.graph_op_count;
      const entries = facts.custom_gradient_entries;
      graph.value.textContent = this._trans.__(
        '%1 ops / %2 entries',
        isNumber(ops) ? formatCount(ops) : '–',
        isNumber(entries) ? formatCount(entries) : '–'
      );
      graph.note.textContent = isUnavailable(entries)
        ? (entries.detail ?? entries.reason)
        : this._trans.__('After cell [%1]', facts.execution_count);
    }
    drawSparkline(
      graph.spark,
      [this._points(SERIES.customGradients)],
      ['jp-KerasMagic-line-inuse'],
      SPARK
    );
  }

  /** Keras' layer name counters, one chip each. */
  private _renderCounters(facts: IFacts): void {
    this._counters.textContent = '';
    const counters = facts.name_counters;
    if (isUnavailable(counters)) {
      this._counters.textContent = counters.detail ?? counters.reason;
    } else if (Object.keys(counters).length === 0) {
      this._counters.textContent = isUnavailable(facts.keras_status)
        ? this._unavailableText(facts.keras_status, 'Keras')
        : this._trans.__('No layers created yet.');
    } else {
      for (const [name, count] of Object.entries(counters)) {
        const chip = el('span', 'jp-KerasMagic-chip');
        chip.appendChild(el('span', 'jp-KerasMagic-chipName', name));
        chip.appendChild(
          el('span', 'jp-KerasMagic-chipCount', formatCount(count))
        );
        this._counters.appendChild(chip);
      }
    }
  }

  /** The live models, their sizes and who holds them. */
  private _renderModels(facts: IFacts): void {
    const trans = this._trans;
    this._models.textContent = '';
    const models = facts.live_models;
    if (isUnavailable(models)) {
      this._modelsTitle.textContent = trans.__('Live models');
      this._models.appendChild(
        el('li', 'jp-KerasMagic-model', models.detail ?? models.reason)
      );
      return;
    }
    this._modelsTitle.textContent = trans.__('Live models (%1)', models.length);
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
    const gpu = el(
      'span',
      'jp-KerasMagic-jobGpu',
      trans.__('GPU peak %1', bytesOrDash(job.gpu_peak_bytes))
    );
    gpu.title = trans.__(
      "the job process's GPU memory per NVML, each device's peak, summed"
    );
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
  private _rows: { [name: string]: IMetricRow };
  private _counters: HTMLElement;
  private _models: HTMLElement;
  private _modelsTitle: HTMLElement;
  private _clearButton: HTMLButtonElement;
  private _report: HTMLElement;
  private _event: HTMLElement;
  private _footer: HTMLElement;
  private _restarted: HTMLElement;
  private _jobsSection: HTMLElement;
  private _jobsTitle: HTMLElement;
  private _jobsList: HTMLElement;
  private _jobsVersion = -1;
  private _jobsSupported: boolean | null = null;
  private _elapsedNodes = new Map<string, HTMLElement>();
  private _leaks: LeakWatchSection;
  private _ticker: number | null = null;
}
