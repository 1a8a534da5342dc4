/**
 * The memory limit's rows (limit.ts) on the fixture of a kernel at 96 % of a 1.5 GiB cgroup
 * whose guard stopped a cell (issue 33, item 7), which the Python side validates too.
 */
import { readFixture } from './fixtures';
import { trans } from './wording';

import { guardEventText, guardMarkText, limitLevel, limitView } from '../limit';
import { IMemoryLimit, ISample, validate } from '../protocol';
import { formatClock } from '../timeline';
import { markText } from '../timelinelayers';

const SAMPLE = readFixture('sample_memory_limit.json').data as ISample;
const LIMIT = SAMPLE.memory_limit as IMemoryLimit;

describe('limitView', () => {
  it('is valid on the wire', () => {
    expect(validate(SAMPLE, 'to_frontend').ok).toBe(true);
  });

  it('says the limit, what counts against it, the headroom and whose it is', () => {
    const view = limitView(SAMPLE, trans)!;
    expect(view.headline).toBe('Memory limit: 1.44 GiB of 1.50 GiB (96 %)');
    expect(view.headroom).toBe(
      '61.4 MiB headroom · the guard warns at 85 %, stops at 95 %'
    );
    expect(view.where).toBe(
      "the container's memory cgroup: cgroup v2 /user.slice/kernel (memory.max)"
    );
    expect(view.level).toBe('stop');
    expect(view.hostOnly).toBe(false);
    expect(view.quiet).toBe(false);
    const ts = (LIMIT.guard.last_event as any).ts;
    expect(view.guard).toBe(
      `Guard stopped cell [7] at 1.43 GiB (95 %), ${formatClock(ts)}`
    );
  });

  it('says only the guard’s levels for the host’s own memory far from them', () => {
    const host = {
      ...LIMIT,
      source: 'host',
      used_pct: 12,
      guard: { ...LIMIT.guard, last_event: null }
    };
    const quiet = limitView({ ...SAMPLE, memory_limit: host }, trans)!;
    expect(quiet.quiet).toBe(true);
    expect(quiet.guardOnly).toBe(
      "Limit: the machine's memory; the guard warns at 85 %, stops at 95 %"
    );
    // Near the guard's levels, or once it acted, the whole rows come back.
    expect(
      limitView({ ...SAMPLE, memory_limit: { ...host, used_pct: 90 } }, trans)!
        .quiet
    ).toBe(false);
    expect(
      limitView(
        { ...SAMPLE, memory_limit: { ...host, guard: LIMIT.guard } },
        trans
      )!.quiet
    ).toBe(false);
  });

  it('says whose limit once', () => {
    const env = {
      ...LIMIT,
      source: 'environment',
      where: 'KERASMAGIC_MEMORY_LIMIT=1GiB'
    };
    expect(limitView({ ...SAMPLE, memory_limit: env }, trans)!.where).toBe(
      'KERASMAGIC_MEMORY_LIMIT=1GiB'
    );
  });

  it('levels by the guard’s thresholds, and says when the guard is off', () => {
    expect(limitLevel({ ...LIMIT, used_pct: 50 })).toBe('ok');
    expect(limitLevel({ ...LIMIT, used_pct: 88 })).toBe('warn');
    const off = { ...LIMIT, guard: { ...LIMIT.guard, enabled: false } };
    expect(
      limitView({ ...SAMPLE, memory_limit: off }, trans)!.headroom
    ).toMatch(/the guard is off \(%tf_mem --guard on\)$/);
  });
});

describe('limitView', () => {
  it('words a warning, and nothing before the guard acted', () => {
    const warned = {
      ...LIMIT.guard,
      last_event: {
        kind: 'guard_warning',
        execution_count: null,
        used_bytes: 2 ** 30,
        used_pct: 87.6,
        ts: 0
      }
    };
    expect(guardEventText(warned, trans)).toMatch(
      /^Guard warned the running cell at 1.00 GiB \(88 %\), /
    );
    expect(guardEventText({ ...LIMIT.guard, last_event: null }, trans)).toBe(
      ''
    );
    expect(guardMarkText('guard_stop', trans)).toBe(
      'memory guard stopped the cell'
    );
    expect(guardMarkText('clear_tf', trans)).toBeNull();
    // The timeline labels its marks with these words, not the event's kind.
    expect(markText(trans, 'guard_warning')).toBe('memory guard warned');
    expect(markText(trans, 'clear_tf')).toBe('clear');
  });

  it('has nothing to say for an older kernel or an unreadable limit', () => {
    const older = { ...SAMPLE, memory_limit: undefined };
    expect(limitView(older as ISample, trans)).toBeNull();
    const unreadable = {
      ...SAMPLE,
      memory_limit: { status: 'unavailable', reason: 'error', detail: 'x' }
    } as ISample;
    expect(limitView(unreadable, trans)).toBeNull();
    expect(limitView(null, trans)).toBeNull();
  });
});
