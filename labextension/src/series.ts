/**
 * The one series table: each line the sidebar records and may draw is one row, with its
 * history key, how it is derived from a `sample` or `facts` message, and, for a charted one,
 * its label and style. A newcomer adds a series by adding a row (issue 31).
 */

import { IWording } from './clearing';
import { allocatorInUse, allocatorNames } from './gpu';
import { SeriesHistory } from './history';
import {
  IDeviceAllocator,
  IFacts,
  ISample,
  isNumber,
  isUnavailable,
  MaybeNumber
} from './protocol';
import { ISeriesSpec, SeriesUnit } from './chartgeometry';

/** Series names the panel draws; bytes unless the name says otherwise. */
export const SERIES = {
  rss: 'rss',
  tfInUse: 'tf_in_use',
  tfHeld: 'tf_held',
  /** What the allocators have in use on the GPUs: TF in use + torch allocated + JAX in use. */
  gpuAllocInUse: 'gpu_allocators_in_use',
  nvmlProcess: 'nvml_process',
  nvmlUsed: 'nvml_used',
  customGradients: 'custom_gradient_entries',
  liveModels: 'live_models_count',
  /** The kernel process's CPU use, % of one core (protocol 1.3+). */
  cpu: 'cpu_pct'
} as const;

/** Sum one allocator field over the devices `select` keeps; null when none has a number. */
export function sumDevices(
  tf: ISample['tf'],
  field: keyof IDeviceAllocator,
  select: (device: string) => boolean
): number | null {
  if (isUnavailable(tf)) {
    return null;
  }
  let total: number | null = null;
  for (const [name, device] of Object.entries(tf.devices)) {
    const value: MaybeNumber = device[field];
    if (select(name) && isNumber(value)) {
      total = (total ?? 0) + value;
    }
  }
  return total;
}

export const isGpuDevice = (name: string): boolean => /GPU/i.test(name);

/** Sum one NVML field over the devices; null when none has a number. */
export function sumGpu(
  gpu: ISample['gpu'],
  field: 'used_bytes' | 'total_bytes' | 'process_used_bytes'
): number | null {
  if (isUnavailable(gpu)) {
    return null;
  }
  let total: number | null = null;
  for (const device of gpu) {
    if (!isUnavailable(device) && isNumber(device[field])) {
      total = (total ?? 0) + (device[field] as number);
    }
  }
  return total;
}

/** What a charted series looks like: its legend's label, its stroke and its axis. */
export interface ISeriesLook {
  /** The legend's words; `sample` is the latest (a label may name what it has). */
  label: (trans: IWording, sample: ISample | null) => string;
  /** Its stroke style: `jp-KerasMagic-series-<style>`. */
  style: string;
  unit: SeriesUnit;
}

/** One row: a series recorded from `sample` messages or from `facts` messages. */
export type SeriesRow =
  | {
      key: string;
      source: 'sample';
      derive: (sample: ISample) => number | null;
      chart?: ISeriesLook;
    }
  | {
      key: string;
      source: 'facts';
      derive: (facts: IFacts) => number | null;
      chart?: ISeriesLook;
    };

const notGpu = (name: string) => !isGpuDevice(name);
const tfInUse = (sample: ISample) =>
  sumDevices(sample.tf, 'in_use_bytes', notGpu);

/** Every series, in the chart's legend order for the charted ones. */
export const SERIES_TABLE: SeriesRow[] = [
  {
    key: SERIES.rss,
    source: 'sample',
    derive: s => (isNumber(s.rss_bytes) ? s.rss_bytes : null),
    chart: { label: t => t.__('Kernel RSS'), style: 'rss', unit: 'bytes' }
  },
  {
    key: SERIES.tfInUse,
    source: 'sample',
    derive: tfInUse,
    chart: { label: t => t.__('TF in use'), style: 'inuse', unit: 'bytes' }
  },
  {
    key: SERIES.tfHeld,
    source: 'sample',
    derive: s => {
      const inUse = tfInUse(s);
      const unused = sumDevices(s.tf, 'held_unused_min_bytes', notGpu);
      return inUse === null ? null : inUse + (unused ?? 0);
    },
    chart: { label: t => t.__('TF held'), style: 'held', unit: 'bytes' }
  },
  {
    key: SERIES.nvmlProcess,
    source: 'sample',
    derive: s => sumGpu(s.gpu, 'process_used_bytes'),
    chart: {
      label: t => t.__('GPU this kernel (NVML)'),
      style: 'gpu',
      unit: 'bytes'
    }
  },
  {
    key: SERIES.gpuAllocInUse,
    source: 'sample',
    derive: allocatorInUse,
    chart: {
      // Named after the frameworks the latest sample has GPU figures for.
      label: (t, sample) =>
        t.__(
          'GPU in use (%1)',
          (sample && allocatorNames(sample).join(' + ')) || t.__('allocators')
        ),
      style: 'gpualloc',
      unit: 'bytes'
    }
  },
  {
    key: SERIES.nvmlUsed,
    source: 'sample',
    derive: s => sumGpu(s.gpu, 'used_bytes')
  },
  {
    key: SERIES.cpu,
    source: 'sample',
    derive: s => (isNumber(s.cpu_pct) ? s.cpu_pct : null),
    chart: { label: t => t.__('CPU'), style: 'cpu', unit: 'pct' }
  },
  {
    // Counted in every sample (later 1.7 kernels), so a search loop's growth inside one cell shows;
    // `facts` carries the count after each cell for the TensorFlow section's line.
    key: SERIES.customGradients,
    source: 'sample',
    derive: s =>
      isNumber(s.custom_gradient_entries) ? s.custom_gradient_entries : null,
    // Lesson 6's second story: +2 per trial with clear_session() up to TF 2.21 (each pins a
    // graph), flat after each clean; drawn on a count scale of its own.
    chart: {
      label: t => t.__('CustomGradient entries'),
      style: 'entries',
      unit: 'count'
    }
  },
  {
    key: SERIES.liveModels,
    source: 'facts',
    derive: f => (Array.isArray(f.live_models) ? f.live_models.length : null)
  }
];

/** Add one sample's numbers to the history (a null is a gap in the sparkline). */
export function recordSample(history: SeriesHistory, sample: ISample): void {
  for (const row of SERIES_TABLE) {
    if (row.source === 'sample') {
      history.add(row.key, sample.ts, row.derive(sample));
    }
  }
}

/** Add one facts message's numbers to the history. */
export function recordFacts(history: SeriesHistory, facts: IFacts): void {
  for (const row of SERIES_TABLE) {
    if (row.source === 'facts') {
      history.add(row.key, facts.ts, row.derive(facts));
    }
  }
}

/**
 * The chart's series, from the table's charted rows.
 *
 * Example: a sample with TF and no GPU → the `rss`, `tf_in_use`, `tf_held`, `nvml_process`,
 * `gpu_allocators_in_use` (labelled `GPU in use (allocators)`) and `cpu_pct` specs.
 */
export function chartSeries(
  trans: IWording,
  sample: ISample | null
): ISeriesSpec[] {
  const specs: ISeriesSpec[] = [];
  for (const row of SERIES_TABLE) {
    if (row.chart) {
      const { label, style, unit } = row.chart;
      specs.push({ key: row.key, label: label(trans, sample), style, unit });
    }
  }
  return specs;
}
