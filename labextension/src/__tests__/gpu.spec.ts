/**
 * The sidebar's GPU rows (gpu.ts) on the protocol fixtures built from readings recorded on
 * an H100 (benchmarks/results/h100-2026-11-22/), which the Python side validates too.
 */
import { readFixture } from './fixtures';

import { IWording } from '../clearing';
import {
  allocatorFigures,
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

/**
 * A fixture's sample with the story the kernel tells of its pool and the variables set now it
 * names (kerasmagic/probes/jax_devices.py decides them: tests/core/test_gpu_allocators.py).
 */
function withStory(name: string, story: string, named: string): ISample {
  const data = sample(name);
  if (data.jax && 'devices' in data.jax) {
    data.jax.devices['gpu:0'].pool_story = story;
    data.jax.devices['gpu:0'].named_now = named;
  }
  return data;
}

const ISOLATE = '%%fresh_model --isolate';
// %tf_mem says the same (tests/core/test_gpu_allocators.py): the why, then the remedy.
const PREALLOCATED =
  'JAX gpu:0 held, unused: 58.9 GiB (preallocated when JAX started: the pool is its whole limit)';
const GROWN =
  "JAX gpu:0 held, unused: 514 MiB (the pool's high-water mark: it grew on demand and never shrinks)";

describe('JAX rows', () => {
  it('show the preallocated pool, why, and the remedy that needs a new process', () => {
    const view = gpuView(sample('sample_jax_preallocated'), trans);
    expect(texts(view.lines, 'allocator')).toEqual([
      'JAX gpu:0: 512 MiB in use of a 59.4 GiB pool'
    ]);
    expect(texts(view.lines, 'unused')).toEqual([PREALLOCATED]);
    expect(texts(view.lines, 'remedy')).toEqual([
      `XLA_PYTHON_CLIENT_PREALLOCATE=false takes only what is used (XLA_PYTHON_CLIENT_MEM_FRACTION=.25 still preallocates, a quarter of the GPU instead of 75 %), but only if set before JAX starts: restart the kernel with it set, or run the work with ${ISOLATE}.`
    ]);
    expect(contextLine(sample('sample_jax_preallocated'), trans)?.text).toBe(
      'CUDA context and libraries ≈ 550 MiB'
    );
  });

  it.each([
    'XLA_PYTHON_CLIENT_PREALLOCATE=false',
    'XLA_PYTHON_CLIENT_PREALLOCATE=0 and XLA_PYTHON_CLIENT_ALLOCATOR=platform'
  ])(
    'preallocated, with %s set after JAX started: say so, never ask for it again',
    named => {
      const data = withStory(
        'sample_jax_preallocated',
        'preallocated_off_now',
        named
      );
      const view = gpuView(data, trans);
      expect(texts(view.lines, 'unused')).toEqual([PREALLOCATED]);
      expect(texts(view.lines, 'remedy')).toEqual([
        `The environment now has ${named}, but the pool is JAX's whole limit, so that was set after JAX started and only a new process reads it: restart the kernel, or run the work with ${ISOLATE}.`
      ]);
    }
  );

  it('preallocated, with a fraction set now: the limit, not the kernel, tells whether it is in force', () => {
    const data = withStory(
      'sample_jax_preallocated',
      'preallocated_fraction_now',
      'XLA_PYTHON_CLIENT_MEM_FRACTION=.5'
    );
    expect(texts(gpuView(data, trans).lines, 'remedy')).toEqual([
      `The environment now has XLA_PYTHON_CLIENT_MEM_FRACTION=.5: the pool, JAX's whole limit (59.4 GiB), is that fraction of the GPU only if it was set before JAX started; set after, only a new process reads it. XLA_PYTHON_CLIENT_PREALLOCATE=false takes only what is used, but only if set before JAX starts: restart the kernel with it set, or run the work with ${ISOLATE}.`
    ]);
  });

  it('grown without preallocation: the high-water mark, and the platform allocator in a new process', () => {
    const data = sample('sample_jax_grown_pool');
    const view = gpuView(data, trans);
    expect(texts(view.lines, 'allocator')).toEqual([
      'JAX gpu:0: 0 B in use of a 514 MiB pool'
    ]);
    expect(texts(view.lines, 'unused')).toEqual([GROWN]);
    const [remedy] = texts(view.lines, 'remedy');
    expect(remedy).toBe(
      `XLA_PYTHON_CLIENT_ALLOCATOR=platform frees memory when arrays are deleted (allocations get slower), but only in a new process: restart the kernel with it set, or run the work with ${ISOLATE}.`
    );
    // The variable this kernel already has is not what to set.
    expect(remedy).not.toContain('XLA_PYTHON_CLIENT_PREALLOCATE');
    expect(
      codeParts(remedy)
        .filter(p => p.code)
        .map(p => p.text)
    ).toEqual(['XLA_PYTHON_CLIENT_ALLOCATOR=platform', ISOLATE]);
  });

  it('grown, with the platform allocator set after JAX started: say so', () => {
    const data = withStory(
      'sample_jax_grown_pool',
      'grown_platform_now',
      'XLA_PYTHON_CLIENT_ALLOCATOR=platform'
    );
    const view = gpuView(data, trans);
    expect(texts(view.lines, 'unused')).toEqual([GROWN]);
    expect(texts(view.lines, 'remedy')).toEqual([
      `The environment now has XLA_PYTHON_CLIENT_ALLOCATOR=platform, but JAX keeps a pool, so that was set after JAX started and only a new process reads it: restart the kernel, or run the work with ${ISOLATE}.`
    ]);
  });

  it.each([
    ['unknown', 'the kernel found no limit to compare the pool with'],
    [undefined, 'a kernel before 1.7 sent no story'],
    ['shrunk', 'a newer kernel sent a story this sidebar does not know']
  ])('without a story it knows (%s: %s): no cause claimed', (story, why) => {
    expect(why).toBeTruthy();
    const data = sample('sample_jax_grown_pool');
    if (data.jax && 'devices' in data.jax) {
      data.jax.devices['gpu:0'].pool_story = story;
    }
    const view = gpuView(data, trans);
    expect(texts(view.lines, 'unused')).toEqual([
      'JAX gpu:0 held, unused: 514 MiB (pool − in use)'
    ]);
    expect(texts(view.lines, 'remedy')).toEqual([
      `Only a new process gives it back: restart the kernel, or run the work with ${ISOLATE}.`
    ]);
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

  it('make the context an upper bound: TF gives its pool only as at least', () => {
    // NVML this kernel 75.0 GB − TF's pool of at least 4 GiB (in use + held unused).
    const context = contextLine(sample('sample_gpu'), trans);
    expect(context?.text).toBe('CUDA context and libraries ≤ 65.8 GiB');
    expect(context?.hint).toBe(
      'NVML this kernel − TF pool (at least): an upper bound, as TF reports only a lower bound of its pool'
    );
    // With torch beside it, still at most (the kernel's cuda_context decides:
    // tests/live/test_sample_gpu_allocators.py); each pool named in the kernel's order.
    const both = sample('sample_torch_cached');
    both.gpu_context = {
      context_bytes: 262 * 2 ** 20,
      upper_bound: true,
      pools: ['torch_reserved', 'tf_pool']
    };
    expect(contextLine(both, trans)).toMatchObject({
      text: 'CUDA context and libraries ≤ 262 MiB',
      hint: 'NVML this kernel − torch reserved − TF pool (at least): an upper bound, as TF reports only a lower bound of its pool'
    });
    // Without the kernel's estimate (a kernel before 1.7), no line: never a guess.
    delete both.gpu_context;
    expect(contextLine(both, trans)).toBeNull();
    expect(contextLine(sample('sample_torch_cached'), trans)?.text).toBe(
      'CUDA context and libraries ≈ 518 MiB'
    );
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
    delete data.gpu_context; // as the kernel sends it: no NVML figure, nothing to subtract from
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

describe("the doc comments' examples", () => {
  it('hold for allocatorFigures and gpuView', () => {
    expect(allocatorFigures(sample('sample_torch_cached'))).toEqual([
      { framework: 'torch', device: 'cuda:0', inUseBytes: 2147483648 }
    ]);
    expect(allocatorFigures(sample('sample.json'))).toEqual([]);
    const view = gpuView(sample('sample_jax_preallocated'), trans);
    expect(view.quiet).toBe(false);
    expect(view.status).toBe('available');
    expect(view.lines.map(l => l.kind)).toEqual([
      'device',
      'allocator',
      'unused',
      'remedy',
      'context'
    ]);
    expect(view.lines[0].text).toBe(
      'GPU 0 NVIDIA H100 80GB HBM3: 60.4 GiB of 79.6 GiB used, this kernel 59.9 GiB (NVML)'
    );
  });
});
