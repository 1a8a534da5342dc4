/**
 * Isolated jobs as the panel lists them: the kernel's `isolated_*` messages folded into one
 * table (running jobs first, then the recent ones), with elapsed times that tick in the
 * browser's clock. No DOM here, so jest tests it directly.
 */

import { formatBytes, formatSeconds } from './format';
import { formatClock } from './chartgeometry';
import { IIsolatedJob, isNumber, IsolatedMessage } from './protocol';

/** What the panel shows for a job's `status`; each has a colour and a word. */
export type JobState =
  | 'running'
  | 'done'
  | 'failed'
  | 'timeout'
  | 'cancelled'
  | 'interrupted'
  | 'other';

/** The panel's state for a kernel `status` (`crash` and `out_of_memory` read as failed; unknown ones as other). */
export function jobState(status: string): JobState {
  switch (status) {
    case 'running':
      return 'running';
    case 'ok':
      return 'done';
    case 'error':
    case 'crash':
    case 'out_of_memory': // its error says "out of memory at X of its Y limit"
      return 'failed';
    case 'timeout':
      return 'timeout';
    case 'cancelled':
      return 'cancelled';
    case 'interrupted':
      return 'interrupted';
    default:
      return 'other';
  }
}

/** A decorative mark per state (the word next to it is what a screen reader reads). */
export const STATE_MARK: { [state in JobState]: string } = {
  running: '▶',
  done: '✓',
  failed: '✗',
  timeout: '⧖',
  cancelled: '–',
  interrupted: '■',
  other: '?'
};

/** One row of the list, as of `nowMs`. */
export interface IJobRow {
  job: IIsolatedJob;
  state: JobState;
  running: boolean;
  /** Seconds since it started (running) or its wall time (finished). */
  elapsedS: number;
  /** The latest sample's RSS of a running job, null before the first one. */
  rssBytes: number | null;
}

export interface IJobCounts {
  running: number;
  done: number;
  failed: number;
  other: number;
}

interface IEntry {
  job: IIsolatedJob;
  /** Running: seconds elapsed at `anchorMs` (kernel clock difference, so no clock skew). */
  elapsedS: number;
  anchorMs: number;
  rssBytes: number | null;
  /** Arrival order of finished jobs: the newest finished has the largest. */
  finishedSeq: number;
}

/**
 * The jobs of one kernel. `apply` takes every `isolated_*` message; `rows` lists them.
 *
 * Example: `table.apply(startedMessage, Date.now())` then `table.rows(Date.now())[0].state`
 * is `'running'`.
 */
export class JobTable {
  /** @param keepFinished finished jobs kept (the kernel keeps 20 too). */
  constructor(readonly keepFinished = 20) {}

  /** Bumped on every change of the list (not on the clock's ticks). */
  get version(): number {
    return this._version;
  }

  get size(): number {
    return this._entries.size;
  }

  get runningCount(): number {
    let count = 0;
    this._entries.forEach(entry => {
      if (entry.job.status === 'running') {
        count += 1;
      }
    });
    return count;
  }

  /** Forget every job (another kernel, or a new comm that will send `isolated_jobs`). */
  clear(): void {
    if (this._entries.size) {
      this._entries.clear();
      this._version += 1;
    }
  }

  /** Fold one message in; returns whether the list changed. */
  apply(message: IsolatedMessage, nowMs: number): boolean {
    switch (message.method) {
      case 'isolated_jobs': {
        this._entries.clear();
        // Running jobs first (oldest first), then finished ones, newest first.
        const finished = message.jobs.filter(j => j.status !== 'running');
        for (const job of message.jobs) {
          if (job.status === 'running') {
            this._put(job, message.ts, nowMs, 0);
          }
        }
        for (let i = finished.length - 1; i >= 0; i--) {
          this._put(finished[i], message.ts, nowMs, ++this._seq);
        }
        this._trim();
        break;
      }
      case 'isolated_started':
        this._put(message.job, message.ts, nowMs, 0);
        break;
      case 'isolated_done':
        this._entries.delete(message.job.job_id);
        this._put(message.job, message.ts, nowMs, ++this._seq);
        this._trim();
        break;
      case 'isolated_sample': {
        const entry = this._entries.get(message.job_id);
        if (!entry || entry.job.status !== 'running') {
          return false; // over already, or from before this sidebar's snapshot
        }
        entry.job = {
          ...entry.job,
          rss_peak_bytes: message.rss_peak_bytes,
          gpu_peak_bytes: message.gpu_peak_bytes
        };
        // Optional (1.4): a sample without them keeps what an earlier one said.
        if (message.torch_peak_bytes !== undefined) {
          entry.job.torch_peak_bytes = message.torch_peak_bytes;
        }
        if (message.jax_peak_bytes !== undefined) {
          entry.job.jax_peak_bytes = message.jax_peak_bytes;
        }
        entry.rssBytes = message.rss_bytes;
        break;
      }
      default:
        return false;
    }
    this._version += 1;
    return true;
  }

