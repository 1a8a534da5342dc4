/**
 * The sidebar's GPU rows (gpu.ts) on the protocol fixtures built from readings recorded on
 * an H100 (benchmarks/results/h100-2026-11-22/), which the Python side validates too.
 */
import { readFixture } from './fixtures';

import { IWording } from '../clearing';
import {
  allocatorInUse,
  allocatorNames,
  codeParts,
  contextLine,
  gpuHeadlineSub,
  gpuView,
  IGpuLine
} from '../gpu';
import { ISample, validate } from '../protocol';

/** What nullTranslator does: %1, %2 … replaced in order. */
const trans: IWording = {
  __: (msgid: string, ...args: any[]) =>
    msgid.replace(/%(\d+)/g, (_, n) => String(args[Number(n) - 1]))
};

function sample(name: string): ISample {
  const data = readFixture(name).data;
  expect(validate(data, 'to_frontend').ok).toBe(true);
  return data as ISample;
}

const texts = (lines: IGpuLine[], kind?: string) =>
  lines.filter(l => kind === undefined || l.kind === kind).map(l => l.text);

describe('torch rows', () => {
  it('say whose number each is, with what the cache holds unused and the remedy', () => {
    const view = gpuView(sample('sample_torch_cached'), trans);
    expect(view.quiet).toBe(false);
    expect(texts(view.lines, 'device')).toEqual([
      'GPU 0 NVIDIA H100 80GB HBM3: 3.98 GiB of 79.6 GiB used, this kernel 3.51 GiB (NVML)'
    ]);
    expect(texts(view.lines, 'allocator')).toEqual([
      'torch cuda:0: 2.00 GiB allocated, 3.00 GiB reserved (1.00 GiB held, unused)'
    ]);
    expect(texts(view.lines, 'remedy')).toEqual([
      "torch keeps 1.00 GiB of freed blocks cached on cuda:0: Clear session empties torch's cache (torch.cuda.empty_cache()), no restart needed."
    ]);
    // NVML this kernel − torch reserved: what NVML read once empty_cache() had returned all.
    const context = view.lines.find(l => l.kind === 'context');
    expect(context?.text).toBe('CUDA context and libraries ≈ 518 MiB');
    expect(context?.hint).toBe('NVML this kernel − torch reserved');
    expect(3764387840 - 3 * 2 ** 30).toBe(543162368);
  });

  it('give no remedy where the cache keeps little', () => {
    // Recorded: 256 MiB held, above %tf_mem's 64 MiB threshold; then 1 MiB, below it.
    const lines = gpuView(sample('sample_torch_nvml'), trans).lines;
    const row = lines.find(l => l.whose === 'torch' && l.kind === 'allocator');
    expect(row?.text).toBe(
      'torch cuda:0: 512 MiB allocated, 768 MiB reserved (256 MiB held, unused)'
    );
    expect(row?.hint).toContain('peak allocated 768 MiB');
    expect(lines.find(l => l.whose === 'nvml')?.hint).toBe('utilisation 2 %');
    const small = sample('sample_torch_nvml');
    if (small.torch && 'devices' in small.torch) {
      small.torch.devices['cuda:0'].held_unused_bytes = 2 ** 20;
    }
    expect(texts(gpuView(small, trans).lines, 'remedy')).toEqual([]);
  });
});

describe('JAX rows', () => {
  it('show the preallocated pool, why, and the remedy that needs a new process', () => {
    const view = gpuView(sample('sample_jax_preallocated'), trans);
    expect(texts(view.lines, 'allocator')).toEqual([
      'JAX gpu:0: 512 MiB in use of a 59.4 GiB pool'
    ]);
    expect(texts(view.lines, 'unused')).toEqual([
      'JAX gpu:0 held, unused: 58.9 GiB (default: 75 % of each GPU at start)'
    ]);
    const [remedy] = texts(view.lines, 'remedy');
    expect(remedy).toContain('XLA_PYTHON_CLIENT_PREALLOCATE=false');
    expect(remedy).toContain('XLA_PYTHON_CLIENT_MEM_FRACTION');
    expect(remedy).toContain('restart the kernel with it set');
    expect(remedy).toContain('%%fresh_model --isolate');
    expect(contextLine(sample('sample_jax_preallocated'), trans)?.text).toBe(
      'CUDA context and libraries ≈ 550 MiB'
    );
  });

  it('without preallocation: the pool is what is used, no held-unused line', () => {
    const view = gpuView(sample('sample_jax_no_preallocation'), trans);
    expect(texts(view.lines, 'allocator')).toEqual([
      'JAX gpu:0: 512 MiB in use of a 514 MiB pool'
    ]);
    expect(texts(view.lines, 'unused')).toEqual([]);
    expect(texts(view.lines, 'remedy')).toEqual([]);
  });
});

