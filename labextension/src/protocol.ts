/**
 * The `kerasmagic.live` wire protocol, frontend side. The contract is docs/reference/protocol.md;
 * the JSON fixtures in tests/protocol_fixtures/ are checked against `validate` here and
 * against kerasmagic/live/protocol.py, so the two sides cannot drift.
 */

export const TARGET_NAME = 'kerasmagic.live';
/** Bumped independently of the package version: major = incompatible, minor = additive. */
export const PROTOCOL_VERSION = '1.6.0';
export const MIN_INTERVAL_S = 0.1;
export const MAX_INTERVAL_S = 60;

export type UnavailableReason =
  | 'not_installed'
  | 'not_imported'
  | 'not_started'
  | 'no_device'
  | 'not_supported'
  | 'error'
  | string;

export interface IUnavailable {
  status: 'unavailable';
  reason: UnavailableReason;
  detail?: string;
}

export type MaybeNumber = number | IUnavailable;

export interface IDeviceAllocator {
  in_use_bytes: MaybeNumber;
  peak_bytes: MaybeNumber;
  held_unused_min_bytes: MaybeNumber;
}

export interface ITfAllocator {
  status: string;
  devices: { [device: string]: IDeviceAllocator };
}

export interface IGpuDevice {
  index: number;
  name?: string;
  used_bytes: MaybeNumber;
  total_bytes: MaybeNumber;
  process_used_bytes: MaybeNumber;
  utilisation_pct?: MaybeNumber;
}

export interface IHello {
  method: 'hello';
  protocol_version: string;
  package_version: string;
  pid: number;
  interval_s: number;
  ts: number;
}

/** Since 1.3: the machine's memory (psutil.virtual_memory), in a sample. */
export interface IHostMemory {
  total_bytes: number;
  available_bytes: number;
}

/** Since 1.4: torch's CUDA caching allocator on one device (`cuda:0`: torch's numbering). */
export interface ITorchDevice {
  allocated_bytes: number;
  reserved_bytes: number;
  peak_allocated_bytes: number;
  /** reserved − allocated: freed blocks torch keeps cached (`empty_cache()` returns them). */
  held_unused_bytes: number;
}

export interface ITorchAllocator {
  status: string;
  devices: { [device: string]: ITorchDevice };
}

/** Since 1.4: JAX's pool on one device (`memory_stats()`); null where JAX has no figure. */
export interface IJaxDevice {
  in_use_bytes: number | null;
  peak_bytes: number | null;
  pool_bytes: number | null;
  limit_bytes: number | null;
  /** pool − in use. */
  held_unused_bytes: number | null;
}

export interface IJaxAllocator {
  status: string;
  devices: { [device: string]: IJaxDevice };
  /** The XLA_PYTHON_CLIENT_* variables as set, or JAX's default (75 % of each GPU). */
  preallocation: string;
}

export interface ISample {
  method: 'sample';
  seq: number;
  ts: number;
  rss_bytes: MaybeNumber;
  tf: ITfAllocator | IUnavailable;
  gpu: Array<IGpuDevice | IUnavailable> | IUnavailable;
  sample_cost_s: number;
  /** Since 1.3: the kernel process's CPU use since the previous sample, % of one core. */
  cpu_pct?: MaybeNumber;
  /** Since 1.3. */
  host?: IHostMemory | IUnavailable;
  /** Since 1.4, only where the kernel imported torch. */
  torch?: ITorchAllocator | IUnavailable;
  /** Since 1.4, only where the kernel imported JAX. */
  jax?: IJaxAllocator | IUnavailable;
  /** Since 1.5: the interval this sample was taken at; a longer silence before it is a gap. */
  interval_s?: number;
  /** Since 1.6, while a panel looks: PSS and the child processes, read every few seconds. */
  process_tree?: IProcessTree | IUnavailable;
}

/**
 * The kernel's PSS and its child processes' memory (the isolation template, its jobs, any
 * other child), as of `ts`: what reconciles the kernel's RSS with `top` and
 * jupyter-resource-usage.
 */
export interface IProcessTree {
  ts: number;
  pss_bytes: MaybeNumber;
  children_count: number;
  children_rss_bytes: number;
  children_pss_bytes: MaybeNumber;
}

