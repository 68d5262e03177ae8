// Builds computer-selection requests from the agent as the server last returned it.

import type { Agent, ComputerSelection, ComputerType } from './api';

/**
 * The request for choosing another computer type. The checkbox value is sent as the server
 * last reported it; whether it survives the switch is the server's rule (SPEC §1.6), and
 * the panel shows the agent the server answers with.
 */
export function chooseComputer(agent: Agent, computer: ComputerType): ComputerSelection {
  return { computer, allowHostEnvironment: agent.allowHostEnvironment };
}

/** The request for ticking or clearing "Allow host environment"; the type stays. */
export function allowHost(agent: Agent, allow: boolean): ComputerSelection {
  return { computer: agent.computer, allowHostEnvironment: allow };
}
