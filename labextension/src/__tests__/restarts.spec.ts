import { RestartMemory } from '../restarts';

class FakeStorage {
  items = new Map<string, string>();
  getItem(key: string): string | null {
    return this.items.get(key) ?? null;
  }
  setItem(key: string, value: string): void {
    this.items.set(key, value);
  }
}

describe('RestartMemory', () => {
  it("recalls a notebook's restart for the kernel it started, not for a later one", () => {
    const storage = new FakeStorage();
    new RestartMemory(storage).remember('a.ipynb', {
      pid: 42,
      ts: 1763900000,
      at: 1763900000500
    });
    // A new page (a reload) reads what the old one wrote.
    const memory = new RestartMemory(storage);
    expect(memory.recall('a.ipynb', 42)).toEqual({
      pid: 42,
      ts: 1763900000,
      at: 1763900000500
    });
    expect(memory.recall('a.ipynb', 43)).toBeNull();
    expect(memory.recall('b.ipynb', 42)).toBeNull();
  });

  it('keeps the last restart of each notebook, and at most 20 notebooks', () => {
    const storage = new FakeStorage();
    const memory = new RestartMemory(storage);
    memory.remember('a.ipynb', { pid: 1, ts: 1, at: 1 });
    memory.remember('a.ipynb', { pid: 2, ts: 2, at: 2 });
    expect(memory.recall('a.ipynb', 1)).toBeNull();
    expect(memory.recall('a.ipynb', 2)?.ts).toBe(2);
    for (let i = 0; i < 25; i++) {
      memory.remember(`n${i}.ipynb`, { pid: 100 + i, ts: i, at: i });
    }
    expect(memory.recall('a.ipynb', 2)).toBeNull();
    expect(memory.recall('n4.ipynb', 104)).toBeNull();
    expect(memory.recall('n5.ipynb', 105)?.ts).toBe(5);
    expect(JSON.parse(storage.items.get('kerasmagic:restarts')!)).toHaveLength(
      20
    );
  });

  it('reads nothing from a missing, broken or foreign value', () => {
    expect(new RestartMemory(null).recall('a.ipynb', 1)).toBeNull();
    const storage = new FakeStorage();
    storage.setItem('kerasmagic:restarts', '{not json');
    expect(new RestartMemory(storage).recall('a.ipynb', 1)).toBeNull();
    storage.setItem('kerasmagic:restarts', JSON.stringify([['a.ipynb', {}]]));
    expect(new RestartMemory(storage).recall('a.ipynb', 1)).toBeNull();
  });
});
