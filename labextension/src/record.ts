/**
 * One kernel process's record as the sidebar keeps it: its series, cell runs and marks, and
 * the kernel's last hello, sample and facts. Pure functions write it (live messages and a
 * replayed `history` go the same way); the store (store.ts) holds one per kernel id.
 */

import {
  addMark,
  ICellRun,
  IMark,
  SeriesHistory,
  upsertCellRun
} from './history';
import { recordSample } from './series';
import {
  ICellRunData,
  IEvent,
  IFacts,
  IHello,
  IHistory,
  ISample,
  isUnavailable
} from './protocol';

/** The host's memory, from the latest sample that had it. */
export interface IHostMemory {
  totalBytes: number;
  availableBytes: number;
}

/** The last Clear session of one kernel, as the panel shows it. */
export interface IClearReport {
  status: 'pending' | 'ok' | 'failed';
  /** The kernel's summary (ok, failed) or why no answer came (error). */
  text: string;
  /** Set when no answer came from the kernel (disconnected, not connected). */
  error?: string;
  /** The kernel's `CleanReport.to_dict()` (ok), for the panel's compact summary. */
  report?: { [key: string]: unknown } | null;
}

/**
 * What the sidebar keeps per kernel, so that two notebooks never show each other's data:
 * the sparklines' history, the last Clear session report and event, and the restart.
 * A restart replaces the whole record (the kernel id stays the same).
 */
export interface IKernelRecord {
  history: SeriesHistory;
  /** Cell runs, oldest first (kernel clock), at most MAX_CELL_RUNS. */
  cellRuns: ICellRun[];
  /** Clear session, fresh_model, restart..., oldest first (kernel clock). */
  marks: IMark[];
  host: IHostMemory | null;
  /** Kernel-clock ts of the newest sample recorded, and when it arrived (ms, page clock). */
  lastSampleTs: number | null;
  lastSampleAt: number | null;
  /** The interval the newest sample was taken at (the kernel's, or ours before 1.5). */
  lastIntervalS: number | null;
  lastEvent: IEvent | null;
  clearReport: IClearReport | null;
  /** The pid the kernel's hello gave; another pid under the same id is a restart. */
  pid: number | null;
  /** When this page saw the kernel restart (ms since the epoch), null if it did not. */
  restartedAt: number | null;
  /** The kernel's last hello, sample and facts: what the panel shows again at once when the
   * user comes back to this kernel, marked "updating…" until the kernel answers. */
  hello: IHello | null;
  latestSample: ISample | null;
  latestFacts: IFacts | null;
}

/** A sample's host memory, or null where it has none (unavailable, or a 1.2 kernel). */
export function hostOf(sample: ISample): IHostMemory | null {
  const host = sample.host;
  if (host === undefined || isUnavailable(host)) {
    return null;
  }
  return { totalBytes: host.total_bytes, availableBytes: host.available_bytes };
}

/** A run as the wire gives it, in the panel's names. */
export function cellRunOf(run: ICellRunData): ICellRun {
  return {
    executionCount: run.execution_count,
    cellId: run.cell_id,
    startedTs: run.started_ts,
    endedTs: run.ended_ts,
    status: run.status,
    rssStartBytes: run.rss_start_bytes ?? null,
    rssEndBytes: run.rss_end_bytes ?? null,
    peakRssBytes: run.peak_rss_bytes ?? null,
    peakExact: run.peak_exact ?? false
  };
}

/**
 * How long the kernel may be silent before the time is a gap rather than a line: a few
 * intervals, and never under 2.5 s (a loaded machine delays a tick or two).
 */
export function gapAfterS(intervalS: number): number {
  return Math.max(3 * intervalS, intervalS + 2.5);
}

/**
 * A fresh record whose history holds `capacity` points. `restarted`: this page saw the
 * process restart (now); `restartTs` (kernel clock) puts a `restart` mark on its timeline.
 *
 * Example: `newRecord(900, true, 1763800000)` has `restartedAt` set and one `restart` mark.
 */
export function newRecord(
  capacity: number,
  restarted: boolean,
  restartTs?: number
): IKernelRecord {
  const record: IKernelRecord = {
    history: new SeriesHistory(capacity),
    cellRuns: [],
    marks: [],
    host: null,
    lastSampleTs: null,
    lastSampleAt: null,
    lastIntervalS: null,
    lastEvent: null,
    clearReport: null,
    pid: null,
    restartedAt: restarted ? Date.now() : null,
    hello: null,
    latestSample: null,
    latestFacts: null
  };
  if (restartTs !== undefined) {
    addMark(record.marks, { kind: 'restart', ts: restartTs });
  }
  return record;
}

/**
 * Record a sample (live, or replayed from history); `intervalS` is the interval this page
 * asks for, the sample's own where a kernel before 1.5 did not say it.
 *
 * The series stay in time order, which the timeline's lookups rely on: a sample no newer
 * than the last one is dropped (false). That is a replayed one this page has already
 * (attached before, switched away and back), or a live one overtaken on the way: the kernel
 * takes samples on its sampler thread and, for a frontend that just asked, on another.
 */
export function addSample(
  record: IKernelRecord,
  sample: ISample,
  intervalS: number
): boolean {
  if (record.lastSampleTs !== null && sample.ts <= record.lastSampleTs) {
    return false;
  }
  // A kernel before 1.5 does not say its interval: it sampled at ours while looked at.
  const interval = Math.max(
    sample.interval_s ?? intervalS,
    record.lastIntervalS ?? 0
  );
  if (
    record.lastSampleTs !== null &&
    sample.ts - record.lastSampleTs > gapAfterS(interval)
  ) {
    record.history.addGap(record.lastSampleTs + interval);
  }
  record.lastIntervalS = sample.interval_s ?? intervalS;
  recordSample(record.history, sample);
  record.lastSampleTs = sample.ts;
  record.lastSampleAt = Date.now();
  if (sample.host !== undefined) {
    record.host = hostOf(sample);
  }
  return true;
}

/** Replay a `history` message: the same path as live samples, runs and marks. */
export function replayHistory(
  record: IKernelRecord,
  message: IHistory,
  intervalS: number
): void {
  message.samples.forEach(sample => addSample(record, sample, intervalS));
  message.cell_runs.forEach(run =>
    upsertCellRun(record.cellRuns, cellRunOf(run))
  );
  message.marks.forEach(mark => addMark(record.marks, mark));
}

/**
 * Now on the record's kernel clock, estimated from its last sample's ts plus the time since
 * that sample arrived (the page's clock may differ from the kernel's); the page's clock
 * where there is no sample yet.
 */
export function kernelNow(record: IKernelRecord | null | undefined): number {
  if (record && record.lastSampleTs !== null && record.lastSampleAt !== null) {
    return record.lastSampleTs + (Date.now() - record.lastSampleAt) / 1000;
  }
  return Date.now() / 1000;
}
