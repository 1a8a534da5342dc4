/* eslint-disable max-lines -- over 600 lines before issue 31; split it */
/**
 * LiveConnection's handling of protocol 1.3 (cell_run, history, cpu_pct, host) and its
 * per-kernel records, against a fake kernel whose comm we feed with fixture messages.
 */
import { Signal } from '@lumino/signaling';

import { readFixture } from './fixtures';
import { LiveConnection, SERIES } from '../connection';
import { addMark, ICellRun, IMark, upsertCellRun } from '../history';
import { gapsIn } from '../timeline';

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
  connectionStatus = 'connected';
  supportsSubshells = false;
  info: Promise<unknown> = Promise.resolve({});
  iopubMessage = new Signal<this, any>(this);
  anyMessage = new Signal<this, any>(this);
  comms: FakeComm[] = [];
  isDisposed = false;
  subshellId: string | null = null;
  username = 'user';
  clientId = 'client';
  /** Control requests sent (msg_type, content), and the answers the kernel gives. */
  control: Array<[string, any]> = [];
  answers: { [msgType: string]: unknown } = {};
  clones: FakeKernel[] = [];
  /** What @jupyterlab/services does with a comm_open from the kernel for a target it lacks. */
  foreignCommsClosed = 0;
  async _handleCommOpen(_msg: unknown): Promise<void> {
    this.foreignCommsClosed++;
  }
  sendControlMessage(msg: any): any {
    this.control.push([msg.header.msg_type, msg.content]);
    const future: any = { done: new Promise(noop), dispose: noop };
    const answer = this.answers[msg.header.msg_type];
    if (answer !== undefined) {
      setTimeout(() => future.onReply({ content: answer }), 0);
    }
    return future;
  }
  clone(): FakeKernel {
    const clone = new FakeKernel(this.id);
    this.clones.push(clone);
    return clone;
  }
  dispose(): void {
    this.isDisposed = true;
  }
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

  it('keeps each series in time order when a live sample is overtaken', async () => {
    const kernel = new FakeKernel('k1');
    const { connection } = await attached(kernel);
    const newer = data('sample_cpu_host.json');
    // The kernel samples on its sampler thread and, for a page that just asked, on another:
    // the older of two samples can arrive second.
    const older = {
      ...newer,
      ts: newer.ts - 0.4,
      seq: newer.seq - 1,
      rss_bytes: 1
    };
    kernel.comm.receive(newer);
    kernel.comm.receive(older);
    const times = connection.history.points(SERIES.rss).map(p => p.ts);
    expect(times).toEqual([newer.ts]);
    expect(connection.latestSample?.ts).toBe(newer.ts);
    // The same sample again (in a replay and live) is one point, too.
    kernel.comm.receive(newer);
    expect(connection.history.points(SERIES.rss)).toHaveLength(1);
    connection.dispose();
  });

  it('draws a silence of the kernel as a gap, and its regular ticks as a line', async () => {
    const kernel = new FakeKernel('k1');
    const { connection } = await attached(kernel);
    const base = data('sample_cpu_host.json');
    const at = (ts: number, interval_s: number) => ({
      ...base,
      ts,
      interval_s,
      seq: ts
    });
    // 1 Hz while nobody looked (replayed), then a 40 s silence (the kernel was stopped).
    [100, 101, 102.2, 103].forEach(ts => kernel.comm.receive(at(ts, 1)));
    kernel.comm.receive(at(143, 1));
    const points = connection.history.points(SERIES.rss);
    expect(points.map(p => p.value === null)).toEqual([
      false,
      false,
      false,
      false,
      true,
      false
    ]);
    expect(gapsIn(points)).toEqual([{ from: 103, to: 143 }]);
    // The panel's 0.2 s ticks after a replay at 1 Hz: no gap where the slower one spaced them.
    kernel.comm.receive(at(144, 0.2));
    kernel.comm.receive(at(144.2, 0.2));
    expect(gapsIn(connection.history.points(SERIES.rss))).toHaveLength(1);
    connection.dispose();
  });

  it("shows a kernel's last view at once when the user comes back to it", async () => {
    const first = new FakeKernel('k1');
    const { connection, session } = await attached(first);
    const sample = data('sample_cpu_host.json');
    first.comm.receive(sample);
    const second = new FakeKernel('k2');
    connection.setSessionContext(new FakeSession(second) as any);
    // Another kernel, not seen before: nothing to show but "Connecting…".
    expect(connection.lastView).toBeNull();
    expect(connection.latestSample).toBeNull();
    await settle();
    second.comm.receive(hello(5000));
    second.comm.receive({ ...sample, ts: sample.ts + 5, rss_bytes: 1 });

    // Back to the first: its own pid with its own numbers until it answers, never k2's.
    connection.setSessionContext(session as any);
    expect(connection.state.kind).toBe('connecting');
    expect(connection.lastView?.pid).toBe(4242);
    expect(connection.latestSample).toBe(sample);
    await settle();
    first.comm.receive(hello(4242));
    expect(connection.lastView).toBeNull(); // connected: the live view
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
    // A restart is known as one once no 'autorestarting' (a death) followed in the same turn.
    await Promise.resolve();
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

describe('LiveConnection and `%load_ext kerasmagic` run as the panel opens', () => {
  const cellEnded = (kernel: FakeKernel) =>
    kernel.iopubMessage.emit({
      header: { msg_type: 'status' },
      parent_header: { msg_type: 'execute_request' },
      content: { execution_state: 'idle' }
    });
  const closeFromKernel = (kernel: FakeKernel) =>
    kernel.comm.onClose({ content: { comm_id: kernel.comm.commId, data: {} } });

  async function openedDuringACell() {
    const kernel = new FakeKernel('k1');
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setSessionContext(new FakeSession(kernel) as any);
    await settle();
    expect(kernel.comms).toHaveLength(1);
    return { kernel, connection };
  }

  it('opens again when the refusal arrives after the cell that loaded it ended', async () => {
    // The refusal (sent before `%load_ext` registered the target) and the cell's idle come
    // over two websockets where the comm is on a subshell: the idle may come first.
    const { kernel, connection } = await openedDuringACell();
    cellEnded(kernel);
    expect(connection.state.kind).toBe('connecting'); // still waiting for the answer
    closeFromKernel(kernel);
    await settle();
    expect(kernel.comms).toHaveLength(2);
    kernel.comm.receive(hello(4242));
    expect(connection.state.kind).toBe('connected');
    connection.dispose();
  });

  it('says not loaded, once, where no cell ended since its open', async () => {
    const { kernel, connection } = await openedDuringACell();
    closeFromKernel(kernel);
    await settle();
    expect(connection.state.kind).toBe('not_loaded');
    expect(kernel.comms).toHaveLength(1);
    // ... and after a retry that is refused too, it stops there (no loop).
    cellEnded(kernel);
    await settle();
    expect(kernel.comms).toHaveLength(2);
    closeFromKernel(kernel);
    await settle();
    expect(connection.state.kind).toBe('not_loaded');
    expect(kernel.comms).toHaveLength(2);
    connection.dispose();
  });

  it('never opens again into a kernel that is going away', async () => {
    const { kernel, connection } = await openedDuringACell();
    cellEnded(kernel);
    kernel.status = 'autorestarting';
    closeFromKernel(kernel);
    await settle();
    expect(kernel.comms).toHaveLength(1);
    expect(connection.state.kind).toBe('not_loaded');
    connection.dispose();
  });
});

describe('LiveConnection and a kernel that dies', () => {
  const setStatus = (
    kernel: FakeKernel,
    session: FakeSession,
    status: string
  ) => {
    kernel.status = status;
    session.statusChanged.emit(status);
  };

  it("keeps the dead kernel's timeline, marks the death, and never calls it a restart", async () => {
    const kernel = new FakeKernel('k1');
    const { connection, session } = await attached(kernel);
    kernel.comm.receive(data('sample_cpu_host.json'));
    kernel.iopubMessage.emit({
      header: { msg_type: 'execute_input' },
      parent_header: { msg_type: 'execute_request' },
      content: { execution_count: 12 }
    });
    // What @jupyterlab/services does when the server says it restarted a dead kernel:
    // 'restarting' now, 'autorestarting' in a microtask it queued first.
    void Promise.resolve().then(() =>
      setStatus(kernel, session, 'autorestarting')
    );
    setStatus(kernel, session, 'restarting');
    await settle();
    const death = connection.death!;
    expect(death.executionCount).toBe(12);
    expect(death.text).toBeNull();
    expect(death.record!.history.points(SERIES.rss)).toHaveLength(1);
    expect(death.record!.marks.map(m => m.kind)).toEqual(['death']);
    // The new kernel's own record: empty, and no restart in it.
    expect(connection.history.points(SERIES.rss)).toHaveLength(0);
    expect(connection.restartedAt).toBeNull();
    expect(connection.marks).toEqual([]);

    // The next kernel loads kerasmagic and says why; the page shows it with the timeline.
    setStatus(kernel, session, 'idle');
    await settle();
    kernel.comm.receive(hello(5151));
    kernel.comm.receive({ ...data('postmortem.json'), execution_count: 12 });
    expect(connection.death!.text).toContain('out-of-memory killer');
    expect(connection.death!.record).toBe(death.record);
    connection.dismissDeath();
    expect(connection.death).toBeNull();
    // Said again by the same kernel to a new comm (a tab switch): it stays dismissed.
    kernel.comm.receive(data('postmortem.json'));
    expect(connection.death).toBeNull();
    connection.dispose();
  });

  it('names the cell this page sent when the kernel died before announcing it', async () => {
    const kernel = new FakeKernel('k1');
    const { connection, session } = await attached(kernel);
    const sent = (msgId: string, content: object = {}) =>
      kernel.anyMessage.emit({
        direction: 'send',
        msg: { header: { msg_id: msgId, msg_type: 'execute_request' }, content }
      });
    const received = (msgType: string, parentId: string) =>
      kernel.anyMessage.emit({
        direction: 'recv',
        msg: {
          header: { msg_type: msgType },
          parent_header: { msg_id: parentId }
        }
      });
    sent('a');
    kernel.iopubMessage.emit({
      header: { msg_type: 'execute_input' },
      parent_header: { msg_type: 'execute_request' },
      content: { execution_count: 2 }
    });
    received('execute_input', 'a');
    kernel.iopubMessage.emit({
      header: { msg_type: 'status' },
      parent_header: { msg_type: 'execute_request' },
      content: { execution_state: 'idle' }
    });
    received('execute_reply', 'a');
    // A silent request (a tool's) gets no In[n]; an aborted one is answered without running.
    sent('silent', { silent: true, store_history: false });
    sent('aborted');
    received('execute_reply', 'aborted');
    // The idle kernel killed from outside: no cell ran, none is named.
    setStatus(kernel, session, 'dead');
    await settle();
    expect(connection.death!.executionCount).toBeNull();
    connection.dispose();

    // `os._exit(1)` in the next cell, sent, and the kernel gone before its execute_input.
    const next = new FakeKernel('k2');
    const second = await attached(next);
    const again = (msgId: string) =>
      next.anyMessage.emit({
        direction: 'send',
        msg: {
          header: { msg_id: msgId, msg_type: 'execute_request' },
          content: {}
        }
      });
    again('b');
    next.iopubMessage.emit({
      header: { msg_type: 'execute_input' },
      parent_header: { msg_type: 'execute_request' },
      content: { execution_count: 2 }
    });
    next.anyMessage.emit({
      direction: 'recv',
      msg: {
        header: { msg_type: 'execute_reply' },
        parent_header: { msg_id: 'b' }
      }
    });
    next.iopubMessage.emit({
      header: { msg_type: 'status' },
      parent_header: { msg_type: 'execute_request' },
      content: { execution_state: 'idle' }
    });
    again('c');
    setStatus(next, second.session, 'dead');
    await settle();
    expect(second.connection.death!.executionCount).toBe(3);
    second.connection.dispose();
  });

  it('tells a death it did not see, from the next kernel alone (a page reloaded since)', async () => {
    const kernel = new FakeKernel('k1');
    const { connection } = await attached(kernel);
    kernel.comm.receive(data('postmortem.json'));
    expect(connection.death).toEqual({
      diedTs: data('postmortem.json').died_ts,
      executionCount: 12,
      text: data('postmortem.json').text,
      record: null
    });
    connection.dispose();
  });
});

describe("LiveConnection and the panel's visibility", () => {
  const visibility = (comm: FakeComm) =>
    comm.sent.filter((data: any) => data.method === 'visibility');

  // The kernel samples only for a visible panel. Shown while its open was on the way (as
  // when the panel is opened while `%load_ext` runs), the kernel must still hear of it.
  it('tells the kernel of a panel shown between the open and hello', async () => {
    const kernel = new FakeKernel('k1');
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setSessionContext(new FakeSession(kernel) as any);
    await settle();
    expect((kernel.comm.opened[0] as any).visible).toBe(false);
    connection.setVisible(true);
    kernel.comm.receive(hello(4242));
    expect(connection.state.kind).toBe('connected');
    expect(visibility(kernel.comm)).toEqual([
      { method: 'visibility', visible: true }
    ]);
    connection.dispose();
  });

  it('says nothing more where the open already said it', async () => {
    const kernel = new FakeKernel('k1');
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setVisible(true);
    connection.setSessionContext(new FakeSession(kernel) as any);
    await settle();
    expect((kernel.comm.opened[0] as any).visible).toBe(true);
    kernel.comm.receive(hello(4242));
    connection.setVisible(true);
    expect(visibility(kernel.comm)).toEqual([]);
    connection.setVisible(false);
    expect(visibility(kernel.comm)).toEqual([
      { method: 'visibility', visible: false }
    ]);
    connection.dispose();
  });
});

describe('LiveConnection and kernel subshells', () => {
  /** A kernel whose shell is busy (kernel.info waits) but whose control channel answers. */
  function busyKernelWithSubshells(): FakeKernel {
    const kernel = new FakeKernel('k1');
    kernel.status = 'busy';
    kernel.info = new Promise(noop); // kernel_info on the shell waits behind the cell
    kernel.answers = {
      kernel_info_request: { supported_features: ['kernel subshells'] },
      create_subshell_request: { status: 'ok', subshell_id: 'sub-1' }
    };
    return kernel;
  }

  /** Generous: the fallback below waits out the control timeout (3 s). */
  const waitFor = async (check: () => boolean) => {
    for (let i = 0; i < 500 && !check(); i++) {
      await new Promise(resolve => setTimeout(resolve, 20));
    }
    expect(check()).toBe(true);
  };

  it('opens the comm on a subshell asked for on the control channel', async () => {
    const kernel = busyKernelWithSubshells();
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setSessionContext(new FakeSession(kernel) as any);
    await waitFor(() => kernel.clones.length === 1);
    const clone = kernel.clones[0];
    await waitFor(() => clone.comms.length === 1);
    expect(kernel.control.map(([type]) => type)).toEqual([
      'kernel_info_request',
      'create_subshell_request'
    ]);
    expect(kernel.comms).toHaveLength(0); // nothing on the main shell
    expect(clone.subshellId).toBe('sub-1');
    expect(clone.comm.opened).toHaveLength(1);
    // A widget the kernel opens later is the notebook connection's: the clone leaves it open.
    await (clone as any)._handleCommOpen({
      content: { target_name: 'jupyter.widget' }
    });
    expect(clone.foreignCommsClosed).toBe(0);
    clone.comm.receive(hello(4242));
    expect(connection.state.kind).toBe('connected');
    expect(connection.subshellId).toBe('sub-1');

    // Re-attaching to the same kernel (e.g. not loaded, then %load_ext) keeps the subshell.
    clone.comm.onClose({ content: { comm_id: clone.comm.commId, data: {} } });
    expect(connection.state.kind).toBe('not_loaded');
    kernel.iopubMessage.emit({
      header: { msg_type: 'status' },
      parent_header: { msg_type: 'execute_request' },
      content: { execution_state: 'idle' }
    });
    await waitFor(() => clone.comms.length === 2);
    expect(kernel.clones).toHaveLength(1);

    // Following another notebook gives the subshell back.
    connection.setSessionContext(null);
    await waitFor(() => clone.isDisposed);
    expect(kernel.control.slice(-1)[0]).toEqual([
      'delete_subshell_request',
      { subshell_id: 'sub-1' }
    ]);
    connection.dispose();
  });

  it('holds its own messages while a cell runs, so the kernel never looks idle', async () => {
    const kernel = busyKernelWithSubshells();
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setSessionContext(new FakeSession(kernel) as any);
    connection.setVisible(true);
    await waitFor(() => kernel.clones.length === 1);
    const clone = kernel.clones[0];
    await waitFor(() => clone.comms.length === 1);
    clone.comm.receive(hello(4242));
    const status = (state: string) =>
      kernel.iopubMessage.emit({
        header: { msg_type: 'status' },
        parent_header: { msg_type: 'execute_request' },
        content: { execution_state: state }
      });
    status('busy');
    const methods = () => clone.comm.sent.map((data: any) => data.method);
    const before = methods().length;
    connection.setVisible(false);
    connection.configure({ intervalS: 2, historyMinutes: 5 });
    connection.configure({ intervalS: 3, historyMinutes: 5 });
    expect(methods()).toHaveLength(before); // each would flip the kernel to idle
    status('idle');
    expect(methods().slice(before)).toEqual(['visibility', 'configure']);
    expect(clone.comm.sent.slice(-1)[0].interval_s).toBe(3); // the latest of each kind

    // Showing the panel during a cell cannot wait: the kernel's sampler must wake now, and a
    // held `visible: false` must not follow it when the cell ends.
    status('busy');
    connection.setVisible(false);
    const during = methods().length;
    connection.setVisible(true);
    expect(methods().slice(during)).toEqual(['visibility']);
    expect(clone.comm.sent.slice(-1)[0].visible).toBe(true);
    status('idle');
    expect(methods()).toHaveLength(during + 1);
    connection.dispose();
  });

  it('uses the main shell where the kernel has no subshells or the user said no', async () => {
    const plain = new FakeKernel('k1');
    plain.answers = {
      kernel_info_request: { supported_features: [] }
    };
    plain.info = new Promise(noop);
    const first = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    first.setSessionContext(new FakeSession(plain) as any);
    await waitFor(() => plain.comms.length === 1);
    expect(plain.clones).toEqual([]);
    expect(plain.control.map(([type]) => type)).toEqual([
      'kernel_info_request'
    ]);
    first.dispose();

    const refused = busyKernelWithSubshells();
    (refused as any).commsOverSubshells = 'disabled';
    const second = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    second.setSessionContext(new FakeSession(refused) as any);
    await waitFor(() => refused.comms.length === 1);
    expect(refused.control).toEqual([]);
    second.dispose();
  });

  /** ipykernel 6 during a cell: no subshells; its control channel answers kernel_info. */
  function busyIpykernel6(): FakeKernel {
    const kernel = new FakeKernel('k6');
    kernel.status = 'busy';
    kernel.info = new Promise(noop); // after a reload, kernel_info on the shell waits
    kernel.answers = {
      kernel_info_request: {
        implementation: 'ipython',
        implementation_version: '8.18.1', // IPython's version, not ipykernel's
        supported_features: []
      }
    };
    return kernel;
  }

  const iopub = (kernel: FakeKernel, msgType: string, content: unknown) =>
    kernel.iopubMessage.emit({
      header: { msg_type: msgType },
      parent_header: { msg_type: 'execute_request' },
      content
    });

  it('says which cell it waits for while ipykernel 6 runs one, then goes live', async () => {
    const kernel = busyIpykernel6();
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setSessionContext(new FakeSession(kernel) as any);
    await waitFor(() => kernel.comms.length === 1);
    expect(kernel.clones).toEqual([]);
    expect(connection.state).toEqual({
      kind: 'waiting',
      executionCount: null,
      reason: 'no_subshells',
      kernelImplementation: 'ipython'
    });
    // The next cell starts: the kernel numbers it on IOPub (the notebook shows [*]).
    iopub(kernel, 'execute_input', {
      code: 'time.sleep(20)',
      execution_count: 7
    });
    expect(connection.state).toMatchObject({
      kind: 'waiting',
      executionCount: 7
    });
    iopub(kernel, 'status', { execution_state: 'idle' });
    kernel.comm.receive(hello(4242)); // answered once the cell ended
    expect(connection.state.kind).toBe('connected');
    connection.dispose();
  });

  it('names a cell it saw start before its open went out (%load_ext, then a long cell)', async () => {
    const kernel = busyIpykernel6();
    kernel.status = 'idle';
    kernel.info = Promise.resolve({
      implementation: 'ipython',
      implementation_version: '8.18.1', // IPython's version, not ipykernel's
      supported_features: []
    });
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setSessionContext(new FakeSession(kernel) as any);
    iopub(kernel, 'execute_input', { code: 'fit()', execution_count: 2 });
    await waitFor(() => kernel.comms.length === 1);
    expect(kernel.control).toEqual([]); // kernel.info had answered
    expect(connection.state).toMatchObject({
      kind: 'waiting',
      executionCount: 2
    });
    connection.dispose();
  });

  it('says the kernel is busy after a silent second where the page saw no cell start', async () => {
    const win = (global as any).window;
    const saved = win.setTimeout;
    const timers: Array<[() => void, number]> = [];
    win.setTimeout = (callback: () => void, ms: number) => {
      timers.push([callback, ms]);
      return 0;
    };
    try {
      const kernel = busyIpykernel6();
      kernel.status = 'idle'; // a reloaded page has not heard the kernel say busy
      const connection = new LiveConnection({
        intervalS: 1,
        historyMinutes: 5
      });
      connection.setSessionContext(new FakeSession(kernel) as any);
      await waitFor(() => kernel.comms.length === 1);
      expect(connection.state.kind).toBe('connecting');
      const silent = timers.find(([, ms]) => ms === 1000);
      expect(silent).toBeDefined();
      silent![0]();
      expect(connection.state).toMatchObject({
        kind: 'waiting',
        executionCount: null
      });
      // The page thinks the kernel idle (a reload saw no status): the open is sent again,
      // the panel keeps saying it waits, and the next retry comes later (each one queues an
      // open and a close behind the cell).
      const retry = timers.find(([, ms]) => ms === 10_000);
      expect(retry).toBeDefined();
      timers.length = 0;
      retry![0]();
      await waitFor(() => kernel.comms.length === 2);
      expect(kernel.comms[0].isDisposed).toBe(true);
      expect(connection.state.kind).toBe('waiting');
      expect(timers.map(([, ms]) => ms)).toContain(20_000);

      kernel.comm.receive(hello(4242));
      expect(connection.state.kind).toBe('connected');
      silent![0](); // a late timer never turns a live view back
      expect(connection.state.kind).toBe('connected');
      connection.dispose();

      // A kernel still starting says nothing about a cell: "Connecting…" stays.
      const starting = busyIpykernel6();
      starting.status = 'starting';
      const third = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
      timers.length = 0;
      third.setSessionContext(new FakeSession(starting) as any);
      await waitFor(() => starting.comms.length === 1);
      const silence = () => timers.filter(([, ms]) => ms === 1000);
      expect(silence()).toHaveLength(1);
      silence()[0][0]();
      expect(third.state.kind).toBe('connecting');
      expect(silence()).toHaveLength(2); // it looks again
      starting.status = 'busy';
      silence()[1][0]();
      expect(third.state.kind).toBe('waiting');
      third.dispose();

      // A cell that starts just after the open went out (Run All) is named at once.
      const next = busyIpykernel6();
      next.status = 'idle';
      const second = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
      second.setSessionContext(new FakeSession(next) as any);
      await waitFor(() => next.comms.length === 1);
      expect(second.state.kind).toBe('connecting');
      iopub(next, 'execute_input', { code: 'fit()', execution_count: 3 });
      expect(second.state).toMatchObject({
        kind: 'waiting',
        executionCount: 3
      });
      second.dispose();
    } finally {
      win.setTimeout = saved;
    }
  });

  it('keeps the comm on the main shell where JupyterLab has no subshell API (4.0 to 4.3)', async () => {
    const kernel = busyKernelWithSubshells(); // ipykernel 7: it has subshells
    // What @jupyterlab/services before 7.4 lacks: a subshellId set there would be ignored.
    delete (kernel as any).subshellId;
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setSessionContext(new FakeSession(kernel) as any);
    await waitFor(() => kernel.comms.length === 1);
    expect(kernel.clones).toEqual([]);
    expect(kernel.control.map(([type]) => type)).toEqual([
      'kernel_info_request'
    ]);
    expect(connection.state).toMatchObject({
      kind: 'waiting',
      reason: 'frontend'
    });
    expect(connection.subshellId).toBeNull();
    connection.dispose();
  });

  it('falls back to the main shell when the control channel does not answer', async () => {
    const silent = new FakeKernel('k1');
    silent.info = new Promise(noop);
    const connection = new LiveConnection({ intervalS: 1, historyMinutes: 5 });
    connection.setSessionContext(new FakeSession(silent) as any);
    await waitFor(() => silent.comms.length === 1); // after the control timeout
    expect(silent.clones).toEqual([]);
    expect(connection.state).toMatchObject({ kind: 'connecting' });

    // No answer is no verdict (a kernel still starting drops control requests): the next
    // attach, here after `%load_ext`, asks again.
    silent.comm.onClose({ content: { comm_id: silent.comm.commId, data: {} } });
    expect(connection.state.kind).toBe('not_loaded');
    silent.answers = {
      kernel_info_request: { implementation: 'ipython', supported_features: [] }
    };
    silent.status = 'busy';
    silent.iopubMessage.emit({
      header: { msg_type: 'status' },
      parent_header: { msg_type: 'execute_request' },
      content: { execution_state: 'idle' }
    });
    await waitFor(() => silent.comms.length === 2);
    expect(silent.control.map(([type]) => type)).toEqual([
      'kernel_info_request',
      'kernel_info_request'
    ]);
    expect(connection.state).toMatchObject({
      kind: 'waiting',
      reason: 'no_subshells',
      kernelImplementation: 'ipython'
    });
    connection.dispose();
  });
});
