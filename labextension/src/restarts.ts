/**
 * Restarts this browser saw, kept for a page reload (issue 19, defect 8). The kernel cannot
 * tell a restart from a first start, and a reloaded page meets the restarted kernel as if it
 * had always been there: without this the restart mark and "restarted 14:02:11" were lost.
 * Kept per notebook, with the new kernel's pid: a later kernel (another pid) is not marked.
 */

/** What is kept of one restart. */
export interface IRestart {
  /** The new kernel's pid. */
  pid: number;
  /** The restart mark's time (kernel clock, epoch seconds). */
  ts: number;
  /** When this page saw it (ms since the epoch). */
  at: number;
}

/** The part of `Storage` used (jest passes a plain one). */
export interface IRestartStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/** How many notebooks' last restart are kept. */
const KEEP = 20;

/** Each notebook's last restart, in a browser storage (window.localStorage). */
export class RestartMemory {
  constructor(
    private readonly _storage: IRestartStorage | null,
    private readonly _key = 'kerasmagic:restarts'
  ) {}

  /** Remember `restart` of the notebook at `path`. */
  remember(path: string, restart: IRestart): void {
    const known = this._read().filter(([p]) => p !== path);
    known.push([path, restart]);
    try {
      this._storage?.setItem(this._key, JSON.stringify(known.slice(-KEEP)));
    } catch {
      // A full or forbidden storage: the restart is shown now, only not after a reload.
    }
  }

  /** The restart remembered for `path` whose new kernel is `pid`, else null. */
  recall(path: string, pid: number): IRestart | null {
    const found = this._read().find(([p, r]) => p === path && r.pid === pid);
    return found ? found[1] : null;
  }

  private _read(): Array<[string, IRestart]> {
    let parsed: unknown;
    try {
      parsed = JSON.parse(this._storage?.getItem(this._key) ?? '[]');
    } catch {
      return [];
    }
    if (!Array.isArray(parsed)) {
      return [];
    }
    return parsed.filter(
      (entry): entry is [string, IRestart] =>
        Array.isArray(entry) &&
        typeof entry[0] === 'string' &&
        typeof entry[1]?.pid === 'number' &&
        typeof entry[1]?.ts === 'number' &&
        typeof entry[1]?.at === 'number'
    );
  }
}