  /** Running jobs (oldest start first), then finished ones (last finished first). */
  rows(nowMs: number): IJobRow[] {
    const entries = Array.from(this._entries.values());
    const running = entries
      .filter(e => e.job.status === 'running')
      .sort((a, b) => a.job.started_ts - b.job.started_ts);
    const finished = entries
      .filter(e => e.job.status !== 'running')
      .sort((a, b) => b.finishedSeq - a.finishedSeq);
    return [...running, ...finished].map(entry => this._row(entry, nowMs));
  }

  /** Seconds a job has run as of `nowMs` (its wall time once over), null if unknown. */
  elapsed(jobId: string, nowMs: number): number | null {
    const entry = this._entries.get(jobId);
    return entry ? this._row(entry, nowMs).elapsedS : null;
  }

  private _row(entry: IEntry, nowMs: number): IJobRow {
    const running = entry.job.status === 'running';
    return {
      job: entry.job,
      state: jobState(entry.job.status),
      running,
      elapsedS: running
        ? Math.max(0, entry.elapsedS + (nowMs - entry.anchorMs) / 1000)
        : entry.elapsedS,
      rssBytes: running ? entry.rssBytes : null
    };
  }

  private _put(
    job: IIsolatedJob,
    ts: number,
    nowMs: number,
    finishedSeq: number
  ): void {
    const running = job.status === 'running';
    const previous = this._entries.get(job.job_id);
    this._entries.set(job.job_id, {
      job,
      elapsedS: running
        ? Math.max(0, ts - job.started_ts)
        : (job.wall_s ?? Math.max(0, ts - job.started_ts)),
      anchorMs: nowMs,
      rssBytes: previous?.rssBytes ?? null,
      finishedSeq
    });
  }

  /** Drop the oldest finished jobs beyond `keepFinished`. */
  private _trim(): void {
    const finished = Array.from(this._entries.values())
      .filter(e => e.job.status !== 'running')
      .sort((a, b) => a.finishedSeq - b.finishedSeq);
    for (let i = 0; i < finished.length - this.keepFinished; i++) {
      this._entries.delete(finished[i].job.job_id);
    }
  }

  private _entries = new Map<string, IEntry>();
  private _seq = 0;
  private _version = 0;
}

/** How many jobs are in each group (for the section's title line). */
export function countJobs(rows: IJobRow[]): IJobCounts {
  const counts: IJobCounts = { running: 0, done: 0, failed: 0, other: 0 };
  for (const row of rows) {
    if (row.state === 'running') {
      counts.running += 1;
    } else if (row.state === 'done') {
      counts.done += 1;
    } else if (row.state === 'failed' || row.state === 'timeout') {
      counts.failed += 1;
    } else {
      counts.other += 1;
    }
  }
  return counts;
}

/**
 * Where a job ran: `thisMachine` for the local pool, else the Ray node's hostname and IP
 * (`gpu-node-2 (10.0.0.12)`), or `cluster` when the node is not known yet.
 */
export function whereText(
  job: IIsolatedJob,
  thisMachine: string,
  cluster: string
): string {
  const node = job.node;
  if (!node) {
    return job.on === 'local' ? thisMachine : cluster;
  }
  if (node.hostname && node.ip && node.hostname !== node.ip) {
    return `${node.hostname} (${node.ip})`;
  }
  return node.hostname || node.ip || cluster;
}

/**
 * An elapsed time: whole seconds while it ticks (`12 s`, `2 min 5 s`), the measured wall
 * time once over (`3.2 s`, `850 ms`).
 */
export function formatElapsed(seconds: number, running: boolean): string {
  if (!running) {
    return formatSeconds(seconds);
  }
  const whole = Math.floor(Math.max(0, seconds));
  return whole < 60 ? `${whole} s` : formatSeconds(whole);
}

/** The part of a `TranslationBundle` the wording needs (jest passes a plain one). */
interface IWording {
  __(msgid: string, ...args: any[]): string;
}

/**
 * The latest `isolated_map`'s counts, for the section's title: the map of the first row that
 * carries them (running jobs come first, then the newest finished), or null when no row does.
 * Example: `Map: 7/10 done, 1 running, 0 failed, 2 left, about 12 s left`.
 */
export function mapProgressText(
  rows: IJobRow[],
  trans: IWording
): string | null {
  const progress = rows.find(row => row.job.map_progress)?.job.map_progress;
  if (!progress) {
    return null;
  }
  const counts = trans.__(
    'Map: %1/%2 done, %3 running, %4 failed, %5 left',
    progress.done,
    progress.total,
    progress.running,
    progress.failed,
    progress.left
  );
  if (progress.eta_s === null || !(progress.left || progress.running)) {
    return counts;
  }
  return trans.__(
    '%1, about %2 left',
    counts,
    formatElapsed(progress.eta_s, true)
  );
}

