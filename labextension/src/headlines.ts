/**
 * The panel's big numbers: the kernel's RSS, TensorFlow in use, the GPU, CPU and the host's
 * free memory. A tile with no number for this kernel is hidden, not a dash; each says whose
 * figure it is (its hover), as jupyter-resource-usage and top would count it.
 */

import { formatBytes } from './format';
import { allocatorInUse, gpuHeadlineSub } from './gpu';
import { ISample, isNumber, isUnavailable } from './protocol';
import { IHostMemory } from './record';
import { rssReconciliation } from './reconcile';
import { isGpuDevice, sumDevices, sumGpu } from './series';
import { formatPct, IWording } from './timeline';
import { el } from './dom';
import { bytesOrDash } from './section';

interface IHeadline {
  node: HTMLElement;
  value: HTMLElement;
  sub: HTMLElement;
}

/** The tiles' row. */
export class HeadlinesSection {
  /** `panelNode`: where the browser tests read the figures (its data attributes). */
  constructor(
    private readonly _trans: IWording,
    private readonly _panelNode: HTMLElement
  ) {
    const trans = _trans;
    this.node = el('div', 'jp-KerasMagic-headlines');
    this._tiles = {
      rss: this._tile(
        'rss',
        trans.__('Kernel RSS'),
        trans.__("The kernel process's resident memory (the OS)")
      ),
      tf: this._tile(
        'tf',
        trans.__('TF in use'),
        trans.__(
          "TensorFlow's CPU allocator: bytes its tensors use, and what its pool holds (a lower bound)"
        )
      ),
      gpu: this._tile(
        'gpu',
        trans.__('GPU, this kernel'),
        trans.__(
          "This kernel's GPU memory per NVML; below it, what each framework's allocator has in use (TF in use, torch allocated, JAX in use)"
        )
      ),
      cpu: this._tile(
        'cpu',
        trans.__('CPU'),
        trans.__("The kernel process's CPU use, % of one core")
      ),
      host: this._tile(
        'host',
        trans.__('Host memory'),
        trans.__("The machine's available memory, of its total")
      )
    };
  }

  readonly node: HTMLElement;

  /** The tiles for `sample`, and the host's memory from the latest sample that had it. */
  render(sample: ISample, host: IHostMemory | null): void {
    const trans = this._trans;
    const h = this._tiles;
    // Whose figure it is, and how it meets top's and jupyter-resource-usage's (the hover).
    const rss = rssReconciliation(sample, trans);
    this._show(h.rss, bytesOrDash(sample.rss_bytes), rss.lines.join('\n'));
    h.rss.node.title = rss.title;
    const tree = sample.process_tree;
    const data = this._panelNode.dataset;
    data.pssBytes =
      tree && !isUnavailable(tree) && isNumber(tree.pss_bytes)
        ? String(tree.pss_bytes)
        : '';
    data.withChildrenBytes =
      rss.withChildrenBytes === null ? '' : String(rss.withChildrenBytes);
    const cpu = (name: string) => !isGpuDevice(name);
    const inUse = sumDevices(sample.tf, 'in_use_bytes', cpu);
    const unused = sumDevices(sample.tf, 'held_unused_min_bytes', cpu);
    this._show(
      h.tf,
      inUse === null ? null : formatBytes(inUse),
      inUse === null
        ? ''
        : trans.__('held %1', formatBytes(inUse + (unused ?? 0)))
    );
    const proc = sumGpu(sample.gpu, 'process_used_bytes');
    // Where NVML cannot name this kernel (no driver view, a container's PID namespace) the
    // allocators' own figures stand in, and the sub-line says whose they are.
    const gpuValue = proc ?? allocatorInUse(sample);
    this._show(
      h.gpu,
      gpuValue === null ? null : formatBytes(gpuValue),
      gpuHeadlineSub(sample, proc !== null, trans)
    );
    this._show(
      h.cpu,
      isNumber(sample.cpu_pct) ? formatPct(sample.cpu_pct) : null,
      trans.__('of one core')
    );
    this._show(
      h.host,
      host ? formatBytes(host.availableBytes) : null,
      host ? trans.__('free of %1', formatBytes(host.totalBytes)) : ''
    );
  }

  private _tile(name: string, label: string, title: string): IHeadline {
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
    this.node.appendChild(node);
    return { node, value, sub };
  }

  private _show(tile: IHeadline, value: string | null, sub = ''): void {
    tile.node.hidden = value === null;
    tile.value.textContent = value ?? '';
    tile.sub.textContent = sub;
    tile.node.setAttribute(
      'aria-label',
      this._trans.__('%1: %2', tile.node.dataset.label ?? '', value ?? '') +
        (sub ? ` (${sub})` : '')
    );
  }

  private _tiles: { [name: string]: IHeadline };
}
