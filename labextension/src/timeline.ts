/**
 * The sidebar's timeline: every memory series of the kernel on one byte scale, its CPU %
 * in a strip below, each cell run as a span and restarts / cleans as marks. Hand-written
 * SVG drawn in layers (timelinelayers.ts) from a pure geometry (chartgeometry.ts, jest-tested);
 * docs/design/sidebar.md says why no chart library.
 */

import {
  chartHeight,
  FIT,
  formatClock,
  formatSpan,
  formatValue,
  gapsIn,
  groupMarks,
  ICellRunLike,
  IChartGeometry,
  ISeriesSpec,
  ISpanBox,
  ITimelineData,
  IWording,
  layoutSpans,
  NORMAL_GEOMETRY,
  pointNear,
  runAt,
  runLabel,
  sliceWindow,
  windowRange,
  WINDOWS_MIN
} from './chartgeometry';
import { RUNS, runsRange } from './runswindow';
import { el, svg } from './dom';
import { IPoint } from './history';
import {
  chartScale,
  drawAxisLabels,
  drawGrid,
  drawMarks,
  drawSeries,
  drawSpans,
  markText,
  runText,
  spanTexts
} from './timelinelayers';

export * from './chartgeometry';

/** The window switch's choices: "Cell runs" (`RUNS`), then "All" (`FIT`) and the minutes. */
export const WINDOW_CHOICES = [RUNS, ...WINDOWS_MIN];

/** A window's button: `Cell runs`, `All`, `5 min`. */
function windowText(trans: IWording, minutes: number): string {
  if (minutes === RUNS) {
    return trans.__('Cell runs');
  }
  return minutes === FIT ? trans.__('All') : trans.__('%1 min', minutes);
}

