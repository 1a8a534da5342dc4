/**
 * The sidebar's wire to the followed notebook's kernel: opens the `kerasmagic.live` comm
 * (on a kernel subshell where it can), opens it again when it was lost, holds what can wait
 * for a running cell, and says in a typed state why there is no data. What the messages
 * mean is the store's business (connection.ts writes them there).
 */

import { ISessionContext } from '@jupyterlab/apputils';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { ConnectionState, GONE_STATUSES } from './connectionstate';
import { ExecutionTracker } from './executions';
import {
  IHello,
  isCompatible,
  KernelMessage as LiveMessage,
  PROTOCOL_VERSION,
  TARGET_NAME,
  validate
} from './protocol';
import {
  ISubshellResult,
  noteUnloadedSubshell,
  subshellIdOf,
  SubshellSlot
} from './subshell';

/** A message to the kernel, as `_send` takes it. */
type Outgoing = { method: string; [key: string]: unknown };

/**
 * Whether a message may wait for the running cell (see `CommTransport.send`): hiding the
 * panel, a new interval and a clear can; showing the panel and a refresh cannot.
 */
function canWait(data: Outgoing): boolean {
  return data.method === 'visibility'
    ? data.visible === false
    : data.method !== 'refresh';
}

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

export namespace CommTransport {
  export interface IOptions {
    intervalS: number;
    /** Every valid message from the kernel; a compatible `hello` before the state says so. */
    onMessage: (message: LiveMessage) => void;
    /**
     * The kernel is going away (`status`, one of GONE_STATUSES), told before the transport
     * lets go of it; `restarting` says whether it already knew.
     */
    onKernelGone: (status: string, restarting: boolean) => void;
    /** The transport let go of the kernel's comm: nothing sent will be answered. */
    onDetached: () => void;
  }
}

/**
 * One sidebar's comm to the kernel of the notebook it follows.
 *
 * Example: `transport.setSessionContext(notebook.sessionContext)` opens the comm; its
 * `state` goes `connecting` → `connected` at the kernel's hello, and `send({method:
 * 'refresh'})` then reaches the kernel at once, even while a cell runs (on a subshell).
 */
