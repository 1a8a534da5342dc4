/**
 * A fake kernel, session and comm for LiveConnection's specs: the comm is fed fixture
 * messages (tests/protocol_fixtures) as the kernel would send them.
 */
import { Signal } from '@lumino/signaling';

import { readFixture } from './fixtures';
import { LiveConnection } from '../connection';

// LiveConnection listens to page visibility and unload; jest runs without a DOM.
export const noop = () => undefined;
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

export const data = (name: string) => readFixture(name).data;

export class FakeComm {
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

export class FakeKernel {
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

export class FakeSession {
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
export const settle = () => new Promise(resolve => setTimeout(resolve, 0));

export function hello(pid: number, ts = 1763800000.0) {
  return { ...data('hello.json'), pid, ts };
}

export async function attached(kernel: FakeKernel) {
  const connection = new LiveConnection({ intervalS: 1, historyMinutes: 15 });
  const session = new FakeSession(kernel);
  connection.setSessionContext(session as any);
  await settle();
  kernel.comm.receive(hello(4242));
  expect(connection.state.kind).toBe('connected');
  return { connection, session };
}
