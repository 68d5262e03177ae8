// Display names for computer types. Which types exist and what "allow host environment"
// means is the server's business; the UI only labels and shows the options.

import type { ComputerType } from './api';

/** One entry of the computer-type selector. */
export interface ComputerOption {
  value: ComputerType;
  label: string;
  hint: string;
}

/** The selector's entries, in display order. */
export const computerOptions: readonly ComputerOption[] = [
  { value: 'vm', label: 'Local VM', hint: 'An isolated Linux desktop on this machine.' },
  { value: 'cloud', label: 'Cloud', hint: 'A desktop in the cloud.' },
  { value: 'host', label: 'Host', hint: "The execution node's own computer." },
  { value: 'browser', label: 'Browser only', hint: 'A browser without a desktop.' },
  { value: 'auto', label: 'Auto', hint: 'Let Cubicle choose per task.' },
  { value: 'none', label: 'None', hint: 'No computer: chat only.' },
];

/** The label for a computer type; unknown values from a newer server show as they are. */
export function computerLabel(value: string): string {
  return computerOptions.find((o) => o.value === value)?.label ?? value;
}

/**
 * Whether the "Allow host environment" checkbox is offered for a type (SPEC §1.6: only
 * next to a VM). This is only about showing the control; the server clears the flag for
 * every other type, and the UI shows what the server returns.
 */
export function offersHostEnvironment(value: string): boolean {
  return value === 'vm' || value === 'cloud';
}
