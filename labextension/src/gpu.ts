/**
 * The GPU as the sidebar tells it: NVML per device, then one row per framework allocator
 * (TensorFlow, torch, JAX), each saying whose number it is, with a "held, unused" line and
 * the remedy wherever a pool keeps memory it does not use, in `%tf_mem`'s words
 * (kerasmagic/snapshot.py). Pure functions of a sample, no DOM, so jest tests them; the
 * panel sets each line's text with textContent (device names come from the kernel).
 */

import { IWording } from './clearing';
import { formatBytes } from './format';
import {
  IGpuDevice,
  IJaxDevice,
  ISample,
  isNumber,
  isUnavailable,
  IUnavailable,
  MaybeNumber
} from './protocol';

/** A held-unused amount below this gets no remedy line: %tf_mem's threshold (64 MiB). */
export const WORTH_A_NOTE_BYTES = 64 * 2 ** 20;

/** The remedy that needs a new process (passed as an argument: gettext reads `%%` as `%`). */
const ISOLATE = '%%fresh_model --isolate';

/** Whose number a line gives. */
export type GpuWhose = 'nvml' | 'tf' | 'torch' | 'jax' | 'context';

export interface IGpuLine {
  /** `device` (NVML), `allocator` (a framework's figures), `unused` (what a pool keeps
   * unused), `remedy` (what gives it back), `context` (NVML beyond the pools), `note`. */
  kind: 'device' | 'allocator' | 'unused' | 'remedy' | 'context' | 'note';
  whose: GpuWhose;
  /** `cuda:0`, `gpu:0`, `GPU:0`, or NVML's index; '' for the context line. */
  device: string;
  text: string;
  /** More figures, on hover. */
  hint?: string;
}

export interface IGpuView {
  /** One quiet line: no NVML and no framework view with GPU figures. */
  quiet: boolean;
  /** `available`, or NVML's unavailable reason (`no_device` ...). */
  status: string;
  lines: IGpuLine[];
}

/** One framework's in-use figure on one GPU: TF in use, torch allocated, JAX in use. */
export interface IAllocatorFigure {
  framework: 'TF' | 'torch' | 'JAX';
  device: string;
  inUseBytes: number;
}

const TF_GPU = /GPU/i;

/**
 * Every allocator's in-use bytes per GPU in a sample (the ones with a number): TF's in use on
 * its GPU devices, torch's allocated, JAX's in use; reserved and pooled bytes never.
 *
 * Example: `sample_torch_cached` (2 GiB allocated, 3 GiB reserved) →
 * `[{framework: 'torch', device: 'cuda:0', inUseBytes: 2147483648}]`; a sample without
 * GPU frameworks → `[]`.
 */
export function allocatorFigures(sample: ISample): IAllocatorFigure[] {
  const figures: IAllocatorFigure[] = [];
  if (!isUnavailable(sample.tf)) {
    for (const [device, stats] of Object.entries(sample.tf.devices)) {
      if (TF_GPU.test(device) && isNumber(stats.in_use_bytes)) {
        figures.push({
          framework: 'TF',
          device,
          inUseBytes: stats.in_use_bytes
        });
      }
    }
  }
  const torch = sample.torch;
  if (torch !== undefined && !isUnavailable(torch)) {
    for (const [device, stats] of Object.entries(torch.devices)) {
      if (isNumber(stats.allocated_bytes)) {
        figures.push({
          framework: 'torch',
          device,
          inUseBytes: stats.allocated_bytes
        });
      }
    }
  }
  const jax = sample.jax;
  if (jax !== undefined && !isUnavailable(jax)) {
    for (const [device, stats] of Object.entries(jax.devices)) {
      if (isNumber(stats.in_use_bytes)) {
        figures.push({
          framework: 'JAX',
          device,
          inUseBytes: stats.in_use_bytes
        });
      }
    }
  }
  return figures;
}

/**
 * What the allocators have in use on the GPUs, summed: TF in use + torch allocated + JAX in
 * use; null when no framework has a GPU figure.
 *
 * Example: a torch sample with 2 GiB allocated and 3 GiB reserved → `2147483648`.
 */
export function allocatorInUse(sample: ISample): number | null {
  const figures = allocatorFigures(sample);
  return figures.length
    ? figures.reduce((total, f) => total + f.inUseBytes, 0)
    : null;
}

/** The frameworks with GPU figures in a sample, in a fixed order: `['torch', 'JAX']`. */
export function allocatorNames(sample: ISample): string[] {
  const seen = new Set(allocatorFigures(sample).map(f => f.framework));
  const order: Array<IAllocatorFigure['framework']> = ['TF', 'torch', 'JAX'];
  return order.filter(name => seen.has(name));
}

