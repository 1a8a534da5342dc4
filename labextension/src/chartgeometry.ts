/**
 * The timeline's pure geometry: scales, ticks, the window, cell spans, mark groups and the
 * hover lookup, in pixels and kernel-clock seconds. No DOM: jest tests it, and the timeline
 * (timeline.ts, timelinelayers.ts) only draws what it computes.
 */

import { formatBytes } from './format';
import { ICellRun, IPoint } from './history';

/** One cell run as the kernel recorded it: the history's own type, named as the chart uses it. */
export type ICellRunLike = ICellRun;

/**
 * What a finished cell did to the kernel's memory: `+201 MiB`, and its peak where that rose
 * above both ends (`peak 1.2 GiB`); null where the kernel did not say (before 1.5).
 */
export function runChange(
  run: ICellRunLike
): { change: string; peak: string | null } | null {
  const start = run.rssStartBytes;
  const end = run.rssEndBytes;
  if (
    run.endedTs === null ||
    typeof start !== 'number' ||
    typeof end !== 'number'
  ) {
    return null;
  }
  const delta = end - start;
  const change = (delta >= 0 ? '+' : '') + formatBytes(delta);
  const peak = run.peakRssBytes;
  return {
    change,
    peak:
      typeof peak === 'number' && peak > Math.max(start, end)
        ? formatBytes(peak)
        : null
  };
}

/** A moment marked on the timeline: `restart`, `clear_tf`, `fresh_model`. */
export interface IMarkLike {
  kind: string;
  ts: number;
}

/** The part of a `TranslationBundle` the timeline needs (jest passes a plain one). */
export interface IWording {
  __(msgid: string, ...args: any[]): string;
  /** Singular or plural by `n` (TranslationBundle's `_n`): `n` is %1, `args` follow from %2. */
  _n(msgid: string, msgidPlural: string, n: number, ...args: any[]): string;
}

const KIB = 1024;
const MIB = KIB * KIB;

/**
 * Byte ticks from 0 at a power-of-two step (0, 256 MiB, 512 MiB, 768 MiB…), at most
 * `maxTicks` steps, the top tick at or above `max`. Powers of two because the numbers are
 * IEC (the labels read 256 MiB, not 268 MB). A tiny or empty range still gets a 1 MiB
 * scale, so a flat line sits at its level instead of filling the box.
 *
 * Example: `byteTicks(700 * MIB)` → `{ top: 768 MiB, ticks: [0, 256, 512, 768 MiB] }`.
 */
export function byteTicks(
  max: number,
  maxTicks = 4
): { top: number; ticks: number[] } {
  const high = Number.isFinite(max) && max > MIB ? max : MIB;
  const step = 2 ** Math.ceil(Math.log2(high / maxTicks));
  const count = Math.max(1, Math.ceil(high / step - 1e-9));
  const ticks: number[] = [];
  for (let i = 0; i <= count; i++) {
    ticks.push(i * step);
  }
  return { top: count * step, ticks };
}

