/**
 * What the panel says while its comm waits on the kernel's main shell for a running cell
 * (ipykernel 6, or a JupyterLab before 4.4): which cell it waits for and why, instead of
 * "Connecting…" for as long as the cell runs. No DOM here, so jest tests the wording.
 */

import type { IWaitingState } from './connection';

/** The part of a `TranslationBundle` the wording needs (jest passes a plain one). */
export interface IWording {
  __(msgid: string, ...args: any[]): string;
}

/** The notice's two lines. */
export interface IWaitingNotice {
  title: string;
  hint: string;
}

export function waitingNotice(
  state: IWaitingState,
  trans: IWording
): IWaitingNotice {
  const title =
    state.executionCount === null
      ? trans.__(
          'Waiting for the kernel: it answers after the running cell ends'
        )
      : trans.__(
          'Waiting for the kernel: it answers after cell [%1] ends',
          state.executionCount
        );
  const kernel = state.kernelImplementation;
  let hint: string;
  switch (state.reason) {
    case 'frontend':
      hint = trans.__(
        'This JupyterLab cannot talk to kernel subshells (JupyterLab 4.4 and later can), so the kernel handles the panel between cells: the live view starts when the cell ends.'
      );
      break;
    case 'disabled':
      hint = trans.__(
        'Comms over kernel subshells are turned off (Settings → Kernel → commsOverSubshells), so the kernel handles the panel between cells: the live view starts when the cell ends.'
      );
      break;
    case 'no_answer':
      hint = trans.__(
        "The kernel's control channel did not answer, so the panel waits on the main shell, between cells: the live view starts when the cell ends."
      );
      break;
    default:
      // ipykernel answers kernel_info as `ipython` (with IPython's version, not its own); the
      // one without subshells is ipykernel 6 or older (7 has them).
      if (kernel === 'ipython') {
        hint = trans.__(
          'This kernel (ipykernel 6 or older) has no subshells, so it handles the panel between cells: the live view starts when the cell ends.'
        );
      } else if (kernel === null) {
        hint = trans.__(
          'This kernel has no subshells, so it handles the panel between cells: the live view starts when the cell ends.'
        );
      } else {
        hint = trans.__(
          'This kernel (%1) has no subshells, so it handles the panel between cells: the live view starts when the cell ends.',
          kernel
        );
      }
  }
  return { title, hint };
}
