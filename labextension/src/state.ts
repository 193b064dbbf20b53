/**
 * What the extension shows for one execution: pure functions of what the kernel said, unit-tested in
 * src/__tests__ (no DOM, no JupyterLab).
 */

/** One frame of a stack, as the kernel sends it (docs/protocol.md, "execute_reply metadata"), innermost last. */
export interface IFrame {
  filename: string;
  lineno: number;
  name: string;
  line: string;
  label: string;
  user: boolean;
}

/** One running execution in cancel_status_reply (docs/protocol.md, "Cancel status"). */
export interface IExecutionStatus {
  msg_id: string;
  subshell_id: string | null;
  first_line: string;
  elapsed: number;
  seconds_since_output: number;
  wall_budget: number;
  quiet_budget: number;
  memory_budget: number | null;
  memory_start: number | null;
  interrupts_sent: number;
  cancel_reason: string | null;
  state: 'running' | 'cancelling' | 'unresponsive-to-interrupt';
  where: string | null;
  line: string | null;
  stack?: IFrame[];
}

/** The kernel's `started` event (docs/protocol.md, "Events"): a budgeted cell's budgets as it begins. */
export interface IStartedEvent {
  event: 'started';
  execution: string;
  elapsed: number;
  wall_budget: number;
  quiet_budget: number;
  memory_budget: number | null;
}

/**
 * What a page knows of a budgeted cell before any status answered: its budgets, at `elapsed`.
 *
 * A cell whose one C call holds the GIL from its first line never answers a status request, so
 * without this its countdown would never appear.
 */
export function statusAtStart(event: IStartedEvent, firstLine: string): IExecutionStatus {
  return {
    msg_id: event.execution,
    subshell_id: null,
    first_line: firstLine,
    elapsed: event.elapsed,
    seconds_since_output: event.elapsed,
    wall_budget: event.wall_budget || 0,
    quiet_budget: event.quiet_budget || 0,
    memory_budget: event.memory_budget,
    memory_start: null,
    interrupts_sent: 0,
    cancel_reason: null,
    state: 'running',
    where: null,
    line: null
  };
}

/** Where one execution is, as a person sees it. */
export type Phase = 'queued' | 'cancelled' | 'running' | 'cancelling' | 'unresponsive' | 'not-answering';

/** What the page shows for a phase: the words, and the longer accessible label. */
export interface IPhaseView {
  phase: Phase;
  text: string;
  label: string;
}

/** The kernel's events that change what a cell shows (the `event` field of the iopub transient). */
export type NotedEvent = 'runaway' | 'unresponsive' | 'abandoned' | 'stack' | 'memory';

const PHASE_TEXT: Record<Phase, [string, string]> = {
  queued: ['queued', 'queued: waits for the cell before it'],
  cancelled: ['cancelled', 'cancelled: it will not run'],
  running: ['running', 'running'],
  cancelling: ['stopping', 'interrupted: stopping'],
  unresponsive: ['not stopping', 'interrupted, but still running: the interrupt did not take'],
  'not-answering': [
    'the kernel does not answer',
    'the kernel does not answer: one C call may hold the GIL'
  ]
};

/**
 * The phase of an execution.
 *
 * `answering` is false when the kernel's control channel let a status request go unanswered for
 * the grace period while this cell ran: only a held GIL keeps it silent that long.
 * `cancelledBeforeStart`: the kernel said this queued cell's interrupt is pending (it will not run).
 */
export function phaseOf(
  started: boolean,
  status: IExecutionStatus | null,
  answering: boolean,
  noted: NotedEvent | null = null,
  cancelledBeforeStart = false
): Phase {
  if (!started) {
    return cancelledBeforeStart ? 'cancelled' : 'queued';
  }
  if (!answering) {
    return 'not-answering';
  }
  if (status?.state === 'unresponsive-to-interrupt' || noted === 'unresponsive' || noted === 'abandoned') {
    return 'unresponsive';
  }
  if (status?.state === 'cancelling') {
    return 'cancelling';
  }
  return 'running';
}

export function viewOf(phase: Phase): IPhaseView {
  const [text, label] = PHASE_TEXT[phase];
  return { phase, text, label };
}

