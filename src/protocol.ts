/**
 * The `kerasmagic.live` wire protocol, frontend side. The contract is docs/protocol.md;
 * the JSON fixtures in tests/protocol_fixtures/ are checked against `validate` here and
 * against kerasmagic/live/protocol.py, so the two sides cannot drift.
 */

export const TARGET_NAME = 'kerasmagic.live';
/** Bumped independently of the package version: major = incompatible, minor = additive. */
export const PROTOCOL_VERSION = '1.0.0';
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

export interface ISample {
  method: 'sample';
  seq: number;
  ts: number;
  rss_bytes: MaybeNumber;
  tf: ITfAllocator | IUnavailable;
  gpu: Array<IGpuDevice | IUnavailable> | IUnavailable;
  sample_cost_s: number;
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

export type KernelMessage = IHello | ISample | IFacts | IEvent | IClearResult | IErrorMessage;

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
const stringOrUnavailable: Check = v => typeof v === 'string' || isUnavailable(v);
const isBool: Check = v => typeof v === 'boolean';
const isString: Check = v => typeof v === 'string';
const isAny: Check = () => true;
const objectOrNull: Check = v => v === null || isObject(v);
const interval: Check = v => isNumber(v) && v >= MIN_INTERVAL_S && v <= MAX_INTERVAL_S;

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
    optional: {}
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
  event: { required: { kind: isString, ts: isNumber, payload: isAny }, optional: { text: isString } },
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
export function validate(data: unknown, direction: 'to_frontend'): ValidationResult<KernelMessage>;
export function validate(data: unknown, direction: 'to_kernel'): ValidationResult<FrontendMessage>;
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
    return { ok: false, code: 'bad_message', reason: 'a message must be a JSON object' };
  }
  const method = data.method;
  if (typeof method !== 'string') {
    return { ok: false, code: 'bad_message', reason: "a message needs a string 'method'" };
  }
  if (!Object.prototype.hasOwnProperty.call(specs, method)) {
    return { ok: false, code: 'unknown_method', reason: `unknown method '${method}'` };
  }
  const spec = specs[method];
  for (const [name, check] of Object.entries(spec.required)) {
    if (!(name in data)) {
      return { ok: false, code: 'bad_message', reason: `${method}: missing field '${name}'` };
    }
    if (!check(data[name])) {
      return { ok: false, code: 'bad_message', reason: `${method}: bad value for '${name}'` };
    }
  }
  for (const [name, check] of Object.entries(spec.optional)) {
    if (name in data && !check(data[name])) {
      return { ok: false, code: 'bad_message', reason: `${method}: bad value for '${name}'` };
    }
  }
  return { ok: true, message: data as unknown as KernelMessage | FrontendMessage };
}

/** The major part of a `MAJOR.MINOR.PATCH` version, or null when it is not one. */
export function majorOf(version: unknown): number | null {
  if (typeof version !== 'string') {
    return null;
  }
  const head = version.split('.', 1)[0];
  return /^\d+$/.test(head) ? parseInt(head, 10) : null;
}

/** Whether a peer speaking `version` can talk to us (same major). */
export function isCompatible(version: unknown): boolean {
  const major = majorOf(version);
  return major !== null && major === majorOf(PROTOCOL_VERSION);
}