export class CommTransport {
  constructor(private readonly _options: CommTransport.IOptions) {
    this._intervalS = _options.intervalS;
    this._executions = new ExecutionTracker({
      onCellEnded: () => this._onCellEnded(),
      onCellAnnounced: count => this._onCellAnnounced(count)
    });
    this._onPageVisibility = () => this._sendVisibility();
    this._onPageUnload = (event: Event) => this._unload(event);
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

  /** The followed notebook's session, null with none. */
  get session(): ISessionContext | null {
    return this._session;
  }

  /** The cells running in the followed kernel, as this page knows them. */
  get executions(): ExecutionTracker {
    return this._executions;
  }

  /** The followed kernel's id ('' with none): the store's key. */
  get kernelId(): string {
    return this._session?.session?.kernel?.id ?? '';
  }

  /** The sampling interval this sidebar asks for; a new one is sent to a connected kernel. */
  get intervalS(): number {
    return this._intervalS;
  }

  set intervalS(intervalS: number) {
    this._intervalS = intervalS;
    if (this._state.kind === 'connected') {
      this.send({ method: 'configure', interval_s: this._intervalS });
    }
  }

  /** The subshell this sidebar's comm uses, null on the main shell (tests look at it). */
  get subshellId(): string | null {
    return this._comm && this._commKernel !== this._kernel
      ? subshellIdOf(this._commKernel)
      : null;
  }

  /** Whether the comm is open (a message sent now reaches the kernel, maybe after a cell). */
  get isOpen(): boolean {
    return this._comm !== null;
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

  /**
   * Send `data` to the kernel; what can wait for the running cell waits while one runs on a
   * subshell'd kernel (see below). Nothing happens without an open comm.
   */
  send(data: Outgoing): void {
    if (!this._comm || this._comm.isDisposed) {
      return;
    }
    if (
      this.subshellId !== null &&
      this._executions.executing &&
      canWait(data)
    ) {
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

  dispose(): void {
    document.removeEventListener('visibilitychange', this._onPageVisibility);
    window.removeEventListener('beforeunload', this._onPageUnload);
    window.removeEventListener('pagehide', this._onPageUnload);
    this.setSessionContext(null);
    Signal.clearData(this);
  }

  // ---- kernel lifecycle ----------------------------------------------------------------

  private _unload(event: Event): void {
    const subshellId = this.subshellId;
    if (subshellId && this._kernel) {
      noteUnloadedSubshell(this._kernel.id, subshellId);
    }
    this._closeComm();
    this._subshell.release(this._kernel, true); // best effort: no subshell thread of ours outlives the page
    if (event.type === 'beforeunload') {
      // JupyterLab asks "leave this page?" when a notebook has unsaved changes. A page that
      // is still here a while later stayed (the user said no, or the navigation is slow):
      // attach again. If it goes after all, `pagehide` lets go of what that attached.
      window.setTimeout(() => {
        if (this._session && this._kernel) {
          this._attach();
        }
      }, UNLOAD_CANCELLED_MS);
    }
  }

  private _onKernelChanged(): void {
    this._detach();
    this._attach();
  }

  private _onStatus(session: ISessionContext, status: Kernel.Status): void {
    if (GONE_STATUSES.has(status)) {
      this._options.onKernelGone(status, this._state.kind === 'restarting');
      if (this._state.kind !== 'restarting') {
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

  /** A cell ended: send what waited for it; a kernel without the channel may have it now. */
  private _onCellEnded(): void {
    this._flushDeferred();
    // After a cell ran in a kernel without the channel, try again: the cell may have been
    // `%load_ext kerasmagic`. Keyed on execute_request so our own comm_open's busy/idle
    // cycle does not loop.
    if (this._state.kind === 'not_loaded') {
      this._attach();
    }
  }

  private _onCellAnnounced(count: number | null): void {
    if (this._state.kind === 'waiting') {
      this._setState({ ...this._state, executionCount: count });
    } else {
      // A cell that started right after our open went out (Run All: `%load_ext`, then
      // the next cell): the open waits for it, and now the page knows its number.
      this._waitOnMainShell?.();
    }
  }

  // ---- attaching -------------------------------------------------------------------------

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
      this._subshell.release(this._kernel, true);
      this._kernel = kernel;
      this._executions.follow(kernel);
      this._retryMs = UNANSWERED_OPEN_MS;
    }
    this._waitOnMainShell = null;
    // This kernel's jobs and leak watch stay as the store has them (shown at once after a
    // switch back); the kernel sends both again right after hello.
    if (!(retrying && this._state.kind === 'waiting')) {
      this._setState({ kind: 'connecting' });
    }
    const attempt = ++this._attempt;
    void this._subshell.connectionFor(kernel).then(result => {
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
    const executions = this._executions;
    const waiting = () => {
      if (
        this._comm === comm &&
        this._kernel === kernel &&
        (this._state.kind === 'connecting' || this._state.kind === 'waiting')
      ) {
        this._waitOnMainShell = null;
        this._setState({
          kind: 'waiting',
          executionCount: executions.runningCount,
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
      executions.executing ||
      executions.runningCount !== null ||
      kernel.status === 'busy'
    ) {
      waiting();
    } else {
      this._waitOnMainShell = waiting;
      window.setTimeout(afterSilence, WAITING_AFTER_MS);
    }
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
    this._cellsEndedAtOpen = this._executions.cellsEnded;
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
    this._executions.reset();
    this._waitOnMainShell = null;
    this._closeComm();
    this._executions.follow(null);
    this._subshell.release(
      this._kernel,
      !!this._kernel && !GONE_STATUSES.has(this._kernel.status)
    );
    this._kernel = null;
    this._options.onDetached();
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
    if (message.method === 'hello') {
      this._onHello(message);
      return;
    }
    if (message.method === 'error' && message.code === 'protocol_mismatch') {
      this._setState({
        kind: 'mismatch',
        kernelVersion: '',
        message: message.message
      });
    } else if (message.method === 'error') {
      console.warn(
        `kerasmagic: the kernel answered ${message.code}: ${message.message}`
      );
    }
    this._options.onMessage(message);
  }

  private _onHello(message: IHello): void {
    if (!isCompatible(message.protocol_version)) {
      this._setState({
        kind: 'mismatch',
        kernelVersion: message.protocol_version,
        message: ''
      });
      this._closeComm();
      return;
    }
    this._options.onMessage(message);
    this._retryMs = UNANSWERED_OPEN_MS;
    this._setState({ kind: 'connected', hello: message });
    this._sendVisibility(); // shown or hidden since the open went out
    if (message.interval_s !== this._intervalS) {
      this.send({ method: 'configure', interval_s: this._intervalS });
    }
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
    // that cell's idle, whose retry (`_onCellEnded`) then never came. Open once more where a
    // cell ended since this open went out; never for a kernel that is going away (the death
    // and restart handling in `_onStatus` owns that state).
    const kernel = this._kernel;
    if (
      this._executions.cellsEnded !== this._cellsEndedAtOpen &&
      kernel &&
      kernel.connectionStatus === 'connected' &&
      (kernel.status === 'idle' || kernel.status === 'busy')
    ) {
      this._attach();
    }
  }

  /** Send what waited for the running cell (see `send`). */
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
      this.send({ method: 'visibility', visible });
    }
  }

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
  }

  private _session: ISessionContext | null = null;
  private _kernel: Kernel.IKernelConnection | null = null;
  /** The subshell connection for `_kernel`, or why there is none. */
  private _subshell = new SubshellSlot();
  private _comm: Kernel.IComm | null = null;
  /** The connection `_comm` was opened on (the subshell's or the kernel's). */
  private _commKernel: Kernel.IKernelConnection | null = null;
  /** Counts attaches and detaches: an open whose connection came too late is dropped. */
  private _attempt = 0;
  private _state: ConnectionState = { kind: 'no_kernel' };
  private _intervalS: number;
  private _executions: ExecutionTracker;
  private _panelVisible = false;
  /** Messages waiting for the running cell to end, by method (see `send`). */
  private _deferred = new Map<string, Outgoing>();
  /** The executions' `cellsEnded` when the current comm's open went out (`_onCommClose`). */
  private _cellsEndedAtOpen = 0;
  /** Enters the waiting state if our open on the main shell is still unanswered. */
  private _waitOnMainShell: (() => void) | null = null;
  /** How long an open may stay unanswered before it is sent again (`_retryIfUnanswered`). */
  private _retryMs = UNANSWERED_OPEN_MS;
  /** What the kernel was last told of the panel: by the open, then by `visibility` messages. */
  private _sentVisible: boolean | null = null;
  private _onPageVisibility: () => void;
  private _onPageUnload: (event: Event) => void;
  private _stateChanged = new Signal<this, ConnectionState>(this);
}
