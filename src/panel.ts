/**
 * The sidebar widget. Every kernel-supplied string is set with textContent: model names,
 * details and report text are data, never markup.
 */

import { ITranslator, nullTranslator, TranslationBundle } from '@jupyterlab/translation';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { ConnectionState, isGpuDevice, LiveConnection, SERIES, sumDevices, sumGpu } from './connection';
import { formatBytes, formatCount, formatSeconds } from './format';
import { IPoint } from './history';
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

const SPARK = { width: 200, height: 28, floor: 0 };

export const LOAD_LINE = '%load_ext kerasmagic';

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
  }
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
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
    header.appendChild(el('h2', 'jp-KerasMagic-title', trans.__('Keras memory')));
    this._kernelLabel = el('div', 'jp-KerasMagic-kernel');
    header.appendChild(this._kernelLabel);
    this.node.appendChild(header);

    this._notice = el('div', 'jp-KerasMagic-notice');
    this.node.appendChild(this._notice);

    this._body = el('div', 'jp-KerasMagic-body');
    this._rows = {
      rss: this._row('rss', trans.__('Kernel memory (RSS)')),
      tf: this._row('tf', trans.__('TensorFlow allocator: in use / held')),
      gpu: this._row('gpu', trans.__('GPU: TensorFlow / this kernel (NVML) / device')),
      graph: this._row('graph', trans.__('Graph: ops / CustomGradient entries'))
    };
    this._counters = el('div', 'jp-KerasMagic-counters');
    const countersSection = this._section('counters', trans.__('Keras name counters'));
    countersSection.appendChild(this._counters);
    this._models = el('ul', 'jp-KerasMagic-models');
    this._modelsTitle = el('h3', 'jp-KerasMagic-sectionTitle', '');
    const modelsSection = el('div', 'jp-KerasMagic-section');
    modelsSection.dataset.section = 'models';
    modelsSection.appendChild(this._modelsTitle);
    modelsSection.appendChild(this._models);
    this._body.appendChild(modelsSection);

    const actions = this._section('actions', trans.__('Actions'));
    this._clearButton = el('button', 'jp-mod-styled jp-mod-accept jp-KerasMagic-clear', trans.__('Clear session'));
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
    this._clearButton.disabled = !connected || this._clearing;
    if (!connected) {
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
      this.node.dataset.rssBytes = isNumber(sample.rss_bytes) ? String(sample.rss_bytes) : '';
      const tfInUse = sumDevices(sample.tf, 'in_use_bytes', name => !isGpuDevice(name));
      this.node.dataset.tfInUseBytes = tfInUse === null ? '' : String(tfInUse);
    }
    if (facts) {
      this._renderFacts(facts);
      this.node.dataset.executionCount = String(facts.execution_count);
    }
    const event = this.connection.lastEvent;
    this._event.textContent = event
      ? this._trans.__('Last event: %1', event.text ?? event.kind)
      : '';
  }

  private _kernelText(state: ConnectionState): string {
    const name = this.connection.kernelName;
    if (state.kind === 'connected') {
      return this._trans.__('%1 · pid %2 · kerasmagic %3', name, state.hello.pid, state.hello.package_version);
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
        say(trans.__('No kernel'), trans.__('Open a notebook with a running Python kernel; the sidebar follows the active notebook.'));
        break;
      case 'connecting':
        say(trans.__('Connecting…'), trans.__('Waiting for the kernel to answer (it answers after the running cell).'));
        break;
      case 'restarting':
        say(trans.__('The kernel is restarting'), trans.__('The sidebar reconnects when it is back; load the extension again after a restart.'));
        break;
      case 'not_loaded':
        say(
          trans.__('kerasmagic is not loaded in this kernel'),
          trans.__('Run this line in a cell of the notebook; the sidebar attaches as soon as it has run:'),
          LOAD_LINE
        );
        break;
      case 'mismatch':
        say(
          trans.__('This kernel speaks another version of the kerasmagic protocol'),
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
        return trans.__('%1 is not imported yet: the numbers appear once the notebook imports it.', what);
      case 'not_started':
        return trans.__('%1 is imported but its runtime has not started yet (no tensor created).', what);
      case 'no_device':
        return trans.__('No GPU: %1', value.detail ?? '');
      case 'not_installed':
        return trans.__('%1 is not installed in this kernel.', what);
      default:
        return trans.__('%1 unavailable: %2', what, value.detail ?? value.reason);
    }
  }

  private _points(series: string): IPoint[] {
    return this.connection.history.points(series);
  }

  private _renderSample(sample: ISample): void {
    const trans = this._trans;
    const bytes = (v: MaybeNumber | number | null) => (isNumber(v) ? formatBytes(v) : '–');

    // RSS
    const rss = this._rows.rss;
    rss.value.textContent = bytes(sample.rss_bytes);
    rss.note.textContent = isUnavailable(sample.rss_bytes)
      ? this._unavailableText(sample.rss_bytes, trans.__('RSS'))
      : '';
    drawSparkline(rss.spark, [this._points(SERIES.rss)], ['jp-KerasMagic-line-rss'], SPARK);

    // TensorFlow's (CPU) allocator
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
          : trans.__('%1 in use / %2 held', formatBytes(inUse), formatBytes(inUse + (unused ?? 0)));
      const unsupported = Object.entries(sample.tf.devices).find(([name, d]) => cpu(name) && isUnavailable(d.in_use_bytes));
      tf.note.textContent = unsupported
        ? this._unavailableText(unsupported[1].in_use_bytes as IUnavailable, unsupported[0])
        : unused
          ? trans.__('TensorFlow keeps at least %1 it does not use (its pool never shrinks).', formatBytes(unused))
          : '';
      tf.node.dataset.status = 'running';
    }
    drawSparkline(
      tf.spark,
      [this._points(SERIES.tfHeld), this._points(SERIES.tfInUse)],
      ['jp-KerasMagic-line-held', 'jp-KerasMagic-line-inuse'],
      SPARK
    );

    // GPU: TensorFlow's view and NVML's view, labelled apart.
    const gpu = this._rows.gpu;
    if (isUnavailable(sample.gpu)) {
      gpu.value.textContent = '–';
      gpu.note.textContent = this._unavailableText(sample.gpu, trans.__('NVML'));
      gpu.node.dataset.status = sample.gpu.reason;
    } else {
      const tfGpu = sumDevices(sample.tf, 'in_use_bytes', isGpuDevice);
      const proc = sumGpu(sample.gpu, 'process_used_bytes');
      const used = sumGpu(sample.gpu, 'used_bytes');
      const total = sumGpu(sample.gpu, 'total_bytes');
      gpu.value.textContent = trans.__(
        'TF %1 / kernel %2 / device %3 of %4',
        bytes(tfGpu),
        bytes(proc),
        bytes(used),
        bytes(total)
      );
      gpu.note.textContent = sample.gpu
        .map(d => (isUnavailable(d) ? d.detail ?? d.reason : `${d.index}: ${d.name ?? ''}`))
        .join(' · ');
      gpu.node.dataset.status = 'available';
    }
    drawSparkline(
      gpu.spark,
      [this._points(SERIES.nvmlUsed), this._points(SERIES.nvmlProcess), this._points(SERIES.gpuTfInUse)],
      ['jp-KerasMagic-line-held', 'jp-KerasMagic-line-process', 'jp-KerasMagic-line-inuse'],
      SPARK
    );
    this._footer.textContent = trans.__(
      'Sample %1 · every %2 · cost %3',
      sample.seq,
      formatSeconds(this.connection.intervalS),
      formatSeconds(sample.sample_cost_s)
    );
  }

  private _renderFacts(facts: IFacts): void {
    const trans = this._trans;
    const graph = this._rows.graph;
    if (isUnavailable(facts.tf_status)) {
      graph.value.textContent = '–';
      graph.note.textContent = this._unavailableText(facts.tf_status, 'TensorFlow');
    } else {
      const ops = facts.graph_op_count;
      const entries = facts.custom_gradient_entries;
      graph.value.textContent = trans.__(
        '%1 ops / %2 entries',
        isNumber(ops) ? formatCount(ops) : '–',
        isNumber(entries) ? formatCount(entries) : '–'
      );
      graph.note.textContent = isUnavailable(entries)
        ? entries.detail ?? entries.reason
        : trans.__('After cell [%1]', facts.execution_count);
    }
    drawSparkline(graph.spark, [this._points(SERIES.customGradients)], ['jp-KerasMagic-line-inuse'], SPARK);

    this._counters.textContent = '';
    const counters = facts.name_counters;
    if (isUnavailable(counters)) {
      this._counters.textContent = counters.detail ?? counters.reason;
    } else if (Object.keys(counters).length === 0) {
      this._counters.textContent = isUnavailable(facts.keras_status)
        ? this._unavailableText(facts.keras_status, 'Keras')
        : trans.__('No layers created yet.');
    } else {
      for (const [name, count] of Object.entries(counters)) {
        const chip = el('span', 'jp-KerasMagic-chip');
        chip.appendChild(el('span', 'jp-KerasMagic-chipName', name));
        chip.appendChild(el('span', 'jp-KerasMagic-chipCount', formatCount(count)));
        this._counters.appendChild(chip);
      }
    }

    this._models.textContent = '';
    const models = facts.live_models;
    if (isUnavailable(models)) {
      this._modelsTitle.textContent = trans.__('Live models');
      this._models.appendChild(el('li', 'jp-KerasMagic-model', models.detail ?? models.reason));
    } else {
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
              isNumber(model.weight_bytes) ? formatBytes(model.weight_bytes) : '–',
              isNumber(model.optimizer_bytes) ? formatBytes(model.optimizer_bytes) : '–'
            )
          )
        );
        if (model.held_by && model.held_by.length) {
          item.appendChild(
            el('span', 'jp-KerasMagic-modelHolders', trans.__('held by %1', model.held_by.join(', ')))
          );
        }
        this._models.appendChild(item);
      }
    }
  }

  private async _onClear(): Promise<void> {
    if (this._clearing) {
      return;
    }
    this._clearing = true;
    this._clearButton.disabled = true;
    this._report.textContent = this._trans.__('Clearing (queued after the running cell)…');
    this._report.dataset.status = 'pending';
    try {
      const result = await this.connection.clear();
      this._report.textContent = result.text;
      this._report.dataset.status = result.ok ? 'ok' : 'failed';
    } catch (reason) {
      this._report.textContent = this._trans.__('Clear failed: %1', String(reason));
      this._report.dataset.status = 'failed';
    } finally {
      this._clearing = false;
      this._update();
    }
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
  private _clearing = false;
}