describe('TensorFlow GPU rows', () => {
  it('show in use, held unused and the memory-growth remedy', () => {
    const view = gpuView(sample('sample_gpu'), trans);
    expect(texts(view.lines, 'allocator')).toEqual([
      'TF GPU:0: 2.00 GiB in use (≥ 2.00 GiB held, unused)'
    ]);
    const [remedy] = texts(view.lines, 'remedy');
    expect(remedy).toContain('TF_FORCE_GPU_ALLOW_GROWTH=true');
    expect(remedy).toContain('%%fresh_model --isolate');
  });
});

describe('without a GPU view', () => {
  it('is one quiet line when no framework started its GPU side either', () => {
    const view = gpuView(sample('sample_torch_jax_not_started'), trans);
    expect(view).toEqual({ quiet: true, status: 'no_device', lines: [] });
    expect(allocatorInUse(sample('sample_torch_jax_not_started'))).toBeNull();
  });

  it("shows the frameworks' own figures where NVML has none", () => {
    const data = sample('sample_torch_cached');
    data.gpu = {
      status: 'unavailable',
      reason: 'no_device',
      detail: 'no NVIDIA driver'
    };
    const view = gpuView(data, trans);
    expect(view.quiet).toBe(false);
    expect(texts(view.lines)).toEqual([
      'NVML: no NVIDIA driver',
      'torch cuda:0: 2.00 GiB allocated, 3.00 GiB reserved (1.00 GiB held, unused)',
      "torch keeps 1.00 GiB of freed blocks cached on cuda:0: Clear session empties torch's cache (torch.cuda.empty_cache()), no restart needed."
    ]);
    expect(gpuHeadlineSub(data, false, trans)).toBe('torch in use');
  });
});

describe('the headline and the timeline', () => {
  it("name each framework's in-use figure under NVML's number", () => {
    expect(gpuHeadlineSub(sample('sample_torch_cached'), true, trans)).toBe(
      'torch 2.00 GiB'
    );
    expect(gpuHeadlineSub(sample('sample_gpu'), true, trans)).toBe(
      'TF 2.00 GiB'
    );
    expect(gpuHeadlineSub(sample('sample_jax_preallocated'), true, trans)).toBe(
      'JAX 512 MiB'
    );
    expect(gpuHeadlineSub(sample('sample.json'), true, trans)).toBe('');
  });

  it("sum TF's, torch's and JAX's in-use bytes: never reserved or pooled bytes", () => {
    const data = sample('sample_gpu');
    data.torch = sample('sample_torch_cached').torch;
    data.jax = sample('sample_jax_preallocated').jax;
    expect(allocatorInUse(data)).toBe(
      2 * 2 ** 30 + 2 * 2 ** 30 + 512 * 2 ** 20
    );
    expect(allocatorNames(data)).toEqual(['TF', 'torch', 'JAX']);
    expect(gpuHeadlineSub(data, true, trans)).toBe(
      'TF 2.00 GiB · torch 2.00 GiB · JAX 512 MiB'
    );
  });
});

describe('remedies', () => {
  it('set what to type apart from the prose', () => {
    const [remedy] = texts(
      gpuView(sample('sample_jax_preallocated'), trans).lines,
      'remedy'
    );
    const parts = codeParts(remedy);
    expect(parts.filter(p => p.code).map(p => p.text)).toEqual([
      'XLA_PYTHON_CLIENT_PREALLOCATE=false',
      'XLA_PYTHON_CLIENT_MEM_FRACTION=.25',
      '%%fresh_model --isolate'
    ]);
    expect(parts.map(p => p.text).join('')).toBe(remedy);
    expect(codeParts('no code here')).toEqual([
      { code: false, text: 'no code here' }
    ]);
  });
});