/** What a window's button shows, as its hover says it. */
function windowTitle(trans: IWording, minutes: number): string {
  if (minutes === RUNS) {
    return trans.__(
      'Fit the latest cell runs (runs under 2 minutes apart), not the idle time since'
    );
  }
  return minutes === FIT
    ? trans.__('Show all the history the sidebar has of this kernel')
    : trans._n(
        'Show the last minute',
        'Show the last %1 minutes',
        minutes,
        minutes
      );
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
  constructor(options: Timeline.IOptions) {
    this._trans = options.trans;
    this._onRun = options.onRun;
    this._windowMin = options.windowMinutes ?? FIT;
    this._onWindow = options.onWindowChange ?? (() => undefined);
    const trans = this._trans;
    this.node = el('div', 'jp-KerasMagic-timeline');
    this.node.appendChild(this._windowBar());

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
    this._listen();
    this._resize = new ResizeObserver(() => {
      const width = Math.round(this._frame.clientWidth);
      if (width > 0 && width !== this._width) {
        this._width = width;
        this._draw();
      }
    });
    this._resize.observe(this._frame);
  }

  /** The title and the window switch above the chart. */
  private _windowBar(): HTMLElement {
    const trans = this._trans;
    const bar = el('div', 'jp-KerasMagic-timelineBar');
    bar.appendChild(
      el('h3', 'jp-KerasMagic-sectionTitle', trans.__('Timeline'))
    );
    const switcher = el('div', 'jp-KerasMagic-window');
    switcher.setAttribute('role', 'group');
    switcher.setAttribute('aria-label', trans.__('Time window'));
    for (const minutes of WINDOW_CHOICES) {
      const button = el(
        'button',
        'jp-KerasMagic-windowButton',
        windowText(trans, minutes)
      );
      button.type = 'button';
      button.dataset.minutes = String(minutes);
      button.title = windowTitle(trans, minutes);
      button.addEventListener('click', () => {
        this._windowMin = minutes;
        this._onWindow(minutes);
        this._draw();
      });
      switcher.appendChild(button);
      this._windowButtons.push(button);
    }
    bar.appendChild(switcher);
    return bar;
  }

  /** The pointer moves the crosshair, a click on a span shows its cell, keys move it too. */
  private _listen(): void {
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
  }

  readonly node: HTMLElement;

  get windowMinutes(): number {
    return this._windowMin;
  }

  /** Show this window (the remembered choice, or the mode's default). */
  set windowMinutes(minutes: number) {
    if (WINDOW_CHOICES.includes(minutes) && minutes !== this._windowMin) {
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

  /**
   * The window's times; "Cell runs" before any run shows what "All" shows. Its runs make the
   * stretch; marks soon after it extend it (a Clear session pressed after the lesson's last run).
   */
  private _range(): [number, number] {
    const now = this._data?.now ?? 0;
    const runs = this._data?.runs ?? [];
    const marks = (this._data?.marks ?? []).map(m => m.ts);
    const fitted =
      this._windowMin === RUNS ? runsRange(runs, now, marks) : null;
    return (
      fitted ??
      windowRange(
        this._windowMin === RUNS ? FIT : this._windowMin,
        now,
        this._data?.since ?? null
      )
    );
  }

  private _x(ts: number): number {
    const [from, to] = this._range();
    const plot = this._width - this._left;
    return this._left + ((ts - from) / (to - from || 1)) * plot;
  }

  private _tsAt(clientX: number): number {
    const [from, to] = this._range();
    const plotLeft = this._svg.getBoundingClientRect().left + this._left;
    const plot = this._width - this._left;
    const ratio = Math.min(1, Math.max(0, (clientX - plotLeft) / plot));
    return from + ratio * (to - from);
  }

  /** The window's buttons, the chart's size and its accessible name. */
  private _drawFrame(): void {
    this._windowButtons.forEach(button =>
      button.setAttribute(
        'aria-pressed',
        String(Number(button.dataset.minutes) === this._windowMin)
      )
    );
    this.node.dataset.window = String(this._windowMin);
    const root = this._svg;
    root.textContent = '';
    this._width = this._width || Math.round(this._frame.clientWidth) || 240;
    const g = this._geometry;
    const height = chartHeight(g);
    root.setAttribute('height', String(height));
    root.setAttribute('viewBox', `0 0 ${this._width} ${height}`);
    root.style.fontSize = `${g.fontPx}px`;
    this.node.dataset.geometry =
      g.fontPx === NORMAL_GEOMETRY.fontPx ? 'normal' : 'large';
    const [from, to] = this._range();
    root.setAttribute('aria-label', this._chartName(from, to));
  }

  /** The chart's accessible name: which window it shows. */
  private _chartName(from: number, to: number): string {
    const trans = this._trans;
    if (this._windowMin === RUNS) {
      return trans.__(
        'Memory timeline of this kernel, its cell runs from %1 to %2',
        formatClock(from),
        formatClock(to)
      );
    }
    if (this._windowMin === FIT) {
      return trans.__(
        'Memory timeline of this kernel, all %1 the sidebar has',
        formatSpan(to - from)
      );
    }
    return trans._n(
      'Memory timeline of this kernel, last minute',
      'Memory timeline of this kernel, last %1 minutes',
      this._windowMin,
      this._windowMin
    );
  }

  /** Everything again, layer by layer (timelinelayers.ts), bottom to top. */
  private _draw(): void {
    this._drawFrame();
    const data = this._data;
    if (!data) {
      return;
    }
    const root = this._svg;
    const g = this._geometry;
    const [from, to] = this._range();
    const visible = data.series.map(spec => ({
      spec,
      points: sliceWindow(data.points(spec.key), from, to)
    }));
    const drawn = visible.filter(s => s.points.some(p => p.value !== null));
    const bytes = drawn.filter(s => s.spec.unit === 'bytes');
    const pct = drawn.filter(s => s.spec.unit === 'pct');
    const counts = drawn.filter(s => s.spec.unit === 'count');
    const trans = this._trans;
    const scale = chartScale(
      from,
      to,
      this._width,
      g,
      bytes,
      pct,
      trans,
      counts
    );
    this._left = scale.left;
    // Where the plot starts, right of the axis labels' gutter (the browser tests read it).
    this.node.dataset.plotLeft = String(scale.left);
    // Laid out on the plot's width, right of the axis labels' gutter.
    this._spans = layoutSpans(
      data.runs,
      from,
      to,
      scale.width - scale.left,
      g.charPx,
      run => spanTexts(trans, run)
    ).map(box => ({
      ...box,
      x: box.x + scale.left,
      labelX: box.labelX + scale.left
    }));
    drawSpans(root, this._spans, scale, run => runText(trans, run, data.now));
    drawGrid(root, scale);
    drawSeries(root, bytes, pct, scale, counts);
    const groups = groupMarks(
      data.marks.filter(m => m.ts >= from && m.ts <= to),
      scale.x,
      kind => markText(trans, kind),
      Math.max(14, g.fontPx * 1.4),
      g.charPx,
      scale.width,
      scale.left
    );
    drawMarks(root, groups, scale, kind => markText(trans, kind));
    drawAxisLabels(root, scale, trans, this._windowMin === RUNS);
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
      const show = (v: number) => formatValue(spec.unit, v);
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
      parts.push(marks.map(m => markText(this._trans, m.kind)).join(', '));
    }
    parts.push(
      trans.__(
        'Arrow keys move a cursor through the samples; Enter shows the cell that ran then.'
      )
    );
    this._describedBy.textContent = parts.join('; ');
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
          formatValue(spec.unit, point.value)
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
  /** The axis labels' gutter of the last drawing (timelinelayers.ts `chartScale`). */
  private _left = 0;
  private _geometry: IChartGeometry = NORMAL_GEOMETRY;
  private _resize: ResizeObserver;
}
