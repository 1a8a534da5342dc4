/**
 * The `kerasmagic.live` wire protocol, frontend side. Its one definition is the JSON Schema
 * kerasmagic/live/protocol.schema.json: the types come from it (protocol.generated.ts), and
 * the JSON fixtures in tests/protocol_fixtures/, checked against the schema by the Python
 * tests, are checked against `validate` here, so the guards cannot drift from it.
 */

export const TARGET_NAME = 'kerasmagic.live';
/** Bumped independently of the package version: major = incompatible, minor = additive. */
export const PROTOCOL_VERSION = '1.7.0';
export const MIN_INTERVAL_S = 0.1;
export const MAX_INTERVAL_S = 60;

// The messages' types are generated from the schema, kerasmagic/live/protocol.schema.json
// (`jlpm gen:protocol`); the guards below hold the wire to the same schema (the fixtures).
export type {
  FrontendMessage,
  ICellFigures,
  ICellGrowth,
  ICellRunData,
  ICellRunMessage,
  ICellSummary,
  IClearResult,
  IDeviceAllocator,
  IErrorMessage,
  IEvent,
  IEvidence,
  IFacts,
  IGpuContext,
  IGpuDevice,
  IHello,
  IHistory,
  IHostMemory,
  IIsolatedDone,
  IIsolatedJob,
  IIsolatedJobs,
  IIsolatedSample,
  IIsolatedStarted,
  IJaxAllocator,
  IJaxDevice,
  IJobNode,
  ILiveModel,
  IMapProgress,
  IMarkData,
  IMemoryLimit,
  IGuardState,
  IOneRun,
  IPostmortem,
  IProcessTree,
  IProof,
  IRetained,
  ISample,
  ISpare,
  ITfAllocator,
  ITorchAllocator,
  ITorchDevice,
  IUnavailable,
  KernelMessage,
  MaybeNumber
} from './protocol.generated';

import type {
  FrontendMessage,
  IIsolatedDone,
  IIsolatedJobs,
  IIsolatedSample,
  IIsolatedStarted,
  IUnavailable,
  KernelMessage
} from './protocol.generated';

/** Why a value is missing: `not_installed`, `not_imported`, ... (a newer kernel may add others). */
export type UnavailableReason = IUnavailable['reason'];

export type IsolatedMessage =
  IIsolatedStarted | IIsolatedSample | IIsolatedDone | IIsolatedJobs;

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
    numberOrUnavailable(v.children_pss_bytes) &&
    // Optional, later 1.7 kernels.
    (v.rss_bytes === undefined || isNumber(v.rss_bytes)) &&
    (v.period_s === undefined || isNumber(v.period_s)) &&
    (v.stale === undefined || typeof v.stale === 'boolean'));

/** A sample's `gpu_context` (since 1.7): NVML's figure for the kernel less the pools. */
const gpuContext: Check = v =>
  isObject(v) &&
  isNumber(v.context_bytes) &&
  typeof v.upper_bound === 'boolean' &&
  Array.isArray(v.pools) &&
  v.pools.every(isString);

/** A sample's `memory_limit` (since 1.7): the limit, what counts against it and the guard. */
const memoryLimit: Check = v =>
  isUnavailable(v) ||
  (isObject(v) &&
    ['limit_bytes', 'used_bytes', 'headroom_bytes', 'used_pct'].every(k =>
      isNumber(v[k])
    ) &&
    isString(v.source) &&
    isObject(v.guard) &&
    isBool(v.guard.enabled) &&
    ['warn_pct', 'stop_pct', 'warnings', 'stops'].every(k =>
      isNumber((v.guard as { [key: string]: unknown })[k])
    ));

/** A count: an integer, never negative. */
const count: Check = v => Number.isInteger(v) && (v as number) >= 0;

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
    // since 1.5: interval_s; since 1.6: process_tree; since 1.7: gpu_context, memory_limit and
    // (later 1.7 kernels) custom_gradient_entries.
    optional: {
      cpu_pct: numberOrUnavailable,
      host,
      torch,
      jax,
      interval_s: isNumber,
      process_tree: processTree,
      gpu_context: gpuContext,
      memory_limit: memoryLimit,
      custom_gradient_entries: count
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
    optional: {
      custom_gradients_pin_graphs: (value: unknown) =>
        value === null || typeof value === 'boolean',
      cell_ended_ts: isNumber
    }
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

/** The fields the guards check per method (required and optional), for the schema's test. */
export function checkedFields(direction: Direction, method: string): string[] {
  const spec = (direction === 'to_kernel' ? TO_KERNEL : TO_FRONTEND)[method];
  return [...Object.keys(spec.required), ...Object.keys(spec.optional)];
}

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
