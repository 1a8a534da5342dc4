import { firstItems, readCleanReport } from '../clearing';

const trans = {
  __: (msgid: string, ...args: any[]) =>
    args.reduce<string>(
      (text, arg, i) => text.replace(`%${i + 1}`, String(arg)),
      msgid
    )
};

const REPORT = {
  seconds: 0.4,
  rss_before_bytes: 700,
  rss_after_bytes: 600,
  rss_freed_bytes: 100,
  tf_in_use_before_bytes: 50,
  tf_in_use_after_bytes: 20,
  tf_freed_bytes: 30,
  gpu_freed_bytes: 2048,
  models_tracked: 2,
  models_freed: 1,
  steps: [
    {
      name: 'delete named variables',
      detail: '1 variable(s)',
      items: ['variable model'],
      rss_freed_bytes: 0,
      skipped: null
    },
    {
      name: 'drop hidden holders',
      detail: '',
      items: ['Out[5]', '_5'],
      rss_freed_bytes: -4096,
      skipped: null
    },
    {
      name: 'clear JAX/torch caches',
      detail: '',
      items: [],
      rss_freed_bytes: 0,
      skipped: 'no JAX or torch imported'
    },
    {
      name: 'malloc_trim',
      detail: 'freed',
      items: ['not a holder'],
      rss_freed_bytes: 100
    }
  ],
  registry: { purged: 6 },
  still_held: ["Sequential 'a' (4 MiB) held by history.model"]
};

describe('readCleanReport', () => {
  it('reads the figures as changes (negative: freed)', () => {
    const summary = readCleanReport(REPORT)!;
    expect(summary).toMatchObject({
      seconds: 0.4,
      rssChange: -100,
      tfChange: -30,
      gpuChange: -2048,
      modelsFreed: 1,
      modelsTracked: 2,
      purged: 6
    });
    expect(summary.stillHeld).toEqual([
      "Sequential 'a' (4 MiB) held by history.model"
    ]);
  });

  it('takes dropped items from the reference steps only', () => {
    expect(readCleanReport(REPORT)!.dropped).toEqual([
      'variable model',
      'Out[5]',
      '_5'
    ]);
  });

  it('lists every step, a skipped one with its reason', () => {
    const steps = readCleanReport(REPORT)!.steps;
    expect(steps.map(s => s.name)).toHaveLength(4);
    expect(steps[1].rssChange).toBe(4096);
    expect(steps[2].skipped).toBe('no JAX or torch imported');
  });

  it('has no TF figure when TensorFlow held nothing before or after', () => {
    const summary = readCleanReport({
      ...REPORT,
      tf_in_use_before_bytes: 0,
      tf_in_use_after_bytes: 0,
      tf_freed_bytes: 0
    })!;
    expect(summary.tfChange).toBeNull();
  });

  it('copes with what is not a report, and with missing fields', () => {
    expect(readCleanReport(null)).toBeNull();
    expect(readCleanReport([1, 2])).toBeNull();
    expect(readCleanReport('text')).toBeNull();
    const empty = readCleanReport({ steps: [null, 3], still_held: [1, 'x'] })!;
    expect(empty).toMatchObject({
      seconds: null,
      rssChange: null,
      tfChange: null,
      gpuChange: null,
      modelsTracked: 0,
      dropped: [],
      stillHeld: ['x'],
      steps: []
    });
  });
});

describe('firstItems', () => {
  it('shows the first items and how many more there are', () => {
    expect(firstItems(['a', 'b'], 3, trans)).toBe('a, b');
    expect(firstItems(['a', 'b', 'c', 'd', 'e'], 3, trans)).toBe(
      'a, b, c +2 more'
    );
  });
});
