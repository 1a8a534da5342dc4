/**
 * The panel's empty states, one per reason there is no data (the transport's state): no
 * kernel, connecting, waiting for a running cell, restarting, not loaded (with its Load
 * button and the auto-load choice) and a protocol mismatch.
 */

import { el } from './dom';
import { PROTOCOL_VERSION } from './protocol';
import { IWording } from './timeline';
import { ConnectionState } from './connectionstate';
import { waitingNotice } from './waiting';

const LOAD_LINE = '%load_ext kerasmagic';

export namespace NoticeSection {
  export interface IOptions {
    trans: IWording;
    /** Load kerasmagic in the followed kernel; resolves with its error, null when it loaded. */
    load: () => Promise<string | null>;
    /** Load it by itself in new kernels of this notebook path, or stop (settings). */
    saveAutoload?: (path: string, on: boolean) => void;
    /** The load failed: the panel draws the notice again with the error. */
    onLoadError: () => void;
  }

  /** What the not-loaded notice needs of the followed notebook. */
  export interface IContext {
    /** Whether the panel shows the kernel's last view meanwhile (no "Connecting…" over it). */
    showsLastView: boolean;
    runningCell: number | boolean;
    notebookPath: string;
    autoloads: boolean;
  }
}

/** The notice above the panel's body. */
export class NoticeSection {
  constructor(private readonly _options: NoticeSection.IOptions) {
    this.node = el('div', 'jp-KerasMagic-notice');
  }

  readonly node: HTMLElement;

  /** Why "Load kerasmagic" failed, shown until it loads. */
  loadError: string | null = null;

  render(state: ConnectionState, context: NoticeSection.IContext): void {
    const trans = this._options.trans;
    const notice = this.node;
    notice.textContent = '';
    if (state.kind === 'connected') {
      this.loadError = null;
    }
    notice.hidden =
      state.kind === 'connected' ||
      (state.kind === 'connecting' && context.showsLastView);
    delete notice.dataset.waitingFor;
    switch (state.kind) {
      case 'no_kernel':
        this._say(
          trans.__('No kernel'),
          trans.__(
            'Open a notebook with a running Python kernel; the sidebar follows the active notebook.'
          )
        );
        break;
      case 'connecting':
        this._say(
          trans.__('Connecting…'),
          context.runningCell === false
            ? trans.__('Waiting for the kernel to answer.')
            : trans.__(
                'Waiting for the kernel to answer (it answers after the running cell).'
              )
        );
        break;
      case 'waiting': {
        const { title, hint } = waitingNotice(state, trans);
        this._say(title, hint);
        // The browser tests read which cell the panel waits for.
        notice.dataset.waitingFor =
          state.executionCount === null ? '' : String(state.executionCount);
        break;
      }
      case 'restarting':
        this._say(
          trans.__('The kernel is restarting'),
          trans.__(
            'The sidebar reconnects when it is back; load the extension again after a restart.'
          )
        );
        break;
      case 'not_loaded':
        this._notLoaded(context);
        break;
      case 'mismatch':
        this._say(
          trans.__(
            'This kernel speaks another version of the kerasmagic protocol'
          ),
          state.message ||
            trans.__(
              'Kernel protocol %1, sidebar protocol %2: upgrade the older side (pip install -U kerasmagic), restart the kernel and reload the page.',
              state.kernelVersion,
              PROTOCOL_VERSION
            )
        );
        break;
    }
  }

  private _say(title: string, hint: string, code?: string): void {
    this.node.appendChild(el('p', 'jp-KerasMagic-noticeTitle', title));
    this.node.appendChild(el('p', 'jp-KerasMagic-noticeHint', hint));
    if (code) {
      this.node.appendChild(el('code', 'jp-KerasMagic-code', code));
    }
  }

  /** How to load it: the button, the line to type, and the auto-load choice. */
  private _notLoaded(context: NoticeSection.IContext): void {
    const trans = this._options.trans;
    this._say(
      trans.__('kerasmagic is not loaded in this kernel'),
      trans.__(
        'Load it here, or run this line in a cell of the notebook; the sidebar attaches as soon as it has run:'
      ),
      LOAD_LINE
    );
    const load = el(
      'button',
      'jp-KerasMagic-loadButton',
      trans.__('Load kerasmagic')
    );
    load.addEventListener('click', () => {
      load.disabled = true;
      void this._options.load().then(error => {
        load.disabled = false;
        if (error) {
          this.loadError = error;
          this._options.onLoadError();
        }
      });
    });
    this.node.appendChild(load);
    const path = context.notebookPath;
    const saveAutoload = this._options.saveAutoload;
    if (path && saveAutoload) {
      const label = el('label', 'jp-KerasMagic-autoload');
      const box = document.createElement('input');
      box.type = 'checkbox';
      box.checked = context.autoloads;
      box.addEventListener('change', () => {
        saveAutoload(path, box.checked);
        if (box.checked) {
          load.click();
        }
      });
      label.append(
        box,
        document.createTextNode(
          ' ' + trans.__("Load it by itself in this notebook's new kernels")
        )
      );
      this.node.appendChild(label);
    }
    if (this.loadError) {
      this.node.appendChild(
        el(
          'p',
          'jp-KerasMagic-noticeHint jp-KerasMagic-loadError',
          trans.__('It did not load: %1', this.loadError)
        )
      );
    }
  }
}
