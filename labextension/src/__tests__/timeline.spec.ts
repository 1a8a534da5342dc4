import {
  chartHeight,
  classroomGeometry,
  NORMAL_GEOMETRY,
  byteTicks,
  countTop,
  formatPct,
  formatValue,
  formatTick,
  ICellRunLike,
  layoutSpans,
  linePath,
  pctTop,
  pointNear,
  FIT,
  formatSpan,
  groupMarks,
  runAt,
  runChange,
  windowRange,
  runLabel,
  sliceWindow
} from '../timeline';
import { chartScale } from '../timelinelayers';

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

const run = (
  executionCount: number | null,
  startedTs: number,
  endedTs: number | null
): ICellRunLike => ({
  executionCount,
  cellId: `c${executionCount}`,
  startedTs,
  endedTs,
  status: endedTs === null ? 'running' : 'ok'
});

describe('byteTicks', () => {
  it('steps in powers of two from zero, the top at or above the maximum', () => {
    expect(byteTicks(700 * MIB)).toEqual({
      top: 768 * MIB,
      ticks: [0, 256 * MIB, 512 * MIB, 768 * MIB]
    });
    expect(byteTicks(2.5 * GIB)).toEqual({
      top: 3 * GIB,
      ticks: [0, GIB, 2 * GIB, 3 * GIB]
    });
  });

  it('never gives more than the asked number of steps', () => {
    for (const max of [1, 3 * MIB, 100 * MIB, 1000 * MIB, 70 * GIB]) {
      const { top, ticks } = byteTicks(max, 4);
      expect(ticks.length - 1).toBeLessThanOrEqual(4);
      expect(top).toBeGreaterThanOrEqual(max);
      expect(ticks[0]).toBe(0);
    }
  });

  it('keeps a 1 MiB scale for nothing or a flat zero', () => {
    expect(byteTicks(0).top).toBe(MIB);
    expect(byteTicks(NaN).top).toBe(MIB);
  });

  it('puts an exact power at the top', () => {
    expect(byteTicks(512 * MIB).top).toBe(512 * MIB);
  });
});

describe('formatTick', () => {
  it('writes short labels without trailing zeros', () => {
    expect(formatTick(0)).toBe('0');
    expect(formatTick(256 * MIB)).toBe('256 MiB');
    expect(formatTick(GIB)).toBe('1 GiB');
    expect(formatTick(1.5 * GIB)).toBe('1.5 GiB');
    expect(formatTick(512 * 1024)).toBe('512 KiB');
  });
});

describe('pctTop', () => {
  it('is 100 % unless the kernel uses more than one core', () => {
    expect(pctTop(0)).toBe(100);
    expect(pctTop(99.9)).toBe(100);
    expect(pctTop(140)).toBe(200);
    expect(pctTop(NaN)).toBe(100);
  });
});

describe('formatPct', () => {
  it('keeps a decimal below 10 %', () => {
    expect(formatPct(0)).toBe('0 %');
    expect(formatPct(0.42)).toBe('0.4 %');
    expect(formatPct(143.4)).toBe('143 %');
  });
});

describe('a count on its own scale', () => {
  it('tops at 10, 20, 50, 100, ... at or above the largest count', () => {
    expect([0, 6, 10, 11, 24, 51, 180].map(countTop)).toEqual([
      10, 10, 10, 20, 50, 100, 200
    ]);
  });

  it('words each unit: bytes, % of one core, a plain count', () => {
    expect(formatValue('bytes', 1536)).toBe('1.50 KiB');
    expect(formatValue('pct', 4.25)).toBe('4.3 %');
    expect(formatValue('count', 24)).toBe('24');
  });
});

describe('sliceWindow', () => {
  const points = [0, 10, 20, 30, 40].map(ts => ({ ts, value: ts }));

  it('keeps the window and the point just before it', () => {
    expect(sliceWindow(points, 15, 40).map(p => p.ts)).toEqual([
      10, 20, 30, 40
    ]);
    expect(sliceWindow(points, 20, 30).map(p => p.ts)).toEqual([10, 20, 30]);
  });

  it('copes with an empty series and a window past the data', () => {
    expect(sliceWindow([], 0, 10)).toEqual([]);
    expect(sliceWindow(points, 100, 200).map(p => p.ts)).toEqual([40]);
  });
});

