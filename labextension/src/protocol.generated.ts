/**
 * The live protocol's messages, generated from kerasmagic/live/protocol.schema.json by
 * `jlpm gen:protocol`: do not edit (a test fails when this file is stale).
 */

/**
 * Every message of the `kerasmagic.live` comm protocol 1.7.0, both directions: the one source for kerasmagic/live/protocol.py's tests, the TypeScript types (jlpm gen:protocol) and docs/reference/protocol.md's check. Extra fields are allowed (a newer minor version may add them).
 */
export type LiveProtocol = FrontendMessage | KernelMessage;
/**
 * A message from the frontend to the kernel (`to_kernel`).
 */
export type FrontendMessage =
  IOpen | IVisibility | IConfigure | IClear | IRefresh;
/**
 * A message from the kernel to the frontend (`to_frontend`).
 */
export type KernelMessage =
  | IHello
  | ISample
  | IFacts
  | IEvent
  | IClearResult
  | IErrorMessage
  | IIsolatedStarted
  | IIsolatedSample
  | IIsolatedDone
  | IIsolatedJobs
  | ICellGrowth
  | ICellRunMessage
  | IHistory
  | IPostmortem;
/**
 * A number, or why there is none.
 */
export type MaybeNumber = number | IUnavailable;
export type StringOrUnavailable = string | IUnavailable;

/**
 * Subscribe (the `comm_open` data); the kernel answers `hello`, `history`, `facts`, a `sample`, `isolated_jobs`, `cell_growth`.
 */
export interface IOpen {
  method: 'open';
  visible?: boolean;
  interval_s?: number;
}
/**
 * The sidebar was shown or hidden.
 */
export interface IVisibility {
  method: 'visibility';
  visible: boolean;
}
/**
 * The sampling interval, kernel-wide (last writer wins).
 */
export interface IConfigure {
  method: 'configure';
  interval_s: number;
}
/**
 * Run `clear_tf()` on the main thread; answered by `clear_result`.
 */
export interface IClear {
  method: 'clear';
  request_id: string;
}
/**
 * Push `facts`, a `sample`, `isolated_jobs` and `cell_growth` now.
 */
export interface IRefresh {
  method: 'refresh';
}
/**
 * Once, right after open.
 */
export interface IHello {
  method: 'hello';
  protocol_version: string;
  package_version: string;
  pid: number;
  interval_s: number;
  ts: number;
}
/**
 * From the sampler thread, every `interval_s` while a listener is visible.
 */
export interface ISample {
  method: 'sample';
  seq: number;
  ts: number;
  rss_bytes: MaybeNumber;
  tf: ITfAllocator | IUnavailable;
  gpu: (IGpuDevice | IUnavailable)[] | IUnavailable;
  sample_cost_s: number;
  /**
   * Since 1.3: the kernel process's CPU use since the previous sample, % of one core.
   */
  cpu_pct?: MaybeNumber;
  /**
   * Since 1.3.
   */
  host?: IHostMemory | IUnavailable;
  /**
   * Since 1.4, only where the kernel imported torch.
   */
  torch?: ITorchAllocator | IUnavailable;
  /**
   * Since 1.4, only where the kernel imported JAX.
   */
  jax?: IJaxAllocator | IUnavailable;
  /**
   * Since 1.5: the interval this sample was taken at; a longer silence before it is a gap.
   */
  interval_s?: number;
  /**
   * Since 1.6, while a panel looks: PSS and the child processes, read every few seconds.
   */
  process_tree?: IProcessTree | IUnavailable;
  /**
   * Since 1.7, only where NVML's figure for the kernel has a framework's pool to subtract.
   */
  gpu_context?: IGpuContext;
  /**
   * Since 1.7: the limit, headroom and guard (the sidebar's limit rows).
   */
  memory_limit?: IMemoryLimit | IUnavailable;
  /**
   * Later 1.7 kernels, where TensorFlow is imported: its CustomGradient registry entries now, for the chart (facts carry the same count after each cell).
   */
  custom_gradient_entries?: number;
}
/**
 * A value a probe cannot give, and why.
 */
export interface IUnavailable {
  status: 'unavailable';
  /**
   * not_installed, not_imported, not_started, no_device, not_supported, error (a newer kernel may add others).
   */
  reason: string;
  detail?: string;
}
/**
 * TensorFlow's allocators per logical device.
 */
