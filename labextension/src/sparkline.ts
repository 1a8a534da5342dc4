/**
 * Sparklines as plain SVG polylines: no chart library, nothing the bundle has to carry.
 */

import { IPoint } from './history';

export interface ISparklineGeometry {
  width: number;
  height: number;
  /** Force the vertical range to include this value (0 for byte series, so a drop shows). */
  floor?: number;
}

/**
 * The `points` attribute values of one polyline per contiguous run of numbers (a null value
 * breaks the line), scaled to `geometry` over a shared `[min, max]` of all `series`.
 *
 * Example: `sparklinePaths([[{ts: 0, value: 0}, {ts: 1, value: 1}]], {width: 10, height: 10})`
 * → `[["0.0,10.0 10.0,0.0"]]`.
 */
export function sparklinePaths(
  series: IPoint[][],
  geometry: ISparklineGeometry
): string[][] {
  const all = ([] as IPoint[]).concat(...series);
  const values = all.map(p => p.value).filter((v): v is number => v !== null);
  if (all.length === 0) {
    return series.map(() => []);
  }
  const tsMin = Math.min(...all.map(p => p.ts));
  const tsMax = Math.max(...all.map(p => p.ts));
  let lo = values.length ? Math.min(...values) : 0;
  let hi = values.length ? Math.max(...values) : 1;
  if (geometry.floor !== undefined) {
    lo = Math.min(lo, geometry.floor);
  }
  if (hi === lo) {
    hi = lo + 1;
  }
  const spanT = tsMax - tsMin || 1;
  const pad = 1; // keep the stroke inside the box
  const h = geometry.height - 2 * pad;
  const x = (ts: number) => ((ts - tsMin) / spanT) * geometry.width;
  const y = (v: number) => pad + h - ((v - lo) / (hi - lo)) * h;
  return series.map(points => {
    const runs: string[] = [];
    let current: string[] = [];
    for (const p of points) {
      if (p.value === null) {
        if (current.length) {
          runs.push(current.join(' '));
        }
        current = [];
        continue;
      }
      current.push(`${x(p.ts).toFixed(1)},${y(p.value).toFixed(1)}`);
    }
    if (current.length) {
      runs.push(current.join(' '));
    }
    return runs;
  });
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Draw `series` into `svg` (replacing what was there); class names style each series. */
export function drawSparkline(
  svg: SVGSVGElement,
  series: IPoint[][],
  classNames: string[],
  geometry: ISparklineGeometry
): void {
  while (svg.firstChild) {
    svg.removeChild(svg.firstChild);
  }
  svg.setAttribute('viewBox', `0 0 ${geometry.width} ${geometry.height}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  sparklinePaths(series, geometry).forEach((runs, index) => {
    for (const run of runs) {
      const line = document.createElementNS(SVG_NS, 'polyline');
      line.setAttribute('points', run);
      line.setAttribute('class', classNames[index] ?? '');
      line.setAttribute('vector-effect', 'non-scaling-stroke');
      svg.appendChild(line);
    }
  });
}
