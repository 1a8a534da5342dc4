import { IWaitingState } from '../connection';
import { IWording, waitingNotice } from '../waiting';

/** What nullTranslator does: %1, %2 … replaced in order; every msgid is recorded. */
const msgids: string[] = [];
const trans: IWording = {
  __: (msgid: string, ...args: any[]) => {
    msgids.push(msgid);
    return msgid.replace(/%(\d+)/g, (_, n) => String(args[Number(n) - 1]));
  }
};

function state(overrides: Partial<IWaitingState>): IWaitingState {
  return {
    kind: 'waiting',
    executionCount: null,
    reason: 'no_subshells',
    kernelImplementation: null,
    ...overrides
  };
}

describe('waitingNotice', () => {
  it('names the running cell where the page knows it', () => {
    const notice = waitingNotice(
      state({ executionCount: 12, kernelImplementation: 'ipython' }),
      trans
    );
    expect(notice.title).toBe(
      'Waiting for the kernel: it answers after cell [12] ends'
    );
    expect(notice.hint).toBe(
      'This kernel (ipykernel 6 or older) has no subshells, so it handles the panel between cells: the live view starts when the cell ends.'
    );
    // Another kernel is named as its kernel info names itself.
    expect(
      waitingNotice(state({ kernelImplementation: 'xpython' }), trans).hint
    ).toMatch(/^This kernel \(xpython\) has no subshells/);
  });

  it('says "the running cell" where the page missed its start (a reload)', () => {
    const notice = waitingNotice(state({}), trans);
    expect(notice.title).toBe(
      'Waiting for the kernel: it answers after the running cell ends'
    );
    expect(notice.hint).toMatch(/^This kernel has no subshells/);
  });

  it('gives each reason its own explanation, every string translated', () => {
    msgids.length = 0;
    const hints = (
      ['no_subshells', 'frontend', 'disabled', 'no_answer'] as const
    ).map(reason => waitingNotice(state({ reason }), trans).hint);
    expect(new Set(hints).size).toBe(4);
    expect(hints[1]).toMatch(/JupyterLab 4\.4 and later/);
    expect(hints[2]).toMatch(/commsOverSubshells/);
    // Title and hint of each: nothing user-facing bypasses the translator.
    expect(msgids).toHaveLength(8);
    hints.forEach(hint => expect(msgids).toContain(hint));
  });
});
