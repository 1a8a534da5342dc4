/**
 * The isolated jobs list without a DOM: the shared fixtures parsed and folded into the table,
 * the order the panel shows, the ticking elapsed time, and the words for states and places.
 */
import { readFixture } from './fixtures';
import { formatClock } from '../chartgeometry';

import {
  countJobs,
  formatElapsed,
  jobGpu,
  jobState,
  JobTable,
  mapProgressText,
  spareText,
  sparesLines,
  STATE_MARK,
  whereText
} from '../jobs';
import {
  IIsolatedJob,
  IsolatedMessage,
  minorOf,
  PROTOCOL_VERSION,
  validate
} from '../protocol';

/** A fixture's message, checked by the protocol's guard as the connection does. */
function fixture(name: string): IsolatedMessage {
  const data = readFixture(name).data;
  const checked = validate(data, 'to_frontend');
  if (!checked.ok) {
    throw new Error(`${name}: ${checked.reason}`);
  }
  return checked.message as IsolatedMessage;
}

function job(over: Partial<IIsolatedJob>): IIsolatedJob {
  return {
    job_id: 'j',
    // A kernel string in a test, not a user-facing one.
    // eslint-disable-next-line jupyter/no-untranslated-string
    label: 'job',
    status: 'running',
    on: 'local',
    node: null,
    started_ts: 100,
    wall_s: null,
    rss_peak_bytes: null,
    gpu_peak_bytes: null,
    ...over
  };
}

const started = (j: Partial<IIsolatedJob>, ts = 100): IsolatedMessage => ({
  method: 'isolated_started',
  ts,
  job: job({ started_ts: ts, ...j })
});

const done = (j: Partial<IIsolatedJob>, ts = 105): IsolatedMessage => ({
  method: 'isolated_done',
  ts,
  job: job({ status: 'ok', wall_s: 5, ...j })
});

describe('isolated job messages', () => {
  it('parse from the shared fixtures', () => {
    expect(fixture('isolated_started').method).toBe('isolated_started');
    expect(fixture('isolated_sample').method).toBe('isolated_sample');
    expect(fixture('isolated_done').method).toBe('isolated_done');
    expect(fixture('isolated_jobs').method).toBe('isolated_jobs');
  });

  it('are refused when a job field is wrong', () => {
    const good = fixture('isolated_done') as any;
    for (const [field, value] of [
      ['status', undefined],
      ['status', 3],
      ['wall_s', '3 s'],
      ['node', { ip: 10, hostname: 'h' }],
      ['node', 'here'],
      ['started_ts', null],
      ['error', 42]
    ] as Array<[string, unknown]>) {
      const bad = { ...good, job: { ...good.job } };
      if (value === undefined) {
        delete bad.job[field];
      } else {
        bad.job[field] = value;
      }
      expect([field, validate(bad, 'to_frontend').ok]).toEqual([field, false]);
    }
    expect(
      validate({ ...fixture('isolated_jobs'), jobs: {} }, 'to_frontend').ok
    ).toBe(false);
  });

  it('came with protocol 1.1', () => {
    expect(minorOf(PROTOCOL_VERSION)).toBeGreaterThanOrEqual(1);
    expect(minorOf('1.0.0')).toBe(0);
    expect(minorOf('1')).toBeNull();
    expect(minorOf(undefined)).toBeNull();
  });
});

describe('JobTable', () => {
  it('follows a job from the fixtures: started, sample, done', () => {
    const table = new JobTable();
    const t0 = 1_000_000;
    expect(table.apply(fixture('isolated_started'), t0)).toBe(true);
    let [row] = table.rows(t0);
    expect([row.state, row.running, row.elapsedS]).toEqual([
      'running',
      true,
      0
    ]);
    expect(table.runningCount).toBe(1);

    table.apply(fixture('isolated_sample'), t0 + 1000);
    [row] = table.rows(t0 + 2500);
    expect(row.job.rss_peak_bytes).toBe(430964736);
    expect(row.rssBytes).toBe(412090368);
    expect(row.elapsedS).toBeCloseTo(2.5);

    table.apply(fixture('isolated_done'), t0 + 3200);
    [row] = table.rows(t0 + 60_000);
    expect([row.state, row.running, row.elapsedS]).toEqual([
      'failed',
      false,
      3.21
    ]);
    expect(row.job.error).toBe('ValueError: item 1 is bad');
    expect(row.rssBytes).toBeNull();
    expect(table.runningCount).toBe(0);
    expect(table.size).toBe(1);
  });

  it('ticks elapsed in the browser clock from the kernel clock difference', () => {
    const table = new JobTable();
    // The browser clock is far off the kernel's: only differences count.
    const browser = 5_000;
    table.apply(
      {
        method: 'isolated_jobs',
        ts: 130,
        jobs: [job({ job_id: 'a', started_ts: 100 })]
      },
      browser
    );
    expect(table.elapsed('a', browser)).toBe(30);
    expect(table.elapsed('a', browser + 1500)).toBe(31.5);
    expect(table.elapsed('nope', browser)).toBeNull();
  });

  it('lists running jobs first (oldest first), then the last finished first', () => {
    const table = new JobTable();
    table.apply(started({ job_id: 'r2' }, 110), 0);
    table.apply(started({ job_id: 'r1' }, 100), 0);
    table.apply(started({ job_id: 'f1' }, 101), 0);
    table.apply(started({ job_id: 'f2' }, 102), 0);
    table.apply(done({ job_id: 'f2' }), 0);
    table.apply(done({ job_id: 'f1', status: 'timeout' }), 0);
    expect(table.rows(0).map(r => r.job.job_id)).toEqual([
      'r1',
      'r2',
      'f1',
      'f2'
    ]);
    expect(countJobs(table.rows(0))).toEqual({
      running: 2,
      done: 1,
      failed: 1,
      other: 0
    });
  });
});

