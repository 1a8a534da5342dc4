/* eslint-disable max-lines -- over 600 lines before issue 31; split it */
/**
 * One sidebar's link to one kernel: opens the `kerasmagic.live` comm, follows restarts,
 * keeps the history the sparklines draw, and says in a typed state why there is no data.
 */

import { ISessionContext } from '@jupyterlab/apputils';
import { Kernel, KernelMessage } from '@jupyterlab/services';
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
import { recordFacts, recordSample } from './series';
import {
  IClearReport,
  IDeath,
  IHostMemory,
  IKernelEntry,
  IKernelRecord,
  KernelStore
} from './store';
import {
  ICellGrowth,
  ICellRunData,
  IClearResult,
  IEvent,
  IFacts,
  IHello,
  IHistory,
  ISample,
  isCompatible,
  isUnavailable,
  minorOf,
  PROTOCOL_VERSION,
  TARGET_NAME,
  validate
} from './protocol';
import {
  ISubshellResult,
  MainShellReason,
  noteUnloadedSubshell,
  openSubshellConnection,
  releaseSubshellConnection,
  subshellIdOf
} from './subshell';

export type { ICellRun, IMark } from './history';
export {
  isGpuDevice,
  recordFacts,
  recordSample,
  SERIES,
  sumDevices,
  sumGpu
} from './series';
export type { IClearReport, IDeath, IHostMemory, IKernelRecord } from './store';

/** Why the sidebar shows what it shows; each case has its own empty-state message. */
export type ConnectionState =
  | { kind: 'no_kernel' }
  | { kind: 'connecting' }
  | IWaitingState
  | { kind: 'not_loaded' }
  | { kind: 'restarting' }
  | { kind: 'connected'; hello: IHello }
  | { kind: 'mismatch'; kernelVersion: string; message: string };

/**
 * The comm's open went to the kernel's main shell while a cell runs there: the kernel answers
 * when the cell ends (ipykernel 6 has no subshells: comm messages wait for the running cell).
 * Said from what the page knows, rather than "Connecting…" for as long as the cell runs.
 */
export interface IWaitingState {
  kind: 'waiting';
  /** The running cell's `In[n]`, from the kernel's execute_input; null where this page missed it. */
  executionCount: number | null;
  /** Why the comm is not on a subshell (subshell.ts). */
  reason: MainShellReason;
  /** The kernel info's `implementation` (`ipython` for ipykernel) where it was read. */
  kernelImplementation: string | null;
}

export namespace LiveConnection {
  export interface IOptions {
    intervalS: number;
    historyMinutes: number;
  }
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
 * Whether a message may wait for the running cell (see `LiveConnection._send`): hiding the
 * panel, a new interval and a clear can; showing the panel and a refresh cannot.
 */
function canWait(data: { method: string; [key: string]: unknown }): boolean {
  return data.method === 'visibility'
    ? data.visible === false
    : data.method !== 'refresh';
}

/**
 * `restarting`: a restart someone asked for. `autorestarting`: the server found the kernel
 * dead (killed by the OOM killer, crashed, `os._exit`) and started a new one; `dead`: it found
 * it dead and could not. The last two are deaths, never shown as restarts.
 */
const RESTART_STATUSES = new Set<string>(['restarting']);
const DEATH_STATUSES = new Set<string>(['autorestarting', 'dead']);

/**
 * An idle kernel answers a comm_open in milliseconds (hello, or a close for an unknown
 * target). One still unanswered after this long, while the kernel is idle, was lost (sent
 * while the kernel's channels were still coming up): open it again rather than show
 * "Connecting…" for good. A busy kernel answers after its cell, so it is left alone.
 */
const UNANSWERED_OPEN_MS = 10_000;
/**
 * While the panel says it waits for a running cell, the kernel may look idle to a page that was
 * reloaded during the cell (it saw no status since): each retry there queues one more open and
 * close behind the cell, so they come ever less often.
 */
const UNANSWERED_OPEN_MAX_MS = 160_000;

/**
 * An idle kernel answers a comm_open in milliseconds, even on a loaded machine. One that has
 * not answered after this long, on the main shell, is running a cell (the page may not know
 * that: after a reload it saw the cell start neither in the notebook nor on IOPub).
 */
const WAITING_AFTER_MS = 1000;
/** How long after `beforeunload` a page that is still here is taken to have stayed. */
const UNLOAD_CANCELLED_MS = 2000;

const GONE_STATUSES = new Set<string>([
  'restarting',
  'autorestarting',
  'dead',
  'terminating'
]);

export class LiveConnection implements IDisposable {
  constructor(options: LiveConnection.IOptions) {
    this._intervalS = options.intervalS;
    this._historyMinutes = options.historyMinutes;
    this._onPageVisibility = () => this._sendVisibility();
    this._onPageUnload = (event: Event) => {
      const subshellId = this.subshellId;
      if (subshellId && this._kernel) {
        noteUnloadedSubshell(this._kernel.id, subshellId);
      }
      this._closeComm();
      this._dropSubshell(true); // best effort: no subshell thread of ours outlives the page
      if (event.type === 'beforeunload') {
        // JupyterLab asks "leave this page?" when a notebook has unsaved changes. A page that
        // is still here a while later stayed (the user said no, or the navigation is slow):
        // attach again. If it goes after all, `pagehide` lets go of what that attached.
        window.setTimeout(() => {
          if (!this._isDisposed && this._kernel) {
            this._attach();
          }
        }, UNLOAD_CANCELLED_MS);
      }
    };
    document.addEventListener('visibilitychange', this._onPageVisibility);
    // A reloaded page opens a new comm; closing the old one stops its samples at once. Done
    // at `beforeunload`, whose messages still go out, and again at `pagehide` (see above).
    window.addEventListener('beforeunload', this._onPageUnload);
    window.addEventListener('pagehide', this._onPageUnload);
  }

