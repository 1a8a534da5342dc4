/**
 * A kernel connection of the sidebar's own whose shell messages go to a kernel subshell
 * (JEP 91, ipykernel 7), so that the `kerasmagic.live` comm opens and is served while a
 * cell runs on the main shell.
 *
 * Why not JupyterLab's own `commsOverSubshells` (a subshell per comm target)? Two things
 * keep a comm_open on the main shell there, behind the running cell:
 * - the comm's subshell is created asynchronously after `createComm`, and `comm.open()`
 *   sent before it exists goes to the main shell;
 * - it is created only once `kernel.info` has resolved, and that comes from a
 *   `kernel_info_request` on the shell channel: after a page reload while a cell runs it
 *   waits for the cell to end, so the page does not even know subshells are there.
 * The control channel answers while a cell runs: we ask it whether the kernel has
 * subshells and to create one, and talk to that subshell through a clone of the kernel
 * connection whose `subshellId` is set (its own kernel_info goes to the subshell too).
 */

import { Kernel, KernelMessage } from '@jupyterlab/services';

/**
 * What a kernel connection has for subshells since @jupyterlab/services 7.4 (JupyterLab 4.4);
 * JupyterLab 4.0 to 4.3 have none of it, and a `subshellId` set there would be ignored: every
 * message would still go to the main shell.
 */
interface ISubshellFields {
  subshellId: string | null;
}
type SubshellConnection = Kernel.IKernelConnection & ISubshellFields;

/** The connection with its subshell API, or null where this JupyterLab has none. */
export function subshellApi(
  kernel: Kernel.IKernelConnection
): SubshellConnection | null {
  // An accessor of KernelConnection's prototype where services has it, so `in` finds it.
  return 'subshellId' in kernel ? (kernel as SubshellConnection) : null;
}

/** The subshell a connection's shell messages go to; null for the main shell. */
export function subshellIdOf(
  kernel: Kernel.IKernelConnection | null
): string | null {
  return (kernel && subshellApi(kernel)?.subshellId) ?? null;
}

/**
 * Why the sidebar's comm goes over the main shell, where a running cell holds it back:
 * - `no_subshells`: the kernel has none (ipykernel 6 and most other kernels);
 * - `frontend`: the kernel has them, but this JupyterLab cannot address one (before 4.4);
 * - `disabled`: the user turned comms over subshells off (JupyterLab's setting);
 * - `no_answer`: the control channel did not answer, or refused a subshell.
 */
export type MainShellReason =
  'no_subshells' | 'frontend' | 'disabled' | 'no_answer';

/** What `openSubshellConnection` found: a subshell connection, or why there is none. */
export interface ISubshellResult {
  connection: Kernel.IKernelConnection | null;
  /** Null when `connection` is set. */
  reason: MainShellReason | null;
  /** The kernel info's `implementation` (`ipython` for ipykernel) where it was read. */
  kernelImplementation: string | null;
}

/** How long a control request may take before we do without (the main shell). */
export const CONTROL_TIMEOUT_MS = 3000;
/** How long `kernel.info` may take before we ask the control channel instead. */
const INFO_WAIT_MS = 300;

let messageCounter = 0;

/**
 * Send a control-channel request and resolve with its reply's content, or null if none
 * came within `timeoutMs` (a kernel that does not know the request may never answer).
 */
export function controlRequest(
  kernel: Kernel.IKernelConnection,
  msgType: string,
  content: { [key: string]: unknown },
  timeoutMs: number = CONTROL_TIMEOUT_MS
): Promise<{ [key: string]: any } | null> {
  return new Promise(resolve => {
    // Built by hand: KernelMessage.createMessage's types list no kernel_info on control,
    // and the wire format is all it takes.
    const msg = {
      header: {
        msg_id: `kerasmagic-${Date.now()}-${++messageCounter}`,
        msg_type: msgType,
        username: kernel.username,
        session: kernel.clientId,
        date: new Date().toISOString(),
        version: '5.3'
      },
      parent_header: {},
      metadata: {},
      content,
      channel: 'control',
      buffers: []
    } as unknown as KernelMessage.IControlMessage;
    let future: Kernel.IControlFuture;
    try {
      future = kernel.sendControlMessage(msg, true, true);
    } catch {
      resolve(null); // disposed or dead kernel
      return;
    }
    const timer = setTimeout(() => {
      resolve(null);
      future.dispose();
    }, timeoutMs);
    future.onReply = reply => {
      clearTimeout(timer);
      resolve(reply.content as { [key: string]: any });
    };
    future.done.catch(() => {
      clearTimeout(timer);
      resolve(null);
    });
  });
}

