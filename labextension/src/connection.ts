/**
 * One sidebar's link to the kernel of the notebook it follows: the transport (transport.ts)
 * brings the kernel's messages, and this writes them into the per-kernel store (store.ts),
 * follows restarts and deaths, and answers what the panel asks of the followed kernel.
 */

import { ISessionContext } from '@jupyterlab/apputils';
import { Kernel } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import {
  addMark,
  ICellRun,
  IMark,
  SeriesHistory,
  upsertCellRun
} from './history';
import { JobTable } from './jobs';
import {
  addSample,
  cellRunOf,
  IClearReport,
  IHostMemory,
  IKernelRecord,
  kernelNow,
  newRecord,
  replayHistory
} from './record';
import { recordFacts } from './series';
import { IDeath, IKernelEntry, KernelStore } from './store';
import {
  ConnectionState,
  DEATH_STATUSES,
  RESTART_STATUSES
} from './connectionstate';
import { CommTransport } from './transport';
import {
  ICellGrowth,
  IClearResult,
  IEvent,
  IFacts,
  IHello,
  ISample,
  KernelMessage,
  minorOf
} from './protocol';

export type { ICellRun, IMark } from './history';
export { cellRunOf, gapAfterS, hostOf } from './record';
export {
  isGpuDevice,
  recordFacts,
  recordSample,
  SERIES,
  sumDevices,
  sumGpu
} from './series';
export type { IClearReport, IDeath, IHostMemory, IKernelRecord } from './store';
export type { ConnectionState, IWaitingState } from './connectionstate';

export namespace LiveConnection {
  export interface IOptions {
    intervalS: number;
    historyMinutes: number;
  }
}

/**
 * What the panel reads of the kernel it follows, kept per kernel in the store.
 *
 * Example: `connection.setSessionContext(notebook.sessionContext)`; after the kernel's hello
 * and first sample `connection.latestSample` is that sample and `connection.history` holds it.
 */
export class LiveConnection implements IDisposable {
  constructor(options: LiveConnection.IOptions) {
    this._historyMinutes = options.historyMinutes;
    this._transport = new CommTransport({
      intervalS: options.intervalS,
      onMessage: message => this._onMessage(message),
      onKernelGone: (status, restarting) =>
        this._onKernelGone(status, restarting),
      onDetached: () => this._rejectClears()
    });
    this._transport.stateChanged.connect(this._onState, this);
  }

  get state(): ConnectionState {
    return this._transport.state;
  }

  get stateChanged(): ISignal<this, ConnectionState> {
    return this._stateChanged;
  }

  /** Emitted on every sample, facts, event or clear result. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** What the sidebar knows of each kernel (kept across notebook switches). */
  get store(): KernelStore {
    return this._store;
  }

  get history(): SeriesHistory {
    return this._record().history;
  }

  /** The current kernel's cell runs, oldest first, kernel-clock seconds (at most 500). */
  get cellRuns(): ICellRun[] {
    return this._record().cellRuns;
  }

  /** The current kernel's marks (clear_tf, fresh_model, restart...), oldest first. */
  get marks(): IMark[] {
    return this._record().marks;
  }

  /** The host's memory from the current kernel's latest sample that had it. */
  get host(): IHostMemory | null {
    return this._record().host;
  }

  get latestSample(): ISample | null {
    return this._record().latestSample;
  }

  get latestFacts(): IFacts | null {
    return this._record().latestFacts;
  }

  /** The last event of the kernel this sidebar follows now. */
  get lastEvent(): IEvent | null {
    return this._record().lastEvent;
  }

  /** The last Clear session of the kernel this sidebar follows now (null: none). */
  get clearReport(): IClearReport | null {
    return this._record().clearReport;
  }

  /** When this kernel restarted (ms since the epoch), null if this page did not see it. */
  get restartedAt(): number | null {
    return this._record().restartedAt;
  }

  /** The isolated jobs of the kernel this sidebar is attached to. */
  get jobs(): JobTable {
    return this._entry().jobs;
  }

  /** The kernel's leak watch (protocol 1.2 or later), null before its first `cell_growth`. */
  get cellGrowth(): ICellGrowth | null {
    return this._entry().cellGrowth;
  }

