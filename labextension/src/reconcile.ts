/**
 * Whose figure the RSS headline is, and how it reconciles with the neighbours' figures:
 * `top` shows this process's RSS, which counts shared libraries in full; PSS shares them
 * out; jupyter-resource-usage's kernel panel shows ipykernel's `usage_request`, the PSS of the
 * kernel and all its child processes summed (RSS only where the OS gives no PSS). Every
 * figure here says which sum it is. The kernel reads PSS and the children every few seconds
 * (`process_tree`); a reading the kernel calls stale (a child gone, a jump in RSS) says its age.
 */

import { formatBytes } from './format';
import { IProcessTree, ISample, isNumber, isUnavailable } from './protocol';
import { formatClock, IWording } from './timeline';

/** The RSS headline's lines under the figure and its hover text. */
export interface IRssReconciliation {
  /** Under the figure, one line each: whose figure and its PSS; the sums with the children. */
  lines: string[];
  /** The hover: why `top` and jupyter-resource-usage show other numbers. */
  title: string;
  /** The kernel's PSS plus its children's, what jupyter-resource-usage shows; null if unknown. */
  withChildrenBytes: number | null;
  /** The kernel's RSS plus its children's (shared pages counted again); null if unknown. */
  withChildrenRssBytes: number | null;
  /** Seconds the PSS and children reading is older than the RSS beside it, when that matters. */
  staleS: number | null;
}

/**
 * The RSS headline's reconciliation for `sample` (a sample without `process_tree`, from a
 * kernel older than protocol 1.6 or taken before a panel looked, says only whose it is).
 *
 * @example
 * rssReconciliation(sample, trans).lines;
 * // ['RSS of this process · PSS 412 MiB', 'with 2 child processes: PSS 868 MiB · RSS 1.4 GiB']
 */
export function rssReconciliation(
  sample: ISample,
  trans: IWording
): IRssReconciliation {
  const base = trans.__(
    "The kernel process's resident memory (RSS), as the OS counts it: what top shows for its pid (RES). It counts shared libraries (TensorFlow's, CUDA's, Python's) in full, as it does in every process that maps them."
  );
  const tree = sample.process_tree;
  const alone = {
    lines: [trans.__('RSS of this process')],
    withChildrenBytes: null,
    withChildrenRssBytes: null,
    staleS: null
  };
  if (tree === undefined) {
    return { ...alone, title: base };
  }
  if (isUnavailable(tree)) {
    const why = trans.__(
      'PSS and child processes: not read here (%1).',
      tree.detail ?? tree.reason
    );
    return { ...alone, title: `${base} ${why}` };
  }
  return withTree(sample, tree, base, trans);
}

/**
 * How many seconds `tree` is older than the sample, when the kernel says it no longer describes
 * the process (`stale`: a child it counted has exited, or RSS jumped since); else null. The rule
 * is the kernel's (sampler.py `ProcessTreeMeter`), so a kernel that does not send `stale` gets
 * no age.
 */
export function staleSeconds(
  sample: ISample,
  tree: IProcessTree
): number | null {
  return tree.stale === true
    ? Math.max(1, Math.round(sample.ts - tree.ts))
    : null;
}

function withTree(
  sample: ISample,
  tree: IProcessTree,
  base: string,
  trans: IWording
): IRssReconciliation {
  const parts = [base];
  const stale = staleSeconds(sample, tree);
  const ago = stale === null ? '' : trans.__(', %1 s ago', stale);
  const first = isNumber(tree.pss_bytes)
    ? trans.__(
        'RSS of this process · PSS %1%2',
        formatBytes(tree.pss_bytes),
        ago
      )
    : trans.__('RSS of this process');
  if (isNumber(tree.pss_bytes)) {
    parts.push(
      trans.__(
        "PSS shares each shared page out among the processes that map it: %1 is this process's share, the figure to add up across processes.",
        formatBytes(tree.pss_bytes)
      )
    );
  }
  const lines = [first];
  const sums = childrenSums(sample, tree);
  if (tree.children_count > 0) {
    lines.push(childrenLine(tree.children_count, sums, ago, trans));
    parts.push(...childrenHover(tree.children_count, sums, trans));
  } else {
    parts.push(
      trans.__(
        "jupyter-resource-usage sums the PSS of the kernel and its child processes (the isolation template and its jobs): with none now, it shows this process's PSS."
      )
    );
  }
  parts.push(
    isNumber(tree.period_s)
      ? trans.__(
          'PSS and child processes as of %1 (read every %2 s now, and again when a child exits or RSS jumps).',
          formatClock(tree.ts),
          tree.period_s
        )
      : trans.__('PSS and child processes as of %1.', formatClock(tree.ts))
  );
  return {
    lines,
    title: parts.join(' '),
    withChildrenBytes: sums.pss,
    withChildrenRssBytes: sums.rss,
    staleS: stale
  };
}

interface ISums {
  pss: number | null;
  rss: number | null;
}

function childrenSums(sample: ISample, tree: IProcessTree): ISums {
  if (tree.children_count === 0) {
    return { pss: null, rss: null };
  }
  return {
    pss:
      isNumber(tree.pss_bytes) && isNumber(tree.children_pss_bytes)
        ? tree.pss_bytes + tree.children_pss_bytes
        : null,
    rss: isNumber(sample.rss_bytes)
      ? sample.rss_bytes + tree.children_rss_bytes
      : null
  };
}

/** `with 1 child process: PSS 868 MiB · RSS 1.17 GiB` (`_n`: n is %1, the rest from %2). */
function childrenLine(
  count: number,
  sums: ISums,
  ago: string,
  trans: IWording
): string {
  const figures = [
    sums.pss === null ? '' : trans.__('PSS %1', formatBytes(sums.pss)),
    sums.rss === null ? '' : trans.__('RSS %1', formatBytes(sums.rss))
  ]
    .filter(Boolean)
    .join(' · ');
  return trans._n(
    'with %1 child process%3: %2',
    'with %1 child processes%3: %2',
    count,
    figures,
    ago
  );
}

function childrenHover(count: number, sums: ISums, trans: IWording): string[] {
  const parts: string[] = [];
  if (sums.pss !== null) {
    parts.push(
      trans._n(
        "jupyter-resource-usage's kernel panel shows the PSS of the kernel and its child processes summed (ipykernel's usage_request): %2 with its %1 child (and kerasmagic's own post-mortem watcher, a few MiB, which it counts too).",
        "jupyter-resource-usage's kernel panel shows the PSS of the kernel and its child processes summed (ipykernel's usage_request): %2 with its %1 children (and kerasmagic's own post-mortem watcher, a few MiB, which it counts too).",
        count,
        formatBytes(sums.pss)
      )
    );
  }
  if (sums.rss !== null) {
    parts.push(
      trans.__(
        'Their RSS summed, %1, counts again the pages a forked child shares with its template: more than the memory they use together.',
        formatBytes(sums.rss)
      )
    );
  }
  return parts;
}