/**
 * The kernel's implementation from a kernel_info reply's content (`ipython` for ipykernel,
 * whose `implementation_version` is IPython's, not its own), null without one.
 */
function implementationOf(info: { [key: string]: any } | null): string | null {
  const name = info?.implementation;
  return typeof name === 'string' && name ? name : null;
}

/**
 * The kernel's info reply: `kernel.info` where it resolves at once, else the control channel's
 * (after a page reload during a cell, `kernel.info` comes from the shell and waits for the
 * cell); null where neither answered.
 */
async function kernelInfo(
  kernel: Kernel.IKernelConnection
): Promise<{ [key: string]: any } | null> {
  const known = await Promise.race([
    kernel.info.then(
      info => info as unknown as { [key: string]: any },
      () => null
    ),
    new Promise<null>(resolve => setTimeout(() => resolve(null), INFO_WAIT_MS))
  ]);
  return known ?? (await controlRequest(kernel, 'kernel_info_request', {}));
}

/** Where a tab keeps the subshells its last page asked, while unloading, to delete. */
const UNLOADED_KEY = 'kerasmagic:unloaded-subshells';
/** A bound on what a tab keeps there: kernels it never opens again stay listed. */
const UNLOADED_KEPT = 20;

function unloadedSubshells(): [string, string][] {
  try {
    const list = JSON.parse(sessionStorage.getItem(UNLOADED_KEY) ?? '[]');
    return Array.isArray(list) ? list : [];
  } catch {
    return []; // storage turned off, or not ours
  }
}

function keepUnloaded(list: [string, string][]): void {
  try {
    sessionStorage.setItem(
      UNLOADED_KEY,
      JSON.stringify(list.slice(-UNLOADED_KEPT))
    );
  } catch {
    // storage turned off or full: the kernel keeps an idle thread, nothing else is lost
  }
}

/**
 * Note, as the page unloads, a subshell it asks the kernel to delete. That request leaves with
 * the page and can be lost with it (seen on a loaded machine); the tab's next page repeats it
 * (`sessionStorage` outlives a reload). Written only while unloading, so a duplicated tab,
 * which copies the storage of a page still in use, finds nothing to delete.
 */
export function noteUnloadedSubshell(
  kernelId: string,
  subshellId: string
): void {
  keepUnloaded([...unloadedSubshells(), [kernelId, subshellId]]);
}

/** Repeat the delete requests this tab's last page sent to `kernel` while it unloaded. */
function deleteUnloadedSubshells(kernel: Kernel.IKernelConnection): void {
  const list = unloadedSubshells();
  const left = list.filter(([kernelId]) => kernelId !== kernel.id);
  if (left.length === list.length) {
    return;
  }
  keepUnloaded(left);
  for (const [kernelId, subshellId] of list) {
    if (kernelId === kernel.id) {
      // Already gone when the first request arrived: the kernel answers an error, no harm.
      void controlRequest(kernel, 'delete_subshell_request', {
        subshell_id: subshellId
      });
    }
  }
}

/**
 * A clone of `kernel`'s connection bound to a new subshell, or why there is none: the kernel
 * has none, this JupyterLab cannot use one, the user turned comms over subshells off, or the
 * kernel did not answer.
 */
