/**
 * The per-kernel store (store.ts): each kernel keeps its own record, jobs, leak watch and
 * death across notebook switches, and each part says when it changed.
 */
import { readFixture } from './fixtures';
import { trans } from './wording';

import { SeriesHistory } from '../history';
import { ICellGrowth, IIsolatedJobs, IsolatedMessage } from '../protocol';
import { RestartMemory } from '../restarts';
import { IKernelRecord, IStoreChange, KernelStore } from '../store';
import { deathHeading } from '../death';
import { formatClock } from '../chartgeometry';

function record(pid: number): IKernelRecord {
  return {
    history: new SeriesHistory(10),
    cellRuns: [],
    marks: [],
    host: null,
    lastSampleTs: null,
    lastSampleAt: null,
    lastIntervalS: null,
    lastEvent: null,
    clearReport: null,
    pid,
    restartedAt: null,
    hello: null,
    latestSample: null,
    latestFacts: null
  };
}

const jobs = (): IIsolatedJobs => readFixture('isolated_jobs').data;
const growth = (): ICellGrowth => readFixture('cell_growth').data;

function listen(store: KernelStore): IStoreChange[] {
  const seen: IStoreChange[] = [];
  store.changed.connect((_, change) => seen.push(change));
  return seen;
}

describe('KernelStore', () => {
  it("keeps each kernel's jobs and leak watch apart, across switches", () => {
    const store = new KernelStore();
    store.applyJobs('k1', jobs(), 0);
    store.setCellGrowth('k1', growth());
    // The user switches to another notebook's kernel, then back.
    expect(store.entry('k2').jobs.size).toBe(0);
    expect(store.entry('k2').cellGrowth).toBeNull();
    expect(store.entry('k1').jobs.size).toBe(jobs().jobs.length);
    expect(store.entry('k1').cellGrowth?.cells.length).toBe(2);
  });

  it('says which kernel and which part changed, and only on a change', () => {
    const store = new KernelStore();
    const seen = listen(store);
    store.applyJobs('k1', jobs(), 0);
    store.setCellGrowth('k2', growth());
    store.setRecord('k1', record(1));
    // A sample of a job this store never saw start changes nothing.
    const stray: IsolatedMessage = readFixture('isolated_sample').data;
    store.applyJobs('k3', stray, 0);
    // A new record is every part of a record at once.
    expect(seen).toEqual([
      { kernelId: 'k1', part: 'jobs' },
      { kernelId: 'k2', part: 'cellGrowth' },
      ...['hello', 'samples', 'facts', 'runs', 'clear'].map(part => ({
        kernelId: 'k1',
        part
      }))
    ]);
  });

  it("forgets a restarted process's jobs and leak watch, keeps them on a new record otherwise", () => {
    const store = new KernelStore();
    store.applyJobs('k1', jobs(), 0);
    store.setCellGrowth('k1', growth());
    store.setRecord('k1', record(1));
    expect(store.entry('k1').jobs.size).toBeGreaterThan(0);
    store.setRecord('k1', record(2), { restarted: true });
    expect(store.entry('k1').record?.pid).toBe(2);
    expect(store.entry('k1').jobs.size).toBe(0);
    expect(store.entry('k1').cellGrowth).toBeNull();
  });

  it('keeps the most recently used kernels', () => {
    const store = new KernelStore(3);
    ['a', 'b', 'c'].forEach(id => store.setRecord(id, record(1)));
    store.entry('a'); // looked at again: now the newest
    store.setRecord('d', record(1));
    expect(store.kernelIds).toEqual(['c', 'a', 'd']);
    expect(store.peek('b')).toBeUndefined();
    expect(store.records()).toHaveLength(3);
  });
});

