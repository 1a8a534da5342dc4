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

/** Whether the kernel has subshells, asking the control channel if `kernel.info` waits. */
export async function kernelSupportsSubshells(
  kernel: Kernel.IKernelConnection
): Promise<boolean> {
  const known = await Promise.race([
    kernel.info.then(
      () => true,
      () => false
    ),
    new Promise<boolean>(resolve =>
      setTimeout(() => resolve(false), INFO_WAIT_MS)
    )
  ]);
  if (known) {
    return kernel.supportsSubshells;
  }
  const info = await controlRequest(kernel, 'kernel_info_request', {});
  const features = info?.supported_features;
  return Array.isArray(features) && features.includes('kernel subshells');
}

/**
 * A clone of `kernel`'s connection bound to a new subshell, or null where the kernel has
 * none, the user turned comms over subshells off, or the kernel did not answer.
 */
export async function openSubshellConnection(
  kernel: Kernel.IKernelConnection
): Promise<Kernel.IKernelConnection | null> {
  // JupyterLab's setting (Settings → Kernels → commsOverSubshells): "disabled" is the
  // user saying no subshells for comms; we follow it.
  if ((kernel.commsOverSubshells as string | undefined) === 'disabled') {
    return null;
  }
  if (!(await kernelSupportsSubshells(kernel))) {
    return null;
  }
  const reply = await controlRequest(kernel, 'create_subshell_request', {});
  const subshellId = reply?.subshell_id;
  if (reply?.status !== 'ok' || typeof subshellId !== 'string') {
    return null;
  }
  if (kernel.isDisposed) {
    return null;
  }
  const connection = kernel.clone({ handleComms: true });
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
    return null;
  }
  hooks._handleCommOpen = async () => undefined;
  // Set before the clone's websocket opens: its first kernel_info goes to the subshell.
  connection.subshellId = subshellId;
  return connection;
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
  const subshellId = connection.subshellId;
  // Deleted here rather than by dispose(): that asks only once the clone has its kernel
  // info, and waits for an answer a restarted kernel never gives before it lets go.
  connection.subshellId = null;
  if (subshellId && kernel && kernelAlive && !kernel.isDisposed) {
    void controlRequest(kernel, 'delete_subshell_request', {
      subshell_id: subshellId
    });
  }
  connection.dispose();
}
