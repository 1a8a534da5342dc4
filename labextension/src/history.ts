/**
 * The model behind the sparklines: a fixed-capacity ring buffer per series, so a sidebar
 * left open for days keeps constant memory.
 */

/** Oldest-first buffer that forgets its oldest item when full. */
export class RingBuffer<T> {
  constructor(capacity: number) {
    this._capacity = RingBuffer.checkCapacity(capacity);
    this._items = new Array<T | undefined>(this._capacity);
  }

  push(item: T): void {
    const index = (this._start + this._length) % this._capacity;
    this._items[index] = item;
    if (this._length < this._capacity) {
      this._length += 1;
    } else {
      this._start = (this._start + 1) % this._capacity;
    }
  }

  toArray(): T[] {
    const out: T[] = [];
    for (let i = 0; i < this._length; i++) {
      out.push(this._items[(this._start + i) % this._capacity] as T);
    }
    return out;
  }

  clear(): void {
    this._items = new Array<T | undefined>(this._capacity);
    this._start = 0;
    this._length = 0;
  }

  /** Change the capacity, keeping the newest items that fit. */
  resize(capacity: number): void {
    const kept = this.toArray().slice(-RingBuffer.checkCapacity(capacity));
    this._capacity = capacity;
    this.clear();
    kept.forEach(item => this.push(item));
  }

  private static checkCapacity(capacity: number): number {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(
        `capacity must be a positive integer, got ${capacity}`
      );
    }
    return capacity;
  }

  private _items: Array<T | undefined>;
  private _capacity: number;
  private _start = 0;
  private _length = 0;
}

/** One point of a series; `value` is null where the probe had no number (a gap). */
export interface IPoint {
  ts: number;
  value: number | null;
}

/**
 * Named series sharing one capacity, e.g. `rss`, `tf_in_use`, `tf_held`, `nvml_process`.
 */
export class SeriesHistory {
  constructor(capacity: number) {
    this._capacity = capacity;
  }

  /** Points needed to cover `minutes` at one sample per `intervalS` (at least 2). */
  static capacityFor(minutes: number, intervalS: number): number {
    return Math.max(2, Math.ceil((minutes * 60) / Math.max(intervalS, 0.01)));
  }

  add(series: string, ts: number, value: number | null): void {
    let buffer = this._series.get(series);
    if (!buffer) {
      buffer = new RingBuffer<IPoint>(this._capacity);
      this._series.set(series, buffer);
    }
    buffer.push({ ts, value });
  }

  /**
   * A hole at `ts` in every series: the kernel took no sample for a while (busy in C code
   * holding the GIL, stopped, or dead), so a line must not join the points on either side.
   */
  addGap(ts: number): void {
    this._series.forEach(buffer => buffer.push({ ts, value: null }));
  }

  points(series: string): IPoint[] {
    return this._series.get(series)?.toArray() ?? [];
  }

  resize(capacity: number): void {
    this._capacity = capacity;
    this._series.forEach(buffer => buffer.resize(capacity));
  }

  private _capacity: number;
  private _series = new Map<string, RingBuffer<IPoint>>();
}

/** One run of a cell, in kernel-clock seconds (`endedTs` null while it runs). */
export interface ICellRun {
  executionCount: number | null;
  cellId: string | null;
  startedTs: number;
  endedTs: number | null;
  /** `running`, `ok` or `error` (a newer kernel may send others). */
  status: string;
  /** The kernel's RSS at the cell's start and end, and its peak (kernels of 1.5 on). */
  rssStartBytes?: number | null;
  rssEndBytes?: number | null;
  peakRssBytes?: number | null;
  peakExact?: boolean;
}

/** A moment on the timeline: `clear_tf`, `fresh_model`, `restart`, ...; kernel clock. */
export interface IMark {
  kind: string;
  ts: number;
}

/** Cell runs kept per kernel, as many as the kernel keeps. */
export const MAX_CELL_RUNS = 500;
/** Marks kept per kernel, as many as the kernel keeps. */
export const MAX_MARKS = 100;

/**
 * Add or update a run in `runs` (oldest first by start). A run with the same execution
 * count and start is the same run: its end replaces its start, whichever arrives first
 * (live or replayed). Only the newest `MAX_CELL_RUNS` are kept.
 *
 * Example: `upsertCellRun(runs, {executionCount: 3, startedTs: 10, endedTs: null, ...})`.
 */
export function upsertCellRun(runs: ICellRun[], run: ICellRun): void {
  let index = runs.length;
  for (let i = runs.length - 1; i >= 0; i--) {
    const known = runs[i];
    if (
      known.startedTs === run.startedTs &&
      known.executionCount === run.executionCount
    ) {
      // An ended run is never turned back into a running one by an older replay.
      if (known.endedTs === null || run.endedTs !== null) {
        runs[i] = run;
      }
      return;
    }
    if (known.startedTs <= run.startedTs) {
      break;
    }
    index = i;
  }
  runs.splice(index, 0, run);
  if (runs.length > MAX_CELL_RUNS) {
    runs.splice(0, runs.length - MAX_CELL_RUNS);
  }
}

/**
 * Add a mark to `marks` (oldest first) unless the same kind at the same time is there
 * already (a live event and its replay in `history`); only the newest `MAX_MARKS` kept.
 */
export function addMark(marks: IMark[], mark: IMark): void {
  let index = marks.length;
  for (let i = marks.length - 1; i >= 0; i--) {
    const known = marks[i];
    if (known.ts === mark.ts && known.kind === mark.kind) {
      return;
    }
    if (known.ts < mark.ts) {
      break;
    }
    index = i;
  }
  marks.splice(index, 0, { kind: mark.kind, ts: mark.ts });
  if (marks.length > MAX_MARKS) {
    marks.splice(0, marks.length - MAX_MARKS);
  }
}