export async function openSubshellConnection(
  kernel: Kernel.IKernelConnection
): Promise<ISubshellResult> {
  const api = subshellApi(kernel);
  // JupyterLab's setting (Settings → Kernels → commsOverSubshells): "disabled" is the
  // user saying no subshells for comms; we follow it.
  const setting = (api as { commsOverSubshells?: unknown } | null)
    ?.commsOverSubshells;
  if (setting === 'disabled') {
    return { connection: null, reason: 'disabled', kernelImplementation: null };
  }
  const info = await kernelInfo(kernel);
  const kernelImplementation = implementationOf(info);
  const without = (reason: MainShellReason): ISubshellResult => ({
    connection: null,
    reason,
    kernelImplementation
  });
  if (info === null) {
    return without('no_answer');
  }
  // Read from the reply rather than `kernel.supportsSubshells`, which JupyterLab 4.0 lacks.
  const features = info.supported_features;
  if (!Array.isArray(features) || !features.includes('kernel subshells')) {
    return without('no_subshells');
  }
  if (!api) {
    return without('frontend');
  }
  deleteUnloadedSubshells(kernel);
  const reply = await controlRequest(kernel, 'create_subshell_request', {});
  const subshellId = reply?.subshell_id;
  if (reply?.status !== 'ok' || typeof subshellId !== 'string') {
    return without('no_answer');
  }
  if (kernel.isDisposed) {
    return without('no_answer');
  }
  const connection = kernel.clone({ handleComms: true }) as SubshellConnection;
  // The clone must handle comms (createComm refuses otherwise), but it also sees every
  // comm_open the kernel sends on IOPub (ipywidgets, other extensions) and, knowing none of
  // their targets, would close them in the kernel: a widget shown later would stop syncing.
  // Opens from the kernel are the notebook connection's business, so the clone ignores them.
  // `_handleCommOpen` is @jupyterlab/services' own (7.x); without it, no subshell at all.
  const hooks = connection as unknown as { _handleCommOpen?: unknown };
  if (typeof hooks._handleCommOpen !== 'function') {
    connection.dispose();
    void controlRequest(kernel, 'delete_subshell_request', {
      subshell_id: subshellId
    });
    return without('frontend');
  }
  hooks._handleCommOpen = async () => undefined;
  // Set before the clone's websocket opens: its first kernel_info goes to the subshell.
  connection.subshellId = subshellId;
  return { connection, reason: null, kernelImplementation };
}

/**
 * Give back a connection from `openSubshellConnection`: ask the kernel to delete its
 * subshell (unless the kernel is gone: a restart takes the subshells with it) and close it.
 */
export function releaseSubshellConnection(
  connection: Kernel.IKernelConnection,
  kernel: Kernel.IKernelConnection | null,
  kernelAlive: boolean
): void {
  const api = subshellApi(connection);
  const subshellId = api?.subshellId ?? null;
  // Deleted here rather than by dispose(): that asks only once the clone has its kernel
  // info, and waits for an answer a restarted kernel never gives before it lets go.
  if (api) {
    api.subshellId = null;
  }
  if (subshellId && kernel && kernelAlive && !kernel.isDisposed) {
    void controlRequest(kernel, 'delete_subshell_request', {
      subshell_id: subshellId
    });
  }
  connection.dispose();
}

/**
 * The subshell connection one sidebar asked for its current kernel, kept across re-attaches
 * (not loaded yet, `%load_ext` later) and given back when the sidebar lets the kernel go.
 */
export class SubshellSlot {
  /**
   * The connection the comm goes over: the kernel's subshell connection where it has one
   * (the comm then opens and is served while a cell runs), else why there is none.
   */
  connectionFor(kernel: Kernel.IKernelConnection): Promise<ISubshellResult> {
    if (this._pending === null) {
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
          if (result.reason === 'no_answer' && this._pending === asked) {
            this._pending = null;
          }
          return result;
        });
      this._pending = asked;
    }
    return this._pending;
  }

  /** Give back the subshell connection (its subshell is deleted unless the kernel is gone). */
  release(kernel: Kernel.IKernelConnection | null, kernelAlive: boolean): void {
    const pending = this._pending;
    this._pending = null;
    void pending?.then(({ connection }) => {
      if (connection) {
        releaseSubshellConnection(connection, kernel, kernelAlive);
      }
    });
  }

  private _pending: Promise<ISubshellResult> | null = null;
}