/** A tick label: `0`, `256 MiB`, `1 GiB`, `1.5 GiB` (no trailing zeros, unlike formatBytes). */
export function formatTick(bytes: number): string {
  if (bytes === 0) {
    return '0';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${Number(value.toFixed(2))} ${units[unit]}`;
}

/** The CPU strip's top: 100 %, or the next 100 above (a kernel can use several cores). */
export function pctTop(max: number): number {
  return Number.isFinite(max) && max > 100 ? Math.ceil(max / 100) * 100 : 100;
}

/**
 * The points inside `[from, to]`, plus the last one before `from` so that a line enters the
 * window from its left edge instead of starting late. `points` are oldest first.
 */
export function sliceWindow(
  points: IPoint[],
  from: number,
  to: number
): IPoint[] {
  let first = lowerBound(points, from);
  if (first > 0) {
    first -= 1;
  }
  let end = points.length;
  while (end > first && points[end - 1].ts > to) {
    end -= 1;
  }
  return points.slice(first, end);
}

/** Index of the first point with `ts >= value` (points oldest first). */
function lowerBound(points: IPoint[], value: number): number {
  let lo = 0;
  let hi = points.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid].ts < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/**
 * The point nearest to `ts` with a number, if one lies within `maxGap` seconds; what the
 * crosshair reads for each series.
 */
export function pointNear(
  points: IPoint[],
  ts: number,
  maxGap: number
): IPoint | null {
  const at = lowerBound(points, ts);
  let best: IPoint | null = null;
  for (const index of [at - 1, at]) {
    const point = points[index];
    if (
      point &&
      point.value !== null &&
      Math.abs(point.ts - ts) <= maxGap &&
      (best === null || Math.abs(point.ts - ts) < Math.abs(best.ts - ts))
    ) {
      best = point;
    }
  }
  return best;
}

/**
 * The holes in a series: from the last number before a null to the first number after it.
 * A null between numbers is where the kernel took no sample (`SeriesHistory.addGap`).
 */
export function gapsIn(points: IPoint[]): { from: number; to: number }[] {
  const holes: { from: number; to: number }[] = [];
  let lastNumber: number | null = null;
  let inHole = false;
  for (const point of points) {
    if (point.value === null) {
      inHole = lastNumber !== null;
    } else {
      if (inHole && lastNumber !== null) {
        holes.push({ from: lastNumber, to: point.ts });
      }
      inHole = false;
      lastNumber = point.ts;
    }
  }
  return holes;
}

/** The SVG path (`M…L…`) of a series, one subpath per run of numbers (null: a gap). */
export function linePath(
  points: IPoint[],
  x: (ts: number) => number,
  y: (value: number) => number
): string {
  const parts: string[] = [];
  let open = false;
  for (const point of points) {
    if (point.value === null) {
      open = false;
      continue;
    }
    parts.push(
      `${open ? 'L' : 'M'}${x(point.ts).toFixed(1)},${y(point.value).toFixed(1)}`
    );
    open = true;
  }
  return parts.join('');
}

/** Where one cell run is drawn. */
export interface ISpanBox {
  run: ICellRunLike;
  x: number;
  width: number;
  label: string;
  /** What the tab shows: the longest of the run's longer texts that fits, else `label`. */
  text: string;
  /** False when the label would run into the next span: the readout still names it. */
  showLabel: boolean;
  labelX: number;
  running: boolean;
}

/** `[12]`, as the notebook numbers cells; `[*]` while no number is known. */
export function runLabel(run: ICellRunLike): string {
  return `[${run.executionCount === null ? '*' : run.executionCount}]`;
}

/**
 * The cell runs that overlap `[from, to]`, as boxes `width` pixels wide in all; a running
 * cell reaches `to`. A label is shown where it fits before the next span starts (about
 * `charPx` per character), so short back-to-back cells do not print over each other.
 * `longer(run)` gives texts to try first, most telling first ("[3] +201 MiB, peak 1.50 GiB",
 * "[3] +201 MiB"): a span with room says what its cell did without a hover (issue 19).
 */
export function layoutSpans(
  runs: ICellRunLike[],
  from: number,
  to: number,
  width: number,
  charPx = 6.5,
  longer: (run: ICellRunLike) => string[] = () => []
): ISpanBox[] {
  const span = to - from || 1;
  const x = (ts: number) => ((ts - from) / span) * width;
  const boxes: ISpanBox[] = [];
  for (const run of [...runs].sort((a, b) => a.startedTs - b.startedTs)) {
    const end = run.endedTs ?? to;
    if (end < from || run.startedTs > to) {
      continue;
    }
    const left = Math.max(0, x(run.startedTs));
    const right = Math.min(width, x(end));
    boxes.push({
      run,
      x: left,
      // A sub-pixel cell stays visible.
      width: Math.max(2, right - left),
      label: runLabel(run),
      text: runLabel(run),
      showLabel: false,
      labelX: left,
      running: run.endedTs === null
    });
  }
  // A label starts at its span, or further left where the span is at the right edge
  // (the newest cell: the one people look for), never over its neighbours' labels.
  let previousEnd = -Infinity;
  // The number may move left of its span (at the right edge); a longer text starts at its
  // span, or it would seem to belong to the one before.
  const placed = (
    text: string,
    boxX: number,
    limit: number,
    moves: boolean
  ) => {
    const labelWidth = text.length * charPx + 4;
    const labelX = moves
      ? Math.max(0, Math.min(boxX, limit - labelWidth))
      : boxX;
    const fits = labelX >= previousEnd && labelX + labelWidth <= limit;
    return { labelX, end: labelX + labelWidth, fits };
  };
  boxes.forEach((box, index) => {
    const next = boxes[index + 1];
    const limit = next ? next.x : width;
    for (const text of [...longer(box.run), box.label]) {
      const place = placed(text, box.x, limit, text === box.label);
      if (place.fits) {
        box.text = text;
        box.labelX = place.labelX;
        box.showLabel = true;
        previousEnd = place.end;
        return;
      }
    }
    box.labelX = placed(box.label, box.x, limit, true).labelX;
  });
  return boxes;
}

/** The run whose span contains `ts` (the latest one if several), else null. */
export function runAt(
  runs: ICellRunLike[],
  ts: number,
  now: number
): ICellRunLike | null {
  let found: ICellRunLike | null = null;
  for (const run of runs) {
    if (run.startedTs <= ts && ts <= (run.endedTs ?? now)) {
      if (found === null || run.startedTs > found.startedTs) {
        found = run;
      }
    }
  }
  return found;
}

/** HH:MM:SS of a kernel-clock time (epoch seconds), in the browser's time zone. */
export function formatClock(ts: number): string {
  const date = new Date(ts * 1000);
  return [date.getHours(), date.getMinutes(), date.getSeconds()]
    .map(part => String(part).padStart(2, '0'))
    .join(':');
}

/** The percentage as the headline and readout show it: `7 %`, `143 %`, `0.4 %`. */
export function formatPct(pct: number): string {
  return `${pct < 10 && pct > 0 ? pct.toFixed(1) : Math.round(pct)} %`;
}

/** A value of a series in its unit: `1.50 GiB`, `12 %`, `24`. */
export function formatValue(unit: SeriesUnit, value: number): string {
  if (unit === 'bytes') {
    return formatBytes(value);
  }
  return unit === 'pct' ? formatPct(value) : String(Math.round(value));
}

/** The top of a count's own scale: 10, 20, 50, 100, ... at or above `max`. */
export function countTop(max: number): number {
  let top = 10;
  while (Number.isFinite(max) && top < max) {
    top *= top.toString().startsWith('2') ? 2.5 : 2;
  }
  return top;
}

/**
 * What a series counts: bytes (the plot's left axis), % of one core (the CPU strip), or a
 * count on its own scale over the plot (CustomGradient entries), labelled at the right.
 */
export type SeriesUnit = 'bytes' | 'pct' | 'count';

/** One line of the chart: which history series, its legend text, how it is drawn. */
export interface ISeriesSpec {
  key: string;
  label: string;
  /** Its stroke style: `jp-KerasMagic-series-<style>`. */
  style: string;
  unit: SeriesUnit;
}

export interface ITimelineData {
  series: ISeriesSpec[];
  points: (key: string) => IPoint[];
  runs: ICellRunLike[];
  marks: IMarkLike[];
  /** The kernel's latest time (its last sample), so browser clock skew does not matter. */
  now: number;
  /** Seconds between samples: how far the crosshair looks for a series' point. */
  intervalS: number;
  /** The oldest time the chart has anything for (kernel clock): `FIT` starts there. */
  since?: number | null;
}

/** The window switch's choices in minutes; `FIT` (0): all the history the chart has. */
export const FIT = 0;
export const WINDOWS_MIN = [FIT, 1, 5, 15];

/** The narrowest `FIT` window: a chart of the first seconds still spreads its samples out. */
export const MIN_FIT_S = 15;

/**
 * The time range the chart shows: the last `windowMin` minutes, or with `FIT` everything from
 * the oldest thing it has (`since`) to `now`, never under `MIN_FIT_S` (a 25 s lesson then
 * fills the chart instead of its right tenth); a minute where it has nothing yet.
 */
export function windowRange(
  windowMin: number,
  now: number,
  since: number | null
): [number, number] {
  if (windowMin !== FIT) {
    return [now - windowMin * 60, now];
  }
  const from = since === null ? now - 60 : Math.min(since, now - MIN_FIT_S);
  return [from, now];
}

/** `25 s`, `3 min`, `1 h 5 min`: how far back the chart's left edge is. */
export function formatSpan(seconds: number): string {
  if (seconds < 90) {
    return `${Math.round(seconds)} s`;
  }
  const minutes = Math.round(seconds / 60);
  return minutes < 60
    ? `${minutes} min`
    : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** Marks close enough on the chart to be drawn as one (six `fresh_model` in a second). */
export interface IMarkGroup {
  x: number;
  marks: IMarkLike[];
  /** `clear`, or `6× fresh model`, or `3× clear, 2× fresh model`. */
  label: string;
  /** False where the label would run into the previous group's: the hover still says it. */
  showLabel: boolean;
  /** Where the label starts: right of the mark, or left of it so as to end inside the chart. */
  labelX: number;
}

/**
 * Marks grouped where they lie within `minGapPx` of the group's first one, in time order, with
 * a label per group that says how many of each kind (`text` names a kind) and fits between
 * `minX` (the plot's left: the axis labels' gutter is theirs) and `width`.
 */
export function groupMarks(
  marks: IMarkLike[],
  x: (ts: number) => number,
  text: (kind: string) => string,
  minGapPx = 14,
  charPx = 6.5,
  width = Infinity,
  minX = 0
): IMarkGroup[] {
  const groups: IMarkGroup[] = [];
  for (const mark of [...marks].sort((a, b) => a.ts - b.ts)) {
    const mx = x(mark.ts);
    const last = groups[groups.length - 1];
    if (last && mx - last.x < minGapPx) {
      last.marks.push(mark);
    } else {
      groups.push({
        x: mx,
        marks: [mark],
        label: '',
        showLabel: false,
        labelX: mx + 3
      });
    }
  }
  let previousEnd = -Infinity;
  for (const group of groups) {
    const counts = new Map<string, number>();
    group.marks.forEach(m => counts.set(m.kind, (counts.get(m.kind) ?? 0) + 1));
    group.label = [...counts.entries()]
      .map(([kind, n]) => (n > 1 ? `${n}× ${text(kind)}` : text(kind)))
      .join(', ');
    // A mark near the right edge (the newest: the one looked for) has its label end at the
    // edge, never past it, nor over the axis labels where the chart is narrow (then the
    // label is hidden and the hover tells it).
    const labelWidth = group.label.length * charPx + 4;
    const fitted = Math.max(minX, Math.min(group.x + 3, width - labelWidth));
    // A label too long for the plot stays inside the chart, hidden (it would cover the axis).
    const left =
      fitted + labelWidth <= width ? fitted : Math.max(0, width - labelWidth);
    group.labelX = left;
    group.showLabel =
      left >= Math.max(previousEnd, minX) && left + labelWidth <= width;
    if (group.showLabel) {
      previousEnd = left + labelWidth;
    }
  }
  return groups;
}

/**
 * The chart's rows in pixels, top to bottom, and the size of its text. The text rows (the
 * span label band, the time axis) follow `fontPx`, and `charPx` is what a label's character
 * takes, for the layouts that keep labels apart.
 */
export interface IChartGeometry {
  /** The cell-span label band above the plot. */
  band: number;
  /** The byte plot. */
  plot: number;
  gap: number;
  /** The CPU strip. */
  strip: number;
  /** The time labels. */
  axis: number;
  fontPx: number;
  charPx: number;
}

/**
 * The sidebar's usual chart: 183 px tall, 12 px text (the panel's smallest, issue 31 item 6;
 * it was 10 px), with the label band, the CPU strip and the time axis grown to hold it.
 */
export const NORMAL_GEOMETRY: IChartGeometry = {
  band: 19,
  plot: 112,
  gap: 6,
  strip: 30,
  axis: 16,
  fontPx: 12,
  // 12 px UI text is about 7 px a character; a little over it keeps labels apart.
  charPx: 7.5
};

/** The share of the panel's height the classroom chart takes, and its plot's bounds. */
const CLASSROOM_SHARE = 0.45;
const CLASSROOM_PLOT_MIN = 140;
const CLASSROOM_PLOT_MAX = 560;

/**
 * The classroom chart for a panel `panelHeight` pixels tall: 16 px text, and a plot that
 * grows with the panel (a projector's sidebar is tall) within bounds.
 *
 * @example
 * classroomGeometry(650).plot; // 201: 45 % of 650 px less the text rows and the CPU strip
 */
export function classroomGeometry(panelHeight: number): IChartGeometry {
  const fixed = { band: 24, gap: 8, strip: 40, axis: 20 };
  const rows = fixed.band + fixed.gap + fixed.strip + fixed.axis;
  const wanted = Math.round(
    (Number.isFinite(panelHeight) ? panelHeight : 0) * CLASSROOM_SHARE - rows
  );
  return {
    ...fixed,
    plot: Math.min(CLASSROOM_PLOT_MAX, Math.max(CLASSROOM_PLOT_MIN, wanted)),
    fontPx: 16,
    // 16 px UI text is about 9.5 px a character ("[12]", "3× clear"); a little over it, so
    // that labels are kept apart rather than overlapping.
    charPx: 10
  };
}

/** The chart's whole height for `g`. */
export function chartHeight(g: IChartGeometry): number {
  return g.band + g.plot + g.gap + g.strip + g.axis;
}
