/**
 * Whose figure the RSS headline is, and how it reconciles with the neighbours' figures:
 * `top` shows this process's RSS, which counts shared libraries in full; PSS shares them
 * out; jupyter-resource-usage adds the kernel's child processes (the isolation template and
 * its jobs). The kernel reads PSS and the children every few seconds (`process_tree`).
 */

import { formatBytes } from './format';
import { IProcessTree, ISample, isNumber, isUnavailable } from './protocol';
import { formatClock, IWording } from './timeline';

/** A process-tree reading older than this (seconds) says its age beside the live RSS. */
const STALE_S = 10;

/** The RSS headline's lines under the figure and its hover text. */
export interface IRssReconciliation {
  /** Under the figure, one line each: whose figure, its PSS, and with the children. */
  lines: string[];
  /** The hover: why `top` and jupyter-resource-usage show other numbers. */
  title: string;
  /** The kernel's RSS plus its children's, as jupyter-resource-usage counts; null if unknown. */
  withChildrenBytes: number | null;
}

/**
 * The RSS headline's reconciliation for `sample` (a sample without `process_tree`, from a
 * kernel older than protocol 1.6 or taken before a panel looked, says only whose it is).
 *
 * @example
 * rssReconciliation(sample, trans).lines;
 * // ['this process · PSS 412 MiB', 'with 2 child processes: 1.4 GiB']
 */
export function rssReconciliation(
  sample: ISample,
  trans: IWording
): IRssReconciliation {
  const base = trans.__(
    "The kernel process's resident memory (RSS), as the OS counts it: what top shows for its pid (RES). It counts shared libraries (TensorFlow's, CUDA's, Python's) in full, as it does in every process that maps them."
  );
  const tree = sample.process_tree;
  if (tree === undefined) {
    return {
      lines: [trans.__('this process')],
      title: base,
      withChildrenBytes: null
    };
  }
  if (isUnavailable(tree)) {
    return {
      lines: [trans.__('this process')],
      title:
        base +
        ' ' +
        trans.__(
          'PSS and child processes: not read here (%1).',
          tree.detail ?? tree.reason
        ),
      withChildrenBytes: null
    };
  }
  return withTree(sample, tree, base, trans);
}

function withTree(
  sample: ISample,
  tree: IProcessTree,
  base: string,
  trans: IWording
): IRssReconciliation {
  const parts = [base];
  // Read every 5 s or more seldom (its cost): beside a live RSS an older PSS says its age.
  const age = Math.round(sample.ts - tree.ts);
  const first = !isNumber(tree.pss_bytes)
    ? trans.__('this process')
    : age > STALE_S
      ? trans.__(
          'this process · PSS %1, %2 s ago',
          formatBytes(tree.pss_bytes),
          age
        )
      : trans.__('this process · PSS %1', formatBytes(tree.pss_bytes));
  if (isNumber(tree.pss_bytes)) {
    parts.push(
      trans.__(
        "PSS shares each shared page out among the processes that map it: %1 is this process's share, the figure to add up across processes.",
        formatBytes(tree.pss_bytes)
      )
    );
  }
  const lines = [first];
  // `_n` gives `n` as %1 and the arguments from %2 on (JupyterLab's Gettext).
  let withChildren: number | null = null;
  if (tree.children_count > 0 && isNumber(sample.rss_bytes)) {
    withChildren = sample.rss_bytes + tree.children_rss_bytes;
    lines.push(
      trans._n(
        'with %1 child process: %2',
        'with %1 child processes: %2',
        tree.children_count,
        formatBytes(withChildren)
      )
    );
    parts.push(
      trans._n(
        "jupyter-resource-usage adds the RSS of the kernel's child processes (the isolation template and its running jobs, any other child): %2 with its %1 child, whose RSS is %3.",
        "jupyter-resource-usage adds the RSS of the kernel's child processes (the isolation template and its running jobs, any other child): %2 with its %1 children, whose RSS is %3.",
        tree.children_count,
        formatBytes(withChildren),
        formatBytes(tree.children_rss_bytes)
      )
    );
    if (isNumber(tree.children_pss_bytes)) {
      parts.push(
        trans.__(
          "A forked child's RSS counts the pages it shares with its template again; their PSS does not: %1.",
          formatBytes(tree.children_pss_bytes)
        )
      );
    }
  } else {
    parts.push(
      trans.__(
        "jupyter-resource-usage also counts the kernel's child processes (the isolation template and its jobs): it has none now, so it shows this RSS."
      )
    );
  }
  parts.push(
    trans.__(
      'PSS and child processes as of %1 (read every few seconds: PSS costs more to read than RSS).',
      formatClock(tree.ts)
    )
  );
  return { lines, title: parts.join(' '), withChildrenBytes: withChildren };
}