describe('KernelStore', () => {
  it('keeps a dismissed death dismissed, and tells a later one', () => {
    const store = new KernelStore();
    const seen = listen(store);
    const dead = record(1);
    store.setDeath('k1', {
      diedTs: 100,
      executionCount: 3,
      text: null,
      record: dead
    });
    expect(store.entry('k1').death?.record).toBe(dead);
    store.dismissDeath('k1', 150);
    expect(store.entry('k1').death).toBeNull();
    // The next kernel's postmortem tells every comm the same death again: not news.
    const told = { diedTs: 100, executionCount: 3, text: 'OOM', record: null };
    store.setDeath('k1', told);
    expect(store.entry('k1').death).toBeNull();
    store.setDeath('k1', { ...told, diedTs: 200 });
    expect(store.entry('k1').death?.text).toBe('OOM');
    expect(seen.map(c => c.part)).toEqual(['death', 'death', 'death']);
  });

  it('tells each part on its own signal, with the kernel', () => {
    const store = new KernelStore();
    const jobsOf: string[] = [];
    const samplesOf: string[] = [];
    store.partChanged('jobs').connect((_, id) => jobsOf.push(id));
    store.partChanged('samples').connect((_, id) => samplesOf.push(id));
    const k1 = record(1);
    store.setRecord('k1', k1);
    store.applyToRecord('k1', k1, readFixture('sample_cpu_host').data, 1);
    store.applyToRecord('k1', k1, readFixture('cell_run_ended').data, 1);
    store.applyJobs('k2', jobs(), 0);
    expect(samplesOf).toEqual(['k1', 'k1']); // the new record, then the sample
    expect(jobsOf).toEqual(['k2']);
    expect(k1.latestSample?.seq).toBe(readFixture('sample_cpu_host').data.seq);
  });

  it('keeps a restart for a reload of its notebook, and only for its new pid', () => {
    const kept: { [key: string]: string } = {};
    const storage = {
      getItem: (key: string) => kept[key] ?? null,
      setItem: (key: string, value: string) => (kept[key] = value)
    };
    const seen = new KernelStore(8, new RestartMemory(storage));
    const restarted = record(7);
    restarted.restartedAt = 1763800100000;
    restarted.marks.push({ kind: 'restart', ts: 1763800099 });
    seen.setRecord('k1', restarted);
    seen.noteHello('k1', 'a.ipynb');

    // The page is reloaded: a new store meets the same kernel as if it had always been there.
    const reloaded = new KernelStore(8, new RestartMemory(storage));
    reloaded.setRecord('k1', record(7));
    reloaded.noteHello('k1', 'a.ipynb');
    const back = reloaded.entry('k1').record!;
    expect(back.restartedAt).toBe(1763800100000);
    expect(back.marks).toEqual([{ kind: 'restart', ts: 1763800099 }]);
    // Another notebook, or a later kernel (another pid) of the same one: no restart.
    for (const [path, pid] of [
      ['b.ipynb', 7],
      ['a.ipynb', 8]
    ] as [string, number][]) {
      const other = new KernelStore(8, new RestartMemory(storage));
      other.setRecord('k2', record(pid));
      other.noteHello('k2', path);
      expect(other.entry('k2').record!.restartedAt).toBeNull();
    }
  });
});

describe('KernelStore', () => {
  it("tells a death it saw at the post-mortem's time, the one its text tells", () => {
    // Issue 33, item 9: the banner said the page's 02:00:02 (when it noticed), the text the
    // watcher's 01:59:59. The post-mortem's time is the record of the death: it wins, mark and all.
    const store = new KernelStore();
    const dead = record(1);
    dead.marks.push({ kind: 'clear', ts: 90 }, { kind: 'death', ts: 103 });
    store.setDeath('k1', {
      diedTs: 103,
      executionCount: 3,
      text: null,
      record: dead
    });
    const postmortem = readFixture('postmortem').data;
    store.tellDeath('k1', { ...postmortem, died_ts: 99.5 });
    const death = store.entry('k1').death!;
    expect([death.diedTs, death.executionCount]).toEqual([99.5, 12]);
    expect(death.text).toBe(postmortem.text);
    expect(dead.marks).toEqual([
      { kind: 'clear', ts: 90 },
      { kind: 'death', ts: 99.5 }
    ]);
    // A post-mortem without a time (no watcher saw it) keeps the page's own; its cell is the
    // kernel record's, between cells included, not the page's guess.
    store.tellDeath('k1', {
      ...postmortem,
      died_ts: null,
      execution_count: null
    });
    expect(store.entry('k1').death!.diedTs).toBe(99.5);
    expect(store.entry('k1').death!.executionCount).toBeNull();
    // One the page did not see (reloaded since) is told as it comes.
    store.tellDeath('k2', postmortem);
    expect(store.entry('k2').death).toEqual({
      diedTs: postmortem.died_ts,
      executionCount: 12,
      text: postmortem.text,
      timeInText: true,
      record: null
    });
  });

  it("heads a death with one clock: the page's until the post-mortem tells the watcher's", () => {
    const store = new KernelStore();
    store.setDeath('k1', {
      diedTs: 103,
      executionCount: 3,
      text: null,
      record: record(1)
    });
    const heading = () => deathHeading(store.entry('k1').death!, trans);
    expect(heading()).toBe(
      `The kernel died at ${formatClock(103)} while cell [3] ran`
    );
    // A post-mortem whose watcher saw the death says when in its own sentence, in the kernel's
    // clock and zone ("died at 13:02:09 UTC"): the heading drops the browser's.
    const postmortem = readFixture('postmortem').data;
    store.tellDeath('k1', { ...postmortem, died_ts: 99.5, execution_count: 3 });
    expect(heading()).toBe('The kernel died while cell [3] ran');
    // One without a time ("died after 13:01:58 (its last sign of life)") keeps the page's.
    store.tellDeath('k1', {
      ...postmortem,
      died_ts: null,
      execution_count: null
    });
    expect(heading()).toBe(`The kernel died at ${formatClock(99.5)}`);
  });
});
