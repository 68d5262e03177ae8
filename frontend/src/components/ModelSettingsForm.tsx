// The one model-settings form: {provider, base URL, model, API key (write-only: the server only
// says whether one is saved), allow private addresses} with a provider picker, the endpoint's
// model list and a Test button. Two places use it:
//
//   - scope "app": Settings → Model (admin only, SPEC §2.2), also inside the first-run panel
//     (embedded): the endpoint agents use by default;
//   - scope "agent": the Model section of an agent's computer panel: the agent's own model.
//     Empty fields inherit the app's model; the agent's API key goes with its own base URL.
//
// The scope picks the routes, the texts and the element ids (model-… or agent-model-…, which
// the browser tests use); the state and its handling are the same.

import { useEffect, useState } from 'preact/hooks';
import {
  ApiError,
  type AgentModel,
  type Client,
  type ModelList,
  type ModelSettings,
  type ModelTestResult,
  type ModelUpdate,
  type Provider,
} from '../api';
import { agentModelUpdate, effectiveText, useAppDefault } from '../agentmodel';
import { messageFor } from '../errors';
import { Forbidden } from '../settings/Forbidden';

export type ModelSettingsFormProps =
  | {
      scope: 'app';
      client: Client;
      /** Called after a save or a test (the first-run panel reads its steps again). */
      onChanged?: () => void;
      /** Without its own heading (inside the first-run panel's step). */
      embedded?: boolean;
    }
  | { scope: 'agent'; client: Client; agentId: string };

/** The texts and classes that differ between the two scopes. */
const looks = {
  app: {
    prefix: 'model',
    formClass: 'card form-grid',
    actionsClass: 'form-actions',
    save: 'btn primary',
    test: 'btn',
    list: 'btn ghost',
    providerLabel: 'Provider',
    providers: {
      'openai-compatible': 'OpenAI-compatible chat completions',
      anthropic: 'Anthropic Messages (Claude, native computer tool)',
      'openai-responses': 'OpenAI Responses (computer-use-preview)',
    },
    keyLabel: 'API key',
  },
  agent: {
    prefix: 'agent-model',
    formClass: undefined,
    actionsClass: 'button-row',
    save: 'btn primary small',
    test: 'btn ghost small',
    list: 'btn ghost small',
    providerLabel: 'Provider (with its own base URL)',
    providers: {
      'openai-compatible': 'OpenAI-compatible',
      anthropic: 'Anthropic',
      'openai-responses': 'OpenAI Responses',
    },
    keyLabel: "API key (with this agent's own base URL)",
  },
} as const;

