/**
 * LiveConnection's handling of protocol 1.3 (cell_run, history, cpu_pct, host) and its
 * per-kernel records, against a fake kernel whose comm we feed with fixture messages.
 */
import { Signal } from '@lumino/signaling';

import { readFixture } from './fixtures';
import { LiveConnection, SERIES } from '../connection';
import { addMark, ICellRun, IMark, upsertCellRun } from '../history';

// LiveConnection listens to page visibility and unload; jest runs without a DOM.
const noop = () => undefined;
(global as any).document = {
  addEventListener: noop,
  removeEventListener: noop,
  visibilityState: 'visible'
};
(global as any).window = {
  addEventListener: noop,
  removeEventListener: noop,
  setTimeout: () => 0
};

const data = (name: string) => readFixture(name).data;

class FakeComm {
  constructor(readonly commId: string) {}
  isDisposed = false;
  opened: unknown[] = [];
  sent: any[] = [];
  onMsg: (msg: any) => void = noop;
  onClose: (msg: any) => void = noop;
  commsOverSubshells = 'disabled';
  subshellId: string | null = null;
  subshellStarted = new Promise<void>(noop);
  open(content: unknown): void {
    this.opened.push(content);
  }
  send(content: unknown): void {
    this.sent.push(content);
  }
  close(): void {
    this.isDisposed = true;
  }
  /** A message from the kernel on this comm. */
  receive(message: unknown): void {
    this.onMsg({ content: { comm_id: this.commId, data: message } });
  }
}

class FakeKernel {
  constructor(readonly id: string) {}
  status = 'idle';
  supportsSubshells = false;
  info = Promise.resolve({});
  iopubMessage = new Signal<this, any>(this);
  comms: FakeComm[] = [];
  createComm(): FakeComm {
    const comm = new FakeComm(`comm-${this.comms.length}`);
    this.comms.push(comm);
    return comm;
  }
  get comm(): FakeComm {
    return this.comms[this.comms.length - 1];
  }
}

class FakeSession {
  constructor(public kernel: FakeKernel) {}
  kernelChanged = new Signal<this, any>(this);
  statusChanged = new Signal<this, string>(this);
  ready = Promise.resolve();
  kernelDisplayName = 'Python 3';
  get session() {
    return { kernel: this.kernel };
  }
}

/** Let the connection's promises (kernel info, subshell) settle. */
const settle = () => new Promise(resolve => setTimeout(resolve, 0));

function hello(pid: number, ts = 1763800000.0) {
  return { ...data('hello.json'), pid, ts };
}

async function attached(kernel: FakeKernel) {
  const connection = new LiveConnection({ intervalS: 1, historyMinutes: 15 });
  const session = new FakeSession(kernel);
  connection.setSessionContext(session as any);
  await settle();
  kernel.comm.receive(hello(4242));
  expect(connection.state.kind).toBe('connected');
  return { connection, session };
}

describe('upsertCellRun', () => {
  const run = (count: number, started: number, ended: number | null) =>
    ({
      executionCount: count,
      cellId: null,
      startedTs: started,
      endedTs: ended,
      status: ended === null ? 'running' : 'ok'
    }) as ICellRun;

  it('updates a known run and keeps the order by start', () => {
    const runs: ICellRun[] = [];
    upsertCellRun(runs, run(2, 20, null));
    upsertCellRun(runs, run(1, 10, 11)); // replayed after a live one: goes before it
    upsertCellRun(runs, run(2, 20, 25));
    expect(runs.map(r => [r.executionCount, r.endedTs])).toEqual([
      [1, 11],
      [2, 25]
    ]);
    upsertCellRun(runs, run(2, 20, null)); // an older copy never un-ends a run
    expect(runs[1].endedTs).toBe(25);
  });

  it('keeps at most 500 runs, the newest', () => {
    const runs: ICellRun[] = [];
    for (let i = 0; i < 520; i++) {
      upsertCellRun(runs, run(i, i, i + 0.5));
    }
    expect(runs).toHaveLength(500);
    expect(runs[0].executionCount).toBe(20);
  });
});

describe('addMark', () => {
  it('drops a duplicate and keeps time order', () => {
    const marks: IMark[] = [];
    addMark(marks, { kind: 'clear_tf', ts: 5 });
    addMark(marks, { kind: 'restart', ts: 3 });
    addMark(marks, { kind: 'clear_tf', ts: 5 });
    expect(marks).toEqual([
      { kind: 'restart', ts: 3 },
      { kind: 'clear_tf', ts: 5 }
    ]);
  });
});

