/**
 * What the page knows of the cells running in the followed kernel, from the kernel's IOPub
 * (status, execute_input) and the messages this page sends: whether a cell runs, its `In[n]`,
 * and how many cells ended. The transport waits on it (a comm open on the main shell is
 * answered after the running cell) and a death names the cell from it.
 */

import { Kernel, KernelMessage } from '@jupyterlab/services';

export namespace ExecutionTracker {
  export interface IOptions {
    /** A cell (an execute_request) ended: the kernel's main shell is idle. */
    onCellEnded: () => void;
    /** The kernel announced the running cell's `In[n]` (execute_input). */
    onCellAnnounced: (executionCount: number | null) => void;
  }
}

/**
 * Follows one kernel connection at a time.
 *
 * Example: `tracker.follow(kernel)` then, after the kernel's execute_input for `In[7]`,
 * `tracker.runningCount === 7` and `tracker.runningCell === 7` until its idle status.
 */
export class ExecutionTracker {
  constructor(private readonly _options: ExecutionTracker.IOptions) {}

  /** The kernel's main shell is running an execute_request (from IOPub status). */
  executing = false;
  /** In[n] of the cell running on the main shell, from IOPub's execute_input; null: unknown. */
  runningCount: number | null = null;
  /** Cells (execute_requests) the followed kernel finished, as IOPub's idle counts them. */
  cellsEnded = 0;

  /** Listen to `kernel` (null: to none); a kernel followed anew starts with nothing known. */
  follow(kernel: Kernel.IKernelConnection | null): void {
    if (kernel === this._kernel) {
      return;
    }
    this._kernel?.iopubMessage.disconnect(this._onIopub, this);
    this._kernel?.anyMessage.disconnect(this._onAnyMessage, this);
    this._kernel = kernel;
    if (kernel) {
      // What the page learnt of the last kernel stays until a new one is followed: a death
      // told after the detach still names its cell.
      this.runningCount = null;
      this._lastCount = null;
      this._unannounced.clear();
      kernel.iopubMessage.connect(this._onIopub, this);
      kernel.anyMessage.connect(this._onAnyMessage, this);
    }
  }

  /** Forget the running cell (detached: the next attach learns it again). */
  reset(): void {
    this.executing = false;
    this.runningCount = null;
  }

  /**
   * Whether a cell runs in the followed kernel, as this page knows it: its `In[n]` where
   * known, `true` where a cell runs but its number was missed, `false` when none runs.
   */
  get runningCell(): number | boolean {
    if (this.runningCount !== null) {
      return this.runningCount;
    }
    return this.executing || this._kernel?.status === 'busy';
  }

  /**
   * The running cell's `In[n]`; where the kernel has not said it (`os._exit` can end the
   * kernel before its IOPub thread sends execute_input), the one this page sent next, from
   * the last number it saw. Null where neither is known.
   */
  runningOrSentCount(): number | null {
    if (this.runningCount !== null) {
      return this.runningCount;
    }
    return this._unannounced.size > 0 && this._lastCount !== null
      ? this._lastCount + 1
      : null;
  }

  private _onIopub(
    kernel: Kernel.IKernelConnection,
    msg: KernelMessage.IIOPubMessage
  ): void {
    const parent = (msg.parent_header as KernelMessage.IHeader).msg_type;
    if (parent !== 'execute_request') {
      return;
    }
    if (msg.header.msg_type === 'status') {
      const state = (msg.content as KernelMessage.IStatusMsg['content'])
        .execution_state;
      this.executing = state === 'busy';
      if (state === 'idle') {
        this.runningCount = null;
        this.cellsEnded++;
        this._options.onCellEnded();
      }
    } else if (msg.header.msg_type === 'execute_input') {
      // The cell's In[n] as the kernel numbers it: the notebook shows [*] until the reply.
      const count = (msg.content as KernelMessage.IExecuteInputMsg['content'])
        .execution_count;
      this.runningCount = typeof count === 'number' ? count : null;
      this._lastCount = this.runningCount ?? this._lastCount;
      this._options.onCellAnnounced(this.runningCount);
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

  private _kernel: Kernel.IKernelConnection | null = null;
  /** The last `In[n]` the kernel announced, and this page's cells sent since, unannounced. */
  private _lastCount: number | null = null;
  private _unannounced = new Set<string>();
}
