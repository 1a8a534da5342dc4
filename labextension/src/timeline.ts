/* eslint-disable max-lines -- over 600 lines before issue 31; split it */
/**
 * The sidebar's timeline: every memory series of the kernel on one byte scale, its CPU %
 * in a strip below, each cell run as a span and restarts / cleans as marks. Hand-written
 * SVG: a chart library would multiply the bundle for one small chart. The geometry (scales,
 * ticks, window, spans, hover lookup) is pure and jest-tested; `Timeline` only draws it.
 */

import { formatBytes } from './format';
import { IPoint } from './history';
import { el } from './dom';

/** One cell run as the kernel recorded it (kernel-clock seconds; `endedTs` null: running). */
export interface ICellRunLike {
  executionCount: number | null;
  cellId: string | null;
  startedTs: number;
  endedTs: number | null;
  status: string;
  rssStartBytes?: number | null;
  rssEndBytes?: number | null;
  peakRssBytes?: number | null;
  peakExact?: boolean;
}

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

// ---- pure geometry --------------------------------------------------------------------

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

// ---- the widget -----------------------------------------------------------------------

/** One line of the chart: which history series, its legend text, how it is drawn. */
export interface ISeriesSpec {
  key: string;
  label: string;
  /** Its stroke style: `jp-KerasMagic-series-<style>`. */
  style: string;
  unit: 'bytes' | 'pct';
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
 * a label per group that says how many of each kind (`text` names a kind) and fits.
 */
export function groupMarks(
  marks: IMarkLike[],
  x: (ts: number) => number,
  text: (kind: string) => string,
  minGapPx = 14,
  charPx = 6.5,
  width = Infinity
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
    // edge, never past it, nor past the left edge where the chart is narrow.
    const labelWidth = group.label.length * charPx + 4;
    const left = Math.max(0, Math.min(group.x + 3, width - labelWidth));
    group.labelX = left;
    group.showLabel = left >= previousEnd && left + labelWidth <= width;
    if (group.showLabel) {
      previousEnd = left + labelWidth;
    }
  }
  return groups;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

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

/** The sidebar's usual chart: 173 px tall, 10 px text. */
export const NORMAL_GEOMETRY: IChartGeometry = {
  band: 16,
  plot: 112,
  gap: 6,
  strip: 26,
  axis: 13,
  fontPx: 10,
  charPx: 6.5
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

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: { [name: string]: string | number },
  parent?: SVGElement
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, String(value));
  }
  parent?.appendChild(node);
  return node;
}

export namespace Timeline {
  export interface IOptions {
    trans: IWording;
    /** A cell span was clicked (or Enter pressed on it): show that cell. */
    onRun: (run: ICellRunLike) => void;
    /** The window shown first (`FIT` by default). */
    windowMinutes?: number;
    /** The user chose a window (the panel remembers it in the settings). */
    onWindowChange?: (minutes: number) => void;
  }
}

/**
 * The chart with its window switch, crosshair readout and legend. `render` redraws from the
 * data; width follows the sidebar (ResizeObserver), so text is never stretched.
 */
