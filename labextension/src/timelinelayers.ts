/**
 * The timeline drawn in layers, bottom to top: the cell-run spans, the grid, the series, the
 * marks and the axis labels (last: they must read over the lines). Each layer is one
 * function of the chart's scale (`chartScale`) and its own data; `Timeline` calls them in order.
 */

import {
  byteTicks,
  countTop,
  chartHeight,
  formatClock,
  formatPct,
  formatSpan,
  formatTick,
  ICellRunLike,
  IChartGeometry,
  IMarkGroup,
  ISeriesSpec,
  ISpanBox,
  IWording,
  linePath,
  pctTop,
  runChange,
  runLabel
} from './chartgeometry';
import { svg } from './dom';
import { IPoint } from './history';
import { guardMarkText } from './limit';

/** A series with its points inside the window. */
export interface IVisibleSeries {
  spec: ISeriesSpec;
  points: IPoint[];
}

/** Where everything goes: the window, the rows and both value scales. */
export interface IChartScale {
  from: number;
  to: number;
  width: number;
  height: number;
  g: IChartGeometry;
  /** Kernel-clock seconds to pixels. */
  x: (ts: number) => number;
  yBytes: (bytes: number) => number;
  yPct: (pct: number) => number;
  /** A count's own scale over the plot (0 at its foot, `countTop` at its top). */
  yCount: (count: number) => number;
  /** The count scale's top; 0 when no count is drawn. */
  countTop: number;
  /** The top of the CPU strip. */
  stripTop: number;
  /** The byte grid's ticks, 0 first. */
  ticks: number[];
  /** The CPU strip's top, in %. */
  cpuTop: number;
}

function maxOf(list: IVisibleSeries[]): number {
  let max = 0;
  for (const { points } of list) {
    for (const point of points) {
      if (point.value !== null && point.value > max) {
        max = point.value;
      }
    }
  }
  return max;
}

/** The scale for the window `[from, to]`, `width` pixels wide, fitting the drawn series. */
export function chartScale(
  from: number,
  to: number,
  width: number,
  g: IChartGeometry,
  bytes: IVisibleSeries[],
  pct: IVisibleSeries[],
  counts: IVisibleSeries[] = []
): IChartScale {
  const { top, ticks } = byteTicks(maxOf(bytes));
  const cpuTop = pctTop(maxOf(pct));
  const topCount = counts.length ? countTop(maxOf(counts)) : 0;
  const stripTop = g.band + g.plot + g.gap;
  return {
    from,
    to,
    width,
    height: chartHeight(g),
    g,
    x: ts => ((ts - from) / (to - from)) * width,
    yBytes: v => g.band + g.plot - (v / top) * g.plot,
    yPct: v => stripTop + g.strip - (v / cpuTop) * g.strip,
    yCount: v => g.band + g.plot - (v / Math.max(topCount, 1)) * g.plot,
    countTop: topCount,
    stripTop,
    ticks,
    cpuTop
  };
}

/** The cell spans, drawn first so that lines and marks lie over them. */
export function drawSpans(
  root: SVGElement,
  boxes: ISpanBox[],
  scale: IChartScale,
  title: (run: ICellRunLike) => string
): void {
  const { g } = scale;
  const layer = svg('g', { class: 'jp-KerasMagic-spans' }, root);
  boxes.forEach((box, index) => {
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
      layer
    );
    svg(
      'rect',
      {
        class: 'jp-KerasMagic-spanFill',
        x: box.x,
        y: g.band,
        width: box.width,
        height: g.plot + g.gap + g.strip
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
        height: g.band - 2,
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
          y: g.band - Math.round(g.fontPx * 0.4)
        },
        group
      );
      text.textContent = box.text;
    }
    svg('title', {}, group).textContent = title(box.run);
  });
}

/** The byte grid's lines and the CPU strip's baseline. */
export function drawGrid(root: SVGElement, scale: IChartScale): void {
  const { width, yBytes, stripTop, g } = scale;
  const grid = svg('g', { class: 'jp-KerasMagic-grid' }, root);
  for (const tick of scale.ticks) {
    svg('line', { x1: 0, x2: width, y1: yBytes(tick), y2: yBytes(tick) }, grid);
  }
  const base = stripTop + g.strip;
  svg('line', { x1: 0, x2: width, y1: base, y2: base }, grid);
}

function seriesPath(
  spec: ISeriesSpec,
  points: IPoint[],
  d: string,
  parent: SVGElement
): void {
  svg(
    'path',
    {
      class: `jp-KerasMagic-series jp-KerasMagic-series-${spec.style}`,
      'data-series': spec.key,
      'data-points': points.filter(p => p.value !== null).length,
      d
    },
    parent
  );
}

/** The byte series on the plot, the % series (with its area) on the CPU strip. */
export function drawSeries(
  root: SVGElement,
  bytes: IVisibleSeries[],
  pct: IVisibleSeries[],
  scale: IChartScale,
  counts: IVisibleSeries[] = []
): void {
  const { x, yBytes, yPct, yCount } = scale;
  const base = scale.stripTop + scale.g.strip;
  const lines = svg('g', { class: 'jp-KerasMagic-plotLines' }, root);
  for (const { spec, points } of bytes) {
    seriesPath(spec, points, linePath(points, x, yBytes), lines);
  }
  for (const { spec, points } of counts) {
    seriesPath(spec, points, linePath(points, x, yCount), lines);
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
          d: `${d}L${x(last.ts).toFixed(1)},${base}L${x(first.ts).toFixed(1)},${base}Z`
        },
        lines
      );
    }
    seriesPath(spec, points, d, lines);
  }
}