export interface ILiveModel {
  name: string;
  class?: string;
  weight_bytes: MaybeNumber;
  optimizer_bytes: MaybeNumber;
  held_by?: string[];
}

export interface IFacts {
  method: 'facts';
  ts: number;
  execution_count: number;
  tf_status: string | IUnavailable;
  keras_status: string | IUnavailable;
  graph_op_count: MaybeNumber;
  custom_gradient_entries: MaybeNumber;
  name_counters: { [name: string]: number } | IUnavailable;
  live_models: ILiveModel[] | IUnavailable;
}

export interface IEvent {
  method: 'event';
  kind: string;
  ts: number;
  payload: unknown;
  text?: string;
}

export interface IClearResult {
  method: 'clear_result';
  request_id: string;
  ok: boolean;
  ts: number;
  report: { [key: string]: unknown } | null;
  text: string;
}

export interface IErrorMessage {
  method: 'error';
  code: string;
  message: string;
  ts: number;
  request_method?: string;
}

/** A Ray node an isolated job ran on (null: this machine). */
export interface IJobNode {
  ip: string;
  hostname: string;
}

/**
 * One isolated job (`run_isolated`, `isolated_map`, `%%fresh_model --isolate`) as the panel
 * shows it. `status` is `running`, or how it ended: `ok`, `error`, `timeout`, `crash`,
 * `interrupted`, `cancelled` (a newer kernel may add others).
 */
export interface IIsolatedJob {
  job_id: string;
  label: string;
  status: string;
  on: string;
  node: IJobNode | null;
  started_ts: number;
  wall_s: number | null;
  rss_peak_bytes: number | null;
  gpu_peak_bytes: number | null;
  /** Since 1.4, only with a number: torch's `max_memory_allocated` in the worker, summed. */
  torch_peak_bytes?: number;
  /** Since 1.4, only with a number: JAX's `peak_bytes_in_use` in the worker, summed. */
  jax_peak_bytes?: number;
  error?: string;
  /** Optional: the counts of the `isolated_map` this job is an item of (its latest). */
  map_progress?: IMapProgress;
}

/** An `isolated_map`'s items: done (from its checkpoint too), running, failed, left; seconds. */
export interface IMapProgress {
  total: number;
  done: number;
  running: number;
  failed: number;
  left: number;
  elapsed_s: number;
  /** Estimated from the items finished so far; null before the first one finished. */
  eta_s: number | null;
}

/** Since 1.1: a job started. */
export interface IIsolatedStarted {
  method: 'isolated_started';
  ts: number;
  job: IIsolatedJob;
}

/** Since 1.1: a running job's memory (at most about 2 a second per job). */
export interface IIsolatedSample {
  method: 'isolated_sample';
  ts: number;
  job_id: string;
  rss_bytes: number | null;
  rss_peak_bytes: number | null;
  gpu_peak_bytes: number | null;
  torch_peak_bytes?: number;
  jax_peak_bytes?: number;
}

/** Since 1.1: a job ended. */
export interface IIsolatedDone {
  method: 'isolated_done';
  ts: number;
  job: IIsolatedJob;
}

/** Since 1.1: the running jobs and the last finished ones (on open, refresh and show). */
export interface IIsolatedJobs {
  method: 'isolated_jobs';
  ts: number;
  jobs: IIsolatedJob[];
}

/** A cell's figures: the change in RSS, TF in use, GPU (NVML), registry entries, models. */
export interface ICellFigures {
  rss_bytes: number | null;
  tf_in_use_bytes: number | null;
  gpu_bytes: number | null;
  custom_gradient_entries: number | null;
  live_models: number | null;
  [figure: string]: number | null;
}

/**
 * One cell the leak watch knows. `key` is the cell's id (JupyterLab) or a hash of its
 * source; `streak` the last runs in a row that grew (a first run never counts); `per_run`
 * the mean change over the streak (null without one); `fix` `fresh_model` or `isolate`.
 */
export interface ICellSummary {
  key: string;
  cell_id: string | null;
  execution_count: number | null;
  first_line?: string;
  runs: number;
  streak: number;
  flagged: boolean;
  growth_per_run_bytes: number | null;
  per_run: ICellFigures | null;
  last: ICellFigures;
  last_ts?: number;
  fix: string | null;
  /** What the last run left behind when worth naming on its own (the one-run rule). */
  one_run?: IOneRun | null;
  /** The fix as the kernel words it, with the names holding the memory. */
  fix_text?: string | null;
  held_by?: string[];
}