export class Timeline {
  // eslint-disable-next-line max-lines-per-function -- too long before issue 31; split it
  constructor(options: Timeline.IOptions) {
    this._trans = options.trans;
    this._onRun = options.onRun;
    this._windowMin = options.windowMinutes ?? FIT;
    this._onWindow = options.onWindowChange ?? (() => undefined);
    const trans = this._trans;
    this.node = el('div', 'jp-KerasMagic-timeline');

    const bar = el('div', 'jp-KerasMagic-timelineBar');
    bar.appendChild(
      el('h3', 'jp-KerasMagic-sectionTitle', trans.__('Timeline'))
    );
    const switcher = el('div', 'jp-KerasMagic-window');
    switcher.setAttribute('role', 'group');
    switcher.setAttribute('aria-label', trans.__('Time window'));
    for (const minutes of WINDOWS_MIN) {
      const button = el(
        'button',
        'jp-KerasMagic-windowButton',
        minutes === FIT ? trans.__('All') : trans.__('%1 min', minutes)
      );
      button.type = 'button';
      button.dataset.minutes = String(minutes);
      button.title =
        minutes === FIT
          ? trans.__('Show all the history the sidebar has of this kernel')
          : trans._n(
              'Show the last minute',
              'Show the last %1 minutes',
              minutes,
              minutes
            );
      button.addEventListener('click', () => {
        this._windowMin = minutes;
        this._onWindow(minutes);
        this._draw();
      });
      switcher.appendChild(button);
      this._windowButtons.push(button);
    }
    bar.appendChild(switcher);
    this.node.appendChild(bar);

    this._frame = el('div', 'jp-KerasMagic-chartFrame');
    this._svg = svg('svg', {
      class: 'jp-KerasMagic-chart',
      role: 'img',
      tabindex: 0,
      height: chartHeight(NORMAL_GEOMETRY)
    });
    this._describedBy = el('div', 'jp-KerasMagic-srOnly');
    this._describedBy.id = `jp-KerasMagic-chartDesc-${++Timeline._count}`;
    this._svg.setAttribute('aria-describedby', this._describedBy.id);
    this._frame.appendChild(this._svg);
    this._readout = el('div', 'jp-KerasMagic-readout');
    this._readout.setAttribute('aria-live', 'polite');
    this._readout.hidden = true;
    this._frame.appendChild(this._readout);
    this.node.appendChild(this._frame);
    this._legend = el('ul', 'jp-KerasMagic-legend');
    this._legend.setAttribute('aria-label', trans.__('Legend'));
    this.node.appendChild(this._legend);
    this.node.appendChild(this._describedBy);

    this._svg.addEventListener('pointermove', event => {
      this._cursor = this._tsAt(event.clientX);
      this._drawCursor();
    });
    this._svg.addEventListener('pointerleave', () => {
      if (document.activeElement !== this._svg) {
        this._cursor = null;
        this._drawCursor();
      }
    });
    this._svg.addEventListener('blur', () => {
      this._cursor = null;
      this._drawCursor();
    });
    this._svg.addEventListener('click', event => {
      const target = (event.target as Element).closest('[data-run]');
      const index = target ? Number((target as SVGElement).dataset.run) : -1;
      const box = this._spans[index];
      if (box) {
        this._onRun(box.run);
      }
    });
    this._svg.addEventListener('keydown', event => this._onKey(event));
    this._resize = new ResizeObserver(() => {
      const width = Math.round(this._frame.clientWidth);
      if (width > 0 && width !== this._width) {
        this._width = width;
        this._draw();
      }
    });
    this._resize.observe(this._frame);
  }

  readonly node: HTMLElement;

  get windowMinutes(): number {
    return this._windowMin;
  }

  /** Show this window (the remembered choice, read from the settings). */
  set windowMinutes(minutes: number) {
    if (WINDOWS_MIN.includes(minutes) && minutes !== this._windowMin) {
      this._windowMin = minutes;
      this._draw();
    }
  }

  /** The rows and text size the chart is drawn with (the panel's classroom mode sets it). */
  get geometry(): IChartGeometry {
    return this._geometry;
  }

  set geometry(geometry: IChartGeometry) {
    const same = (Object.keys(geometry) as (keyof IChartGeometry)[]).every(
      key => geometry[key] === this._geometry[key]
    );
    if (!same) {
      this._geometry = geometry;
      this._draw();
    }
  }

  dispose(): void {
    this._resize.disconnect();
  }

  render(data: ITimelineData): void {
    this._data = data;
    this._draw();
  }

  // ---- drawing --------------------------------------------------------------------------

  private _range(): [number, number] {
    return windowRange(
      this._windowMin,
      this._data?.now ?? 0,
      this._data?.since ?? null
    );
  }

  private _x(ts: number): number {
    const [from, to] = this._range();
    return ((ts - from) / (to - from)) * this._width;
  }

  private _tsAt(clientX: number): number {
    const [from, to] = this._range();
    const left = this._svg.getBoundingClientRect().left;
    const ratio = Math.min(1, Math.max(0, (clientX - left) / this._width));
    return from + ratio * (to - from);
  }

