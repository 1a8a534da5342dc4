/**
 * The memory limit and the guard as the sidebar's own rows (issue 33, item 7): a kernel at
 * 96 % of a 1.5 GiB cgroup must not show only "Host memory 19 GiB free". Every sample of a
 * 1.7 kernel carries `memory_limit` (kerasmagic/guard.py `limit_state`): the limit that bites
 * (the user's, KERASMAGIC_MEMORY_LIMIT, the cgroup's, or the host's), what counts against it,
 * the headroom, and the guard's levels and last warning or stop; `guard_warning` and
 * `guard_stop` also come as events, which the timeline marks. The wording has no DOM, so jest
 * tests it; `LimitSection` only draws it, with the same words `%tf_mem --live` uses.
 */

import { el } from './dom';
import { formatBytes } from './format';
import type { IGuardState, IMemoryLimit, ISample } from './protocol';
import { isUnavailable } from './protocol';
import { formatClock, IWording } from './chartgeometry';

/** Where the limit stands: under the guard's warning level, past it, or past its stop level. */
export type LimitLevel = 'ok' | 'warn' | 'stop';

/** The limit's rows, worded. */
export interface ILimitView {
  /** `Memory limit 1.44 GiB of 1.50 GiB (96 %)` */
  headline: string;
  /** `61.4 MiB headroom · the guard warns at 85 %, stops at 95 %` */
  headroom: string;
  /** Whose limit it is, in the kernel's words: `cgroup: /sys/fs/cgroup/...`. */
  where: string;
  /** The guard's last warning or stop, with its cell and time; '' when it has done neither. */
  guard: string;
  level: LimitLevel;
  usedPct: number;
  /** The limit is the host's own memory (no cgroup, no user limit): a quieter row. */
  hostOnly: boolean;
  /**
   * Nothing to add to the Host memory tile (the host's own memory, below the guard's warning,
   * the guard silent so far): only the guard's line is shown,
   * `Limit: the machine's memory; the guard warns at 85 %, stops at 95 %`.
   */
  quiet: boolean;
  /** The quiet form's one line. */
  guardOnly: string;
}

/** The sample's limit, or null (an older kernel, or one that could not read it). */
export function memoryLimitOf(sample: ISample | null): IMemoryLimit | null {
  const limit = sample?.memory_limit;
  if (!limit || isUnavailable(limit)) {
    return null;
  }
  return limit;
}

/** The level by the guard's own thresholds (its defaults where it is off). */
export function limitLevel(limit: IMemoryLimit): LimitLevel {
  const { warn_pct: warn, stop_pct: stop } = limit.guard;
  if (limit.used_pct >= stop) {
    return 'stop';
  }
  return limit.used_pct >= warn ? 'warn' : 'ok';
}

/** Whose limit: the kernel's `where`, after the source in words. */
function sourceText(limit: IMemoryLimit, trans: IWording): string {
  switch (limit.source) {
    case 'user':
      return trans.__('your limit');
    case 'environment':
      return trans.__('KERASMAGIC_MEMORY_LIMIT');
    case 'cgroup':
      return trans.__("the container's memory cgroup");
    case 'host':
      return trans.__("the machine's memory");
    default:
      return limit.source;
  }
}

/**
 * Whose limit, once: the kernel's `where` says it for the user's, the environment's and the
 * host's (`KERASMAGIC_MEMORY_LIMIT=1GiB`); a cgroup's path is named as one.
 */
function whereText(limit: IMemoryLimit, trans: IWording): string {
  if (!limit.where) {
    return sourceText(limit, trans);
  }
  return limit.source === 'cgroup'
    ? trans.__('%1: %2', sourceText(limit, trans), limit.where)
    : limit.where;
}

/** `the guard warns at 85 %, stops at 95 %`, or that it is off. */
export function guardLevels(guard: IGuardState, trans: IWording): string {
  if (!guard.enabled) {
    return trans.__('the guard is off (%tf_mem --guard on)');
  }
  return trans.__(
    'the guard warns at %1 %, stops at %2 %',
    guard.warn_pct,
    guard.stop_pct
  );
}

/** The guard's last warning or stop: `Guard stopped cell [7] at 1.43 GiB (96 %), 02:05:47`. */
export function guardEventText(guard: IGuardState, trans: IWording): string {
  const last = guard.last_event as
    | {
        kind?: string;
        execution_count?: number | null;
        used_bytes?: number;
        used_pct?: number;
        ts?: number;
      }
    | null
    | undefined;
  if (!last || typeof last !== 'object') {
    return '';
  }
  const cell =
    typeof last.execution_count === 'number'
      ? trans.__('cell [%1]', last.execution_count)
      : trans.__('the running cell');
  const at = trans.__(
    '%1 (%2 %)',
    formatBytes(last.used_bytes ?? NaN),
    Math.round(last.used_pct ?? NaN)
  );
  const when = typeof last.ts === 'number' ? formatClock(last.ts) : '';
  return last.kind === 'guard_stop'
    ? trans.__('Guard stopped %1 at %2, %3', cell, at, when)
    : trans.__('Guard warned %1 at %2, %3', cell, at, when);
}