describe('pointNear', () => {
  const points = [
    { ts: 0, value: 1 },
    { ts: 1, value: 2 },
    { ts: 2, value: null },
    { ts: 5, value: 4 }
  ];

  it('finds the nearest point with a number within the gap', () => {
    expect(pointNear(points, 0.9, 1)?.value).toBe(2);
    expect(pointNear(points, 0.2, 1)?.value).toBe(1);
    expect(pointNear(points, 4.5, 1)?.value).toBe(4);
  });

  it('gives nothing in a gap or too far from any point', () => {
    expect(pointNear(points, 3, 1)).toBeNull();
    expect(pointNear(points, 10, 1)).toBeNull();
    expect(pointNear([], 0, 1)).toBeNull();
  });
});

describe('linePath', () => {
  it('scales the points and breaks the line at gaps', () => {
    const path = linePath(
      [
        { ts: 0, value: 0 },
        { ts: 1, value: 10 },
        { ts: 2, value: null },
        { ts: 3, value: 5 }
      ],
      ts => ts * 10,
      v => 100 - v
    );
    expect(path).toBe('M0.0,100.0L10.0,90.0M30.0,95.0');
  });
});

describe('layoutSpans', () => {
  it('places runs in the window, a running one up to now', () => {
    const boxes = layoutSpans(
      [run(3, 10, 20), run(4, 50, null), run(1, -100, -50)],
      0,
      100,
      200
    );
    expect(boxes.map(b => b.label)).toEqual(['[3]', '[4]']);
    expect(boxes[0]).toMatchObject({ x: 20, width: 20, running: false });
    expect(boxes[1]).toMatchObject({ x: 100, width: 100, running: true });
  });

  it('clips a run that started before the window', () => {
    const [box] = layoutSpans([run(7, -10, 10)], 0, 100, 100);
    expect(box).toMatchObject({ x: 0, width: 10 });
  });

  it('keeps a sub-pixel run visible', () => {
    const [box] = layoutSpans([run(2, 50, 50.01)], 0, 300, 100);
    expect(box.width).toBe(2);
  });

  it('hides a label that would run into the next span', () => {
    const boxes = layoutSpans(
      [run(10, 0, 1), run(11, 1, 2), run(12, 50, 60)],
      0,
      100,
      200
    );
    expect(boxes.map(b => b.showLabel)).toEqual([false, true, true]);
  });

  it('moves the label of a span at the right edge to the left', () => {
    const [box] = layoutSpans([run(12, 95, null)], 0, 100, 200);
    expect(box).toMatchObject({ x: 190, showLabel: true });
    expect(box.labelX).toBeCloseTo(200 - (4 * 6.5 + 4));
  });

  it('never puts a label over the previous one', () => {
    const boxes = layoutSpans([run(1, 80, 90), run(2, 96, null)], 0, 100, 200);
    expect(boxes.map(b => b.showLabel)).toEqual([true, false]);
  });

  it('sorts runs by start', () => {
    const boxes = layoutSpans([run(2, 30, 40), run(1, 10, 20)], 0, 100, 100);
    expect(boxes.map(b => b.label)).toEqual(['[1]', '[2]']);
  });

  it('says what a cell did on its span where there is room, else less', () => {
    const longer = (r: { executionCount: number | null }) => [
      `[${r.executionCount}] +201 MiB, peak 1.50 GiB`,
      `[${r.executionCount}] +201 MiB`
    ];
    // 1000 px for 100 s: [3] has 300 px before [4], [4] 100 px before [5], [5] the rest.
    const boxes = layoutSpans(
      [run(3, 10, 20), run(4, 40, 45), run(5, 50, 55)],
      0,
      100,
      1000,
      6.5,
      longer
    );
    expect(boxes.map(b => b.text)).toEqual([
      '[3] +201 MiB, peak 1.50 GiB',
      '[4] +201 MiB',
      '[5] +201 MiB, peak 1.50 GiB'
    ]);
    // A longer text starts at its own span, never moved left towards the one before.
    expect(boxes.map(b => b.labelX)).toEqual([100, 400, 500]);
    expect(boxes.map(b => b.label)).toEqual(['[3]', '[4]', '[5]']);
    // Where even the number does not fit, nothing is shown; the next takes what fits.
    const tight = layoutSpans(
      [run(6, 10, 11), run(7, 11.5, 12)],
      0,
      100,
      100,
      6.5,
      longer
    );
    expect(tight.map(b => [b.text, b.showLabel])).toEqual([
      ['[6]', false],
      ['[7] +201 MiB', true]
    ]);
  });
});