/**
 * The GPU headline tile's sub-line: each framework's in-use figure under NVML's number
 * ("torch 2.00 GiB · JAX 512 MiB"), or, where NVML has no number for this kernel, whose
 * view the tile's number is.
 */
export function gpuHeadlineSub(
  sample: ISample,
  nvmlHasNumber: boolean,
  trans: IWording
): string {
  const figures = allocatorFigures(sample);
  const names = allocatorNames(sample);
  if (!nvmlHasNumber) {
    return names.length ? trans.__('%1 in use', names.join(' + ')) : '';
  }
  return names
    .map(name =>
      trans.__(
        '%1 %2',
        name,
        formatBytes(
          figures
            .filter(f => f.framework === name)
            .reduce((total, f) => total + f.inUseBytes, 0)
        )
      )
    )
    .join(' · ');
}

const bytes = (value: MaybeNumber | null | undefined): string =>
  isNumber(value) ? formatBytes(value) : '–';

function nvmlLine(device: IGpuDevice, trans: IWording): IGpuLine {
  return {
    kind: 'device',
    whose: 'nvml',
    device: String(device.index),
    text: trans.__(
      'GPU %1 %2: %3 of %4 used, this kernel %5 (NVML)',
      device.index,
      device.name ?? '',
      bytes(device.used_bytes),
      bytes(device.total_bytes),
      bytes(device.process_used_bytes)
    ),
    hint: isNumber(device.utilisation_pct)
      ? trans.__('utilisation %1 %', device.utilisation_pct)
      : undefined
  };
}

function tfLines(sample: ISample, trans: IWording): IGpuLine[] {
  if (isUnavailable(sample.tf)) {
    return [];
  }
  const lines: IGpuLine[] = [];
  for (const [device, stats] of Object.entries(sample.tf.devices)) {
    if (!TF_GPU.test(device) || !isNumber(stats.in_use_bytes)) {
      continue;
    }
    const unused = stats.held_unused_min_bytes;
    lines.push({
      kind: 'allocator',
      whose: 'tf',
      device,
      text: trans.__(
        'TF %1: %2 in use (≥ %3 held, unused)',
        device,
        formatBytes(stats.in_use_bytes),
        bytes(unused)
      ),
      hint: trans.__('peak %1 (TF allocator)', bytes(stats.peak_bytes))
    });
    if (isNumber(unused) && unused >= WORTH_A_NOTE_BYTES) {
      lines.push({
        kind: 'remedy',
        whose: 'tf',
        device,
        text: trans.__(
          'TensorFlow keeps %1 of %2 in its pool until the process ends. Memory growth (TF_FORCE_GPU_ALLOW_GROWTH=true) takes only what is used, but only if set before TF first touches the GPU: restart the kernel, or run the work with %3.',
          formatBytes(unused),
          device,
          ISOLATE
        )
      });
    }
  }
  return lines;
}

function torchLines(sample: ISample, trans: IWording): IGpuLine[] {
  const torch = sample.torch;
  if (torch === undefined || isUnavailable(torch)) {
    return [];
  }
  const lines: IGpuLine[] = [];
  for (const [device, stats] of Object.entries(torch.devices)) {
    const unused = stats.held_unused_bytes;
    lines.push({
      kind: 'allocator',
      whose: 'torch',
      device,
      text: trans.__(
        'torch %1: %2 allocated, %3 reserved (%4 held, unused)',
        device,
        bytes(stats.allocated_bytes),
        bytes(stats.reserved_bytes),
        bytes(unused)
      ),
      hint: trans.__(
        'peak allocated %1 (torch, since start or reset_peak_memory_stats())',
        bytes(stats.peak_allocated_bytes)
      )
    });
    if (isNumber(unused) && unused >= WORTH_A_NOTE_BYTES) {
      lines.push({
        kind: 'remedy',
        whose: 'torch',
        device,
        text: trans.__(
          "torch keeps %1 of freed blocks cached on %2: Clear session empties torch's cache (torch.cuda.empty_cache()), no restart needed.",
          formatBytes(unused),
          device
        )
      });
    }
  }
  return lines;
}

/**
 * The story a JAX pool tells, as the kernel reads it from the pool itself (kerasmagic/probes/
 * jax_devices.py, `pool_story`; protocol 1.7, a device's `pool_story`): the sidebar words it
 * and never computes it. `unknown` where the kernel sent none (a kernel before 1.7) or one
 * this sidebar does not know.
 */
export type JaxPoolStory =
  | 'preallocated'
  | 'preallocated_off_now'
  | 'preallocated_fraction_now'
  | 'grown'
  | 'grown_platform_now'
  | 'unknown';

const JAX_POOL_STORIES: string[] = [
  'preallocated',
  'preallocated_off_now',
  'preallocated_fraction_now',
  'grown',
  'grown_platform_now'
];

