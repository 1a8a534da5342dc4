/**
 * The sidebar's one home for what it knows of each kernel: its record (history, cell runs,
 * marks, last hello, sample and facts), its isolated jobs, its leak watch, the death of its
 * previous process and its restart (kept in this browser's storage for a page reload). Kept per
 * kernel id for the last few kernels, so that switching notebooks shows each kernel's own past
 * at once and never one kernel's figures under another's pid. connection.ts writes here the
 * transport's messages; each part says when it changed on its own signal, so a section redraws
 * only for its part.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { addMark } from './history';
import { JobTable } from './jobs';
import { ICellGrowth, IPostmortem, IsolatedMessage } from './protocol';
import {
  applyToRecord,
  IClearReport,
  IKernelRecord,
  RECORD_PARTS,
  RecordMessage,
  RecordPart
} from './record';
import { RestartMemory } from './restarts';

export type { IClearReport, IHostMemory, IKernelRecord } from './record';

/** A kernel that died, as the sidebar tells it until the user dismisses it. */
export interface IDeath {
  /** When, on the kernel's clock; null where not known. */
  diedTs: number | null;
  /** The cell that was running (its `In[n]`), null between cells or where not known. */
  executionCount: number | null;
  /** Why, as the next kernel's kerasmagic found it (`postmortem`); null until it says. */
  text: string | null;
  /** Whether `text` tells `diedTs` (the watcher saw the death): in the kernel's clock and zone. */
  timeInText?: boolean;
  /** The dead kernel's record (its timeline, runs and marks); null where this page did not
   * see the death (reloaded since: only the next kernel's `postmortem` tells it). */
  record: IKernelRecord | null;
}

/** What one kernel id holds in the store. */
export interface IKernelEntry {
  /** The current process's record; null until the transport makes one. */
  record: IKernelRecord | null;
  /** Its isolated jobs (the kernel's `isolated_*` messages). */
  jobs: JobTable;
  /** Its leak watch, null before its first `cell_growth`. */
  cellGrowth: ICellGrowth | null;
  /** The death of its previous process, until dismissed. */
  death: IDeath | null;
  /** When (kernel clock) the user last dismissed a death: a `postmortem` of a death before
   * then stays dismissed. */
  dismissedUntil: number | null;
}

/** The parts of an entry, each with its own change notice: the record's, and the others. */
export type StorePart = RecordPart | 'jobs' | 'cellGrowth' | 'death';
export type { RecordPart } from './record';

/** A change notice: which kernel, which part. */
export interface IStoreChange {
  kernelId: string;
  part: StorePart;
}

/**
 * The per-kernel store.
 *
 * Example: `store.setCellGrowth('k1', message)` emits `{kernelId: 'k1', part: 'cellGrowth'}`
 * on `changed` and `'k1'` on `partChanged('cellGrowth')`; `store.entry('k1').cellGrowth` is
 * `message` until `k1`'s process restarts (`store.setRecord('k1', record, {restarted:
 * true})`), whoever is looked at in between.
 */
export class KernelStore {
  /**
   * @param maxKernels the kernels kept (the least recently used go first).
   * @param restarts where restarts are kept for a page reload (null: nowhere).
   */
  constructor(
    readonly maxKernels = 8,
    private readonly _restarts: RestartMemory | null = null
  ) {}

  /** Every change, with its kernel and part. */
  get changed(): ISignal<this, IStoreChange> {
    return this._changed;
  }

  /** The changes of one part: the kernel id whose `part` changed. */
  partChanged(part: StorePart): ISignal<this, string> {
    let signal = this._parts.get(part);
    if (!signal) {
      signal = new Signal<this, string>(this);
      this._parts.set(part, signal);
    }
    return signal;
  }

  /** The kernel ids held, least recently used first. */
  get kernelIds(): string[] {
    return Array.from(this._entries.keys());
  }

  /** The entry of `kernelId`, made on first use; it becomes the most recently used. */
  entry(kernelId: string): IKernelEntry {
    let entry = this._entries.get(kernelId);
    if (entry) {
      this._entries.delete(kernelId);
    } else {
      entry = {
        record: null,
        jobs: new JobTable(),
        cellGrowth: null,
        death: null,
        dismissedUntil: null
      };
    }
    this._entries.set(kernelId, entry);
    while (this._entries.size > this.maxKernels) {
      this._entries.delete(this._entries.keys().next().value as string);
    }
    return entry;
  }

  /** The entry of `kernelId` if the store holds one, without touching its age. */
  peek(kernelId: string): IKernelEntry | undefined {
    return this._entries.get(kernelId);
  }

  /** Every record held (to resize their histories on new settings). */
  records(): IKernelRecord[] {
    const records: IKernelRecord[] = [];
    this._entries.forEach(entry => {
      if (entry.record) {
        records.push(entry.record);
      }
    });
    return records;
  }