describe('runAt and runLabel', () => {
  const runs = [run(1, 0, 10), run(2, 20, null)];

  it('finds the run at a time; a running one lasts until now', () => {
    expect(runAt(runs, 5, 30)?.executionCount).toBe(1);
    expect(runAt(runs, 15, 30)).toBeNull();
    expect(runAt(runs, 29, 30)?.executionCount).toBe(2);
  });

  it('labels a run as the notebook does', () => {
    expect(runLabel(run(12, 0, 1))).toBe('[12]');
    expect(runLabel(run(null, 0, 1))).toBe('[*]');
  });
});

describe('runChange', () => {
  it('says what a finished cell did, and its peak where it rose above both ends', () => {
    const grew = {
      ...run(3, 10, 20),
      rssStartBytes: 800 * MIB,
      rssEndBytes: 1001 * MIB,
      peakRssBytes: 1.5 * GIB
    };
    expect(runChange(grew)).toEqual({ change: '+201 MiB', peak: '1.50 GiB' });
    const freed = { ...grew, rssEndBytes: 700 * MIB, peakRssBytes: 800 * MIB };
    expect(runChange(freed)).toEqual({ change: '−100 MiB', peak: null });
  });

  it('says nothing for a running cell or a kernel before 1.5', () => {
    expect(runChange({ ...run(3, 10, null), rssStartBytes: MIB })).toBeNull();
    expect(runChange(run(3, 10, 20))).toBeNull();
  });
});

describe('windowRange', () => {
  it('fits all the history, never under 15 s, or shows the last N minutes', () => {
    // A 25 s lesson: the chart spans its 25 s, not the right tenth of five minutes.
    expect(windowRange(FIT, 1000, 975)).toEqual([975, 1000]);
    expect(windowRange(FIT, 1000, 995)).toEqual([985, 1000]);
    // Forty minutes of history: all of it.
    expect(windowRange(FIT, 3400, 1000)).toEqual([1000, 3400]);
    expect(windowRange(FIT, 1000, null)).toEqual([940, 1000]);
    expect(windowRange(5, 1000, 975)).toEqual([700, 1000]);
  });

  it('says how far back the left edge is', () => {
    expect(formatSpan(25)).toBe('25 s');
    expect(formatSpan(300)).toBe('5 min');
    expect(formatSpan(3900)).toBe('1 h 5 min');
  });
});

describe('groupMarks beside the axis labels', () => {
  it('keeps a label off the gutter, or hides it inside the chart', () => {
    const at = (ts: number) => ts;
    const [near] = groupMarks(
      [{ kind: 'clear_tf', ts: 10 }],
      at,
      () => 'clear',
      14,
      6.5,
      250,
      50
    );
    expect(near.labelX).toBeGreaterThanOrEqual(50);
    expect(near.showLabel).toBe(true);
    const [long] = groupMarks(
      [{ kind: 'clear_tf', ts: 10 }],
      at,
      () => 'a label far wider than the plot beside the gutter',
      14,
      6.5,
      250,
      50
    );
    expect(long.showLabel).toBe(false);
    expect(long.labelX).toBeGreaterThanOrEqual(0);
  });
});

describe('groupMarks', () => {
  const text = (kind: string) => kind.replace('_', ' ');
  const x = (ts: number) => ts; // one pixel per second

  it('draws six fresh_model marks in a second as one, counted', () => {
    const marks = [0, 0.2, 0.4, 0.6, 0.8, 1].map(ts => ({
      kind: 'fresh_model',
      ts: 100 + ts
    }));
    const groups = groupMarks(marks, x, text);
    expect(groups.map(g => g.label)).toEqual(['6× fresh model']);
    expect(groups[0].marks).toHaveLength(6);
  });

  it('counts each kind in a mixed group and hides a label that would overlap', () => {
    const groups = groupMarks(
      [
        { kind: 'clear_tf', ts: 100 },
        { kind: 'fresh_model', ts: 101 },
        { kind: 'clear_tf', ts: 102 },
        { kind: 'restart', ts: 130 },
        { kind: 'clear_tf', ts: 300 }
      ],
      x,
      text
    );
    expect(groups.map(g => g.label)).toEqual([
      '2× clear tf, fresh model',
      'restart',
      'clear tf'
    ]);
    // The first label runs past 130 px: the restart's label is hidden (its hover says it).
    expect(groups.map(g => g.showLabel)).toEqual([true, false, true]);
  });

  it('keeps a label inside the chart: a mark at the right edge has it end there', () => {
    // 16 px text (10 px a character) in a 230 px chart: "2× fresh model" is 144 px wide.
    const marks = [
      { kind: 'fresh_model', ts: 220 },
      { kind: 'fresh_model', ts: 221 }
    ];
    const [group] = groupMarks(marks, x, text, 22, 10, 230);
    expect(group.label).toBe('2× fresh model');
    expect(group.labelX + group.label.length * 10 + 4).toBeLessThanOrEqual(230);
    expect(group.labelX).toBeGreaterThanOrEqual(0);
    expect(group.showLabel).toBe(true);
    // Wider than the whole chart: hidden, never drawn past the left edge.
    const [narrow] = groupMarks(marks, x, text, 22, 10, 100);
    expect(narrow.labelX).toBe(0);
    expect(narrow.showLabel).toBe(false);
  });
});