describe('JobTable', () => {
  it('keeps the snapshot order and replaces what it had', () => {
    const table = new JobTable();
    table.apply(started({ job_id: 'old-kernel-job' }), 0);
    const snapshot = fixture('isolated_jobs');
    table.apply(snapshot, 0);
    const rows = table.rows(0);
    expect(rows.map(r => [r.job.job_id, r.state])).toEqual([
      ['77aa00bb11cc', 'running'],
      ['3f9a1c2b7d04', 'failed']
    ]);
    // A job finished after the snapshot goes on top of the finished ones.
    table.apply(done({ job_id: '77aa00bb11cc' }), 0);
    expect(table.rows(0).map(r => r.job.job_id)).toEqual([
      '77aa00bb11cc',
      '3f9a1c2b7d04'
    ]);
  });

  it('keeps only the last finished jobs, never dropping running ones', () => {
    const table = new JobTable(3);
    table.apply(started({ job_id: 'live' }), 0);
    for (let i = 0; i < 6; i++) {
      table.apply(started({ job_id: `j${i}` }), 0);
      table.apply(done({ job_id: `j${i}` }), 0);
    }
    expect(table.rows(0).map(r => r.job.job_id)).toEqual([
      'live',
      'j5',
      'j4',
      'j3'
    ]);
  });

  it('ignores samples of unknown or finished jobs, and bumps its version only on change', () => {
    const table = new JobTable();
    const sample = fixture('isolated_sample');
    expect(table.apply(sample, 0)).toBe(false);
    table.apply(started({ job_id: '3f9a1c2b7d04' }), 0);
    table.apply(done({ job_id: '3f9a1c2b7d04', rss_peak_bytes: 7 }), 0);
    const version = table.version;
    expect(table.apply(sample, 0)).toBe(false);
    expect(table.version).toBe(version);
    expect(table.rows(0)[0].job.rss_peak_bytes).toBe(7);
    table.clear();
    expect([table.size, table.version]).toEqual([0, version + 1]);
  });
});

describe('job words', () => {
  it.each([
    ['running', 'running'],
    ['ok', 'done'],
    ['error', 'failed'],
    ['crash', 'failed'],
    ['out_of_memory', 'failed'],
    ['timeout', 'timeout'],
    ['cancelled', 'cancelled'],
    ['interrupted', 'interrupted'],
    ['something-new', 'other']
  ])('status %p shows as %p', (status, state) => {
    expect(jobState(status)).toBe(state);
    expect(STATE_MARK[jobState(status)]).toBeTruthy();
  });

  it('say where a job ran', () => {
    const here = 'this machine';
    expect(whereText(job({}), here, 'Ray')).toBe(here);
    expect(whereText(job({ on: 'ray' }), here, 'Ray')).toBe('Ray');
    const node = { ip: '10.0.0.12', hostname: 'gpu-node-2' };
    expect(whereText(job({ on: 'ray', node }), here, 'Ray')).toBe(
      'gpu-node-2 (10.0.0.12)'
    );
    expect(
      whereText(
        job({ on: 'ray', node: { ip: '10.0.0.12', hostname: '' } }),
        here,
        'Ray'
      )
    ).toBe('10.0.0.12');
    expect(
      whereText(job({ on: 'ray', node: { ip: '', hostname: '' } }), here, 'Ray')
    ).toBe('Ray');
  });

  it('format elapsed times', () => {
    expect(formatElapsed(3.7, true)).toBe('3 s');
    expect(formatElapsed(125.9, true)).toBe('2 min 5 s');
    expect(formatElapsed(3.21, false)).toBe('3.2 s');
    expect(formatElapsed(0.85, false)).toBe('850 ms');
    expect(formatElapsed(-1, true)).toBe('0 s');
  });
});

/** A translation bundle that fills %1, %2 as JupyterLab's does. */
const trans = {
  __: (msgid: string, ...args: any[]) =>
    args.reduce<string>(
      (text, arg, i) => text.replace(`%${i + 1}`, String(arg)),
      msgid
    )
};

