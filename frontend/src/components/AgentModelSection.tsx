// The Model section of the computer panel: the agent's own chat model. Empty fields inherit
// the app's model (Settings → Model); the agent's API key goes with its own base URL and is
// write-only (the server only says whether one is saved).

import { useEffect, useState } from 'preact/hooks';
import type { AgentModel, Client, ModelList, ModelTestResult, ModelUpdate, Provider } from '../api';
import { agentModelUpdate, effectiveText, useAppDefault } from '../agentmodel';
import { messageFor } from '../errors';

interface AgentModelSectionProps {
  client: Client;
  agentId: string;
}

/** The agent's model: effective model and source, base URL / model / API key, "Use app default". */
export function AgentModelSection({ client, agentId }: AgentModelSectionProps) {
  const [view, setView] = useState<AgentModel | null>(null);
  const [baseUrl, setBaseUrl] = useState('');
  const [model, setModel] = useState('');
  const [apiKey, setApiKey] = useState('');
  const [clearKey, setClearKey] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const [saved, setSaved] = useState(false);
  const [provider, setProvider] = useState<Provider>('openai-compatible');
  const [test, setTest] = useState<ModelTestResult | null>(null);
  const [offered, setOffered] = useState<ModelList | null>(null);

  const show = (v: AgentModel) => {
    setView(v);
    setBaseUrl(v.baseUrl);
    setModel(v.model);
    setApiKey('');
    setClearKey(false);
    setProvider((v.provider as Provider) || 'openai-compatible');
  };

  const runTest = async () => {
    setBusy(true);
    setTest(null);
    setError('');
    try {
      setTest(await client.testAgentModel(agentId));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  // The models of the endpoint the agent uses (its own or the app's), offered in the Model field.
  const listModels = async () => {
    setBusy(true);
    setError('');
    try {
      setOffered(await client.listAgentModels(agentId));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  useEffect(() => {
    setOffered(null);
    setView(null);
    setError('');
    setSaved(false);
    client.getAgentModel(agentId).then(show, (err) => setError(messageFor(err)));
  }, [client, agentId]);

  const save = async (u: ModelUpdate) => {
    if (busy) return;
    setBusy(true);
    setError('');
    setSaved(false);
    try {
      show(await client.setAgentModel(agentId, u));
      setSaved(true);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  const submit = (e: Event) => {
    e.preventDefault();
    const u = agentModelUpdate({ baseUrl, model, apiKey, clearKey });
    if (u.baseUrl !== '') u.provider = provider; // a provider goes with its own base URL
    void save(u);
  };

  const off = busy || view === null;
  const overrides = view !== null && (view.baseUrl !== '' || view.model !== '' || view.hasApiKey);
  const effective = view?.effective;
  return (
    <section class="panel-section agent-model" id="agent-model" aria-labelledby="agent-model-title">
      <h3 id="agent-model-title">Model</h3>
      {view && effective && (
        <p
          class={`muted small ${effective.problem ? 'form-error' : ''}`}
          id="agent-model-effective"
          data-source={effective.source}
          aria-live="polite"
        >
          {effectiveText(view)}
        </p>
      )}
      <form id="agent-model-form" onSubmit={submit}>
        <label class="field">
          <span>Provider (with its own base URL)</span>
          <select id="agent-model-provider" value={provider} disabled={off} onChange={(e) => setProvider(e.currentTarget.value as Provider)}>
            <option value="openai-compatible">OpenAI-compatible</option>
            <option value="anthropic">Anthropic</option>
            <option value="openai-responses">OpenAI Responses</option>
          </select>
        </label>
        <label class="field">
          <span>Base URL</span>
          <input
            id="agent-model-base-url"
            type="url"
            placeholder={view?.inherits.baseUrl || 'https://api.openai.com/v1'}
            value={baseUrl}
            onInput={(e) => setBaseUrl(e.currentTarget.value)}
            disabled={off}
          />
        </label>
        <label class="field">
          <span>Model</span>
          <input
            id="agent-model-name"
            type="text"
            list="agent-model-choices"
            placeholder={view?.inherits.model || 'gpt-4o'}
            value={model}
            onInput={(e) => setModel(e.currentTarget.value)}
            disabled={off}
          />
        </label>
        <label class="field">
          <span>API key (with this agent's own base URL)</span>
          <input
            id="agent-model-api-key"
            type="password"
            autocomplete="off"
            placeholder={view?.hasApiKey ? 'saved' : baseUrl.trim() === '' ? "the app's key" : 'none'}
            value={apiKey}
            onInput={(e) => setApiKey(e.currentTarget.value)}
            disabled={off}
          />
        </label>
        {view?.hasApiKey && (
          <label class="checkbox">
            <input
              id="agent-model-clear-key"
              type="checkbox"
              checked={clearKey}
              disabled={off || apiKey !== ''}
              onChange={(e) => setClearKey(e.currentTarget.checked)}
            />
            <span class="checkbox-label">Remove the saved key</span>
          </label>
        )}
        <p class="muted small">Empty fields use the app default from Settings → Model.</p>
        <div class="button-row">
          <button class="btn primary small" type="submit" id="agent-model-save" disabled={off}>
            {busy ? 'Saving…' : 'Save'}
          </button>
          <button
            class="btn ghost small"
            type="button"
            id="agent-model-default"
            disabled={off || !overrides}
            onClick={() => void save(useAppDefault)}
          >
            Use app default
          </button>
          <button class="btn ghost small" type="button" id="agent-model-test" disabled={off || !effective?.configured} onClick={() => void runTest()}>
            Test
          </button>
          <button class="btn ghost small" type="button" id="agent-model-list" disabled={off || !effective?.baseUrl} onClick={() => void listModels()}>
            List models
          </button>
          {saved && (
            <span class="muted small" id="agent-model-saved" role="status">
              Saved.
            </span>
          )}
        </div>
        <datalist id="agent-model-choices">
          {(offered?.models ?? []).map((m) => (
            <option key={m} value={m} />
          ))}
        </datalist>
        {offered && (
          <p class={`muted small ${offered.problem ? 'form-error' : ''}`} id="agent-model-list-result" role="status">
            {offered.problem
              ? `No model list (${offered.code}): ${offered.problem}`
              : `${offered.models.length} model${offered.models.length === 1 ? '' : 's'} offered: pick one in the Model field.`}
          </p>
        )}
        {test && (
          <p class={`muted small ${test.ok ? '' : 'form-error'}`} id="agent-model-test-result" role="status">
            {test.ok ? `The model answered (${test.model}, ${test.seconds.toFixed(1)} s).` : `Test failed (${test.code}): ${test.problem}`}
          </p>
        )}
        {error !== '' && (
          <p class="form-error" role="alert" id="agent-model-error">
            {error}
          </p>
        )}
      </form>
    </section>
  );
}
