/**
 * The chart's "Cell runs" window (issue 31, item 1): "All" shows the idle time too, so a
 * 23 s lesson (Run All) filled the chart at first, a 45 px strip after 2 minutes on a
 * projector and about 3 px after 14 minutes. This window fits the latest stretch of cell runs
 * (runs less than `STRETCH_GAP_S` apart), from its first start to its last end, or to now
 * while a cell runs, so the time after the lesson does not squeeze it. It is the default in
 * classroom mode until the user picks a window, which is remembered in the browser.
 */

import type { ICellRun } from './history';

/** The window switch's value for "Cell runs" (the others are minutes, `FIT` is 0). */
export const RUNS = -1;
/** Runs further apart than this start a new stretch (a break in the lesson). */
export const STRETCH_GAP_S = 120;
/** The share of the stretch's span added on each side, so its first and last runs show. */
export const MARGIN_SHARE = 0.05;
/** The narrowest window: a 2 s cell still spreads its samples out. */
export const MIN_SPAN_S = 15;

type IRunTimes = Pick<ICellRun, 'startedTs' | 'endedTs'>;

/**
 * The time range of the latest stretch of `runs` (oldest first), with its margins; null with
 * no runs (the chart then shows what "All" shows). `marks` (their times, any order) after the
 * stretch extend it while each is within `STRETCH_GAP_S` of it: a Clear session pressed soon
 * after the lesson stays in view, one pressed minutes later never replaces the lesson.
 *
 * @example
 * runsRange([{startedTs: 100, endedTs: 123}], 940);
 * // [98.85, 124.15]: the 23 s lesson, not the 14 minutes since
 */
export function runsRange(
  runs: IRunTimes[],
  now: number,
  marks: number[] = []
): [number, number] | null {
  if (!runs.length) {
    return null;
  }
  let from = runs[runs.length - 1].startedTs;
  let to = runs[runs.length - 1].endedTs ?? now;
  for (let i = runs.length - 2; i >= 0; i--) {
    const end = runs[i].endedTs ?? now;
    if (from - end > STRETCH_GAP_S) {
      break;
    }
    from = Math.min(from, runs[i].startedTs);
    to = Math.max(to, end);
  }
  for (const ts of [...marks].sort((a, b) => a - b)) {
    if (ts > to + STRETCH_GAP_S) {
      break;
    }
    if (ts >= from) {
      to = Math.max(to, ts);
    }
  }
  const margin = Math.max((to - from) * MARGIN_SHARE, 1);
  from -= margin;
  to += margin;
  if (to - from < MIN_SPAN_S) {
    const grow = (MIN_SPAN_S - (to - from)) / 2;
    from -= grow;
    to += grow;
  }
  return [from, to];
}

/** Where the browser keeps the user's window choice (the same for every notebook). */
export const WINDOW_KEY = '@kerasmagic/timeline-window';

/** The window the user picked before, or null if never (a storage that fails: null). */
export function savedWindow(
  storage: Pick<Storage, 'getItem'> | null,
  choices: number[]
): number | null {
  try {
    const value = storage?.getItem(WINDOW_KEY);
    if (value === null || value === undefined) {
      return null;
    }
    const minutes = Number(value);
    return choices.includes(minutes) ? minutes : null;
  } catch {
    return null; // storage off (a private window's quota, a sandbox): nothing remembered
  }
}

/** Remember the user's pick; a storage that refuses it only costs the memory of it. */
export function saveWindow(
  storage: Pick<Storage, 'setItem'> | null,
  minutes: number
): void {
  try {
    storage?.setItem(WINDOW_KEY, String(minutes));
  } catch {
    // Nothing to do: the choice holds for this page.
  }
}

/**
 * The window to show: the user's pick where there is one, else "Cell runs" in classroom mode
 * and `fit` ("All") otherwise.
 */
export function initialWindow(
  saved: number | null,
  classroom: boolean,
  fit: number
): number {
  if (saved !== null) {
    return saved;
  }
  return classroom ? RUNS : fit;
}