export interface ITfAllocator {
  status: string;
  devices: {
    [k: string]: IDeviceAllocator;
  };
}
/**
 * TensorFlow's allocator on one logical device.
 */
export interface IDeviceAllocator {
  in_use_bytes: MaybeNumber;
  peak_bytes: MaybeNumber;
  /**
   * What TF's pool keeps but does not use, a lower bound.
   */
  held_unused_min_bytes: MaybeNumber;
}
/**
 * NVML's view of one device.
 */
export interface IGpuDevice {
  index: number;
  name?: string;
  /**
   * Device-wide.
   */
  used_bytes: MaybeNumber;
  total_bytes: MaybeNumber;
  /**
   * This kernel's.
   */
  process_used_bytes: MaybeNumber;
  utilisation_pct?: MaybeNumber;
}
/**
 * Since 1.3: the machine's memory (psutil.virtual_memory), in a sample.
 */
export interface IHostMemory {
  total_bytes: number;
  available_bytes: number;
}
/**
 * Since 1.4: torch's caching allocator per device.
 */
export interface ITorchAllocator {
  status: string;
  devices: {
    [k: string]: ITorchDevice;
  };
}
/**
 * Since 1.4: torch's CUDA caching allocator on one device (`cuda:0`: torch's numbering).
 */
export interface ITorchDevice {
  allocated_bytes: number;
  reserved_bytes: number;
  peak_allocated_bytes: number;
  /**
   * reserved − allocated: freed blocks torch keeps cached (`empty_cache()` returns them).
   */
  held_unused_bytes: number;
}
/**
 * Since 1.4: JAX's pool per device and the preallocation setting.
 */
export interface IJaxAllocator {
  status: string;
  devices: {
    [k: string]: IJaxDevice;
  };
  /**
   * The XLA_PYTHON_CLIENT_* variables as set, or JAX's default (75 % of each GPU).
   */
  preallocation: string;
}
/**
 * Since 1.4: JAX's pool on one device (`memory_stats()`); null where JAX has no figure.
 */
export interface IJaxDevice {
  in_use_bytes: number | null;
  peak_bytes: number | null;
  pool_bytes: number | null;
  limit_bytes: number | null;
  /**
   * pool − in use.
   */
  held_unused_bytes: number | null;
  /**
   * Since 1.7: the story the pool tells (kerasmagic.probes.jax_devices.pool_story): `preallocated`, `preallocated_off_now`, `preallocated_fraction_now`, `grown`, `grown_platform_now` or `unknown` (a newer kernel may add others).
   */
  pool_story?: string;
  /**
   * Since 1.7: the variables set now that the story's advice names (`XLA_PYTHON_CLIENT_PREALLOCATE=false`), '' where it names none.
   */
  named_now?: string;
}
/**
 * Since 1.6: the kernel's PSS and its child processes' memory as of `ts`: what reconciles the kernel's RSS with `top` and jupyter-resource-usage.
 */
export interface IProcessTree {
  ts: number;
  pss_bytes: MaybeNumber;
  children_count: number;
  children_rss_bytes: number;
  children_pss_bytes: MaybeNumber;
  /**
   * Optional (1.7, later kernels): the kernel's RSS when this PSS was read, so that a PSS from before a jump in RSS can be told.
   */
  rss_bytes?: number;
  /**
   * Optional (later 1.7 kernels): the kernel no longer counts this reading as describing the process (a child it counted has exited, or RSS moved by 64 MiB and 10 % since), and reads again once its CPU share allows. A frontend gives the age of a stale reading; it has no rule of its own.
   */
  stale?: boolean;
  /**
   * Optional (later 1.7 kernels): seconds between the kernel's scheduled readings now (5 s, more where a reading costs more).
   */
  period_s?: number;
}
/**
 * Since 1.7: what NVML counts for the kernel beyond every framework's pool (the CUDA context and the libraries' buffers), as `%tf_mem` estimates it (kerasmagic.probes.sample.cuda_context).
 */