describe('classroomGeometry', () => {
  it('keeps the usual chart 183 px tall with 12 px text, its text rows holding it', () => {
    expect(chartHeight(NORMAL_GEOMETRY)).toBe(183);
    expect(NORMAL_GEOMETRY.fontPx).toBe(12);
    expect(NORMAL_GEOMETRY.band).toBeGreaterThanOrEqual(
      NORMAL_GEOMETRY.fontPx + 4
    );
    expect(NORMAL_GEOMETRY.axis).toBeGreaterThanOrEqual(
      NORMAL_GEOMETRY.fontPx + 2
    );
    // The CPU strip holds its label and a line below it.
    expect(NORMAL_GEOMETRY.strip).toBeGreaterThanOrEqual(
      2 * NORMAL_GEOMETRY.fontPx
    );
  });

  it('draws 16 px text, with text rows tall enough for it', () => {
    const g = classroomGeometry(650);
    expect(g.fontPx).toBeGreaterThanOrEqual(16);
    expect(g.band).toBeGreaterThanOrEqual(g.fontPx + 4);
    expect(g.axis).toBeGreaterThanOrEqual(g.fontPx + 2);
    expect(g.charPx).toBeGreaterThan(NORMAL_GEOMETRY.charPx);
  });

  it('grows with the panel, taller than the usual chart, within bounds', () => {
    const small = chartHeight(classroomGeometry(500));
    const tall = chartHeight(classroomGeometry(1000));
    expect(small).toBeGreaterThan(chartHeight(NORMAL_GEOMETRY));
    expect(tall).toBeGreaterThan(small);
    expect(tall).toBeCloseTo(1000 * 0.45, -1);
    expect(classroomGeometry(650).plot).toBe(201); // the docstring's example
    // A panel not laid out yet (0 px) or a huge one: the plot stays readable and bounded.
    expect(classroomGeometry(0).plot).toBe(140);
    expect(classroomGeometry(NaN).plot).toBe(140);
    expect(classroomGeometry(10000).plot).toBe(560);
  });
});

describe('chartScale', () => {
  const trans = {
    __: (msgid: string, ...args: any[]) =>
      msgid.replace(/%(\d)/g, (_, i) => String(args[Number(i) - 1])),
    _n: (msgid: string) => msgid
  };
  const rss = {
    spec: {
      key: 'rss',
      label: trans.__('Kernel RSS'),
      style: 'rss',
      unit: 'bytes' as const
    },
    points: [
      { ts: 0, value: 100 * MIB },
      { ts: 60, value: 700 * MIB }
    ]
  };
  const cpu = {
    spec: {
      key: 'cpu_pct',
      label: trans.__('CPU'),
      style: 'cpu',
      unit: 'pct' as const
    },
    points: [{ ts: 30, value: 250 }]
  };

  it('starts the lines right of the longest axis label, never through it', () => {
    const g = NORMAL_GEOMETRY;
    const scale = chartScale(0, 60, 300, g, [rss], [cpu], trans);
    // Labels "256 MiB", "512 MiB", "768 MiB" and "CPU" / "300 %": 7 characters at most.
    expect(scale.left).toBeGreaterThanOrEqual(7 * g.charPx);
    expect(scale.x(0)).toBe(scale.left);
    expect(scale.x(60)).toBe(300);
    expect(scale.cpuTop).toBe(300);
  });

  it('keeps two thirds of a narrow chart for the lines', () => {
    const g = classroomGeometry(900);
    const scale = chartScale(0, 60, 120, g, [rss], [cpu], trans);
    expect(scale.left).toBeLessThanOrEqual(40);
  });
});
