import {
  addMark,
  ICellRun,
  IMark,
  RingBuffer,
  SeriesHistory,
  upsertCellRun
} from '../history';
import { recordFacts, recordSample, SERIES } from '../connection';
import { readFixture } from './fixtures';

const fixture = (name: string) => readFixture(name).data;

/** The newest point of a series, read as the panel reads it (`points`). */
const newest = (history: SeriesHistory, series: string) =>
  history.points(series).slice(-1)[0];

describe('RingBuffer', () => {
  it('keeps the newest items in order', () => {
    const ring = new RingBuffer<number>(3);
    expect(ring.toArray()).toEqual([]);
    [1, 2, 3, 4, 5].forEach(n => ring.push(n));
    expect(ring.toArray()).toEqual([3, 4, 5]);
  });

  it('resizes keeping the newest', () => {
    const ring = new RingBuffer<number>(5);
    [1, 2, 3, 4, 5].forEach(n => ring.push(n));
    ring.resize(2);
    expect(ring.toArray()).toEqual([4, 5]);
    ring.resize(4);
    ring.push(6);
    expect(ring.toArray()).toEqual([4, 5, 6]);
  });

  it('refuses a useless capacity', () => {
    expect(() => new RingBuffer(0)).toThrow(RangeError);
  });
});

describe('SeriesHistory', () => {
  it('sizes itself from minutes and interval', () => {
    expect(SeriesHistory.capacityFor(5, 1)).toBe(300);
    expect(SeriesHistory.capacityFor(1, 0.1)).toBe(600);
  });

  it('records the numbers of a sample and of facts', () => {
    const history = new SeriesHistory(10);
    recordSample(history, fixture('sample.json'));
    expect(newest(history, SERIES.rss)?.value).toBe(734003200);
    expect(newest(history, SERIES.tfInUse)?.value).toBe(1048576);
    expect(newest(history, SERIES.tfHeld)?.value).toBe(1048576 + 3145728);
    expect(newest(history, SERIES.nvmlProcess)?.value).toBeNull(); // no GPU: a gap

    recordSample(history, fixture('sample_gpu.json'));
    expect(newest(history, SERIES.gpuAllocInUse)?.value).toBe(2147483648);
    expect(newest(history, SERIES.nvmlProcess)?.value).toBe(75000000000);
    expect(newest(history, SERIES.tfInUse)?.value).toBe(0); // CPU only

    recordSample(history, fixture('sample_tf_not_imported.json'));
    expect(newest(history, SERIES.tfInUse)?.value).toBeNull();
    expect(newest(history, SERIES.gpuAllocInUse)?.value).toBeNull();

    // torch's allocated bytes, not its reserved ones (recorded on an H100: 2 GiB of 3 GiB).
    recordSample(history, fixture('sample_torch_cached.json'));
    expect(newest(history, SERIES.gpuAllocInUse)?.value).toBe(2 * 2 ** 30);
    expect(newest(history, SERIES.nvmlProcess)?.value).toBe(3764387840);

    // The registry's entries come with every sample (a search loop's growth inside one cell).
    recordSample(history, fixture('sample.json'));
    expect(newest(history, SERIES.customGradients)?.value).toBe(6);
    recordFacts(history, fixture('facts.json'));
    expect(newest(history, SERIES.liveModels)?.value).toBe(1);
  });
});

describe('upsertCellRun', () => {
  const run = (count: number, started: number, ended: number | null) =>
    ({
      executionCount: count,
      cellId: null,
      startedTs: started,
      endedTs: ended,
      status: ended === null ? 'running' : 'ok'
    }) as ICellRun;

  it('updates a known run and keeps the order by start', () => {
    const runs: ICellRun[] = [];
    upsertCellRun(runs, run(2, 20, null));
    upsertCellRun(runs, run(1, 10, 11)); // replayed after a live one: goes before it
    upsertCellRun(runs, run(2, 20, 25));
    expect(runs.map(r => [r.executionCount, r.endedTs])).toEqual([
      [1, 11],
      [2, 25]
    ]);
    upsertCellRun(runs, run(2, 20, null)); // an older copy never un-ends a run
    expect(runs[1].endedTs).toBe(25);
  });

  it('keeps at most 500 runs, the newest', () => {
    const runs: ICellRun[] = [];
    for (let i = 0; i < 520; i++) {
      upsertCellRun(runs, run(i, i, i + 0.5));
    }
    expect(runs).toHaveLength(500);
    expect(runs[0].executionCount).toBe(20);
  });
});

describe('addMark', () => {
  it('drops a duplicate and keeps time order', () => {
    const marks: IMark[] = [];
    addMark(marks, { kind: 'clear_tf', ts: 5 });
    addMark(marks, { kind: 'restart', ts: 3 });
    addMark(marks, { kind: 'clear_tf', ts: 5 });
    expect(marks).toEqual([
      { kind: 'restart', ts: 3 },
      { kind: 'clear_tf', ts: 5 }
    ]);
  });
});