  // eslint-disable-next-line max-lines-per-function -- too long before issue 31; split it
  private _draw(): void {
    const trans = this._trans;
    this._windowButtons.forEach(button =>
      button.setAttribute(
        'aria-pressed',
        String(Number(button.dataset.minutes) === this._windowMin)
      )
    );
    this.node.dataset.window = String(this._windowMin);
    const root = this._svg;
    root.textContent = '';
    const data = this._data;
    const width = this._width || Math.round(this._frame.clientWidth) || 240;
    this._width = width;
    const g = this._geometry;
    const { band: BAND, plot: PLOT, gap: GAP, strip: STRIP, fontPx } = g;
    const HEIGHT = chartHeight(g);
    root.setAttribute('height', String(HEIGHT));
    root.setAttribute('viewBox', `0 0 ${width} ${HEIGHT}`);
    root.style.fontSize = `${fontPx}px`;
    this.node.dataset.geometry =
      fontPx === NORMAL_GEOMETRY.fontPx ? 'normal' : 'large';
    root.setAttribute(
      'aria-label',
      this._windowMin === FIT
        ? trans.__(
            'Memory timeline of this kernel, all %1 the sidebar has',
            formatSpan(this._range()[1] - this._range()[0])
          )
        : trans._n(
            'Memory timeline of this kernel, last minute',
            'Memory timeline of this kernel, last %1 minutes',
            this._windowMin,
            this._windowMin
          )
    );
    if (!data) {
      return;
    }
    const [from, to] = this._range();
    const visible = data.series.map(spec => ({
      spec,
      points: sliceWindow(data.points(spec.key), from, to)
    }));
    const drawn = visible.filter(s => s.points.some(p => p.value !== null));
    const bytes = drawn.filter(s => s.spec.unit === 'bytes');
    const pct = drawn.filter(s => s.spec.unit === 'pct');
    const maxOf = (list: typeof drawn) => {
      let max = 0;
      for (const { points } of list) {
        for (const point of points) {
          if (point.value !== null && point.value > max) {
            max = point.value;
          }
        }
      }
      return max;
    };
    const { top, ticks } = byteTicks(maxOf(bytes));
    const cpuTop = pctTop(maxOf(pct));
    const yBytes = (v: number) => BAND + PLOT - (v / top) * PLOT;
    const stripTop = BAND + PLOT + GAP;
    const yPct = (v: number) => stripTop + STRIP - (v / cpuTop) * STRIP;
    const x = (ts: number) => this._x(ts);

    // Cell spans first, so that lines and marks are drawn over them.
    const spansLayer = svg('g', { class: 'jp-KerasMagic-spans' }, root);
    this._spans = layoutSpans(data.runs, from, to, width, g.charPx, run =>
      this._spanTexts(run)
    );
    this._spans.forEach((box, index) => {
      const group = svg(
        'g',
        {
          class: `jp-KerasMagic-span${box.running ? ' jp-mod-running' : ''}`,
          'data-run': index,
          'data-label': box.label,
          'data-change': runChange(box.run)?.change ?? '',
          'data-status': box.run.status,
          // A label wider than its tab lies on the background, not the tab: its colour
          // must read on the background (style/base.css).
          'data-label-inside': String(
            box.labelX >= box.x &&
              box.labelX + box.text.length * g.charPx <= box.x + box.width
          )
        },
        spansLayer
      );
      svg(
        'rect',
        {
          class: 'jp-KerasMagic-spanFill',
          x: box.x,
          y: BAND,
          width: box.width,
          height: PLOT + GAP + STRIP
        },
        group
      );
      svg(
        'rect',
        {
          class: 'jp-KerasMagic-spanTab',
          x: box.x,
          y: 1,
          width: box.width,
          height: BAND - 2,
          rx: 2
        },
        group
      );
      if (box.showLabel) {
        const text = svg(
          'text',
          {
            class: 'jp-KerasMagic-spanLabel',
            x: box.labelX + 2,
            y: BAND - Math.round(fontPx * 0.4)
          },
          group
        );
        text.textContent = box.text;
      }
      const title = svg('title', {}, group);
      title.textContent = this._runText(box.run, data.now);
    });

    // Byte grid and its labels (labels last: a halo keeps them readable over lines).
    const grid = svg('g', { class: 'jp-KerasMagic-grid' }, root);
    for (const tick of ticks) {
      svg(
        'line',
        { x1: 0, x2: width, y1: yBytes(tick), y2: yBytes(tick) },
        grid
      );
    }
    svg(
      'line',
      { x1: 0, x2: width, y1: stripTop + STRIP, y2: stripTop + STRIP },
      grid
    );

    const lines = svg('g', { class: 'jp-KerasMagic-plotLines' }, root);
    for (const { spec, points } of bytes) {
      svg(
        'path',
        {
          class: `jp-KerasMagic-series jp-KerasMagic-series-${spec.style}`,
          'data-series': spec.key,
          'data-points': points.filter(p => p.value !== null).length,
          d: linePath(points, x, yBytes)
        },
        lines
      );
    }
    for (const { spec, points } of pct) {
      const d = linePath(points, x, yPct);
      const first = points.find(p => p.value !== null);
      const last = [...points].reverse().find(p => p.value !== null);
      if (first && last && !points.some(p => p.value === null)) {
        svg(
          'path',
          {
            class: 'jp-KerasMagic-cpuArea',
            d: `${d}L${x(last.ts).toFixed(1)},${stripTop + STRIP}L${x(first.ts).toFixed(1)},${stripTop + STRIP}Z`
          },
          lines
        );
      }
      svg(
        'path',
        {
          class: `jp-KerasMagic-series jp-KerasMagic-series-${spec.style}`,
          'data-series': spec.key,
          'data-points': points.filter(p => p.value !== null).length,
          d
        },
        lines
      );
    }

    const marks = svg('g', { class: 'jp-KerasMagic-marks' }, root);
    const groups = groupMarks(
      data.marks.filter(m => m.ts >= from && m.ts <= to),
      x,
      kind => this._markText(kind),
      Math.max(14, fontPx * 1.4),
      g.charPx,
      width
    );
    for (const markGroup of groups) {
      const mx = markGroup.x;
      const kinds = new Set(markGroup.marks.map(m => m.kind));
      const group = svg(
        'g',
        {
          class: 'jp-KerasMagic-mark',
          'data-kind': kinds.size === 1 ? markGroup.marks[0].kind : 'mixed',
          'data-count': markGroup.marks.length
        },
        marks
      );
      svg('line', { x1: mx, x2: mx, y1: BAND, y2: stripTop + STRIP }, group);
      if (markGroup.showLabel) {
        // A backing under the label: at the foot of the plot the TF lines often run near
        // zero, and a halo alone leaves them crossing 16 px text.
        svg(
          'rect',
          {
            class: 'jp-KerasMagic-markBacking',
            x: markGroup.labelX - 1,
            y: BAND + PLOT - 4 - fontPx,
            width: markGroup.label.length * g.charPx + 2,
            height: fontPx + 3,
            rx: 2
          },
          group
        );
      }
      const label = svg(
        'text',
        {
          class: 'jp-KerasMagic-markLabel',
          x: markGroup.labelX,
          // At the foot of the byte plot: its top row holds the axis' labels (the zero
          // tick has none) and the RSS line's peak; the backing covers the lines here.
          y: BAND + PLOT - 4,
          'text-anchor': 'start'
        },
        group
      );
      label.textContent = markGroup.label;
      if (!markGroup.showLabel) {
        label.setAttribute('visibility', 'hidden');
      }
      const title = svg('title', {}, group);
      title.textContent = markGroup.marks
        .map(m => `${this._markText(m.kind)} ${formatClock(m.ts)}`)
        .join('\n');
    }

    const labels = svg('g', { class: 'jp-KerasMagic-axisLabels' }, root);
    const label = (text: string, lx: number, ly: number, anchor = 'start') => {
      const node = svg('text', { x: lx, y: ly, 'text-anchor': anchor }, labels);
      node.textContent = text;
    };
    ticks
      .slice(1)
      .forEach(tick => label(formatTick(tick), 2, yBytes(tick) + fontPx));
    label(trans.__('CPU %1', formatPct(cpuTop)), 2, stripTop + fontPx - 1);
    label('−' + formatSpan(to - from), 0, HEIGHT - 2);
    label(trans.__('now'), width, HEIGHT - 2, 'end');

    this._cursorLayer = svg('g', { class: 'jp-KerasMagic-cursor' }, root);
    this._visible = visible;
    this._renderLegend(drawn.map(s => s.spec));
    this._describe(drawn, data);
    this._drawCursor();
  }

