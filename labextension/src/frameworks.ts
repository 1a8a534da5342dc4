/**
 * The panel's framework sections: TensorFlow (its allocator pool and graph), the GPU (NVML's
 * devices and each framework's allocator) and Keras (name counters, live models). Each is
 * one quiet line until its framework runs, and says which cell its facts are as of.
 */

import { formatCount } from './format';
import { codeParts, gpuView } from './gpu';
import {
  IFacts,
  ISample,
  isNumber,
  isUnavailable,
  IUnavailable
} from './protocol';
import { formatBytes } from './format';
import { formatClock, IWording } from './timeline';
import { el } from './dom';
import {
  bytesOrDash,
  ISectionFrame,
  sectionFrame,
  sectionLine
} from './section';
import { isGpuDevice, sumDevices } from './series';

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

/**
 * "as of cell [7], 12:03:04": facts read on the main thread after that cell, at the time [7]
 * ended where the kernel says it (1.7), not when the panel asked (`ts`, maybe minutes later).
 */
function asOf(trans: IWording, facts: IFacts): string {
  return trans.__(
    'as of cell [%1], %2',
    facts.execution_count,
    formatClock(facts.cell_ended_ts ?? facts.ts)
  );
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

/** TensorFlow: one quiet line until its runtime runs, then the pool and the graph facts. */
export class TfSection {
  constructor(private readonly _trans: IWording) {
    this._frame = sectionFrame('tf', _trans.__('TensorFlow'));
    this._lines = el('div', 'jp-KerasMagic-lines');
    this._frame.node.appendChild(this._lines);
    this.node = this._frame.node;
  }

  readonly node: HTMLElement;

  render(sample: ISample | null, facts: IFacts | null): void {
    const trans = this._trans;
    const section = this._frame;
    this._lines.textContent = '';
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
      this._renderPool(sample);
    }
    if (!facts || stageOf(facts.tf_status) !== 'running') {
      // The sampler saw the runtime start during a cell; the facts come after it.
      sectionLine(
        this._lines,
        trans.__('Graph figures: after the running cell'),
        'graph'
      );
      return;
    }
    section.asOf.textContent = asOf(trans, facts);
    this._renderGraph(facts);
  }

  /** Why the allocator has no figure, or what its pool keeps unused. */
  private _renderPool(sample: ISample): void {
    const trans = this._trans;
    if (isUnavailable(sample.tf)) {
      return;
    }
    const cpu = (name: string) => !isGpuDevice(name);
    const unused = sumDevices(sample.tf, 'held_unused_min_bytes', cpu);
    const unsupported = Object.entries(sample.tf.devices).find(
      ([name, d]) => cpu(name) && isUnavailable(d.in_use_bytes)
    );
    if (unsupported) {
      const why = unsupported[1].in_use_bytes as IUnavailable;
      sectionLine(
        this._lines,
        trans.__('%1: %2', unsupported[0], why.detail ?? why.reason),
        'allocator'
      );
    } else if (unused) {
      sectionLine(
        this._lines,
        trans.__(
          'The pool keeps at least %1 unused; it never shrinks (only a new process returns it).',
          formatBytes(unused)
        ),
        'allocator'
      );
    }
  }

  private _renderGraph(facts: IFacts): void {
    const trans = this._trans;
    const ops = facts.graph_op_count;
    const entries = facts.custom_gradient_entries;
    const graph = sectionLine(
      this._lines,
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

  private _frame: ISectionFrame;
  private _lines: HTMLElement;
}

/**
 * NVML's devices and each framework's allocator (whose number each is, what its pool
 * keeps unused and the remedy), or one quiet line saying why there is no GPU view.
 */
export class GpuSection {
  constructor(private readonly _trans: IWording) {
    this._frame = sectionFrame('gpu', _trans.__('GPU'));
    this._lines = el('div', 'jp-KerasMagic-lines');
    this._frame.node.appendChild(this._lines);
    this.node = this._frame.node;
  }

  readonly node: HTMLElement;

  /** `sample` null: a kernel with no sample yet, no GPU section. */
  render(sample: ISample | null): void {
    const trans = this._trans;
    const section = this._frame;
    this._lines.textContent = '';
    section.node.hidden = sample === null;
    if (sample === null) {
      return;
    }
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
      const node = sectionLine(
        this._lines,
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

  private _frame: ISectionFrame;
  private _lines: HTMLElement;
}

/** Keras: one quiet line until it is imported, then name counters and live models. */
export class KerasSection {
  constructor(private readonly _trans: IWording) {
    this._frame = sectionFrame('keras', _trans.__('Keras'));
    this._counters = el('div', 'jp-KerasMagic-counters');
    this._frame.node.appendChild(this._counters);
    this._modelsTitle = el('div', 'jp-KerasMagic-subTitle', '');
    this._frame.node.appendChild(this._modelsTitle);
    this._models = el('ul', 'jp-KerasMagic-models');
    this._frame.node.appendChild(this._models);
    this.node = this._frame.node;
  }

  readonly node: HTMLElement;

  /**
   * `runningCell`: whether a cell runs now (its number, or true where not known); `facts`
   * null: a kernel that sent none yet (the title alone).
   */
  render(facts: IFacts | null, runningCell: number | boolean): void {
    const trans = this._trans;
    const section = this._frame;
    this._counters.textContent = '';
    this._models.textContent = '';
    if (facts === null) {
      section.title.textContent = trans.__('Keras');
      section.asOf.textContent = '';
      this._modelsTitle.textContent = '';
      return;
    }
    const quiet = stageOf(facts.keras_status) === 'not_imported';
    section.node.dataset.quiet = String(quiet);
    this._counters.hidden = quiet;
    this._modelsTitle.hidden = quiet;
    this._models.hidden = quiet;
    section.asOf.textContent = asOf(trans, facts);
    if (quiet) {
      // Read after the previous cell: the running one may be importing it now.
      section.title.textContent = trans.__('Keras not imported');
      return;
    }
    section.title.textContent = trans.__('Keras');
    this._renderCounters(facts);
    this._renderModels(facts, runningCell);
  }

  private _renderCounters(facts: IFacts): void {
    const trans = this._trans;
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
  }

  private _renderModels(facts: IFacts, running: number | boolean): void {
    const trans = this._trans;
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

  private _frame: ISectionFrame;
  private _counters: HTMLElement;
  private _models: HTMLElement;
  private _modelsTitle: HTMLElement;
}