/** A single run that grew much or left live models (`cell_growth`'s `one_run`). */
export interface IOneRun {
  execution_count: number | null;
  first: boolean;
  growth_bytes: number | null;
  new_models: number;
  held_by: string[];
  imported?: string[];
}

/** Since 1.2: the leak watch, flagged cells first, then the recently run ones. */
export interface ICellGrowth {
  method: 'cell_growth';
  ts: number;
  threshold_bytes: number;
  min_runs: number;
  watched_cells: number;
  cells: ICellSummary[];
}

/**
 * Since 1.3: one run of a cell on the wire (kernel-clock seconds). `status` is `running`,
 * `ok` or `error` (a newer kernel may add others); `ended_ts` is null while it runs.
 */
export interface ICellRunData {
  execution_count: number | null;
  cell_id: string | null;
  started_ts: number;
  ended_ts: number | null;
  status: string;
  /** Since 1.5: the kernel's RSS when the cell started, and when it ended. */
  rss_start_bytes?: number | null;
  rss_end_bytes?: number | null;
  /** Since 1.5: the highest RSS during the cell; exact where the kernel's high-water mark rose. */
  peak_rss_bytes?: number | null;
  peak_exact?: boolean;
}

/** Since 1.3: a cell started (ended_ts null) or ended. */
export interface ICellRunMessage {
  method: 'cell_run';
  ts: number;
  run: ICellRunData;
}

/** Since 1.3: a moment on the timeline (`clear_tf`, `fresh_model`, ...), kernel clock. */
export interface IMarkData {
  kind: string;
  ts: number;
}

/** Since 1.5: why this notebook's previous kernel died, as this kernel's `%load_ext` found it. */
export interface IPostmortem {
  method: 'postmortem';
  ts: number;
  /** The dead kernel's last record time (same machine, same clock); null where unknown. */
  died_ts: number | null;
  execution_count: number | null;
  text: string;
}

/** Since 1.3: what the kernel kept of the last 15 minutes, once on open (after hello). */
export interface IHistory {
  method: 'history';
  ts: number;
  samples: ISample[];
  cell_runs: ICellRunData[];
  marks: IMarkData[];
}

export type IsolatedMessage =
  IIsolatedStarted | IIsolatedSample | IIsolatedDone | IIsolatedJobs;

export type KernelMessage =
  | IHello
  | ISample
  | IFacts
  | IEvent
  | IClearResult
  | IErrorMessage
  | IsolatedMessage
  | ICellGrowth
  | ICellRunMessage
  | IHistory
  | IPostmortem;

export type FrontendMessage =
  | { method: 'open'; visible?: boolean; interval_s?: number }
  | { method: 'visibility'; visible: boolean }
  | { method: 'configure'; interval_s: number }
  | { method: 'clear'; request_id: string }
  | { method: 'refresh' };

export type Direction = 'to_kernel' | 'to_frontend';

export type ValidationResult<T> =
  | { ok: true; message: T }
  | { ok: false; code: 'bad_message' | 'unknown_method'; reason: string };

type Check = (value: unknown) => boolean;