/** Settings → Model or an agent's Model section (see the file's comment). */
export function ModelSettingsForm(props: ModelSettingsFormProps) {
  const { client, scope } = props;
  const agentId = props.scope === 'agent' ? props.agentId : '';
  const embedded = props.scope === 'app' && props.embedded === true;
  const onChanged = props.scope === 'app' ? props.onChanged : undefined;
  const look = looks[scope];
  const id = (s: string) => `${look.prefix}-${s}`;

  const [view, setView] = useState<ModelSettings | AgentModel | null>(null);
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
  const [offered, setOffered] = useState<ModelList | null>(null);

  const show = (v: ModelSettings | AgentModel) => {
    setView(v);
    setBaseUrl(v.baseUrl);
    setModel(v.model);
    setApiKey('');
    setClearKey(false);
    if (scope === 'app') {
      setAllowPrivate(v.allowPrivate === true);
      setProvider((v as ModelSettings).provider ?? 'openai-compatible');
    } else {
      setProvider((v.provider as Provider) || 'openai-compatible');
    }
  };

  const runTest = async () => {
    setBusy(true);
    setTest(null);
    setError('');
    try {
      setTest(await (scope === 'app' ? client.testModel() : client.testAgentModel(agentId)));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
      onChanged?.();
    }
  };

  // The models of the endpoint in use (the saved app endpoint, or the agent's own or the
  // app's), offered in the Model field.
  const listModels = async () => {
    setBusy(true);
    setError('');
    try {
      setOffered(await (scope === 'app' ? client.listModels() : client.listAgentModels(agentId)));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  useEffect(() => {
    if (scope === 'app') {
      client.getModel().then(show, (err) => {
        if (err instanceof ApiError && err.status === 403) setForbidden(true);
        else setLoadError(messageFor(err));
      });
      return;
    }
    setOffered(null);
    setView(null);
    setError('');
    setSaved(false);
    client.getAgentModel(agentId).then(show, (err) => setError(messageFor(err)));
  }, [client, scope, agentId]);

  if (forbidden) return <Forbidden />;

  const save = async (u: ModelUpdate) => {
    if (scope === 'agent' && busy) return;
    setBusy(true);
    setError('');
    setSaved(false);
    try {
      show(await (scope === 'app' ? client.setModel(u) : client.setAgentModel(agentId, u)));
      setSaved(true);
      onChanged?.();
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  const submit = (e: Event) => {
    e.preventDefault();
    let u: ModelUpdate;
    if (scope === 'app') {
      u = { baseUrl: baseUrl.trim(), model: model.trim(), allowPrivate, provider };
      if (apiKey !== '') u.apiKey = apiKey;
      else if (clearKey) u.apiKey = '';
    } else {
      u = agentModelUpdate({ baseUrl, model, apiKey, clearKey });
      if (u.baseUrl !== '') u.provider = provider; // a provider goes with its own base URL
    }
    void save(u);
  };

  const off = busy || view === null;
  const agentView = scope === 'agent' ? (view as AgentModel | null) : null;
  const appView = scope === 'app' ? (view as ModelSettings | null) : null;
  const effective = agentView?.effective;
  // What the Test and List buttons need: a configured model, an endpoint to list.
  const configured = scope === 'app' ? appView?.configured : effective?.configured;
  const listUrl = scope === 'app' ? appView?.baseUrl : effective?.baseUrl;
  const overrides = agentView !== null && (agentView.baseUrl !== '' || agentView.model !== '' || agentView.hasApiKey);

  const head =
    scope === 'app' ? (
      <>
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
        {appView && !embedded && (
          <p class={`summary ${appView.configured ? 'ok' : 'warn'}`} id="model-summary">
            {appView.configured
              ? `Configured: ${appView.model} at ${appView.baseUrl}${appView.source === 'environment' ? ' (from the environment)' : ''}.`
              : 'No model configured — chats run in operator mode.'}
          </p>
        )}
      </>
    ) : (
      <>
        <h3 id="agent-model-title">Model</h3>
        {agentView && effective && (
          <p
            class={`muted small ${effective.problem ? 'form-error' : ''}`}
            id="agent-model-effective"
            data-source={effective.source}
            aria-live="polite"
          >
            {effectiveText(agentView)}
          </p>
        )}
      </>
    );

  const clearKeyBox = view?.hasApiKey && (
    <label class="checkbox">
      <input
        id={id('clear-key')}
        type="checkbox"
        checked={clearKey}
        disabled={busy || apiKey !== ''}
        onChange={(e) => setClearKey(e.currentTarget.checked)}
      />
      <span class="checkbox-label">Remove the saved key</span>
    </label>
  );

  const form = (
    <form class={look.formClass} id={id('form')} onSubmit={submit}>
      <label class="field">
        <span>{look.providerLabel}</span>
        <select id={id('provider')} value={provider} onChange={(e) => setProvider(e.currentTarget.value as Provider)} disabled={off}>
          <option value="openai-compatible">{look.providers['openai-compatible']}</option>
          <option value="anthropic">{look.providers.anthropic}</option>
          <option value="openai-responses">{look.providers['openai-responses']}</option>
        </select>
      </label>
      <label class="field">
        <span>Base URL</span>
        <input
          id={id('base-url')}
          type="url"
          placeholder={
            scope === 'app'
              ? provider === 'anthropic'
                ? 'https://api.anthropic.com'
                : 'https://api.openai.com/v1'
              : agentView?.inherits.baseUrl || 'https://api.openai.com/v1'
          }
          value={baseUrl}
          onInput={(e) => setBaseUrl(e.currentTarget.value)}
          disabled={off}
        />
      </label>
      <label class="field">
        <span>Model</span>
        <input
          id={id('name')}
          type="text"
          list={id('choices')}
          placeholder={
            scope === 'app'
              ? provider === 'anthropic'
                ? 'claude-sonnet-4-5'
                : provider === 'openai-responses'
                  ? 'computer-use-preview'
                  : 'gpt-4o'
              : agentView?.inherits.model || 'gpt-4o'
          }
          value={model}
          onInput={(e) => setModel(e.currentTarget.value)}
          disabled={off}
        />
      </label>
      <label class="field">
        <span>{look.keyLabel}</span>
        <input
          id={id('api-key')}
          type="password"
          autocomplete="off"
          placeholder={
            scope === 'app'
              ? view?.hasApiKey
                ? 'A key is saved — type to replace it'
                : 'No key saved'
              : view?.hasApiKey
                ? 'saved'
                : baseUrl.trim() === ''
                  ? "the app's key"
                  : 'none'
          }
          value={apiKey}
          onInput={(e) => setApiKey(e.currentTarget.value)}
          disabled={off}
        />
        {scope === 'app' && (
          <span class="muted small" id="model-key-state">
            {view?.hasApiKey ? 'An API key is saved. It is never shown again.' : 'No API key saved.'}
          </span>
        )}
      </label>
      {scope === 'app' && (
        <>
          <label class="checkbox">
            <input
              id="model-allow-private"
              type="checkbox"
              checked={allowPrivate}
              disabled={off}
              onChange={(e) => setAllowPrivate(e.currentTarget.checked)}
            />
            <span class="checkbox-label">
              The endpoint is on this machine or the local network (loopback or private addresses are refused otherwise)
            </span>
          </label>
          <p class="muted small">A saved key is only ever sent to the base URL it was saved with: a new base URL needs its key again.</p>
        </>
      )}
      {clearKeyBox}
      {scope === 'agent' && <p class="muted small">Empty fields use the app default from Settings → Model.</p>}
      <div class={look.actionsClass}>
        <button class={look.save} type="submit" id={id('save')} disabled={off}>
          {busy ? 'Saving…' : 'Save'}
        </button>
        {scope === 'agent' && (
          <button class="btn ghost small" type="button" id="agent-model-default" disabled={off || !overrides} onClick={() => void save(useAppDefault)}>
            Use app default
          </button>
        )}
        <button class={look.test} type="button" id={id('test')} onClick={() => void runTest()} disabled={off || !configured}>
          Test
        </button>
        <button class={look.list} type="button" id={id('list')} onClick={() => void listModels()} disabled={off || !listUrl}>
          List models
        </button>
        {saved && (
          <span class="muted small" id={id('saved')} role="status">
            Saved.
          </span>
        )}
      </div>
      <datalist id={id('choices')}>
        {(offered?.models ?? []).map((m) => (
          <option key={m} value={m} />
        ))}
      </datalist>
      {offered && (
        <p class={`muted small ${offered.problem ? 'form-error' : ''}`} id={id('list-result')} role="status">
          {offered.problem
            ? `No model list (${offered.code}): ${offered.problem}`
            : `${offered.models.length} model${offered.models.length === 1 ? '' : 's'} offered${scope === 'app' ? ` at ${offered.baseUrl}` : ''}: pick one in the Model field.`}
        </p>
      )}
      {test &&
        (scope === 'app' ? (
          <p class={`summary ${test.ok ? 'ok' : 'warn'}`} id="model-test-result" role="status">
            {test.ok
              ? `The model answered (${test.model} at ${test.baseUrl}, ${test.seconds.toFixed(1)} s).`
              : `Test failed (${test.code}): ${test.problem}`}
          </p>
        ) : (
          <p class={`muted small ${test.ok ? '' : 'form-error'}`} id="agent-model-test-result" role="status">
            {test.ok ? `The model answered (${test.model}, ${test.seconds.toFixed(1)} s).` : `Test failed (${test.code}): ${test.problem}`}
          </p>
        ))}
      {error !== '' && (
        <p class="form-error" role="alert" id={id('error')}>
          {error}
        </p>
      )}
    </form>
  );

  return scope === 'app' ? (
    <section
      class="settings-section"
      id="model-settings"
      aria-labelledby={embedded ? undefined : 'model-title'}
      aria-label={embedded ? 'Model' : undefined}
    >
      {head}
      {form}
    </section>
  ) : (
    <section class="panel-section agent-model" id="agent-model" aria-labelledby="agent-model-title">
      {head}
      {form}
    </section>
  );
}