/** The marks (restart, clear, fresh model, death), grouped where they crowd. */
export function drawMarks(
  root: SVGElement,
  groups: IMarkGroup[],
  scale: IChartScale,
  markText: (kind: string) => string
): void {
  const { g, stripTop } = scale;
  const layer = svg('g', { class: 'jp-KerasMagic-marks' }, root);
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
      layer
    );
    svg('line', { x1: mx, x2: mx, y1: g.band, y2: stripTop + g.strip }, group);
    if (markGroup.showLabel) {
      // A backing under the label: at the foot of the plot the TF lines often run near
      // zero, and a halo alone leaves them crossing 16 px text.
      svg(
        'rect',
        {
          class: 'jp-KerasMagic-markBacking',
          x: markGroup.labelX - 1,
          y: g.band + g.plot - 4 - g.fontPx,
          width: markGroup.label.length * g.charPx + 2,
          height: g.fontPx + 3,
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
        y: g.band + g.plot - 4,
        'text-anchor': 'start'
      },
      group
    );
    label.textContent = markGroup.label;
    if (!markGroup.showLabel) {
      label.setAttribute('visibility', 'hidden');
    }
    svg('title', {}, group).textContent = markGroup.marks
      .map(m => `${markText(m.kind)} ${formatClock(m.ts)}`)
      .join('\n');
  }
}

/**
 * The byte ticks' and the CPU strip's labels, and the time axis' two ends: `−5 min` and
 * `now`, or with `clockEnds` (the "Cell runs" window, which need not end now) their times.
 */
export function drawAxisLabels(
  root: SVGElement,
  scale: IChartScale,
  trans: IWording,
  clockEnds = false
): void {
  const { g, yBytes, width, height } = scale;
  const labels = svg('g', { class: 'jp-KerasMagic-axisLabels' }, root);
  const label = (text: string, lx: number, ly: number, anchor = 'start') => {
    svg('text', { x: lx, y: ly, 'text-anchor': anchor }, labels).textContent =
      text;
  };
  // The left labels lie over the plot: a backing under each, so that the RSS and CPU lines
  // pass under the text instead of through it (issue 31, item 5).
  const backed = (text: string, top: number) => {
    svg(
      'rect',
      {
        class: 'jp-KerasMagic-axisBacking',
        x: 0,
        y: top,
        width: text.length * g.charPx + 4,
        height: g.fontPx + 3
      },
      labels
    );
    label(text, 2, top + g.fontPx);
  };
  scale.ticks
    .slice(1)
    .forEach(tick => backed(formatTick(tick), yBytes(tick) + 1));
  backed(trans.__('CPU %1', formatPct(scale.cpuTop)), scale.stripTop);
  if (scale.countTop) {
    // A count's own scale, at the right so it is not read as bytes.
    label(
      trans.__('%1 entries', scale.countTop),
      width,
      g.band + g.fontPx,
      'end'
    );
  }
  if (clockEnds) {
    label(formatClock(scale.from), 0, height - 2);
    label(formatClock(scale.to), width, height - 2, 'end');
    return;
  }
  label('−' + formatSpan(scale.to - scale.from), 0, height - 2);
  label(trans.__('now'), width, height - 2, 'end');
}

// ---- the chart's words --------------------------------------------------------------------

/** A mark's kind in words: `restart`, `died`, `clear`, `fresh model`, the guard's (limit.ts). */
export function markText(trans: IWording, kind: string): string {
  switch (kind) {
    case 'restart':
      return trans.__('restart');
    case 'death':
      return trans.__('died');
    case 'clear_tf':
      return trans.__('clear');
    case 'fresh_model':
      return trans.__('fresh model');
    default:
      return guardMarkText(kind, trans) ?? kind;
  }
}

/** `, +201 MiB in [3], peak 1.2 GiB`: empty where the kernel did not say. */
function changeText(trans: IWording, run: ICellRunLike): string {
  const figures = runChange(run);
  if (!figures) {
    return '';
  }
  return (
    ', ' +
    trans.__('%1 in %2', figures.change, runLabel(run)) +
    (figures.peak ? ', ' + trans.__('peak %1', figures.peak) : '')
  );
}

/** A span's hover: `cell [3] 12:00:01–12:00:09 (8.0 s), +201 MiB in [3]`. */
export function runText(
  trans: IWording,
  run: ICellRunLike,
  now: number
): string {
  const end = run.endedTs ?? now;
  return run.endedTs === null
    ? trans.__(
        'cell %1 running since %2',
        runLabel(run),
        formatClock(run.startedTs)
      )
    : trans.__(
        'cell %1 %2–%3 (%4 s)',
        runLabel(run),
        formatClock(run.startedTs),
        formatClock(end),
        (end - run.startedTs).toFixed(1)
      ) + changeText(trans, run);
}

/** A span's longer labels, "[3] +201 MiB, peak 1.50 GiB" then "[3] +201 MiB"; none
 * for a running cell or where the kernel did not say (before protocol 1.5). */
export function spanTexts(trans: IWording, run: ICellRunLike): string[] {
  const figures = runChange(run);
  if (!figures) {
    return [];
  }
  const short = trans.__('%1 %2', runLabel(run), figures.change);
  return figures.peak
    ? [
        trans.__('%1 %2, peak %3', runLabel(run), figures.change, figures.peak),
        short
      ]
    : [short];
}