export interface IGpuContext {
  context_bytes: number;
  /**
   * True where TensorFlow's pool is among those subtracted: TF reports its pool only as at least its high-water mark.
   */
  upper_bound: boolean;
  /**
   * The pools subtracted, in order: `torch_reserved`, `jax_pool`, `tf_pool` (a newer kernel may add others).
   */
  pools: string[];
}
/**
 * Since 1.7: the memory limit the guard watches (the user's, KERASMAGIC_MEMORY_LIMIT, the cgroup's or the host's), what counts against it (RSS plus tmpfs the cgroup is charged for), the headroom, and the guard's settings and state.
 */
export interface IMemoryLimit {
  limit_bytes: number;
  used_bytes: number;
  rss_bytes?: number;
  shmem_bytes?: number;
  headroom_bytes: number;
  used_pct: number;
  /**
   * `user`, `environment`, `cgroup` or `host`.
   */
  source: string;
  where?: string;
  guard: IGuardState;
}
/**
 * Since 1.7: the memory guard's settings and, while it runs, its level and what it did (`guard_warning` and `guard_stop` also come as `event` messages).
 */
export interface IGuardState {
  enabled: boolean;
  warn_pct: number;
  stop_pct: number;
  running?: boolean;
  level?: string | null;
  warnings: number;
  stops: number;
  /**
   * The last warning or stop: kind, execution_count, used_bytes, limit_bytes, used_pct, ts, text.
   */
  last_event?: {
    [k: string]: unknown;
  } | null;
}
/**
 * Keras and graph facts, read on the kernel's main thread after every cell while a listener is visible.
 */
export interface IFacts {
  method: 'facts';
  ts: number;
  execution_count: number;
  tf_status: StringOrUnavailable;
  keras_status: StringOrUnavailable;
  graph_op_count: MaybeNumber;
  custom_gradient_entries: MaybeNumber;
  name_counters:
    | {
        [k: string]: number;
      }
    | IUnavailable;
  live_models: ILiveModel[] | IUnavailable;
  /**
   * Since 1.7: true where TensorFlow's CustomGradient entries keep their traced graphs and models' weights alive (before TF 2.22), false where they pin nothing (2.22 has the upstream fix), null without TensorFlow.
   */
  custom_gradients_pin_graphs?: boolean | null;
  /**
   * Optional (1.7, later kernels): when cell `execution_count` ended (kernel clock), so that "as of cell [8]" gives the time [8] ran, not when these facts were read (`ts`).
   */
  cell_ended_ts?: number;
}
/**
 * A Keras model still reachable.
 */
export interface ILiveModel {
  name: string;
  class?: string;
  weight_bytes: MaybeNumber;
  optimizer_bytes: MaybeNumber;
  held_by?: string[];
}
/**
 * Whenever the core publishes one (`clear_tf`, `fresh_model`).
 */
export interface IEvent {
  method: 'event';
  kind: string;
  ts: number;
  payload: unknown;
  text?: string;
}
/**
 * The answer to `clear`; with `ok` false `report` is null and `text` says what failed.
 */
export interface IClearResult {
  method: 'clear_result';
  request_id: string;
  ok: boolean;
  ts: number;
  report: {
    [k: string]: unknown;
  } | null;
  text: string;
}
/**
 * `code` is `bad_message`, `unknown_method`, `protocol_mismatch` or `clear_failed`.
 */
export interface IErrorMessage {
  method: 'error';
  code: string;
  message: string;
  ts: number;
  request_method?: string;
}
/**
 * Since 1.1: a job started.
 */
export interface IIsolatedStarted {
  method: 'isolated_started';
  ts: number;
  job: IIsolatedJob;
}
/**
 * One isolated job (`run_isolated`, `isolated_map`, `%%fresh_model --isolate`) as the panel shows it. `status` is `running`, or how it ended: `ok`, `error`, `timeout`, `crash`, `out_of_memory`, `interrupted`, `cancelled` (a newer kernel may add others).
 */
export interface IIsolatedJob {
  job_id: string;
  label: string;
  status: string;
  /**
   * `local` or `ray`.
   */
  on: string;
  node: IJobNode | null;
  started_ts: number;
  wall_s: number | null;
  rss_peak_bytes: number | null;
  gpu_peak_bytes: number | null;
  /**
   * Since 1.4, only with a number: torch's `max_memory_allocated` in the worker, summed.
   */
  torch_peak_bytes?: number;
  /**
   * Since 1.4, only with a number: JAX's `peak_bytes_in_use` in the worker, summed.
   */
  jax_peak_bytes?: number;
  error?: string;
  /**
   * Optional (1.6): the counts of the `isolated_map` this job is an item of (its latest).
   */
  map_progress?: IMapProgress;
  /**
   * Optional (1.7, later kernels): `taken` where the job ran in the pool's warm spare, else why it got a cold fork.
   */
  spare?: string;
  /**
   * Optional (1.7, later kernels): the pool's warm spares as the job ended.
   */
  spares?: ISpare[];
}
/**
 * A Ray node an isolated job ran on (null: this machine).
 */
