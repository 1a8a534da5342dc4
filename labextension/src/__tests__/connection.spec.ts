/**
 * LiveConnection's handling of protocol 1.3 (cell_run, history, cpu_pct, host), its
 * per-kernel records, deaths and the panel's visibility, against a fake kernel whose comm we
 * feed with fixture messages.
 */
import {
  data,
  FakeComm,
  FakeKernel,
  FakeSession,
  settle,
  hello,
  attached
} from './fakekernel';
import { LiveConnection, SERIES } from '../connection';
import { gapsIn } from '../timeline';

describe('LiveConnection with a 1.3 kernel', () => {
  it('keeps cell runs, marks, host and CPU per kernel', async () => {
    const kernel = new FakeKernel('k1');
    const { connection } = await attached(kernel);
    const parts: string[] = [];
    connection.store.changed.connect((_, change) => parts.push(change.part));

    kernel.comm.receive(data('history.json'));
    // A replay is samples and runs: the sections that draw neither stay as they are.
    expect(parts).toEqual(['samples', 'runs']);
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
    expect(parts).toEqual([
      'samples',
      'runs',
      'runs', // cell_run
      'samples', // sample
      'runs', // event: a mark,
      'clear' // and the Clear section's "Last event"
    ]);

    // The same history again (switched away and back): nothing doubles.
    kernel.comm.receive(data('history.json'));
    expect(connection.history.points(SERIES.rss)).toHaveLength(3);
    expect(connection.cellRuns).toHaveLength(2);
    expect(connection.cellRuns[1].status).toBe('error');
    expect(connection.marks).toHaveLength(2);
    connection.dispose();
  });
});

describe('LiveConnection with a 1.3 kernel', () => {
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
});

describe('LiveConnection with a 1.3 kernel', () => {
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

  it("says every switch, and never with the last kernel's pid or figures", async () => {
    const first = new FakeKernel('k1');
    const { connection, session } = await attached(first);
    first.comm.receive(data('sample_cpu_host.json'));
    // What the panel would draw at each state change: whose view, which pid, which sample.
    const frames: Array<[string, number | null, number | null]> = [];
    connection.stateChanged.connect(() =>
      frames.push([
        connection.kernelId,
        connection.lastView?.pid ?? null,
        connection.latestSample?.seq ?? null
      ])
    );
    connection.setSessionContext(new FakeSession(new FakeKernel('k2')) as any);
    expect(frames.length).toBeGreaterThan(0);
    frames.forEach(frame => expect(frame).toEqual(['k2', null, null]));
    // Back to k1 while the state stays `connecting`: said all the same, with k1's own view.
    frames.length = 0;
    connection.setSessionContext(session as any);
    expect(frames.slice(-1)).toEqual([['k1', 4242, expect.any(Number)]]);
    connection.dispose();
  });
});

describe('LiveConnection with a 1.3 kernel', () => {
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

const setStatus = (
  kernel: FakeKernel,
  session: FakeSession,
  status: string
) => {
  kernel.status = status;
  session.statusChanged.emit(status);
};

describe('LiveConnection and a kernel that dies', () => {
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
});

describe('LiveConnection and a kernel that dies', () => {
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
});

describe('LiveConnection and a kernel that dies', () => {
  it('tells a death it did not see, from the next kernel alone (a page reloaded since)', async () => {
    const kernel = new FakeKernel('k1');
    const { connection } = await attached(kernel);
    kernel.comm.receive(data('postmortem.json'));
    expect(connection.death).toEqual({
      diedTs: data('postmortem.json').died_ts,
      executionCount: 12,
      text: data('postmortem.json').text,
      timeInText: true,
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
