/**
 * The "Cell runs" window (runswindow.ts): it fits the lesson's runs, not the idle time after
 * them (issue 31, item 1), and the user's pick is remembered.
 */
import {
  initialWindow,
  MIN_SPAN_S,
  RUNS,
  runsRange,
  savedWindow,
  saveWindow,
  STRETCH_GAP_S,
  WINDOW_KEY
} from '../runswindow';

const run = (startedTs: number, endedTs: number | null) => ({
  startedTs,
  endedTs
});

describe('runsRange', () => {
  it('fits a 23 s Run All, however long ago it ended', () => {
    const lesson = [run(100, 104), run(104.1, 112), run(112.2, 123)];
    for (const now of [130, 220, 940]) {
      const [from, to] = runsRange(lesson, now)!;
      expect(from).toBeCloseTo(100 - 23 * 0.05);
      expect(to).toBeCloseTo(123 + 23 * 0.05);
    }
  });

  it('fits the latest stretch of runs, and runs on to now while a cell runs', () => {
    const runs = [
      run(0, 5),
      run(10 + STRETCH_GAP_S, 20 + STRETCH_GAP_S),
      run(200, null)
    ];
    const [from, to] = runsRange(runs, 330)!;
    // The first run is further back than a break: left out; the running cell runs to now.
    expect(from).toBeGreaterThan(5);
    expect(from).toBeLessThan(10 + STRETCH_GAP_S);
    expect(to).toBeGreaterThanOrEqual(330);
  });

  it('keeps a Clear session pressed soon after the lesson, and never lets a later one replace it', () => {
    const lesson = [run(100, 104), run(104.1, 123)];
    // Pressed 30 s after the last run: in the window, which ends past it.
    const [, soon] = runsRange(lesson, 400, [153])!;
    expect(soon).toBeGreaterThan(153);
    // Pressed minutes later (a teacher explained first): the lesson keeps the window.
    const [from, to] = runsRange(lesson, 900, [123 + STRETCH_GAP_S + 60])!;
    expect(from).toBeCloseTo(100 - 23 * 0.05);
    expect(to).toBeCloseTo(123 + 23 * 0.05);
    // Marks chain: each within the gap of the stretch as extended; a mark before it is not pulled in.
    const [early, chained] = runsRange(lesson, 900, [20, 200, 300])!;
    expect(chained).toBeGreaterThan(300);
    expect(early).toBeCloseTo(100 - (300 - 100) * 0.05);
  });

  it('is never narrower than a few samples, and is null with no runs', () => {
    const [from, to] = runsRange([run(50, 51)], 60)!;
    expect(to - from).toBeCloseTo(MIN_SPAN_S);
    expect(from).toBeLessThan(50);
    expect(to).toBeGreaterThan(51);
    expect(runsRange([], 60)).toBeNull();
  });
});

describe('the remembered window', () => {
  it('defaults to cell runs in classroom mode and to all otherwise, until the user picks', () => {
    expect(initialWindow(null, true, 0)).toBe(RUNS);
    expect(initialWindow(null, false, 0)).toBe(0);
    expect(initialWindow(5, true, 0)).toBe(5);
  });

  it('reads back what was saved, and ignores what is not a choice or a broken storage', () => {
    const store = new Map<string, string>();
    const storage = {
      getItem: (key: string) => store.get(key) ?? null,
      setItem: (key: string, value: string) => void store.set(key, value)
    };
    expect(savedWindow(storage, [RUNS, 0, 1, 5, 15])).toBeNull();
    saveWindow(storage, RUNS);
    expect(store.get(WINDOW_KEY)).toBe(String(RUNS));
    expect(savedWindow(storage, [RUNS, 0, 1, 5, 15])).toBe(RUNS);
    store.set(WINDOW_KEY, '7');
    expect(savedWindow(storage, [RUNS, 0, 1, 5, 15])).toBeNull();
    const broken = {
      getItem: () => {
        throw new Error('denied');
      },
      setItem: () => {
        throw new Error('quota');
      }
    };
    expect(savedWindow(broken, [0])).toBeNull();
    expect(() => saveWindow(broken, 0)).not.toThrow();
  });
});