/** A device's story code as sent, `unknown` for none or an unknown one. */
export function jaxPoolStory(stats: IJaxDevice): JaxPoolStory {
  const story = stats.pool_story ?? 'unknown';
  return JAX_POOL_STORIES.includes(story) ? (story as JaxPoolStory) : 'unknown';
}

/** The remedy for each story: the variables set now are %1 where a story names them. */
function jaxRemedy(
  story: JaxPoolStory,
  stats: IJaxDevice,
  trans: IWording
): string {
  const named = stats.named_now ?? '';
  switch (story) {
    case 'preallocated':
      return trans.__(
        'XLA_PYTHON_CLIENT_PREALLOCATE=false takes only what is used (XLA_PYTHON_CLIENT_MEM_FRACTION=.25 still preallocates, a quarter of the GPU instead of 75 %), but only if set before JAX starts: restart the kernel with it set, or run the work with %1.',
        ISOLATE
      );
    case 'preallocated_off_now':
      return trans.__(
        "The environment now has %1, but the pool is JAX's whole limit, so that was set after JAX started and only a new process reads it: restart the kernel, or run the work with %2.",
        named,
        ISOLATE
      );
    case 'preallocated_fraction_now':
      return trans.__(
        "The environment now has %1: the pool, JAX's whole limit (%2), is that fraction of the GPU only if it was set before JAX started; set after, only a new process reads it. XLA_PYTHON_CLIENT_PREALLOCATE=false takes only what is used, but only if set before JAX starts: restart the kernel with it set, or run the work with %3.",
        named,
        bytes(stats.limit_bytes),
        ISOLATE
      );
    case 'grown':
      return trans.__(
        'XLA_PYTHON_CLIENT_ALLOCATOR=platform frees memory when arrays are deleted (allocations get slower), but only in a new process: restart the kernel with it set, or run the work with %1.',
        ISOLATE
      );
    case 'grown_platform_now':
      return trans.__(
        'The environment now has %1, but JAX keeps a pool, so that was set after JAX started and only a new process reads it: restart the kernel, or run the work with %2.',
        named,
        ISOLATE
      );
    default:
      return trans.__(
        'Only a new process gives it back: restart the kernel, or run the work with %1.',
        ISOLATE
      );
  }
}

/**
 * Why a JAX pool holds more than it uses and what gives it back, in `%tf_mem`'s words
 * (kerasmagic/snapshot.py, `jax_advice`), for the story the kernel sent.
 *
 * Example: a device with `pool_story: 'grown'` → `{why: "the pool's high-water mark: it grew
 * on demand and never shrinks", remedy: 'XLA_PYTHON_CLIENT_ALLOCATOR=platform frees memory
 * when arrays are deleted …'}`.
 */
export function jaxAdvice(
  stats: IJaxDevice,
  trans: IWording
): { story: JaxPoolStory; why: string; remedy: string } {
  const story = jaxPoolStory(stats);
  const why = story.startsWith('preallocated')
    ? trans.__('preallocated when JAX started: the pool is its whole limit')
    : story.startsWith('grown')
      ? trans.__(
          "the pool's high-water mark: it grew on demand and never shrinks"
        )
      : trans.__('pool − in use');
  return { story, why, remedy: jaxRemedy(story, stats, trans) };
}

function jaxLines(sample: ISample, trans: IWording): IGpuLine[] {
  const jax = sample.jax;
  if (jax === undefined || isUnavailable(jax)) {
    return [];
  }
  const lines: IGpuLine[] = [];
  for (const [device, stats] of Object.entries(jax.devices)) {
    const unused = stats.held_unused_bytes;
    lines.push({
      kind: 'allocator',
      whose: 'jax',
      device,
      text: trans.__(
        'JAX %1: %2 in use of a %3 pool',
        device,
        bytes(stats.in_use_bytes),
        bytes(stats.pool_bytes)
      ),
      hint: trans.__(
        'peak %1 · limit %2 (JAX allocator, XLA BFC pool)',
        bytes(stats.peak_bytes),
        bytes(stats.limit_bytes)
      )
    });
    if (isNumber(unused) && unused >= WORTH_A_NOTE_BYTES) {
      const advice = jaxAdvice(stats, trans);
      lines.push({
        kind: 'unused',
        whose: 'jax',
        device,
        text: trans.__(
          'JAX %1 held, unused: %2 (%3)',
          device,
          formatBytes(unused),
          advice.why
        )
      });
      lines.push({
        kind: 'remedy',
        whose: 'jax',
        device,
        text: advice.remedy
      });
    }
  }
  return lines;
}