/** A job row's GPU figure: its text, and whose number it is (the title). */
export interface IJobGpu {
  text: string;
  title: string;
}

/**
 * The GPU figure of a job row. NVML's peak counts the whole job process (CUDA context and
 * libraries too) but is null where NVML cannot see the worker (in a container its pid is not
 * the host's); the allocators' peaks (protocol 1.4) are exact but leave the context out. So:
 * NVML's number with the allocators' beside it, or the allocators' alone, named, where NVML
 * has none; a dash where nothing was read.
 */
export function jobGpu(job: IIsolatedJob, trans: IWording): IJobGpu {
  const allocators: Array<[string, number, string]> = [];
  if (typeof job.torch_peak_bytes === 'number') {
    allocators.push([
      'torch',
      job.torch_peak_bytes,
      trans.__(
        "torch: the worker's allocator peak (max_memory_allocated), exact"
      )
    ]);
  }
  if (typeof job.jax_peak_bytes === 'number') {
    allocators.push([
      'JAX',
      job.jax_peak_bytes,
      trans.__("JAX: the worker's allocator peak (peak_bytes_in_use), exact")
    ]);
  }
  const nvml = trans.__(
    "the job process's GPU memory per NVML, each device's peak, summed"
  );
  const whose = allocators.map(([, , title]) => title);
  if (typeof job.gpu_peak_bytes === 'number') {
    if (!allocators.length) {
      return {
        text: trans.__('GPU peak %1', formatBytes(job.gpu_peak_bytes)),
        title: nvml
      };
    }
    return {
      text: trans.__(
        'GPU peak %1 (%2)',
        formatBytes(job.gpu_peak_bytes),
        allocators
          .map(([name, bytes]) => `${name} ${formatBytes(bytes)}`)
          .join(', ')
      ),
      title: [
        trans.__('%1, the CUDA context and libraries included', nvml),
        ...whose
      ].join('\n')
    };
  }
  if (allocators.length) {
    return {
      text: trans.__(
        'GPU peak %1',
        allocators
          .map(([name, bytes]) => `${formatBytes(bytes)} (${name})`)
          .join(', ')
      ),
      title: [
        trans.__(
          'NVML has no number for the job process (in a container it cannot see the worker)'
        ),
        ...whose,
        trans.__('the CUDA context and libraries are not in it')
      ].join('\n')
    };
  }
  return { text: trans.__('GPU peak %1', '–'), title: nvml };
}

/**
 * Whether a job ran in the pool's warm spare (issue 32): `warm spare`, or the kernel's reason
 * for a cold fork; '' for a kernel that does not say.
 */
export function spareText(job: IIsolatedJob, trans: IWording): string {
  if (!job.spare) {
    return '';
  }
  return job.spare === 'taken'
    ? trans.__('in the warm spare')
    : trans.__('cold fork: %1', job.spare);
}

/**
 * The pool's warm spares as the newest job that lists them ended, one line each, with what
 * each costs while it waits and when that was known (the kernel says no more until the next
 * job ends, and a spare may be gone since): `Warm spare pid 43121 (GPU 0), ready for the next
 * job: RSS 304 MiB, GPU 538 MiB, as run_isolated(fit) ended at 14:02:07`.
 */
export function sparesLines(rows: IJobRow[], trans: IWording): string[] {
  const row = rows.find(row => row.job.spares);
  if (!row) {
    return [];
  }
  const { job } = row;
  const ended = isNumber(job.wall_s)
    ? trans.__(
        ', as %1 ended at %2',
        job.label,
        formatClock(job.started_ts + job.wall_s)
      )
    : trans.__(', as %1 ended', job.label);
  return (job.spares ?? []).map(spare => {
    const where =
      spare.device === null || spare.device === undefined
        ? ''
        : trans.__(' (GPU %1)', spare.device);
    const state =
      spare.state === 'ready'
        ? trans.__('ready for the next job')
        : trans.__('warming up');
    const costs = [
      typeof spare.rss_bytes === 'number'
        ? trans.__('RSS %1', formatBytes(spare.rss_bytes))
        : '',
      typeof spare.gpu_bytes === 'number' && spare.gpu_bytes > 0
        ? trans.__('GPU %1', formatBytes(spare.gpu_bytes))
        : ''
    ].filter(Boolean);
    const cost = costs.length ? `: ${costs.join(', ')}` : '';
    return trans.__(
      'Warm spare pid %1%2, %3%4%5',
      spare.pid,
      where,
      state,
      cost,
      ended
    );
  });
}
