/**
 * The RSS headline's reconciliation (reconcile.ts) on the protocol fixtures of a sample with
 * and without `process_tree` (protocol 1.6), which the Python side validates too.
 */
import { readFixture } from './fixtures';

import { ISample, validate } from '../protocol';
import { rssReconciliation } from '../reconcile';
import { IWording } from '../timeline';

/** What JupyterLab's Gettext does: %1, %2 … replaced in order; `_n` picks by n and gives
 * n as %1, its arguments from %2 on. */
const fill = (msgid: string, args: any[]) =>
  msgid.replace(/%(\d+)/g, (_, n) => String(args[Number(n) - 1]));
const trans: IWording = {
  __: (msgid: string, ...args: any[]) => fill(msgid, args),
  _n: (one: string, many: string, n: number, ...args: any[]) =>
    fill(n === 1 ? one : many, [n, ...args])
};

function sample(name: string): ISample {
  const data = readFixture(name).data;
  expect(validate(data, 'to_frontend').ok).toBe(true);
  return data as ISample;
}

describe('rssReconciliation', () => {
  it('says whose figure it is, its PSS, and the sum with the child processes', () => {
    const s = sample('sample_process_tree');
    const r = rssReconciliation(s, trans);
    // 734003200 (the kernel) + 718274560 (its two children) bytes.
    expect(r.withChildrenBytes).toBe(734003200 + 718274560);
    expect(r.lines).toEqual([
      'this process · PSS 393 MiB',
      'with 2 child processes: 1.35 GiB'
    ]);
    expect(r.title).toMatch(/top shows for its pid/);
    expect(r.title).toMatch(/shared libraries/);
    expect(r.title).toMatch(
      /jupyter-resource-usage adds the RSS of the kernel's child processes .*: 1.35 GiB with its 2 children, whose RSS is 685 MiB/
    );
    expect(r.title).toMatch(/their PSS does not: 288 MiB/);
  });

  it('says the children are none, and PSS unknown, where they are', () => {
    const r = rssReconciliation(sample('sample_process_tree_no_pss'), trans);
    expect(r.lines).toEqual(['this process']);
    expect(r.withChildrenBytes).toBeNull();
    expect(r.title).toMatch(/it has none now/);
  });

  it('says why there are no figures, and only whose it is for an older kernel', () => {
    const none = rssReconciliation(
      sample('sample_process_tree_unavailable'),
      trans
    );
    expect(none.lines).toEqual(['this process']);
    expect(none.title).toMatch(
      /not read here \(PSS and child processes are read from Linux's \/proc\)/
    );
    const older = rssReconciliation(sample('sample_cpu_host'), trans);
    expect(older.lines).toEqual(['this process']);
    expect(older.withChildrenBytes).toBeNull();
    expect(older.title).not.toMatch(/PSS/);
  });

  it('gives the age of a reading older than 10 s beside the live RSS', () => {
    const s = sample('sample_process_tree'); // read 4.3 s before the sample
    expect(rssReconciliation(s, trans).lines[0]).toBe(
      'this process · PSS 393 MiB'
    );
    const old = { ...s, ts: (s.process_tree as any).ts + 31.6 };
    expect(rssReconciliation(old, trans).lines[0]).toBe(
      'this process · PSS 393 MiB, 32 s ago'
    );
  });

  it('uses the singular for one child', () => {
    const s = sample('sample_process_tree');
    const one = {
      ...s,
      process_tree: { ...(s.process_tree as any), children_count: 1 }
    };
    expect(rssReconciliation(one, trans).lines[1]).toBe(
      'with 1 child process: 1.35 GiB'
    );
  });
});