describe("a job row's GPU figure", () => {
  // The H100's isolated Keras-on-torch fit (gpu_report.json): torch 69.2 MiB, NVML 812 MiB.
  const torch = 72541184;
  const nvml = 851443712;

  it('falls back to the allocator peak, named, where NVML has no number', () => {
    const done = fixture('isolated_done_torch_no_nvml') as any;
    const figure = jobGpu(done.job, trans);
    expect(figure.text).toBe('GPU peak 69.2 MiB (torch)');
    expect(figure.title).toContain('NVML has no number for the job process');
    expect(figure.title).toContain('max_memory_allocated');
    expect(figure.title).toContain(
      'the CUDA context and libraries are not in it'
    );
  });

  it("shows NVML's peak with the allocators' beside it, and a dash for nothing", () => {
    const both = jobGpu(
      job({
        gpu_peak_bytes: nvml,
        torch_peak_bytes: torch,
        jax_peak_bytes: 2 ** 20
      }),
      trans
    );
    expect(both.text).toBe('GPU peak 812 MiB (torch 69.2 MiB, JAX 1.00 MiB)');
    expect(both.title).toContain('the CUDA context and libraries included');
    expect(both.title).toContain('peak_bytes_in_use');
    expect(jobGpu(job({ gpu_peak_bytes: nvml }), trans).text).toBe(
      'GPU peak 812 MiB'
    );
    expect(jobGpu(job({}), trans).text).toBe('GPU peak –');
  });

  it('follows the samples of a running job, keeping a peak a later sample lacks', () => {
    const table = new JobTable();
    table.apply(started({ job_id: 'c47d2e91a0b3' }, 1763800200), 0);
    table.apply(fixture('isolated_sample_allocators'), 1000);
    table.apply(
      {
        method: 'isolated_sample',
        ts: 1763800202,
        job_id: 'c47d2e91a0b3',
        rss_bytes: 1,
        rss_peak_bytes: 1,
        gpu_peak_bytes: null
      },
      2000
    );
    const [row] = table.rows(2000);
    expect(row.job.torch_peak_bytes).toBe(torch);
    expect(jobGpu(row.job, trans).text).toBe(
      'GPU peak 69.2 MiB (torch), 177 MiB (JAX)'
    );
  });

  it('are refused when not a number', () => {
    for (const name of [
      'invalid_isolated_done_torch_peak_string',
      'invalid_isolated_sample_jax_peak_null'
    ]) {
      expect(validate(readFixture(name).data, 'to_frontend').ok).toBe(false);
    }
  });
});

describe("an isolated_map's counts", () => {
  it('come with its jobs and make the title line', () => {
    const table = new JobTable();
    table.apply(fixture('isolated_jobs_map_progress'), 0);
    const rows = table.rows(0);
    expect(rows[0].job.map_progress?.done).toBe(7);
    expect(mapProgressText(rows, trans)).toBe(
      'Map: 7/10 done, 1 running, 0 failed, 2 left, about 12 s left'
    );
  });

  it('say no time left before an item finished, and nothing without a map', () => {
    const table = new JobTable();
    table.apply(started({ job_id: 'a1' }, 1763800200), 0);
    expect(mapProgressText(table.rows(0), trans)).toBeNull();
    const progress = {
      total: 4,
      done: 0,
      running: 1,
      failed: 0,
      left: 3,
      elapsed_s: 1,
      eta_s: null
    };
    const rows = [
      { ...table.rows(0)[0], job: job({ map_progress: progress }) }
    ];
    expect(mapProgressText(rows, trans)).toBe(
      'Map: 0/4 done, 1 running, 0 failed, 3 left'
    );
  });

  it('are refused when a count is not a number', () => {
    expect(
      validate(
        readFixture('invalid_isolated_jobs_map_progress_done_string').data,
        'to_frontend'
      ).ok
    ).toBe(false);
  });
});

describe("the pool's warm spare (issue 32)", () => {
  const trans = {
    __: (msgid: string, ...args: any[]) =>
      msgid.replace(/%(\d+)/g, (_, n) => String(args[Number(n) - 1]))
  };

  it('says which job ran in the spare, why another forked cold, and what the spares cost', () => {
    const table = new JobTable();
    expect(table.apply(fixture('isolated_jobs_spares.json'), 1000)).toBe(true);
    const rows = table.rows(1000);
    expect(rows.map(row => spareText(row.job, trans))).toEqual([
      'in the warm spare',
      "cold fork: XLA_PYTHON_CLIENT_MEM_FRACTION differs from the spare's, and its runtime read it when it started"
    ]);
    // As the newest job that lists them ended: the kernel says no more until the next one.
    const ended = formatClock(1763800101.0 + 1.18);
    expect(sparesLines(rows, trans)).toEqual([
      `Warm spare pid 43121 (GPU 0), warming up: RSS 304 MiB, GPU 538 MiB, as run_isolated(fit_fold) ended at ${ended}`
    ]);
  });

  it('says nothing for a kernel that does not send them', () => {
    expect(spareText(job({}), trans)).toBe('');
    expect(sparesLines([], trans)).toEqual([]);
  });
});