/** The pools a `gpu_context` subtracts (kerasmagic/probes/sample.py, `CONTEXT_POOLS`), in words. */
function poolWords(pool: string, trans: IWording): string {
  switch (pool) {
    case 'torch_reserved':
      return trans.__('torch reserved');
    case 'jax_pool':
      return trans.__('JAX pool');
    case 'tf_pool':
      return trans.__('TF pool (at least)');
    default:
      return pool;
  }
}

/**
 * What NVML counts for this kernel beyond every framework's pool: the CUDA context and the
 * libraries' buffers, as the kernel estimates it (protocol 1.7, a sample's `gpu_context`;
 * kerasmagic/probes/sample.py, `cuda_context`, which `%tf_mem` uses too); null where the
 * kernel sent none. With TensorFlow's pool among those subtracted the figure is an upper
 * bound ("≤"): TF reports its pool only as at least its high-water mark.
 *
 * Example: `sample_torch_cached` (`{context_bytes: 543162368, upper_bound: false, pools:
 * ['torch_reserved']}`) → `{kind: 'context', text: 'CUDA context and libraries ≈ 518 MiB',
 * hint: 'NVML this kernel − torch reserved', …}`; `sample_gpu` (TF) → `'… ≤ …'`.
 */
export function contextLine(sample: ISample, trans: IWording): IGpuLine | null {
  const context = sample.gpu_context;
  if (!context) {
    return null;
  }
  const whose = context.pools.map(pool => poolWords(pool, trans)).join(' − ');
  const size = formatBytes(context.context_bytes);
  return {
    kind: 'context',
    whose: 'context',
    device: '',
    text: context.upper_bound
      ? trans.__('CUDA context and libraries ≤ %1', size)
      : trans.__('CUDA context and libraries ≈ %1', size),
    hint: context.upper_bound
      ? trans.__(
          'NVML this kernel − %1: an upper bound, as TF reports only a lower bound of its pool',
          whose
        )
      : trans.__('NVML this kernel − %1', whose)
  };
}

/**
 * The GPU section's lines for a sample: NVML's devices, then each allocator (with its held,
 * unused line and remedy where a pool keeps 64 MiB or more it does not use), then the context.
 *
 * Example: `sample_jax_preallocated` → `{quiet: false, status: 'available', lines: [
 * {kind: 'device', text: 'GPU 0 NVIDIA H100 80GB HBM3: 60.4 GiB of 79.6 GiB used, this kernel
 * 59.9 GiB (NVML)'}, {kind: 'allocator', text: 'JAX gpu:0: 512 MiB in use of a 59.4 GiB pool'},
 * {kind: 'unused', …}, {kind: 'remedy', …}, {kind: 'context', text: 'CUDA context and
 * libraries ≈ 550 MiB'}]}`; no NVML and no framework → `{quiet: true, status: 'no_device',
 * lines: []}`.
 */
export function gpuView(sample: ISample, trans: IWording): IGpuView {
  const frameworks = [
    ...tfLines(sample, trans),
    ...torchLines(sample, trans),
    ...jaxLines(sample, trans)
  ];
  const lines: IGpuLine[] = [];
  let status = 'available';
  if (isUnavailable(sample.gpu)) {
    const why: IUnavailable = sample.gpu;
    status = why.reason;
    if (frameworks.length) {
      lines.push({
        kind: 'note',
        whose: 'nvml',
        device: '',
        text: trans.__('NVML: %1', why.detail ?? why.reason)
      });
    }
  } else {
    for (const device of sample.gpu) {
      lines.push(
        isUnavailable(device)
          ? {
              kind: 'note',
              whose: 'nvml',
              device: '',
              text: device.detail ?? device.reason
            }
          : nvmlLine(device, trans)
      );
    }
  }
  lines.push(...frameworks);
  const context = contextLine(sample, trans);
  if (context) {
    lines.push(context);
  }
  return {
    quiet: isUnavailable(sample.gpu) && !frameworks.length,
    status,
    lines
  };
}

/** What a reader types: the variables, the magic and the call named in a remedy. */
const CODE =
  /(XLA_(?:PYTHON_)?CLIENT_[A-Z_]+=[\w.]+|TF_FORCE_GPU_ALLOW_GROWTH=true|%%fresh_model --isolate|torch\.cuda\.empty_cache\(\))/;

/**
 * A remedy's text cut into prose and code (set in the code font, and where a 250 px panel
 * may break a long variable name: after its underscores).
 *
 * Example: `codeParts('set X or run %%fresh_model --isolate.')` →
 * `[{code: false, text: 'set X or run '}, {code: true, text: '%%fresh_model --isolate'},
 * {code: false, text: '.'}]`.
 */
export function codeParts(
  text: string
): Array<{ code: boolean; text: string }> {
  return text
    .split(CODE)
    .map((part, i) => ({ code: i % 2 === 1, text: part }))
    .filter(part => part.text !== '');
}