export interface IJobNode {
  ip: string;
  hostname: string;
}
/**
 * An `isolated_map`'s items: done (from its checkpoint too), running, failed, left; seconds.
 */
export interface IMapProgress {
  total: number;
  done: number;
  running: number;
  failed: number;
  left: number;
  elapsed_s: number;
  /**
   * Estimated from the items finished so far; null before the first one finished.
   */
  eta_s: number | null;
}
/**
 * Optional (1.7, later kernels): one warm spare of the isolation pool as a job ended (kerasmagic/isolation/pool.py `spare_states`): its pid, the device its jobs see (null: the CPU), `warming` or `ready`, its RSS (mostly pages shared with the template) and its GPU memory by NVML (null: none or unknown).
 */
export interface ISpare {
  pid: number;
  device?: string | null;
  state: 'warming' | 'ready';
  rss_bytes?: number | null;
  gpu_bytes?: number | null;
}
/**
 * Since 1.1: a running job's memory (at most about 2 a second per job).
 */
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
/**
 * Since 1.1: a job ended.
 */
export interface IIsolatedDone {
  method: 'isolated_done';
  ts: number;
  job: IIsolatedJob;
}
/**
 * Since 1.1: the running jobs and the last finished ones (on open, refresh and show).
 */
export interface IIsolatedJobs {
  method: 'isolated_jobs';
  ts: number;
  jobs: IIsolatedJob[];
}
/**
 * Since 1.2: the leak watch, flagged cells first, then the recently run ones.
 */
export interface ICellGrowth {
  method: 'cell_growth';
  ts: number;
  threshold_bytes: number;
  min_runs: number;
  watched_cells: number;
  cells: ICellSummary[];
}
/**
 * One cell the leak watch knows. `key` is the cell's id (JupyterLab) or a hash of its source; `streak` the last runs in a row that grew (a first run never counts); `per_run` the mean change over the streak (null without one).
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
  /**
   * When the cell's last run ended (kernel clock): what the leak watch's figures are as of.
   */
  last_ts?: number;
  /**
   * A fix code (`tf1_graph`, `delete`, `run_alone`, `keep_models`, `fresh_model`, `isolate`, `measure_again` where the notebook changed since the advice was measured; a newer kernel may add others), or null without a streak.
   */
  fix: string | null;
  /**
   * What the last run left behind when worth naming on its own (the one-run rule).
   */
  one_run?: IOneRun | null;
  /**
   * The fix as the kernel words it, with the names holding the memory.
   */
  fix_text?: string | null;
  held_by?: string[];
  /**
   * Optional (1.7, later kernels): the evidence `fix_text` was chosen from (null without a flag).
   */
  evidence?: IEvidence | null;
  /**
   * Optional (later 1.7 kernels): the flag's sentence as `%tf_mem --cells` prints it, "cell [12] grows 9.60 MiB per run (5 runs)"; null for a cell that is not flagged.
   */
  sentence?: string | null;
}
/**
 * A cell's figures: the change in RSS, TF in use, GPU (NVML), registry entries, models; each a number or null.
 */
export interface ICellFigures {
  rss_bytes: number | null;
  tf_in_use_bytes: number | null;
  gpu_bytes: number | null;
  custom_gradient_entries: number | null;
  live_models: number | null;
  [k: string]: number | null;
}
/**
 * A single run that grew much or left live models (`cell_growth`'s `one_run`).
 */