  private _renderLegend(specs: ISeriesSpec[]): void {
    // Labels too: a series' label may follow the data (whose GPU allocators are in use).
    const key = specs.map(s => `${s.key}:${s.label}`).join(',');
    if (key === this._legendKey) {
      return;
    }
    this._legendKey = key;
    this._legend.textContent = '';
    for (const spec of specs) {
      const item = el('li', 'jp-KerasMagic-legendItem');
      item.dataset.series = spec.key;
      const swatch = svg('svg', {
        class: 'jp-KerasMagic-swatch',
        width: 16,
        height: 8,
        'aria-hidden': 'true'
      });
      svg(
        'line',
        {
          class: `jp-KerasMagic-series jp-KerasMagic-series-${spec.style}`,
          x1: 0,
          x2: 16,
          y1: 4,
          y2: 4
        },
        swatch
      );
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(spec.label));
      this._legend.appendChild(item);
    }
  }

  /** What a screen reader gets for the chart: each series' latest and range, the runs. */
  private _describe(
    drawn: { spec: ISeriesSpec; points: IPoint[] }[],
    data: ITimelineData
  ): void {
    const trans = this._trans;
    const parts = drawn.map(({ spec, points }) => {
      const values = points
        .map(p => p.value)
        .filter((v): v is number => v !== null);
      const show = (v: number) =>
        spec.unit === 'bytes' ? formatBytes(v) : formatPct(v);
      return trans.__(
        '%1 %2 (from %3 to %4)',
        spec.label,
        show(values[values.length - 1]),
        show(Math.min(...values)),
        show(Math.max(...values))
      );
    });
    const holes = drawn.length ? gapsIn(drawn[0].points) : [];
    holes.forEach(hole =>
      parts.push(
        trans.__(
          'no samples for %1 s from %2 (the kernel could not sample)',
          Math.round(hole.to - hole.from),
          formatClock(hole.from)
        )
      )
    );
    parts.push(trans.__('%1 cell runs', this._spans.length));
    const marks = data.marks.filter(m => m.ts >= this._range()[0]);
    if (marks.length) {
      parts.push(marks.map(m => this._markText(m.kind)).join(', '));
    }
    parts.push(
      trans.__(
        'Arrow keys move a cursor through the samples; Enter shows the cell that ran then.'
      )
    );
    this._describedBy.textContent = parts.join('; ');
  }

  private _markText(kind: string): string {
    switch (kind) {
      case 'restart':
        return this._trans.__('restart');
      case 'death':
        return this._trans.__('died');
      case 'clear_tf':
        return this._trans.__('clear');
      case 'fresh_model':
        return this._trans.__('fresh model');
      default:
        return kind;
    }
  }

  private _runText(run: ICellRunLike, now: number): string {
    const end = run.endedTs ?? now;
    return run.endedTs === null
      ? this._trans.__(
          'cell %1 running since %2',
          runLabel(run),
          formatClock(run.startedTs)
        )
      : this._trans.__(
          'cell %1 %2–%3 (%4 s)',
          runLabel(run),
          formatClock(run.startedTs),
          formatClock(end),
          (end - run.startedTs).toFixed(1)
        ) + this._changeText(run);
  }

  /** A span's longer labels, "[3] +201 MiB, peak 1.50 GiB" then "[3] +201 MiB"; none
   * for a running cell or where the kernel did not say (before protocol 1.5). */
  private _spanTexts(run: ICellRunLike): string[] {
    const figures = runChange(run);
    if (!figures) {
      return [];
    }
    const trans = this._trans;
    const short = trans.__('%1 %2', runLabel(run), figures.change);
    return figures.peak
      ? [
          trans.__(
            '%1 %2, peak %3',
            runLabel(run),
            figures.change,
            figures.peak
          ),
          short
        ]
      : [short];
  }

  /** `, +201 MiB in [3], peak 1.2 GiB`: empty where the kernel did not say. */
  private _changeText(run: ICellRunLike): string {
    const figures = runChange(run);
    if (!figures) {
      return '';
    }
    const trans = this._trans;
    return (
      ', ' +
      trans.__('%1 in %2', figures.change, runLabel(run)) +
      (figures.peak ? ', ' + trans.__('peak %1', figures.peak) : '')
    );
  }

  /** The crosshair and the readout of every series at the cursor's time. */
  private _drawCursor(): void {
    const layer = this._cursorLayer;
    const data = this._data;
    if (!layer || !data) {
      return;
    }
    layer.textContent = '';
    const ts = this._cursor;
    this._readout.hidden = ts === null;
    this.node.dataset.cursor = ts === null ? '' : String(ts);
    if (ts === null) {
      return;
    }
    const cx = this._x(ts);
    const g = this._geometry;
    svg(
      'line',
      { x1: cx, x2: cx, y1: g.band, y2: chartHeight(g) - g.axis },
      layer
    );
    const trans = this._trans;
    const readout = this._readout;
    readout.textContent = '';
    const head = el('div', 'jp-KerasMagic-readoutTime', formatClock(ts));
    const run = runAt(data.runs, ts, data.now);
    if (run) {
      head.textContent += ' · ' + trans.__('cell %1', runLabel(run));
    }
    readout.appendChild(head);
    const maxGap = Math.max(2 * data.intervalS, 1.5);
    for (const { spec, points } of this._visible) {
      const point = pointNear(points, ts, maxGap);
      if (!point || point.value === null) {
        continue;
      }
      const row = el('div', 'jp-KerasMagic-readoutRow');
      row.dataset.series = spec.key;
      const swatch = el(
        'span',
        `jp-KerasMagic-dot jp-KerasMagic-dot-${spec.style}`
      );
      row.appendChild(swatch);
      row.appendChild(el('span', 'jp-KerasMagic-readoutName', spec.label));
      row.appendChild(
        el(
          'span',
          'jp-KerasMagic-readoutValue',
          spec.unit === 'bytes'
            ? formatBytes(point.value)
            : formatPct(point.value)
        )
      );
      readout.appendChild(row);
    }
    // Keep the readout clear of the cursor: on the side away from it.
    readout.classList.toggle('jp-mod-left', cx > this._width / 2);
  }

  private _onKey(event: KeyboardEvent): void {
    const data = this._data;
    if (!data) {
      return;
    }
    const [from, to] = this._range();
    const step = Math.max(data.intervalS, (to - from) / 60);
    let ts = this._cursor ?? to;
    switch (event.key) {
      case 'ArrowLeft':
        ts -= event.shiftKey ? step * 10 : step;
        break;
      case 'ArrowRight':
        ts += event.shiftKey ? step * 10 : step;
        break;
      case 'Home':
        ts = from;
        break;
      case 'End':
        ts = to;
        break;
      case 'Escape':
        this._cursor = null;
        this._drawCursor();
        return;
      case 'Enter':
      case ' ': {
        const run = this._cursor === null ? null : runAt(data.runs, ts, to);
        if (run) {
          event.preventDefault();
          this._onRun(run);
        }
        return;
      }
      default:
        return;
    }
    event.preventDefault();
    this._cursor = Math.min(to, Math.max(from, ts));
    this._drawCursor();
  }

  private static _count = 0;
  private _trans: IWording;
  private _onRun: (run: ICellRunLike) => void;
  private _windowMin: number;
  private _onWindow: (minutes: number) => void;
  private _windowButtons: HTMLButtonElement[] = [];
  private _frame: HTMLElement;
  private _svg: SVGSVGElement;
  private _readout: HTMLElement;
  private _legend: HTMLElement;
  private _legendKey = '';
  private _describedBy: HTMLElement;
  private _cursorLayer: SVGGElement | null = null;
  private _cursor: number | null = null;
  private _data: ITimelineData | null = null;
  private _visible: { spec: ISeriesSpec; points: IPoint[] }[] = [];
  private _spans: ISpanBox[] = [];
  private _width = 0;
  private _geometry: IChartGeometry = NORMAL_GEOMETRY;
  private _resize: ResizeObserver;
}
