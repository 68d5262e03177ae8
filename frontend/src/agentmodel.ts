// An agent's own model (Model section of the computer panel): the request the form sends and
// the line that says which model the agent uses. The server validates and decides; this only
// shapes the request and the text.

import type { AgentModel, ModelUpdate } from './api';

/** What the form holds. */
export interface AgentModelForm {
  baseUrl: string;
  model: string;
  /** A new key typed in; "" = none typed. */
  apiKey: string;
  /** "Remove the saved key" ticked. */
  clearKey: boolean;
}

/** The form's request: a typed key replaces the saved one, clearKey removes it, otherwise the saved key is kept. */
export function agentModelUpdate(f: AgentModelForm): ModelUpdate {
  const u: ModelUpdate = { baseUrl: f.baseUrl.trim(), model: f.model.trim() };
  if (f.apiKey !== '') u.apiKey = f.apiKey;
  else if (f.clearKey) u.apiKey = '';
  return u;
}

/** The request of "Use app default": no override, no key. */
export const useAppDefault: ModelUpdate = { baseUrl: '', model: '', apiKey: '' };

const sourceText: Record<string, string> = {
  agent: "this agent's own setting",
  settings: 'the app default (Settings → Model)',
  environment: 'the app default (environment variables)',
};

/** One line: which model the agent's turns use, and where that comes from. */
export function effectiveText(v: AgentModel): string {
  const e = v.effective;
  if (e.problem) return e.problem;
  if (!e.configured) return 'No model: chats with this agent run in operator mode.';
  return `Uses ${e.model} at ${e.baseUrl} — ${sourceText[e.source] ?? e.source}.`;
}