  get state(): ConnectionState {
    return this._state;
  }

  get stateChanged(): ISignal<this, ConnectionState> {
    return this._stateChanged;
  }

  /** Emitted on every sample, facts, event or clear result. */
  get changed(): ISignal<this, void> {
    return this._changed;
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

  /**
   * Whether the kernel reports isolated jobs (protocol 1.1 or later); null before `hello`.
   */
  get jobsSupported(): boolean | null {
    if (this._state.kind !== 'connected') {
      return null;
    }
    return (minorOf(this._state.hello.protocol_version) ?? 0) >= 1;
  }

  /** The kernel's leak watch (protocol 1.2 or later), null before its first `cell_growth`. */
  get cellGrowth(): ICellGrowth | null {
    return this._entry().cellGrowth;
  }

  /** What the sidebar knows of each kernel (kept across notebook switches). */
  get store(): KernelStore {
    return this._store;
  }

  /** Whether the kernel watches cells (protocol 1.2 or later); null before `hello`. */
  get cellsSupported(): boolean | null {
    if (this._state.kind !== 'connected') {
      return null;
    }
    return (minorOf(this._state.hello.protocol_version) ?? 0) >= 2;
  }

  get kernelName(): string {
    return this._session?.kernelDisplayName ?? '';
  }

  /** The followed notebook's path ('' with none): what the auto-load choice is kept by. */
  get notebookPath(): string {
    return this._session?.path ?? '';
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

  private _autoloadIfWanted(): void {
    const kernel = this._session?.session?.kernel;
    if (
      this._state.kind === 'not_loaded' &&
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

  /** The sampling interval this sidebar asks for (settings). */
  get intervalS(): number {
    return this._intervalS;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Follow another notebook's kernel (null: no notebook). */
  setSessionContext(session: ISessionContext | null): void {
    if (session === this._session) {
      return;
    }
    if (this._session) {
      this._session.kernelChanged.disconnect(this._onKernelChanged, this);
      this._session.statusChanged.disconnect(this._onStatus, this);
    }
    this._detach();
    this._session = session;
    if (session) {
      session.kernelChanged.connect(this._onKernelChanged, this);
      session.statusChanged.connect(this._onStatus, this);
      void session.ready.then(() => {
        if (this._session === session && this._state.kind === 'no_kernel') {
          this._attach();
        }
      });
    }
    this._attach();
  }

  /** The panel was shown/hidden: with nobody looking the kernel's sampler sleeps. */
  setVisible(visible: boolean): void {
    this._panelVisible = visible;
    this._sendVisibility();
  }

  /** New settings: the sampling interval (kernel-wide) and how far back sparklines go. */
  configure(options: LiveConnection.IOptions): void {
    this._intervalS = options.intervalS;
    this._historyMinutes = options.historyMinutes;
    const capacity = SeriesHistory.capacityFor(
      this._historyMinutes,
      this._intervalS
    );
    this._store.records().forEach(record => record.history.resize(capacity));
    if (this._state.kind === 'connected') {
      this._send({ method: 'configure', interval_s: this._intervalS });
    }
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
    if (this._state.kind !== 'connected' || !this._comm) {
      const reason = new Error('not connected');
      failed(reason);
      return Promise.reject(reason);
    }
    const requestId = `clear-${++this._requestCounter}-${Date.now()}`;
    record.clearReport = { status: 'pending', text: '' };
    const answer = new Promise<IClearResult>((resolve, reject) => {
      this._pendingClears.set(requestId, { resolve, reject });
      this._send({ method: 'clear', request_id: requestId });
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

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    document.removeEventListener('visibilitychange', this._onPageVisibility);
    window.removeEventListener('beforeunload', this._onPageUnload);
    window.removeEventListener('pagehide', this._onPageUnload);
    this.setSessionContext(null);
    Signal.clearData(this);
  }

  // ---- kernel lifecycle ----------------------------------------------------------------

  private _onKernelChanged(): void {
    this._detach();
    this._attach();
  }

  private _onStatus(session: ISessionContext, status: Kernel.Status): void {
    if (GONE_STATUSES.has(status)) {
      // A new process comes (same connection object): it may be loaded by itself once again.
      this._autoloadedFor = null;
      if (DEATH_STATUSES.has(status) && !this._entry().death) {
        const pending = this._restartPending;
        this._restartPending = null;
        this._noteDeath(
          pending?.record ?? this._record(),
          pending ? pending.runningCount : this._runningOrSentCount(),
          status === 'autorestarting'
        );
      }
      if (this._state.kind !== 'restarting') {
        if (RESTART_STATUSES.has(status)) {
          // A server that found the kernel dead says 'restarting' too; @jupyterlab/services
          // turns that into 'autorestarting' in a microtask queued before this one. A restart
          // is only a restart when no death followed it.
          const pending = {
            record: this._record(),
            runningCount: this._runningOrSentCount()
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
        this._detach();
        this._setState({ kind: 'restarting' });
      }
    } else if (
      status === 'idle' &&
      (this._state.kind === 'restarting' || this._state.kind === 'no_kernel')
    ) {
      this._attach();
    }
  }

  private _onIopub(
    kernel: Kernel.IKernelConnection,
    msg: KernelMessage.IIOPubMessage
  ): void {
    if (
      msg.header.msg_type === 'status' &&
      (msg.parent_header as KernelMessage.IHeader).msg_type ===
        'execute_request'
    ) {
      const state = (msg.content as KernelMessage.IStatusMsg['content'])
        .execution_state;
      this._executing = state === 'busy';
      if (state === 'idle') {
        this._runningCount = null;
        this._cellsEnded++;
        this._flushDeferred();
      }
    }
    if (
      msg.header.msg_type === 'execute_input' &&
      (msg.parent_header as KernelMessage.IHeader).msg_type ===
        'execute_request'
    ) {
      // The cell's In[n] as the kernel numbers it: the notebook shows [*] until the reply.
      const count = (msg.content as KernelMessage.IExecuteInputMsg['content'])
        .execution_count;
      this._runningCount = typeof count === 'number' ? count : null;
      this._lastCount = this._runningCount ?? this._lastCount;
      if (this._state.kind === 'waiting') {
        this._setState({ ...this._state, executionCount: this._runningCount });
      } else {
        // A cell that started right after our open went out (Run All: `%load_ext`, then
        // the next cell): the open waits for it, and now the page knows its number.
        this._waitOnMainShell?.();
      }
    }
    // After a cell ran in a kernel without the channel, try again: the cell may have been
    // `%load_ext kerasmagic`. Keyed on execute_request so our own comm_open's busy/idle
    // cycle does not loop.
    if (
      this._state.kind === 'not_loaded' &&
      msg.header.msg_type === 'status' &&
      (msg.content as KernelMessage.IStatusMsg['content']).execution_state ===
        'idle' &&
      (msg.parent_header as KernelMessage.IHeader).msg_type ===
        'execute_request'
    ) {
      this._attach();
    }
  }

  /**
   * Keep the cells this page sent that will get an `In[n]` until the kernel announces them
   * (execute_input) or answers without running them (an aborted queue).
   */
  private _onAnyMessage(
    kernel: Kernel.IKernelConnection,
    args: Kernel.IAnyMessageArgs
  ): void {
    const { header, parent_header, content } = args.msg as any;
    if (args.direction === 'send') {
      if (
        header.msg_type === 'execute_request' &&
        !content.silent &&
        content.store_history !== false
      ) {
        this._unannounced.add(header.msg_id);
      }
    } else if (
      header.msg_type === 'execute_input' ||
      header.msg_type === 'execute_reply'
    ) {
      this._unannounced.delete(parent_header?.msg_id);
    }
  }

  /**
   * The running cell's `In[n]`; where the kernel has not said it (`os._exit` can end the
   * kernel before its IOPub thread sends execute_input), the one this page sent next, from
   * the last number it saw. Null where neither is known.
   */
  private _runningOrSentCount(): number | null {
    if (this._runningCount !== null) {
      return this._runningCount;
    }
    return this._unannounced.size > 0 && this._lastCount !== null
      ? this._lastCount + 1
      : null;
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

  /**
   * Load kerasmagic in the followed kernel (the empty state's button): `%load_ext kerasmagic`,
   * run silently (no cell, no history); the sidebar attaches once it has run, as after a cell.
   * Resolves with null when it loaded, else with the kernel's error (`ModuleNotFoundError: …`).
   */
  async loadExtension(): Promise<string | null> {
    const kernel = this._session?.session?.kernel;
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

  /**
   * The followed kernel's last hello while it is not (yet) connected again and the page has
   * its last view (switched away and back, a re-attach): the panel shows that view at once,
   * marked "updating…", instead of a blank "Connecting…". Null otherwise.
   */
  get lastView(): IHello | null {
    const kind = this._state.kind;
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
    if (this._runningCount !== null) {
      return this._runningCount;
    }
    return this._executing || this._kernel?.status === 'busy';
  }

  /** The death of the followed kernel's predecessor, until dismissed; null if none. */
  get death(): IDeath | null {
    return this._store.peek(this._kernelId())?.death ?? null;
  }

  /** The user has read it: the panel stops showing the death and the dead timeline. */
  dismissDeath(): void {
    const death = this.death;
    if (death) {
      // The kernel tells every comm of it again (`postmortem`): a death from before now stays
      // dismissed; a later one is news.
      this._store.dismissDeath(this._kernelId(), this._kernelNow());
      this._changed.emit();
    }
  }

  private _kernelId(): string {
    return this._session?.session?.kernel?.id ?? '';
  }

  /** The store's entry of the kernel followed now. */
  private _entry(): IKernelEntry {
    return this._store.entry(this._kernelId());
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

  /**
   * Now on the followed kernel's clock, estimated from its last sample's ts plus the
   * time since that sample arrived (the page's clock may differ from the kernel's).
   */
  private _kernelNow(): number {
    const record = this._store.peek(this._kernelId())?.record;
    if (
      record &&
      record.lastSampleTs !== null &&
      record.lastSampleAt !== null
    ) {
      return record.lastSampleTs + (Date.now() - record.lastSampleAt) / 1000;
    }
    return Date.now() / 1000; // no sample yet: the page's clock is the best guess
  }

  /**
   * Record a sample in the current kernel's record (live, or replayed from history).
   *
   * The series stay in time order, which the timeline's lookups rely on: a sample no newer
   * than the last one is dropped. That is a replayed one this page has already (attached
   * before, switched away and back), or a live one overtaken on the way: the kernel takes
   * samples on its sampler thread and, for a frontend that just asked, on another.
   */
  private _recordSample(sample: ISample): boolean {
    const record = this._record();
    if (record.lastSampleTs !== null && sample.ts <= record.lastSampleTs) {
      return false;
    }
    // A kernel before 1.5 does not say its interval: it sampled at ours while looked at.
    const interval = Math.max(
      sample.interval_s ?? this._intervalS,
      record.lastIntervalS ?? 0
    );
    if (
      record.lastSampleTs !== null &&
      sample.ts - record.lastSampleTs > gapAfterS(interval)
    ) {
      record.history.addGap(record.lastSampleTs + interval);
    }
    record.lastIntervalS = sample.interval_s ?? this._intervalS;
    recordSample(record.history, sample);
    record.lastSampleTs = sample.ts;
    record.lastSampleAt = Date.now();
    if (sample.host !== undefined) {
      record.host = hostOf(sample);
    }
    return true;
  }

  /** Replay a `history` message: the same path as live samples, runs and marks. */
  private _replay(message: IHistory): void {
    const record = this._record();
    message.samples.forEach(sample => this._recordSample(sample));
    message.cell_runs.forEach(run =>
      upsertCellRun(record.cellRuns, cellRunOf(run))
    );
    message.marks.forEach(mark => addMark(record.marks, mark));
  }

  /** The record of the kernel followed now, created on first use. */
  private _record(): IKernelRecord {
    return this._entry().record ?? this._newRecord(false);
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
    const kernelId = this._kernelId();
    const record: IKernelRecord = {
      history: new SeriesHistory(
        SeriesHistory.capacityFor(this._historyMinutes, this._intervalS)
      ),
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
    // The store keeps the last few kernels (switching back shows the past).
    this._store.setRecord(kernelId, record, { restarted: newProcess });
    return record;
  }

  /** `retrying`: an unanswered open opened again; a waiting panel keeps saying so meanwhile. */
  private _attach(retrying = false): void {
    const kernel = this._session?.session?.kernel ?? null;
    if (!kernel || GONE_STATUSES.has(kernel.status)) {
      this._detach();
      this._setState({ kind: kernel ? 'restarting' : 'no_kernel' });
      return;
    }
    this._closeComm();
    if (this._kernel !== kernel) {
      this._kernel?.iopubMessage.disconnect(this._onIopub, this);
      this._kernel?.anyMessage.disconnect(this._onAnyMessage, this);
      this._dropSubshell(true);
      this._kernel = kernel;
      this._runningCount = null;
      this._lastCount = null;
      this._unannounced.clear();
      this._retryMs = UNANSWERED_OPEN_MS;
      kernel.iopubMessage.connect(this._onIopub, this);
      kernel.anyMessage.connect(this._onAnyMessage, this);
    }
    this._waitOnMainShell = null;
    // This kernel's jobs and leak watch stay as the store has them (shown at once after a
    // switch back); the kernel sends both again right after hello.
    if (!(retrying && this._state.kind === 'waiting')) {
      this._setState({ kind: 'connecting' });
    }
    const attempt = ++this._attempt;
    void this._commConnection(kernel).then(result => {
      if (attempt === this._attempt && this._kernel === kernel) {
        this._openComm(result.connection ?? kernel);
        if (!result.connection && result.reason) {
          this._waitIfBusy(kernel, result);
        }
      } // else: detached or attached again meanwhile
    });
  }

  /**
   * On the main shell the kernel answers the open after the running cell: say so at once
   * where the page knows a cell runs, else once the kernel has been silent too long for an
   * idle one.
   */
  private _waitIfBusy(
    kernel: Kernel.IKernelConnection,
    result: ISubshellResult
  ): void {
    const comm = this._comm;
    const waiting = () => {
      if (
        this._comm === comm &&
        this._kernel === kernel &&
        (this._state.kind === 'connecting' || this._state.kind === 'waiting')
      ) {
        this._waitOnMainShell = null;
        this._setState({
          kind: 'waiting',
          executionCount: this._runningCount,
          reason: result.reason ?? 'no_subshells',
          kernelImplementation: result.kernelImplementation
        });
      }
    };
    // Silence from a kernel that is still starting, or a page not yet connected to it, says
    // nothing about a cell: keep "Connecting…" and look again.
    const afterSilence = () => {
      if (
        kernel.connectionStatus === 'connected' &&
        (kernel.status === 'idle' || kernel.status === 'busy')
      ) {
        waiting();
      } else if (this._comm === comm && this._state.kind === 'connecting') {
        window.setTimeout(afterSilence, WAITING_AFTER_MS);
      }
    };
    if (
      this._executing ||
      this._runningCount !== null ||
      kernel.status === 'busy'
    ) {
      waiting();
    } else {
      this._waitOnMainShell = waiting;
      window.setTimeout(afterSilence, WAITING_AFTER_MS);
    }
  }

  /**
   * The connection the comm goes over: the kernel's subshell connection where it has one
   * (the comm then opens and is served while a cell runs), else the kernel's own.
   * Kept for the kernel across re-attaches (not loaded yet, `%load_ext` later).
   */
  private _commConnection(
    kernel: Kernel.IKernelConnection
  ): Promise<ISubshellResult> {
    if (this._subshell === null) {
      const asked: Promise<ISubshellResult> = openSubshellConnection(kernel)
        .catch((reason): ISubshellResult => {
          console.warn(
            'kerasmagic: no kernel subshell for the live comm',
            reason
          );
          return {
            connection: null,
            reason: 'no_answer',
            kernelImplementation: null
          };
        })
        .then(result => {
          // No answer is no verdict: a kernel still starting (the page's first attach) drops
          // control requests. Ask again on the next attach (after `%load_ext`, a restart).
          if (result.reason === 'no_answer' && this._subshell === asked) {
            this._subshell = null;
          }
          return result;
        });
      this._subshell = asked;
    }
    return this._subshell;
  }

  /** Give back the subshell connection (its subshell is deleted unless the kernel is gone). */
  private _dropSubshell(kernelAlive: boolean): void {
    const pending = this._subshell;
    const kernel = this._kernel;
    this._subshell = null;
    void pending?.then(({ connection }) => {
      if (connection) {
        releaseSubshellConnection(connection, kernel, kernelAlive);
      }
    });
  }

  /** The subshell this sidebar's comm uses, null on the main shell (tests look at it). */
  get subshellId(): string | null {
    return this._comm && this._commKernel !== this._kernel
      ? subshellIdOf(this._commKernel)
      : null;
  }

  private _openComm(connection: Kernel.IKernelConnection): void {
    let comm: Kernel.IComm;
    try {
      comm = connection.createComm(TARGET_NAME);
    } catch (reason) {
      console.warn('kerasmagic: cannot open the live comm', reason);
      this._setState({ kind: 'not_loaded' });
      return;
    }
    this._comm = comm;
    this._commKernel = connection;
    this._cellsEndedAtOpen = this._cellsEnded;
    comm.onMsg = msg => this._onCommMsg(comm, msg);
    comm.onClose = msg => this._onCommClose(comm, msg);
    this._retryIfUnanswered(comm);
    // The open carries the visibility and interval as they are now: what still waited for a
    // cell on an earlier comm is stale, and the kernel knows the panel as this open says
    // until a `visibility` message changes it. The panel may be shown or hidden before the
    // kernel answers (it is often shown while `%load_ext` runs): hello reconciles.
    this._deferred.clear();
    const visible = this._isVisible();
    this._sentVisible = visible;
    comm.open(
      {
        method: 'open',
        visible,
        interval_s: this._intervalS
      },
      { protocol_version: PROTOCOL_VERSION }
    );
  }

  private _retryIfUnanswered(comm: Kernel.IComm): void {
    const delay = this._retryMs;
    window.setTimeout(() => {
      const kernel = this._kernel;
      const unanswered =
        this._state.kind === 'connecting' || this._state.kind === 'waiting';
      if (this._comm !== comm || !unanswered || !kernel) {
        return; // answered, closed or replaced meanwhile
      }
      if (kernel.status === 'idle') {
        console.warn(
          'kerasmagic: the kernel did not answer the live comm; opening it again'
        );
        if (this._state.kind === 'waiting') {
          this._retryMs = Math.min(2 * delay, UNANSWERED_OPEN_MAX_MS);
        }
        this._attach(true);
      } else {
        // Busy: on the main shell the open waits behind the running cell.
        this._retryIfUnanswered(comm);
      }
    }, delay);
  }

  private _detach(): void {
    this._attempt++; // an open still waiting for its connection is not wanted any more
    this._deferred.clear();
    this._executing = false;
    this._runningCount = null;
    this._waitOnMainShell = null;
    this._closeComm();
    this._kernel?.iopubMessage.disconnect(this._onIopub, this);
    this._kernel?.anyMessage.disconnect(this._onAnyMessage, this);
    this._dropSubshell(
      !!this._kernel && !GONE_STATUSES.has(this._kernel.status)
    );
    this._kernel = null;
    this._pendingClears.forEach(pending =>
      pending.reject(new Error('disconnected'))
    );
    this._pendingClears.clear();
    this._setState({
      kind: this._session?.session?.kernel ? 'connecting' : 'no_kernel'
    });
  }

  private _closeComm(): void {
    const comm = this._comm;
    this._comm = null;
    this._commKernel = null;
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        // The kernel may be gone already (restart, shutdown): nothing to close.
      }
    }
  }

  // ---- messages -------------------------------------------------------------------------

  // eslint-disable-next-line max-lines-per-function -- too long before issue 31; split it
  private _onCommMsg(comm: Kernel.IComm, msg: KernelMessage.ICommMsgMsg): void {
    if (comm !== this._comm) {
      return;
    }
    const checked = validate(msg.content.data, 'to_frontend');
    if (!checked.ok) {
      console.warn(
        `kerasmagic: ignoring a message from the kernel: ${checked.reason}`
      );
      return;
    }
    const message = checked.message;
    switch (message.method) {
      case 'hello':
        if (!isCompatible(message.protocol_version)) {
          this._setState({
            kind: 'mismatch',
            kernelVersion: message.protocol_version,
            message: ''
          });
          this._closeComm();
          return;
        }
        this._notePid(message.pid, message.ts);
        this._record().hello = message;
        this._retryMs = UNANSWERED_OPEN_MS;
        this._setState({ kind: 'connected', hello: message });
        this._sendVisibility(); // shown or hidden since the open went out
        if (message.interval_s !== this._intervalS) {
          this._send({ method: 'configure', interval_s: this._intervalS });
        }
        break;
      case 'sample':
        if (this._recordSample(message)) {
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
        this._replay(message);
        break;
      case 'postmortem':
        this._store.tellDeath(this._kernelId(), message);
        break;
      case 'isolated_started':
      case 'isolated_sample':
      case 'isolated_done':
      case 'isolated_jobs':
        this._store.applyJobs(this._kernelId(), message, Date.now());
        break;
      case 'cell_growth':
        this._store.setCellGrowth(this._kernelId(), message);
        break;
      case 'clear_result': {
        const pending = this._pendingClears.get(message.request_id);
        this._pendingClears.delete(message.request_id);
        pending?.resolve(message);
        break;
      }
      case 'error':
        if (message.code === 'protocol_mismatch') {
          this._setState({
            kind: 'mismatch',
            kernelVersion: '',
            message: message.message
          });
        } else {
          console.warn(
            `kerasmagic: the kernel answered ${message.code}: ${message.message}`
          );
        }
        break;
    }
    this._changed.emit();
  }

  private _onCommClose(
    comm: Kernel.IComm,
    msg: KernelMessage.ICommCloseMsg
  ): void {
    if (comm !== this._comm) {
      return; // we closed it ourselves
    }
    this._comm = null;
    if (this._state.kind === 'mismatch') {
      return;
    }
    // Closed by the kernel before or after hello: target not registered (ipykernel closes
    // an unknown target at once) or `%unload_ext kerasmagic`. Either way: not loaded.
    this._setState({ kind: 'not_loaded' });
    // A subshell's close and the main shell's idle come over two websockets, in either
    // order: a close for an open the kernel refused while `%load_ext` ran can arrive after
    // that cell's idle, whose retry (`_onIopub`) then never came. Open once more where a
    // cell ended since this open went out; never for a kernel that is going away (the death
    // and restart handling in `_onStatus` owns that state).
    const kernel = this._kernel;
    if (
      this._cellsEnded !== this._cellsEndedAtOpen &&
      kernel &&
      kernel.connectionStatus === 'connected' &&
      (kernel.status === 'idle' || kernel.status === 'busy')
    ) {
      this._attach();
    }
  }

  private _send(data: { method: string; [key: string]: unknown }): void {
    if (!this._comm || this._comm.isDisposed) {
      return;
    }
    if (this.subshellId !== null && this._executing && canWait(data)) {
      // Every message a subshell handles publishes busy, then idle, on IOPub, and JupyterLab
      // shows the kernel as whichever it saw last: a tab switch during a long fit would show
      // the kernel idle. What can wait for the cell waits (the kernel runs a clear after it
      // anyway), the latest of each kind. Showing the panel cannot: the sampler must wake now.
      this._deferred.set(data.method, data);
      return;
    }
    this._deferred.delete(data.method); // superseded: a held `visible: false` must not follow
    this._comm.send(data as any);
  }

  /** Send what waited for the running cell (see `_send`). */
  private _flushDeferred(): void {
    const waiting = [...this._deferred.values()];
    this._deferred.clear();
    if (this._comm && !this._comm.isDisposed) {
      waiting.forEach(data => this._comm!.send(data as any));
    }
  }

  private _isVisible(): boolean {
    return this._panelVisible && document.visibilityState !== 'hidden';
  }

  private _sendVisibility(): void {
    const visible = this._isVisible();
    if (visible === this._sentVisible) {
      return;
    }
    if (this._state.kind === 'connected') {
      this._sentVisible = visible;
      this._send({ method: 'visibility', visible });
    }
  }

  private _autoload = new Set<string>();
  private _autoloadedFor: Kernel.IKernelConnection | null = null;

  private _setState(state: ConnectionState): void {
    const same =
      state.kind === this._state.kind &&
      state.kind !== 'connected' &&
      state.kind !== 'mismatch' &&
      state.kind !== 'waiting';
    this._state = state;
    if (!same) {
      this._stateChanged.emit(state);
    }
    if (state.kind === 'not_loaded') {
      this._autoloadIfWanted();
    }
  }

  private _session: ISessionContext | null = null;
  private _kernel: Kernel.IKernelConnection | null = null;
  /** The subshell connection for `_kernel`, or why there is none. */
  private _subshell: Promise<ISubshellResult> | null = null;
  private _comm: Kernel.IComm | null = null;
  /** The connection `_comm` was opened on (the subshell's or the kernel's). */
  private _commKernel: Kernel.IKernelConnection | null = null;
  /** Counts attaches and detaches: an open whose connection came too late is dropped. */
  private _attempt = 0;
  private _state: ConnectionState = { kind: 'no_kernel' };
  private _intervalS: number;
  private _historyMinutes: number;
  /** Per kernel id: its record, jobs, leak watch and death (see store.ts). */
  private _store = new KernelStore();
  /** A 'restarting' not yet known to be a restart (see `_onStatus`). */
  private _restartPending: {
    record: IKernelRecord;
    runningCount: number | null;
  } | null = null;
  private _panelVisible = false;
  /** Messages waiting for the running cell to end, by method (see `_send`). */
  private _deferred = new Map<
    string,
    { method: string; [key: string]: unknown }
  >();
  /** The kernel's main shell is running an execute_request (from IOPub status). */
  private _executing = false;
  /** Cells (execute_requests) the followed kernel finished, as IOPub's idle counts them. */
  private _cellsEnded = 0;
  /** `_cellsEnded` when the current comm's open went out (see `_onCommClose`). */
  private _cellsEndedAtOpen = 0;
  /** In[n] of the cell running on the main shell, from IOPub's execute_input; null: unknown. */
  private _runningCount: number | null = null;
  /** The last `In[n]` the kernel announced, and this page's cells sent since, unannounced. */
  private _lastCount: number | null = null;
  private _unannounced = new Set<string>();
  /** Enters the waiting state if our open on the main shell is still unanswered. */
  private _waitOnMainShell: (() => void) | null = null;
  /** How long an open may stay unanswered before it is sent again (`_retryIfUnanswered`). */
  private _retryMs = UNANSWERED_OPEN_MS;
  /** What the kernel was last told of the panel: by the open, then by `visibility` messages. */
  private _sentVisible: boolean | null = null;
  private _requestCounter = 0;
  private _pendingClears = new Map<
    string,
    { resolve: (result: IClearResult) => void; reject: (reason: Error) => void }
  >();
  private _isDisposed = false;
  private _onPageVisibility: () => void;
  private _onPageUnload: (event: Event) => void;
  private _stateChanged = new Signal<this, ConnectionState>(this);
  private _changed = new Signal<this, void>(this);
}