  /** Whether the kernel reports isolated jobs (protocol 1.1 or later); null before `hello`. */
  get jobsSupported(): boolean | null {
    return this._supports(1);
  }

  /** Whether the kernel watches cells (protocol 1.2 or later); null before `hello`. */
  get cellsSupported(): boolean | null {
    return this._supports(2);
  }

  get kernelName(): string {
    return this._transport.session?.kernelDisplayName ?? '';
  }

  /** The followed notebook's path ('' with none): what the auto-load choice is kept by. */
  get notebookPath(): string {
    return this._transport.session?.path ?? '';
  }

  /** The sampling interval this sidebar asks for (settings). */
  get intervalS(): number {
    return this._transport.intervalS;
  }

  /** The subshell this sidebar's comm uses, null on the main shell (tests look at it). */
  get subshellId(): string | null {
    return this._transport.subshellId;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * The followed kernel's last hello while it is not (yet) connected again and the page has
   * its last view (switched away and back, a re-attach): the panel shows that view at once,
   * marked "updating…", instead of a blank "Connecting…". Null otherwise.
   */
  get lastView(): IHello | null {
    const kind = this.state.kind;
    const record = this._entry().record;
    return (kind === 'connecting' || kind === 'waiting') &&
      record?.hello &&
      record.latestSample
      ? record.hello
      : null;
  }

  /**
   * Whether a cell runs in the followed kernel, as this page knows it: its `In[n]` where
   * known, `true` where a cell runs but its number was missed, `false` when none runs.
   */
  get runningCell(): number | boolean {
    return this._transport.executions.runningCell;
  }

  /** The death of the followed kernel's predecessor, until dismissed; null if none. */
  get death(): IDeath | null {
    return this._store.peek(this._kernelId())?.death ?? null;
  }

  /**
   * Notebooks whose new kernels load kerasmagic by themselves (the settings' `autoload`):
   * a restarted kernel then re-attaches without `%load_ext` typed again.
   */
  setAutoload(paths: string[]): void {
    this._autoload = new Set(paths);
    this._autoloadIfWanted();
  }

  get autoloads(): boolean {
    return this._autoload.has(this.notebookPath);
  }

  /** Follow another notebook's kernel (null: no notebook). */
  setSessionContext(session: ISessionContext | null): void {
    this._transport.setSessionContext(session);
  }

  /** The panel was shown/hidden: with nobody looking the kernel's sampler sleeps. */
  setVisible(visible: boolean): void {
    this._transport.setVisible(visible);
  }

  /** New settings: the sampling interval (kernel-wide) and how far back sparklines go. */
  configure(options: LiveConnection.IOptions): void {
    this._historyMinutes = options.historyMinutes;
    const capacity = this._capacity(options.intervalS);
    this._store.records().forEach(record => record.history.resize(capacity));
    this._transport.intervalS = options.intervalS;
    this._changed.emit();
  }

  /** Ask the kernel to run clear_tf (after a running cell); resolves with its answer. */
  clear(): Promise<IClearResult> {
    // The report belongs to this kernel's record: it is shown only while this kernel is
    // followed, and a restart (a new record) drops it.
    const record = this._record();
    const failed = (reason: unknown) => {
      record.clearReport = {
        status: 'failed',
        text: '',
        error: String(reason)
      };
      this._changed.emit();
    };
    if (this.state.kind !== 'connected' || !this._transport.isOpen) {
      const reason = new Error('not connected');
      failed(reason);
      return Promise.reject(reason);
    }
    const requestId = `clear-${++this._requestCounter}-${Date.now()}`;
    record.clearReport = { status: 'pending', text: '' };
    const answer = new Promise<IClearResult>((resolve, reject) => {
      this._pendingClears.set(requestId, { resolve, reject });
      this._transport.send({ method: 'clear', request_id: requestId });
    });
    answer.then(result => {
      record.clearReport = {
        status: result.ok ? 'ok' : 'failed',
        text: result.text,
        report: result.report
      };
      this._changed.emit();
    }, failed);
    this._changed.emit();
    return answer;
  }

  /**
   * Load kerasmagic in the followed kernel (the empty state's button): `%load_ext kerasmagic`,
   * run silently (no cell, no history); the sidebar attaches once it has run, as after a cell.
   * Resolves with null when it loaded, else with the kernel's error (`ModuleNotFoundError: …`).
   */
  async loadExtension(): Promise<string | null> {
    const kernel = this._transport.session?.session?.kernel;
    if (!kernel) {
      return 'no kernel';
    }
    const reply = await kernel.requestExecute({
      code: '%load_ext kerasmagic',
      silent: true,
      store_history: false
    }).done;
    const content = reply.content as {
      status: string;
      ename?: string;
      evalue?: string;
    };
    return content.status === 'ok'
      ? null
      : `${content.ename ?? content.status}: ${content.evalue ?? ''}`;
  }

  /** The user has read it: the panel stops showing the death and the dead timeline. */
  dismissDeath(): void {
    if (this.death) {
      // The kernel tells every comm of it again (`postmortem`): a death from before now stays
      // dismissed; a later one is news.
      this._store.dismissDeath(this._kernelId(), this._kernelNow());
      this._changed.emit();
    }
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._transport.dispose();
    Signal.clearData(this);
  }

  // ---- the kernel's life -----------------------------------------------------------------

  private _onState(transport: CommTransport, state: ConnectionState): void {
    if (state.kind === 'not_loaded') {
      this._autoloadIfWanted();
    }
    this._stateChanged.emit(state);
  }

  private _autoloadIfWanted(): void {
    const kernel = this._transport.session?.session?.kernel;
    if (
      this.state.kind === 'not_loaded' &&
      kernel &&
      this.autoloads &&
      this._autoloadedFor !== kernel
    ) {
      this._autoloadedFor = kernel; // once per kernel process: a failure is not retried
      void this.loadExtension().then(error => {
        if (error) {
          console.warn(`kerasmagic: loading it by itself failed: ${error}`);
        }
      });
    }
  }

  private _onKernelGone(status: string, restarting: boolean): void {
    // A new process comes (same connection object): it may be loaded by itself once again.
    this._autoloadedFor = null;
    const executions = this._transport.executions;
    if (DEATH_STATUSES.has(status) && !this._entry().death) {
      const pending = this._restartPending;
      this._restartPending = null;
      this._noteDeath(
        pending?.record ?? this._record(),
        pending ? pending.runningCount : executions.runningOrSentCount(),
        status === 'autorestarting'
      );
    }
    if (!restarting && RESTART_STATUSES.has(status)) {
      // A server that found the kernel dead says 'restarting' too; @jupyterlab/services
      // turns that into 'autorestarting' in a microtask queued before this one. A restart
      // is only a restart when no death followed it.
      const pending = {
        record: this._record(),
        runningCount: executions.runningOrSentCount()
      };
      this._restartPending = pending;
      void Promise.resolve().then(() => {
        if (this._restartPending === pending) {
          this._restartPending = null;
          // Same kernel id, a new process: a new history that starts with the restart.
          this._newRecord(true, this._kernelNow());
          this._changed.emit();
        }
      });
    }
  }

  /**
   * The followed kernel died: keep its record as it was (the panel shows its timeline, greyed,
   * with the death marked) and, where the server starts a new kernel under the same id, begin
   * a new record that is not called a restart.
   */
  private _noteDeath(
    record: IKernelRecord,
    runningCount: number | null,
    replaced: boolean
  ): void {
    const diedTs = this._kernelNow();
    addMark(record.marks, { kind: 'death', ts: diedTs });
    this._store.setDeath(this._kernelId(), {
      diedTs,
      executionCount: runningCount,
      text: null,
      record
    });
    if (replaced) {
      // A new process under the same id, not called a restart: none of the dead one's jobs.
      this._newRecord(false, undefined, true);
    }
    this._changed.emit();
  }

  // ---- messages -------------------------------------------------------------------------

  /** Write a kernel's message into its record or its store entry. */
  private _onMessage(message: KernelMessage): void {
    const kernelId = this._kernelId();
    switch (message.method) {
      case 'hello':
        this._notePid(message.pid, message.ts);
        this._record().hello = message;
        return; // the transport's state change says it
      case 'sample':
        if (addSample(this._record(), message, this.intervalS)) {
          this._record().latestSample = message; // an overtaken one must not turn the headlines back
        }
        break;
      case 'facts':
        this._record().latestFacts = message;
        recordFacts(this.history, message);
        break;
      case 'event':
        this._record().lastEvent = message;
        addMark(this._record().marks, { kind: message.kind, ts: message.ts });
        break;
      case 'cell_run':
        upsertCellRun(this._record().cellRuns, cellRunOf(message.run));
        break;
      case 'history':
        replayHistory(this._record(), message, this.intervalS);
        break;
      case 'postmortem':
        this._store.tellDeath(this._kernelId(), message);
        break;
      case 'isolated_started':
      case 'isolated_sample':
      case 'isolated_done':
      case 'isolated_jobs':
        this._store.applyJobs(kernelId, message, Date.now());
        break;
      case 'cell_growth':
        this._store.setCellGrowth(kernelId, message);
        break;
      case 'clear_result': {
        const pending = this._pendingClears.get(message.request_id);
        this._pendingClears.delete(message.request_id);
        pending?.resolve(message);
        break;
      }
    }
    this._changed.emit();
  }

  private _rejectClears(): void {
    this._pendingClears.forEach(pending =>
      pending.reject(new Error('disconnected'))
    );
    this._pendingClears.clear();
  }

  // ---- the followed kernel's record -------------------------------------------------------

  private _supports(minor: number): boolean | null {
    const state = this.state;
    if (state.kind !== 'connected') {
      return null;
    }
    return (minorOf(state.hello.protocol_version) ?? 0) >= minor;
  }

  private _kernelId(): string {
    return this._transport.kernelId;
  }

  /** The store's entry of the kernel followed now. */
  private _entry(): IKernelEntry {
    return this._store.entry(this._kernelId());
  }

  /** The record of the kernel followed now, created on first use. */
  private _record(): IKernelRecord {
    return this._entry().record ?? this._newRecord(false);
  }

  /**
   * Another pid under the same kernel id is a restart this page did not see: a new
   * record, its restart marked at the new kernel's hello (it happened before that).
   */
  private _notePid(pid: number, helloTs: number): void {
    const seen = this._record().pid;
    const record =
      seen !== null && seen !== pid
        ? this._newRecord(true, helloTs)
        : this._record();
    record.pid = pid;
  }

  /** Now on the followed kernel's clock (record.ts). */
  private _kernelNow(): number {
    return kernelNow(this._store.peek(this._kernelId())?.record);
  }

  private _capacity(intervalS = this.intervalS): number {
    return SeriesHistory.capacityFor(this._historyMinutes, intervalS);
  }

  /**
   * A fresh record for the kernel followed now. After a restart it is marked so, and
   * `restartTs` (kernel clock) puts a `restart` mark on the new timeline.
   */
  private _newRecord(
    restarted: boolean,
    restartTs?: number,
    newProcess = restarted
  ): IKernelRecord {
    const record = newRecord(this._capacity(), restarted, restartTs);
    // The store keeps the last few kernels (switching back shows the past).
    this._store.setRecord(this._kernelId(), record, { restarted: newProcess });
    return record;
  }

  private _transport: CommTransport;
  private _historyMinutes: number;
  /** Per kernel id: its record, jobs, leak watch and death (see store.ts). */
  private _store = new KernelStore();
  /** A 'restarting' not yet known to be a restart (see `_onKernelGone`). */
  private _restartPending: {
    record: IKernelRecord;
    runningCount: number | null;
  } | null = null;
  private _autoload = new Set<string>();
  private _autoloadedFor: Kernel.IKernelConnection | null = null;
  private _requestCounter = 0;
  private _pendingClears = new Map<
    string,
    { resolve: (result: IClearResult) => void; reject: (reason: Error) => void }
  >();
  private _isDisposed = false;
  private _stateChanged = new Signal<this, ConnectionState>(this);
  private _changed = new Signal<this, void>(this);
}