function isObject(value: unknown): value is { [key: string]: unknown } {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function isNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

export function isUnavailable(value: unknown): value is IUnavailable {
  return (
    isObject(value) &&
    value.status === 'unavailable' &&
    typeof value.reason === 'string' &&
    (value.detail === undefined || typeof value.detail === 'string')
  );
}

const numberOrUnavailable: Check = v => isNumber(v) || isUnavailable(v);
const stringOrUnavailable: Check = v =>
  typeof v === 'string' || isUnavailable(v);
const isBool: Check = v => typeof v === 'boolean';
const isString: Check = v => typeof v === 'string';
const isAny: Check = () => true;
const objectOrNull: Check = v => v === null || isObject(v);
const interval: Check = v =>
  isNumber(v) && v >= MIN_INTERVAL_S && v <= MAX_INTERVAL_S;

const tf: Check = v => {
  if (isUnavailable(v)) {
    return true;
  }
  if (!isObject(v) || !isObject(v.devices)) {
    return false;
  }
  return Object.values(v.devices).every(
    dev =>
      isObject(dev) &&
      ['in_use_bytes', 'peak_bytes', 'held_unused_min_bytes'].every(k =>
        numberOrUnavailable(dev[k])
      )
  );
};

const gpu: Check = v => {
  if (isUnavailable(v)) {
    return true;
  }
  if (!Array.isArray(v)) {
    return false;
  }
  return v.every(
    dev =>
      isUnavailable(dev) ||
      (isObject(dev) &&
        isNumber(dev.index) &&
        ['used_bytes', 'total_bytes', 'process_used_bytes'].every(k =>
          numberOrUnavailable(dev[k])
        ))
  );
};

const models: Check = v =>
  isUnavailable(v) ||
  (Array.isArray(v) &&
    v.every(
      m =>
        isObject(m) &&
        typeof m.name === 'string' &&
        numberOrUnavailable(m.weight_bytes) &&
        numberOrUnavailable(m.optimizer_bytes)
    ));

const counters: Check = v =>
  isUnavailable(v) || (isObject(v) && Object.values(v).every(isNumber));

const numberOrNull: Check = v => v === null || isNumber(v);

const node: Check = v =>
  v === null ||
  (isObject(v) && typeof v.ip === 'string' && typeof v.hostname === 'string');

const JOB_FIELDS: { [field: string]: Check } = {
  job_id: isString,
  label: isString,
  status: isString,
  on: isString,
  node,
  started_ts: isNumber,
  wall_s: numberOrNull,
  rss_peak_bytes: numberOrNull,
  gpu_peak_bytes: numberOrNull
};

const JOB_ALLOCATOR_PEAKS = ['torch_peak_bytes', 'jax_peak_bytes'];

const job: Check = v =>
  isObject(v) &&
  Object.entries(JOB_FIELDS).every(
    ([name, check]) => name in v && check(v[name])
  ) &&
  // Since 1.4, optional: the worker's allocator peaks, present only with a number.
  JOB_ALLOCATOR_PEAKS.every(
    name => v[name] === undefined || isNumber(v[name])
  ) &&
  (v.error === undefined || typeof v.error === 'string') &&
  (v.map_progress === undefined || mapProgress(v.map_progress));

const MAP_COUNTS = ['total', 'done', 'running', 'failed', 'left', 'elapsed_s'];

const mapProgress: Check = v =>
  isObject(v) &&
  MAP_COUNTS.every(name => isNumber(v[name])) &&
  numberOrNull(v.eta_s);

const jobs: Check = v => Array.isArray(v) && v.every(job);

const stringOrNull: Check = v => v === null || typeof v === 'string';

const figures: Check = v => isObject(v) && Object.values(v).every(numberOrNull);

const CELL_FIELDS: { [field: string]: Check } = {
  key: isString,
  cell_id: stringOrNull,
  execution_count: numberOrNull,
  runs: isNumber,
  streak: isNumber,
  flagged: isBool,
  growth_per_run_bytes: numberOrNull,
  per_run: v => v === null || figures(v),
  last: figures,
  fix: stringOrNull
};

const cell: Check = v =>
  isObject(v) &&
  Object.entries(CELL_FIELDS).every(
    ([name, check]) => name in v && check(v[name])
  ) &&
  (v.first_line === undefined || typeof v.first_line === 'string') &&
  (v.last_ts === undefined || isNumber(v.last_ts));

const cells: Check = v => Array.isArray(v) && v.every(cell);

const host: Check = v =>
  isUnavailable(v) ||
  (isObject(v) && isNumber(v.total_bytes) && isNumber(v.available_bytes));

/** A sample's `process_tree` (since 1.6). */
const processTree: Check = v =>
  isUnavailable(v) ||
  (isObject(v) &&
    isNumber(v.ts) &&
    isNumber(v.children_count) &&
    isNumber(v.children_rss_bytes) &&
    numberOrUnavailable(v.pss_bytes) &&
    numberOrUnavailable(v.children_pss_bytes));

/** A framework allocator's `{status, devices: {name: {field: value}}}` (since 1.4). */
function frameworkDevices(
  v: unknown,
  fields: string[],
  check: Check
): v is { [key: string]: unknown } {
  if (!isObject(v) || typeof v.status !== 'string' || !isObject(v.devices)) {
    return false;
  }
  return Object.values(v.devices).every(
    dev => isObject(dev) && fields.every(k => check(dev[k]))
  );
}

const TORCH_FIELDS = [
  'allocated_bytes',
  'reserved_bytes',
  'peak_allocated_bytes',
  'held_unused_bytes'
];
const JAX_FIELDS = [
  'in_use_bytes',
  'peak_bytes',
  'pool_bytes',
  'limit_bytes',
  'held_unused_bytes'
];

const torch: Check = v =>
  isUnavailable(v) || frameworkDevices(v, TORCH_FIELDS, isNumber);

const jax: Check = v =>
  isUnavailable(v) ||
  (frameworkDevices(v, JAX_FIELDS, numberOrNull) &&
    typeof v.preallocation === 'string');

const RUN_FIELDS: { [field: string]: Check } = {
  execution_count: numberOrNull,
  cell_id: stringOrNull,
  started_ts: isNumber,
  ended_ts: numberOrNull,
  status: isString
};

/** Since 1.5, optional: the kernel's RSS at the cell's start and end, and its peak. */
const RUN_FIGURES: { [field: string]: Check } = {
  rss_start_bytes: numberOrNull,
  rss_end_bytes: numberOrNull,
  peak_rss_bytes: numberOrNull,
  peak_exact: v => typeof v === 'boolean'
};

const run: Check = v =>
  isObject(v) &&
  Object.entries(RUN_FIELDS).every(
    ([name, check]) => name in v && check(v[name])
  ) &&
  Object.entries(RUN_FIGURES).every(
    ([name, check]) => !(name in v) || check(v[name])
  );

const runs: Check = v => Array.isArray(v) && v.every(run);

const marks: Check = v =>
  Array.isArray(v) &&
  v.every(m => isObject(m) && isString(m.kind) && isNumber(m.ts));

/** `history`'s samples: each a valid `sample` message. */
const samples: Check = v =>
  Array.isArray(v) &&
  v.every(
    s => isObject(s) && s.method === 'sample' && validate(s, 'to_frontend').ok
  );

interface IFieldSpec {
  required: { [field: string]: Check };
  optional: { [field: string]: Check };
}

const TO_KERNEL: { [method: string]: IFieldSpec } = {
  open: { required: {}, optional: { visible: isBool, interval_s: interval } },
  visibility: { required: { visible: isBool }, optional: {} },
  configure: { required: { interval_s: interval }, optional: {} },
  clear: { required: { request_id: isString }, optional: {} },
  refresh: { required: {}, optional: {} }
};

const TO_FRONTEND: { [method: string]: IFieldSpec } = {
  hello: {
    required: {
      protocol_version: isString,
      package_version: isString,
      pid: isNumber,
      interval_s: isNumber,
      ts: isNumber
    },
    optional: {}
  },
  sample: {
    required: {
      seq: isNumber,
      ts: isNumber,
      rss_bytes: numberOrUnavailable,
      tf,
      gpu,
      sample_cost_s: isNumber
    },
    // Since 1.3 (a 1.2 frontend ignores them): cpu_pct, host; since 1.4: torch, jax;
    // since 1.5: interval_s; since 1.6: process_tree.
    optional: {
      cpu_pct: numberOrUnavailable,
      host,
      torch,
      jax,
      interval_s: isNumber,
      process_tree: processTree
    }
  },
  facts: {
    required: {
      ts: isNumber,
      execution_count: isNumber,
      tf_status: stringOrUnavailable,
      keras_status: stringOrUnavailable,
      graph_op_count: numberOrUnavailable,
      custom_gradient_entries: numberOrUnavailable,
      name_counters: counters,
      live_models: models
    },
    optional: {}
  },
  event: {
    required: { kind: isString, ts: isNumber, payload: isAny },
    optional: { text: isString }
  },
  clear_result: {
    required: {
      request_id: isString,
      ok: isBool,
      ts: isNumber,
      report: objectOrNull,
      text: isString
    },
    optional: {}
  },
  error: {
    required: { code: isString, message: isString, ts: isNumber },
    optional: { request_method: isString }
  },
  isolated_started: { required: { ts: isNumber, job }, optional: {} },
  isolated_sample: {
    required: {
      ts: isNumber,
      job_id: isString,
      rss_bytes: numberOrNull,
      rss_peak_bytes: numberOrNull,
      gpu_peak_bytes: numberOrNull
    },
    // Since 1.4.
    optional: { torch_peak_bytes: isNumber, jax_peak_bytes: isNumber }
  },
  isolated_done: { required: { ts: isNumber, job }, optional: {} },
  isolated_jobs: { required: { ts: isNumber, jobs }, optional: {} },
  cell_growth: {
    required: {
      ts: isNumber,
      threshold_bytes: isNumber,
      min_runs: isNumber,
      watched_cells: isNumber,
      cells
    },
    optional: {}
  },
  // Since 1.3, only to a frontend that opened with 1.3 or later.
  cell_run: { required: { ts: isNumber, run }, optional: {} },
  history: {
    required: { ts: isNumber, samples, cell_runs: runs, marks },
    optional: {}
  },
  // Since 1.5.
  postmortem: {
    required: {
      ts: isNumber,
      died_ts: numberOrNull,
      execution_count: numberOrNull,
      text: isString
    },
    optional: {}
  }
};

export const METHODS: { [direction in Direction]: string[] } = {
  to_kernel: Object.keys(TO_KERNEL),
  to_frontend: Object.keys(TO_FRONTEND)
};

/**
 * Check a message against the protocol. Unknown extra fields are allowed (a newer minor
 * version may add them).
 *
 * Example: `validate({method: 'sample', ...}, 'to_frontend')` → `{ok: true, message}`.
 */
export function validate(
  data: unknown,
  direction: 'to_frontend'
): ValidationResult<KernelMessage>;
export function validate(
  data: unknown,
  direction: 'to_kernel'
): ValidationResult<FrontendMessage>;
export function validate(
  data: unknown,
  direction: Direction
): ValidationResult<KernelMessage | FrontendMessage>;
export function validate(
  data: unknown,
  direction: Direction
): ValidationResult<KernelMessage | FrontendMessage> {
  const specs = direction === 'to_kernel' ? TO_KERNEL : TO_FRONTEND;
  if (!isObject(data)) {
    return {
      ok: false,
      code: 'bad_message',
      reason: 'a message must be a JSON object'
    };
  }
  const method = data.method;
  if (typeof method !== 'string') {
    return {
      ok: false,
      code: 'bad_message',
      reason: "a message needs a string 'method'"
    };
  }
  if (!Object.prototype.hasOwnProperty.call(specs, method)) {
    return {
      ok: false,
      code: 'unknown_method',
      reason: `unknown method '${method}'`
    };
  }
  const spec = specs[method];
  for (const [name, check] of Object.entries(spec.required)) {
    if (!(name in data)) {
      return {
        ok: false,
        code: 'bad_message',
        reason: `${method}: missing field '${name}'`
      };
    }
    if (!check(data[name])) {
      return {
        ok: false,
        code: 'bad_message',
        reason: `${method}: bad value for '${name}'`
      };
    }
  }
  for (const [name, check] of Object.entries(spec.optional)) {
    if (name in data && !check(data[name])) {
      return {
        ok: false,
        code: 'bad_message',
        reason: `${method}: bad value for '${name}'`
      };
    }
  }
  return {
    ok: true,
    message: data as unknown as KernelMessage | FrontendMessage
  };
}

/** The major part of a `MAJOR.MINOR.PATCH` version, or null when it is not one. */
export function majorOf(version: unknown): number | null {
  if (typeof version !== 'string') {
    return null;
  }
  const head = version.split('.', 1)[0];
  return /^\d+$/.test(head) ? parseInt(head, 10) : null;
}

/** The minor part of a `MAJOR.MINOR.PATCH` version, or null when it is not one. */
export function minorOf(version: unknown): number | null {
  if (typeof version !== 'string') {
    return null;
  }
  const second = version.split('.')[1];
  return second !== undefined && /^\d+$/.test(second)
    ? parseInt(second, 10)
    : null;
}

/** Whether a peer speaking `version` can talk to us (same major). */
export function isCompatible(version: unknown): boolean {
  const major = majorOf(version);
  return major !== null && major === majorOf(PROTOCOL_VERSION);
}
