// Settings → Model (admin only, SPEC §2.2): the OpenAI-compatible endpoint agents use. The
// API key is write-only: the server only says whether one is saved.

import { useEffect, useState } from 'preact/hooks';
import { ApiError, type Client, type ModelSettings, type ModelTestResult, type ModelUpdate, type Provider } from '../api';
import { messageFor } from '../errors';
import { Forbidden } from './Forbidden';

interface ModelSettingsProps {
  client: Client;
  /** Called after a save or a test (the first-run panel reads its steps again). */
  onChanged?: () => void;
  /** Without its own heading (inside the first-run panel's step). */
  embedded?: boolean;
}

/** The Model section. */
export function ModelSettingsSection({ client, onChanged, embedded = false }: ModelSettingsProps) {
  const [view, setView] = useState<ModelSettings | null>(null);
  const [baseUrl, setBaseUrl] = useState('');
  const [model, setModel] = useState('');
  const [apiKey, setApiKey] = useState('');
  const [clearKey, setClearKey] = useState(false);
  const [allowPrivate, setAllowPrivate] = useState(false);
  const [error, setError] = useState('');
  const [loadError, setLoadError] = useState('');
  const [forbidden, setForbidden] = useState(false);
  const [busy, setBusy] = useState(false);
  const [saved, setSaved] = useState(false);
  const [provider, setProvider] = useState<Provider>('openai-compatible');
  const [test, setTest] = useState<ModelTestResult | null>(null);

  const show = (v: ModelSettings) => {
    setView(v);
    setBaseUrl(v.baseUrl);
    setModel(v.model);
    setApiKey('');
    setClearKey(false);
    setAllowPrivate(v.allowPrivate === true);
    setProvider(v.provider ?? 'openai-compatible');
  };

  const runTest = async () => {
    setBusy(true);
    setTest(null);
    setError('');
    try {
      setTest(await client.testModel());
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
      onChanged?.();
    }
  };

  useEffect(() => {
    client.getModel().then(show, (err) => {
      if (err instanceof ApiError && err.status === 403) setForbidden(true);
      else setLoadError(messageFor(err));
    });
  }, [client]);

  if (forbidden) return <Forbidden />;

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    setSaved(false);
    const u: ModelUpdate = { baseUrl: baseUrl.trim(), model: model.trim(), allowPrivate, provider };
    if (apiKey !== '') u.apiKey = apiKey;
    else if (clearKey) u.apiKey = '';
    try {
      show(await client.setModel(u));
      setSaved(true);
      onChanged?.();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section class="settings-section" id="model-settings" aria-labelledby={embedded ? undefined : 'model-title'} aria-label={embedded ? 'Model' : undefined}>
      {!embedded && <h2 id="model-title">Model</h2>}
      {!embedded && (
        <p class="muted">
          Any OpenAI-compatible chat-completions endpoint (streaming, tool calls, image input). Without a model, chats run in
          operator mode: slash commands such as <code>/shell ls</code> or <code>/screenshot</code>.
        </p>
      )}
      {loadError !== '' && (
        <p class="form-error" role="alert">
          Could not load the model settings: {loadError}
        </p>
      )}
      {view && !embedded && (
        <p class={`summary ${view.configured ? 'ok' : 'warn'}`} id="model-summary">
          {view.configured
            ? `Configured: ${view.model} at ${view.baseUrl}${view.source === 'environment' ? ' (from the environment)' : ''}.`
            : 'No model configured — chats run in operator mode.'}
        </p>
      )}
      <form class="card form-grid" id="model-form" onSubmit={submit}>
        <label class="field">
          <span>Provider</span>
          <select
            id="model-provider"
            value={provider}
            onChange={(e) => setProvider(e.currentTarget.value as Provider)}
            disabled={busy || view === null}
          >
            <option value="openai-compatible">OpenAI-compatible chat completions</option>
            <option value="anthropic">Anthropic Messages (Claude, native computer tool)</option>
            <option value="openai-responses">OpenAI Responses (computer-use-preview)</option>
          </select>
        </label>
        <label class="field">
          <span>Base URL</span>
          <input
            id="model-base-url"
            type="url"
            placeholder={provider === 'anthropic' ? 'https://api.anthropic.com' : 'https://api.openai.com/v1'}
            value={baseUrl}
            onInput={(e) => setBaseUrl(e.currentTarget.value)}
            disabled={busy || view === null}
          />
        </label>
        <label class="field">
          <span>Model</span>
          <input
            id="model-name"
            type="text"
            placeholder={provider === 'anthropic' ? 'claude-sonnet-4-5' : provider === 'openai-responses' ? 'computer-use-preview' : 'gpt-4o'}
            value={model}
            onInput={(e) => setModel(e.currentTarget.value)}
            disabled={busy || view === null}
          />
        </label>
        <label class="field">
          <span>API key</span>
          <input
            id="model-api-key"
            type="password"
            autocomplete="off"
            placeholder={view?.hasApiKey ? 'A key is saved — type to replace it' : 'No key saved'}
            value={apiKey}
            onInput={(e) => setApiKey(e.currentTarget.value)}
            disabled={busy || view === null}
          />
          <span class="muted small" id="model-key-state">
            {view?.hasApiKey ? 'An API key is saved. It is never shown again.' : 'No API key saved.'}
          </span>
        </label>
        <label class="checkbox">
          <input
            id="model-allow-private"
            type="checkbox"
            checked={allowPrivate}
            disabled={busy || view === null}
            onChange={(e) => setAllowPrivate(e.currentTarget.checked)}
          />
          <span class="checkbox-label">
            The endpoint is on this machine or the local network (loopback or private addresses are refused otherwise)
          </span>
        </label>
        <p class="muted small">A saved key is only ever sent to the base URL it was saved with: a new base URL needs its key again.</p>
        {view?.hasApiKey && (
          <label class="checkbox">
            <input
              id="model-clear-key"
              type="checkbox"
              checked={clearKey}
              disabled={busy || apiKey !== ''}
              onChange={(e) => setClearKey(e.currentTarget.checked)}
            />
            <span class="checkbox-label">Remove the saved key</span>
          </label>
        )}
        <div class="form-actions">
          <button class="btn primary" type="submit" id="model-save" disabled={busy || view === null}>
            {busy ? 'Saving…' : 'Save'}
          </button>
          <button class="btn" type="button" id="model-test" onClick={runTest} disabled={busy || !view?.configured}>
            Test
          </button>
          {saved && (
            <span class="muted small" id="model-saved" role="status">
              Saved.
            </span>
          )}
        </div>
        {test && (
          <p class={`summary ${test.ok ? 'ok' : 'warn'}`} id="model-test-result" role="status">
            {test.ok
              ? `The model answered (${test.model} at ${test.baseUrl}, ${test.seconds.toFixed(1)} s).`
              : `Test failed (${test.code}): ${test.problem}`}
          </p>
        )}
        {error !== '' && (
          <p class="form-error" role="alert" id="model-error">
            {error}
          </p>
        )}
      </form>
    </section>
  );
}