/** "7 s", "1 min 05 s", "2 h 03 min": whole seconds, for a clock that ticks once a second. */
export function formatSeconds(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  }
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}

/** "512 MiB", "1.5 GiB": powers of 1024, as the kernel's own notes say sizes. */
export function formatBytes(size: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = Math.max(0, size);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = unit === 0 || value >= 100 ? 0 : value >= 10 ? 1 : 2;
  return `${Number(value.toFixed(digits))} ${units[unit]}`;
}

/** One budget as a countdown: what is left (a fraction of the budget, for a bar) and its words. */
export interface ICountdown {
  budget: 'wall' | 'quiet' | 'memory';
  left: number;
  text: string;
}

/**
 * The budgets of an execution as countdowns, from a status `since` seconds old.
 *
 * Wall and quiet count down locally between polls (the clock runs on); memory is as of the last
 * status (it needs the kernel's resident set, `resident`, from the same reply).
 */
export function countdowns(status: IExecutionStatus, since: number, resident: number | null): ICountdown[] {
  const found: ICountdown[] = [];
  if (status.wall_budget > 0) {
    found.push(timeLeft('wall', status.wall_budget, status.elapsed + since));
  }
  if (status.quiet_budget > 0) {
    found.push(timeLeft('quiet', status.quiet_budget, status.seconds_since_output + since));
  }
  if (status.memory_budget && status.memory_start !== null && resident !== null) {
    const grown = Math.max(0, resident - status.memory_start);
    found.push({
      budget: 'memory',
      left: clamp(1 - grown / status.memory_budget),
      text: `memory budget: ${formatBytes(grown)} of ${formatBytes(status.memory_budget)} used`
    });
  }
  return found;
}

/** A time budget of `budget` seconds of which `used` have passed. */
function timeLeft(budget: 'wall' | 'quiet', seconds: number, used: number): ICountdown {
  const left = seconds - used;
  return {
    budget,
    left: clamp(left / seconds),
    text: left > 0 ? `${budget} budget: ${formatSeconds(Math.ceil(left))} left` : `${budget} budget passed`
  };
}

function clamp(fraction: number): number {
  return Math.min(1, Math.max(0, fraction));
}

/** The cell's own frames first (innermost last within each group), then the user's files. */
export function cellFramesFirst(frames: IFrame[]): IFrame[] {
  const isCell = (f: IFrame) => f.label.startsWith('Cell In[');
  return [...frames.filter(isCell), ...frames.filter(f => !isCell(f))];
}

/** The execution count in a frame's label ("Cell In[12]" -> 12), or null for a file's frame. */
export function cellNumberOf(frame: IFrame): number | null {
  const match = /^Cell In\[(\d+)\]/.exec(frame.label);
  return match ? Number(match[1]) : null;
}

/** An IPython cell's file name (what faulthandler prints for a cell's frame). */
export function isCellFile(filename: string): boolean {
  return /ipykernel_\d+[/\\]\d+\.py$|^<ipython-input-|^<cell/.test(filename);
}

/**
 * Frames read from a faulthandler dump (files and lines only) labelled as the kernel labels them:
 * by a file name the kernel named before (from an answered status), else, for the innermost frame
 * in an unnamed cell file, as the running cell `runningLabel`.
 */
export function labelDumpedFrames(frames: IFrame[], known: Map<string, string>, runningLabel: string | null): IFrame[] {
  const innermostCell = [...frames].reverse().find(f => isCellFile(f.filename) && !known.has(f.filename));
  return frames.map(f => {
    const label = known.get(f.filename) ?? (f === innermostCell && runningLabel ? runningLabel : f.label || f.filename);
    return { ...f, label };
  });
}

/**
 * Whether a cell needs a checkpoint before it runs ("before-risky"): risky unless it completed
 * before, faster than `riskyAfter` seconds, and was never interrupted (the agent client's rule).
 */
export function isRisky(history: { longest: number; interrupted: boolean } | undefined, riskyAfter: number): boolean {
  return history === undefined || history.interrupted || history.longest > riskyAfter;
}
