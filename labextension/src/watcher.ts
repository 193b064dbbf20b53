/**
 * One notebook's view of its kernel's running cells.
 *
 * Where the data comes from (docs/jupyterlab.md): the execute_requests the page sends (their
 * `metadata.cellId` names the cell), iopub (execute_input says a cell started, our events'
 * `transient` say what happened to it), and cancel_status_request on the control channel, polled
 * only while a cell of this notebook runs, at most once per `pollInterval`. Nothing is sent while
 * the kernel is idle.
 */

import { ISessionContext } from '@jupyterlab/apputils';
import { CodeCell } from '@jupyterlab/cells';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';
import { PanelLayout } from '@lumino/widgets';

import { CellStatus } from './cellstatus';
import { EVENT_MIME, ICancelStatus, interruptExecution, isOurKernel, requestCancelStatus, stackFromServer } from './messages';
import {
  IExecutionStatus,
  IFrame,
  IStartedEvent,
  NotedEvent,
  Phase,
  countdowns,
  labelDumpedFrames,
  phaseOf,
  statusAtStart,
  viewOf
} from './state';

export interface IWatcherSettings {
  showCountdown: boolean;
  pollInterval: number;
}

/** One execute_request of this notebook that has not been answered yet. */
class Execution {
  constructor(
    readonly msgId: string,
    readonly cell: CodeCell,
    readonly widget: CellStatus
  ) {}
  startedAt: number | null = null;
  count: number | null = null; // its execution count, from execute_input (the cell shows [*] until the reply)
  status: IExecutionStatus | null = null;
  statusAt = 0;
  resident: number | null = null;
  noted: NotedEvent | null = null;
  cancelledBeforeStart = false; // Stop this cell on a queued cell: the kernel will cancel it as it starts
}

/** A summary for the status bar: the notebook's running cell and its state. */
export interface IRunningSummary {
  phase: Phase;
  text: string;
}

export class NotebookWatcher {
  constructor(
    readonly panel: NotebookPanel,
    private settings: IWatcherSettings,
    private readonly onRestartAndRestore: (panel: NotebookPanel) => void
  ) {
    const context = panel.sessionContext;
    context.kernelChanged.connect(this._onKernelChanged, this);
    this._connect(context.session?.kernel ?? null);
    panel.disposed.connect(() => this.dispose());
  }

  /** Fires whenever what the status bar shows may have changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The kernel is ours (its kernel_info lists the feature); with any other kernel this watcher does nothing. */
  get isOurs(): boolean {
    return this._ours;
  }

  get sessionContext(): ISessionContext {
    return this.panel.sessionContext;
  }

  updateSettings(settings: IWatcherSettings): void {
    this.settings = settings;
    this._render();
  }

  /** The running cell (the first started one) for the status bar, null while none runs. */
  summary(): IRunningSummary | null {
    const running = [...this._executions.values()].find(e => e.startedAt !== null);
    if (!running || running.startedAt === null) {
      return null;
    }
    const view = viewOf(this._phase(running));
    const elapsed = (Date.now() - running.startedAt) / 1000;
    return { phase: view.phase, text: `${view.text}, ${Math.floor(elapsed)} s` };
  }

  /** What the durations of past runs say about a cell, for "checkpoint before risky cells". */
  history(cellId: string): { longest: number; interrupted: boolean } | undefined {
    return this._history.get(cellId);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._connect(null);
    Signal.clearData(this);
  }

  // -- the kernel's messages --

  private _onKernelChanged(_: ISessionContext, change: { newValue: Kernel.IKernelConnection | null }): void {
    this._connect(change.newValue);
  }

  private _connect(kernel: Kernel.IKernelConnection | null): void {
    if (this._kernel) {
      this._kernel.anyMessage.disconnect(this._onAnyMessage, this);
      this._kernel.iopubMessage.disconnect(this._onIOPub, this);
      this._kernel.statusChanged.disconnect(this._onStatus, this);
    }
    this._endAll();
    this._kernel = kernel;
    this._ours = false;
    this._known = false;
    this._early.clear();
    if (!kernel) {
      return;
    }
    kernel.anyMessage.connect(this._onAnyMessage, this);
    kernel.iopubMessage.connect(this._onIOPub, this);
    kernel.statusChanged.connect(this._onStatus, this);
    void this._learn(kernel);
  }

