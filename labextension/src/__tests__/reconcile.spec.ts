/**
 * The RSS headline's reconciliation (reconcile.ts) on the protocol fixtures of a sample with
 * and without `process_tree` (protocol 1.6), which the Python side validates too.
 */
import { readFixture } from './fixtures';
import { trans } from './wording';

import { ISample, validate } from '../protocol';
import { rssReconciliation, staleSeconds } from '../reconcile';

function sample(name: string): ISample {
  const data = readFixture(name).data;
  expect(validate(data, 'to_frontend').ok).toBe(true);
  return data as ISample;
}

describe('rssReconciliation', () => {
  it('says which sum each figure is: RSS or PSS, with or without the children', () => {
    const s = sample('sample_process_tree');
    const r = rssReconciliation(s, trans);
    // What jupyter-resource-usage shows: 412090368 (the kernel's PSS) + 301989888 (its
    // children's); the RSS sum 734003200 + 718274560 counts shared pages again.
    expect(r.withChildrenBytes).toBe(412090368 + 301989888);
    expect(r.withChildrenRssBytes).toBe(734003200 + 718274560);
    expect(r.lines).toEqual([
      'RSS of this process · PSS 393 MiB',
      'with 2 child processes: PSS 681 MiB · RSS 1.35 GiB'
    ]);
    expect(r.title).toMatch(/top shows for its pid/);
    expect(r.title).toMatch(/shared libraries/);
    expect(r.title).toMatch(
      /jupyter-resource-usage's kernel panel shows the PSS of the kernel and its child processes summed .*: 681 MiB with its 2 children/
    );
    expect(r.title).toMatch(/Their RSS summed, 1.35 GiB, counts again/);
  });

  it('says the children are none, and PSS unknown, where they are', () => {
    const r = rssReconciliation(sample('sample_process_tree_no_pss'), trans);
    expect(r.lines).toEqual(['RSS of this process']);
    expect(r.withChildrenBytes).toBeNull();
    expect(r.title).toMatch(/with none now/);
  });

  it('says why there are no figures, and only whose it is for an older kernel', () => {
    const none = rssReconciliation(
      sample('sample_process_tree_unavailable'),
      trans
    );
    expect(none.lines).toEqual(['RSS of this process']);
    expect(none.title).toMatch(
      /not read here \(PSS and child processes are read from Linux's \/proc\)/
    );
    const older = rssReconciliation(sample('sample_cpu_host'), trans);
    expect(older.lines).toEqual(['RSS of this process']);
    expect(older.withChildrenBytes).toBeNull();
    expect(older.title).not.toMatch(/PSS/);
  });

  it('gives the age of a reading the kernel calls stale, on every figure from it', () => {
    const s = sample('sample_process_tree'); // read 4.3 s before the sample, not stale
    expect(rssReconciliation(s, trans).staleS).toBeNull();
    expect(rssReconciliation(s, trans).title).toMatch(
      /as of .* \(read every 5 s now, and again when a child exits or RSS jumps\)/
    );
    // Three minutes after six children exited (issue 31, item 3), were the re-read held back.
    const tree = { ...(s.process_tree as any), stale: true };
    const old = { ...s, ts: tree.ts + 193.2, process_tree: tree };
    const r = rssReconciliation(old, trans);
    expect(r.staleS).toBe(193);
    expect(r.lines).toEqual([
      'RSS of this process · PSS 393 MiB, 193 s ago',
      'with 2 child processes, 193 s ago: PSS 681 MiB · RSS 1.35 GiB'
    ]);
    // However young: "66.5 MiB · PSS 1.05 GiB" 2 s after 1 GiB was freed.
    const jumped = { ...s, ts: tree.ts + 0.4, process_tree: tree };
    expect(staleSeconds(jumped, tree)).toBe(1);
  });

  it('has no staleness rule of its own: old or moved, a reading not called stale has no age', () => {
    const s = sample('sample_process_tree');
    const tree = s.process_tree as any;
    const moved = {
      ...s,
      ts: tree.ts + 193,
      rss_bytes: 66.5 * 2 ** 20,
      process_tree: { ...tree, pss_bytes: 1.05 * 2 ** 30, rss_bytes: 2 ** 30 }
    };
    expect(staleSeconds(moved, moved.process_tree)).toBeNull();
    // A kernel without `period_s` (before later 1.7) is not given a period it did not say.
    const older = { ...tree };
    delete older.period_s;
    const title = rssReconciliation({ ...s, process_tree: older }, trans).title;
    expect(title).toMatch(/PSS and child processes as of [^(]*\.$/);
  });

  it('uses the singular for one child', () => {
    const s = sample('sample_process_tree');
    const one = {
      ...s,
      process_tree: { ...(s.process_tree as any), children_count: 1 }
    };
    expect(rssReconciliation(one, trans).lines[1]).toBe(
      'with 1 child process: PSS 681 MiB · RSS 1.35 GiB'
    );
  });
});