/**
 * The limit's rows for `sample`, or null where the kernel sent none.
 *
 * @example
 * limitView(sample, trans)?.headline;
 * // 'Memory limit: 1.44 GiB of 1.50 GiB (96 %)'
 */
export function limitView(
  sample: ISample | null,
  trans: IWording
): ILimitView | null {
  const limit = memoryLimitOf(sample);
  if (!limit) {
    return null;
  }
  const pct = Math.round(limit.used_pct);
  return {
    headline: trans.__(
      'Memory limit: %1 of %2 (%3 %)',
      formatBytes(limit.used_bytes),
      formatBytes(limit.limit_bytes),
      pct
    ),
    headroom: trans.__(
      '%1 headroom · %2',
      formatBytes(Math.max(limit.headroom_bytes, 0)),
      guardLevels(limit.guard, trans)
    ),
    where: whereText(limit, trans),
    guard: guardEventText(limit.guard, trans),
    level: limitLevel(limit),
    usedPct: limit.used_pct,
    hostOnly: limit.source === 'host',
    quiet:
      limit.source === 'host' &&
      limitLevel(limit) === 'ok' &&
      !limit.guard.last_event,
    guardOnly: trans.__(
      "Limit: the machine's memory; %1",
      guardLevels(limit.guard, trans)
    )
  };
}

/** What the timeline calls the guard's marks (their `event` kinds); null for other kinds. */
export function guardMarkText(kind: string, trans: IWording): string | null {
  switch (kind) {
    case 'guard_warning':
      return trans.__('memory guard warned');
    case 'guard_stop':
      return trans.__('memory guard stopped the cell');
    default:
      return null;
  }
}

export namespace LimitSection {
  export interface IOptions {
    trans: IWording;
  }
}

/**
 * The limit's rows, just under the headline figures: what counts against the limit and the
 * headroom, with a meter; whose limit it is; and the guard's last warning or stop. Hidden
 * for a kernel that sends no limit.
 */
export class LimitSection {
  constructor(options: LimitSection.IOptions) {
    this._trans = options.trans;
    this.node = el('div', 'jp-KerasMagic-limit');
    this.node.dataset.section = 'limit';
    this.node.setAttribute('role', 'group');
    this.node.setAttribute('aria-label', this._trans.__('Memory limit'));
    this._headline = el('div', 'jp-KerasMagic-limitHeadline');
    this._meter = el('meter', 'jp-KerasMagic-limitMeter');
    this._meter.min = 0;
    this._meter.max = 100;
    this._headroom = el('div', 'jp-KerasMagic-limitHeadroom');
    this._where = el('div', 'jp-KerasMagic-limitWhere');
    this._guard = el('div', 'jp-KerasMagic-limitGuard');
    this._guard.setAttribute('role', 'status');
    this.node.append(
      this._headline,
      this._meter,
      this._headroom,
      this._where,
      this._guard
    );
    this.node.hidden = true;
  }

  readonly node: HTMLElement;

  /** Draw the limit of `sample` (null or an older kernel's: hidden). */
  render(sample: ISample | null): void {
    const view = limitView(sample, this._trans);
    this.node.hidden = view === null;
    if (!view) {
      return;
    }
    const limit = memoryLimitOf(sample)!;
    this.node.dataset.level = view.level;
    this.node.dataset.source = limit.source;
    this.node.dataset.hostOnly = String(view.hostOnly);
    this.node.dataset.limitBytes = String(limit.limit_bytes);
    this.node.dataset.usedPct = String(limit.used_pct);
    this._headline.textContent = view.headline;
    this._meter.value = Math.min(view.usedPct, 100);
    this._meter.low = limit.guard.warn_pct;
    this._meter.high = limit.guard.stop_pct;
    this._meter.optimum = 0;
    this._meter.title = view.headline;
    this.node.dataset.quiet = String(view.quiet);
    // A host-only limit far from the guard's levels repeats the Host memory tile: one line then.
    this._headline.hidden =
      this._meter.hidden =
      this._where.hidden =
        view.quiet;
    this._headroom.textContent = view.quiet ? view.guardOnly : view.headroom;
    this._where.textContent = view.where;
    this._guard.textContent = view.guard;
    this._guard.hidden = view.guard === '';
    this._guard.dataset.kind = String(
      (limit.guard.last_event as { kind?: string } | null)?.kind ?? ''
    );
  }

  private _trans: IWording;
  private _headline: HTMLElement;
  private _meter: HTMLMeterElement;
  private _headroom: HTMLElement;
  private _where: HTMLElement;
  private _guard: HTMLElement;
}
