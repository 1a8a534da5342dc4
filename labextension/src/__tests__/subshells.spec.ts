/**
 * LiveConnection's comm over a kernel subshell (JEP 91) and its fallbacks to the main shell,
 * against a fake kernel whose control channel answers as ipykernel 7 does.
 */
import { noop, FakeKernel, FakeSession, hello } from './fakekernel';
import { LiveConnection } from '../connection';

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
