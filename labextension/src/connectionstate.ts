/**
 * Why the sidebar shows what it shows (the transport's state), and the kernel statuses that
 * mean its process is going away.
 */

import { IHello } from './protocol';
import { MainShellReason } from './subshell';

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

/**
 * `restarting`: a restart someone asked for. `autorestarting`: the server found the kernel
 * dead (killed by the OOM killer, crashed, `os._exit`) and started a new one; `dead`: it found
 * it dead and could not. The last two are deaths, never shown as restarts.
 */
export const RESTART_STATUSES = new Set<string>(['restarting']);
export const DEATH_STATUSES = new Set<string>(['autorestarting', 'dead']);

export const GONE_STATUSES = new Set<string>([
  'restarting',
  'autorestarting',
  'dead',
  'terminating'
]);
