import { describe, expect, it } from 'vitest';
import type { AgentModel } from './api';
import { agentModelUpdate, effectiveText, useAppDefault } from './agentmodel';

const view = (effective: AgentModel['effective']): AgentModel => ({
  baseUrl: '',
  model: '',
  hasApiKey: false,
  inherits: { baseUrl: 'https://app/v1', model: 'app-m', hasApiKey: true, configured: true, source: 'settings' },
  effective,
});

describe('agent model requests', () => {
  it('trims the fields and keeps the saved key when none is typed', () => {
    expect(agentModelUpdate({ baseUrl: ' https://b/v1 ', model: ' m ', apiKey: '', clearKey: false })).toEqual({
      baseUrl: 'https://b/v1',
      model: 'm',
    });
  });
  it('sends a typed key as is and prefers it over clearing', () => {
    expect(agentModelUpdate({ baseUrl: 'u', model: 'm', apiKey: ' k ', clearKey: true })).toEqual({ baseUrl: 'u', model: 'm', apiKey: ' k ' });
  });
  it('clears the key with an empty string', () => {
    expect(agentModelUpdate({ baseUrl: 'u', model: 'm', apiKey: '', clearKey: true })).toEqual({ baseUrl: 'u', model: 'm', apiKey: '' });
  });
  it('"Use app default" empties everything', () => {
    expect(useAppDefault).toEqual({ baseUrl: '', model: '', apiKey: '' });
  });
});

describe('effective model text', () => {
  it('names the model, the endpoint and the source', () => {
    expect(effectiveText(view({ baseUrl: 'https://b/v1', model: 'm-b', source: 'agent', configured: true }))).toBe(
      "Uses m-b at https://b/v1 — this agent's own setting.",
    );
    expect(effectiveText(view({ baseUrl: 'https://app/v1', model: 'app-m', source: 'settings', configured: true }))).toBe(
      'Uses app-m at https://app/v1 — the app default (Settings → Model).',
    );
  });
  it('says operator mode without a model and shows the server\'s problem as is', () => {
    expect(effectiveText(view({ baseUrl: '', model: '', source: 'none', configured: false }))).toMatch(/operator mode/);
    expect(effectiveText(view({ baseUrl: '', model: 'x', source: 'agent', configured: false, problem: 'no base URL: fix it' }))).toBe(
      'no base URL: fix it',
    );
  });
});