  private async _learn(kernel: Kernel.IKernelConnection): Promise<void> {
    this._known = false;
    try {
      const ours = await isOurKernel(kernel);
      if (kernel === this._kernel) {
        this._ours = ours;
        this._known = true;
        this._adoptEarly(ours);
        const info: any = await kernel.info;
        this._grace = Number(info?.cancelkernel?.interrupt_grace ?? 1) || 1;
        this._changed.emit();
      }
    } catch {
      // No kernel_info (the kernel died while starting): not ours until it answers.
    }
  }

  private _onStatus(kernel: Kernel.IKernelConnection, status: Kernel.Status): void {
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      this._endAll(); // a restarted kernel runs nothing of what was queued
      if (status !== 'dead') {
        void this._learn(kernel);
      }
    }
  }

  private _onAnyMessage(_: Kernel.IKernelConnection, args: Kernel.IAnyMessageArgs): void {
    if (this._known && !this._ours) {
      return;
    }
    const msg = args.msg;
    const type = msg.header.msg_type;
    if (args.direction === 'send' && type === 'execute_request') {
      const cellId = (msg.metadata as any)?.cellId as string | undefined;
      const cell = this.panel.content.widgets.find(c => c.model.id === cellId);
      if (cell instanceof CodeCell) {
        if (this._known) {
          this._track(msg.header.msg_id, cell);
        } else {
          this._early.set(msg.header.msg_id, { cell, startedAt: null, count: null }); // shown once the kernel is known to be ours
        }
      }
    } else if (args.direction === 'recv' && type === 'execute_reply') {
      const parent = (msg.parent_header as KernelMessage.IHeader).msg_id;
      this._early.delete(parent);
      this._end(parent, (msg.content as any)?.status !== 'ok' && (msg.content as any)?.ename === 'KeyboardInterrupt');
    }
  }

  /** Requests sent before kernel_info said whose kernel this is: tracked now if it is ours, forgotten if not. */
  private _adoptEarly(ours: boolean): void {
    const early = [...this._early.entries()];
    this._early.clear();
    if (!ours) {
      return;
    }
    for (const [msgId, seen] of early) {
      this._track(msgId, seen.cell);
      const execution = this._executions.get(msgId);
      if (execution && seen.startedAt !== null) {
        execution.startedAt = seen.startedAt;
        execution.count = seen.count;
        this._pollSoon(0);
      }
    }
    this._render();
  }

  private _onIOPub(_: Kernel.IKernelConnection, msg: KernelMessage.IIOPubMessage): void {
    const parent = (msg.parent_header as KernelMessage.IHeader)?.msg_id;
    const early = parent ? this._early.get(parent) : undefined;
    if (early && msg.header.msg_type === 'execute_input' && early.startedAt === null) {
      early.startedAt = Date.now();
      early.count = Number((msg.content as any)?.execution_count) || null;
    }
    const execution = parent ? this._executions.get(parent) : undefined;
    if (!execution) {
      return;
    }
    const type = msg.header.msg_type;
    if (type === 'execute_input' && execution.startedAt === null) {
      execution.startedAt = Date.now();
      execution.count = Number((msg.content as any)?.execution_count) || null;
      this._render();
      this._pollSoon(0);
    } else if (type === 'display_data') {
      const event = (msg.content as any)?.transient?.[EVENT_MIME];
      if (event && typeof event.event === 'string') {
        execution.noted = event.event as NotedEvent;
        this._render();
      }
    } else if (type === 'update_display_data') {
      const event = (msg.content as any)?.transient?.[EVENT_MIME];
      if (event?.event === 'started' && execution.status === null) {
        // Until a status answers (it may never, if the GIL is held), the budgets count down from here.
        const firstLine = execution.cell.model.sharedModel.getSource().split('\n')[0] ?? '';
        execution.status = statusAtStart(event as IStartedEvent, firstLine);
        execution.statusAt = Date.now();
        this._render();
      }
    }
  }

  // -- executions --

  private _track(msgId: string, cell: CodeCell): void {
    for (const other of this._executions.values()) {
      if (other.cell === cell) {
        this._end(other.msgId, false); // re-run before its reply: the newer request is the cell's
      }
    }
    const widget = new CellStatus({
      stop: () => this._stop(msgId),
      where: () => void this._where(msgId),
      restartAndRestore: () => this.onRestartAndRestore(this.panel),
      jumpTo: frame => this._jumpTo(frame)
    });
    const execution = new Execution(msgId, cell, widget);
    this._executions.set(msgId, execution);
    const layout = cell.layout as PanelLayout;
    // Below the input, above the outputs: inputWrapper is the cell's second widget (after the header).
    layout.insertWidget(Math.min(2, layout.widgets.length), widget);
    this._render();
    this._startTicking();
  }

  private _end(msgId: string, interrupted: boolean): void {
    const execution = this._executions.get(msgId);
    if (!execution) {
      return;
    }
    this._executions.delete(msgId);
    if (execution.startedAt !== null) {
      const took = (Date.now() - execution.startedAt) / 1000;
      const before = this._history.get(execution.cell.model.id);
      this._history.set(execution.cell.model.id, {
        longest: Math.max(took, before?.longest ?? 0),
        interrupted: interrupted || (before?.interrupted ?? false)
      });
    }
    execution.widget.dispose();
    if (this._executions.size === 0) {
      this._stopTicking();
    }
    this._changed.emit();
  }

  private _endAll(): void {
    for (const msgId of [...this._executions.keys()]) {
      this._end(msgId, false);
    }
    this._early.clear();
    this._outstanding?.dispose(); // a request to a kernel that is gone is never answered
    this._outstanding = null;
    this._serverStack = null;
    this._answering = true;
  }

  private _phase(execution: Execution): Phase {
    return phaseOf(execution.startedAt !== null, execution.status, this._answering, execution.noted, execution.cancelledBeforeStart);
  }

  // -- polling, only while a cell of this notebook runs --

  private _pollSoon(delay: number): void {
    if (this._pollTimer !== null || this._disposed) {
      return;
    }
    this._pollTimer = window.setTimeout(() => {
      this._pollTimer = null;
      this._poll();
    }, delay);
  }

  private _poll(): void {
    const kernel = this._kernel;
    const running = [...this._executions.values()].some(e => e.startedAt !== null);
    if (!kernel || !running || !this._ours) {
      return; // idle: nothing is sent; the next execute_input starts polling again
    }
    if (this._outstanding !== null) {
      // The last request is unanswered: past the grace period only a held GIL keeps control silent.
      if (this._answering && Date.now() - this._outstandingSince > this._grace * 1000) {
        this._answering = false;
        this._render();
        void this._fetchServerStack();
      }
      if (this._answering) {
        this._pollSoon(this._untilSilent());
      }
      return; // not answering: its reply (_onCancelStatus) starts polling again, a restart ends the request
    }
    this._outstandingSince = Date.now();
    this._outstanding = requestCancelStatus(kernel, status => this._onCancelStatus(status));
    this._pollSoon(this._untilSilent());
    this._nextPollAt = Date.now() + this.settings.pollInterval * 1000;
  }

  /** Milliseconds until the outstanding request has gone unanswered for the grace period: when "not answering" is said. */
  private _untilSilent(): number {
    return Math.max(0, this._outstandingSince + this._grace * 1000 - Date.now()) + 20;
  }

  private _onCancelStatus(status: ICancelStatus): void {
    this._outstanding = null;
    this._answering = true;
    this._serverStack = null;
    const now = Date.now();
    for (const entry of status.executions ?? []) {
      const execution = this._executions.get(entry.msg_id);
      if (execution) {
        execution.status = entry;
        execution.statusAt = now;
        execution.resident = status.memory?.resident ?? null;
        for (const frame of entry.stack ?? []) {
          this._labels.set(frame.filename, frame.label);
        }
      }
    }
    this._render();
    if (this._pollTimer !== null) {
      window.clearTimeout(this._pollTimer);
      this._pollTimer = null;
    }
    this._pollSoon(Math.max(0, this._nextPollAt - now));
  }

  /** A targeted interrupt; while the kernel does not answer (nothing reads control), the kernel's own interrupt (SIGINT). */
  private _stop(msgId: string): void {
    const kernel = this._kernel;
    if (!kernel) {
      return;
    }
    if (this._answering) {
      interruptExecution(kernel, msgId, reply => {
        const execution = this._executions.get(msgId);
        if (execution && reply.pending) {
          execution.cancelledBeforeStart = true;
          this._render();
        }
      });
    } else {
      void kernel.interrupt(); // our C handler sets the native flag at once; the Python side acts when the call returns
    }
  }

  // -- Where is it? --

  private async _where(msgId: string): Promise<void> {
    const execution = this._executions.get(msgId);
    if (!execution) {
      return;
    }
    if (!this._answering) {
      const stack = this._serverStack ?? (await this._fetchServerStack());
      execution.widget.showStack(
        stack.frames ? this._withSource(labelDumpedFrames(stack.frames, this._labels, this._labelOf(execution))) : null,
        stack.available ? 'The kernel does not answer; its stack, from faulthandler (via the server):' : (stack.why ?? 'no stack can be had')
      );
      return;
    }
    const kernel = this._kernel;
    if (!kernel) {
      return;
    }
    requestCancelStatus(kernel, status => {
      this._onCancelStatus(status);
      const entry = (status.executions ?? []).find(e => e.msg_id === msgId);
      execution.widget.showStack(entry?.stack ?? null, entry ? `At ${entry.where ?? 'a line of no cell'} now:` : 'It no longer runs.');
    });
  }

  private _serverStack: { available: boolean; why?: string; frames?: IFrame[] } | null = null;

  private async _fetchServerStack(): Promise<{ available: boolean; why?: string; frames?: IFrame[] }> {
    const id = this._kernel?.id;
    const stack = id ? await stackFromServer(id) : { available: false, why: 'no kernel' };
    this._serverStack = stack;
    return stack;
  }

  /** A dumped frame of a cell has no source line (the server cannot read the kernel's cells): take it from the cell. */
  private _withSource(frames: IFrame[]): IFrame[] {
    return frames.map(frame => {
      const cell = frame.line ? undefined : this._cellOf(frame);
      const line = cell?.model.sharedModel.getSource().split('\n')[frame.lineno - 1]?.trim();
      return line ? { ...frame, line } : frame;
    });
  }

  private _cellOf(frame: IFrame): CodeCell | undefined {
    const match = /^Cell In\[(\d+)\]/.exec(frame.label);
    if (!match) {
      return undefined;
    }
    const count = Number(match[1]);
    const running = [...this._executions.values()].find(e => e.count === count);
    const found = running?.cell ?? this.panel.content.widgets.find(c => c instanceof CodeCell && c.model.executionCount === count);
    return found as CodeCell | undefined;
  }

  private _labelOf(execution: Execution): string | null {
    const count = execution.count ?? execution.cell.model.executionCount;
    return count ? `Cell In[${count}]` : null;
  }

  private _jumpTo(frame: IFrame): void {
    const cells = this.panel.content.widgets;
    const cell = this._cellOf(frame);
    if (!cell) {
      return;
    }
    const index = cells.indexOf(cell);
    this.panel.content.activeCellIndex = index;
    const editor = cell.editor;
    if (editor) {
      editor.setCursorPosition({ line: Math.max(0, frame.lineno - 1), column: 0 });
      editor.focus();
    }
    cell.node.scrollIntoView({ block: 'center' });
  }

  // -- the clock on screen: once a second, locally, only while this notebook has cells of ours --

  private _startTicking(): void {
    if (this._tick === null) {
      this._tick = window.setInterval(() => this._render(), 1000);
    }
  }

  private _stopTicking(): void {
    if (this._tick !== null) {
      window.clearInterval(this._tick);
      this._tick = null;
    }
  }

  private _render(): void {
    const now = Date.now();
    for (const execution of this._executions.values()) {
      const view = viewOf(this._phase(execution));
      const elapsed = execution.startedAt === null ? null : (now - execution.startedAt) / 1000;
      const status = execution.status;
      const budgets = status ? countdowns(status, (now - execution.statusAt) / 1000, execution.resident) : [];
      execution.widget.say(view, elapsed, budgets, this.settings.showCountdown);
    }
    this._changed.emit();
  }

  private _kernel: Kernel.IKernelConnection | null = null;
  private _ours = false;
  private _known = false; // kernel_info has said whether the kernel is ours
  private readonly _early = new Map<string, { cell: CodeCell; startedAt: number | null; count: number | null }>();
  private _grace = 1;
  private _answering = true;
  private _outstanding: { dispose(): void } | null = null;
  private _outstandingSince = 0;
  private _nextPollAt = 0;
  private _pollTimer: number | null = null;
  private _tick: number | null = null;
  private _disposed = false;
  private readonly _executions = new Map<string, Execution>();
  private readonly _history = new Map<string, { longest: number; interrupted: boolean }>();
  private readonly _labels = new Map<string, string>();
  private readonly _changed = new Signal<this, void>(this);
}