  /**
   * A new record for `kernelId`'s process. `restarted`: a new process under the same id,
   * which has no jobs and no leak watch yet (its kernel sends its own after `hello`).
   */
  setRecord(
    kernelId: string,
    record: IKernelRecord,
    options: { restarted?: boolean } = {}
  ): void {
    const entry = this.entry(kernelId);
    entry.record = record;
    RECORD_PARTS.forEach(part => this._emit(kernelId, part));
    if (options.restarted) {
      entry.jobs.clear();
      entry.cellGrowth = null;
      this._emit(kernelId, 'jobs');
      this._emit(kernelId, 'cellGrowth');
    }
  }

  /** Tell the listeners that `part` of `kernelId`'s record changed in place. */
  recordChanged(kernelId: string, part: RecordPart): void {
    this._emit(kernelId, part);
  }

  /** Write a kernel's message into `record` (`kernelId`'s current one, or its dead one). */
  applyToRecord(
    kernelId: string,
    record: IKernelRecord,
    message: RecordMessage,
    intervalS: number
  ): void {
    applyToRecord(record, message, intervalS).forEach(part =>
      this._emit(kernelId, part)
    );
  }

  /** `record`'s last Clear session, as the panel shows it. */
  setClearReport(
    kernelId: string,
    record: IKernelRecord,
    report: IClearReport
  ): void {
    record.clearReport = report;
    this._emit(kernelId, 'clear');
  }

  /**
   * At the kernel's hello, with its pid in the record: a restart this page saw is kept for a
   * reload of the notebook at `path` (this browser's storage, restarts.ts); where the page saw
   * none, one a page before a reload saw is taken back, with its mark (issue 19, defect 8).
   */
  noteHello(kernelId: string, path: string): void {
    const record = this.peek(kernelId)?.record;
    if (!record || record.pid === null || !path || !this._restarts) {
      return;
    }
    const pid = record.pid;
    if (record.restartedAt !== null) {
      const mark = record.marks.find(m => m.kind === 'restart');
      if (mark) {
        this._restarts.remember(path, {
          pid,
          ts: mark.ts,
          at: record.restartedAt
        });
      }
      return;
    }
    const recalled = this._restarts.recall(path, pid);
    if (recalled) {
      record.restartedAt = recalled.at;
      addMark(record.marks, { kind: 'restart', ts: recalled.ts });
      this._emit(kernelId, 'hello');
      this._emit(kernelId, 'runs');
    }
  }

  /** Fold an `isolated_*` message into `kernelId`'s jobs. */
  applyJobs(kernelId: string, message: IsolatedMessage, nowMs: number): void {
    if (this.entry(kernelId).jobs.apply(message, nowMs)) {
      this._emit(kernelId, 'jobs');
    }
  }

  /** `kernelId`'s latest leak watch. */
  setCellGrowth(kernelId: string, message: ICellGrowth | null): void {
    this.entry(kernelId).cellGrowth = message;
    this._emit(kernelId, 'cellGrowth');
  }

  /**
   * The death of `kernelId`'s previous process; a `postmortem` (no record: this page did
   * not see it) of a death from before the user dismissed the last one is not news.
   */
  setDeath(kernelId: string, death: IDeath): void {
    const entry = this.entry(kernelId);
    const dismissed = entry.dismissedUntil;
    if (
      death.record === null &&
      dismissed !== null &&
      death.diedTs !== null &&
      death.diedTs <= dismissed
    ) {
      return;
    }
    entry.death = death;
    this._emit(kernelId, 'death');
  }

  /**
   * The next kernel's `postmortem`: why `kernelId`'s previous process died. Where this page saw
   * the death, its time (the moment the page noticed) gives way to the post-mortem's, which is the
   * watcher's record of the death and the time the text tells: one death, one time (issue 33).
   */
  tellDeath(kernelId: string, message: IPostmortem): void {
    const seen = this.entry(kernelId).death;
    if (!seen) {
      this.setDeath(kernelId, {
        diedTs: message.died_ts,
        executionCount: message.execution_count,
        text: message.text,
        timeInText: message.died_ts !== null,
        record: null
      });
      return;
    }
    seen.text = message.text;
    seen.timeInText = message.died_ts !== null;
    // The kernel's record knows whether a cell was still running (the page only guessed).
    seen.executionCount = message.execution_count;
    if (message.died_ts !== null && message.died_ts !== seen.diedTs) {
      const marks = seen.record?.marks;
      const mark = marks?.findIndex(
        m => m.kind === 'death' && m.ts === seen.diedTs
      );
      if (marks && mark !== undefined && mark >= 0) {
        marks.splice(mark, 1);
        addMark(marks, { kind: 'death', ts: message.died_ts });
      }
      seen.diedTs = message.died_ts;
    }
    this.setDeath(kernelId, seen);
  }

  /** The user has read `kernelId`'s death, at `untilTs` on the kernel's clock. */
  dismissDeath(kernelId: string, untilTs: number): void {
    const entry = this.entry(kernelId);
    if (entry.death) {
      entry.death = null;
      entry.dismissedUntil = untilTs;
      this._emit(kernelId, 'death');
    }
  }

  private _emit(kernelId: string, part: StorePart): void {
    this._changed.emit({ kernelId, part });
    this._parts.get(part)?.emit(kernelId);
  }

  private _entries = new Map<string, IKernelEntry>();
  private _parts = new Map<StorePart, Signal<this, string>>();
  private _changed = new Signal<this, IStoreChange>(this);
}