export interface IOneRun {
  execution_count: number | null;
  first: boolean;
  growth_bytes: number | null;
  new_models: number;
  held_by: string[];
  imported?: string[];
  /**
   * Optional (1.7, later kernels): what deleting the holders would free, measured then.
   */
  proof?: IProof;
  /**
   * Optional (1.7, later kernels): the remedy in the words `%tf_mem --cells` prints.
   */
  remedy_text?: string;
  /**
   * Optional (1.7, later kernels): what deleting each holder alone would free, in words.
   */
  measured_text?: string;
  /**
   * Optional (1.7, later kernels): how many of the objects the run made are still alive (null: not followed).
   */
  left_alive?: number | null;
  /**
   * What the run left behind in the words `%tf_mem --cells` prints: "cell [3] grew +201 MiB and left 6 live models, held by `models`". A frontend shows it as it is.
   */
  sentence: string;
}
/**
 * Optional (1.7, later kernels): the proof behind a remedy (kerasmagic/remedies.py `Proof.to_dict()`): the names proven to free a real share of the growth (`named`, null: none), the safe default (a plain `%clear_tf`), the growth it explains, what deleting each candidate alone would free, and whether the walk stopped at its budget.
 */
export interface IProof {
  named: IRetained | null;
  default: IRetained;
  explained_bytes?: number;
  candidates_bytes?: {
    [k: string]: number;
  };
  truncated?: boolean;
  how_measured?: string;
}
/**
 * Optional (1.7, later kernels): what one action frees, measured by the retained-size walk when the advice was made (kerasmagic/remedies.py `Retained.to_dict()`): `command` (`%clear_tf` and the names it deletes), bytes by where they go, the models, the objects freed (`label (size) held by ...`) and `how_measured`.
 */
export interface IRetained {
  command: string;
  names: string[];
  retained_bytes: number;
  host_bytes?: number;
  tf_bytes?: number;
  tf_pooled?: boolean;
  rss_bytes?: number;
  models?: number;
  objects: string[];
  unsized?: string[];
  how_measured?: string;
}
/**
 * Optional (1.7, later kernels): what holds a flagged cell's growth, read when it was flagged: the containers that gained items on every run, the variables holding what the runs left, the holders of the older runs' models, TensorFlow 1 graphs (with their op counts), whether the cell grew when run alone, whether it runs under `%%fresh_model`, the proof of the remedy, and the CustomGradient entries a clean frees now (of all).
 */
export interface IEvidence {
  containers: string[];
  held_by: string[];
  models_held_by?: string[];
  tf1?: string[];
  graph_ops?: {
    [k: string]: number | null;
  };
  alone?: boolean;
  fresh_model?: boolean;
  proof: IProof | null;
  registry_entries_freeable?: number | null;
  registry_entries?: number | null;
}
/**
 * Since 1.3: a cell started (ended_ts null) or ended.
 */
export interface ICellRunMessage {
  method: 'cell_run';
  ts: number;
  run: ICellRunData;
}
/**
 * Since 1.3: one run of a cell on the wire (kernel-clock seconds). `status` is `running`, `ok` or `error` (a newer kernel may add others); `ended_ts` is null while it runs.
 */
export interface ICellRunData {
  execution_count: number | null;
  cell_id: string | null;
  started_ts: number;
  ended_ts: number | null;
  status: string;
  /**
   * Since 1.5: the kernel's RSS when the cell started.
   */
  rss_start_bytes?: number | null;
  /**
   * Since 1.5: the kernel's RSS when the cell ended.
   */
  rss_end_bytes?: number | null;
  /**
   * Since 1.5: the highest RSS during the cell; exact where the kernel's high-water mark rose.
   */
  peak_rss_bytes?: number | null;
  peak_exact?: boolean;
}
/**
 * Since 1.3: what the kernel kept of the last 15 minutes, once on open (after hello).
 */
export interface IHistory {
  method: 'history';
  ts: number;
  samples: ISample[];
  cell_runs: ICellRunData[];
  marks: IMarkData[];
}
/**
 * Since 1.3: a moment on the timeline (`clear_tf`, `fresh_model`, ...), kernel clock.
 */
export interface IMarkData {
  kind: string;
  ts: number;
}
/**
 * Since 1.5: why this notebook's previous kernel died, as this kernel's `%load_ext` found it.
 */
export interface IPostmortem {
  method: 'postmortem';
  ts: number;
  /**
   * When it died, the time `text` tells, where its watcher saw the death (same machine, same clock); a frontend that saw the death shows this time, not its own; null where no watcher saw it (`text` then gives the last sign of life).
   */
  died_ts: number | null;
  execution_count: number | null;
  text: string;
}
