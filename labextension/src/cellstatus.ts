/**
 * The line shown on a cell of our kernel while it is queued or runs: elapsed time, budget
 * countdowns, its state, and the buttons Stop this cell, Where is it? and (when it will not stop)
 * Restart and restore.
 */

import { Widget } from '@lumino/widgets';

import { ICountdown, IFrame, IPhaseView, cellFramesFirst, formatSeconds } from './state';

export interface ICellStatusActions {
  stop(): void;
  where(): void;
  restartAndRestore(): void;
  jumpTo(frame: IFrame): void;
}

export class CellStatus extends Widget {
  constructor(private readonly actions: ICellStatusActions) {
    super();
    this.addClass('ck-CellStatus');
    const node = this.node;
    node.setAttribute('role', 'status');
    this._phase = append(node, 'span', 'ck-CellStatus-phase');
    this._elapsed = append(node, 'span', 'ck-CellStatus-elapsed');
    this._budgets = append(node, 'span', 'ck-CellStatus-budgets');
    button(node, 'Stop this cell', 'ck-CellStatus-stop', () => this.actions.stop());
    this._where = button(node, 'Where is it?', 'ck-CellStatus-where', () => this.actions.where());
    this._restore = button(node, 'Restart and restore', 'ck-CellStatus-restore', () => this.actions.restartAndRestore());
    this._restore.hidden = true;
    this._stack = append(node, 'div', 'ck-CellStatus-stack');
    this._stack.hidden = true;
  }

  /** What the line says now; `elapsed` null while queued. */
  say(view: IPhaseView, elapsed: number | null, budgets: ICountdown[], showCountdown: boolean): void {
    this.node.dataset.phase = view.phase;
    this._phase.textContent = view.text;
    this._elapsed.textContent = elapsed === null ? '' : formatSeconds(elapsed);
    const shown = showCountdown ? budgets : [];
    this._budgets.textContent = shown.map(b => b.text).join(' · ');
    this._budgets.dataset.low = String(shown.some(b => b.left < 0.2));
    const said = [view.label, elapsed === null ? '' : `for ${formatSeconds(elapsed)}`, ...shown.map(b => b.text)];
    this.node.setAttribute('aria-label', `cancelkernel: ${said.filter(Boolean).join(', ')}`);
    this._where.hidden = elapsed === null;
    this._restore.hidden = !(view.phase === 'unresponsive' || view.phase === 'not-answering');
  }

  /** The stack under the line: the cell's own frames first, each a link to its line. */
  showStack(frames: IFrame[] | null, note: string): void {
    const stack = this._stack;
    stack.hidden = false;
    stack.textContent = '';
    append(stack, 'div', 'ck-CellStatus-stackNote').textContent = note;
    for (const frame of cellFramesFirst(frames ?? [])) {
      const text = `${frame.label}, line ${frame.lineno} in ${frame.name}${frame.line ? `: ${frame.line}` : ''}`;
      const item = button(stack, text, 'ck-CellStatus-frame', () => this.actions.jumpTo(frame));
      item.title = `${frame.filename}:${frame.lineno}`;
    }
  }

  private readonly _phase: HTMLElement;
  private readonly _elapsed: HTMLElement;
  private readonly _budgets: HTMLElement;
  private readonly _where: HTMLButtonElement;
  private readonly _restore: HTMLButtonElement;
  private readonly _stack: HTMLElement;
}

function append(parent: HTMLElement, tag: string, className: string): HTMLElement {
  const element = document.createElement(tag);
  element.className = className;
  parent.appendChild(element);
  return element;
}

function button(parent: HTMLElement, text: string, className: string, onClick: () => void): HTMLButtonElement {
  const element = document.createElement('button');
  element.type = 'button';
  element.className = `ck-CellStatus-button ${className}`;
  element.textContent = text;
  element.addEventListener('click', event => {
    event.stopPropagation(); // a click on the line must not select or edit the cell
    onClick();
  });
  parent.appendChild(element);
  return element;
}
