import {
  IExecutionStatus,
  IFrame,
  cellFramesFirst,
  cellNumberOf,
  countdowns,
  formatBytes,
  formatSeconds,
  isRisky,
  labelDumpedFrames,
  phaseOf,
  statusAtStart,
  viewOf
} from '../state';

function status(fields: Partial<IExecutionStatus> = {}): IExecutionStatus {
  return {
    msg_id: 'm1',
    subshell_id: null,
    first_line: 'while True:',
    elapsed: 0,
    seconds_since_output: 0,
    wall_budget: 0,
    quiet_budget: 0,
    memory_budget: null,
    memory_start: null,
    interrupts_sent: 0,
    cancel_reason: null,
    state: 'running',
    where: null,
    line: null,
    ...fields
  };
}

function frame(label: string, lineno: number, filename = '/tmp/ipykernel_1/123.py'): IFrame {
  return { filename, lineno, name: '<module>', line: '', label, user: true };
}

describe('phaseOf', () => {
  it('is queued until the cell starts, whatever else is known', () => {
    expect(phaseOf(false, null, false)).toBe('queued');
  });
  it('says a queued cell whose stop the kernel took is cancelled: it will not run', () => {
    expect(phaseOf(false, null, true, null, true)).toBe('cancelled');
    expect(viewOf('cancelled').label).toContain('will not run');
  });
  it('says the kernel does not answer before anything the last status said', () => {
    expect(phaseOf(true, status({ state: 'cancelling' }), false)).toBe('not-answering');
  });
  it('maps the kernel states and the events', () => {
    expect(phaseOf(true, status(), true)).toBe('running');
    expect(phaseOf(true, null, true)).toBe('running');
    expect(phaseOf(true, status({ state: 'cancelling' }), true)).toBe('cancelling');
    expect(phaseOf(true, status({ state: 'unresponsive-to-interrupt' }), true)).toBe('unresponsive');
    expect(phaseOf(true, status(), true, 'abandoned')).toBe('unresponsive');
    expect(phaseOf(true, status(), true, 'runaway')).toBe('running');
  });
  it('gives every phase words and a longer accessible label', () => {
    const view = viewOf('not-answering');
    expect(view.text).toBe('the kernel does not answer');
    expect(view.label).toContain('hold the GIL');
  });
});

describe('formatting', () => {
  it('says seconds, minutes and hours', () => {
    expect(formatSeconds(0)).toBe('0 s');
    expect(formatSeconds(59.9)).toBe('59 s');
    expect(formatSeconds(65)).toBe('1 min 05 s');
    expect(formatSeconds(7380)).toBe('2 h 03 min');
    expect(formatSeconds(-3)).toBe('0 s');
  });
  it('says sizes in powers of 1024', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(512 * 2 ** 20)).toBe('512 MiB');
    expect(formatBytes(1.5 * 2 ** 30)).toBe('1.5 GiB');
  });
});

describe('countdowns', () => {
  it('counts the wall and quiet budgets down from the last status, on the local clock', () => {
    const found = countdowns(status({ wall_budget: 20, elapsed: 5, quiet_budget: 10, seconds_since_output: 2 }), 3, null);
    expect(found.map(c => c.text)).toEqual(['wall budget: 12 s left', 'quiet budget: 5 s left']);
    expect(found[0].left).toBeCloseTo(12 / 20);
  });
  it('says a budget passed, never a negative time', () => {
    const [wall] = countdowns(status({ wall_budget: 2, elapsed: 1.5 }), 1, null);
    expect(wall.text).toBe('wall budget passed');
    expect(wall.left).toBe(0);
  });
  it('shows the memory budget as growth since the cell began, once the kernel said its resident set', () => {
    const cell = status({ memory_budget: 2 ** 30, memory_start: 100 * 2 ** 20 });
    expect(countdowns(cell, 0, null)).toEqual([]);
    const [memory] = countdowns(cell, 0, 612 * 2 ** 20);
    expect(memory.text).toBe('memory budget: 512 MiB of 1 GiB used');
    expect(memory.left).toBeCloseTo(0.5);
  });
  it('has nothing to count without budgets', () => {
    expect(countdowns(status(), 100, 10)).toEqual([]);
  });
});

describe('statusAtStart', () => {
  it('counts a budgeted cell down from its started event before any status answered', () => {
    const start = statusAtStart(
      { event: 'started', execution: 'm9', elapsed: 0.01, wall_budget: 2, quiet_budget: 0, memory_budget: null },
      '%%budget wall=2'
    );
    expect(start.msg_id).toBe('m9');
    expect(start.state).toBe('running');
    expect(countdowns(start, 0.99, null).map(c => c.text)).toEqual(['wall budget: 1 s left']);
    expect(countdowns(start, 5, null).map(c => c.text)).toEqual(['wall budget passed']);
  });
  it('counts quiet from the start too, and memory not until the kernel says its resident set', () => {
    const start = statusAtStart(
      { event: 'started', execution: 'm9', elapsed: 0, wall_budget: 0, quiet_budget: 10, memory_budget: 1024 },
      ''
    );
    expect(countdowns(start, 3, null).map(c => c.text)).toEqual(['quiet budget: 7 s left']);
  });
});

describe('stacks', () => {
  it('puts the cell frames first and keeps their order', () => {
    const frames = [frame('Cell In[2]', 1), frame('/home/me/lib.py', 9, '/home/me/lib.py'), frame('Cell In[1]', 3)];
    expect(cellFramesFirst(frames).map(f => f.label)).toEqual(['Cell In[2]', 'Cell In[1]', '/home/me/lib.py']);
    expect(cellNumberOf(frames[0])).toBe(2);
    expect(cellNumberOf(frames[1])).toBeNull();
  });
  it('labels a dump by names the kernel gave before, else its innermost unnamed cell as the running cell', () => {
    const known = new Map([['/tmp/ipykernel_1/1.py', 'Cell In[1]']]);
    const dumped = [frame('/tmp/ipykernel_1/1.py', 3, '/tmp/ipykernel_1/1.py'), frame('/tmp/ipykernel_1/7.py', 2, '/tmp/ipykernel_1/7.py')];
    dumped.forEach(f => (f.label = f.filename));
    expect(labelDumpedFrames(dumped, known, 'Cell In[4]').map(f => f.label)).toEqual(['Cell In[1]', 'Cell In[4]']);
  });
});

describe('isRisky', () => {
  it('follows the agent client: risky unless it completed quickly before and was never interrupted', () => {
    expect(isRisky(undefined, 1)).toBe(true);
    expect(isRisky({ longest: 0.2, interrupted: false }, 1)).toBe(false);
    expect(isRisky({ longest: 3, interrupted: false }, 1)).toBe(true);
    expect(isRisky({ longest: 0.2, interrupted: true }, 1)).toBe(true);
  });
});