describe('LiveConnection with a 1.3 kernel', () => {
  it('keeps cell runs, marks, host and CPU per kernel', async () => {
    const kernel = new FakeKernel('k1');
    const { connection } = await attached(kernel);
    let changes = 0;
    connection.changed.connect(() => changes++);

    kernel.comm.receive(data('history.json'));
    expect(changes).toBe(1);
    expect(connection.cellRuns.map(r => [r.executionCount, r.status])).toEqual([
      [11, 'ok'],
      [12, 'running']
    ]);
    expect(connection.marks).toEqual([{ kind: 'clear_tf', ts: 1763800008.0 }]);
    // Replayed samples land in the same series as live ones.
    expect(connection.history.points(SERIES.rss)).toHaveLength(2);
    expect(connection.history.points(SERIES.cpu).map(p => p.value)).toEqual([
      null,
      95.2
    ]);
    expect(connection.host).toEqual({
      totalBytes: 33554432000,
      availableBytes: 24100000000
    });

    kernel.comm.receive(data('cell_run_ended.json')); // cell 12 ended
    expect(connection.cellRuns).toHaveLength(2);
    expect(connection.cellRuns[1]).toMatchObject({
      executionCount: 12,
      endedTs: 1763800012.3,
      status: 'error'
    });

    kernel.comm.receive(data('sample_cpu_host.json'));
    expect(connection.history.points(SERIES.cpu).slice(-1)[0].value).toBe(87.5);
    expect(connection.host?.availableBytes).toBe(24159191040);

    kernel.comm.receive(data('event_clear_tf.json'));
    expect(connection.marks.map(m => m.kind)).toEqual(['clear_tf', 'clear_tf']);
    expect(changes).toBe(4);

    // The same history again (switched away and back): nothing doubles.
    kernel.comm.receive(data('history.json'));
    expect(connection.history.points(SERIES.rss)).toHaveLength(3);
    expect(connection.cellRuns).toHaveLength(2);
    expect(connection.cellRuns[1].status).toBe('error');
    expect(connection.marks).toHaveLength(2);
    connection.dispose();
  });

  it('never mixes two kernels and marks a restart on a new timeline', async () => {
    const first = new FakeKernel('k1');
    const { connection, session } = await attached(first);
    first.comm.receive(data('history.json'));
    first.comm.receive(data('sample_cpu_host.json'));
    expect(connection.cellRuns).toHaveLength(2);

    // Another notebook's kernel: its own, empty record.
    const second = new FakeKernel('k2');
    const other = new FakeSession(second);
    connection.setSessionContext(other as any);
    await settle();
    second.comm.receive(hello(5000));
    expect(connection.cellRuns).toEqual([]);
    expect(connection.marks).toEqual([]);
    expect(connection.host).toBeNull();
    expect(connection.history.points(SERIES.rss)).toEqual([]);

    // Back to the first: its data is still there.
    connection.setSessionContext(session as any);
    await settle();
    first.comm.receive(hello(4242));
    expect(connection.cellRuns).toHaveLength(2);

    // The page sees it restart: a new record whose timeline starts with a restart mark
    // on the kernel clock (the last sample's ts plus the time since it arrived).
    const before = Date.now();
    session.statusChanged.emit('restarting');
    const elapsed = (Date.now() - before) / 1000;
    expect(connection.cellRuns).toEqual([]);
    expect(connection.history.points(SERIES.rss)).toEqual([]);
    expect(connection.host).toBeNull();
    expect(connection.marks).toHaveLength(1);
    const mark = connection.marks[0];
    expect(mark.kind).toBe('restart');
    const lastTs = data('sample_cpu_host.json').ts;
    expect(mark.ts).toBeGreaterThanOrEqual(lastTs);
    expect(mark.ts).toBeLessThan(lastTs + 60 + elapsed);
    connection.dispose();
  });

  it('marks a restart it did not see at the new kernel hello', async () => {
    const kernel = new FakeKernel('k1');
    const { connection } = await attached(kernel);
    kernel.comm.receive(data('cell_run.json'));
    kernel.comm.receive(hello(9999, 1763900000.0)); // same id, another pid
    expect(connection.cellRuns).toEqual([]);
    expect(connection.marks).toEqual([{ kind: 'restart', ts: 1763900000.0 }]);
    connection.dispose();
  });
});
